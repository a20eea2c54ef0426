# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of hw.sched.TxScheduler at a small size: pacing, segmentation, clamping."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from hw.errors import HwParamError
from hw.sched import TxScheduler, rate_to_reg, reg_to_rate_bps

pytestmark = pytest.mark.sim


async def _push(ctx, port, **fields) -> None:
    for name, value in fields.items():
        ctx.set(getattr(port.payload, name), value)
    ctx.set(port.valid, 1)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


def _run(dut, testbench) -> None:
    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(testbench)
    sim.run()


def test_two_qps_share_link_at_their_rates() -> None:
    """QPs at 1/4 and 1/2 of line rate keep the link 3/4 busy, and each gets its own share."""
    dut = TxScheduler(data_width=64, n_qps=4, mtu_bytes=64, burst_bytes=256)
    seen = {"busy": 0, "bytes": {0: 0, 1: 0}}

    async def tb(ctx):
        ctx.set(dut.m_axis.tready, 1)
        await _push(ctx, dut.rate_wr, qp=0, rate=dut.line_rate_reg // 4)
        await _push(ctx, dut.rate_wr, qp=1, rate=dut.line_rate_reg // 2)
        await _push(ctx, dut.doorbell, qp=0, bytes=1 << 20)
        await _push(ctx, dut.doorbell, qp=1, bytes=1 << 20)
        await ctx.tick().repeat(200)
        for _ in range(4000):
            await ctx.tick()
            if ctx.get(dut.m_axis.tvalid):
                seen["busy"] += 1
                seen["bytes"][ctx.get(dut.m_axis.tuser)] += bin(ctx.get(dut.m_axis.tkeep)).count("1")

    _run(dut, tb)
    assert abs(seen["busy"] - 3000) <= 16, seen
    assert abs(seen["bytes"][1] - 2 * seen["bytes"][0]) <= 2 * 64 + 16, seen


def test_frame_overhead_is_charged_with_each_send() -> None:
    """A wire rate: at half the line rate with 32 bytes charged beyond each 64-byte send, the payload beats fill
    64 / 96 of that half, a third of the clocks."""
    dut = TxScheduler(data_width=64, n_qps=4, mtu_bytes=64, burst_bytes=256, frame_overhead_bytes=32)
    seen = {"busy": 0}

    async def tb(ctx):
        ctx.set(dut.m_axis.tready, 1)
        await _push(ctx, dut.rate_wr, qp=1, rate=dut.line_rate_reg // 2)
        await _push(ctx, dut.doorbell, qp=1, bytes=1 << 20)
        await ctx.tick().repeat(200)
        for _ in range(3000):
            await ctx.tick()
            seen["busy"] += ctx.get(dut.m_axis.tvalid)

    _run(dut, tb)
    assert abs(seen["busy"] - 1000) <= 16, seen


def test_doorbell_is_segmented_at_mtu_with_partial_last_beat() -> None:
    """100 bytes with a 64-byte MTU leave as a 64-byte and a 36-byte frame (tkeep marks the 4 last bytes)."""
    dut = TxScheduler(data_width=64, n_qps=4, mtu_bytes=64, burst_bytes=256)
    frames: list[int] = []

    async def tb(ctx):
        ctx.set(dut.m_axis.tready, 1)
        await _push(ctx, dut.rate_wr, qp=2, rate=dut.line_rate_reg)
        await ctx.tick().repeat(20)
        await _push(ctx, dut.doorbell, qp=2, bytes=100)
        size = 0
        for _ in range(100):
            await ctx.tick()
            if ctx.get(dut.m_axis.tvalid):
                assert ctx.get(dut.m_axis.tuser) == 2
                size += bin(ctx.get(dut.m_axis.tkeep)).count("1")
                if ctx.get(dut.m_axis.tlast):
                    frames.append(size)
                    size = 0

    _run(dut, tb)
    assert frames == [64, 36]


def test_rate_above_line_rate_is_clamped_and_flagged() -> None:
    dut = TxScheduler(data_width=64, n_qps=4, mtu_bytes=64, burst_bytes=256)
    flags = []

    async def tb(ctx):
        await _push(ctx, dut.rate_wr, qp=0, rate=dut.line_rate_reg + 1)
        flags.append(ctx.get(dut.rate_clamped))
        await _push(ctx, dut.rate_wr, qp=0, rate=dut.line_rate_reg)
        flags.append(ctx.get(dut.rate_clamped))

    _run(dut, tb)
    assert flags == [1, 0]


def test_rate_register_resolution_is_within_0_01_percent_from_1_mbps() -> None:
    for rate_bps in (1e6, 1.234567e6, 3.3e9, 409.6e9):
        reg = rate_to_reg(rate_bps, 400e6)
        assert abs(reg_to_rate_bps(reg, 400e6) - rate_bps) / rate_bps < 1e-4


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(HwParamError, match="n_qps"):
        TxScheduler(n_qps=1000)
    with pytest.raises(HwParamError, match="data_width"):
        TxScheduler(data_width=100)
    with pytest.raises(HwParamError, match="frame_overhead_bytes"):
        TxScheduler(frame_overhead_bytes=-1)
