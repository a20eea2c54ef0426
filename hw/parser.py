"""RoCEv2 RX header parser: Ethernet (optionally 802.1Q-tagged) / IPv4 or IPv6 / UDP 4791 / BTH, turning packets
into CC events at line rate.

Frames pass through untouched (``s_axis`` -> ``m_axis``).  Up to 78 header bytes (tag + IPv6) are captured as
the beats go by (any data width); two clocks after the beat that completes the headers of the frame's layout
(54 bytes untagged IPv4, 58 tagged, 74 untagged IPv6, 78 tagged IPv6), a CE-marked RoCE packet (ECN = 11 in
the IPv4 TOS or IPv6 traffic class, opcode not CNP) raises ``ce`` with its destination QP (to the CNP
generator) and a CNP (BTH opcode 0x81) raises ``cnp`` with its destination QP (to the DCQCN reaction point).
IPv4 must have no options (IHL 5); IPv6 must carry UDP directly (next header 17).  Events a busy consumer
cannot take are counted in ``dropped``; ``roce_pkts``, ``ce_pkts``, ``cnp_pkts`` count the rest (every counter
moves two clocks after its event).
"""

from __future__ import annotations

import operator
from functools import reduce

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.stream import AxiStream, tap_head, tap_qp_bits

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
        # the clock after each beat the headers captured so far are decoded, the clock after that judged once
        # per frame: as soon as the frame's layout is complete, or at its last beat (a truncated or non-RoCE frame)
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
        # the header decode registered per layout (judge stage; at most one layout matches, so its flags select
        # alone), the decision a clock later from flip-flops only
        judge, judge_last, any_complete = Signal(name="judge"), Signal(name="judge_last"), Signal(name="any_complete")
        roce_l = Signal(len(LAYOUTS), name="roce_l")
        ce_l = Signal(len(LAYOUTS), name="ce_l")
        cnp_l = Signal(len(LAYOUTS), name="cnp_l")
        qp_l = [Signal(self.qp_bits, name=f"qp_l{i}") for i in range(len(LAYOUTS))]
        m.d.sync += [judge.eq(fresh), judge_last.eq(fresh_last), any_complete.eq(Cat(*complete).any()),
                     roce_l.eq(Cat(*roce)),
                     ce_l.eq(Cat(*[(e == ECN_CE) & (op != OPCODE_CNP) for e, op in zip(ecn, opcode, strict=True)])),
                     cnp_l.eq(Cat(*[op == OPCODE_CNP for op in opcode])),
                     *[q.eq(d) for q, d in zip(qp_l, dest_qp, strict=True)]]
        is_roce, ce_hit, cnp_hit = roce_l.any(), (roce_l & ce_l).any(), (roce_l & cnp_l).any()
        judge_qp = Signal(self.qp_bits)
        m.d.comb += judge_qp.eq(reduce(operator.or_, [Mux(roce_l[i], q, 0) for i, q in enumerate(qp_l)]))
        done = Signal()
        m.d.comb += done.eq(judge & ~decided & (any_complete | judge_last))
        with m.If(judge):
            m.d.sync += decided.eq(Mux(judge_last, 0, decided | done))
        m.d.comb += [self.ce.payload.eq(judge_qp), self.cnp.payload.eq(judge_qp),
                     self.ce.valid.eq(done & ce_hit), self.cnp.valid.eq(done & cnp_hit)]
        # the counters count registered pulses (a clock after the event): no counter enable sits behind the
        # header decode
        roce_ev, ce_ev, cnp_ev, drop_ev = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [roce_ev.eq(done & is_roce), ce_ev.eq(self.ce.valid), cnp_ev.eq(self.cnp.valid),
                     drop_ev.eq((self.ce.valid & ~self.ce.ready) | (self.cnp.valid & ~self.cnp.ready))]
        for event, count in ((roce_ev, self.roce_pkts), (ce_ev, self.ce_pkts), (cnp_ev, self.cnp_pkts),
                             (drop_ev, self.dropped)):
            with m.If(event):
                m.d.sync += count.eq(count + 1)
        return m
