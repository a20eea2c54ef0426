"""DCQCN notification point: at most one CNP request per QP per ``cnp_interval_ns``, as ``sw.cc.DcqcnNp``.

A CE-marked RoCE packet for local QP ``qp`` arrives on ``ce``; a read-modify-write of that QP's (seen, last
CNP time) word decides, one packet per clock, in stages timed for 400 MHz: read; ``now - last`` split at 32
bits; decide and write back (a packet right behind one of its QP that emitted takes the one-clock gap to it
instead of its stale word); the request into the FIFO.  A CNP request leaves on ``cnp_req`` (three clocks
after ``ce``) when the QP never had one or ``now - last >= cnp_interval_ns``, ``now`` taken as the word is read.
After reset one pass of n_qps clocks clears the memory.
With ``runtime_cfg=True`` the interval comes from the ``cnp_interval_ns`` input (a register) instead.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.lib.ns_timer import TIME_BITS, NsTimer
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
        rd = mem.read_port()  # not transparent: the two decisions after a read are forwarded instead
        # three more entries than fifo_depth: room for the packets in stages 1..3 is reserved a clock ahead
        m.submodules.fifo = fifo = SyncFIFO(width=self.qp_bits, depth=self.fifo_depth + 3)

        clear_ptr = Signal(self.qp_bits)
        cleared = Signal()
        with m.If(~cleared):
            m.d.comb += [wr.addr.eq(clear_ptr), wr.data.eq(0), wr.en.eq(1)]
            m.d.sync += clear_ptr.eq(clear_ptr + 1)
            with m.If(clear_ptr == self.n_qps - 1):
                m.d.sync += cleared.eq(1)
        interval = self.cnp_interval_ns if self.runtime_cfg else self.params.cnp_interval_ns
        half = TIME_BITS // 2
        valid1, valid2, emit3 = Signal(), Signal(), Signal()
        qp1, qp2, qp3 = Signal(self.qp_bits), Signal(self.qp_bits), Signal(self.qp_bits)

        # stage 0: accept while the FIFO has room for this packet and every one in stages 1..3; decided from
        # the previous clock's count (plus one for a packet accepted then), so ``ce.ready`` is a register
        room = Signal()
        in_flight = Signal(range(self.fifo_depth + 8))
        m.d.comb += [in_flight.eq(fifo.level + valid1 + valid2 + emit3),
                     self.ce.ready.eq(room), rd.addr.eq(self.ce.payload)]
        m.d.sync += [room.eq(cleared & (in_flight + 1 < fifo.depth)),
                     valid1.eq(self.ce.valid & self.ce.ready), qp1.eq(self.ce.payload)]

        # stage 1: the QP's word is read.  now - last splits at 32 bits: it is below 2**32 when the high halves
        # are equal, or now's is one more and the low halves borrow; "far" (never seen or >= 2**32 ns ago) emits.
        # The word misses the writes of the two packets ahead (stages 2 and 3): when one is of this QP and
        # emitted, the gap to it (one or two clocks) decides instead, the nearer one first
        st, now = rd.data, timer.now_ns
        t2, dlo2, borrow2, hi_eq2, hi_eq_plus1_2 = Signal(TIME_BITS), Signal(half), Signal(), Signal(), Signal()
        hit2, use_mem2, unseen2, step_ok2, steps2_ok2 = Signal(), Signal(), Signal(), Signal(), Signal()
        step_prev, step_ok1, steps2_ok1 = Signal.like(timer.step_ns), Signal(), Signal()
        dlo = Signal(half + 1)
        m.d.comb += dlo.eq(now[:half] - st.last_ns[:half])
        hit3 = emit3 & (qp3 == qp1)
        # step_ok1 / steps2_ok1: now - (now one / two clocks ago) >= interval
        m.d.sync += [step_prev.eq(timer.step_ns), step_ok1.eq(timer.step_ns >= interval),
                     steps2_ok1.eq(timer.step_ns + step_prev >= interval),
                     valid2.eq(valid1), qp2.eq(qp1), t2.eq(now), dlo2.eq(dlo[:half]), borrow2.eq(dlo[half]),
                     hi_eq2.eq(now[half:] == st.last_ns[half:]),
                     hi_eq_plus1_2.eq(timer.now_hi_minus1 == st.last_ns[half:]), unseen2.eq(~st.seen),
                     hit2.eq(valid2 & (qp2 == qp1)), step_ok2.eq(valid1 & step_ok1),
                     steps2_ok2.eq(valid1 & hit3 & steps2_ok1), use_mem2.eq(valid1 & ~hit3)]

        # stage 2: decide and write back
        emit, emit_prev = Signal(), Signal()
        far = unseen2 | ~(hi_eq2 | (hi_eq_plus1_2 & borrow2))
        by_gap = far | (dlo2 >= interval)
        m.d.comb += emit.eq(Mux(hit2 & emit_prev, step_ok2, steps2_ok2 | (use_mem2 & by_gap)))
        m.d.sync += emit_prev.eq(emit)
        with m.If(emit):
            m.d.comb += [wr.addr.eq(qp2), wr.data.seen.eq(1), wr.data.last_ns.eq(t2), wr.en.eq(1)]
        with m.If(valid2):
            m.d.sync += [self.trace_seq.eq(self.trace_seq + 1), self.trace_qp.eq(qp2),
                         self.trace_now_ns.eq(t2), self.trace_emit.eq(emit)]

        # stage 3: the CNP request into the FIFO
        m.d.sync += [emit3.eq(emit), qp3.eq(qp2)]
        m.d.comb += [fifo.w_data.eq(qp3), fifo.w_en.eq(emit3),
                     self.cnp_req.valid.eq(fifo.r_rdy), self.cnp_req.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.cnp_req.ready)]
        return m
