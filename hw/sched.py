"""Per-QP TX rate limiter and scheduler: token buckets in a BRAM, work-conserving round-robin, one beat/clock.

Every QP has one memory word (tokens, last refill time, rate, pending bytes).  A single read-modify-write
pipeline serves one operation per clock, in priority order: a *pick* of the round-robin winner among the
eligible QPs, a rate write, a doorbell, and otherwise a background *sweep* that refills the next QP.  Refill
is lazy and exact: ``tokens += rate * (now - last)`` in bytes/clock with ``frac_bits`` fraction bits, so credit
is never lost to sweep latency, only capped at ``burst_bytes``.  A pick sends ``min(pending, mtu)`` bytes and
debits them plus ``frame_overhead_bytes`` byte-accurately (the frame's bytes on the wire beyond its payload, so a
rate is a wire rate; 0: a payload rate); a QP is sent from only when its tokens are > 0 and it has pending bytes (two
bitmaps in flip-flops, one bit per QP, say which QPs a pick may try: credit positive within 8 clocks, work).
Picks go through a small descriptor FIFO to the framer, which emits the packets on ``m_axis`` back to back.
After reset, one pass of n_qps clocks zeroes every QP's state.  Rate writes and doorbells wait in a holding
register each, so each port takes one request per two clocks at most.  ``tx_bytes`` counts in two 24-bit
halves, the high one a clock late.

For 400 MHz (<= 6 logic levels per path) the pick is hierarchical, in four pipeline stages: the QPs form
``2**(qp_bits // 2)`` groups (32 groups of 32 at 1024 QPs); stage 1 picks the next group round robin from a
registered "group has an eligible QP" vector, stage 2 fetches that group's eligible bits and round-robin mask,
stage 3 takes the first QP after the group's pointer (else the group's first) as a one-hot, stage 4 encodes
it and checks the operations in flight.  Stages 2 and 3 leave out the QPs whose token bits are not cleared
yet (issued last clock, issuing now, issuing next clock), so successive picks do not go stale: a pick can
issue every clock, in the same group or not.  The group and in-group pointers move on picks issued (the
group pointer reaches stage 1 a clock late), so a pick dropped for lack of FIFO room keeps its turn.  Wide
ORs and the first-set search are built as explicit LUT trees (kept signals, a carry chain for the prefix),
since the LUT mapper otherwise chains them.  The read-modify-write has six stages after the issue
(read and elapsed time; the ``rate * dt`` multiply as four 16 x 16 DSP products, two side by side and two
summed; two for the credit sums, each a carry-save 3-operand add in two parts whose high part follows its
low part one clock later, see ``hw.lib.skew_add``; write-back; bitmap update): a refill product at or above
``2**prod_cut`` caps the credit directly (found from the products' carry into that bit, in two steps), and
the cap, credit > 0 and token-hint comparisons are the signs of sums computed in parallel, so no path holds
more than half a wide add.  No operation reads a QP's word while a pick, rate write, doorbell or clear of
that QP is in flight up to its write-back (the read port is not transparent; the issue stage checks stages
b..write-back a clock ahead and stage a from equalities registered a clock ahead; rate writes, doorbells and
sweeps wait for any operation of the QP); a pick may overtake a sweep, as refills telescope.  The pipeline
thus equals one operation per clock done in one step
(the clock-by-clock scoreboard against ``sw.cc.CycleTokenBucket`` checks it).

Pick rate: one per clock.  Re-pick latency of the same QP: 11 clocks from one pick's issue to the next
(write-back at +5, bitmaps at +7, pick stages +8..+10, issue +11), so one QP alone reaches line rate without
bubbles when its packets are at least 11 beats long (1408 B at 1024 bits, below a 4096 B MTU); n QPs, in one
group or several, need packets of at least 11 / n beats to fill the link (the tests run one QP, and 4 QPs
in two groups, with 12-beat packets; short packets are also bounded by the ``fifo_depth`` picks in flight).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.lib.skew_add import align, const_skewed, delay, flat, invert, skew_add, skew_add3, split
from hw.lib.stream import AxiStream, keep_for_remaining

RATE_FRAC_BITS = 24
TIMESTAMP_BITS = 32
PENDING_BITS = 32

OP_NONE, OP_PICK, OP_RATE, OP_DOORBELL, OP_SWEEP, OP_CLEAR = range(6)
PIPE_STAGES = 5
"""Clocks from issuing an operation to its write-back (stages a..d, then the write-back stage)."""
HINT_SHIFT = 3
"""A QP's token bit is set when its credit will be positive within 2**HINT_SHIFT clocks."""


def rate_to_reg(rate_bps: float, clk_hz: float, frac_bits: int = RATE_FRAC_BITS) -> int:
    """Rate register value (bytes per clock, ``frac_bits`` fraction bits) closest to ``rate_bps``."""
    return int(round(rate_bps / 8 / clk_hz * (1 << frac_bits)))


def reg_to_rate_bps(rate_reg: int, clk_hz: float, frac_bits: int = RATE_FRAC_BITS) -> float:
    """Inverse of :func:`rate_to_reg`: the exact rate a register value programs."""
    return rate_reg / (1 << frac_bits) * 8 * clk_hz


def _kept(m: Module, value, name: str) -> Signal:
    """``value`` in a signal yosys keeps: a LUT boundary, so the logic depth stays as built here."""
    sig = Signal(len(value), name=name, attrs={"keep": 1})
    m.d.comb += sig.eq(value)
    return sig


def first_onehot(m: Module, x, name: str):
    """(one-hot of the lowest set bit of ``x``, any bit set), shallow: ORs of bit pairs; the pairs up to the
    first non-empty one as ``ors ^ (ors - 1)`` (a carry chain, which the LUT mapper cannot turn into a ripple
    of ORs); then each bit against that and its pair-mate (one LUT)."""
    ors = _kept(m, Cat(*(x[c:c + 2].any() for c in range(0, len(x), 2))), f"{name}_or")
    upto = ors ^ (ors - 1)   # pair c is at or below the first non-empty pair
    f = _kept(m, Cat(*(x[i] & upto[i // 2] & ~x[i - 1] if i % 2 else x[i] & upto[i // 2]
                       for i in range(len(x)))), f"{name}_oh")
    return f, ors.any()


def rr_onehot(m: Module, x, up, name: str):
    """(one-hot, any) of the first set bit of ``up`` if any, else of ``x`` (round robin: ``up`` is ``x`` less
    the positions up to the pointer)."""
    f_up, any_up = first_onehot(m, up, f"{name}_u")
    f_x, any_x = first_onehot(m, x, f"{name}_x")
    return Mux(any_up, f_up, f_x), any_x


def encode_onehot(oh):
    """Index of a one-hot's set bit."""
    bits = (len(oh) - 1).bit_length()
    return Cat(*(Cat(*(oh[i] for i in range(len(oh)) if i >> b & 1)).any() for b in range(bits)))


def _or_tree(m: Module, terms: list, name: str):
    """OR of ``terms`` as a tree of kept 6-input ORs (the LUT mapper would otherwise chain them)."""
    level = 0
    while len(terms) > 6:
        terms = [_kept(m, Cat(*terms[k:k + 6]).any(), f"{name}_t{level}_{k // 6}") for k in range(0, len(terms), 6)]
        level += 1
    return Cat(*terms).any()


def and_or(m: Module, sel, vec, size: int, name: str):
    """The ``size``-bit word of ``vec`` that the one-hot ``sel`` selects (an AND-OR mux, a tree of LUTs)."""
    words = []
    for i in range(size):
        pairs = [sel[g] & vec[g * size + i] for g in range(len(sel))]
        first = [_kept(m, Cat(*pairs[k:k + 3]).any(), f"{name}_{i}_p{k // 3}") for k in range(0, len(pairs), 3)]
        words.append(_or_tree(m, first, f"{name}_{i}"))
    return _kept(m, Cat(*words), name)


class TxScheduler(wiring.Component):
    """Paces N QPs by per-QP token buckets held in memory and emits their packets on one AXI-Stream.

    Ports: ``doorbell`` (qp, bytes) adds work; ``rate_wr`` (qp, rate) sets a QP's rate in bytes/clock with
    ``frac_bits`` fraction bits (values above line rate are clamped to it); ``m_axis`` carries the packets
    (``tuser`` = QP; ``m_len`` = the packet's size, with its beats); ``tx_pkts``/``tx_bytes``/``tx_last_qp``/
    ``tx_last_len`` count what left; ``tx_started`` is high for the one clock after each packet's first beat left,
    when those four have just been updated.
    """

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024, mtu_bytes: int = 4096,
                 burst_bytes: int = 16384, fifo_depth: int = 8, frac_bits: int = RATE_FRAC_BITS,
                 frame_overhead_bytes: int = 0) -> None:
        if data_width <= 0 or data_width % 8:
            raise HwParamError(f"data_width must be a positive multiple of 8, not {data_width}")
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        if not 1 <= mtu_bytes <= burst_bytes:
            raise HwParamError(f"need 1 <= mtu_bytes <= burst_bytes, got mtu {mtu_bytes} burst {burst_bytes}")
        if not 0 <= frame_overhead_bytes < 1 << 12:
            raise HwParamError(f"frame_overhead_bytes must be in 0..4095, not {frame_overhead_bytes}")
        if fifo_depth < PIPE_STAGES + 2:
            raise HwParamError(f"fifo_depth must be >= {PIPE_STAGES + 2} (picks in flight), not {fifo_depth}")
        self.data_width = data_width
        self.bytes_per_beat = data_width // 8
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.mtu_bytes = mtu_bytes
        self.burst_bytes = burst_bytes
        self.fifo_depth = fifo_depth
        self.frac_bits = frac_bits
        self.frame_overhead_bytes = frame_overhead_bytes
        """Bytes a pick charges beyond its payload (a frame's headers and wire overhead): the bucket's charge is
        ``send_len + frame_overhead_bytes``."""
        self.line_rate_reg = self.bytes_per_beat << frac_bits
        self.rate_bits = self.line_rate_reg.bit_length()
        self.len_bits = mtu_bytes.bit_length()
        burst_units = burst_bytes << frac_bits
        self.charge_bits = (mtu_bytes + frame_overhead_bytes).bit_length()
        charge_units = (mtu_bytes + frame_overhead_bytes) << frac_bits
        self.token_bits = max(burst_units.bit_length(), charge_units.bit_length()) + 2
        self.prod_cut = max(self.token_bits, self.rate_bits + HINT_SHIFT, burst_units.bit_length() + 1)
        """A refill product at or above 2**prod_cut caps the credit whatever the tokens (no wider add needed)."""
        self.calc_bits = self.prod_cut + 4
        """Width of the credit sums: tokens, product below 2**prod_cut, rate hint and send length never overflow."""
        self.group_bits = self.qp_bits // 2
        self.n_groups = 1 << self.group_bits
        self.group_size = n_qps // self.n_groups
        self.op_layout = data.StructLayout({"op": unsigned(3), "q": unsigned(self.qp_bits), "arg": unsigned(32),
                                            "t": unsigned(TIMESTAMP_BITS)})
        """An operation on its way down the pipeline (``rec_d`` is the one writing back this clock)."""
        self.state_layout = data.StructLayout({
            "tokens": signed(self.token_bits),
            "last_ts": unsigned(TIMESTAMP_BITS),
            "rate": unsigned(self.rate_bits),
            "pending": unsigned(PENDING_BITS),
        })
        super().__init__({
            "doorbell": In(stream.Signature(data.StructLayout({
                "qp": unsigned(self.qp_bits), "bytes": unsigned(PENDING_BITS)}))),
            "rate_wr": In(stream.Signature(data.StructLayout({
                "qp": unsigned(self.qp_bits), "rate": unsigned(32)}))),
            "m_axis": Out(AxiStream(data_width, user_width=self.qp_bits)),
            "m_len": Out(self.len_bits),
            "rate_clamped": Out(1),
            "tx_pkts": Out(32),
            "tx_bytes": Out(48),
            "tx_last_qp": Out(self.qp_bits),
            "tx_last_len": Out(self.len_bits),
            "tx_started": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, frac = self.n_qps, self.frac_bits
        burst_units = self.burst_bytes << frac
        n_grp, grp_size, in_bits = self.n_groups, self.group_size, self.qp_bits - self.group_bits
        w, lo = self.calc_bits, self.calc_bits // 2
        pb, mtu = PENDING_BITS, self.mtu_bytes

        m.submodules.mem = mem = Memory(shape=self.state_layout, depth=n, init=[])
        wr = mem.write_port()
        rd = mem.read_port()   # not transparent: no operation reads a word while its write-back is pending
        m.submodules.fifo = fifo = SyncFIFO(width=self.qp_bits + self.len_bits, depth=self.fifo_depth)

        now = Signal(TIMESTAMP_BITS)
        m.d.sync += now.eq(now + 1)

        tok_ok = Signal(n)
        has_work = Signal(n)
        eligible = Signal(n)       # tok_ok & has_work, registered
        grp_any = Signal(n_grp)    # a group has an eligible QP (a hint: a pick stage 2 may find none)
        rr_mask = Signal(n)        # per group, the QPs after its last pick (round robin within the group)
        sweep_ptr = Signal(self.qp_bits)
        rec = self.op_layout
        # rec_a..rec_d are in flight, rec_wb writes back this clock, rec_f updates the bitmaps
        rec_a, rec_b, rec_c, rec_d, rec_wb, rec_f = (Signal(rec, name=f"rec_{x}") for x in ("a", "b", "c", "d",
                                                                                              "wb", "f"))
        flight = (rec_a, rec_b, rec_c, rec_d)
        blk = [Signal(name=f"blk_{x}") for x in "abcd"]   # the stage holds a pick, rate write, doorbell or clear

        def grp_of(q):
            return q[in_bits:] if self.group_bits else Const(0, 1)

        def any_in_flight(q):
            return Cat(*((r.op != OP_NONE) & (r.q == q) for r in flight)).any()

        def any_in(q, stages):
            return Cat(*((r.op != OP_NONE) & (r.q == q) for r in stages)).any()

        room, room_d = Signal(), Signal()  # the FIFO has room for the picks in flight and one more (registered)
        init_done = Signal()  # after reset, one pass writes every QP's state to zero (BRAMs keep content)

        # ---- pick stage 1: round robin over the groups with an eligible QP (one-hot from here on) -------------
        gb = self.group_bits
        gh2, v2 = Signal(n_grp, name="gh2"), Signal(name="v2")
        g_above = Signal(n_grp)   # the groups after the one of the last pick issued (a dropped pick keeps its turn)
        grp_up = Signal(n_grp)    # grp_any & g_above, registered with them
        f1, any1 = rr_onehot(m, grp_any, grp_up, "g1")
        m.d.sync += [gh2.eq(f1), v2.eq(any1)]
        g_above_d = Signal(n_grp)
        m.d.comb += g_above_d.eq(Mux(rec_a.op == OP_PICK, Cat(*(grp_of(rec_a.q) < g for g in range(n_grp))), g_above))
        m.d.sync += g_above.eq(g_above_d)

        # ---- pick stage 2: the group's eligible QPs, less the ones issued in the last clock, this clock and
        # the next (their token bits clear only later; older ones are cleared in ``eligible`` already) ---------
        q_i, v_i = Signal(self.qp_bits, name="q_i"), Signal(name="v_i")   # the pick in the issue stage
        oh_i, gh_i = Signal(grp_size, name="oh_i"), Signal(n_grp, name="gh_i")
        oh4, gh4, v4 = Signal(grp_size, name="oh4"), Signal(n_grp, name="gh4"), Signal(name="v4")  # stage 4
        oh_a, gh_a = Signal(grp_size, name="oh_a"), Signal(n_grp, name="gh_a")   # the pick issued last clock
        s_a = _kept(m, (gh_a & gh2).any(), "s_a")
        s_i = _kept(m, (gh_i & gh2).any() & v_i & room & init_done, "s_i")   # most likely issuing now
        excl = Cat(*((oh_a[i] & s_a) | (oh_i[i] & s_i) for i in range(grp_size)))
        el2, rr2 = and_or(m, gh2, eligible, grp_size, "el2"), and_or(m, gh2, rr_mask, grp_size, "rr2")
        gh3, v3, same3 = Signal(n_grp, name="gh3"), Signal(name="v3"), Signal(name="same3")
        vec3, up3 = Signal(grp_size, name="vec3"), Signal(grp_size, name="up3")
        m.d.sync += [gh3.eq(gh2), v3.eq(v2), vec3.eq(el2 & ~excl), up3.eq(el2 & ~excl & rr2),
                     same3.eq(v3 & (gh3 == gh2))]

        # ---- pick stage 3: the first QP after the group's round-robin pointer, else the group's first; not
        # the one stage 3 chose last clock (issuing next clock) --------------------------------------------------
        # (and not the ones stage 4 and the issue stage hold: their flags registered a clock ahead)
        s_own, s_i3 = Signal(name="s_own"), Signal(name="s_i3")
        m.d.sync += [s_own.eq(v3 & (gh3 == gh2) & room & init_done),
                     s_i3.eq((gh2 & gh4).any() & v4 & room & init_done)]
        vec_m = _kept(m, Cat(*(vec3[i] & ~(oh4[i] & s_own) & ~(oh_i[i] & s_i3) for i in range(grp_size))), "vec_m")
        up_m = _kept(m, Cat(*(up3[i] & ~(oh4[i] & s_own) & ~(oh_i[i] & s_i3) for i in range(grp_size))), "up_m")
        f3, any3 = rr_onehot(m, vec_m, up_m, "q3")
        m.d.sync += [oh4.eq(f3), gh4.eq(gh3), v4.eq(v3 & any3)]

        # ---- pick stage 4: the QP number, and whether a pick, rate write, doorbell or clear of it will be in
        # stages b..d or the write-back when it issues ---------------------------------------------------------------
        g4 = encode_onehot(gh4) if gb else Const(0, 0)
        pre_blk = Signal(name="pre_blk")
        m.d.sync += [q_i.eq(Cat(encode_onehot(oh4), g4)), oh_i.eq(oh4), gh_i.eq(gh4), v_i.eq(v4),
                     pre_blk.eq(Cat(*(b & (gh4.bit_select(grp_of(r.q), 1) if gb else 1)
                                      & oh4.bit_select(r.q[:in_bits], 1)
                                      for b, r in zip(blk, flight, strict=True))).any())]

        # ---- issue: one operation per clock.  A pick goes if no pick, rate write, doorbell or clear of its QP
        # is in flight (a pick may overtake a sweep); rate writes, doorbells and sweeps wait while any operation
        # of their QP is in stages a..d or the write-back (checked a clock ahead, stage a live) ------------------
        picks_ae = sum((r.op == OP_PICK).as_unsigned() for r in (*flight, rec_wb))
        m.d.comb += room_d.eq(fifo.level + picks_ae + 2 <= self.fifo_depth)
        m.d.sync += room.eq(room_d)

        op0 = Signal(range(6))
        q0 = Signal(self.qp_bits)
        arg0 = Signal(32)
        # rate writes and doorbells wait in a holding register each (ready while it is empty: one per two
        # clocks at most), so the issue logic sees only registers
        rate_v, rate_q, rate_arg = Signal(), Signal(self.qp_bits), Signal(32)
        bell_v, bell_q, bell_arg = Signal(), Signal(self.qp_bits), Signal(32)
        m.d.comb += [self.rate_wr.ready.eq(~rate_v), self.doorbell.ready.eq(~bell_v)]
        with m.If(self.rate_wr.valid & ~rate_v):
            rate_in = self.rate_wr.payload.rate
            clamp = rate_in > self.line_rate_reg
            m.d.sync += [rate_v.eq(1), rate_q.eq(self.rate_wr.payload.qp),
                         rate_arg.eq(Mux(clamp, self.line_rate_reg, rate_in)), self.rate_clamped.eq(clamp)]
        with m.If(self.doorbell.valid & ~bell_v):
            m.d.sync += [bell_v.eq(1), bell_q.eq(self.doorbell.payload.qp), bell_arg.eq(self.doorbell.payload.bytes)]
        # operations of a QP in stages a..d now are in b..wb next clock: compared a clock ahead (valid when the
        # holding register has not changed since; the sweep pointer is compared as it is and one further)
        rate_old, bell_old, sw_moved = Signal(), Signal(), Signal()
        sw_step = Signal()   # the sweep pointer moves (a sweep or a clear issues)
        m.d.comb += sw_step.eq((op0 == OP_SWEEP) | (op0 == OP_CLEAR))
        pre_rate, pre_bell, pre_sw, pre_sw_next = Signal(), Signal(), Signal(), Signal()
        ahead = (rec_a, rec_b, rec_c, rec_d)
        sweep_nxt = Signal(self.qp_bits, init=1)   # sweep_ptr + 1
        with m.If(sw_step):
            m.d.sync += sweep_nxt.eq(sweep_nxt + 1)
        # the QP of the operation issued now against the holding registers and the sweep pointer, for the
        # next clock's live check of stage a (the registers then hold the same values, or may not issue)
        eq_rb, eq_rs, eq_rp = Signal(), Signal(), Signal()
        eq_bs, eq_bp, eq_sp = Signal(), Signal(), Signal()
        m.d.sync += [eq_rb.eq(rate_q == bell_q), eq_rs.eq(rate_q == sweep_ptr), eq_rp.eq(rate_q == q_i),
                     eq_bs.eq(bell_q == sweep_ptr), eq_bp.eq(bell_q == q_i), eq_sp.eq(sweep_ptr == q_i)]
        op_a = rec_a.op
        live_rate = ((op_a == OP_PICK) & eq_rp) | ((op_a == OP_DOORBELL) & eq_rb) | ((op_a == OP_SWEEP) & eq_rs)
        live_bell = ((op_a == OP_PICK) & eq_bp) | ((op_a == OP_RATE) & eq_rb) | ((op_a == OP_SWEEP) & eq_bs)
        live_sw = ((op_a == OP_PICK) & eq_sp) | ((op_a == OP_RATE) & eq_rs) | ((op_a == OP_DOORBELL) & eq_bs)
        m.d.sync += [rate_old.eq(rate_v), bell_old.eq(bell_v), sw_moved.eq(sw_step),
                     pre_rate.eq(any_in(rate_q, ahead)), pre_bell.eq(any_in(bell_q, ahead)),
                     pre_sw.eq(any_in(sweep_ptr, ahead)), pre_sw_next.eq(any_in(sweep_nxt, ahead))]
        m.d.sync += [oh_a.eq(0), gh_a.eq(gh_i)]   # the pick issued (set below when one issues)

        # same_a: the pick, rate write, doorbell or clear issued now is of the QP stage 4 hands to the issue
        # stage next clock (compared on stage 4's one-hot form).  Each candidate's compare is a kept signal, and
        # same_a is two flip-flops (a clear or pick; a rate write or doorbell), each one LUT after the compares
        # and the issue conditions, so the issue test stays one LUT and no path into them exceeds 6 levels
        def is_next_pick(q):
            return oh4.bit_select(q[:in_bits], 1) & (gh4.bit_select(grp_of(q), 1) if gb else 1)

        nxt_sw, nxt_i = _kept(m, is_next_pick(sweep_ptr), "nxt_sw"), _kept(m, is_next_pick(q_i), "nxt_i")
        nxt_rate, nxt_bell = _kept(m, is_next_pick(rate_q), "nxt_rate"), _kept(m, is_next_pick(bell_q), "nxt_bell")
        same_pc, same_rb = Signal(name="same_a_pc"), Signal(name="same_a_rb")
        same_a = same_pc | same_rb
        m.d.sync += [same_pc.eq(0), same_rb.eq(0)]
        with m.If(~init_done):
            m.d.comb += [op0.eq(OP_CLEAR), q0.eq(sweep_ptr)]
            m.d.sync += [sweep_ptr.eq(sweep_ptr + 1), same_pc.eq(nxt_sw)]
            with m.If(sweep_ptr == n - 1):
                m.d.sync += init_done.eq(1)
        with m.Elif(v_i & room & ~pre_blk & ~same_a):
            m.d.comb += [op0.eq(OP_PICK), q0.eq(q_i)]
            m.d.sync += [oh_a.eq(oh_i), same_pc.eq(nxt_i)]
        with m.Elif(rate_v & rate_old & ~pre_rate & ~live_rate):
            m.d.comb += [op0.eq(OP_RATE), q0.eq(rate_q), arg0.eq(rate_arg)]
            m.d.sync += [rate_v.eq(0), same_rb.eq(nxt_rate)]
        with m.Elif(bell_v & bell_old & ~pre_bell & ~live_bell):
            m.d.comb += [op0.eq(OP_DOORBELL), q0.eq(bell_q), arg0.eq(bell_arg)]
            m.d.sync += [bell_v.eq(0), same_rb.eq(nxt_bell)]
        with m.Elif(~Mux(sw_moved, pre_sw_next, pre_sw) & ~live_sw):
            m.d.comb += [op0.eq(OP_SWEEP), q0.eq(sweep_ptr)]
            m.d.sync += sweep_ptr.eq(sweep_ptr + 1)
        m.d.comb += rd.addr.eq(q0)
        m.d.sync += [rec_a.op.eq(op0), rec_a.q.eq(q0), rec_a.arg.eq(arg0),
                     blk[0].eq((op0 != OP_NONE) & (op0 != OP_SWEEP)),
                     rec_b.eq(rec_a), rec_b.t.eq(now), rec_c.eq(rec_b), rec_d.eq(rec_c), rec_wb.eq(rec_d),
                     rec_f.eq(rec_wb), blk[1].eq(blk[0]), blk[2].eq(blk[1]), blk[3].eq(blk[2])]

        # ---- stage a: the memory word arrives; elapsed clocks, send length and the pending bytes' outcomes ---
        st = rd.data
        pend = st.pending
        pend_hi_zero = Signal()
        m.d.comb += pend_hi_zero.eq(pend[self.len_bits:] == 0)
        pend_lt = pend_hi_zero & (pend[:self.len_bits] < mtu)
        pend_gt = ~pend_hi_zero | (pend[:self.len_bits] > mtu)
        dt_b, slen_b, pend_b = Signal(TIMESTAMP_BITS), Signal(self.len_bits), Signal(pb)
        ov = self.frame_overhead_bytes
        chg_b = Signal(self.charge_bits) if ov else slen_b   # what a send debits: its length plus the overhead
        rate_old_b, rate_b = Signal(self.rate_bits), Signal(self.rate_bits)   # refill at the old rate
        bell_b = Signal(pb + 1)
        flags_b = Signal(3)  # pending > 0, pending > MTU (work left after a send), a doorbell adds > 0 bytes
        m.d.sync += [dt_b.eq(now - st.last_ts), rate_old_b.eq(st.rate),
                     rate_b.eq(Mux(rec_a.op == OP_RATE, rec_a.arg, st.rate)),   # the rate after the operation
                     slen_b.eq(Mux(pend_lt, pend, mtu)), pend_b.eq(pend), bell_b.eq(pend + rec_a.arg),
                     flags_b.eq(Cat(pend != 0, pend_gt, rec_a.arg != 0))]
        if ov:   # the overhead added beside the compare, not after the select: no deeper than slen_b
            m.d.sync += chg_b.eq(Mux(pend_lt, pend[:self.len_bits] + ov, mtu + ov))
        tok = split(m, st.tokens, lo, w, "tok")                                            # lo a, hi b
        t1 = skew_add(m, tok, const_skewed(-(burst_units + 1), lo, w), lo, w, "t1")        # tok-burst-1: b, c
        t2 = skew_add(m, tok, const_skewed(-1, lo, w), lo, w, "t2")                        # tok - 1: b, c

        # ---- stage b: the refill multiply (DSPs); rate and send length in token units --------------------------
        # rate * dt as four 16 x 16 DSP products: the two that do not overlap side by side (a_c), the two
        # middle ones summed (b_c); the credit sums add both (carry-save), so no full-width adder is needed
        r_lo, r_hi, d_lo, d_hi = rate_old_b[:16], rate_old_b[16:], dt_b[:16], dt_b[16:]
        prod_bits = TIMESTAMP_BITS + self.rate_bits
        a_c, b_c = Signal(prod_bits), Signal(prod_bits)
        m.d.sync += [a_c.eq(Cat(r_lo * d_lo, r_hi * d_hi)), b_c.eq((r_lo * d_hi + r_hi * d_lo) << 16)]
        hint_r = split(m, rate_b << HINT_SHIFT, lo, w, "hr")                               # lo b, hi c
        nsl = invert(m, split(m, chg_b << frac, lo, w, "sl"), "sl")   # ~(Ls << frac), Ls the charge (length + overhead)
        tok_b = align(m, tok, 1, "tokb")
        t3 = skew_add(m, t2, hint_r, lo, w, "t3")                                  # tok - 1 + R: c, d
        t5 = skew_add(m, tok_b, nsl, lo, w, "t5", carry_in=1)                      # tok - Ls: c, d
        bl = skew_add(m, const_skewed(burst_units, lo, w), nsl, lo, w, "bl", carry_in=1)       # burst - Ls
        blm = skew_add(m, const_skewed(burst_units - 1, lo, w), nsl, lo, w, "blm", carry_in=1)  # burst-1-Ls
        pend_c, pend_sent_c, slen_c, flags_c, rate_c = (Signal(pb), Signal(pb), Signal(self.len_bits), Signal(3),
                                                       Signal(self.rate_bits))
        m.d.sync += [pend_c.eq(Mux(rec_b.op == OP_DOORBELL, Mux(bell_b[pb], (1 << pb) - 1, bell_b[:pb]), pend_b)),
                     pend_sent_c.eq(pend_b - slen_b), slen_c.eq(slen_b), flags_c.eq(flags_b), rate_c.eq(rate_b)]

        # ---- stage c: the product joins; the sums start -------------------------------------------------------
        # the product alone is above every bound (capped, credit and hints positive): a_c + b_c >= 2**prod_cut,
        # from the carry into bit prod_cut, found in two steps (bits below ``sp`` in c, the rest in d)
        cut = self.prod_cut
        sp = min(32, cut)
        c_sp, big_c, a_mid, b_mid = Signal(), Signal(), Signal(max(1, cut - sp)), Signal(max(1, cut - sp))
        lo_sum = Signal(sp + 1)
        m.d.comb += lo_sum.eq(a_c[:sp] + b_c[:sp])
        m.d.sync += [c_sp.eq(lo_sum[sp]), big_c.eq((a_c[cut:] != 0) | (b_c[cut:] != 0)),
                     a_mid.eq(a_c[sp:cut]), b_mid.eq(b_c[sp:cut])]
        hi_nz_w = Signal()
        mid_sum = Signal(cut - sp + 1)
        m.d.comb += mid_sum.eq(a_mid[:cut - sp] + b_mid[:cut - sp] + c_sp)
        m.d.sync += hi_nz_w.eq(big_c | mid_sum[cut - sp])
        pr_a, pr_b = split(m, a_c[:w], lo, w, "pa"), split(m, b_c[:w], lo, w, "pb")
        s0 = skew_add3(m, align(m, tok_b, 1, "tokc"), pr_a, pr_b, lo, w, "s0")   # tok + p: the refill before the cap
        s1 = skew_add3(m, align(m, t1, 1, "t1c"), pr_a, pr_b, lo, w, "s1")       # >= 0: above the burst (cap)
        s2 = skew_add3(m, align(m, t2, 1, "t2c"), pr_a, pr_b, lo, w, "s2")       # >= 0: credit positive
        s3 = skew_add3(m, t3, pr_a, pr_b, lo, w, "s3")                           # >= 0: hint without a send
        s5 = skew_add3(m, t5, pr_a, pr_b, lo, w, "s5")                           # the credit after a send (no cap)
        blr = skew_add(m, blm, align(m, hint_r, 1, "hrc"), lo, w, "blr")  # >= 0: hint after a capped send
        t4 = skew_add(m, t3, align(m, nsl, 1, "nslc"), lo, w, "t4", carry_in=1)   # tok - 1 + R - Ls: d, wb
        pend_d, pend_sent_d, slen_d, flags_d, rate_d = (Signal(pb), Signal(pb), Signal(self.len_bits), Signal(3),
                                                       Signal(self.rate_bits))
        m.d.sync += [pend_d.eq(pend_c), pend_sent_d.eq(pend_sent_c), slen_d.eq(slen_c), flags_d.eq(flags_c),
                     rate_d.eq(rate_c)]

        # ---- stage d: the sums' high parts ------------------------------------------------------------------
        s4 = skew_add3(m, t4, align(m, pr_a, 1, "pad"), align(m, pr_b, 1, "pbd"), lo, w, "s4")  # >= 0: hint, send
        pend_w, pend_sent_w, slen_w, flags_w, rate_w = (Signal(pb), Signal(pb), Signal(self.len_bits), Signal(3),
                                                       Signal(self.rate_bits))
        m.d.sync += [pend_w.eq(pend_d), pend_sent_w.eq(pend_sent_d), slen_w.eq(slen_d), flags_w.eq(flags_d),
                     rate_w.eq(rate_d)]

        # ---- write-back stage: apply the operation, write back, descriptor out ------------------------------
        op_w, q_w, t_w = rec_wb.op, rec_wb.q, rec_wb.t
        cap = Signal()
        pos = Signal()
        m.d.comb += [cap.eq(hi_nz_w | ~s1.hi[-1]), pos.eq(hi_nz_w | ~s2.hi[-1])]
        refilled = Signal(signed(self.token_bits + 1))
        m.d.comb += refilled.eq(Mux(cap, burst_units, flat(m, s0, "s0").as_signed()))
        after_send = Mux(cap, flat(m, align(m, bl, 1, "bld"), "bl"), flat(m, s5, "s5")).as_signed()
        new = Signal(self.state_layout)
        m.d.comb += [new.tokens.eq(refilled), new.last_ts.eq(t_w), new.rate.eq(rate_w), new.pending.eq(pend_w)]
        send_len = Signal(self.len_bits)
        send = Signal()
        pick_w = Signal()   # rec_wb is a pick (decoded a clock early: the FIFO's level logic follows send)
        m.d.sync += pick_w.eq(rec_d.op == OP_PICK)
        m.d.comb += [send_len.eq(slen_w), send.eq(pick_w & pos & flags_w[0])]
        with m.If(send):
            m.d.comb += [new.tokens.eq(after_send), new.pending.eq(pend_sent_w)]
        with m.If(op_w == OP_CLEAR):
            m.d.comb += new.eq(0)
        active_w = op_w != OP_NONE
        m.d.comb += [wr.addr.eq(q_w), wr.data.eq(new), wr.en.eq(active_w)]
        m.d.comb += [fifo.w_data.eq(Cat(q_w, send_len)), fifo.w_en.eq(send)]

        # ---- stage f: the token and work bits of the written QP -----------------------------------------------
        # The token bit is a hint for picks (a pick re-checks the credit at its own time): set if the credit
        # will be positive within 2**HINT_SHIFT clocks, i.e. new.tokens + (new.rate << HINT_SHIFT) > 0, so a
        # QP paced near line rate does not wait for a sweep after each packet.  An overtaken sweep (a pick of
        # its QP is in flight) leaves the bits alone: the pick's write-back wins.
        upd_f, send_f, cap_f, clr_f = Signal(), Signal(), Signal(), Signal()
        work_f = Signal()
        m.d.sync += [upd_f.eq(active_w & ~((op_w == OP_SWEEP) & any_in_flight(q_w))), send_f.eq(send),
                     cap_f.eq(cap), clr_f.eq(op_w == OP_CLEAR),
                     work_f.eq((op_w != OP_CLEAR) & Mux(send, flags_w[1],
                                                        flags_w[0] | ((op_w == OP_DOORBELL) & flags_w[2])))]
        s3_neg, blr_neg = delay(m, s3.hi[-1], 1, "s3n"), delay(m, blr.hi[-1], 1, "blrn")
        hint = Signal()
        m.d.comb += hint.eq(~clr_f & Mux(send_f, Mux(cap_f, ~blr_neg, ~s4.hi[-1]), cap_f | ~s3_neg))

        # bitmap updates as whole-vector operations on one-hot decodes (a per-bit mux chain is slow to build).
        # A pick, rate write, doorbell or clear clears its QP's token bit from stage a until stage f writes the
        # true value (the issue stage checks stages a..d itself, so the late clear is safe)
        ones = Const((1 << n) - 1, n)
        dec_f, dec_a = Signal(n), Signal(n)
        m.d.comb += [dec_f.eq(Cat(*(upd_f & (rec_f.q == i) for i in range(n)))),
                     dec_a.eq(Cat(*(blk[0] & (rec_a.q == i) for i in range(n))))]
        tok_next = ((tok_ok & ~dec_f) | (dec_f & Mux(hint, ones, 0))) & ~dec_a
        work_next = (has_work & ~dec_f) | (dec_f & Mux(work_f, ones, 0))
        m.d.sync += [tok_ok.eq(tok_next), has_work.eq(work_next), eligible.eq(tok_next & work_next)]
        set_grp = Signal(n_grp)
        m.d.comb += set_grp.eq(Cat(*(upd_f & hint & work_f & (grp_of(rec_f.q) == g) for g in range(n_grp))))
        grp_any_d = Signal(n_grp)
        m.d.comb += grp_any_d.eq(Cat(*(eligible[g * grp_size:(g + 1) * grp_size].any() for g in range(n_grp)))
                                 | set_grp)
        m.d.sync += [grp_any.eq(grp_any_d), grp_up.eq(grp_any_d & g_above)]   # the pointer a clock late
        # the round-robin pointer of the picked QP's group moves past it
        pick_a = rec_a.op == OP_PICK
        for g in range(n_grp):
            with m.If(pick_a & (grp_of(rec_a.q) == g)):
                m.d.sync += rr_mask[g * grp_size:(g + 1) * grp_size].eq(
                    Cat(*((rec_a.q[:in_bits] < i) if in_bits else Const(0, 1) for i in range(grp_size))))

        # ---- framer: descriptors -> back-to-back beats ---------------------------------------------------
        bpb = self.bytes_per_beat
        active = Signal()
        cur_qp = Signal(self.qp_bits)
        cur_len = Signal(self.len_bits)
        remaining = Signal(self.len_bits)
        beat = Signal(16)
        seq = Signal(32)
        axis = self.m_axis
        is_last = Signal()   # registered: remaining <= bpb
        tx_lo, tx_hi, tx_c = Signal(24), Signal(24), Signal()   # tx_bytes in two halves, the high one a clock late
        m.d.sync += [tx_hi.eq(tx_hi + tx_c), tx_c.eq(0)]
        m.d.comb += self.tx_bytes.eq(Cat(tx_lo, tx_hi))
        m.d.comb += [
            axis.tvalid.eq(active),
            axis.tlast.eq(is_last),
            axis.tkeep.eq(keep_for_remaining(remaining, bpb)),
            axis.tuser.eq(cur_qp),
            axis.tdata.eq(Cat(seq, cur_qp.as_unsigned(), beat)),
            self.m_len.eq(cur_len),
        ]
        load = Signal()
        m.d.comb += load.eq((~active | (axis.tready & is_last)) & fifo.r_rdy)
        m.d.comb += fifo.r_en.eq(load)
        with m.If(load):
            d_qp = fifo.r_data[:self.qp_bits]
            d_len = fifo.r_data[self.qp_bits:]
            m.d.sync += [active.eq(1), cur_qp.eq(d_qp), cur_len.eq(d_len), remaining.eq(d_len), beat.eq(0),
                         is_last.eq(d_len <= bpb)]
        with m.Elif(active & axis.tready & is_last):
            m.d.sync += active.eq(0)
        m.d.sync += self.tx_started.eq(active & axis.tready & (beat == 0))
        with m.If(active & axis.tready):
            with m.If(~is_last):
                m.d.sync += [remaining.eq(remaining - bpb), beat.eq(beat + 1), is_last.eq(remaining <= 2 * bpb)]
            with m.Else():
                m.d.sync += seq.eq(seq + 1)
            with m.If(beat == 0):
                m.d.sync += [self.tx_pkts.eq(self.tx_pkts + 1), Cat(tx_lo, tx_c).eq(tx_lo + cur_len),
                             self.tx_last_qp.eq(cur_qp), self.tx_last_len.eq(cur_len)]
        return m
