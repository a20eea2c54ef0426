# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of the NIC CC top level's register interface: every parameter's clamp/reject rule."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

import hw.nic_top as nic_top
from hw.csr import ERR_CLAMP, ERR_VALUE, REG_ERR, REG_PARAM0, REG_QP_INIT, REG_QP_RATE, REG_QP_SEL, CsrBank
from hw.errors import HwParamError
from hw.nic_top import (
    CC_MODE_HPCC,
    COUNTER_ADDR,
    DEFAULT_PARAMS,
    NicCcTop,
    line_rate_kbps,
    min_timer_ns,
    nic_params,
    register_table,
)
from sw.cc import DcqcnParams

pytestmark = pytest.mark.sim

LINE_KBPS = line_rate_kbps(64, 2500)
TIMER_MIN = min_timer_ns(8, 2500)
PARAMS = nic_params(line_kbps=LINE_KBPS, timer_min_ns=TIMER_MIN, mtu_bytes=64)
U32 = (1 << 32) - 1


def _sim(dut, bench) -> None:
    sim = Simulator(dut)
    sim.add_clock(2.5e-9)
    sim.add_testbench(bench)
    sim.run()


async def _access(ctx, bus, addr: int, value: int | None) -> int:
    """One CSR access on ``bus`` = (addr, wdata, we, re, rdata, ack) signals; returns rdata of a read."""
    a, wdata, we, re, rdata, ack = bus
    ctx.set(a, addr)
    if value is None:
        ctx.set(re, 1)
    else:
        ctx.set(wdata, value)
        ctx.set(we, 1)
    while True:
        await ctx.tick()
        if ctx.get(ack):
            break
    ctx.set(we, 0)
    ctx.set(re, 0)
    return ctx.get(rdata)


def test_docstring_table_is_the_register_table() -> None:
    counters, params = register_table(DEFAULT_PARAMS)
    for line in counters + params:
        assert line in nic_top.__doc__, line
    assert [p.name for p in PARAMS] == [p.name for p in DEFAULT_PARAMS]


def test_reset_values_are_a_valid_model_configuration() -> None:
    top = NicCcTop(data_width=64, n_qps=8, mtu_bytes=64, burst_bytes=128)
    assert top.dcqcn_reset == DcqcnParams(line_rate_kbps=LINE_KBPS, alpha_timer_ns=55_000, rate_timer_ns=55_000)
    assert top.timer_min_ns == TIMER_MIN == 401  # 2 * (OPS_CLOCKS 9 + RATE_OUT 1) * 8 QPs * 2.5 ns + 1
    with pytest.raises(HwParamError, match="mtu_bytes"):
        NicCcTop(data_width=64, n_qps=8, mtu_bytes=70_000, burst_bytes=70_000)


def test_the_framer_comes_with_512_bits() -> None:
    """From 512 bits tx_m_axis carries framed RoCEv2 (templates in the CSR map, MTU a multiple of 4); below, the
    scheduler's beats (no template words)."""
    wide = NicCcTop(data_width=512, n_qps=8, mtu_bytes=256, burst_bytes=1024)
    narrow = NicCcTop(data_width=64, n_qps=8, mtu_bytes=66, burst_bytes=128)
    assert wide.framer and wide.csr.template_bytes == 54 and wide.tx_frame.pattern_payload
    assert not narrow.framer and narrow.csr.template_bytes == 0 and narrow.tx_frame is None
    with pytest.raises(HwParamError, match="mtu_bytes must be a multiple of 4"):
        NicCcTop(data_width=512, n_qps=8, mtu_bytes=258, burst_bytes=1024)


def _cases() -> list[tuple[str, int, int, int]]:
    """(param, value written, value expected after, error bits expected) for every register and bound."""
    cases = []
    for p in PARAMS:
        lo = p.lo if isinstance(p.lo, int) else {q.name: q.reset for q in PARAMS}[p.lo]
        hi = p.hi if isinstance(p.hi, int) else {q.name: q.reset for q in PARAMS}[p.hi]
        cases.append((p.name, lo, lo, 0))
        cases.append((p.name, hi, hi, 0))
        if lo > 0:
            cases.append((p.name, lo - 1, lo if p.policy == "clamp" else p.reset,
                          ERR_CLAMP if p.policy == "clamp" else ERR_VALUE))
        if hi < U32:
            cases.append((p.name, hi + 1, hi if p.policy == "clamp" else p.reset,
                          ERR_CLAMP if p.policy == "clamp" else ERR_VALUE))
    return cases


def test_every_parameter_clamps_or_rejects_as_its_table_row_says() -> None:
    dut = CsrBank(n_qps=8, line_rate_reg=8 << 24, n_counters=2, params=PARAMS, qp_init=True, rate_readback=True)
    bus = (dut.addr, dut.wdata, dut.we, dut.re, dut.rdata, dut.ack)
    seen = []

    async def bench(ctx):
        ctx.set(dut.rate_wr.ready, 1)
        ctx.set(dut.qp_init.ready, 1)
        for name, value, _, _ in _cases():
            addr = dut.param_addr(name)
            reset = next(p.reset for p in PARAMS if p.name == name)
            await _access(ctx, bus, addr, reset)
            await _access(ctx, bus, REG_ERR, 0xF)
            await _access(ctx, bus, addr, value)
            seen.append((await _access(ctx, bus, addr, None), await _access(ctx, bus, REG_ERR, None),
                         ctx.get(getattr(dut.param, name))))

    _sim(dut, bench)
    cases = _cases()
    assert len(cases) == len(seen) >= 40
    for (name, value, want, want_err), (got, err, out) in zip(cases, seen, strict=True):
        assert (got, err, out) == (want, want_err, want), f"{name} <- {value}: got {got} err {err}"


def test_cc_mode_accepts_hpcc_rejects_3_and_bounds_follow_other_registers() -> None:
    """cc_mode takes none/dcqcn/hpcc; 3 is rejected (ERR_VALUE, value kept); min/line rate bound each other."""
    dut = CsrBank(n_qps=8, line_rate_reg=8 << 24, n_counters=2, params=PARAMS)
    bus = (dut.addr, dut.wdata, dut.we, dut.re, dut.rdata, dut.ack)
    seen = {}

    async def bench(ctx):
        await _access(ctx, bus, dut.param_addr("cc_mode"), CC_MODE_HPCC)
        seen["hpcc"] = await _access(ctx, bus, dut.param_addr("cc_mode"), None)
        seen["hpcc_err"] = await _access(ctx, bus, REG_ERR, None)
        await _access(ctx, bus, dut.param_addr("cc_mode"), 3)
        seen["mode"] = await _access(ctx, bus, dut.param_addr("cc_mode"), None)
        seen["err"] = await _access(ctx, bus, REG_ERR, None)
        await _access(ctx, bus, dut.param_addr("line_rate_kbps"), 5_000_000)
        await _access(ctx, bus, dut.param_addr("min_rate_kbps"), 6_000_000)       # above line: clamped to it
        seen["min"] = await _access(ctx, bus, dut.param_addr("min_rate_kbps"), None)
        await _access(ctx, bus, dut.param_addr("line_rate_kbps"), 1_000)          # below min: clamped to it
        seen["line"] = await _access(ctx, bus, dut.param_addr("line_rate_kbps"), None)

    _sim(dut, bench)
    assert seen == {"hpcc": CC_MODE_HPCC, "hpcc_err": 0, "mode": CC_MODE_HPCC, "err": ERR_VALUE,
                    "min": 5_000_000, "line": 5_000_000}


def test_qp_init_writes_line_rate_and_reads_back() -> None:
    """Through the whole top: QP_INIT starts QP 3 at line rate; QP_RATE reads the limiter's rate back."""
    dut = NicCcTop(data_width=64, n_qps=8, mtu_bytes=64, burst_bytes=128)
    bus = (dut.csr_addr, dut.csr_wdata, dut.csr_we, dut.csr_re, dut.csr_rdata, dut.csr_ack)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.tx_m_axis.tready, 1)
        ctx.set(dut.rx_m_axis.tready, 1)
        ctx.set(dut.cnp_req.ready, 1)
        await ctx.tick().repeat(20)
        await _access(ctx, bus, REG_QP_SEL, 3)
        await _access(ctx, bus, REG_QP_INIT, 1)
        await ctx.tick().repeat(40)
        seen["rate3"] = await _access(ctx, bus, REG_QP_RATE, None)
        seen["updates"] = await _access(ctx, bus, COUNTER_ADDR["RATE_UPDATES"], None)
        await _access(ctx, bus, REG_QP_RATE, 12345)
        seen["csr_rate3"] = await _access(ctx, bus, REG_QP_RATE, None)
        await _access(ctx, bus, REG_QP_SEL, 2)
        seen["rate2"] = await _access(ctx, bus, REG_QP_RATE, None)

    _sim(dut, bench)
    assert seen == {"rate3": dut.rate_conv.increment(LINE_KBPS), "updates": 1, "csr_rate3": 12345, "rate2": 0}
    assert REG_PARAM0 == 0x41
