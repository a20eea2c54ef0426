"""Amaranth-simulator tests of hw.csr.CsrBank: rate writes reach the limiter, bad writes clamp or reject."""

from __future__ import annotations

import struct

import pytest
from amaranth.sim import Simulator

from hw.csr import (
    CSR_ID,
    ERR_ADDR,
    ERR_CLAMP,
    ERR_QP,
    REG_COUNTER0,
    REG_ERR,
    REG_ID,
    REG_QP_RATE,
    REG_QP_SEL,
    REG_TMPL0,
    REG_TMPL_WR,
    CsrBank,
)

pytestmark = pytest.mark.sim

LINE = 8 << 24


def _run(testbench) -> CsrBank:
    dut = CsrBank(n_qps=16, line_rate_reg=LINE, n_counters=2)
    sim = Simulator(dut)
    sim.add_clock(2.5e-9)

    async def bench(ctx) -> None:
        await testbench(ctx, dut)

    sim.add_testbench(bench)
    sim.run()
    return dut


async def _write(ctx, dut, addr, value) -> None:
    ctx.set(dut.addr, addr)
    ctx.set(dut.wdata, value)
    ctx.set(dut.we, 1)
    while True:  # ack, one clock later, says the write of the clock just ended was taken
        await ctx.tick()
        if ctx.get(dut.ack):
            break
    ctx.set(dut.we, 0)


async def _read(ctx, dut, addr) -> int:
    ctx.set(dut.addr, addr)
    ctx.set(dut.re, 1)
    await ctx.tick()
    ctx.set(dut.re, 0)
    return ctx.get(dut.rdata)


def test_rates_clamp_and_errors() -> None:
    seen = {}

    async def tb(ctx, dut):
        ctx.set(dut.rate_wr.ready, 1)
        ctx.set(dut.counters[1], 1234)
        seen["id"] = await _read(ctx, dut, REG_ID)
        seen["counter1"] = await _read(ctx, dut, REG_COUNTER0 + 1)
        await _write(ctx, dut, REG_QP_SEL, 5)
        await _write(ctx, dut, REG_QP_RATE, LINE // 3)
        seen["write1"] = (ctx.get(dut.rate_wr.payload.qp), ctx.get(dut.rate_wr.payload.rate))
        seen["err0"] = await _read(ctx, dut, REG_ERR)
        await _write(ctx, dut, REG_QP_SEL, 16)              # rejected: keeps 5
        seen["qp_sel"] = await _read(ctx, dut, REG_QP_SEL)
        await _write(ctx, dut, REG_QP_RATE, LINE + 1)       # clamped
        seen["write2"] = (ctx.get(dut.rate_wr.payload.qp), ctx.get(dut.rate_wr.payload.rate))
        await _write(ctx, dut, REG_ID, 0)                   # read-only
        seen["err1"] = await _read(ctx, dut, REG_ERR)
        await _write(ctx, dut, REG_ERR, ERR_QP | ERR_ADDR)  # write 1 to clear
        seen["err2"] = await _read(ctx, dut, REG_ERR)

    _run(tb)
    assert seen["id"] == CSR_ID and seen["counter1"] == 1234
    assert seen["write1"] == (5, LINE // 3) and seen["err0"] == 0
    assert seen["qp_sel"] == 5
    assert seen["write2"] == (5, LINE)
    assert seen["err1"] == ERR_QP | ERR_CLAMP | ERR_ADDR
    assert seen["err2"] == ERR_CLAMP


def test_template_words_reach_tmpl_wr_in_wire_order() -> None:
    """TMPL words staged big-endian come out on tmpl_wr as the header bytes (byte 0 in bits 0..7) for QP_SEL, held
    until taken; bus writes wait meanwhile; without template_bytes the words are unmapped (ERR_ADDR)."""
    header = bytes(range(0x30, 0x30 + 54))
    seen = {}
    dut = CsrBank(n_qps=16, line_rate_reg=LINE, n_counters=2, template_bytes=len(header))
    sim = Simulator(dut)
    sim.add_clock(2.5e-9)

    async def bench(ctx) -> None:
        await _write(ctx, dut, REG_QP_SEL, 9)
        for k, (word,) in enumerate(struct.iter_unpack(">I", header + b"\0\0")):
            await _write(ctx, dut, REG_TMPL0 + k, word)
        await _write(ctx, dut, REG_TMPL_WR, 0)
        ctx.set(dut.addr, REG_QP_SEL)   # held off while tmpl_wr waits
        ctx.set(dut.wdata, 3)
        ctx.set(dut.we, 1)
        for _ in range(4):
            await ctx.tick()
            seen.setdefault("acks", []).append(ctx.get(dut.ack))
        seen["valid"], seen["qp"] = ctx.get(dut.tmpl_wr.valid), ctx.get(dut.tmpl_wr.payload.qp)
        seen["hdr"] = ctx.get(dut.tmpl_wr.payload.hdr)
        ctx.set(dut.tmpl_wr.ready, 1)
        await ctx.tick()
        ctx.set(dut.tmpl_wr.ready, 0)
        await ctx.tick()
        ctx.set(dut.we, 0)
        seen["after"] = ctx.get(dut.tmpl_wr.valid)
        seen["qp_sel"] = await _read(ctx, dut, REG_QP_SEL)

    sim.add_testbench(bench)
    sim.run()
    assert seen["acks"] == [0, 0, 0, 0] and seen["valid"] == 1 and seen["qp"] == 9 and seen["after"] == 0
    assert seen["hdr"].to_bytes(len(header), "little") == header
    assert seen["qp_sel"] == 3

    plain = {}

    async def unmapped(ctx, dut) -> None:
        await _write(ctx, dut, REG_TMPL0, 1)
        plain["err"] = await _read(ctx, dut, REG_ERR)

    _run(unmapped)
    assert plain["err"] == ERR_ADDR
