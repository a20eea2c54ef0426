"""RoCEv2 RX header parser: Ethernet (optionally 802.1Q-tagged) / IPv4 or IPv6 / UDP 4791 / BTH, turning packets
into CC events at line rate.

Frames pass through untouched (``s_axis`` -> ``m_axis``).  Up to 78 header bytes (tag + IPv6) are captured as
the beats go by (any data width); one clock after the beat that completes the headers of the frame's layout
(54 bytes untagged IPv4, 58 tagged, 74 untagged IPv6, 78 tagged IPv6), a CE-marked RoCE packet (ECN = 11 in
the IPv4 TOS or IPv6 traffic class, opcode not CNP) raises ``ce`` with its destination QP (to the CNP
generator) and a CNP (BTH opcode 0x81) raises ``cnp`` with its destination QP (to the DCQCN reaction point).
IPv4 must have no options (IHL 5); IPv6 must carry UDP directly (next header 17).  Events a busy consumer
cannot take are counted in ``dropped``; ``roce_pkts``, ``ce_pkts``, ``cnp_pkts`` count the rest.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.stream import AxiStream, tap_head, tap_qp_bits

ETH_BYTES, IPV4_BYTES, UDP_BYTES, BTH_BYTES = 14, 20, 8, 12
IPV6_BYTES, VLAN_TAG_BYTES = 40, 4
HDR_BYTES = ETH_BYTES + IPV4_BYTES + UDP_BYTES + BTH_BYTES  # untagged IPv4 (the shortest layout)
MAX_HDR_BYTES = ETH_BYTES + VLAN_TAG_BYTES + IPV6_BYTES + UDP_BYTES + BTH_BYTES
ROCEV2_UDP_PORT = 4791
OPCODE_CNP = 0x81
ECN_CE = 0b11
ETHERTYPE_IPV4, ETHERTYPE_IPV6, TPID_8021Q = 0x0800, 0x86DD, 0x8100
# (tagged, IPv6) -> byte offset of the IP header
LAYOUTS = {(t, v6): ETH_BYTES + (VLAN_TAG_BYTES if t else 0) for t in (False, True) for v6 in (False, True)}


class RoceParser(wiring.Component):
    """Pass-through AXI-Stream tap emitting ``ce`` / ``cnp`` events (payload: destination QP, low bits)."""

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024) -> None:
        self.qp_bits = tap_qp_bits(data_width, n_qps)
        self.data_width = data_width
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
        s = self.s_axis
        tap = tap_head(m, s, self.m_axis, MAX_HDR_BYTES, self.data_width)
        fire, hdr, got, be = tap.fire, tap.hdr, tap.got, tap.be
        # the clock after each beat, the headers captured so far are judged once per frame: as soon as the
        # frame's layout is complete, or at its last beat (a truncated or non-RoCE frame)
        fresh, fresh_last, decided = Signal(), Signal(), Signal()
        m.d.sync += [fresh.eq(fire), fresh_last.eq(fire & s.tlast)]

        tagged = be(12, 2) == TPID_8021Q
        roce, ecn, opcode, dest_qp, complete = [], [], [], [], []
        for (t, v6), ip in LAYOUTS.items():
            udp = ip + (IPV6_BYTES if v6 else IPV4_BYTES)
            bth = udp + UDP_BYTES
            is_layout = Signal(name=f"layout_{'vlan_' if t else ''}{'ipv6' if v6 else 'ipv4'}")
            if v6:
                l3_ok = (be(ip - 2, 2) == ETHERTYPE_IPV6) & (hdr[ip][4:] == 6) & (hdr[ip + 6] == 17)
                ecn.append(hdr[ip + 1][4:6])
            else:
                l3_ok = (be(ip - 2, 2) == ETHERTYPE_IPV4) & (hdr[ip] == 0x45) & (hdr[ip + 9] == 17)
                ecn.append(hdr[ip + 1][:2])
            m.d.comb += is_layout.eq((tagged if t else ~tagged) & l3_ok)
            done_here = got[bth + BTH_BYTES - 1]
            complete.append(is_layout & done_here)
            roce.append(is_layout & done_here & (be(udp + 2, 2) == ROCEV2_UDP_PORT))
            opcode.append(hdr[bth])
            dest_qp.append(be(bth + 5, 3)[:self.qp_bits])
        done = Signal()
        m.d.comb += done.eq(fresh & ~decided & (Cat(*complete).any() | fresh_last))
        with m.If(fresh):
            m.d.sync += decided.eq(Mux(fresh_last, 0, decided | done))
        layout = Cat(tagged, *[hdr[ip][4:] == 6 for ip in (ETH_BYTES + VLAN_TAG_BYTES, ETH_BYTES)])
        sel = Signal(2)  # index into LAYOUTS order: tagged * 2 + IPv6
        m.d.comb += sel.eq(Cat(Mux(layout[0], layout[1], layout[2]), layout[0]))
        is_roce = Signal()
        m.d.comb += is_roce.eq(Cat(*roce).any())
        sel_opcode, sel_qp, sel_ecn = Signal(8), Signal(self.qp_bits), Signal(2)
        with m.Switch(sel):
            for i in range(4):
                with m.Case(i):
                    m.d.comb += [sel_opcode.eq(opcode[i]), sel_qp.eq(dest_qp[i]), sel_ecn.eq(ecn[i])]
        ce_hit = is_roce & (sel_ecn == ECN_CE) & (sel_opcode != OPCODE_CNP)
        cnp_hit = is_roce & (sel_opcode == OPCODE_CNP)
        m.d.comb += [self.ce.payload.eq(sel_qp), self.cnp.payload.eq(sel_qp),
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
