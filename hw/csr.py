"""A small CSR bus for the NIC: per-QP rates for the limiter, read-only counters, run-time parameters, error flags.

Bus: one access per clock; ``addr`` (word address), ``wdata``, ``we``/``re``; ``rdata`` and ``ack`` the next
clock (a write is held off, no ``ack``, while a previous rate write or QP init waits for its consumer; a
QP_RATE read with ``rate_readback`` waits for a pending rate write, then takes two clocks).
Map (word addresses; the numbers are defined once in ``sw.cc.nic_regs``, which a host driver imports):
  0x00 ID        RO  0x53504E31 ("SPN1")
  0x01 QP_SEL    RW  QP a rate write / init / rate read goes to; values >= n_qps are rejected (ERR_QP), the
                     register keeps its value
  0x02 QP_RATE   WO  limiter increment for QP_SEL; above line rate it is clamped to line rate and ERR_CLAMP set;
                     the write goes out on ``rate_wr`` (held until the limiter takes it).  With
                     ``rate_readback`` a read returns the ``qp_rate_rd`` input (the QP's current rate).
  0x03 ERR       R/W1C  bit 0 ERR_QP, bit 1 ERR_CLAMP, bit 2 ERR_ADDR (write to a read-only or unmapped word),
                     bit 3 ERR_VALUE (a parameter write out of range was rejected; the register kept its value);
                     every clamp also pulses the ``clamped`` output for one clock (a counter's input)
  0x04+i COUNTER RO  the ``counters`` inputs, 32 bits each
  0x40 QP_INIT   WO  (with ``qp_init``) any write starts the CC state of QP_SEL afresh: ``qp_init`` carries it
  0x41+i PARAM   RW  the ``params`` table, in order: out-of-range writes are clamped (ERR_CLAMP) or rejected
                     (ERR_VALUE) as each entry says; the values drive the ``param`` output
  0x7F TMPL_WR   WO  (with ``template_bytes``) any write hands the staged header template to QP_SEL's framer
                     entry: ``tmpl_wr`` carries (QP_SEL, the staged bytes), held until the framer takes it
  0x80+k TMPL    WO  (with ``template_bytes``) staged template bytes 4k..4k+3, byte 4k in bits 31..24 (wire
                     order, big-endian words: ``struct.pack(">I", w)`` gives the bytes back); bytes past
                     ``template_bytes`` are ignored.  Staged words keep their value until rewritten
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from sw.cc.nic_regs import (
    ADDR_BITS,
    CSR_ID,
    ERR_ADDR,
    ERR_CLAMP,
    ERR_QP,
    ERR_VALUE,
    MAX_COUNTERS,
    POLICIES,
    REG_COUNTER0,
    REG_ERR,
    REG_ID,
    REG_PARAM0,
    REG_QP_INIT,
    REG_QP_RATE,
    REG_QP_SEL,
    REG_TMPL0,
    REG_TMPL_WR,
    ParamReg,
    template_words,
)


def check_params(params: Sequence[ParamReg], template_bytes: int = 0) -> None:
    """Reject an inconsistent table (bad widths, bounds, reset values or names) before building hardware."""
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise HwParamError(f"CSR params: duplicate names in {names}")
    end = REG_TMPL_WR if template_bytes else 1 << ADDR_BITS
    if REG_PARAM0 + len(params) > end:
        raise HwParamError(f"CSR params: {len(params)} entries do not fit below address {end:#x}")
    if REG_TMPL0 + template_words(template_bytes) > 1 << ADDR_BITS:
        raise HwParamError(f"CSR template_bytes {template_bytes}: more than the {ADDR_BITS}-bit address space holds")
    by_name = {p.name: p for p in params}
    for p in params:
        if not 1 <= p.width <= 32:
            raise HwParamError(f"CSR param {p.name}: width {p.width} not in 1..32")
        if p.policy not in POLICIES:
            raise HwParamError(f"CSR param {p.name}: policy {p.policy!r}, allowed {', '.join(POLICIES)}")
        bounds = []
        for bound in (p.lo, p.hi):
            if isinstance(bound, str):
                if bound not in by_name or bound == p.name:
                    raise HwParamError(f"CSR param {p.name}: bound {bound!r} is not another parameter")
                if by_name[bound].width > p.width:
                    raise HwParamError(f"CSR param {p.name}: bound {bound!r} is wider than {p.width} bits")
                bounds.append(by_name[bound].reset)
            else:
                if not 0 <= bound < 1 << p.width:
                    raise HwParamError(f"CSR param {p.name}: bound {bound} does not fit {p.width} bits")
                bounds.append(bound)
        if not bounds[0] <= p.reset <= bounds[1]:
            raise HwParamError(f"CSR param {p.name}: reset {p.reset} outside {bounds[0]}..{bounds[1]}")


class CsrBank(wiring.Component):
    """Register file in front of the limiter and CC engines: clamps or rejects out-of-range writes, flags them."""

    def __init__(self, *, n_qps: int = 1024, line_rate_reg: int = 128 << 24, n_counters: int = 4,
                 params: Sequence[ParamReg] = (), qp_init: bool = False, rate_readback: bool = False,
                 template_bytes: int = 0) -> None:
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        if not 1 <= n_counters <= MAX_COUNTERS:
            raise HwParamError(f"n_counters must be in 1..{MAX_COUNTERS}, not {n_counters}")
        if template_bytes < 0:
            raise HwParamError(f"template_bytes must be >= 0, not {template_bytes}")
        check_params(params, template_bytes)
        self.template_bytes = template_bytes
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.line_rate_reg = line_rate_reg
        self.n_counters = n_counters
        self.params = tuple(params)
        self.has_qp_init = qp_init
        self.rate_readback = rate_readback
        qp = unsigned(self.qp_bits)
        extra = {}
        if self.params:
            extra["param"] = Out(data.StructLayout({p.name: unsigned(p.width) for p in self.params}))
        if qp_init:
            extra["qp_init"] = Out(stream.Signature(qp))
        if rate_readback:
            extra["qp_sel"] = Out(self.qp_bits)
            extra["qp_rate_rd"] = In(32)
        if template_bytes:
            extra["tmpl_wr"] = Out(stream.Signature(data.StructLayout({"qp": qp,
                                                                       "hdr": unsigned(8 * template_bytes)})))
        super().__init__({
            "addr": In(ADDR_BITS), "wdata": In(32), "we": In(1), "re": In(1),
            "rdata": Out(32), "ack": Out(1),
            "counters": In(data.ArrayLayout(32, n_counters)),
            "rate_wr": Out(stream.Signature(data.StructLayout({"qp": qp, "rate": unsigned(32)}))),
            "clamped": Out(1),
            **extra,
        })

    def param_addr(self, name: str) -> int:
        """Word address of the parameter register ``name``."""
        for i, p in enumerate(self.params):
            if p.name == name:
                return REG_PARAM0 + i
        raise HwParamError(f"no parameter register {name!r}; known: {', '.join(p.name for p in self.params)}")

    def elaborate(self, platform):
        m = Module()
        qp_sel = Signal(self.qp_bits)
        err = Signal(4)
        regs = {p.name: Signal(p.width, init=p.reset, name=f"param_{p.name}") for p in self.params}
        for name, reg in regs.items():
            m.d.comb += getattr(self.param, name).eq(reg)
        if self.rate_readback:
            m.d.comb += self.qp_sel.eq(qp_sel)
        busy = self.rate_wr.valid
        if self.has_qp_init:
            busy = busy | self.qp_init.valid
            with m.If(self.qp_init.ready):
                m.d.sync += self.qp_init.valid.eq(0)
        n_tmpl = template_words(self.template_bytes)
        staged = [Signal(32, name=f"tmpl{k}") for k in range(n_tmpl)]
        if n_tmpl:
            busy = busy | self.tmpl_wr.valid
            with m.If(self.tmpl_wr.ready):
                m.d.sync += self.tmpl_wr.valid.eq(0)
            wire = [w[8 * (3 - b):8 * (4 - b)] for w in staged for b in range(4)]   # byte 4k + b of word k
            m.d.comb += self.tmpl_wr.payload.hdr.eq(Cat(*wire[:self.template_bytes]))
        hold = self.we & busy
        if self.rate_readback:
            # a rate read waits for a pending rate write and one clock more (the rate memory's read latency)
            rate_rd = self.re & (self.addr == REG_QP_RATE)
            rd_wait = Signal()
            with m.If(rate_rd & ~busy):
                m.d.sync += rd_wait.eq(~rd_wait)
            hold = hold | (rate_rd & (busy | ~rd_wait))
        m.d.sync += [self.ack.eq((self.we | self.re) & ~hold), self.clamped.eq(0)]
        # a write's error bits land in ``err`` one clock later (err_set), off the bounds compares; ERR reads
        # and W1C writes see them at once
        err_set = Signal(4)
        m.d.sync += [err_set.eq(0), err.eq(err | err_set)]
        with m.If(self.rate_wr.ready):
            m.d.sync += self.rate_wr.valid.eq(0)

        def bound(b):
            return regs[b] if isinstance(b, str) else b

        with m.If(self.we & ~busy):
            with m.Switch(self.addr):
                with m.Case(REG_QP_SEL):
                    with m.If(self.wdata < self.n_qps):
                        m.d.sync += qp_sel.eq(self.wdata)
                    with m.Else():
                        m.d.sync += err_set.eq(ERR_QP)
                with m.Case(REG_QP_RATE):
                    clamp = self.wdata > self.line_rate_reg
                    m.d.sync += [self.rate_wr.valid.eq(1), self.rate_wr.payload.qp.eq(qp_sel),
                                 self.rate_wr.payload.rate.eq(Mux(clamp, self.line_rate_reg, self.wdata))]
                    with m.If(clamp):
                        m.d.sync += [err_set.eq(ERR_CLAMP), self.clamped.eq(1)]
                with m.Case(REG_ERR):
                    m.d.sync += err.eq((err | err_set) & ~self.wdata[:4])
                if self.has_qp_init:
                    with m.Case(REG_QP_INIT):
                        m.d.sync += [self.qp_init.valid.eq(1), self.qp_init.payload.eq(qp_sel)]
                if n_tmpl:
                    with m.Case(REG_TMPL_WR):
                        m.d.sync += [self.tmpl_wr.valid.eq(1), self.tmpl_wr.payload.qp.eq(qp_sel)]
                    for k, word in enumerate(staged):
                        with m.Case(REG_TMPL0 + k):
                            m.d.sync += word.eq(self.wdata)
                for i, p in enumerate(self.params):
                    with m.Case(REG_PARAM0 + i):
                        lo, hi = bound(p.lo), bound(p.hi)
                        below, above = self.wdata < lo, self.wdata > hi
                        with m.If(~below & ~above):
                            m.d.sync += regs[p.name].eq(self.wdata)
                        with m.Else():
                            if p.policy == "clamp":
                                m.d.sync += [regs[p.name].eq(Mux(below, lo, hi)), err_set.eq(ERR_CLAMP),
                                             self.clamped.eq(1)]
                            else:
                                m.d.sync += err_set.eq(ERR_VALUE)
                with m.Default():
                    m.d.sync += err_set.eq(ERR_ADDR)
        # reads: every readable word in a table indexed by the address, one balanced multiplexer tree over the
        # address bits (no per-word address compare, no index subtraction): unmapped words read 0
        table: list = [0] * (REG_PARAM0 + len(self.params))
        table[REG_ID], table[REG_QP_SEL], table[REG_ERR] = CSR_ID, qp_sel, err | err_set
        if self.rate_readback:
            table[REG_QP_RATE] = self.qp_rate_rd
        for i in range(self.n_counters):
            table[REG_COUNTER0 + i] = self.counters[i]
        for i, p in enumerate(self.params):
            table[REG_PARAM0 + i] = regs[p.name]
        sel_bits = (len(table) - 1).bit_length()
        word = mux_tree([Value.cast(v) for v in table], self.addr[:sel_bits])
        with m.If(self.re):
            m.d.sync += self.rdata.eq(Mux(self.addr[sel_bits:].any(), 0, word))
        return m


def mux_tree(values: Sequence[Value], sel: Value) -> Value:
    """``values[sel]`` (0 beyond the list) as a balanced tree of 2:1 multiplexers, low select bit at the leaves."""
    level = list(values) + [Const(0, 1)] * ((1 << len(sel)) - len(values))
    for bit in sel:
        level = [Mux(bit, level[i + 1], level[i]) for i in range(0, len(level), 2)]
    return level[0]
