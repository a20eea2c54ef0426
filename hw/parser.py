"""RoCEv2 RX header parser: Ethernet / IPv4 / UDP 4791 / BTH, turning packets into CC events at line rate.

Frames pass through untouched (``s_axis`` -> ``m_axis``).  The 54 header bytes are captured as the beats go
by (any data width); one clock after the beat that completes them, a CE-marked RoCE packet (IP ECN = 11,
opcode not CNP) raises ``ce`` with its destination QP (to the CNP generator) and a CNP (BTH opcode 0x81)
raises ``cnp`` with its destination QP (to the DCQCN reaction point).  Events a busy consumer cannot take
are counted in ``dropped``; ``roce_pkts``, ``ce_pkts``, ``cnp_pkts`` count the rest.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.stream import AxiStream

ETH_BYTES, IPV4_BYTES, UDP_BYTES, BTH_BYTES = 14, 20, 8, 12
HDR_BYTES = ETH_BYTES + IPV4_BYTES + UDP_BYTES + BTH_BYTES
ROCEV2_UDP_PORT = 4791
OPCODE_CNP = 0x81
ECN_CE = 0b11


class RoceParser(wiring.Component):
    """Pass-through AXI-Stream tap emitting ``ce`` / ``cnp`` events (payload: destination QP, low bits)."""

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024) -> None:
        if data_width <= 0 or data_width % 8:
            raise HwParamError(f"data_width must be a positive multiple of 8, not {data_width}")
        if n_qps < 2 or n_qps & (n_qps - 1) or n_qps > 1 << 24:
            raise HwParamError(f"n_qps must be a power of two in 2..2^24, not {n_qps}")
        self.data_width = data_width
        self.qp_bits = (n_qps - 1).bit_length()
        super().__init__({
            "s_axis": In(AxiStream(data_width)),
            "m_axis": Out(AxiStream(data_width)),
            "ce": Out(stream.Signature(self.qp_bits)),
            "cnp": Out(stream.Signature(self.qp_bits)),
            "roce_pkts": Out(32),
            "ce_pkts": Out(32),
            "cnp_pkts": Out(32),
            "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        bpb = self.data_width // 8
        s, o = self.s_axis, self.m_axis
        m.d.comb += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast), o.tvalid.eq(s.tvalid),
                     s.tready.eq(o.tready)]
        fire = s.tvalid & s.tready
        last_hdr_beat = (HDR_BYTES - 1) // bpb
        beat = Signal(range(last_hdr_beat + 2))
        hdr = [Signal(8, name=f"hdr{i}") for i in range(HDR_BYTES)]
        got = [Signal(name=f"got{i}") for i in range(HDR_BYTES)]  # byte present (tkeep) in the frame
        with m.If(fire):
            with m.If(s.tlast):
                m.d.sync += beat.eq(0)
            with m.Elif(beat <= last_hdr_beat):
                m.d.sync += beat.eq(beat + 1)
            for i in range(HDR_BYTES):
                if i // bpb:
                    with m.If(beat == 0):  # a new frame: forget bytes of later beats until they arrive
                        m.d.sync += got[i].eq(0)
                with m.If(beat == i // bpb):
                    lane = i % bpb
                    m.d.sync += [hdr[i].eq(s.tdata[8 * lane:8 * lane + 8]), got[i].eq(s.tkeep[lane])]
        # a header is complete on the beat holding byte 53, or truncated by an earlier tlast
        done = Signal()
        m.d.sync += done.eq(fire & ((beat == last_hdr_beat) | (s.tlast & (beat < last_hdr_beat))))

        def be(offset: int, n: int):
            return Cat(*reversed(hdr[offset:offset + n]))

        ip, udp, bth = ETH_BYTES, ETH_BYTES + IPV4_BYTES, ETH_BYTES + IPV4_BYTES + UDP_BYTES
        is_roce = Signal()
        m.d.comb += is_roce.eq(got[HDR_BYTES - 1] & (be(12, 2) == 0x0800) & (hdr[ip] == 0x45)
                               & (hdr[ip + 9] == 17) & (be(udp + 2, 2) == ROCEV2_UDP_PORT))
        opcode = hdr[bth]
        dest_qp = be(bth + 5, 3)[:self.qp_bits]
        ce_hit = is_roce & ((hdr[ip + 1] & 0b11) == ECN_CE) & (opcode != OPCODE_CNP)
        cnp_hit = is_roce & (opcode == OPCODE_CNP)
        m.d.comb += [self.ce.payload.eq(dest_qp), self.cnp.payload.eq(dest_qp),
                     self.ce.valid.eq(done & ce_hit), self.cnp.valid.eq(done & cnp_hit)]
        with m.If(done & is_roce):
            m.d.sync += self.roce_pkts.eq(self.roce_pkts + 1)
        with m.If(self.ce.valid):
            m.d.sync += self.ce_pkts.eq(self.ce_pkts + 1)
        with m.If(self.cnp.valid):
            m.d.sync += self.cnp_pkts.eq(self.cnp_pkts + 1)
        with m.If((self.ce.valid & ~self.ce.ready) | (self.cnp.valid & ~self.cnp.ready)):
            m.d.sync += self.dropped.eq(self.dropped + 1)
        return m
