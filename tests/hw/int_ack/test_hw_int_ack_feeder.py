# amaranth: UnusedElaboratable=no
"""Amaranth-simulator test of HpccAckFeeder's sent-packet counts: every ACK's snd_nxt and ack_seq are exact."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.int_ack import LO_BITS, PSN_BITS, HpccAckFeeder

pytestmark = pytest.mark.sim

N_QPS = 8
MASK = (1 << 64) - 1
LO = 1 << LO_BITS
# first sequence per QP: 0, below a low-bit wrap, below the high chunks' boundaries, below the 64-bit wrap
STARTS = [0, LO - 2, (1 << 24) - 5, (1 << 44) - 30, MASK - 40, (1 << 36) - LO + 3, 0x1234_5678_9ABC_DEF0, 77]


def schedule(rng: random.Random, n_clocks: int) -> list[int | None]:
    """The QP of each clock's sent pulse (None: no pulse): long back-to-back runs of one QP (the forwarded
    read-modify-write across low wraps), two QPs taking turns, random QPs with idle clocks."""
    out: list[int | None] = []
    while len(out) < n_clocks:
        roll = rng.random()
        if roll < 0.3:
            out += [rng.randrange(N_QPS)] * rng.randint(LO, 5 * LO)
        elif roll < 0.5:
            a, b = rng.sample(range(N_QPS), 2)
            out += [a, b] * rng.randint(LO // 2, 3 * LO)
        else:
            out += [rng.randrange(N_QPS) if rng.random() < 0.7 else None for _ in range(rng.randint(10, 60))]
    return out[:n_clocks]


def test_acks_read_exact_counts_while_pulses_cross_low_and_high_wraps() -> None:
    """ACKs arrive while pulses run (one per clock at most): each snd_nxt lies between the pulses issued two
    clocks before the ACK was taken and those issued when it left (a count read torn between the low and high
    bits would be 2^LO_BITS short), and ack_seq is the ACK's PSN + 1 widened against it."""
    dut = HpccAckFeeder(n_qps=N_QPS)
    rng = random.Random(11)
    pulses = schedule(rng, 6000)
    results: list[tuple[int, int, int, int, int, int]] = []

    async def tb(ctx):
        ctx.set(dut.hpcc.ready, 1)
        for qp, seq in enumerate(STARTS):
            while not ctx.get(dut.clear_ok):
                await ctx.tick()
            ctx.set(dut.clear, 1)
            ctx.set(dut.clear_qp, qp)
            ctx.set(dut.clear_seq, seq)
            await ctx.tick()
            ctx.set(dut.clear, 0)
        issued = [0] * N_QPS
        history: list[list[int]] = []  # issued counts at the start of each clock
        pending = None  # (qp, acked count, clock taken)
        for clk, pulse in enumerate(pulses + [None] * 40):
            history.append(list(issued))
            if pending is None and clk < len(pulses) and rng.random() < 0.15:
                qp = pulse if pulse is not None and rng.random() < 0.8 else rng.randrange(N_QPS)
                seen = history[max(0, clk - 2)][qp]  # pulses the feeder has counted by the time it reads
                acked = rng.randint(max(0, seen - 300), seen)
                ctx.set(dut.raw.payload.qp, qp)
                ctx.set(dut.raw.payload.psn, (STARTS[qp] + acked - 1) & ((1 << PSN_BITS) - 1))
                ctx.set(dut.raw.valid, 1)
                pending = [qp, acked, None]
            if pending is not None and pending[2] is None and ctx.get(dut.raw.ready):
                pending[2] = clk
            ctx.set(dut.sent, pulse is not None)
            ctx.set(dut.sent_qp, pulse or 0)
            if pulse is not None:
                issued[pulse] += 1
            if ctx.get(dut.hpcc.valid):
                qp, acked, taken = pending
                low = history[max(0, taken - 2)][qp]
                results.append((qp, acked, low, issued[qp], ctx.get(dut.hpcc.payload.snd_nxt),
                                ctx.get(dut.hpcc.payload.ack_seq)))
                pending = None
            await ctx.tick()
            if pending is not None and pending[2] is not None:
                ctx.set(dut.raw.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(results) > 200
    assert sum(1 for _qp, _a, low, high, _s, _q in results if high - low >= 4) > 200, "too few ACKs amid pulses"
    for qp, acked, low, high, snd_nxt, ack_seq in results:
        got = (snd_nxt - STARTS[qp]) & MASK
        assert low <= got <= high, (qp, low, got, high)
        assert ack_seq == (STARTS[qp] + acked) & MASK, (qp, acked, hex(ack_seq))
