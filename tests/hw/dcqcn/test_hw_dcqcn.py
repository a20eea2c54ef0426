# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of hw.dcqcn: exact ns time base, one CNP against the golden model, limits."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from hw.dcqcn import DcqcnRpEngine
from hw.errors import HwParamError
from hw.lib.ns_timer import NsTimer
from sw.cc import DcqcnParams, DcqcnRp, RateToIncrement

pytestmark = pytest.mark.sim

PARAMS = DcqcnParams(line_rate_kbps=25_600_000, alpha_timer_ns=2_000, rate_timer_ns=3_000,
                     byte_counter_bytes=20_000)


def test_ns_timer_counts_2_5_ns_clocks_exactly() -> None:
    dut = NsTimer(2500)
    seen = []

    async def tb(ctx):
        await ctx.tick().repeat(1001)
        seen.append(ctx.get(dut.now_ns))

    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [2502]  # floor(1001 * 2.5)


def test_cnp_cuts_rate_like_the_model() -> None:
    dut = DcqcnRpEngine(n_qps=4, params=PARAMS, mtu_bytes=4096)
    got = {}

    async def tb(ctx):
        for port, value in ((dut.init, 1), (dut.cnp, 1)):
            ctx.set(port.payload, value)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
            await ctx.tick().until(dut.rate_wr.valid)  # ready is low: the engine holds its rate write
            got[port.payload.name] = (ctx.get(dut.trace_now_ns), ctx.get(dut.rate_wr.payload.rate),
                                      ctx.get(dut.trace_state.rc_kbps), ctx.get(dut.trace_state.alpha_q16))
            ctx.set(dut.rate_wr.ready, 1)
            await ctx.tick()
            ctx.set(dut.rate_wr.ready, 0)

    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(tb)
    sim.run()
    t_init, _, rc0, _ = next(iter(got.values()))
    model = DcqcnRp(PARAMS, now_ns=t_init)
    assert rc0 == PARAMS.line_rate_kbps
    t_cnp, rate, rc, alpha = list(got.values())[1]
    model.on_cnp(t_cnp)
    assert (rc, alpha) == (model.rc_kbps, model.alpha_q16) == (12_800_000, 65536)
    assert rate == RateToIncrement().increment(model.rc_kbps)


def test_timers_shorter_than_the_sweep_are_rejected() -> None:
    with pytest.raises(HwParamError, match="rate_timer_ns"):
        DcqcnRpEngine(n_qps=1024, params=PARAMS.replace(alpha_timer_ns=100_000))
    with pytest.raises(HwParamError, match="byte_counter_bytes"):
        DcqcnRpEngine(n_qps=8, params=PARAMS.replace(byte_counter_bytes=1000))
