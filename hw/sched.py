"""Per-QP TX rate limiter and scheduler: token buckets in a BRAM, work-conserving round-robin, one beat/clock.

Every QP has one memory word (tokens, last refill time, rate, pending bytes).  A single read-modify-write
pipeline serves one operation per clock, in priority order: a *pick* of the round-robin winner among the
eligible QPs, a rate write, a doorbell, and otherwise a background *sweep* that refills the next QP.  Refill
is lazy and exact: ``tokens += rate * (now - last)`` in bytes/clock with ``frac_bits`` fraction bits, so credit
is never lost to sweep latency, only capped at ``burst_bytes``.  A pick sends ``min(pending, mtu)`` bytes and
debits them byte-accurately; a QP is sent from only when its tokens are > 0 and it has pending bytes (two
bitmaps in flip-flops, one bit per QP, say which QPs a pick may try: credit positive within 8 clocks, work).
Picks go through a small descriptor FIFO to the framer, which emits the packets on ``m_axis`` back to back.
After reset, one pass of n_qps clocks zeroes every QP's state.
The read-modify-write is a five-stage pipeline (issue and read; elapsed time; the ``rate * dt`` multiply in
its own stage; add and cap; apply and write back), so no stage holds more than one wide adder or the
multiply.  No operation reads a QP's word while a pick, rate write or doorbell of that QP is in flight (they
clear its token bit until write-back; rate writes, doorbells and sweeps wait for any operation of the QP); a
pick may overtake a sweep, as refills telescope.  The pipeline thus equals one operation per clock done in
one step (the clock-by-clock scoreboard against ``sw.cc.CycleTokenBucket`` checks it).  Pick ->
re-eligibility of the same QP takes five clocks, so one QP alone reaches line rate without bubbles when its
packets are at least five beats long (640 B at 1024 bits); several QPs fill the link at any packet size.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.stream import AxiStream, keep_for_remaining

RATE_FRAC_BITS = 24
TIMESTAMP_BITS = 32
PENDING_BITS = 32

OP_NONE, OP_PICK, OP_RATE, OP_DOORBELL, OP_SWEEP, OP_CLEAR = range(6)
PIPE_STAGES = 4
"""Clocks from issuing an operation to its write-back (stages a..d after the issue)."""
HINT_SHIFT = 3
"""A QP's token bit is set when its credit will be positive within 2**HINT_SHIFT clocks."""


def rate_to_reg(rate_bps: float, clk_hz: float, frac_bits: int = RATE_FRAC_BITS) -> int:
    """Rate register value (bytes per clock, ``frac_bits`` fraction bits) closest to ``rate_bps``."""
    return int(round(rate_bps / 8 / clk_hz * (1 << frac_bits)))


def reg_to_rate_bps(rate_reg: int, clk_hz: float, frac_bits: int = RATE_FRAC_BITS) -> float:
    """Inverse of :func:`rate_to_reg`: the exact rate a register value programs."""
    return rate_reg / (1 << frac_bits) * 8 * clk_hz


def first_set(m: Module, bits):
    """(any, index) of the lowest set bit of ``bits``: a balanced tree of muxes, each level in signals.

    Intermediate results are named signals because Amaranth does not share repeated sub-expressions.
    """
    n = len(bits)
    if n == 1:
        return bits[0], Const(0, 1)
    half = 1 << ((n - 1).bit_length() - 1)
    lo_any, lo_idx = first_set(m, bits[:half])
    hi_any, hi_idx = first_set(m, bits[half:])
    any_ = Signal()
    idx = Signal((n - 1).bit_length())
    m.d.comb += [any_.eq(lo_any | hi_any), idx.eq(Mux(lo_any, lo_idx, hi_idx + half))]
    return any_, idx


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
        if fifo_depth < PIPE_STAGES + 1:
            raise ValueError(f"fifo_depth must be >= {PIPE_STAGES + 1} (picks in flight), not {fifo_depth}")
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

        m.submodules.mem = mem = Memory(shape=self.state_layout, depth=n, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))
        m.submodules.fifo = fifo = SyncFIFO(width=self.qp_bits + self.len_bits, depth=self.fifo_depth)

        now = Signal(TIMESTAMP_BITS)
        m.d.sync += now.eq(now + 1)

        tok_ok = Signal(n)
        has_work = Signal(n)
        rr_ptr = Signal(self.qp_bits)
        sweep_ptr = Signal(self.qp_bits)
        rec = self.op_layout
        rec_a, rec_b, rec_c, rec_d = (Signal(rec, name=f"rec_{x}") for x in "abcd")

        # ---- stage 0: issue one operation.  Rate writes, doorbells and sweeps wait while their QP is in stages
        # a..c (stage d writes in the same clock and the read port is transparent to it); picks see the token
        # bitmap, which stage d maintains (see below) --------------------------------------------------------
        def in_flight(q):
            return Cat(*((r.op != OP_NONE) & (r.q == q) for r in (rec_a, rec_b, rec_c))).any()

        eligible = Signal(n)
        upper = Signal(n)
        m.d.comb += [eligible.eq(tok_ok & has_work), upper.eq(eligible & Cat(*(rr_ptr <= i for i in range(n))))]
        up_any, up_idx = first_set(m, upper)
        el_any, el_idx = first_set(m, eligible)
        pick_q = Mux(up_any, up_idx, el_idx)

        picks_in_flight = sum((r.op == OP_PICK).as_unsigned() for r in (rec_a, rec_b, rec_c, rec_d))
        fifo_room = fifo.level + picks_in_flight < self.fifo_depth

        op0 = Signal(range(6))
        q0 = Signal(self.qp_bits)
        arg0 = Signal(32)
        init_done = Signal()  # after reset, one pass writes every QP's state to zero (BRAMs keep content)
        rate_q, bell_q = self.rate_wr.payload.qp, self.doorbell.payload.qp
        with m.If(~init_done):
            m.d.comb += [op0.eq(OP_CLEAR), q0.eq(sweep_ptr)]
            m.d.sync += sweep_ptr.eq(sweep_ptr + 1)
            with m.If(sweep_ptr == n - 1):
                m.d.sync += init_done.eq(1)
        with m.Elif(el_any & fifo_room):
            m.d.comb += [op0.eq(OP_PICK), q0.eq(pick_q)]
        with m.Elif(self.rate_wr.valid & ~in_flight(rate_q)):
            rate_in = self.rate_wr.payload.rate
            clamp = rate_in > self.line_rate_reg
            m.d.comb += [op0.eq(OP_RATE), q0.eq(rate_q),
                         arg0.eq(Mux(clamp, self.line_rate_reg, rate_in)), self.rate_wr.ready.eq(1)]
            m.d.sync += self.rate_clamped.eq(clamp)
        with m.Elif(self.doorbell.valid & ~in_flight(bell_q)):
            m.d.comb += [op0.eq(OP_DOORBELL), q0.eq(bell_q),
                         arg0.eq(self.doorbell.payload.bytes), self.doorbell.ready.eq(1)]
        with m.Elif(~in_flight(sweep_ptr)):
            m.d.comb += [op0.eq(OP_SWEEP), q0.eq(sweep_ptr)]
            m.d.sync += sweep_ptr.eq(sweep_ptr + 1)
        m.d.comb += rd.addr.eq(q0)
        m.d.sync += [rec_a.op.eq(op0), rec_a.q.eq(q0), rec_a.arg.eq(arg0)]

        # ---- stage a: the memory word arrives; time of the operation and elapsed clocks ----------------------
        st = rd.data
        tok_b = Signal(signed(self.token_bits))
        rate_b = Signal(self.rate_bits)
        pend_b = Signal(PENDING_BITS)
        dt_b = Signal(TIMESTAMP_BITS)
        m.d.sync += [rec_b.eq(rec_a), rec_b.t.eq(now), tok_b.eq(st.tokens), rate_b.eq(st.rate),
                     pend_b.eq(st.pending), dt_b.eq(now - st.last_ts)]

        # ---- stage b: the refill multiply (a DSP cascade with its output register) -------------------------
        tok_c = Signal(signed(self.token_bits))
        rate_c = Signal(self.rate_bits)
        pend_c = Signal(PENDING_BITS)
        prod_c = Signal(TIMESTAMP_BITS + self.rate_bits)
        m.d.sync += [rec_c.eq(rec_b), tok_c.eq(tok_b), rate_c.eq(rate_b), pend_c.eq(pend_b),
                     prod_c.eq(rate_b * dt_b)]

        # ---- stage c: add and cap at the burst -------------------------------------------------------------
        sum_wide = Signal(signed(self.token_bits + TIMESTAMP_BITS + self.rate_bits))
        m.d.comb += sum_wide.eq(tok_c + prod_c)
        refilled = Signal(signed(self.token_bits + 1))
        rate_d = Signal(self.rate_bits)
        pend_d = Signal(PENDING_BITS)
        m.d.sync += [rec_d.eq(rec_c), refilled.eq(Mux(sum_wide > burst_units, burst_units, sum_wide)),
                     rate_d.eq(rate_c), pend_d.eq(pend_c)]

        # ---- stage d: apply the operation, write back, descriptor out, bitmaps -----------------------------
        op_w, q_w, arg_w, t_w = rec_d.op, rec_d.q, rec_d.arg, rec_d.t
        new = Signal(self.state_layout)
        m.d.comb += [new.tokens.eq(refilled), new.last_ts.eq(t_w), new.rate.eq(rate_d), new.pending.eq(pend_d)]
        send_len = Signal(self.len_bits)
        m.d.comb += send_len.eq(Mux(pend_d < self.mtu_bytes, pend_d, self.mtu_bytes))
        send = Signal()
        with m.Switch(op_w):
            with m.Case(OP_PICK):
                with m.If((refilled > 0) & (pend_d != 0)):
                    m.d.comb += [send.eq(1), new.tokens.eq(refilled - (send_len << frac)),
                                 new.pending.eq(pend_d - send_len)]
            with m.Case(OP_RATE):
                m.d.comb += new.rate.eq(arg_w)
            with m.Case(OP_DOORBELL):
                total = pend_d + arg_w
                m.d.comb += new.pending.eq(Mux(total >> PENDING_BITS, (1 << PENDING_BITS) - 1, total))
            with m.Case(OP_CLEAR):
                m.d.comb += new.eq(0)
        active_w = op_w != OP_NONE
        m.d.comb += [wr.addr.eq(q_w), wr.data.eq(new), wr.en.eq(active_w)]
        m.d.comb += [fifo.w_data.eq(Cat(q_w, send_len)), fifo.w_en.eq(send)]

        # bitmap updates as whole-vector operations on one-hot decodes (a per-bit mux chain is slow to build).
        # A pick, rate write or doorbell clears its QP's token bit until stage d writes the true value back, so
        # no pick reads a word they are about to change.  A sweep does not: a pick may overtake it, since a
        # refill from the older word gives the same credit (refills telescope, the cap composes); the
        # overtaken sweep then leaves the bitmaps alone and the pick's write-back wins.
        ones = Const((1 << n) - 1, n)
        overtaken = (op_w == OP_SWEEP) & in_flight(q_w)
        dec_w = Signal(n)
        dec0 = Signal(n)
        blocking0 = (op0 == OP_PICK) | (op0 == OP_RATE) | (op0 == OP_DOORBELL)
        m.d.comb += [dec_w.eq(Cat(*(active_w & ~overtaken & (q_w == i) for i in range(n)))),
                     dec0.eq(Cat(*(blocking0 & (q0 == i) for i in range(n))))]
        # the token bit is a hint for picks (a pick re-checks the credit at its own time in stage d): it is set
        # if the credit will be positive within HINT_CLOCKS, so a QP paced near line rate does not wait for a
        # sweep after each packet (a pick arrives >= 5 clocks later; one that finds no credit sends nothing)
        hint = Signal()
        m.d.comb += hint.eq(new.tokens + (new.rate << HINT_SHIFT) > 0)
        tok_next = ((tok_ok & ~dec_w) | (dec_w & Mux(hint, ones, 0))) & ~dec0
        work_next = (has_work & ~dec_w) | (dec_w & Mux(new.pending != 0, ones, 0))
        with m.If(op0 == OP_PICK):
            m.d.sync += rr_ptr.eq(q0 + 1)
        m.d.sync += [tok_ok.eq(tok_next), has_work.eq(work_next)]

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
