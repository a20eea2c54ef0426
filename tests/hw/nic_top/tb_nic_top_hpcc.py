"""End-to-end cocotb test of hw.nic_top.NicCcTop in CC mode hpcc: INT-echo ACKs from sw.roce in, rates out.

Every QP sends frames (doorbells), then receives RC ACKs built by sw.roce with its forward path's INT hops
echoed in (``int_ack_stim``).  The same frames go through the host stack's receive path (strip, decode,
``QpPacer.int_hops``) into one ``sw.cc.Hpcc`` per QP, with the ACK's PSN + 1 as ``ack_seq`` and the frames the
QP sent so far as ``snd_nxt`` (the NIC counts sequences in packets).  Every rate write the HPCC engine makes to
the scheduler must equal ``RateToIncrement`` of the model's rate after the same ACK, in order, per QP.
"""

from __future__ import annotations

import random
import time

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, ring_doorbell, tb_record
from int_ack_stim import IntPath, ack_frame, host_hops

from hw.csr import ERR_CLAMP, ERR_VALUE, REG_ERR, REG_PARAM0, REG_QP_INIT, REG_QP_RATE, REG_QP_SEL
from hw.nic_top import CC_MODE_DCQCN, CC_MODE_HPCC, COUNTER_ADDR
from hw.sched import RATE_FRAC_BITS
from sw.cc import AckInfo, Hpcc, HpccParams, RateToIncrement
from sw.roce.softnic.qp_pacer import QpPacer

HPCC_FIELDS = ("line_rate_kbps", "min_rate_kbps", "base_rtt_ns", "eta_q16", "max_stage", "rate_ai_kbps")


class TB(BlockTestbench):
    """Clock, reset, RX source, CSR master; a per-clock monitor of TX frames per QP and scheduler rate writes."""

    def __init__(self, dut) -> None:
        super().__init__(dut)
        self.settle_clocks = self.p["n_qps"] + 4  # the memories' clearing pass
        self.names = self.p["param_names"]
        self.qp_bits = self.p["qp_bits"]
        self.conv = RateToIncrement(clk_hz=400_000_000, frac_bits=RATE_FRAC_BITS)
        self.rx = self.axis_source("rx_s_axis_")
        for sig in (dut.csr_we, dut.csr_re, dut.csr_addr, dut.csr_wdata, dut.doorbell__valid):
            sig.value = 0
        dut.rx_m_axis__tready.value = 1
        dut.tx_m_axis__tready.value = 1
        dut.cnp_req__ready.value = 1
        self.tx_frames = [0] * self.p["n_qps"]
        self.rate_writes: list[tuple[int, int]] = []
        self.clocks = 0
        self.strict = False

    async def monitor(self) -> None:
        dut, sched = self.dut, self.dut.sched
        mask = (1 << self.qp_bits) - 1
        while True:
            await RisingEdge(dut.clk)
            self.clocks += 1
            if int(dut.tx_m_axis__tvalid.value) and int(dut.tx_m_axis__tlast.value):
                self.tx_frames[int(dut.tx_m_axis__tuser.value)] += 1
            # Icarus leaves an engine's combinational outputs X until its state first moves (time-0 always @*):
            # no write then; once every QP was initialised an X is a failure
            valid, ready = sched.rate_wr__valid.value, sched.rate_wr__ready.value
            if not (valid.is_resolvable and ready.is_resolvable):
                assert not self.strict, f"rate write strobes X at clock {self.clocks}: {valid} {ready}"
                continue
            if int(valid) and int(ready):
                raw = int(sched.rate_wr__payload.value)
                self.rate_writes.append((raw & mask, (raw >> self.qp_bits) & 0xFFFF_FFFF))

    async def param(self, name: str, value: int | None = None) -> int:
        return await self.csr(REG_PARAM0 + self.names.index(name), value)

    async def program_hpcc(self, params: HpccParams, qlen_unit_bytes: int) -> None:
        """Write every HPCC parameter (the line rate first so no bound clamps the others), let them settle."""
        await self.param("hpcc_line_rate_kbps", params.line_rate_kbps)
        for name in HPCC_FIELDS:
            await self.param(f"hpcc_{name}", getattr(params, name))
        await self.param("hpcc_qlen_unit_bytes", qlen_unit_bytes)
        assert await self.csr(REG_ERR) == 0, "programming a valid HpccParams raised an error flag"
        await ClockCycles(self.dut.clk, self.p["settle_clocks"])

    async def init_qp(self, qp: int) -> None:
        await self.csr(REG_QP_SEL, qp)
        await self.csr(REG_QP_INIT, 1)

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        await ring_doorbell(self.dut, qp, n_bytes, self.qp_bits)

    async def wait_sent(self, want: dict[int, int], limit_clocks: int) -> None:
        for _ in range(limit_clocks // 16):
            if all(self.tx_frames[qp] >= n for qp, n in want.items()):
                return
            await ClockCycles(self.dut.clk, 16)
        raise AssertionError(f"TX sent {self.tx_frames} frames, not {want}, within {limit_clocks} clocks")

    async def send_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            await self.rx.send(AxiStreamFrame(frame))
        await self.rx.wait()


class QpModel:
    """The host side of one QP: its HPCC model behind a QpPacer (whose INT conversion the host uses)."""

    def __init__(self, params: HpccParams) -> None:
        self.model = Hpcc(params)
        self.pacer = QpPacer(self.model, 0)


@cocotb.test()
async def test_int_echo_acks_drive_rates_like_sw_cc_hpcc(dut):
    """Random INT-echo ACK rounds for several QPs (plus plain, non-echo, hop-less and hop-count-changing ACKs):
    the scheduler's rate writes equal sw.cc.Hpcc's, ACK for ACK; counters and rate read-back agree."""
    tb = TB(dut)
    await tb.reset()
    cocotb.start_soon(tb.monitor())
    p = tb.p
    rng = random.Random(p["seed"])
    params = HpccParams(**p["hpcc"])
    unit, mtu = p["qlen_unit_bytes"], p["mtu_bytes"]
    qps = p["qps"]

    # mode dcqcn: INT-echo ACKs are counted, the HPCC engine stays idle
    await tb.send_frames([ack_frame(qps[0], 0, IntPath(rng, 2, params.line_rate_kbps, unit, 1).next_records())])
    await ClockCycles(dut.clk, 50)
    assert await tb.csr(COUNTER_ADDR["INT_ACKS"]) == 1
    assert tb.rate_writes == [], "an INT-echo ACK moved a rate outside mode hpcc"
    # bad values: cc_mode 3 and T below 100 ns rejected, R_AI above the line rate clamped
    await tb.param("cc_mode", 3)
    await tb.param("hpcc_base_rtt_ns", 99)
    assert (await tb.param("cc_mode"), await tb.csr(REG_ERR)) == (CC_MODE_DCQCN, ERR_VALUE)
    await tb.csr(REG_ERR, 0xF)
    await tb.param("hpcc_rate_ai_kbps", (1 << 32) - 1)
    assert await tb.csr(REG_ERR) == ERR_CLAMP
    assert await tb.param("hpcc_rate_ai_kbps") == await tb.param("hpcc_line_rate_kbps")
    await tb.csr(REG_ERR, 0xF)

    await tb.program_hpcc(params, unit)
    await tb.param("cc_mode", CC_MODE_HPCC)
    models = {qp: QpModel(params) for qp in qps}
    want: dict[int, list[int]] = {qp: [] for qp in qps}
    for qp in qps:
        await tb.init_qp(qp)
        want[qp].append(tb.conv.increment(models[qp].model.rate_kbps))
    tb.strict = True
    paths = {qp: IntPath(rng, rng.randint(1, 4), params.line_rate_kbps, unit, params.w_max_bytes) for qp in qps}
    sent = {qp: 0 for qp in qps}
    acked = {qp: 0 for qp in qps}
    wall0, clk0 = time.perf_counter(), tb.clocks
    kinds = {"echo": 0, "plain": 0, "not_echo": 0, "no_hops": 0, "new_path": 0}
    updates = 0
    for _ in range(p["rounds"]):
        for qp in qps:
            n = rng.randint(0, 3)
            if n:
                await tb.doorbell(qp, n * mtu)
                sent[qp] += n
        await tb.wait_sent(sent, 200_000)
        frames = []
        for _ in range(rng.randint(1, p["burst"])):
            qp = rng.choice(qps)
            if sent[qp] == 0:
                continue
            acked[qp] = rng.randint(max(acked[qp], 1), sent[qp])
            psn = acked[qp] - 1
            roll = rng.random()
            if roll < 0.04:
                kind, frame = "plain", ack_frame(qp, psn, None)
            elif roll < 0.07:
                kind, frame = "not_echo", ack_frame(qp, psn, paths[qp].next_records(), echo=False)
            elif roll < 0.10:
                kind, frame = "no_hops", ack_frame(qp, psn, [])
            else:
                kind = "echo"
                if roll > 0.98:
                    kind = "new_path"
                    paths[qp] = IntPath(rng, rng.randint(1, 4), params.line_rate_kbps, unit, params.w_max_bytes)
                frame = ack_frame(qp, psn, paths[qp].next_records())
            kinds[kind] += 1
            pkt, hops = host_hops(frame, models[qp].pacer, unit)
            assert (pkt.dest_qp & ((1 << tb.qp_bits) - 1), pkt.psn) == (qp, psn)
            m = models[qp].model
            before = m.updates
            m.on_ack(AckInfo(pkt.psn + 1, sent[qp], hops), 0)
            if m.updates != before:
                updates += 1
                want[qp].append(tb.conv.increment(m.rate_kbps))
            frames.append(frame)
        await tb.send_frames(frames)
        await ClockCycles(dut.clk, p["ack_clocks"] * len(frames) + 20)
    got = {qp: [r for q, r in tb.rate_writes if q == qp] for qp in qps}
    mismatches = sum(a != b for qp in qps for a, b in zip(got[qp], want[qp], strict=False)) + \
        sum(abs(len(got[qp]) - len(want[qp])) for qp in qps)
    n_acks = sum(kinds.values())
    rates_kbps = sorted({m.model.rate_kbps for m in models.values()})
    tb_record(acks=n_acks, kinds=kinds, hpcc_updates=updates, rate_writes=sum(len(v) for v in got.values()),
              mismatches=mismatches, final_rates_kbps=rates_kbps,
              clocks_per_s=(tb.clocks - clk0) / (time.perf_counter() - wall0))
    for qp in qps:
        assert got[qp] == want[qp], f"QP {qp}: rate writes {got[qp][:12]} != sw.cc.Hpcc {want[qp][:12]}"
        await tb.csr(REG_QP_SEL, qp)
        assert await tb.csr(REG_QP_RATE) == want[qp][-1], f"QP {qp}: QP_RATE read-back is not the last rate"
    assert await tb.csr(COUNTER_ADDR["INT_ACKS"]) == 1 + n_acks - kinds["plain"] - kinds["not_echo"]
    assert await tb.csr(COUNTER_ADDR["HPCC_UPDATES"]) == updates
    assert await tb.csr(COUNTER_ADDR["INT_ACKS_DROPPED"]) == 0
    assert await tb.csr(COUNTER_ADDR["RX_ICRC_ERRORS"]) == 0, "a good ACK (plain or with INT) failed the ICRC check"
    assert await tb.csr(COUNTER_ADDR["RATE_UPDATES"]) == updates + len(qps)
    assert updates > n_acks // 3, f"only {updates} of {n_acks} ACKs updated a window: the test is too weak"
