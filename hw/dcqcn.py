"""DCQCN reaction-point engine: per-QP rate state in a BRAM, updated bit-exactly as ``sw.cc.dcqcn.DcqcnRp``.

One operation at a time walks a short FSM (``OPS_CLOCKS`` = nine clocks: read, due compares, counter stages,
the rate-timer increase, the byte-counter increase or the CNP cut, write back): QP init, a received CNP, a
sent packet (byte counter), or a background sweep that fires the per-QP alpha and rate-increase timers.  Timed
for 400 MHz (<= 6 logic levels): at most one 32-bit carry chain per clock, 64-bit deadlines as two halves with
a registered carry, the increase's mean as three sums chosen by registered flags.  Sweeps alternate with
events, so every QP is visited at least every ``2 * OP_WORST_CLOCKS * n_qps`` clocks (an operation that changes
a rate spends one more clock in RATE_OUT); the timer periods must be
longer than that, which makes "at most one expiry per timer per visit" exact and the lazy timers of the model
equal to the swept ones here.  Every new current rate goes out on
``rate_wr`` converted to limiter units by ``sw.cc.RateToIncrement`` (two clocks after RATE_OUT: the conversion's
sum is registered in two steps); ``trace`` shows each state change for
the scoreboard.  A QP is idle (no timers, no rate writes) until its ``init``; like every BRAM, the state
memory is zero only at configuration, so a reset of the engine must be followed by ``init`` of each QP.
With ``runtime_cfg=True`` the DCQCN constants come from the ``cfg`` input (a register bank) instead of being
built in; a new value applies from the next event of each QP (deadlines already set keep their time).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.lib.ns_timer import TIME_BITS, NsTimer
from sw.cc import DcqcnParams, RateToIncrement
from sw.cc.dcqcn import STAGE_COUNTER_MAX
from sw.cc.fixedpoint import ALPHA_FRAC_BITS, ALPHA_ONE

OPS_CLOCKS = 9
OP_WORST_CLOCKS = OPS_CLOCKS + 1
"""Clocks of an operation that changes a rate: the FSM plus RATE_OUT (an unready ``rate_wr`` adds more)."""


def sweep_interval_ns(n_qps: int, clk_period_ps: int) -> float:
    """Longest time between two sweep visits of one QP (sweeps alternate with events, each op at its worst)."""
    return 2 * OP_WORST_CLOCKS * n_qps * clk_period_ps / 1000
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
        visit_ns = sweep_interval_ns(n_qps, clk_period_ps)
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
            clamp_target = c.clamp_target_rate
            # constants derived from cfg, registered (two clocks behind cfg) to keep them off the update paths
            alpha_g = Signal(ALPHA_FRAC_BITS + 1)
            d_ai, d_hai = Signal(signed(34)), Signal(signed(34))
            lm1_ai, lm1_hai = Signal(33), Signal(33)
            m.d.sync += [alpha_g.eq(Const(ALPHA_ONE, ALPHA_FRAC_BITS + 1) >> g),
                         d_ai.eq(line + 1 - rate_ai), d_hai.eq(line + 1 - rate_hai),
                         lm1_ai.eq(Mux(d_ai < 0, 0, d_ai)), lm1_hai.eq(Mux(d_hai < 0, 0, d_hai))]
        else:
            g, f, line, min_rate = p.g_shift, p.fast_recovery_stages, p.line_rate_kbps, p.min_rate_kbps
            rate_ai, rate_hai, alpha_init = p.rate_ai_kbps, p.rate_hai_kbps, p.alpha_init_q16
            alpha_timer, rate_timer, byte_counter = p.alpha_timer_ns, p.rate_timer_ns, p.byte_counter_bytes
            clamp_target, alpha_g = p.clamp_target_rate, ALPHA_ONE >> g
            lm1_ai, lm1_hai = max(0, line + 1 - rate_ai), max(0, line + 1 - rate_hai)
        m.submodules.timer = timer = NsTimer(self.clk_period_ps)
        m.d.comb += self.now_ns.eq(timer.now_ns)

        m.submodules.mem = mem = Memory(shape=RP_STATE, depth=self.n_qps, init=[])
        wr = mem.write_port()
        rd = mem.read_port()  # a write (WRITE) and the next read (IDLE) never share a clock edge

        half = TIME_BITS // 2
        kind = Signal(2)
        qp = Signal(self.qp_bits)
        nbytes = Signal(16)
        t = Signal(TIME_BITS)
        s = Signal(RP_STATE)
        sweep_ptr = Signal(self.qp_bits)
        sweep_turn = Signal()
        # IDLE & ~sweep_turn in a flip-flop (IDLE lasts one clock; sweep_turn only moves there): the clock an
        # event may be taken, so the inputs' ready (and an upstream FIFO's level) starts at a register
        ev_turn = Signal(init=1, name="ev_turn")
        is_init, is_sent = kind == KIND_INIT, kind == KIND_SENT

        # READ: compares and sums straight from the memory word
        a_hi_lt, a_hi_eq, a_lo_le = Signal(), Signal(), Signal()
        r_hi_lt, r_hi_eq, r_lo_le = Signal(), Signal(), Signal()
        acc = Signal(33)
        a_step = Signal(ALPHA_FRAC_BITS + 1)
        ta_lo, tr_lo = Signal(half + 1), Signal(half + 1)
        # S2: due flags, low halves of the deadline sums, counter compares
        alpha_due, rate_due, bc_fire = Signal(), Signal(), Signal()
        alpha_dec = Signal(ALPHA_FRAC_BITS + 1)
        na_lo, nr_lo = Signal(half + 1), Signal(half + 1)
        ta_hi, tr_hi = Signal(half), Signal(half)
        acc_sub = Signal(33)
        t_lt_f, t_le_f, bc_lt_f, bc_le_f = Signal(), Signal(), Signal(), Signal()
        t_nz = Signal()
        # S3: high halves, first (rate timer) increase set up, second (byte counter) stage
        na_hi, nr_hi = Signal(half), Signal(half)
        alpha_cur = Signal(ALPHA_FRAC_BITS + 1)
        t_new, bc_new = Signal(8), Signal(8)
        acc_new = Signal(32)
        inc1, inc2 = Signal(32), Signal(32)
        lm1, lm2 = Signal(33), Signal(33)
        clamp1, clamp2, has2 = Signal(), Signal(), Signal()
        stage1, stage2, stage_fin = Signal(2), Signal(2), Signal(2)
        changed = Signal()
        # S4..S7: the two increases and the CNP cut
        sum1, sum2 = Signal(33), Signal(33)
        over1, over2 = Signal(), Signal()
        rt1, rc1, rt2, rc2 = Signal(32), Signal(32), Signal(32), Signal(32)
        base1, base2 = Signal(32), Signal(32)
        rate_lo, rate_hi = Signal(16 + 32), Signal(16 + 32)
        p1_free, p1_load = Signal(), Signal()
        ag_plus = Signal(ALPHA_FRAC_BITS + 2)
        step2 = Signal(ALPHA_FRAC_BITS + 1)
        alpha3 = Signal(ALPHA_FRAC_BITS + 2)
        alpha_over = Signal()
        prod = Signal(32 + ALPHA_FRAC_BITS + 1)
        rc_cut = Signal(32)
        rc_low = Signal()

        def sat_inc(v):
            return Mux(v == STAGE_COUNTER_MAX, v, v + 1)

        def half_sum(a, b):
            """(a + b + 1) >> 1 for 32-bit a, b as a 31-bit add with carry in: one 32-bit carry chain."""
            return (a >> 1) + (b >> 1) + (a[0] | b[0])

        def mean_up(clamp, over, total, base, rc):
            """(rt_new + rc + 1) >> 1 for rt_new = line, total or base: three sums, then a registered-select mux."""
            return Mux(clamp, Mux(over, half_sum(Const(line, 32) if isinstance(line, int) else line, rc),
                                  half_sum(total, rc)), half_sum(base, rc))

        def stage_of(tc_le_f, bc_le):
            """Increase stage (1 fast recovery, 2 additive, 3 hyper) from 'count <= F' of both counters."""
            return Mux(tc_le_f & bc_le, 1, Mux(tc_le_f | bc_le, 2, 3))

        # ready in priority order (init, CNP, sent) on the event turn, whatever the input's own valid: a transfer
        # (valid & ready) happens exactly when the IDLE state below takes that input
        m.d.comb += [self.init.ready.eq(ev_turn), self.cnp.ready.eq(ev_turn & ~self.init.valid),
                     self.sent.ready.eq(ev_turn & ~self.init.valid & ~self.cnp.valid)]
        m.d.sync += ev_turn.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                events = self.init.valid | self.cnp.valid | self.sent.valid
                m.d.sync += [t.eq(timer.now_ns), sweep_turn.eq(~sweep_turn)]
                with m.If(events & ~sweep_turn):
                    with m.If(self.init.valid):
                        m.d.comb += rd.addr.eq(self.init.payload)
                        m.d.sync += [kind.eq(KIND_INIT), qp.eq(self.init.payload)]
                    with m.Elif(self.cnp.valid):
                        m.d.comb += rd.addr.eq(self.cnp.payload)
                        m.d.sync += [kind.eq(KIND_CNP), qp.eq(self.cnp.payload)]
                    with m.Else():
                        m.d.comb += rd.addr.eq(self.sent.payload.qp)
                        m.d.sync += [kind.eq(KIND_SENT), qp.eq(self.sent.payload.qp),
                                     nbytes.eq(self.sent.payload.bytes)]
                with m.Else():
                    m.d.comb += rd.addr.eq(sweep_ptr)
                    m.d.sync += [kind.eq(KIND_TIMER), qp.eq(sweep_ptr), sweep_ptr.eq(sweep_ptr + 1)]
                m.next = "READ"
            with m.State("READ"):
                d = rd.data
                m.d.sync += [s.eq(d),
                             a_hi_lt.eq(d.next_alpha_ns[half:] < t[half:]),
                             a_hi_eq.eq(d.next_alpha_ns[half:] == t[half:]),
                             a_lo_le.eq(d.next_alpha_ns[:half] <= t[:half]),
                             r_hi_lt.eq(d.next_rate_ns[half:] < t[half:]),
                             r_hi_eq.eq(d.next_rate_ns[half:] == t[half:]),
                             r_lo_le.eq(d.next_rate_ns[:half] <= t[:half]),
                             acc.eq(d.bytes_acc + nbytes), a_step.eq(d.alpha_q16 >> g),
                             t_lt_f.eq(d.t_count < f), t_le_f.eq(d.t_count <= f),
                             bc_lt_f.eq(d.bc_count < f), bc_le_f.eq(d.bc_count <= f), t_nz.eq(d.t_count != 0),
                             ta_lo.eq(t[:half] + alpha_timer), tr_lo.eq(t[:half] + rate_timer)]
                m.next = "S2"
            with m.State("S2"):
                timers_on = ~is_init & s.active
                a_due = timers_on & (a_hi_lt | (a_hi_eq & a_lo_le))
                r_due = timers_on & (r_hi_lt | (r_hi_eq & r_lo_le))
                m.d.sync += [alpha_due.eq(a_due), rate_due.eq(r_due), bc_fire.eq(is_sent & (acc >= byte_counter)),
                             alpha_dec.eq(s.alpha_q16 - a_step),
                             na_lo.eq(s.next_alpha_ns[:half] + alpha_timer),
                             nr_lo.eq(s.next_rate_ns[:half] + rate_timer),
                             ta_hi.eq(t[half:] + ta_lo[half]), tr_hi.eq(t[half:] + tr_lo[half]),
                             acc_sub.eq(acc - byte_counter), changed.eq(~(kind == KIND_TIMER) | a_due | r_due)]
                # sat_inc(c) <= F  <=>  c < F (F <= 254)
                st1 = stage_of(t_lt_f, bc_le_f)
                m.d.sync += [stage1.eq(st1), clamp1.eq(r_due & (st1 != 1)),
                             inc1.eq(Mux(st1 == 2, rate_ai, rate_hai)), lm1.eq(Mux(st1 == 2, lm1_ai, lm1_hai))]
                m.next = "S3"
            with m.State("S3"):
                st2 = stage_of(Mux(rate_due, t_lt_f, t_le_f), bc_lt_f)
                m.d.sync += [na_hi.eq(s.next_alpha_ns[half:] + na_lo[half]),
                             nr_hi.eq(s.next_rate_ns[half:] + nr_lo[half]),
                             alpha_cur.eq(Mux(alpha_due, alpha_dec, s.alpha_q16)),
                             t_new.eq(Mux(rate_due, sat_inc(s.t_count), s.t_count)),
                             bc_new.eq(Mux(bc_fire, sat_inc(s.bc_count), s.bc_count)),
                             acc_new.eq(Mux(is_sent, Mux(bc_fire, acc_sub, acc), s.bytes_acc)),
                             stage2.eq(st2),
                             inc2.eq(Mux(st2 == 2, rate_ai, rate_hai)), lm2.eq(Mux(st2 == 2, lm1_ai, lm1_hai)),
                             clamp2.eq(bc_fire & (st2 != 1)), has2.eq(bc_fire),
                             stage_fin.eq(Mux(bc_fire, st2, Mux(rate_due, stage1, s.last_stage))),
                             sum1.eq(s.rt_kbps + inc1), over1.eq(s.rt_kbps >= lm1),
                             base1.eq(Mux(rate_due, s.rt_kbps, s.rc_kbps))]
                m.next = "S4"
            with m.State("S4"):
                # without a rate-timer expiry base1 is rc, and (rc + rc + 1) >> 1 == rc
                m.d.sync += [rt1.eq(Mux(clamp1, Mux(over1, line, sum1[:32]), s.rt_kbps)),
                             rc1.eq(mean_up(clamp1, over1, sum1[:32], base1, s.rc_kbps)),
                             ag_plus.eq(alpha_cur + alpha_g), step2.eq(alpha_cur >> g)]
                m.next = "S5"
            with m.State("S5"):
                m.d.sync += [sum2.eq(rt1 + inc2), over2.eq(rt1 >= lm2), prod.eq(rc1 * alpha_cur),
                             base2.eq(Mux(has2, rt1, rc1)),
                             alpha3.eq(ag_plus - step2)]
                m.next = "S6"
            with m.State("S6"):
                m.d.sync += [rt2.eq(Mux(clamp2, Mux(over2, line, sum2[:32]), rt1)),
                             rc2.eq(mean_up(clamp2, over2, sum2[:32], base2, rc1)),
                             rc_cut.eq(rc1 - (prod >> (ALPHA_FRAC_BITS + 1))), alpha_over.eq(alpha3 > ALPHA_ONE)]
                m.next = "S7"
            with m.State("S7"):
                m.d.sync += rc_low.eq(rc_cut < min_rate)
                m.next = "WRITE"
            with m.State("WRITE"):
                ns = Signal(RP_STATE)
                with m.Switch(kind):
                    with m.Case(KIND_INIT):
                        m.d.comb += [ns.rc_kbps.eq(line), ns.rt_kbps.eq(line), ns.alpha_q16.eq(alpha_init),
                                     ns.next_alpha_ns.eq(Cat(ta_lo[:half], ta_hi)),
                                     ns.next_rate_ns.eq(Cat(tr_lo[:half], tr_hi)), ns.active.eq(1)]
                    with m.Case(KIND_CNP):
                        clamp_rt = Const(1) if clamp_target is True else (clamp_target | rate_due | t_nz)
                        m.d.comb += [ns.rt_kbps.eq(Mux(clamp_rt, rc1, rt1)),
                                     ns.rc_kbps.eq(Mux(rc_low, min_rate, rc_cut)),
                                     ns.alpha_q16.eq(Mux(alpha_over, ALPHA_ONE, alpha3)),
                                     ns.next_alpha_ns.eq(Cat(ta_lo[:half], ta_hi)),
                                     ns.next_rate_ns.eq(Cat(tr_lo[:half], tr_hi)),
                                     ns.last_stage.eq(Mux(rate_due, stage1, s.last_stage)), ns.active.eq(s.active)]
                    with m.Default():
                        m.d.comb += [ns.rt_kbps.eq(rt2), ns.rc_kbps.eq(rc2), ns.alpha_q16.eq(alpha_cur),
                                     ns.t_count.eq(t_new), ns.bc_count.eq(bc_new), ns.bytes_acc.eq(acc_new),
                                     ns.next_alpha_ns.eq(Mux(alpha_due, Cat(na_lo[:half], na_hi),
                                                             s.next_alpha_ns)),
                                     ns.next_rate_ns.eq(Mux(rate_due, Cat(nr_lo[:half], nr_hi), s.next_rate_ns)),
                                     ns.last_stage.eq(stage_fin), ns.active.eq(s.active)]
                m.d.comb += [wr.addr.eq(qp), wr.data.eq(ns), wr.en.eq(1)]
                # the limiter conversion's two 16-bit partial products, each one DSP, registered here
                m.d.sync += [rate_lo.eq(ns.rc_kbps[:16] * self.rate_conv.mult),
                             rate_hi.eq(ns.rc_kbps[16:] * self.rate_conv.mult)]
                with m.If(changed):
                    m.d.sync += [self.trace_seq.eq(self.trace_seq + 1), self.trace_kind.eq(kind),
                                 self.trace_qp.eq(qp), self.trace_now_ns.eq(t), self.trace_bytes.eq(nbytes),
                                 self.trace_state.eq(ns)]
                    m.next = "RATE_OUT"
                with m.Else():
                    m.d.sync += ev_turn.eq(~sweep_turn)
                    m.next = "IDLE"
            with m.State("RATE_OUT"):
                with m.If(p1_free):
                    m.d.comb += p1_load.eq(1)
                    m.d.sync += ev_turn.eq(~sweep_turn)
                    m.next = "IDLE"

        # rate_wr: (rate_hi << 16) + rate_lo summed in two registered steps of 24-bit carries (a 48-bit add in
        # one clock is too deep for 400 MHz), so a rate leaves two clocks after RATE_OUT; RATE_OUT itself waits
        # only while both steps are full (a stalled rate_wr)
        p1_v, p2_v = Signal(), Signal()
        p1_qp, p2_qp = Signal(self.qp_bits), Signal(self.qp_bits)
        p1_lo16, p1_mid = Signal(16), Signal(25)
        p1_hi, p1_lo_top = Signal(24), Signal(8)
        p2_sum = Signal(16 + 24 + 25)
        p2_free = ~p2_v | self.rate_wr.ready
        m.d.comb += p1_free.eq(~p1_v | p2_free)
        with m.If(p1_load):
            m.d.sync += [p1_v.eq(1), p1_qp.eq(qp), p1_lo16.eq(rate_lo[:16]),
                         p1_mid.eq(rate_hi[:24] + rate_lo[16:40]), p1_hi.eq(rate_hi[24:48]),
                         p1_lo_top.eq(rate_lo[40:48])]
        with m.Elif(p2_free):
            m.d.sync += p1_v.eq(0)
        with m.If(p1_v & p2_free):
            m.d.sync += [p2_v.eq(1), p2_qp.eq(p1_qp),
                         p2_sum.eq(Cat(p1_lo16, p1_mid[:24], p1_hi + p1_lo_top + p1_mid[24]))]
        with m.Elif(p2_free):
            m.d.sync += p2_v.eq(0)
        m.d.comb += [self.rate_wr.valid.eq(p2_v), self.rate_wr.payload.qp.eq(p2_qp),
                     self.rate_wr.payload.rate.eq(p2_sum >> self.rate_conv.mult_shift)]
        return m
