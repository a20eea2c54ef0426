"""cocotb scoreboard of hw.dcqcn.DcqcnRpEngine against the golden model sw.cc.DcqcnRp, with CC-state coverage.

Random CNP and sent-packet streams in phases (congestion, then recovery) drive the DUT; every trace record
the DUT emits is replayed into one ``DcqcnRp`` per QP at the same ns time and the register files compared
field by field; every rate the DUT hands to the limiter is checked against ``RateToIncrement``.
"""

from __future__ import annotations

import random
import time

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, ValueChange
from cocotb_coverage.coverage import CoverPoint, coverage_db
from hwsim import CLK_NS, BlockTestbench, tb_params, tb_record

from hw.dcqcn import KIND_CNP, KIND_INIT, KIND_SENT, KIND_TIMER, RP_STATE
from sw.cc import DcqcnParams, DcqcnRp, RateToIncrement, RpStage

FIELDS = [(name, field.offset, field.width) for name, field in RP_STATE]


def decode_state(raw: int) -> dict[str, int]:
    return {name: (raw >> off) & ((1 << width) - 1) for name, off, width in FIELDS}


@CoverPoint("dcqcn.kind", xf=lambda kind, st, p: kind, bins=[KIND_INIT, KIND_CNP, KIND_SENT, KIND_TIMER])
@CoverPoint("dcqcn.stage", xf=lambda kind, st, p: st["last_stage"],
            bins=[int(RpStage.FAST_RECOVERY), int(RpStage.ADDITIVE), int(RpStage.HYPER)])
@CoverPoint("dcqcn.rc_at_min", xf=lambda kind, st, p: st["rc_kbps"] == p.min_rate_kbps, bins=[True, False])
@CoverPoint("dcqcn.rt_at_line", xf=lambda kind, st, p: st["rt_kbps"] == p.line_rate_kbps, bins=[True, False])
@CoverPoint("dcqcn.alpha_at_one", xf=lambda kind, st, p: st["alpha_q16"] == 65536, bins=[True, False])
def sample(kind: int, st: dict[str, int], p: DcqcnParams) -> None:
    """One coverage sample per trace record."""


class TB(BlockTestbench):
    settle_clocks = 1

    def __init__(self, dut) -> None:
        super().__init__(dut)
        tp = tb_params()
        self.n_qps = tp["n_qps"]
        self.mtu = tp["mtu_bytes"]
        self.params = DcqcnParams(**tp["dcqcn"])
        self.conv = RateToIncrement(clk_hz=tp["clk_hz"])
        self.models: dict[int, DcqcnRp] = {}
        self.records = 0
        self.rates_checked = 0
        self.errors: list[str] = []
        for port in ("init", "cnp", "sent"):
            getattr(dut, f"{port}__valid").value = 0
        dut.rate_wr__ready.value = 1

    async def push(self, port: str, payload: int) -> None:
        getattr(self.dut, f"{port}__payload").value = payload
        getattr(self.dut, f"{port}__valid").value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if getattr(self.dut, f"{port}__ready").value:
                break
        getattr(self.dut, f"{port}__valid").value = 0

    async def watch_trace(self) -> None:
        """Replay every trace record into the model of its QP and compare all registers."""
        dut = self.dut
        while True:
            await ValueChange(dut.trace_seq)
            await ReadOnly()
            kind, qp = int(dut.trace_kind.value), int(dut.trace_qp.value)
            now_ns, nbytes = int(dut.trace_now_ns.value), int(dut.trace_bytes.value)
            rtl = decode_state(int(dut.trace_state.value))
            if kind == KIND_INIT:
                self.models[qp] = DcqcnRp(self.params, now_ns=now_ns)
            elif kind == KIND_CNP:
                self.models[qp].on_cnp(now_ns)
            elif kind == KIND_SENT:
                self.models[qp].on_bytes_sent(nbytes, now_ns)
            else:
                self.models[qp].advance(now_ns)
            want = self.models[qp].state()
            got = {k: v for k, v in rtl.items() if k != "active"}
            exp = {k: int(getattr(want, k)) for k in got}
            if got != exp:
                diff = {k: (got[k], exp[k]) for k in got if got[k] != exp[k]}
                self.errors.append(f"record {self.records} kind {kind} QP {qp} t={now_ns}: (rtl, model) {diff}")
            sample(kind, rtl, self.params)
            self.records += 1

    async def watch_rates(self) -> None:
        dut = self.dut
        while True:
            await ValueChange(dut.rate_wr__valid)
            await ReadOnly()
            if not int(dut.rate_wr__valid.value):
                continue
            raw = int(dut.rate_wr__payload.value)
            qp_bits = (self.n_qps - 1).bit_length()
            qp, rate = raw & ((1 << qp_bits) - 1), raw >> qp_bits
            want = self.conv.increment(self.models[qp].rc_kbps)
            if rate != want:
                self.errors.append(f"rate_wr QP {qp}: {rate} != RateToIncrement {want}")
            self.rates_checked += 1


@cocotb.test()
async def test_dcqcn_scoreboard(dut):
    """Congestion and recovery phases on every QP: RTL registers equal the golden model after every change."""
    tb = TB(dut)
    await tb.reset()
    cocotb.start_soon(tb.watch_trace())
    cocotb.start_soon(tb.watch_rates())
    rng = random.Random(tb_params().get("seed", 1))
    for qp in range(tb.n_qps):
        await tb.push("init", qp)
    qp_bits = (tb.n_qps - 1).bit_length()
    wall0, clk0 = time.perf_counter(), int(dut.now_ns.value)
    for phase, (n_events, p_cnp, gap_max) in enumerate(tb_params()["phases"]):
        for _ in range(n_events):
            qp = rng.randrange(tb.n_qps)
            if rng.random() < p_cnp:
                await tb.push("cnp", qp)
            else:
                await tb.push("sent", (rng.randint(1, tb.mtu) << qp_bits) | qp)
            gap = rng.randrange(gap_max + 1)
            if gap:
                await ClockCycles(dut.clk, gap)
        dut._log.info("phase %d done: %d records", phase, tb.records)
    await ClockCycles(dut.clk, 40 * tb.n_qps)
    sim_clk = (int(dut.now_ns.value) - clk0) / CLK_NS
    cov = {name: coverage_db[name].coverage * 100 // coverage_db[name].size
           for name in ("dcqcn.kind", "dcqcn.stage", "dcqcn.rc_at_min", "dcqcn.rt_at_line", "dcqcn.alpha_at_one")}
    tb_record(records=tb.records, rates_checked=tb.rates_checked, coverage_pct=cov, sim_clocks=sim_clk,
              clocks_per_s=sim_clk / (time.perf_counter() - wall0))
    assert not tb.errors, f"{len(tb.errors)} mismatches, first: {tb.errors[:3]}"
    assert tb.records > 100 and tb.rates_checked > 100, f"{tb.records} records, {tb.rates_checked} rates"
    missing = {k: v for k, v in cov.items() if v < 100}
    assert not missing, f"functional coverage below 100 %: {missing}"
