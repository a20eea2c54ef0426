# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of hw.hpcc and hw.lib.divider: exact quotients, ACK updates against sw.cc.Hpcc, II."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.errors import HwParamError
from hw.hpcc import KIND_INIT, KIND_NO_INT, KIND_NO_SAMPLE, KIND_RECORD, KIND_UPDATE, HpccEngine
from hw.lib.divider import SeqDivider
from sw.cc import AckInfo, Hpcc, HpccParams, IntHop, RateToIncrement

pytestmark = pytest.mark.sim

LINE = 100_000_000
T = 10_000
BDP = 125_000
PARAMS = HpccParams(line_rate_kbps=LINE, base_rtt_ns=T, max_stage=2)


@pytest.mark.parametrize(("steps", "chunk_bits"), [(1, 0), (3, 0), (1, 8), (1, 16), (1, 24), (1, 40)])
def test_divider_is_floor_division_saturated(steps: int, chunk_bits: int) -> None:
    dut = SeqDivider(40, 20, 12, steps, chunk_bits)
    rng = random.Random(steps + chunk_bits)
    cases = [(0, 1), (4095, 1), (4096, 1), (10**6, 0), (2**40 - 1, 2**20 - 1), (12345, 12346)]
    cases += [(rng.getrandbits(rng.randrange(1, 41)), rng.getrandbits(rng.randrange(1, 21))) for _ in range(60)]
    got = []

    async def tb(ctx):
        for n, d in cases:
            ctx.set(dut.n, n)
            ctx.set(dut.d, d)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            clocks = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                clocks += 1
            got.append((ctx.get(dut.q), clocks))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    for (n, d), (q, clocks) in zip(cases, got, strict=True):
        want = 4095 if d == 0 else min(n // d, 4095)
        assert q == want, f"{n} // {d}: {q} != {want}"
        assert clocks == (dut.saturated_clocks if d == 0 or n // d > 4095 else dut.clocks)


def run_engine(dut: HpccEngine, acks: list[tuple[int, AckInfo]], init_qps: list[int]) -> tuple[list, list, list]:
    """Init QPs, feed (qp, ack) back to back; returns trace records, rate writes and clocks per ACK."""
    traces, rates, clocks = [], [], []

    async def tb(ctx):
        ctx.set(dut.rate_wr.ready, 1)
        for qp in init_qps:
            ctx.set(dut.init.payload, qp)
            ctx.set(dut.init.valid, 1)
            await ctx.tick()
            ctx.set(dut.init.valid, 0)
            await ctx.tick().repeat(4)
        for qp, ack in acks:
            ctx.set(dut.ack.payload.as_value(), dut.ack_bits(qp, ack))
            ctx.set(dut.ack.valid, 1)
            n = 0
            while True:
                n += 1
                _, _, ready = await ctx.tick().sample(dut.ack.ready)
                if ready:
                    break
            ctx.set(dut.ack.valid, 0)
            clocks.append(n)

    async def watch(ctx):
        seq = 0
        async for _, _, s, kind, qp, hop, raw, rv, rate, win in ctx.tick().sample(
                dut.trace_seq, dut.trace_kind, dut.trace_qp, dut.trace_hop, dut.trace_state,
                dut.rate_wr.valid, dut.rate_wr.payload.rate, dut.window_bytes):
            if s != seq:
                seq = s
                traces.append((kind, qp, hop, raw))
            if rv:
                rates.append((rate, win))

    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(tb)
    sim.add_process(watch)
    sim.run()
    return traces, rates, clocks


def hop(ts: int, tx: int, qlen: int = 0, link: int = LINE) -> IntHop:
    return IntHop(ts, tx, qlen, link)


def test_acks_update_window_like_the_model() -> None:
    dut = HpccEngine(n_qps=4, max_hops=4, params=PARAMS)
    acks = [
        (1, AckInfo(1, 1)),                                                   # no INT: nothing
        (1, AckInfo(1, 1, (hop(0, 0), hop(0, 0, link=LINE // 4)))),           # first INT: record only
        (1, AckInfo(2, 100, (hop(T, BDP // 2), hop(T, BDP // 4, link=LINE // 4)))),   # hop 2 full: U = 1
        (1, AckInfo(3, 200, (hop(T, BDP), hop(2 * T, BDP // 2, link=LINE // 4)))),    # hop 1 no new ts
        (1, AckInfo(300, 400, (hop(T, BDP, 10**9), hop(2 * T, BDP // 2, link=LINE // 4)))),      # nothing moved
        (1, AckInfo(500, 600, (hop(3 * T, BDP + BDP // 2, 10**9), hop(3 * T, BDP // 2, link=LINE // 4)))),
    ]
    traces, rates, clocks = run_engine(dut, acks, init_qps=[1])
    kinds = [t[0] for t in traces]
    assert kinds == [KIND_INIT, KIND_NO_INT, KIND_RECORD, KIND_UPDATE, KIND_UPDATE, KIND_NO_SAMPLE, KIND_UPDATE]
    model = Hpcc(PARAMS)
    conv = RateToIncrement()
    assert traces[0][3].window_bytes == BDP and rates[0] == (conv.increment(LINE), BDP)
    updates = 0
    for i, ((_, ack), (kind, qp, _, st)) in enumerate(zip(acks, traces[1:], strict=True)):
        model.on_ack(ack, i)
        want = model.state()
        assert qp == 1
        assert (st.window_bytes, st.wc_bytes, st.u_q16, st.inc_stage, st.rate_kbps, st.last_update_seq) == (
            want.window_bytes, want.wc_bytes, want.u_q16, want.inc_stage, want.rate_kbps, want.last_update_seq)
        if kind == KIND_UPDATE:
            updates += 1
            assert rates[updates] == (conv.increment(want.rate_kbps), want.window_bytes)
    assert traces[3][2] == 1 and traces[3][3].u_q16 == 65536           # the 25G hop is the most loaded
    assert traces[6][3].u_q16 == (1 << 24) - 1                         # huge queue saturates U
    assert len(rates) == 1 + updates == 4
    # the initiation interval the FSM documents (no division saturates in the first update)
    assert clocks[0] == dut.ack_ii_clocks(0, kind=KIND_NO_INT)
    assert clocks[1] == dut.ack_ii_clocks(2, kind=KIND_RECORD)
    assert clocks[2] == dut.ack_ii_clocks(2, multiplicative=True)
    assert clocks[4] == dut.ack_ii_clocks(2, sampled=0, kind=KIND_NO_SAMPLE)
    assert all(c <= dut.ack_ii_clocks(2) for c in clocks)


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(HwParamError, match="n_qps"):
        HpccEngine(n_qps=6)
    with pytest.raises(HwParamError, match="max_hops"):
        HpccEngine(max_hops=17)
    with pytest.raises(HwParamError, match="steps"):
        HpccEngine(steps=0)
    with pytest.raises(HwParamError, match="at most 1"):
        HpccEngine(n_qps=2, max_hops=1).ack_bits(0, AckInfo(1, 1, (hop(0, 0), hop(0, 0))))


def test_one_hop_engine_with_one_quotient_bit_per_clock() -> None:
    dut = HpccEngine(n_qps=2, max_hops=1, params=PARAMS, steps=1)
    acks = [(0, AckInfo(1, 1, (hop(0, 0),)))]
    acks += [(0, AckInfo(k + 1, k + 1, (hop(k * T, k * BDP // 2 + k * k, 100 * k),))) for k in range(1, 6)]
    traces, rates, clocks = run_engine(dut, acks, init_qps=[0])
    model = Hpcc(PARAMS)
    for i, ((_, ack), (_, _, _, st)) in enumerate(zip(acks, traces[1:], strict=True)):
        model.on_ack(ack, i)
        assert (st.window_bytes, st.u_q16, st.inc_stage, st.rate_kbps) == (
            model.window, model.u_q16, model.inc_stage, model.rate_kbps)
    assert [t[0] for t in traces] == [KIND_INIT, KIND_RECORD] + [KIND_UPDATE] * 5 and len(rates) == 6
    assert clocks[1] == dut.ack_ii_clocks(1, multiplicative=False)      # U = 0.5: additive, no division
