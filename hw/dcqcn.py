"""DCQCN reaction-point engine: per-QP rate state in a BRAM, updated bit-exactly as ``sw.cc.dcqcn.DcqcnRp``.

One operation at a time walks a short FSM (read, alpha timer, rate timer, event, write back: six clocks):
QP init, a received CNP, a sent packet (byte counter), or a background sweep that fires the per-QP alpha and
rate-increase timers.  Sweeps alternate with events, so every QP is visited at least every ``12 * n_qps``
clocks; the timer periods must be longer than that, which makes "at most one expiry per timer per visit"
exact and the lazy timers of the model equal to the swept ones here.  Every new current rate goes out on
``rate_wr`` converted to limiter units by ``sw.cc.RateToIncrement``; ``trace`` shows each state change for
the scoreboard.  A QP is idle (no timers, no rate writes) until its ``init``; like every BRAM, the state
memory is zero only at configuration, so a reset of the engine must be followed by ``init`` of each QP.
With ``runtime_cfg=True`` the DCQCN constants come from the ``cfg`` input (a register bank) instead of being
built in; a new value applies from the next event of each QP (deadlines already set keep their time).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from sw.cc import DcqcnParams, RateToIncrement
from sw.cc.dcqcn import STAGE_COUNTER_MAX
from sw.cc.fixedpoint import ALPHA_FRAC_BITS, ALPHA_ONE

TIME_BITS = 64
OPS_CLOCKS = 6
KIND_INIT, KIND_CNP, KIND_SENT, KIND_TIMER = range(4)

RP_STATE = data.StructLayout({
    "rc_kbps": unsigned(32),
    "rt_kbps": unsigned(32),
    "alpha_q16": unsigned(ALPHA_FRAC_BITS + 1),
    "t_count": unsigned(8),
    "bc_count": unsigned(8),
    "bytes_acc": unsigned(32),
    "next_alpha_ns": unsigned(TIME_BITS),
    "next_rate_ns": unsigned(TIME_BITS),
    "last_stage": unsigned(2),
    "active": unsigned(1),
})

DCQCN_CFG = data.StructLayout({
    "line_rate_kbps": unsigned(32),
    "min_rate_kbps": unsigned(32),
    "g_shift": unsigned(5),
    "alpha_init_q16": unsigned(ALPHA_FRAC_BITS + 1),
    "alpha_timer_ns": unsigned(32),
    "rate_timer_ns": unsigned(32),
    "byte_counter_bytes": unsigned(32),
    "fast_recovery_stages": unsigned(8),
    "rate_ai_kbps": unsigned(32),
    "rate_hai_kbps": unsigned(32),
    "clamp_target_rate": unsigned(1),
})
"""The run-time DCQCN constants (``runtime_cfg=True``): the ``DcqcnParams`` fields, at the model's widths."""


def cfg_values(params: DcqcnParams) -> dict[str, int]:
    """``DCQCN_CFG`` field values for a ``DcqcnParams`` (what a register bank programs)."""
    return {name: int(getattr(params, name)) for name, _ in DCQCN_CFG}


class NsTimer(wiring.Component):
    """Integer-ns time of day from a clock of ``clk_period_ps``: exact, no drift (ps remainder carried).

    Timed for 400 MHz: the ps carry of each step is decided a clock ahead (``carry`` is a register), and the
    64-bit count is two 32-bit halves; the high half selects between itself and a register kept at itself + 1
    on the low half's carry out, so no path holds more than one 32-bit carry chain.  ``now_ns`` takes the same
    value every clock as a plain ``now_ns + whole + carry`` counter; ``step_ns`` is ``now_ns``'s next increment,
    ``now_hi_minus1`` the high half of ``now_ns`` minus one (both for compares split at 32 bits).
    """

    def __init__(self, clk_period_ps: int, init_ns: int = 0) -> None:
        if clk_period_ps <= 0:
            raise HwParamError(f"clk_period_ps must be > 0, not {clk_period_ps}")
        if not 0 <= init_ns < 1 << TIME_BITS:
            raise HwParamError(f"init_ns must be in 0..2**{TIME_BITS}-1, not {init_ns}")
        self.clk_period_ps = clk_period_ps
        self.init_ns = init_ns
        super().__init__({"now_ns": Out(TIME_BITS), "step_ns": Out(range(self.clk_period_ps // 1000 + 2)),
                          "now_hi_minus1": Out(TIME_BITS - TIME_BITS // 2)})

    def elaborate(self, platform):
        m = Module()
        whole, part = divmod(self.clk_period_ps, 1000)
        half = TIME_BITS // 2
        # rem_ps is the remainder after the step now being taken, carry that step's extra ns
        rem_ps = Signal(range(1000 + part), init=part)
        carry = Signal()
        carry_next = rem_ps >= 1000 - part
        m.d.sync += [rem_ps.eq(Mux(carry_next, rem_ps + part - 1000, rem_ps + part)), carry.eq(carry_next)]
        hi_init = self.init_ns >> half
        lo, hi = Signal(half, init=self.init_ns & ((1 << half) - 1)), Signal(TIME_BITS - half, init=hi_init)
        hi_plus1 = Signal(TIME_BITS - half, init=(hi_init + 1) & ((1 << (TIME_BITS - half)) - 1))
        lo_sum = Signal(half + 1)
        m.d.comb += [self.step_ns.eq(whole + carry), lo_sum.eq(lo + self.step_ns), self.now_ns.eq(Cat(lo, hi))]
        m.d.sync += lo.eq(lo_sum[:half])
        hi_minus1 = Signal(TIME_BITS - half, init=(hi_init - 1) & ((1 << (TIME_BITS - half)) - 1))
        m.d.comb += self.now_hi_minus1.eq(hi_minus1)
        with m.If(lo_sum[half]):
            m.d.sync += [hi.eq(hi_plus1), hi_plus1.eq(hi_plus1 + 1), hi_minus1.eq(hi)]
        return m


class DcqcnRpEngine(wiring.Component):
    """DCQCN reaction points of ``n_qps`` QPs; constants from a ``DcqcnParams``.

    Inputs: ``init`` (qp) resets a QP to line rate; ``cnp`` (qp) a received CNP; ``sent`` (qp, bytes) a packet
    that left.  Outputs: ``rate_wr`` (qp, limiter increment); ``trace_*`` one record per state change.
    """

    def __init__(self, *, n_qps: int = 1024, params: DcqcnParams | None = None, clk_period_ps: int = 2500,
                 rate_conv: RateToIncrement | None = None, mtu_bytes: int = 4096,
                 runtime_cfg: bool = False) -> None:
        p = params or DcqcnParams()
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        visit_ns = 2 * OPS_CLOCKS * n_qps * clk_period_ps / 1000
        for name in ("alpha_timer_ns", "rate_timer_ns"):
            if getattr(p, name) <= visit_ns:
                raise HwParamError(f"dcqcn.{name}={getattr(p, name)}: must exceed the sweep interval "
                                   f"{visit_ns:.0f} ns of {n_qps} QPs at {clk_period_ps} ps/clock")
        if p.byte_counter_bytes <= mtu_bytes:
            raise HwParamError(f"dcqcn.byte_counter_bytes={p.byte_counter_bytes}: must exceed the MTU "
                               f"({mtu_bytes} bytes), one packet counts at most one expiry")
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.params = p
        self.min_timer_ns = int(visit_ns) + 1
        """Shortest alpha / rate timer period the sweep serves exactly (for a register bank's range)."""
        self.mtu_bytes = mtu_bytes
        self.runtime_cfg = runtime_cfg
        self.clk_period_ps = clk_period_ps
        self.rate_conv = rate_conv or RateToIncrement(clk_hz=round(1e12 / clk_period_ps))
        qp = unsigned(self.qp_bits)
        cfg_port = {"cfg": In(DCQCN_CFG)} if runtime_cfg else {}
        super().__init__({
            **cfg_port,
            "init": In(stream.Signature(qp)),
            "cnp": In(stream.Signature(qp)),
            "sent": In(stream.Signature(data.StructLayout({"qp": qp, "bytes": unsigned(16)}))),
            "rate_wr": Out(stream.Signature(data.StructLayout({"qp": qp, "rate": unsigned(32)}))),
            "now_ns": Out(TIME_BITS),
            "trace_seq": Out(32),
            "trace_kind": Out(2),
            "trace_qp": Out(self.qp_bits),
            "trace_now_ns": Out(TIME_BITS),
            "trace_bytes": Out(16),
            "trace_state": Out(RP_STATE),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        if self.runtime_cfg:
            c = self.cfg
            g, f, line, min_rate = c.g_shift, c.fast_recovery_stages, c.line_rate_kbps, c.min_rate_kbps
            rate_ai, rate_hai, alpha_init = c.rate_ai_kbps, c.rate_hai_kbps, c.alpha_init_q16
            alpha_timer, rate_timer, byte_counter = c.alpha_timer_ns, c.rate_timer_ns, c.byte_counter_bytes
            clamp_target, alpha_g = c.clamp_target_rate, Const(ALPHA_ONE, ALPHA_FRAC_BITS + 1) >> g
        else:
            g, f, line, min_rate = p.g_shift, p.fast_recovery_stages, p.line_rate_kbps, p.min_rate_kbps
            rate_ai, rate_hai, alpha_init = p.rate_ai_kbps, p.rate_hai_kbps, p.alpha_init_q16
            alpha_timer, rate_timer, byte_counter = p.alpha_timer_ns, p.rate_timer_ns, p.byte_counter_bytes
            clamp_target, alpha_g = p.clamp_target_rate, ALPHA_ONE >> g
        m.submodules.timer = timer = NsTimer(self.clk_period_ps)
        m.d.comb += self.now_ns.eq(timer.now_ns)

        m.submodules.mem = mem = Memory(shape=RP_STATE, depth=self.n_qps, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))

        kind = Signal(2)
        qp = Signal(self.qp_bits)
        nbytes = Signal(16)
        t = Signal(TIME_BITS)
        s = Signal(RP_STATE)
        changed = Signal()
        sweep_ptr = Signal(self.qp_bits)
        sweep_turn = Signal()
        # the timers' due compares (64 bits) are made a state ahead of their use, off the update paths
        alpha_due, rate_due = Signal(), Signal()

        def increase(st, t_count, bc_count):
            """The DCQCN increase rule on working state ``st`` with the given stage counters."""
            hi = Mux(t_count > bc_count, t_count, bc_count)
            lo = Mux(t_count > bc_count, bc_count, t_count)
            rt_new = Signal(32)
            rt_ai = st.rt_kbps + rate_ai
            rt_hai = st.rt_kbps + rate_hai
            stage = Signal(2)
            with m.If(hi <= f):
                m.d.comb += [rt_new.eq(st.rt_kbps), stage.eq(1)]
            with m.Elif(lo <= f):
                m.d.comb += [rt_new.eq(Mux(rt_ai > line, line, rt_ai)), stage.eq(2)]
            with m.Else():
                m.d.comb += [rt_new.eq(Mux(rt_hai > line, line, rt_hai)), stage.eq(3)]
            return rt_new, (rt_new + st.rc_kbps + 1) >> 1, stage

        def sat_inc(v):
            return Mux(v == STAGE_COUNTER_MAX, v, v + 1)

        with m.FSM():
            with m.State("IDLE"):
                events = self.init.valid | self.cnp.valid | self.sent.valid
                m.d.sync += [t.eq(timer.now_ns), changed.eq(0), sweep_turn.eq(~sweep_turn)]
                with m.If(events & ~sweep_turn):
                    with m.If(self.init.valid):
                        m.d.comb += [self.init.ready.eq(1), rd.addr.eq(self.init.payload)]
                        m.d.sync += [kind.eq(KIND_INIT), qp.eq(self.init.payload)]
                    with m.Elif(self.cnp.valid):
                        m.d.comb += [self.cnp.ready.eq(1), rd.addr.eq(self.cnp.payload)]
                        m.d.sync += [kind.eq(KIND_CNP), qp.eq(self.cnp.payload)]
                    with m.Else():
                        m.d.comb += [self.sent.ready.eq(1), rd.addr.eq(self.sent.payload.qp)]
                        m.d.sync += [kind.eq(KIND_SENT), qp.eq(self.sent.payload.qp),
                                     nbytes.eq(self.sent.payload.bytes)]
                with m.Else():
                    m.d.comb += rd.addr.eq(sweep_ptr)
                    m.d.sync += [kind.eq(KIND_TIMER), qp.eq(sweep_ptr), sweep_ptr.eq(sweep_ptr + 1)]
                m.next = "READ"
            with m.State("READ"):
                m.d.sync += [s.eq(rd.data), alpha_due.eq(rd.data.next_alpha_ns <= t)]
                m.next = "ALPHA"
            with m.State("ALPHA"):
                m.d.sync += rate_due.eq(s.next_rate_ns <= t)  # ALPHA leaves next_rate_ns alone
                with m.If((kind != KIND_INIT) & s.active & alpha_due):
                    m.d.sync += [s.alpha_q16.eq(s.alpha_q16 - (s.alpha_q16 >> g)),
                                 s.next_alpha_ns.eq(s.next_alpha_ns + alpha_timer), changed.eq(1)]
                m.next = "RATE"
            with m.State("RATE"):
                with m.If((kind != KIND_INIT) & s.active & rate_due):
                    tc = Signal(8)
                    m.d.comb += tc.eq(sat_inc(s.t_count))
                    rt_new, rc_new, stage = increase(s, tc, s.bc_count)
                    m.d.sync += [s.t_count.eq(tc), s.rt_kbps.eq(rt_new), s.rc_kbps.eq(rc_new),
                                 s.last_stage.eq(stage), s.next_rate_ns.eq(s.next_rate_ns + rate_timer),
                                 changed.eq(1)]
                m.next = "EVENT"
            with m.State("EVENT"):
                with m.Switch(kind):
                    with m.Case(KIND_INIT):
                        m.d.sync += [s.rc_kbps.eq(line), s.rt_kbps.eq(line),
                                     s.alpha_q16.eq(alpha_init), s.t_count.eq(0), s.bc_count.eq(0),
                                     s.bytes_acc.eq(0), s.next_alpha_ns.eq(t + alpha_timer),
                                     s.next_rate_ns.eq(t + rate_timer), s.last_stage.eq(0), s.active.eq(1)]
                    with m.Case(KIND_CNP):
                        cut = (s.rc_kbps * s.alpha_q16) >> (ALPHA_FRAC_BITS + 1)
                        rc_cut = s.rc_kbps - cut
                        alpha = s.alpha_q16 - (s.alpha_q16 >> g) + alpha_g
                        if clamp_target is True:
                            m.d.sync += s.rt_kbps.eq(s.rc_kbps)
                        else:
                            with m.If(clamp_target | (s.t_count != 0)):
                                m.d.sync += s.rt_kbps.eq(s.rc_kbps)
                        m.d.sync += [s.rc_kbps.eq(Mux(rc_cut < min_rate, min_rate, rc_cut)),
                                     s.alpha_q16.eq(Mux(alpha > ALPHA_ONE, ALPHA_ONE, alpha)),
                                     s.t_count.eq(0), s.bc_count.eq(0), s.bytes_acc.eq(0),
                                     s.next_alpha_ns.eq(t + alpha_timer),
                                     s.next_rate_ns.eq(t + rate_timer)]
                    with m.Case(KIND_SENT):
                        acc = s.bytes_acc + nbytes
                        with m.If(acc >= byte_counter):
                            bc = Signal(8)
                            m.d.comb += bc.eq(sat_inc(s.bc_count))
                            rt_new, rc_new, stage = increase(s, s.t_count, bc)
                            m.d.sync += [s.bytes_acc.eq(acc - byte_counter), s.bc_count.eq(bc),
                                         s.rt_kbps.eq(rt_new), s.rc_kbps.eq(rc_new), s.last_stage.eq(stage)]
                        with m.Else():
                            m.d.sync += s.bytes_acc.eq(acc)
                with m.If(kind != KIND_TIMER):
                    m.d.sync += changed.eq(1)
                m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [wr.addr.eq(qp), wr.data.eq(s), wr.en.eq(1)]
                with m.If(changed):
                    m.d.sync += [self.trace_seq.eq(self.trace_seq + 1), self.trace_kind.eq(kind),
                                 self.trace_qp.eq(qp), self.trace_now_ns.eq(t), self.trace_bytes.eq(nbytes),
                                 self.trace_state.eq(s)]
                    m.next = "RATE_OUT"
                with m.Else():
                    m.next = "IDLE"
            with m.State("RATE_OUT"):
                conv = self.rate_conv
                m.d.comb += [self.rate_wr.valid.eq(1), self.rate_wr.payload.qp.eq(qp),
                             self.rate_wr.payload.rate.eq((s.rc_kbps * conv.mult) >> conv.mult_shift)]
                with m.If(self.rate_wr.ready):
                    m.next = "IDLE"
        return m
