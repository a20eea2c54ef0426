"""A small CSR bus for the NIC: per-QP rates for the limiter, read-only counters, sticky error flags.

Bus: one access per clock; ``addr`` (word address), ``wdata``, ``we``/``re``; ``rdata`` and ``ack`` the next
clock.  Map (word addresses):
  0 ID        RO  0x53504E31 ("SPN1")
  1 QP_SEL    RW  QP a rate write goes to; values >= n_qps are rejected (ERR_QP), the register keeps its value
  2 QP_RATE   WO  limiter increment for QP_SEL; above line rate it is clamped to line rate and ERR_CLAMP set;
                  the write goes out on ``rate_wr`` (held until the limiter takes it)
  3 ERR       R/W1C  bit 0 ERR_QP, bit 1 ERR_CLAMP, bit 2 ERR_ADDR (write to a read-only or unmapped word)
  4+i COUNTER RO  the ``counters`` inputs, 32 bits each
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError

CSR_ID = 0x53504E31
REG_ID, REG_QP_SEL, REG_QP_RATE, REG_ERR, REG_COUNTER0 = range(5)
ERR_QP, ERR_CLAMP, ERR_ADDR = 1, 2, 4


class CsrBank(wiring.Component):
    """Register file in front of the limiter: clamps or rejects out-of-range writes and flags them."""

    def __init__(self, *, n_qps: int = 1024, line_rate_reg: int = 128 << 24, n_counters: int = 4) -> None:
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        if not 1 <= n_counters <= 60:
            raise HwParamError(f"n_counters must be in 1..60, not {n_counters}")
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.line_rate_reg = line_rate_reg
        self.n_counters = n_counters
        super().__init__({
            "addr": In(6), "wdata": In(32), "we": In(1), "re": In(1),
            "rdata": Out(32), "ack": Out(1),
            "counters": In(data.ArrayLayout(32, n_counters)),
            "rate_wr": Out(stream.Signature(data.StructLayout({
                "qp": unsigned(self.qp_bits), "rate": unsigned(32)}))),
        })

    def elaborate(self, platform):
        m = Module()
        qp_sel = Signal(self.qp_bits)
        err = Signal(3)
        busy = self.rate_wr.valid
        m.d.sync += self.ack.eq((self.we | self.re) & ~(self.we & busy))
        with m.If(self.rate_wr.ready):
            m.d.sync += self.rate_wr.valid.eq(0)
        with m.If(self.we & ~busy):
            with m.Switch(self.addr):
                with m.Case(REG_QP_SEL):
                    with m.If(self.wdata < self.n_qps):
                        m.d.sync += qp_sel.eq(self.wdata)
                    with m.Else():
                        m.d.sync += err.eq(err | ERR_QP)
                with m.Case(REG_QP_RATE):
                    clamp = self.wdata > self.line_rate_reg
                    m.d.sync += [self.rate_wr.valid.eq(1), self.rate_wr.payload.qp.eq(qp_sel),
                                 self.rate_wr.payload.rate.eq(Mux(clamp, self.line_rate_reg, self.wdata))]
                    with m.If(clamp):
                        m.d.sync += err.eq(err | ERR_CLAMP)
                with m.Case(REG_ERR):
                    m.d.sync += err.eq(err & ~self.wdata[:3])
                with m.Default():
                    m.d.sync += err.eq(err | ERR_ADDR)
        counters = Array(self.counters[i] for i in range(self.n_counters))
        with m.If(self.re):
            with m.Switch(self.addr):
                with m.Case(REG_ID):
                    m.d.sync += self.rdata.eq(CSR_ID)
                with m.Case(REG_QP_SEL):
                    m.d.sync += self.rdata.eq(qp_sel)
                with m.Case(REG_ERR):
                    m.d.sync += self.rdata.eq(err)
                with m.Default():
                    idx = self.addr - REG_COUNTER0
                    m.d.sync += self.rdata.eq(Mux((self.addr >= REG_COUNTER0) & (idx < self.n_counters),
                                                  counters[idx[:6]], 0))
        return m
