"""cocotb test of hw.csr.CsrBank: random register traffic against a Python reference of the documented map."""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import RisingEdge
from hwsim import BlockTestbench, tb_params, tb_record

from hw.csr import CSR_ID, ERR_ADDR, ERR_CLAMP, ERR_QP, REG_COUNTER0, REG_ERR, REG_ID, REG_QP_RATE, REG_QP_SEL


@cocotb.test()
async def test_random_register_traffic(dut):
    tp = tb_params()
    n_qps, line, qp_bits = tp["n_qps"], tp["line_rate_reg"], tp["qp_bits"]
    rng = random.Random(tp.get("seed", 1))
    tb = BlockTestbench(dut)
    for sig in (dut.we, dut.re, dut.addr, dut.wdata):
        sig.value = 0
    dut.rate_wr__ready.value = 1
    counters = [rng.randrange(1 << 32) for _ in range(tp["n_counters"])]
    dut.counters.value = sum(c << (32 * i) for i, c in enumerate(counters))
    await tb.reset()
    qp_sel, err, rate_writes = 0, 0, []

    async def access(addr: int, value: int | None) -> int:
        dut.addr.value = addr
        if value is None:
            dut.re.value = 1
        else:
            dut.wdata.value = value
            dut.we.value = 1
        while True:
            await RisingEdge(dut.clk)
            if value is not None and int(dut.rate_wr__valid.value):
                raw = int(dut.rate_wr__payload.value)
                rate_writes.append((raw & ((1 << qp_bits) - 1), raw >> qp_bits))
            if int(dut.ack.value):
                break
        dut.we.value = 0
        dut.re.value = 0
        await RisingEdge(dut.clk)
        if int(dut.rate_wr__valid.value):
            raw = int(dut.rate_wr__payload.value)
            rate_writes.append((raw & ((1 << qp_bits) - 1), raw >> qp_bits))
        return int(dut.rdata.value)

    expected_writes = []
    for _ in range(tp["n_ops"]):
        op = rng.random()
        if op < 0.25:
            v = rng.choice([rng.randrange(n_qps), rng.randrange(n_qps, 1 << 32)])
            await access(REG_QP_SEL, v)
            if v < n_qps:
                qp_sel = v
            else:
                err |= ERR_QP
        elif op < 0.5:
            v = rng.choice([rng.randrange(line + 1), rng.randrange(line + 1, 1 << 32)])
            await access(REG_QP_RATE, v)
            expected_writes.append((qp_sel, min(v, line)))
            if v > line:
                err |= ERR_CLAMP
        elif op < 0.6:
            v = rng.randrange(8)
            await access(REG_ERR, v)
            err &= ~v
        elif op < 0.65:
            await access(rng.choice([REG_ID, REG_COUNTER0, 63]), 0)
            err |= ERR_ADDR
        else:
            addr = rng.choice([REG_ID, REG_QP_SEL, REG_ERR] + [REG_COUNTER0 + i for i in range(len(counters))])
            got = await access(addr, None)
            want = {REG_ID: CSR_ID, REG_QP_SEL: qp_sel, REG_ERR: err}.get(addr)
            if want is None:
                want = counters[addr - REG_COUNTER0]
            assert got == want, f"read of register {addr}: {got:#x} != {want:#x}"
    tb_record(rate_writes=len(rate_writes))
    assert rate_writes == expected_writes, f"rate writes {rate_writes[:5]} != {expected_writes[:5]}"
