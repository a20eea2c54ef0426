"""INT-echo ACK parser and HPCC feeder: RoCEv2 ACKs carrying echoed INT hops -> ``hw.hpcc.HpccEngine`` ACKs.

Wire format (``sw.roce.wire.int_md``, ``p4/programs/fabric.p4``): Ethernet / IPv4 (IHL 5, DSCP ``DSCP_INT``) / UDP
4791 / INT shim (type 1, length 4 + 7 * H words) / INT-MD header (version 2, 7 words per hop, domain-specific
id ``INT_ECHO_DOMAIN_ID``: the requester's own forward-path hops echoed back) / H = 0..4 hop records of 28 bytes,
newest first (node, ports, latency, queue id + 24-bit occupancy, 64-bit egress timestamp, 32-bit tx bytes) /
BTH (opcode 0x11, RC ACKNOWLEDGE) / AETH (syndrome type ACK) / ICRC.  The IPv4 total length must be exactly
that (no payload).  No VLAN tag and no IPv6: the fabric stamps INT into untagged IPv4 only.

``IntAckParser`` taps an AXI stream (frames pass unchanged, one beat per clock at any width): it captures the first
190 bytes as the beats go by and, three clocks after a frame's last beat, pulses ``ack`` for one clock with the
destination QP, PSN, hop count and raw hop records (an event the consumer cannot take in that clock is lost and
counted in ``dropped``).  ``HpccAckFeeder`` turns those events into the engine's ``ack`` payload, as the host stack
(``QpPacer.int_hops`` in ``sw.roce.softnic.qp_pacer``) does for ``sw.cc.Hpcc``: ts_ns = timestamp * ``ts_unit_ns``
(fabric.p4 writes microseconds), qlen_bytes = occupancy * ``qlen_unit_bytes`` (saturating at 2^32 - 1), link_kbps =
``link_kbps`` for every hop; sequences count packets, as PSNs do: ``snd_nxt`` is the QP's first PSN (``clear_seq``
at its init, 0 unless driven) plus the frames the scheduler sent on it since (``sent`` pulses), the next PSN without
the 24-bit wrap; ``ack_seq`` the ACK's PSN + 1 widened to 64 bits against ``snd_nxt`` (exact while fewer than 2^23
packets are outstanding, across PSN wraps).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.hpcc import SEQ_BITS, ack_layout
from hw.lib.carry_split import n_chunks, settled_add
from hw.lib.stream import AxiStream, tap_head, tap_qp_bits
from hw.parser import BTH_BYTES, ETH_BYTES, IPV4_BYTES, ROCEV2_UDP_PORT, UDP_BYTES

AETH_BYTES, ICRC_BYTES = 4, 4
ETHERTYPE_IPV4, IP_PROTO_UDP = 0x0800, 17
DSCP_INT = 0x17
INT_SHIM_BYTES, INT_MD_BYTES, INT_HOP_BYTES = 4, 12, 28
INT_TYPE_MD, INT_MD_VERSION, INT_HOP_WORDS = 1, 2, 7
INT_ECHO_DOMAIN_ID = 0x4543
MAX_INT_HOPS = 4
OPCODE_RC_ACK = 0x11
SHIM_AT = ETH_BYTES + IPV4_BYTES + UDP_BYTES
HOPS_AT = SHIM_AT + INT_SHIM_BYTES + INT_MD_BYTES
ACK_TAIL_BYTES = BTH_BYTES + AETH_BYTES + ICRC_BYTES
CAPTURE_BYTES = HOPS_AT + MAX_INT_HOPS * INT_HOP_BYTES + ACK_TAIL_BYTES
PSN_BITS = 24
CHUNK_BITS = 32  # longest carry chain per clock in the feeder (hw.lib.carry_split)
LO_BITS = 4  # the sent-packet count's bits incremented in one clock (2^LO_BITS > the high pipeline)
HI_CHUNK_BITS = 20  # its high bits' + 1 per clock
# a QP's next low wrap (2^LO_BITS pulses, one per clock at most) must come after its high bits are written
assert (1 << LO_BITS) > n_chunks(SEQ_BITS - LO_BITS, HI_CHUNK_BITS) + 2

RAW_HOP = data.StructLayout({"occupancy": unsigned(24), "ts": unsigned(64), "tx_bytes": unsigned(32)})


def raw_ack_layout(qp_bits: int) -> data.StructLayout:
    """An INT-echo ACK as on the wire: destination QP (low bits), PSN, hop count, raw hop records."""
    return data.StructLayout({"qp": unsigned(qp_bits), "psn": unsigned(PSN_BITS), "n_hops": unsigned(3),
                              "hops": data.ArrayLayout(RAW_HOP, MAX_INT_HOPS)})


class IntAckParser(wiring.Component):
    """Pass-through AXI-Stream tap: ``ack`` (``raw_ack_layout``) for every INT-echo RoCE ACK (module docstring)."""

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024) -> None:
        self.qp_bits = tap_qp_bits(data_width, n_qps)
        self.data_width = data_width
        self.raw_layout = raw_ack_layout(self.qp_bits)
        super().__init__({
            "s_axis": In(AxiStream(data_width)),
            "m_axis": Out(AxiStream(data_width)),
            "ack": Out(stream.Signature(self.raw_layout)),
            "int_acks": Out(32),
            "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.s_axis
        tap = tap_head(m, s, self.m_axis, CAPTURE_BYTES, self.data_width)
        fire, hdr, got, be = tap.fire, tap.hdr, tap.got, tap.be
        ended = Signal()
        m.d.sync += ended.eq(fire & s.tlast)  # the clock after a last beat, the whole frame's head is in hdr

        shim_words = hdr[SHIM_AT + 1]
        md = SHIM_AT + INT_SHIM_BYTES
        common = ((be(12, 2) == ETHERTYPE_IPV4) & (hdr[14] == 0x45) & (hdr[15][2:] == DSCP_INT)
                  & (hdr[23] == IP_PROTO_UDP) & (be(20, 2) & 0x3FFF == 0) & (be(36, 2) == ROCEV2_UDP_PORT)
                  & (hdr[SHIM_AT][4:] == INT_TYPE_MD) & (hdr[md][4:] == INT_MD_VERSION)
                  & (be(md + 6, 2) == INT_ECHO_DOMAIN_ID))
        ok_n, qp_n, psn_n = [], [], []
        for n in range(MAX_INT_HOPS + 1):
            words = (INT_SHIM_BYTES + INT_MD_BYTES + n * INT_HOP_BYTES) // 4
            bth = HOPS_AT + n * INT_HOP_BYTES
            ip_len = IPV4_BYTES + UDP_BYTES + 4 * words + ACK_TAIL_BYTES
            ok_n.append((shim_words == words) & (be(16, 2) == ip_len) & got[bth + ACK_TAIL_BYTES - 1]
                        & (hdr[bth] == OPCODE_RC_ACK) & (hdr[bth + 1][:4] == 0)
                        & (hdr[bth + BTH_BYTES][5:7] == 0)
                        & ((hdr[md + 2][:5] == INT_HOP_WORDS) if n else 1))
            qp_n.append(be(bth + 5, 3)[:self.qp_bits])
            psn_n.append(be(bth + 9, 3))
        # two register stages (400 MHz): the header checks and every field candidate (the next frame may overwrite
        # hdr from this clock's edge on), then the decision and the fields of the one hop count that matched (ok1
        # is one-hot for an INT-echo ACK); a frame may end every clock, so both stages load every clock
        ended1, common1, ok1 = Signal(), Signal(), Signal(MAX_INT_HOPS + 1)
        qp1 = [Signal(self.qp_bits, name=f"qp1_{n}") for n in range(MAX_INT_HOPS + 1)]
        psn1 = [Signal(PSN_BITS, name=f"psn1_{n}") for n in range(MAX_INT_HOPS + 1)]
        hops1 = Signal.like(self.ack.payload.hops)
        m.d.sync += [ended1.eq(ended), common1.eq(common), ok1.eq(Cat(*ok_n)),
                     *(q.eq(v) for q, v in zip(qp1 + psn1, qp_n + psn_n, strict=True))]
        for h in range(MAX_INT_HOPS):
            at = HOPS_AT + h * INT_HOP_BYTES
            m.d.sync += [hops1[h].occupancy.eq(be(at + 13, 3)), hops1[h].ts.eq(be(at + 16, 8)),
                         hops1[h].tx_bytes.eq(be(at + 24, 4))]
        out = Signal(self.raw_layout)
        m.d.sync += [self.ack.valid.eq(ended1 & common1 & ok1.any()), out.hops.eq(hops1),
                     out.qp.eq(or_of(Mux(ok1[n], qp1[n], 0) for n in range(MAX_INT_HOPS + 1))),
                     out.psn.eq(or_of(Mux(ok1[n], psn1[n], 0) for n in range(MAX_INT_HOPS + 1))),
                     out.n_hops.eq(or_of(Mux(ok1[n], n, 0) for n in range(MAX_INT_HOPS + 1)))]
        m.d.comb += self.ack.payload.eq(out)
        with m.If(self.ack.valid):
            m.d.sync += self.int_acks.eq(self.int_acks + 1)
            with m.If(~self.ack.ready):
                m.d.sync += self.dropped.eq(self.dropped + 1)
        return m


class HpccAckFeeder(wiring.Component):
    """Raw INT-echo ACKs (``raw`` stream) -> ``hpcc`` ACKs in ``HpccEngine`` units, held until taken.

    Keeps each QP's sent-packet count (``sent`` pulses with ``sent_qp``; ``clear`` with ``clear_qp`` sets it to
    ``clear_seq``, the QP's first PSN - 0 unless driven - as a QP init does; a clear waits while ``clear_ok`` is
    low: the two clocks after a sent pulse, three more after one that carried into the count's high bits).
    """

    def __init__(self, *, n_qps: int = 1024, max_hops: int = MAX_INT_HOPS, ts_bits: int = 64, tx_bits: int = 32,
                 ts_unit_ns: int = 1000) -> None:
        if not 1 <= ts_unit_ns <= 1_000_000:
            raise HwParamError(f"ts_unit_ns={ts_unit_ns}: must be in 1..1000000")
        if max_hops < MAX_INT_HOPS:
            raise HwParamError(f"max_hops={max_hops}: the engine must take the fabric's {MAX_INT_HOPS} hops")
        self.n_qps, self.max_hops, self.ts_unit_ns = n_qps, max_hops, ts_unit_ns
        self.qp_bits = (n_qps - 1).bit_length()
        self.ts_bits, self.tx_bits = ts_bits, tx_bits
        qp = unsigned(self.qp_bits)
        super().__init__({
            "raw": In(stream.Signature(raw_ack_layout(self.qp_bits))),
            "hpcc": Out(stream.Signature(ack_layout(self.qp_bits, max_hops, ts_bits, tx_bits))),
            "sent": In(1), "sent_qp": In(qp),
            "clear": In(1), "clear_qp": In(qp), "clear_seq": In(SEQ_BITS), "clear_ok": Out(1, init=1),
            "qlen_unit_bytes": In(16), "link_kbps": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        hi_bits = SEQ_BITS - LO_BITS
        n_hi = n_chunks(hi_bits, HI_CHUNK_BITS)
        block = {"ram_style": "block"}
        m.submodules.snd_lo = lo_mem = Memory(shape=LO_BITS, depth=self.n_qps, init=[], attrs=block)
        m.submodules.snd_hi = hi_mem = Memory(shape=hi_bits, depth=self.n_qps, init=[], attrs=block)
        lo_wr, hi_wr = lo_mem.write_port(), hi_mem.write_port()
        lo_rd, ack_lo_rd = (lo_mem.read_port(transparent_for=(lo_wr,)) for _ in range(2))
        hi_rd, ack_hi_rd = (hi_mem.read_port(transparent_for=(hi_wr,)) for _ in range(2))

        # sent-packet counters, split in two for 400 MHz.  The low LO_BITS: a three-stage read-modify-write (read,
        # transparent for this clock's write; registered; written + 1), a count written while the next pulse's
        # read was under way (same QP, one clock apart) forwarded from the increment instead.  The high bits:
        # when the low ones wrap, + 1 in a pipeline of HI_CHUNK_BITS per clock, written n_hi clocks later; the
        # next wrap of the same QP is 2^LO_BITS pulses (clocks) later, so its read sees that write.
        rd_pending, rd_qp = Signal(), Signal(self.qp_bits)
        inc_pending, inc_qp, inc_lo, inc_hi = Signal(), Signal(self.qp_bits), Signal(LO_BITS), Signal(hi_bits)
        forward = Signal()  # the count being read this clock is the one being written + 1 this clock
        lo_next = (inc_lo + 1)[:LO_BITS]
        wrap = inc_pending & inc_lo.all()
        m.d.comb += [lo_rd.addr.eq(self.sent_qp), hi_rd.addr.eq(self.sent_qp)]
        m.d.sync += [rd_pending.eq(self.sent), rd_qp.eq(self.sent_qp),
                     forward.eq(rd_pending & (rd_qp == self.sent_qp)),
                     inc_pending.eq(rd_pending), inc_qp.eq(rd_qp),
                     inc_lo.eq(Mux(forward, lo_next, lo_rd.data)), inc_hi.eq(hi_rd.data)]
        hi_valid = Signal(n_hi)
        hi_qp = [Signal(self.qp_bits, name=f"hi_qp{j}") for j in range(n_hi)]
        hi_val = [Signal(hi_bits, name=f"hi_val{j}") for j in range(n_hi)]
        hi_carry = [Signal(name=f"hi_carry{j}") for j in range(n_hi)]
        for j in range(n_hi):
            src, c_in = (inc_hi, 1) if j == 0 else (hi_val[j - 1], hi_carry[j - 1])
            lo, hi = j * HI_CHUNK_BITS, min((j + 1) * HI_CHUNK_BITS, hi_bits)
            part = Signal(hi - lo + 1, name=f"hi_part{j}")
            m.d.comb += part.eq(src[lo:hi] + c_in)
            m.d.sync += [hi_valid[j].eq(wrap if j == 0 else hi_valid[j - 1]), hi_qp[j].eq(inc_qp if j == 0 else
                                                                                       hi_qp[j - 1]),
                         hi_val[j].eq(Cat(src[:lo], part[:hi - lo], src[hi:])), hi_carry[j].eq(part[hi - lo])]
        # no pulse in any stage: the registered form of ~rd_pending & ~inc_pending & ~hi_valid.any()
        m.d.sync += self.clear_ok.eq(~self.sent & ~rd_pending & ~wrap & ~hi_valid[:n_hi - 1].any())
        # a low wrap whose high + 1 is not written yet: an ACK's count read now would be torn
        hi_behind = Signal()
        m.d.sync += hi_behind.eq(wrap | hi_valid[:n_hi - 1].any())
        with m.If(inc_pending):
            m.d.comb += [lo_wr.addr.eq(inc_qp), lo_wr.data.eq(lo_next), lo_wr.en.eq(1)]
        with m.Elif(self.clear):
            m.d.comb += [lo_wr.addr.eq(self.clear_qp), lo_wr.data.eq(self.clear_seq[:LO_BITS]), lo_wr.en.eq(1)]
        with m.If(hi_valid[n_hi - 1]):
            m.d.comb += [hi_wr.addr.eq(hi_qp[n_hi - 1]), hi_wr.data.eq(hi_val[n_hi - 1]), hi_wr.en.eq(1)]
        with m.Elif(self.clear):
            m.d.comb += [hi_wr.addr.eq(self.clear_qp), hi_wr.data.eq(self.clear_seq[LO_BITS:]), hi_wr.en.eq(1)]

        # one raw ACK at a time: take it, read its QP's count, register the partial products (DSPs), let the
        # split 64-bit adds settle, register the result and offer it until the engine takes it
        raw = Signal.like(self.raw.payload)
        out = self.hpcc.payload
        tx_mask = (1 << self.tx_bits) - 1
        q_max = (1 << 32) - 1
        snd_nxt = Signal(SEQ_BITS)
        behind = Signal(PSN_BITS)  # packets sent but not acknowledged, modulo 2^24
        ack_seq = settled_add(m, snd_nxt, behind, SEQ_BITS, CHUNK_BITS, subtract=True)
        n_hops = min(self.max_hops, len(raw.hops))
        # ts * unit from pieces of k bits: each piece's product < 2^(2k), so the even pieces' products (and the
        # odd ones') do not overlap and two operands remain
        k = max(16, self.ts_unit_ns.bit_length())
        pieces = -(-min(64, self.ts_bits) // k)
        prods = [[Signal(2 * k, name=f"ts_p{h}_{i}") for i in range(pieces)] for h in range(n_hops)]
        qprod = [Signal(40, name=f"qlen_p{h}") for h in range(n_hops)]
        ts_ns = []
        for h in range(n_hops):
            even, odd = Signal(self.ts_bits + 2 * k), Signal(self.ts_bits + 2 * k)
            m.d.comb += [even.eq(sum_shifted(prods[h][0::2], 0, 2 * k)),
                         odd.eq(sum_shifted(prods[h][1::2], k, 2 * k))]
            ts_ns.append(settled_add(m, even, odd, self.ts_bits, CHUNK_BITS))
        settle = n_chunks(max(SEQ_BITS, self.ts_bits), CHUNK_BITS)
        wait = Signal(range(settle + 1))
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.raw.ready.eq(1), ack_lo_rd.addr.eq(self.raw.payload.qp),
                             ack_hi_rd.addr.eq(self.raw.payload.qp)]
                with m.If(self.raw.valid):
                    m.d.sync += raw.eq(self.raw.payload)
                    m.next = "CONVERT"
            with m.State("CONVERT"):
                # the count read last clock (a torn one is read again)
                count = Cat(ack_lo_rd.data, ack_hi_rd.data)
                m.d.comb += [ack_lo_rd.addr.eq(raw.qp), ack_hi_rd.addr.eq(raw.qp)]
                m.d.sync += [snd_nxt.eq(count), behind.eq(count[:PSN_BITS] - raw.psn - 1), wait.eq(settle)]
                for h in range(n_hops):
                    r = raw.hops[h]
                    m.d.sync += qprod[h].eq(r.occupancy * self.qlen_unit_bytes)
                    for i in range(pieces):
                        m.d.sync += prods[h][i].eq(r.ts[i * k:(i + 1) * k] * self.ts_unit_ns)
                with m.If(~hi_behind):
                    m.next = "SETTLE"
            with m.State("SETTLE"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [out.qp.eq(raw.qp), out.n_hops.eq(raw.n_hops), out.snd_nxt.eq(snd_nxt),
                                 out.ack_seq.eq(ack_seq)]
                    for h in range(self.max_hops):
                        if h >= n_hops:
                            m.d.sync += out.hops[h].eq(0)
                            continue
                        m.d.sync += [out.hops[h].ts_ns.eq(ts_ns[h]),
                                     out.hops[h].tx_bytes.eq(raw.hops[h].tx_bytes & tx_mask),
                                     out.hops[h].qlen_bytes.eq(Mux(qprod[h][32:].any(), q_max, qprod[h][:32])),
                                     out.hops[h].link_kbps.eq(self.link_kbps)]
                    m.next = "OFFER"
            with m.State("OFFER"):
                m.d.comb += self.hpcc.valid.eq(1)
                with m.If(self.hpcc.ready):
                    m.next = "IDLE"
        return m


def or_of(values):
    """Bitwise OR of ``values`` (a one-hot select's mux: each value is zero unless selected)."""
    out = 0
    for v in values:
        out = out | v
    return out


def sum_shifted(parts: list, first_shift: int, stride: int):
    """``sum(parts[i] << (first_shift + i * stride))`` for parts narrower than ``stride``: a concatenation."""
    if not parts:
        return 0
    return Cat(Const(0, first_shift), *parts) if first_shift else Cat(*parts)
