# amaranth: UnusedElaboratable=no
"""Amaranth-simulator test of the feeder's increment: value + 1 and its block flags from registered flags."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Mux, Signal
from amaranth.sim import Simulator

from hw.int_ack import INC_BLOCK_BITS, all_ones_blocks, increment, n_blocks

pytestmark = pytest.mark.sim

WIDTH = 64
MASK = (1 << WIDTH) - 1


def flags_of(value: int) -> int:
    """The all-ones flag of each block of ``value`` (as ``all_ones_blocks``), low block first."""
    out = 0
    for b, lo in enumerate(range(0, WIDTH, INC_BLOCK_BITS)):
        ones = (1 << min(INC_BLOCK_BITS, WIDTH - lo)) - 1
        out |= int((value >> lo) & ones == ones) << b
    return out


def test_counter_with_registered_flags_counts_like_plus_one_across_every_block_carry() -> None:
    """A register loaded with a value (flags from it) or its own increment (flags from the increment), as the
    feeder's inc_count: every value + 1 and flag set is exact, runs of increments included."""
    m = Module()
    load, load_value = Signal(), Signal(WIDTH)
    count, full = Signal(WIDTH), Signal(n_blocks(WIDTH))
    nxt, full_next = increment(count, full)
    m.d.sync += [count.eq(Mux(load, load_value, nxt)), full.eq(Mux(load, all_ones_blocks(load_value), full_next))]
    rng = random.Random(8)
    # just below every block carry (2^k - 1 - i), the top wrap, random values, values with all-ones blocks
    starts = [(1 << k) - 1 - i for k in range(1, WIDTH + 1) for i in (0, 1)] + [MASK, 0]
    starts += [rng.getrandbits(WIDTH) for _ in range(30)]
    starts += [rng.getrandbits(WIDTH) | (0x3F << (6 * rng.randrange(10))) | 0x3E for _ in range(20)]
    runs = 4
    seen = []

    async def tb(ctx):
        for start in starts:
            ctx.set(load, 1)
            ctx.set(load_value, start)
            await ctx.tick()
            ctx.set(load, 0)
            for _ in range(runs):
                seen.append((ctx.get(count), ctx.get(full)))
                await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    want = [((s + i) & MASK, flags_of((s + i) & MASK)) for s in starts for i in range(runs)]
    assert len(seen) == len(want)
    for got, exp in zip(seen, want, strict=True):
        assert got == exp, (hex(got[0]), hex(exp[0]), bin(got[1]), bin(exp[1]))
