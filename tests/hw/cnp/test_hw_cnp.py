# amaranth: UnusedElaboratable=no
"""hw.cnp.CnpGenerator on the Amaranth simulator: back-to-back CE packets of one QP (the forwarded decisions)."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.cnp import CnpGenerator
from sw.cc import DcqcnNp, DcqcnParams

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("interval_ns", [3, 4, 5, 8, 40])
def test_back_to_back_ce_of_one_qp_decide_like_the_model(interval_ns: int) -> None:
    """Intervals of one to a few clocks: a decision right after an emit of its QP, or two clocks after, count."""
    dut = CnpGenerator(n_qps=4, params=DcqcnParams(cnp_interval_ns=interval_ns))
    model = DcqcnNp(DcqcnParams(cnp_interval_ns=interval_ns))
    rng = random.Random(interval_ns)
    decisions: list[tuple[int, int, bool]] = []

    async def tb(ctx):
        ctx.set(dut.cnp_req.ready, 1)
        seq = 0
        for _ in range(400):
            ctx.set(dut.ce.valid, rng.random() < 0.85)
            ctx.set(dut.ce.payload, rng.choice((0, 0, 1, 3)))
            await ctx.tick()
            if ctx.get(dut.trace_seq) != seq:
                seq = ctx.get(dut.trace_seq)
                decisions.append((ctx.get(dut.trace_qp), ctx.get(dut.trace_now_ns), bool(ctx.get(dut.trace_emit))))

    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(tb)
    sim.run()
    assert len(decisions) > 200
    wrong = [(qp, now, emit) for qp, now, emit in decisions if model.on_ce(qp, now) != emit]
    assert not wrong, f"{len(wrong)} decisions differ from DcqcnNp, first {wrong[:3]}"
    assert 0 < sum(emit for _, _, emit in decisions) < len(decisions)
