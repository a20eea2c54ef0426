# amaranth: UnusedElaboratable=no
"""TX RoCEv2 framer: per-QP header templates + the scheduler's payload frames -> complete frames with their ICRC.

Every QP has a 54-byte header template (Ethernet / IPv4 without options / UDP / BTH, as ``sw.roce.wire.template`` builds
it), written on ``tmpl_wr`` (QP, the header bytes in wire order, byte 0 in bits 0..7).  The template's BTH PSN is
the QP's first PSN; the IPv4 total length, header checksum and UDP length in it are ignored.  As the host stack's
fast path does, the checksum comes from a sum precomputed at template write (the header words other than the
length and the checksum, ready 5 clocks after the write) plus the length.  The UDP checksum goes out 0 (as RoCEv2
NICs send it over IPv4); the BTH pad count is the template's, so payloads are multiples of 4 (the host pads).

Per payload frame on ``s_axis`` (``tuser`` = QP, from ``tx_sched``) with its payload size on ``desc`` (a 4-deep
FIFO; at the latest the clock before its first beat, else the framer waits for it): IP total length = payload + 44,
UDP length = payload + 24, IPv4 checksum, the QP's PSN (24-bit, wrapping; +1 per frame), the payload bytes; the ICRC is
appended by ``hw.icrc.IcrcGenerator``.  The header shifts the payload by 54 bytes, so a frame whose last beat has
more than ``bytes per beat - 54`` bytes takes one more beat (the input is held a clock), as may the ICRC.
With ``pattern_payload`` the input beats' data is ignored and the payload is a per-QP pattern instead: payload
byte i of the frame with PSN p of QP q is ((p + i) mod 256) xor (q mod 256) (golden model
``sw.roce.wire.pattern.pattern_payload``), so a receiver checks every byte, its offset, the PSN and the QP of a frame
without a payload memory in the NIC.
Data width >= 512 bits (the header fits in the first beat).  Pipeline: five registered stages (template and PSN
read, lengths, checksum sum, checksum fold, header insert), then the ICRC generator's.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.icrc import ICRC_BYTES, IcrcGenerator
from hw.lib.stream import AxiStream
from hw.parser import BTH_BYTES, ETH_BYTES, HDR_BYTES, IPV4_BYTES, UDP_BYTES

PSN_BITS = 24
MIN_DATA_WIDTH = 512  # the header (54 bytes) within the first beat
PAYLOAD_BITS = 16
IP_LEN_AT, IP_CSUM_AT = ETH_BYTES + 2, ETH_BYTES + 10
UDP_LEN_AT, UDP_CSUM_AT = ETH_BYTES + IPV4_BYTES + 4, ETH_BYTES + IPV4_BYTES + 6
PSN_AT = ETH_BYTES + IPV4_BYTES + UDP_BYTES + 9
IP_LEN_EXTRA = IPV4_BYTES + UDP_BYTES + BTH_BYTES + ICRC_BYTES
UDP_LEN_EXTRA = UDP_BYTES + BTH_BYTES + ICRC_BYTES
SUM_WORDS = [ETH_BYTES + i for i in range(0, IPV4_BYTES, 2) if ETH_BYTES + i not in (IP_LEN_AT, IP_CSUM_AT)]


def tmpl_layout(qp_bits: int) -> data.StructLayout:
    return data.StructLayout({"qp": unsigned(qp_bits), "hdr": unsigned(8 * HDR_BYTES)})


def desc_layout(qp_bits: int) -> data.StructLayout:
    return data.StructLayout({"qp": unsigned(qp_bits), "bytes": unsigned(PAYLOAD_BITS)})


def _be(value, offset: int, n: int):
    """Big-endian ``n``-byte field at byte ``offset`` of a little-lane byte vector."""
    return Cat(*reversed([value[8 * (offset + i):8 * (offset + i + 1)] for i in range(n)]))


def _put_be(field, n: int) -> list:
    """Bytes (wire order) of an ``n``-byte big-endian field."""
    return [field[8 * (n - 1 - i):8 * (n - i)] for i in range(n)]


class TxFrameBuilder(wiring.Component):
    """Payload frames + per-QP templates -> RoCEv2 frames with lengths, checksum, PSN and ICRC (module docstring)."""

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024, pattern_payload: bool = False) -> None:
        if data_width < MIN_DATA_WIDTH or data_width & (data_width - 1):
            raise HwParamError(f"data_width must be a power of two >= 512 (the header in one beat), not {data_width}")
        if n_qps < 2 or n_qps & (n_qps - 1):
            raise HwParamError(f"n_qps must be a power of two >= 2, not {n_qps}")
        self.data_width, self.n_qps, self.pattern_payload = data_width, n_qps, pattern_payload
        self.qp_bits = (n_qps - 1).bit_length()
        self.icrc = IcrcGenerator(data_width=data_width, user_width=self.qp_bits)
        super().__init__({
            "s_axis": In(AxiStream(data_width, self.qp_bits)),
            "desc": In(stream.Signature(desc_layout(self.qp_bits))),
            "tmpl_wr": In(stream.Signature(tmpl_layout(self.qp_bits))),
            "m_axis": Out(AxiStream(data_width, self.qp_bits)),
            "frames": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        w, bpb, qb = self.data_width, self.data_width // 8, self.qp_bits
        s = self.s_axis
        m.submodules.icrc = gen = self.icrc
        m.submodules.desc_fifo = dfifo = SyncFIFO(width=PAYLOAD_BITS, depth=4)
        m.submodules.tmpl = tmpl = Memory(shape=8 * HDR_BYTES, depth=self.n_qps, init=[])
        m.submodules.bases = bases = Memory(shape=16, depth=self.n_qps, init=[])
        m.submodules.psn = psn = Memory(shape=PSN_BITS, depth=self.n_qps, init=[])
        m.d.comb += [dfifo.w_data.eq(self.desc.payload.bytes), dfifo.w_en.eq(self.desc.valid),
                     self.desc.ready.eq(dfifo.w_rdy)]

        # template write: header and first PSN at once; the checksum base (ones' sum of the header words but
        # length and checksum, folded) a stage per add later into its own memory
        tw = self.tmpl_wr
        hdr_in = tw.payload.hdr
        psn_busy = Signal()  # a frame writes its QP's next PSN this clock: the template write waits
        m.d.comb += tw.ready.eq(~psn_busy)
        take = tw.valid & tw.ready
        twr = tmpl.write_port()
        m.d.comb += [twr.addr.eq(tw.payload.qp), twr.data.eq(hdr_in), twr.en.eq(take)]
        sums = [_be(hdr_in, at, 2) for at in SUM_WORDS]
        qv, qq = take, tw.payload.qp
        while len(sums) > 1:  # pairwise sums, then two folds of the carries
            nxt = [Signal(len(sums[0]) + 1, name=f"tsum{len(sums)}_{i}") for i in range(len(sums) // 2)]
            m.d.sync += [n.eq(sums[2 * i] + sums[2 * i + 1]) for i, n in enumerate(nxt)]
            sums = nxt
            v, q = Signal(name=f"tsum{len(sums)}_v"), Signal(qb, name=f"tsum{len(sums)}_qp")
            m.d.sync += [v.eq(qv), q.eq(qq)]
            qv, qq = v, q
        total = sums[0]
        for k in range(2):
            folded = Signal(17, name=f"tfold{k}")
            m.d.sync += folded.eq(total[:16] + total[16:])
            v, q = Signal(name=f"tfold{k}_v"), Signal(qb, name=f"tfold{k}_qp")
            m.d.sync += [v.eq(qv), q.eq(qq)]
            total, qv, qq = folded, v, q
        bwr = bases.write_port()
        m.d.comb += [bwr.addr.eq(qq), bwr.data.eq(total[:16]), bwr.en.eq(qv)]

        # stage enables: s1..s4 move on adv_in, the output stage s5 on adv_out
        adv_in, adv_out = Signal(), Signal()
        first_in = Signal(init=1)  # the next input beat starts a frame
        with m.If(s.tvalid & s.tready):
            m.d.sync += first_in.eq(s.tlast)
        m.d.comb += s.tready.eq(adv_in)

        def stage(name: str):
            return {"v": Signal(name=f"{name}_v"), "first": Signal(name=f"{name}_first"),
                    "d": Signal(w, name=f"{name}_data"), "k": Signal(bpb, name=f"{name}_keep"),
                    "l": Signal(name=f"{name}_last"), "u": Signal(qb, name=f"{name}_user")}

        s1, s2, s3, s4 = stage("s1"), stage("s2"), stage("s3"), stage("s4")
        with m.If(adv_in):
            m.d.sync += [s1["v"].eq(s.tvalid), s1["first"].eq(first_in), s1["d"].eq(s.tdata), s1["k"].eq(s.tkeep),
                         s1["l"].eq(s.tlast), s1["u"].eq(s.tuser)]
            for a, b in ((s1, s2), (s2, s3), (s3, s4)):
                m.d.sync += [b[key].eq(a[key]) for key in a]

        # s1: template and PSN read (addressed by the input beat's QP); the payload size from desc
        trd = tmpl.read_port(transparent_for=(twr,))
        brd = bases.read_port(transparent_for=(bwr,))
        pwr = psn.write_port()
        prd = psn.read_port(transparent_for=(pwr,))
        m.d.comb += [trd.addr.eq(s.tuser), trd.en.eq(adv_in), brd.addr.eq(s.tuser), brd.en.eq(adv_in),
                     prd.addr.eq(s.tuser), prd.en.eq(adv_in)]
        s1_start = s1["v"] & s1["first"]
        desc_wait = s1_start & ~dfifo.r_rdy
        m.d.comb += dfifo.r_en.eq(s1_start & adv_in)
        # one PSN write per frame as its first beat leaves s1: the QP's PSN + 1; a template write sets the first
        m.d.comb += psn_busy.eq(s1_start & adv_in)
        with m.If(psn_busy):
            m.d.comb += [pwr.addr.eq(s1["u"]), pwr.data.eq(prd.data + 1), pwr.en.eq(1)]
        with m.Elif(take):
            m.d.comb += [pwr.addr.eq(tw.payload.qp), pwr.data.eq(_be(hdr_in, PSN_AT, 3)), pwr.en.eq(1)]

        if self.pattern_payload:
            # the beat in s2: pat2 = (PSN + payload bytes before the beat) mod 256; into s3 as the pattern's bytes
            pat2, q8 = Signal(8), Signal(8)
            with m.If(adv_in & s1["v"]):
                m.d.sync += pat2.eq(Mux(s1["first"], prd.data[:8], pat2 + bpb))
            m.d.comb += q8.eq(s2["u"])
            with m.If(adv_in):
                # lanes beyond tkeep 0, as the ICRC generator ORs the ICRC into the lanes after the last byte
                m.d.sync += s3["d"].eq(Cat(*(((pat2 + j)[:8] ^ q8) & s2["k"][j].replicate(8) for j in range(bpb))))

        # s2: header fields; s3: checksum sum; s4: checksum fold
        h2, h3, h4 = Signal(8 * HDR_BYTES), Signal(8 * HDR_BYTES), Signal(8 * HDR_BYTES)
        b2, psn2, psn3, psn4 = Signal(16), Signal(PSN_BITS), Signal(PSN_BITS), Signal(PSN_BITS)
        ip2, udp2, ip3, udp3, ip4, udp4 = (Signal(16, name=n) for n in ("ip2", "udp2", "ip3", "udp3", "ip4", "udp4"))
        sum3, csum4 = Signal(17), Signal(16)
        with m.If(adv_in & s1_start):
            m.d.sync += [h2.eq(trd.data), b2.eq(brd.data), psn2.eq(prd.data),
                         ip2.eq(dfifo.r_data + IP_LEN_EXTRA), udp2.eq(dfifo.r_data + UDP_LEN_EXTRA)]
        with m.If(adv_in & s2["v"] & s2["first"]):
            m.d.sync += [h3.eq(h2), psn3.eq(psn2), ip3.eq(ip2), udp3.eq(udp2), sum3.eq(b2 + ip2)]
        with m.If(adv_in & s3["v"] & s3["first"]):
            m.d.sync += [h4.eq(h3), psn4.eq(psn3), ip4.eq(ip3), udp4.eq(udp3), csum4.eq(~(sum3[:16] + sum3[16]))]
        hdr = [h4[8 * i:8 * i + 8] for i in range(HDR_BYTES)]
        for at, field, n in ((IP_LEN_AT, ip4, 2), (IP_CSUM_AT, csum4, 2), (UDP_LEN_AT, udp4, 2),
                             (UDP_CSUM_AT, Const(0, 16), 2), (PSN_AT, psn4, 3)):
            hdr[at:at + n] = _put_be(field, n)

        # s5: the header (first beat) or the previous beat's last 54 bytes, then this beat's first bpb - 54
        shift = bpb - HDR_BYTES
        o_v, o_d, o_k, o_l, o_u = Signal(), Signal(w), Signal(bpb), Signal(), Signal(qb)
        tail_d, tail_k = Signal(8 * HDR_BYTES), Signal(HDR_BYTES)
        extra = Signal()  # the beat after a last beat whose bytes spill past the shift
        spill = Signal()  # s4's last beat has bytes beyond the shift (decided as it entered s4)
        with m.If(adv_in):
            m.d.sync += spill.eq(s3["l"] & s3["k"][shift:].any())
        hold = s4["v"] & spill & ~extra
        m.d.comb += [adv_out.eq(~o_v | gen.s_axis.tready), adv_in.eq(adv_out & ~hold & ~desc_wait)]
        with m.If(adv_out):
            with m.If(extra):
                m.d.sync += [o_v.eq(1), o_d.eq(tail_d), o_k.eq(tail_k), o_l.eq(1), extra.eq(0)]
            with m.Elif(adv_in):
                lead_d = Mux(s4["first"], Cat(*hdr), tail_d)
                lead_k = Mux(s4["first"], Const((1 << HDR_BYTES) - 1, HDR_BYTES), tail_k)
                m.d.sync += [o_v.eq(s4["v"]), o_d.eq(Cat(lead_d, s4["d"][:8 * shift])),
                             o_k.eq(Cat(lead_k, s4["k"][:shift])), o_l.eq(s4["l"] & ~spill), o_u.eq(s4["u"])]
                with m.If(s4["v"]):
                    m.d.sync += [tail_d.eq(s4["d"][8 * shift:]), tail_k.eq(s4["k"][shift:])]
            with m.Else():
                m.d.sync += o_v.eq(0)
            with m.If(hold):
                m.d.sync += [o_v.eq(1), o_d.eq(Cat(Mux(s4["first"], Cat(*hdr), tail_d), s4["d"][:8 * shift])),
                             o_k.eq(Cat(Mux(s4["first"], Const((1 << HDR_BYTES) - 1, HDR_BYTES), tail_k),
                                        s4["k"][:shift])),
                             o_l.eq(0), o_u.eq(s4["u"]), tail_d.eq(s4["d"][8 * shift:]),
                             tail_k.eq(s4["k"][shift:]), extra.eq(1)]
        m.d.comb += [gen.s_axis.tvalid.eq(o_v), gen.s_axis.tdata.eq(o_d), gen.s_axis.tkeep.eq(o_k),
                     gen.s_axis.tlast.eq(o_l), gen.s_axis.tuser.eq(o_u)]
        wiring.connect(m, gen.m_axis, wiring.flipped(self.m_axis))
        m.d.comb += self.frames.eq(gen.frames)
        return m
