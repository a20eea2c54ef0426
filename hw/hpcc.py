"""INT/HPCC engine: per-QP window and rate from INT-echoing ACKs, bit-exact with ``sw.cc.hpcc.Hpcc``.

The second CC mode of the NIC.  Per QP, one state word (W, Wc, U, incStage, last-update sequence, rate, hop
count) sits in a BRAM, and the last INT record of every hop (timestamp, tx bytes, queue length) in a second
BRAM addressed by (QP, hop).  One ACK at a time walks an FSM: read the QP, then per hop read the old record,
write the new one and - when the hop count matches the stored one - form the two utilisation terms
``qlen/(B*T)`` and ``txRate/B`` on two saturating sequential dividers (hw.lib.divider) and keep the largest;
then the EWMA of U over tau/T, the multiplicative (``Wc*eta/U + W_AI``) or additive (``Wc + W_AI``) window,
incStage and Wc once per RTT, and the rate ``W*8e6/T`` on a third divider; the rate goes to the limiter on
``rate_wr`` (increment units of ``sw.cc.RateToIncrement``, the same port as hw.dcqcn) with the window on
``window_bytes``.

Throughput: ``ack`` is a ready/valid stream whose payload must stay stable until ``ready`` (it is read in
place, not copied); ``ready`` rises when the ACK is done, so the initiation interval is data dependent:
4 clocks for an ACK without INT, ``4 + 2*H`` for one that only records H hops, more for sampled hops and
updates; ``ack_ii_clocks`` gives the bound, e.g. 465 clocks at 3 hops, 100 Gb/s, ``chunk_bits=32``
(1.16 us at 400 MHz, 0.86 M ACKs/s per engine; 538 before the tx-term divisor was clamped to the dividend's
width, 108 before the split; 137 with ``chunk_bits=0``).
Timing (400 MHz): no carry chain is longer than ``chunk_bits`` per clock - the 64-bit timestamp and sequence
deltas and compares settle one chunk per clock (``hw.lib.carry_split``), the products are DSP-sized partial
products, registered, summed by such split adds, and the dividers resolve one quotient bit per
``ceil(W/chunk_bits)`` clocks (``hw.lib.divider``); the FSM waits the settle clocks, so the results stay exact:
``hw report`` counts 6 logic levels (was 18).  The FSM's exits look at flip-flops (the last-hop compare is
made a clock ahead) and ``init.ready``, ``ack.ready`` and ``rate_wr.valid`` are flip-flops, so a top level
adds its own logic to no state decode.
Like every BRAM, the state memories are zero only at configuration: ``init`` each QP before its ACKs.
With ``runtime_cfg=True`` the constants come from the ``cfg`` input (``HPCC_CFG``, a register bank) instead of
being built in: W_max, W_min and W_AI (rate x T / 8e6) are recomputed in the background, one after another, by
split DSP-sized products (``hw.lib.carry_split.settled_mul``) and a fourth divider, so a new value applies to the
ACKs and inits that start ``cfg_settle_clocks`` after it was written.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.lib.carry_split import mul_clocks, n_chunks, settled_add, settled_gt, settled_mul
from hw.lib.divider import SeqDivider, divider_clocks
from sw.cc import AckInfo, HpccParams, RateToIncrement
from sw.cc.fixedpoint import BITS_NS_PER_KBPS, U_BITS, U_FRAC_BITS, U_MAX

MAX_HOPS_LIMIT = 16
HOP_COUNT_BITS = 5
SEQ_BITS = 64
KIND_INIT, KIND_NO_INT, KIND_RECORD, KIND_NO_SAMPLE, KIND_UPDATE = range(5)

QP_STATE = data.StructLayout({
    "window_bytes": unsigned(32),
    "wc_bytes": unsigned(32),
    "u_q16": unsigned(U_BITS),
    "inc_stage": unsigned(8),
    "rate_kbps": unsigned(32),
    "last_update_seq": unsigned(SEQ_BITS),
    "n_hops": unsigned(HOP_COUNT_BITS),
})


HPCC_CFG = data.StructLayout({
    "line_rate_kbps": unsigned(32),
    "min_rate_kbps": unsigned(32),
    "base_rtt_ns": unsigned(32),
    "eta_q16": unsigned(U_FRAC_BITS + 1),
    "max_stage": unsigned(8),
    "rate_ai_kbps": unsigned(32),
})
"""The run-time HPCC constants (``runtime_cfg=True``): the ``HpccParams`` fields of the algorithm, model widths."""


def hop_layout(ts_bits: int, tx_bits: int) -> data.StructLayout:
    """One echoed INT hop as the ACK parser delivers it (``sw.cc.IntHop`` field for field)."""
    return data.StructLayout({"ts_ns": unsigned(ts_bits), "tx_bytes": unsigned(tx_bits),
                              "qlen_bytes": unsigned(32), "link_kbps": unsigned(32)})


def ack_layout(qp_bits: int, max_hops: int, ts_bits: int, tx_bits: int) -> data.StructLayout:
    """An ACK event: QP, cumulative ack sequence, the sender's snd_nxt, and up to ``max_hops`` INT hops."""
    return data.StructLayout({"qp": unsigned(qp_bits), "ack_seq": unsigned(SEQ_BITS),
                              "snd_nxt": unsigned(SEQ_BITS), "n_hops": unsigned(HOP_COUNT_BITS),
                              "hops": data.ArrayLayout(hop_layout(ts_bits, tx_bits), max_hops)})


class HpccEngine(wiring.Component):
    """HPCC senders of ``n_qps`` QPs with up to ``max_hops`` INT hops; constants from an ``HpccParams``.

    Inputs: ``init`` (qp) resets a QP to W = Wc = W_max at line rate; ``ack`` an ACK (``ack_layout``, an
    ``n_hops`` above ``max_hops`` counts as ``max_hops``).  Outputs: ``rate_wr`` (qp, limiter increment) and
    ``window_bytes`` after every init and window update; ``trace_*`` one record per event.  With
    ``runtime_cfg`` the ``HPCC_CFG`` constants come from ``cfg`` (``params`` gives their reset-time windows and
    the widths; T may go up to ``max_base_rtt_ns``).
    """

    def __init__(self, *, n_qps: int = 1024, max_hops: int = 8, params: HpccParams | None = None,
                 clk_period_ps: int = 2500, rate_conv: RateToIncrement | None = None, steps: int = 2,
                 runtime_cfg: bool = False, max_base_rtt_ns: int | None = None, chunk_bits: int = 32) -> None:
        p = params or HpccParams()
        max_t = max_base_rtt_ns if max_base_rtt_ns is not None else p.base_rtt_ns
        if runtime_cfg and not p.base_rtt_ns <= max_t < 1 << 32:
            raise HwParamError(f"max_base_rtt_ns={max_t}: must be in {p.base_rtt_ns}..2^32-1 (the reset T)")
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        if not 1 <= max_hops <= MAX_HOPS_LIMIT:
            raise HwParamError(f"max_hops={max_hops}: must be in 1..{MAX_HOPS_LIMIT}")
        if not 1 <= steps <= 8:
            raise HwParamError(f"steps={steps}: quotient bits per clock must be in 1..8")
        if chunk_bits and not 8 <= chunk_bits <= 64:
            raise HwParamError(f"chunk_bits={chunk_bits}: carry chain bits per clock must be 0 (unsplit) or 8..64")
        self.n_qps, self.max_hops, self.params, self.steps = n_qps, max_hops, p, steps
        self.chunk_bits = chunk_bits
        self.div_steps = 1 if chunk_bits else steps
        self.qp_bits = (n_qps - 1).bit_length()
        self.hop_bits = (max_hops - 1).bit_length()
        self.rate_conv = rate_conv or RateToIncrement(clk_hz=round(1e12 / clk_period_ps))
        self.runtime_cfg = runtime_cfg
        self.t_bits = (max_t if runtime_cfg else p.base_rtt_ns).bit_length()
        self.post_q_bits = 32 if runtime_cfg else max(U_BITS, p.w_max_bytes.bit_length(),
                                                          p.line_rate_kbps.bit_length())
        k8e6 = BITS_NS_PER_KBPS.bit_length()
        post_n_bits = max(self.t_bits + U_BITS + 1, 32 + 16 + 1, 32 + k8e6)
        # a tx-term divisor (link x dts) of 2^n_bits or more means a zero quotient: clamped to 2^n_bits, it takes
        # n_bits + 1 bits instead of up to 95, which shortens the chunked divider's iterations
        tx_n_bits = p.int_tx_bits - 1 + k8e6 + U_FRAC_BITS
        self.div_widths = {   # (n_bits, d_bits, q_bits) of the dividers: queue term, tx term, post-hop, windows
            "q": (32 + k8e6 + U_FRAC_BITS, 32 + self.t_bits, U_BITS),
            "t": (tx_n_bits, min(32 + p.int_ts_bits - 1, tx_n_bits + 1), U_BITS),
            "p": (post_n_bits, max(self.t_bits, U_BITS), self.post_q_bits),
            "c": (32 + self.t_bits, k8e6, 32),
        }
        t_val_bits = self.t_bits if runtime_cfg else max(1, p.base_rtt_ns.bit_length())
        c = chunk_bits
        self.hop_mul_clocks = max(mul_clocks(32, k8e6, c), mul_clocks(32, t_val_bits, c),
                                  mul_clocks(p.int_tx_bits, k8e6, c), mul_clocks(32, p.int_ts_bits - 1, c))
        ew_bits = max(self.t_bits + U_BITS, 1) + 1
        self.ewma_mul_clocks = mul_clocks(self.t_bits, U_BITS, c) + n_chunks(ew_bits, c)
        self.rate_mul_clocks = mul_clocks(32, k8e6, c)       # window x 8e6 before the rate division
        self.out_mul_clocks = mul_clocks(32, max(1, self.rate_conv.mult.bit_length()), c)   # rate x increment unit
        self.out_mul_wait = max(1, self.out_mul_clocks - 1)  # RATE_MULW clocks (WRITE is one of the settle clocks)
        self.w_add_clocks = n_chunks(max(self.post_q_bits, 32) + 2, c)   # W_ADDW clocks: the new window + W_AI
        self.ack_layout = ack_layout(self.qp_bits, max_hops, p.int_ts_bits, p.int_tx_bits)
        qp = unsigned(self.qp_bits)
        cfg_port = {"cfg": In(HPCC_CFG)} if runtime_cfg else {}
        super().__init__({
            **cfg_port,
            "init": In(stream.Signature(qp)),
            "ack": In(stream.Signature(self.ack_layout)),
            "rate_wr": Out(stream.Signature(data.StructLayout({"qp": qp, "rate": unsigned(32)}))),
            "window_bytes": Out(32),
            "trace_seq": Out(32),
            "trace_kind": Out(3),
            "trace_qp": Out(self.qp_bits),
            "trace_hop": Out(HOP_COUNT_BITS),
            "trace_mult": Out(1),
            "trace_wc_update": Out(1),
            "trace_state": Out(QP_STATE),
        })

    def ack_bits(self, qp: int, ack: AckInfo) -> int:
        """The ``ack`` payload for an ``sw.cc.AckInfo`` of QP ``qp`` as one integer (testbenches, HIL glue)."""
        if len(ack.hops) > self.max_hops:
            raise HwParamError(f"ACK with {len(ack.hops)} INT hops: this engine takes at most {self.max_hops}")
        ts_mask, tx_mask = (1 << self.params.int_ts_bits) - 1, (1 << self.params.int_tx_bits) - 1
        hops = [{"ts_ns": x.ts_ns & ts_mask, "tx_bytes": x.tx_bytes & tx_mask, "qlen_bytes": x.qlen_bytes,
                 "link_kbps": x.link_kbps} for x in ack.hops]
        return self.ack_layout.const({"qp": qp, "ack_seq": ack.ack_seq, "snd_nxt": ack.snd_nxt,
                                      "n_hops": len(ack.hops), "hops": hops}).as_bits()

    @property
    def cfg_settle_clocks(self) -> int:
        """Clocks after a ``cfg`` change until the derived windows (W_max, W_min, W_AI) follow it."""
        return 2 * 3 * (3 + self.cfg_mul_clocks + self.div_clocks("c")) if self.runtime_cfg else 0

    @property
    def cfg_mul_clocks(self) -> int:
        """Clocks the split product rate x T of the window derivation (``runtime_cfg``) takes to settle."""
        return mul_clocks(32, self.t_bits, self.chunk_bits)

    @property
    def delta_clocks(self) -> int:
        """Clocks the registered hop records' deltas (timestamp, tx bytes) take to settle (``hw.lib.carry_split``)."""
        if not self.chunk_bits:
            return 1
        return n_chunks(max(self.params.int_ts_bits, self.params.int_tx_bits), self.chunk_bits)

    def div_clocks(self, name: str) -> int:
        """Clocks from start to done of divider ``name`` (``div_widths``) when its quotient does not saturate."""
        return divider_clocks(*self.div_widths[name], self.div_steps, self.chunk_bits)

    def divider(self, name: str) -> SeqDivider:
        """A new divider ``name`` of ``div_widths`` with this engine's steps and chunking."""
        return SeqDivider(*self.div_widths[name], self.div_steps, self.chunk_bits)

    def ack_ii_clocks(self, hops: int, sampled: int | None = None, kind: int = KIND_UPDATE,
                      multiplicative: bool = True) -> int:
        """Clocks per ACK (from ``valid`` seen idle to ``ready``, next ACK taken the clock after) as the FSM walks
        them, with ``rate_wr`` ready; an upper bound, since a saturating division of an unchunked divider ends
        early (a chunked one runs all its clocks)."""
        iq = max(self.div_clocks("q"), self.div_clocks("t")) - 1
        ip = self.div_clocks("p") - 1
        dc = self.delta_clocks
        if kind == KIND_NO_INT:
            return 4                                            # IDLE LOAD WRITE FINISH
        if kind == KIND_RECORD:
            return 4 + 2 * hops                                 # (HOP NEXT) per hop
        sampled = hops if sampled is None else sampled
        if kind == KIND_NO_SAMPLE:
            return 5 + (4 + dc) * hops                          # (HOP DELTA*dc SAMPLE MUL NEXT) per hop, TAU
        mc = self.hop_mul_clocks
        hop_clocks = sampled * (7 + dc + mc + iq) + (4 + dc) * (hops - sampled)   # + MULW*mc MUL DIVS DIVW*(iq+1)
        post = 18 + self.w_add_clocks + self.ewma_mul_clocks + self.rate_mul_clocks + self.out_mul_wait
        return hop_clocks + post + 2 * ip + ((ip + 2) if multiplicative else 0)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        ts_bits, tx_bits = p.int_ts_bits, p.int_tx_bits
        k8e6 = BITS_NS_PER_KBPS
        if self.runtime_cfg:
            c = self.cfg
            t_ns, eta_q16, max_stage = c.base_rtt_ns[:self.t_bits], c.eta_q16, c.max_stage
            line_kbps, min_kbps = c.line_rate_kbps, c.min_rate_kbps
            w_max, w_min, w_ai = (Signal(32, init=w, name=n) for w, n in (
                (p.w_max_bytes, "w_max"), (p.w_min_bytes, "w_min"), (p.w_ai_bytes, "w_ai")))
            self._derive_windows(m, (line_kbps, min_kbps, c.rate_ai_kbps), t_ns, (w_max, w_min, w_ai))
        else:
            t_ns, eta_q16, max_stage = p.base_rtt_ns, p.eta_q16, p.max_stage
            line_kbps, min_kbps = p.line_rate_kbps, p.min_rate_kbps
            w_max, w_min, w_ai = p.w_max_bytes, p.w_min_bytes, p.w_ai_bytes

        bram = {"ram_style": "block"}                  # per-QP state belongs in block RAM, never in LUTs
        m.submodules.state_mem = smem = Memory(shape=QP_STATE, depth=self.n_qps, init=[], attrs=bram)
        swr = smem.write_port()
        srd = smem.read_port()
        rec = data.StructLayout({"ts_ns": unsigned(ts_bits), "tx_bytes": unsigned(tx_bits),
                                 "qlen_bytes": unsigned(32)})
        m.submodules.hop_mem = hmem = Memory(shape=rec, depth=self.n_qps << self.hop_bits, init=[], attrs=bram)
        hwr = hmem.write_port()
        hrd = hmem.read_port()

        m.submodules.div_q = div_q = self.divider("q")
        m.submodules.div_t = div_t = self.divider("t")
        m.submodules.div_p = div_p = self.divider("p")

        ack = self.ack.payload
        qp = Signal(self.qp_bits)
        s = Signal(QP_STATE)
        kind = Signal(3)
        is_ack = Signal()
        measure = Signal()
        n_hops = Signal(HOP_COUNT_BITS)
        h = Signal(HOP_COUNT_BITS)
        have = Signal()
        u_max = Signal(U_BITS)
        tau = Signal(ts_bits)
        tau_c = Signal(self.t_bits)
        rest = Signal(self.t_bits)
        arg = Signal(HOP_COUNT_BITS)
        dts = Signal(ts_bits)
        dtx = Signal(tx_bits)
        qlen = Signal(32)
        link = Signal(32)
        sample = Signal()
        update = Signal()
        mult = Signal()
        w = Signal(max(self.post_q_bits, 32) + 2)
        last_hop = Signal()                           # h is the last hop (h + 1 == n_hops), a clock ahead
        # the FSM states that drive the handshakes, as flip-flops (no state decode in front of a port)
        idle, finish, rate_out = Signal(init=1), Signal(), Signal()
        m.d.comb += [self.init.ready.eq(idle), self.ack.ready.eq(finish), self.rate_wr.valid.eq(rate_out)]

        hop_addr = Cat(h[:self.hop_bits], qp)
        m.d.comb += [srd.addr.eq(qp), hrd.addr.eq(hop_addr), swr.addr.eq(qp), swr.data.eq(s),
                     hwr.addr.eq(hop_addr)]
        new = ack.hops[h[:self.hop_bits]] if self.hop_bits else ack.hops[0]
        m.d.comb += [hwr.data.ts_ns.eq(new.ts_ns), hwr.data.tx_bytes.eq(new.tx_bytes),
                     hwr.data.qlen_bytes.eq(new.qlen_bytes)]

        new_r, old_r = Signal(rec), Signal(rec)
        wait = Signal(range(max(self.delta_clocks, self.hop_mul_clocks, self.ewma_mul_clocks, self.rate_mul_clocks,
                                self.out_mul_wait, self.w_add_clocks) + 1))
        d_ts = settled_add(m, new_r.ts_ns, old_r.ts_ns, ts_bits, self.chunk_bits, subtract=True)
        d_tx = settled_add(m, new_r.tx_bytes, old_r.tx_bytes, tx_bits, self.chunk_bits, subtract=True)
        cb = self.chunk_bits
        q_n, c_qn = settled_mul(m, qlen, k8e6, cb)
        q_d, c_qd = settled_mul(m, link, t_ns, cb)
        t_n, c_tn = settled_mul(m, dtx, k8e6, cb)
        t_d, c_td = settled_mul(m, link, dts[:ts_bits - 1], cb)
        assert max(c_qn, c_qd, c_tn, c_td) == self.hop_mul_clocks
        tx_n_bits, tx_d_bits = self.div_widths["t"][:2]
        t_d_clamped = t_d if len(t_d) <= tx_d_bits else Mux(t_d[tx_n_bits:].any(), 1 << tx_n_bits, t_d[:tx_n_bits])
        ew_a, c_ea = settled_mul(m, rest, s.u_q16, cb)
        ew_b, c_eb = settled_mul(m, tau_c, u_max, cb)
        ew_bits = max(len(ew_a), len(ew_b)) + 1
        ew_n = settled_add(m, ew_a, ew_b, ew_bits, cb)
        assert max(c_ea, c_eb) + n_chunks(ew_bits, cb) == self.ewma_mul_clocks
        u_hop, tau_gt, lo_flag, hi_flag = Signal(U_BITS), Signal(), Signal(), Signal()
        w_base = Signal(len(w))
        w_sum = settled_add(m, w_base, w_ai, len(w), cb)
        wc_eta, c_we = settled_mul(m, s.wc_bytes, eta_q16, cb)
        assert c_we <= self.ewma_mul_clocks + self.div_clocks("p")
        win_bits, c_wb = settled_mul(m, s.window_bytes, k8e6, cb)
        rate_inc, c_ri = settled_mul(m, s.rate_kbps, self.rate_conv.mult, cb)
        assert (c_wb, c_ri) == (self.rate_mul_clocks, self.out_mul_clocks)
        # ack_seq > last_update_seq, settled chunk by chunk while the ACK's hops are walked (>= 6 clocks after LOAD)
        seq_newer = settled_gt(m, ack.ack_seq, s.last_update_seq, self.chunk_bits)

        with m.FSM():
            with m.State("IDLE"):
                m.d.sync += [h.eq(0), have.eq(0), u_max.eq(0), tau.eq(0), arg.eq(0), mult.eq(0), update.eq(0)]
                with m.If(self.init.valid):
                    m.d.sync += [idle.eq(0), qp.eq(self.init.payload), kind.eq(KIND_INIT), is_ack.eq(0),
                                 s.window_bytes.eq(w_max), s.wc_bytes.eq(w_max), s.u_q16.eq(0),
                                 s.inc_stage.eq(0), s.rate_kbps.eq(line_kbps), s.last_update_seq.eq(0),
                                 s.n_hops.eq(0)]
                    m.next = "WRITE"
                with m.Elif(self.ack.valid):
                    m.d.comb += srd.addr.eq(ack.qp)
                    m.d.sync += [idle.eq(0), qp.eq(ack.qp), is_ack.eq(1),
                                 n_hops.eq(Mux(ack.n_hops > self.max_hops, self.max_hops, ack.n_hops))]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.sync += [s.eq(srd.data), last_hop.eq(n_hops == 1)]
                with m.If(n_hops == 0):
                    m.d.sync += kind.eq(KIND_NO_INT)
                    m.next = "WRITE"
                with m.Else():
                    m.d.sync += [s.n_hops.eq(n_hops), measure.eq(srd.data.n_hops == n_hops),
                                 kind.eq(Mux(srd.data.n_hops == n_hops, KIND_NO_SAMPLE, KIND_RECORD))]
                    m.next = "HOP"
            with m.State("HOP"):
                # write the new record; register both records: the deltas' carry chains start from flip-flops
                m.d.comb += hwr.en.eq(1)
                m.d.sync += [new_r.ts_ns.eq(new.ts_ns), new_r.tx_bytes.eq(new.tx_bytes),
                             new_r.qlen_bytes.eq(new.qlen_bytes), old_r.eq(hrd.data), link.eq(new.link_kbps),
                             wait.eq(self.delta_clocks - 1)]
                with m.If(measure):
                    m.next = "DELTA"
                with m.Else():
                    m.next = "NEXT"
            with m.State("DELTA"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = "SAMPLE"
            with m.State("SAMPLE"):
                m.d.sync += [dts.eq(d_ts), dtx.eq(Mux(d_tx[-1], 0, d_tx)),
                             qlen.eq(Mux(new_r.qlen_bytes < old_r.qlen_bytes, new_r.qlen_bytes, old_r.qlen_bytes)),
                             sample.eq(d_ts.any() & ~d_ts[-1] & link.any()), wait.eq(self.hop_mul_clocks - 1)]
                m.next = "MULW"
            with m.State("MULW"):
                # the split products of the hop's registers settle (hop_mul_clocks after SAMPLE)
                m.d.sync += wait.eq(wait - 1)
                with m.If(~sample):
                    m.next = "NEXT"
                with m.Elif(wait == 0):
                    m.next = "MUL"
            with m.State("MUL"):
                # register the operands: the divider's overflow check starts from flip-flops
                m.d.sync += [div_q.n.eq(q_n << U_FRAC_BITS), div_q.d.eq(q_d),
                             div_t.n.eq(t_n << U_FRAC_BITS), div_t.d.eq(t_d_clamped)]
                m.next = "DIVS"
            with m.State("DIVS"):
                m.d.comb += [div_q.start.eq(1), div_t.start.eq(1)]
                m.next = "DIVW"
            with m.State("DIVW"):
                with m.If(div_q.done & div_t.done):
                    u_sum = div_q.q + div_t.q
                    m.d.sync += u_hop.eq(Mux(u_sum > U_MAX, U_MAX, u_sum))
                    m.next = "HCMP"
            with m.State("HCMP"):
                with m.If(~have | (u_hop > u_max)):
                    m.d.sync += [u_max.eq(u_hop), tau.eq(dts), arg.eq(h), have.eq(1)]
                m.next = "NEXT"
            with m.State("NEXT"):
                m.d.sync += [h.eq(h + 1), last_hop.eq(h + 2 == n_hops)]
                with m.If(last_hop):
                    with m.If(measure):
                        m.next = "TAU"
                    with m.Else():
                        m.next = "WRITE"
                with m.Else():
                    m.d.comb += hrd.addr.eq(Cat((h + 1)[:self.hop_bits], qp))   # next hop's record, in time
                    m.next = "HOP"
            with m.State("TAU"):
                with m.If(~have):
                    m.next = "WRITE"
                with m.Else():
                    m.d.sync += tau_gt.eq(tau[self.t_bits:].any() | (tau[:self.t_bits] > t_ns))
                    m.next = "TAU2"
            with m.State("TAU2"):
                tau_min = Mux(tau_gt, t_ns, tau[:self.t_bits])
                m.d.sync += [tau_c.eq(tau_min), rest.eq(t_ns - tau_min), kind.eq(KIND_UPDATE),
                             wait.eq(self.ewma_mul_clocks - 1)]
                m.next = "EW_MULW"
            divide_states(m, "EW", div_p, wait, (ew_n, t_ns), [s.u_q16.eq(div_p.q), update.eq(seq_newer)], "WIN0")
            with m.State("WIN0"):
                m.d.sync += mult.eq((s.u_q16 >= eta_q16) | (s.inc_stage >= max_stage))
                m.next = "WIN"
            with m.State("WIN"):
                # wc_eta settled long ago: Wc is stable since LOAD
                with m.If(update):
                    m.d.sync += [s.last_update_seq.eq(ack.snd_nxt),
                                 s.inc_stage.eq(Mux(mult, 0, s.inc_stage + 1))]
                with m.If(mult):
                    m.d.sync += [div_p.n.eq(wc_eta), div_p.d.eq(Mux(s.u_q16 == 0, 1, s.u_q16))]
                    m.next = "W_DIV"
                with m.Else():
                    m.d.sync += [w_base.eq(s.wc_bytes), wait.eq(self.w_add_clocks - 1)]
                    m.next = "W_ADDW"
            divide_states(m, "W", div_p, wait, None, [w_base.eq(div_p.q), wait.eq(self.w_add_clocks - 1)], "W_ADDW")
            with m.State("W_ADDW"):
                # + W_AI settles chunk by chunk (a run-time W_AI is a register: no carry chain behind a multiplexer)
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = "W_CLAMP"
            with m.State("W_CLAMP"):
                m.d.sync += [w.eq(w_sum), lo_flag.eq(w_sum < w_min), hi_flag.eq(w_sum > w_max)]
                m.next = "W_SET"
            with m.State("W_SET"):
                w_new = Mux(lo_flag, w_min, Mux(hi_flag, w_max, w))
                m.d.sync += [s.window_bytes.eq(w_new), wait.eq(self.rate_mul_clocks - 1)]
                with m.If(update):
                    m.d.sync += s.wc_bytes.eq(w_new)
                m.next = "R_MULW"
            divide_states(m, "R", div_p, wait, (win_bits, t_ns),
                          [lo_flag.eq(div_p.q < min_kbps), hi_flag.eq(div_p.q > line_kbps)], "R_SET")
            with m.State("R_SET"):
                m.d.sync += s.rate_kbps.eq(Mux(lo_flag, min_kbps, Mux(hi_flag, line_kbps, div_p.q)))
                m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += swr.en.eq(1)
                m.d.sync += [self.trace_seq.eq(self.trace_seq + 1), self.trace_kind.eq(kind),
                             self.trace_qp.eq(qp), self.trace_hop.eq(arg), self.trace_mult.eq(mult),
                             self.trace_wc_update.eq(update), self.trace_state.eq(s),
                             wait.eq(self.out_mul_wait - 1)]
                with m.If((kind == KIND_UPDATE) | (kind == KIND_INIT)):
                    m.next = "RATE_MULW"
                with m.Else():
                    m.d.sync += finish.eq(1)
                    m.next = "FINISH"
            with m.State("RATE_MULW"):
                # the limiter increment (rate x mult, split) settles: rate_kbps last changed before WRITE
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += rate_out.eq(1)
                    m.next = "RATE_OUT"
            with m.State("RATE_OUT"):
                with m.If(self.rate_wr.ready):
                    m.d.sync += rate_out.eq(0)
                    with m.If(is_ack):
                        m.d.sync += finish.eq(1)
                        m.next = "FINISH"
                    with m.Else():
                        m.d.sync += idle.eq(1)
                        m.next = "IDLE"
            with m.State("FINISH"):
                m.d.sync += [finish.eq(0), idle.eq(1)]
                m.next = "IDLE"
        # payload from flip-flops (the rate product has settled by RATE_OUT); window_bytes is zero between writes
        m.d.comb += [self.rate_wr.payload.qp.eq(qp),
                     self.rate_wr.payload.rate.eq(rate_inc >> self.rate_conv.mult_shift),
                     self.window_bytes.eq(Mux(rate_out, s.window_bytes, 0))]
        return m

    def _derive_windows(self, m: Module, rates_kbps: tuple, t_ns, windows: tuple) -> None:
        """Keep ``windows[i] = rates_kbps[i] * T // 8e6`` (bytes in one T) up to date, one division after another."""
        m.submodules.div_c = div_c = self.divider("c")
        sel = Signal(range(len(rates_kbps)))
        rate = Signal(32)
        with m.Switch(sel):
            for i, r in enumerate(rates_kbps):
                with m.Case(i):
                    m.d.comb += rate.eq(r)
        product, clocks = settled_mul(m, rate, t_ns, self.chunk_bits)
        assert clocks == self.cfg_mul_clocks
        wait = Signal(range(clocks + 1), init=clocks - 1)   # the product of the first rate settles after reset
        store = [w.eq(Mux(sel == i, div_c.q, w)) for i, w in enumerate(windows)]
        with m.FSM(name="derive"):
            divide_states(m, "C", div_c, wait, (product, BITS_NS_PER_KBPS),
                          [*store, sel.eq(Mux(sel == len(rates_kbps) - 1, 0, sel + 1)), wait.eq(clocks - 1)], "C_MULW")


def divide_states(m: Module, name: str, div: SeqDivider, wait: Signal, operands: tuple | None, done: list,
                  nxt: str) -> None:
    """FSM states of one division: ``{name}_MULW`` counts ``wait`` down to 0 (a split product settles),
    ``{name}_MUL`` registers ``operands`` (n, d), ``{name}_DIV`` starts ``div``, ``{name}_WAIT`` runs the ``done``
    statements (sync) and goes to ``nxt`` once it is done.  Without ``operands`` the state before registered them
    and the division starts at ``{name}_DIV``."""
    if operands is not None:
        with m.State(f"{name}_MULW"):
            m.d.sync += wait.eq(wait - 1)
            with m.If(wait == 0):
                m.next = f"{name}_MUL"
        with m.State(f"{name}_MUL"):
            m.d.sync += [div.n.eq(operands[0]), div.d.eq(operands[1])]
            m.next = f"{name}_DIV"
    with m.State(f"{name}_DIV"):
        m.d.comb += div.start.eq(1)
        m.next = f"{name}_WAIT"
    with m.State(f"{name}_WAIT"):
        with m.If(div.done):
            m.d.sync += done
            m.next = nxt
