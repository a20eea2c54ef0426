"""cocotb scoreboard of hw.cnp.CnpGenerator against sw.cc.DcqcnNp: every CE decision and every CNP request."""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, ValueChange
from cocotb_coverage.coverage import CoverPoint, coverage_db
from hwsim import BlockTestbench, tb_params, tb_record

from sw.cc import DcqcnNp, DcqcnParams


@CoverPoint("np.decision", xf=lambda emit, first: emit, bins=[True, False])
@CoverPoint("np.first_cnp_of_qp", xf=lambda emit, first: first, bins=[True, False])
def sample(emit: bool, first: bool) -> None:
    """One coverage sample per CE decision."""


@cocotb.test()
async def test_cnp_pacing_matches_model(dut):
    """Random CE bursts on every QP under random CNP backpressure: decisions and CNPs equal the model's."""
    tp = tb_params()
    model = DcqcnNp(DcqcnParams(cnp_interval_ns=tp["cnp_interval_ns"]))
    rng = random.Random(tp.get("seed", 1))
    tb = BlockTestbench(dut)
    dut.ce__valid.value = 0
    dut.cnp_req__ready.value = 1
    await tb.reset()
    expected_cnps: list[int] = []
    got_cnps: list[int] = []
    errors: list[str] = []
    seen_qps: set[int] = set()

    async def watch_decisions() -> None:
        while True:
            await ValueChange(dut.trace_seq)
            await ReadOnly()
            qp, now_ns, emit = int(dut.trace_qp.value), int(dut.trace_now_ns.value), bool(dut.trace_emit.value)
            want = model.on_ce(qp, now_ns)
            if want != emit:
                errors.append(f"QP {qp} at {now_ns} ns: RTL emit={emit}, model {want}")
            if want:
                expected_cnps.append(qp)
            sample(emit, qp not in seen_qps)
            seen_qps.add(qp)

    async def drain() -> None:
        """Take CNP requests with random backpressure (values read at the edge are the cycle's)."""
        while True:
            await RisingEdge(dut.clk)
            if int(dut.cnp_req__valid.value) and int(dut.cnp_req__ready.value):
                got_cnps.append(int(dut.cnp_req__payload.value))
            dut.cnp_req__ready.value = int(rng.random() < 0.6)

    cocotb.start_soon(watch_decisions())
    cocotb.start_soon(drain())
    n_qps = tp["n_qps"]
    for _ in range(tp["n_events"]):
        dut.ce__payload.value = rng.randrange(n_qps)
        dut.ce__valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.ce__ready.value):
                break
        dut.ce__valid.value = 0
        gap = rng.choice([0, 0, 1, 5, 40, 200])
        if gap:
            await ClockCycles(dut.clk, gap)
    await ClockCycles(dut.clk, 20)
    cov = {n: coverage_db[n].coverage * 100 // coverage_db[n].size for n in ("np.decision", "np.first_cnp_of_qp")}
    tb_record(decisions=model.ce_packets, cnps=len(got_cnps), coverage_pct=cov)
    assert not errors, f"{len(errors)} mismatches, first {errors[:3]}"
    assert got_cnps == expected_cnps, f"CNP requests {got_cnps[:10]} != model {expected_cnps[:10]}"
    assert model.cnps_sent > 10 and model.ce_packets - model.cnps_sent > 10, "stimulus too tame"
    assert all(v == 100 for v in cov.values()), f"coverage {cov}"
