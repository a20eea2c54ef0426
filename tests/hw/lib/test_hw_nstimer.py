# amaranth: UnusedElaboratable=no
"""hw.lib.ns_timer.NsTimer (split 64-bit count, carry decided a clock ahead) equals the plain ns counter every clock."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from hw.lib.ns_timer import NsTimer

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("period_ps, init_ns", [
    (2500, 0), (2500, (1 << 32) - 40), (3333, (1 << 64) - 40), (999, 0), (1000, (1 << 32) - 7),
])
def test_ns_timer_equals_plain_counter_every_clock(period_ps: int, init_ns: int) -> None:
    """floor(init_ns + k * period_ps / 1000) mod 2**64 at clock k across the 32-/64-bit wraps; the high half - 1."""
    dut = NsTimer(period_ps, init_ns=init_ns)
    got: list[int] = []
    hi_minus1: list[int] = []

    async def tb(ctx):
        for _ in range(60):
            got.append(ctx.get(dut.now_ns))
            hi_minus1.append(ctx.get(dut.now_hi_minus1))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(tb)
    sim.run()
    assert got == [(init_ns + k * period_ps // 1000) % (1 << 64) for k in range(60)]
    assert hi_minus1 == [((now >> 32) - 1) % (1 << 32) for now in got]
