"""Per-QP TX rate limiter and scheduler: token buckets in a BRAM, work-conserving round-robin, one beat/clock.

Every QP has one memory word (tokens, last refill time, rate, pending bytes).  A single read-modify-write
pipeline serves one operation per clock, in priority order: a *pick* of the round-robin winner among the
eligible QPs, a rate write, a doorbell, and otherwise a background *sweep* that refills the next QP.  Refill
is lazy and exact: ``tokens += rate * (now - last)`` in bytes/clock with ``frac_bits`` fraction bits, so credit
is never lost to sweep latency, only capped at ``burst_bytes``.  A pick sends ``min(pending, mtu)`` bytes and
debits them byte-accurately; a QP is sent from only when its tokens are > 0 and it has pending bytes (two
bitmaps in flip-flops, one bit per QP, say which QPs a pick may try: credit positive within 8 clocks, work).
Picks go through a small descriptor FIFO to the framer, which emits the packets on ``m_axis`` back to back.
After reset, one pass of n_qps clocks zeroes every QP's state.  Rate writes and doorbells wait in a holding
register each, so each port takes one request per two clocks at most.

For 400 MHz (<= 6 logic levels per path) the pick is hierarchical, in four pipeline stages: the QPs form
``2**(qp_bits // 2)`` groups (32 groups of 32 at 1024 QPs); stage 1 picks the next group round robin from a
registered "group has an eligible QP" vector, stage 2 fetches that group's eligible bits and round-robin mask,
stage 3 takes the first QP after the group's pointer (else the group's first) as a one-hot, stage 4 encodes
it and checks the operations in flight.  Stages 2 and 3 leave out the QPs whose token bits are not cleared
yet (issued last clock, issuing now, issuing next clock), so successive picks do not go stale: a pick can
issue every clock, in the same group or not.  The group and in-group pointers move on picks issued, so a
pick dropped for lack of FIFO room keeps its turn.  The read-modify-write has six stages after the issue
(read and elapsed time; the ``rate * dt`` multiply; two for the credit sums, each a 2-part add whose high
half follows its low half one clock later, see ``hw.skew_add``; write-back; bitmap update): a refill product
at or above ``2**prod_cut`` caps the credit directly, and the cap, credit > 0 and token-hint comparisons are
the signs of sums computed in parallel, so no path holds more than half a wide add.  No operation reads a
QP's word while a pick, rate write, doorbell or clear of that QP is in flight (the issue stage checks the
four stages before the write-back; the write-back stage writes in the clock of the read and the read port
is transparent to it; rate writes, doorbells and sweeps wait for any operation of the QP); a pick may
overtake a sweep, as refills telescope.  The pipeline thus equals one operation per clock done in one step
(the clock-by-clock scoreboard against ``sw.cc.CycleTokenBucket`` checks it).

Pick rate: one per clock.  Re-pick latency of the same QP: 11 clocks from one pick's issue to the next
(write-back at +5, bitmaps at +7, pick stages +8..+10, issue +11), so one QP alone reaches line rate without
bubbles when its packets are at least 11 beats long (1408 B at 1024 bits, below a 4096 B MTU); n QPs, in one
group or several, need packets of at least 11 / n beats to fill the link (the tests run 4 QPs of one and two
groups with 12-beat packets; short packets are also bounded by the ``fifo_depth`` picks in flight).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.skew_add import align, const_skewed, delay, flat, invert, skew_add, split
from hw.stream import AxiStream, keep_for_remaining

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
    """(one-hot of the lowest set bit of ``x``, any bit set), shallow: ORs of 5-bit chunks; the chunks up to
    the first non-empty one as ``ors ^ (ors - 1)`` (a carry chain, which the LUT mapper cannot turn into a
    ripple of ORs); then each bit against that and its lower chunk-mates (one LUT)."""
    chunks = [x[c:c + 5] for c in range(0, len(x), 5)]
    ors = _kept(m, Cat(*(ch.any() for ch in chunks)), f"{name}_or")
    upto = _kept(m, ors ^ (ors - 1), f"{name}_upto")   # chunk c is at or below the first non-empty chunk
    f = _kept(m, Cat(*(x[i] & upto[i // 5] & ~x[i - i % 5:i].any() if i % 5 else x[i] & upto[i // 5]
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


def and_or(sel, vec, size: int):
    """The ``size``-bit word of ``vec`` that the one-hot ``sel`` selects (an AND-OR mux)."""
    return Cat(*(Cat(*(sel[g] & vec[g * size + i] for g in range(len(sel)))).any() for i in range(size)))


class TxScheduler(wiring.Component):
    """Paces N QPs by per-QP token buckets held in memory and emits their packets on one AXI-Stream.

    Ports: ``doorbell`` (qp, bytes) adds work; ``rate_wr`` (qp, rate) sets a QP's rate in bytes/clock with
    ``frac_bits`` fraction bits (values above line rate are clamped to it); ``m_axis`` carries the packets
    (``tuser`` = QP); ``tx_pkts``/``tx_bytes``/``tx_last_qp``/``tx_last_len`` count what left.
    """

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024, mtu_bytes: int = 4096,
                 burst_bytes: int = 16384, fifo_depth: int = 8, frac_bits: int = RATE_FRAC_BITS) -> None:
        if data_width <= 0 or data_width % 8:
            raise ValueError(f"data_width must be a positive multiple of 8, not {data_width}")
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise ValueError(f"n_qps must be a power of two >= 2, not {n_qps}")
        if not 1 <= mtu_bytes <= burst_bytes:
            raise ValueError(f"need 1 <= mtu_bytes <= burst_bytes, got mtu {mtu_bytes} burst {burst_bytes}")
        if fifo_depth < PIPE_STAGES + 2:
            raise ValueError(f"fifo_depth must be >= {PIPE_STAGES + 2} (picks in flight), not {fifo_depth}")
        self.data_width = data_width
        self.bytes_per_beat = data_width // 8
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.mtu_bytes = mtu_bytes
        self.burst_bytes = burst_bytes
        self.fifo_depth = fifo_depth
        self.frac_bits = frac_bits
        self.line_rate_reg = self.bytes_per_beat << frac_bits
        self.rate_bits = self.line_rate_reg.bit_length()
        self.len_bits = mtu_bytes.bit_length()
        burst_units = burst_bytes << frac_bits
        self.token_bits = max(burst_units.bit_length(), (mtu_bytes << frac_bits).bit_length()) + 2
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
            "rate_clamped": Out(1),
            "tx_pkts": Out(32),
            "tx_bytes": Out(48),
            "tx_last_qp": Out(self.qp_bits),
            "tx_last_len": Out(self.len_bits),
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
        rd = mem.read_port(transparent_for=(wr,))
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

        def idx_is(q, i):
            return q[:in_bits] == i if in_bits else Const(1, 1)

        def any_in_flight(q):
            return Cat(*((r.op != OP_NONE) & (r.q == q) for r in flight)).any()

        room = Signal()  # registered: the FIFO has room for the picks in flight and one more (module docstring)
        init_done = Signal()  # after reset, one pass writes every QP's state to zero (BRAMs keep content)

        # ---- pick stage 1: round robin over the groups with an eligible QP (one-hot from here on) -------------
        gb = self.group_bits
        gh2, v2 = Signal(n_grp, name="gh2"), Signal(name="v2")
        g_above = Signal(n_grp)   # the groups after the one of the last pick issued (a dropped pick keeps its turn)
        f1, any1 = rr_onehot(m, grp_any, grp_any & g_above, "g1")
        m.d.sync += [gh2.eq(f1), v2.eq(any1)]
        with m.If(rec_a.op == OP_PICK):
            m.d.sync += g_above.eq(Cat(*(grp_of(rec_a.q) < g for g in range(n_grp))))

        # ---- pick stage 2: the group's eligible QPs, less the ones issued in the last clock, this clock and
        # the next (their token bits clear only later; older ones are cleared in ``eligible`` already) ---------
        q_i, v_i = Signal(self.qp_bits, name="q_i"), Signal(name="v_i")   # the pick in the issue stage
        oh_i, gh_i = Signal(grp_size, name="oh_i"), Signal(n_grp, name="gh_i")
        oh4, gh4, v4 = Signal(grp_size, name="oh4"), Signal(n_grp, name="gh4"), Signal(name="v4")  # stage 4
        go_i, go4 = Signal(name="go_i"), Signal(name="go4")  # the pick will (most likely) issue now / next clock
        m.d.comb += [go_i.eq(v_i & room & init_done), go4.eq(v4 & room & init_done)]
        a_grp = gh2.bit_select(grp_of(rec_a.q), 1) if gb else Const(1, 1)
        excl = Signal(grp_size, name="excl")
        m.d.comb += excl.eq(Cat(*((go_i & (gh_i & gh2).any() & oh_i[i]) | (go4 & (gh4 & gh2).any() & oh4[i])
                                  | (blk[0] & a_grp & idx_is(rec_a.q, i)) for i in range(grp_size))))
        el2, rr2 = and_or(gh2, eligible, grp_size), and_or(gh2, rr_mask, grp_size)
        gh3, v3, same3 = Signal(n_grp, name="gh3"), Signal(name="v3"), Signal(name="same3")
        vec3, up3 = Signal(grp_size, name="vec3"), Signal(grp_size, name="up3")
        m.d.sync += [gh3.eq(gh2), v3.eq(v2), vec3.eq(el2 & ~excl), up3.eq(el2 & ~excl & rr2),
                     same3.eq(v3 & (gh3 == gh2))]

        # ---- pick stage 3: the first QP after the group's round-robin pointer, else the group's first; not
        # the one stage 3 chose last clock (issuing next clock) --------------------------------------------------
        own_go = same3 & v4 & room & init_done
        vec_m = _kept(m, Cat(*(vec3[i] & ~(oh4[i] & own_go) for i in range(grp_size))), "vec_m")
        up_m = _kept(m, Cat(*(up3[i] & ~(oh4[i] & own_go) for i in range(grp_size))), "up_m")
        f3, any3 = rr_onehot(m, vec_m, up_m, "q3")
        m.d.sync += [oh4.eq(f3), gh4.eq(gh3), v4.eq(v3 & any3)]

        # ---- pick stage 4: the QP number, and whether a pick, rate write, doorbell or clear of it will be in
        # stages b..d when it issues ------------------------------------------------------------------------------
        g4 = encode_onehot(gh4) if gb else Const(0, 0)
        pre_blk = Signal(name="pre_blk")
        m.d.sync += [q_i.eq(Cat(encode_onehot(oh4), g4)), oh_i.eq(oh4), gh_i.eq(gh4), v_i.eq(v4),
                     pre_blk.eq(Cat(*(b & (gh4.bit_select(grp_of(r.q), 1) if gb else 1)
                                      & oh4.bit_select(r.q[:in_bits], 1)
                                      for b, r in zip(blk[:3], flight[:3], strict=True))).any())]

        # ---- issue: one operation per clock.  A pick goes if no pick, rate write, doorbell or clear of its QP
        # is in flight (a pick may overtake a sweep); rate writes, doorbells and sweeps wait while any operation
        # of their QP is in stages a..d (the write-back stage writes in this clock, the read is transparent) -----
        picks_ae = sum((r.op == OP_PICK).as_unsigned() for r in (*flight, rec_wb))
        m.d.sync += room.eq(fifo.level + picks_ae + 2 <= self.fifo_depth)

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
        with m.If(~init_done):
            m.d.comb += [op0.eq(OP_CLEAR), q0.eq(sweep_ptr)]
            m.d.sync += sweep_ptr.eq(sweep_ptr + 1)
            with m.If(sweep_ptr == n - 1):
                m.d.sync += init_done.eq(1)
        with m.Elif(v_i & room & ~pre_blk & ~(blk[0] & (rec_a.q == q_i))):
            m.d.comb += [op0.eq(OP_PICK), q0.eq(q_i)]
        with m.Elif(rate_v & ~any_in_flight(rate_q)):
            m.d.comb += [op0.eq(OP_RATE), q0.eq(rate_q), arg0.eq(rate_arg)]
            m.d.sync += rate_v.eq(0)
        with m.Elif(bell_v & ~any_in_flight(bell_q)):
            m.d.comb += [op0.eq(OP_DOORBELL), q0.eq(bell_q), arg0.eq(bell_arg)]
            m.d.sync += bell_v.eq(0)
        with m.Elif(~any_in_flight(sweep_ptr)):
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
        rate_old_b, rate_b = Signal(self.rate_bits), Signal(self.rate_bits)   # refill at the old rate
        bell_b = Signal(pb + 1)
        flags_b = Signal(3)  # pending > 0, pending > MTU (work left after a send), a doorbell adds > 0 bytes
        m.d.sync += [dt_b.eq(now - st.last_ts), rate_old_b.eq(st.rate),
                     rate_b.eq(Mux(rec_a.op == OP_RATE, rec_a.arg, st.rate)),   # the rate after the operation
                     slen_b.eq(Mux(pend_lt, pend, mtu)), pend_b.eq(pend), bell_b.eq(pend + rec_a.arg),
                     flags_b.eq(Cat(pend != 0, pend_gt, rec_a.arg != 0))]
        tok = split(m, st.tokens, lo, w, "tok")                                            # lo a, hi b
        t1 = skew_add(m, tok, const_skewed(-(burst_units + 1), lo, w), lo, w, "t1")        # tok-burst-1: b, c
        t2 = skew_add(m, tok, const_skewed(-1, lo, w), lo, w, "t2")                        # tok - 1: b, c

        # ---- stage b: the refill multiply (DSPs); rate and send length in token units --------------------------
        prod_c = Signal(TIMESTAMP_BITS + self.rate_bits)
        m.d.sync += prod_c.eq(rate_old_b * dt_b)
        hint_r = split(m, rate_b << HINT_SHIFT, lo, w, "hr")                               # lo b, hi c
        nsl = invert(m, split(m, slen_b << frac, lo, w, "sl"), "sl")                       # ~(len << frac)
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
        hi_nz_d = Signal()  # the product alone is above every bound: capped, credit and hints positive
        m.d.sync += hi_nz_d.eq(prod_c[self.prod_cut:] != 0)
        p = split(m, prod_c[:self.prod_cut], lo, w, "p")
        s0 = skew_add(m, align(m, tok_b, 1, "tokc"), p, lo, w, "s0")     # tok + p: the refill before the cap
        s1 = skew_add(m, align(m, t1, 1, "t1c"), p, lo, w, "s1")         # >= 0: above the burst (cap)
        s2 = skew_add(m, align(m, t2, 1, "t2c"), p, lo, w, "s2")         # >= 0: credit positive
        s3 = skew_add(m, t3, p, lo, w, "s3")                             # >= 0: hint without a send
        s5 = skew_add(m, t5, p, lo, w, "s5")                             # the credit after a send (no cap)
        blr = skew_add(m, blm, align(m, hint_r, 1, "hrc"), lo, w, "blr")  # >= 0: hint after a capped send
        t4 = skew_add(m, t3, align(m, nsl, 1, "nslc"), lo, w, "t4", carry_in=1)   # tok - 1 + R - Ls: d, wb
        pend_d, pend_sent_d, slen_d, flags_d, rate_d = (Signal(pb), Signal(pb), Signal(self.len_bits), Signal(3),
                                                       Signal(self.rate_bits))
        m.d.sync += [pend_d.eq(pend_c), pend_sent_d.eq(pend_sent_c), slen_d.eq(slen_c), flags_d.eq(flags_c),
                     rate_d.eq(rate_c)]

        # ---- stage d: the sums' high parts ------------------------------------------------------------------
        s4 = skew_add(m, t4, align(m, p, 1, "pd"), lo, w, "s4")          # >= 0: hint after a send (no cap)
        pend_w, pend_sent_w, slen_w, flags_w, rate_w = (Signal(pb), Signal(pb), Signal(self.len_bits), Signal(3),
                                                       Signal(self.rate_bits))
        hi_nz_w = Signal()
        m.d.sync += [pend_w.eq(pend_d), pend_sent_w.eq(pend_sent_d), slen_w.eq(slen_d), flags_w.eq(flags_d),
                     rate_w.eq(rate_d), hi_nz_w.eq(hi_nz_d)]

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
        m.d.comb += [send_len.eq(slen_w), send.eq((op_w == OP_PICK) & pos & flags_w[0])]
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
        m.d.sync += grp_any.eq(Cat(*(eligible[g * grp_size:(g + 1) * grp_size].any() for g in range(n_grp)))
                               | set_grp)
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
        is_last = Signal()
        m.d.comb += is_last.eq(remaining <= bpb)
        m.d.comb += [
            axis.tvalid.eq(active),
            axis.tlast.eq(is_last),
            axis.tkeep.eq(keep_for_remaining(remaining, bpb)),
            axis.tuser.eq(cur_qp),
            axis.tdata.eq(Cat(seq, cur_qp.as_unsigned(), beat)),
        ]
        load = Signal()
        m.d.comb += load.eq((~active | (axis.tready & is_last)) & fifo.r_rdy)
        m.d.comb += fifo.r_en.eq(load)
        with m.If(load):
            d_qp = fifo.r_data[:self.qp_bits]
            d_len = fifo.r_data[self.qp_bits:]
            m.d.sync += [active.eq(1), cur_qp.eq(d_qp), cur_len.eq(d_len), remaining.eq(d_len), beat.eq(0)]
        with m.Elif(active & axis.tready & is_last):
            m.d.sync += active.eq(0)
        with m.If(active & axis.tready):
            with m.If(~is_last):
                m.d.sync += [remaining.eq(remaining - bpb), beat.eq(beat + 1)]
            with m.Else():
                m.d.sync += seq.eq(seq + 1)
            with m.If(beat == 0):
                m.d.sync += [self.tx_pkts.eq(self.tx_pkts + 1), self.tx_bytes.eq(self.tx_bytes + cur_len),
                             self.tx_last_qp.eq(cur_qp), self.tx_last_len.eq(cur_len)]
        return m
