# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of hw.lib.carry_split (the HPCC path's split adds and multiplies)."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hw.lib.carry_split import n_chunks, settled_add, settled_gt, settled_mul

pytestmark = pytest.mark.sim


def test_split_results_are_exact_after_their_settle_clocks() -> None:
    m = Module()
    a, b, c = Signal(64), Signal(40), Signal(33)
    add = settled_add(m, a, b, 64, 16)
    sub = settled_add(m, a, b, 64, 16, subtract=True)
    gt = settled_gt(m, a, b, 16)
    mul, mul_clocks = settled_mul(m, a, c, 16)
    kmul, kmul_clocks = settled_mul(m, c, 8_000_000, 16)
    rng = random.Random(3)
    cases = [(0, 0, 0), (2**64 - 1, 1, 2**33 - 1), (5, 7, 1), (2**40 - 1, 2**40 - 1, 2**32)]
    cases += [(rng.getrandbits(64), rng.getrandbits(40), rng.getrandbits(33)) for _ in range(40)]
    settle = max(n_chunks(64, 16), mul_clocks, kmul_clocks)
    got = []

    async def tb(ctx):
        for x, y, z in cases:
            ctx.set(a, x)
            ctx.set(b, y)
            ctx.set(c, z)
            at = {}
            for k in range(1, settle + 1):     # each result read exactly when its settle clocks are over
                await ctx.tick()
                at[k] = (ctx.get(add), ctx.get(sub), ctx.get(gt), ctx.get(mul), ctx.get(kmul))
            n_add = n_chunks(64, 16)
            got.append((*at[n_add][:3], at[mul_clocks][3], at[kmul_clocks][4]))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    mask = 2**64 - 1
    for (x, y, z), row in zip(cases, got, strict=True):
        assert row == ((x + y) & mask, (x - y) & mask, int(x > y), x * z, z * 8_000_000), (x, y, z)
    assert mul_clocks == n_chunks(97, 16) + 3 and kmul_clocks == n_chunks(33 + 23, 16) + 1
