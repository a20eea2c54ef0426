# amaranth: UnusedElaboratable=no
"""Amaranth-simulator test of hw.lib.stream.SkidBuffer: every word through once, in order, under random stalls."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.errors import HwParamError
from hw.lib.stream import SkidBuffer

pytestmark = pytest.mark.sim


def test_words_pass_in_order_under_random_stalls() -> None:
    dut = SkidBuffer(16)
    rng = random.Random(5)
    words = [rng.randrange(1 << 16) for _ in range(300)]
    got: list[int] = []
    max_in_flight = 0

    async def bench(ctx) -> None:
        nonlocal max_in_flight
        sent = 0
        for _ in range(2000):
            offer = sent < len(words) and rng.random() < 0.7
            ctx.set(dut.i_valid, offer)
            ctx.set(dut.i_data, words[sent] if offer else 0)
            take = rng.random() < 0.6
            ctx.set(dut.o_ready, take)
            in_ok, out_ok = ctx.get(dut.i_ready), ctx.get(dut.o_valid)
            if out_ok and take:
                got.append(ctx.get(dut.o_data))
            if offer and in_ok:
                sent += 1
            max_in_flight = max(max_in_flight, sent - len(got))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == words
    assert max_in_flight == 2


def test_width_must_be_positive() -> None:
    with pytest.raises(HwParamError, match="width must be positive"):
        SkidBuffer(0)
