"""DCQCN notification point: at most one CNP request per QP per ``cnp_interval_ns``, as ``sw.cc.DcqcnNp``.

A CE-marked RoCE packet for local QP ``qp`` arrives on ``ce``; a two-stage read-modify-write of that QP's
(seen, last CNP time) word decides, one packet per clock.  A CNP request leaves on ``cnp_req`` when the QP
never had one or ``now - last >= cnp_interval_ns``.  After reset one pass of n_qps clocks clears the memory.
With ``runtime_cfg=True`` the interval comes from the ``cnp_interval_ns`` input (a register) instead.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.dcqcn import TIME_BITS, NsTimer
from hw.errors import HwParamError
from sw.cc import DcqcnParams

NP_STATE = data.StructLayout({"seen": unsigned(1), "last_ns": unsigned(TIME_BITS)})


class CnpGenerator(wiring.Component):
    """CE packets in (``ce``: qp), rate-limited CNP requests out (``cnp_req``: qp); ``trace_*`` per decision."""

    def __init__(self, *, n_qps: int = 1024, params: DcqcnParams | None = None, clk_period_ps: int = 2500,
                 fifo_depth: int = 4, runtime_cfg: bool = False) -> None:
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        self.params = params or DcqcnParams()
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.clk_period_ps = clk_period_ps
        self.fifo_depth = fifo_depth
        self.runtime_cfg = runtime_cfg
        qp = unsigned(self.qp_bits)
        super().__init__({
            **({"cnp_interval_ns": In(32)} if runtime_cfg else {}),
            "ce": In(stream.Signature(qp)),
            "cnp_req": Out(stream.Signature(qp)),
            "now_ns": Out(TIME_BITS),
            "trace_seq": Out(32),
            "trace_qp": Out(self.qp_bits),
            "trace_now_ns": Out(TIME_BITS),
            "trace_emit": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.timer = timer = NsTimer(self.clk_period_ps)
        m.d.comb += self.now_ns.eq(timer.now_ns)
        m.submodules.mem = mem = Memory(shape=NP_STATE, depth=self.n_qps, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))
        m.submodules.fifo = fifo = SyncFIFO(width=self.qp_bits, depth=self.fifo_depth)

        clear_ptr = Signal(self.qp_bits)
        cleared = Signal()
        valid1 = Signal()
        qp1 = Signal(self.qp_bits)
        with m.If(~cleared):
            m.d.comb += [wr.addr.eq(clear_ptr), wr.data.eq(0), wr.en.eq(1)]
            m.d.sync += clear_ptr.eq(clear_ptr + 1)
            with m.If(clear_ptr == self.n_qps - 1):
                m.d.sync += cleared.eq(1)

        # stage 0: accept while the FIFO can take this and the packet in stage 1
        m.d.comb += [self.ce.ready.eq(cleared & (fifo.level + valid1 < self.fifo_depth)),
                     rd.addr.eq(self.ce.payload)]
        m.d.sync += [valid1.eq(self.ce.valid & self.ce.ready), qp1.eq(self.ce.payload)]

        # stage 1: decide, write back, emit
        st = rd.data
        now = timer.now_ns
        emit = Signal()
        interval = self.cnp_interval_ns if self.runtime_cfg else self.params.cnp_interval_ns
        m.d.comb += emit.eq(valid1 & (~st.seen | (now - st.last_ns >= interval)))
        with m.If(emit):
            m.d.comb += [wr.addr.eq(qp1), wr.data.seen.eq(1), wr.data.last_ns.eq(now), wr.en.eq(1)]
        m.d.comb += [fifo.w_data.eq(qp1), fifo.w_en.eq(emit),
                     self.cnp_req.valid.eq(fifo.r_rdy), self.cnp_req.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.cnp_req.ready)]
        with m.If(valid1):
            m.d.sync += [self.trace_seq.eq(self.trace_seq + 1), self.trace_qp.eq(qp1),
                         self.trace_now_ns.eq(now), self.trace_emit.eq(emit)]
        return m
