"""End-to-end cocotb test of hw.nic_top.NicCcTop: RoCEv2 frames from sw.roce in, CNP requests and paced TX out.

CE-marked data frames must raise CNP requests exactly as ``sw.cc.DcqcnNp`` decides; received CNPs must move
a QP's rate exactly as ``sw.cc.DcqcnRp`` says (read back over the CSR bus) and its TX bytes over a window
must follow that rate; parameters written over the CSR bus must change both as the model predicts.  Frames with a
wrong ICRC must move nothing and count in RX_ICRC_ERRORS.
"""

from __future__ import annotations

import random
import time

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import CLK_NS, BlockTestbench, ring_doorbell, tb_record

from hw.csr import CSR_ID, ERR_CLAMP, ERR_VALUE, REG_ERR, REG_ID, REG_PARAM0, REG_QP_INIT, REG_QP_RATE, REG_QP_SEL
from hw.nic_top import CC_MODE_DCQCN, CC_MODE_HPCC, CC_MODE_NONE, COUNTER_ADDR
from sw.cc import DcqcnNp, DcqcnParams, DcqcnRp, RateToIncrement
from sw.roce.wire.flow import ECN_CE, ECN_ECT0, Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame

FRAC = 1 << 24


class TB(BlockTestbench):
    """Clock, reset, RX source, CSR master, and a per-clock monitor of TX bytes per QP and RX frame starts."""

    def __init__(self, dut) -> None:
        super().__init__(dut)
        self.settle_clocks = self.p["n_qps"] + 4  # the memories' clearing pass
        self.names = self.p["param_names"]
        self.conv = RateToIncrement(clk_hz=400_000_000)
        self.mtu, self.bpb = self.p["mtu_bytes"], self.p["data_width"] // 8
        self.rx = self.axis_source("rx_s_axis_")
        for sig in (dut.csr_we, dut.csr_re, dut.csr_addr, dut.csr_wdata, dut.doorbell__valid):
            sig.value = 0
        dut.rx_m_axis__tready.value = 1
        dut.tx_m_axis__tready.value = 1
        dut.cnp_req__ready.value = 1
        self.tx_bytes = [0] * self.p["n_qps"]
        self.rx_starts: list[float] = []
        self.cnp_reqs: list[tuple[float, int]] = []
        self.clocks = 0

    async def monitor(self) -> None:
        dut, in_frame = self.dut, False
        while True:
            await RisingEdge(dut.clk)
            self.clocks += 1
            if int(dut.tx_m_axis__tvalid.value):
                self.tx_bytes[int(dut.tx_m_axis__tuser.value)] += int(dut.tx_m_axis__tkeep.value).bit_count()
            if int(dut.rx_s_axis__tvalid.value) and int(dut.rx_s_axis__tready.value):
                if not in_frame:
                    self.rx_starts.append(get_sim_time("ns") - CLK_NS)  # the beat taken at the edge just passed
                in_frame = not int(dut.rx_s_axis__tlast.value)
            if int(dut.cnp_req__valid.value):
                self.cnp_reqs.append((get_sim_time("ns"), int(dut.cnp_req__payload.value)))

    async def param(self, name: str, value: int | None = None) -> int:
        return await self.csr(REG_PARAM0 + self.names.index(name), value)

    async def program(self, params: DcqcnParams) -> None:
        """Write every DCQCN parameter; the line rate first so no bound clamps the others."""
        await self.param("line_rate_kbps", params.line_rate_kbps)
        for name in self.names:
            if name not in ("cc_mode", "line_rate_kbps") and not name.startswith("hpcc_"):
                await self.param(name, int(getattr(params, name)))
        assert await self.csr(REG_ERR) == 0, "programming a valid DcqcnParams raised an error flag"

    async def rate_of(self, qp: int) -> int:
        await self.csr(REG_QP_SEL, qp)
        return await self.csr(REG_QP_RATE)

    async def init_qp(self, qp: int) -> None:
        await self.csr(REG_QP_SEL, qp)
        await self.csr(REG_QP_INIT, 1)

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        await ring_doorbell(self.dut, qp, n_bytes, self.p["qp_bits"])

    async def send_frames(self, frames: list[bytes]) -> list[float]:
        """Send frames back to back; returns the ns time each one's first beat entered the parser."""
        first = len(self.rx_starts)
        for frame in frames:
            await self.rx.send(AxiStreamFrame(frame))
        await self.rx.wait()
        await ClockCycles(self.dut.clk, 2)
        return self.rx_starts[first:first + len(frames)]

    async def window_bytes(self, n_clocks: int) -> list[int]:
        before = list(self.tx_bytes)
        await ClockCycles(self.dut.clk, n_clocks)
        return [a - b for a, b in zip(self.tx_bytes, before, strict=True)]

    def expect_bytes(self, rate_reg: int, n_clocks: int) -> float:
        return rate_reg * n_clocks / FRAC


def flow(qp: int) -> Flow:
    """A flow whose destination QP number maps to ``qp`` (the RTL keeps the QPN's low bits)."""
    return Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1", dst_ip="10.0.0.2",
                src_qpn=0x200 + qp, dst_qpn=0x100 + qp)


def cnp_frame(qp: int) -> bytes:
    return scapy_frame(flow(qp), Opcode.CNP)


def data_frame(qp: int, ecn: int, psn: int) -> bytes:
    return scapy_frame(flow(qp), Opcode.SEND_ONLY, psn=psn, ecn=ecn, payload=bytes(32))


@cocotb.test()
async def test_ce_frames_raise_cnp_requests_like_dcqcn_np(dut):
    """CE-marked data frames for three QPs with random gaps: the CNP requests equal DcqcnNp's decisions."""
    tb = TB(dut)
    cocotb.start_soon(tb.monitor())
    await tb.reset()
    assert await tb.csr(REG_ID) == CSR_ID
    interval = tb.p["cnp_interval_ns"]
    await tb.param("cnp_interval_ns", interval)
    rng = random.Random(tb.p.get("seed", 1))
    np_model = DcqcnNp(DcqcnParams(cnp_interval_ns=interval))
    want: list[int] = []
    n_ce = 0
    for burst in range(tb.p["ce_bursts"]):
        batch = [(rng.choice([3, 5, 6]), ECN_CE if rng.random() < 0.8 else ECN_ECT0) for _ in range(rng.randint(1, 6))]
        starts = await tb.send_frames([data_frame(qp, ecn, psn=burst) for qp, ecn in batch])
        for (qp, ecn), t_ns in zip(batch, starts, strict=True):
            n_ce += ecn == ECN_CE
            if np_model.on_packet(qp, ecn == ECN_CE, t_ns):
                want.append(qp)
        await ClockCycles(dut.clk, rng.randrange(0, 2 * int(interval / CLK_NS) // 3))
    await ClockCycles(dut.clk, 20)
    got = [qp for _, qp in tb.cnp_reqs]
    per_qp = {qp: got.count(qp) for qp in sorted(set(got))}
    tb_record(ce_frames=n_ce, cnp_requests=len(got), cnp_requests_per_qp=per_qp,
              cnp_sent_counter=await tb.csr(COUNTER_ADDR["CNP_SENT"]))
    assert got == want, f"CNP requests {got[:10]} != DcqcnNp {want[:10]}"
    assert len(got) < n_ce, "the interval suppressed no CNP: the test does not exercise it"
    for qp in set(got):
        times = [t for t, q in tb.cnp_reqs if q == qp]
        assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= interval
    assert await tb.csr(COUNTER_ADDR["CNP_SENT"]) == len(got)
    assert await tb.csr(COUNTER_ADDR["CE_SEEN"]) == n_ce
    assert await tb.csr(COUNTER_ADDR["RX_EVENTS_DROPPED"]) == 0


async def _check_rate(tb: TB, qp: int, model: DcqcnRp, when: str) -> int:
    got = await tb.rate_of(qp)
    want = tb.conv.increment(model.rc_kbps)
    assert got == want, f"{when}: QP {qp} limiter rate {got} != DcqcnRp {model.rc_kbps} kb/s -> {want}"
    return got


async def _check_window(tb: TB, rates: dict[int, int], n_clocks: int, what: str) -> dict[int, int]:
    got = await tb.window_bytes(n_clocks)
    tol = tb.mtu + 2 * tb.bpb
    for qp, rate in rates.items():
        want = tb.expect_bytes(rate, n_clocks)
        assert abs(got[qp] - want) <= tol, f"{what}: QP {qp} sent {got[qp]} B in {n_clocks} clocks, not {want:.0f}"
    return {qp: got[qp] for qp in rates}


@cocotb.test()
async def test_cnps_cut_rate_like_dcqcn_rp_and_tx_follows(dut):
    """Two backlogged QPs at the DCQCN line rate; CNPs for QP 1 halve its rate (model), its TX bytes follow,
    QP 2 keeps its rate; after the rate timer QP 1 recovers by fast recovery, read back mid-period."""
    tb = TB(dut)
    cocotb.start_soon(tb.monitor())
    await tb.reset()
    params = DcqcnParams(**tb.p["dcqcn"])
    await tb.program(params)
    wall0, clk0 = time.perf_counter(), tb.clocks
    win = tb.p["window_clocks"]
    t0 = get_sim_time("ns")
    for qp in (1, 2):
        await tb.init_qp(qp)
    models = {qp: DcqcnRp(params, now_ns=int(t0)) for qp in (1, 2)}
    for qp in (1, 2):
        await tb.doorbell(qp, 1 << 24)
    await ClockCycles(dut.clk, 200)
    rates = {qp: await _check_rate(tb, qp, models[qp], "after QP_INIT") for qp in (1, 2)}
    figures = {"window_clocks": win, "line": await _check_window(tb, rates, win, "at line rate")}
    for step in ("cnp1", "cnp2"):
        (t_cnp,) = await tb.send_frames([cnp_frame(1)])
        models[1].on_cnp(int(t_cnp))
        await ClockCycles(dut.clk, 100)
        rates[1] = await _check_rate(tb, 1, models[1], f"after {step}")
        assert await tb.rate_of(2) == rates[2], "a CNP for QP 1 changed QP 2's rate"
        figures[step] = await _check_window(tb, rates, win, f"after {step}")
        figures[f"{step}_rate_kbps"] = models[1].rc_kbps
    for k in (1, 2):  # mid-way through the k-th rate-timer period after the last CNP
        target = t_cnp + (k + 0.5) * params.rate_timer_ns
        await ClockCycles(dut.clk, int((target - get_sim_time("ns")) / CLK_NS))
        models[1].advance(int(get_sim_time("ns")))
        rates[1] = await _check_rate(tb, 1, models[1], f"{k} rate-timer periods after the CNPs")
        figures[f"recovery{k}_rate_kbps"] = models[1].rc_kbps
    assert await tb.csr(COUNTER_ADDR["CNP_RECEIVED"]) == 2
    sim_clocks = tb.clocks - clk0
    tb_record(rp=figures, rp_clocks_per_s=sim_clocks / (time.perf_counter() - wall0))
    assert figures["cnp2"][1] < 0.6 * figures["cnp1"][1] < 0.6 * 0.6 * figures["line"][1]


@cocotb.test()
async def test_csr_parameters_change_behaviour_like_the_model(dut):
    """g, alpha_init, min rate, F and T written over the bus: cuts and recovery follow DcqcnRp with them; bad
    writes are clamped or rejected with the error flags; CC mode none ignores CNPs; mode 3 is rejected."""
    tb = TB(dut)
    cocotb.start_soon(tb.monitor())
    await tb.reset()
    params = DcqcnParams(**tb.p["dcqcn"]).replace(g_shift=2, alpha_init_q16=32768, min_rate_kbps=1_500_000,
                                                  fast_recovery_stages=1, clamp_target_rate=False,
                                                  rate_ai_kbps=300_000)
    await tb.program(params)
    t0 = get_sim_time("ns")
    await tb.init_qp(4)
    model = DcqcnRp(params, now_ns=int(t0))
    await tb.doorbell(4, 1 << 24)
    cuts = []
    for _ in range(6):
        (t_cnp,) = await tb.send_frames([cnp_frame(4)])
        model.on_cnp(int(t_cnp))
        await ClockCycles(dut.clk, 60)
        await _check_rate(tb, 4, model, f"after CNP {len(cuts) + 1}")
        cuts.append(model.rc_kbps)
    assert cuts[-1] == params.min_rate_kbps, f"six cuts did not reach the programmed floor: {cuts}"
    rate = tb.conv.increment(model.rc_kbps)
    floor_bytes = await _check_window(tb, {4: rate}, tb.p["window_clocks"], "at the min rate")
    recovery = []
    for k in (1, 2, 3):  # F = 1: fast recovery once, then additive increase by rate_ai
        target = t_cnp + (k + 0.5) * params.rate_timer_ns
        await ClockCycles(dut.clk, int((target - get_sim_time("ns")) / CLK_NS))
        model.advance(int(get_sim_time("ns")))
        await _check_rate(tb, 4, model, f"{k} timer periods after the last CNP")
        recovery.append(model.rc_kbps)
    # CC mode none: a CNP is counted, the rate stays; mode 3 does not exist and is rejected
    await tb.param("cc_mode", CC_MODE_NONE)
    before = await tb.rate_of(4)
    await tb.send_frames([cnp_frame(4)])
    await ClockCycles(dut.clk, 60)
    assert await tb.rate_of(4) == before, "CC mode none let a CNP change the rate"
    assert await tb.csr(COUNTER_ADDR["CNP_RECEIVED"]) == 7
    await tb.csr(REG_ERR, 0xF)
    await tb.param("cc_mode", CC_MODE_HPCC + 1)
    assert (await tb.param("cc_mode"), await tb.csr(REG_ERR)) == (CC_MODE_NONE, ERR_VALUE)
    await tb.param("cc_mode", CC_MODE_DCQCN)
    # out of range: g_shift 0 rejected, alpha_init above 1.0 clamped, a rate above line rate clamped
    await tb.csr(REG_ERR, 0xF)
    clamps0 = await tb.csr(COUNTER_ADDR["CLAMPS"])
    await tb.param("g_shift", 0)
    await tb.param("alpha_init_q16", 70_000)
    await tb.csr(REG_QP_SEL, 4)
    await tb.csr(REG_QP_RATE, 0xFFFF_FFFF)
    flags = await tb.csr(REG_ERR)
    assert (await tb.param("g_shift"), await tb.param("alpha_init_q16"), flags) == (2, 65536, ERR_VALUE | ERR_CLAMP)
    assert await tb.rate_of(4) == (tb.bpb << 24)
    assert await tb.csr(COUNTER_ADDR["CLAMPS"]) == clamps0 + 2
    tb_record(params={"cuts_kbps": cuts, "floor_bytes": floor_bytes[4], "recovery_kbps": recovery})


IP_AT, BTH_AT = 14, 42  # untagged IPv4


def corrupt(frame: bytes, rng: random.Random) -> tuple[bytes, str]:
    """``frame`` with one bit flipped in an ICRC-covered header byte (IP source, BTH PSN), the payload or the ICRC."""
    where = rng.choice(("ip_src", "psn", "payload", "icrc"))
    at = {"ip_src": IP_AT + 12 + rng.randrange(4), "psn": BTH_AT + 9 + rng.randrange(3),
          "payload": rng.randrange(BTH_AT + 12, len(frame) - 4), "icrc": len(frame) - 1 - rng.randrange(4)}[where]
    out = bytearray(frame)
    out[at] ^= 1 << rng.randrange(8)
    return bytes(out), where


def switch_marked(frame: bytes) -> bytes:
    """An ECT(0) frame as a switch forwards it CE-marked: ECN 11, TTL - 1, new header checksum (ICRC unchanged)."""
    out = bytearray(frame)
    out[IP_AT + 1] |= ECN_CE
    out[IP_AT + 8] -= 1
    out[IP_AT + 10:IP_AT + 12] = b"\0\0"
    total = sum(int.from_bytes(out[i:i + 2], "big") for i in range(IP_AT, IP_AT + 20, 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    out[IP_AT + 10:IP_AT + 12] = (~total & 0xFFFF).to_bytes(2, "big")
    return bytes(out)


@cocotb.test()
async def test_frames_with_a_wrong_icrc_raise_no_cc_event(dut):
    """CNPs for QP 4 and CE-marked frames for QPs 3, 5, 6, half of them with one bit flipped (header, payload or
    ICRC), back to back: the good ones cut QP 4's rate as DcqcnRp and raise the CNP requests DcqcnNp decides, the
    bad ones nothing; they count in RX_ICRC_ERRORS.  Frames a switch CE-marked on the way (ECN, TTL, checksum
    rewritten) keep their ICRC and count as CE."""
    tb = TB(dut)
    cocotb.start_soon(tb.monitor())
    await tb.reset()
    params = DcqcnParams(**tb.p["dcqcn"])
    await tb.program(params)
    t0 = get_sim_time("ns")
    await tb.init_qp(4)
    rp_model = DcqcnRp(params, now_ns=int(t0))
    np_model = DcqcnNp(params)
    rng = random.Random(tb.p.get("seed", 1) + 7)
    await ClockCycles(dut.clk, 50)
    want_reqs: list[int] = []
    n = {"bad": 0, "cnp": 0, "ce": 0, "marked": 0}
    places: dict[str, int] = {}
    for burst in range(4):
        batch = []
        for _ in range(8):
            kind = rng.choice(("cnp", "ce", "ce", "marked", "ce", "marked"))
            qp = 4 if kind == "cnp" else rng.choice([3, 5, 6])
            if kind == "cnp":
                frame = cnp_frame(qp)
            elif kind == "ce":
                frame = data_frame(qp, ECN_CE, psn=burst)
            else:
                frame = switch_marked(data_frame(qp, ECN_ECT0, psn=burst))
            good = rng.random() < 0.5
            if not good:
                frame, where = corrupt(frame, rng)
                places[where] = places.get(where, 0) + 1
            batch.append((kind, qp, good, frame))
        starts = await tb.send_frames([f for *_, f in batch])
        for (kind, qp, good, _), t_ns in zip(batch, starts, strict=True):
            n["bad" if not good else kind] += 1
            if good and kind == "cnp":
                rp_model.on_cnp(int(t_ns))
            elif good and np_model.on_packet(qp, True, t_ns):
                want_reqs.append(qp)
        await ClockCycles(dut.clk, 100)
        await _check_rate(tb, 4, rp_model, f"after burst {burst}")
    await ClockCycles(dut.clk, 20)
    got_reqs = [qp for _, qp in tb.cnp_reqs]
    counts = {name: await tb.csr(COUNTER_ADDR[name]) for name in
              ("RX_ICRC_ERRORS", "CNP_RECEIVED", "CE_SEEN", "RX_ROCE", "RX_EVENTS_DROPPED")}
    tb_record(icrc={"frames": n, "corrupted_at": places, "counters": counts, "cnp_requests": len(got_reqs),
                    "rate_kbps": rp_model.rc_kbps})
    assert got_reqs == want_reqs, f"CNP requests {got_reqs} != DcqcnNp on the good frames {want_reqs}"
    assert counts == {"RX_ICRC_ERRORS": n["bad"], "CNP_RECEIVED": n["cnp"], "CE_SEEN": n["ce"] + n["marked"],
                      "RX_ROCE": sum(n.values()), "RX_EVENTS_DROPPED": 0}, (counts, n)
    assert min(n.values()) > 0 and params.min_rate_kbps < rp_model.rc_kbps < params.line_rate_kbps, (n, rp_model)
