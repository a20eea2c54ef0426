"""Reference RoCEv2 frames built with Scapy: the slow, obviously-right path the fast template must match.

``scapy_packet(flow, opcode, psn=..., payload=..., ext=HeaderFields(...))`` returns an Ether/IP(v6)/UDP/BTH/...
packet whose bytes are a complete frame (no FCS) with the ICRC computed by Scapy's RoCE layer.  Header conventions (the
template follows them byte for byte): IPv4 ID 0 with DF set; UDP checksum 0 over IPv4 (RoCEv2 NICs rely on
the ICRC) and computed over IPv6 (RFC 8200 requires it); IPv6 flow label = the QP-pair hash; payload padded
to 4 bytes with PadCnt set; CNP with BECN set and the CNP DSCP.
"""

from __future__ import annotations

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from sw.roce.wire.fields import NO_FIELDS, HeaderFields
from sw.roce.wire.flow import ECN_ECT0, Flow
from sw.roce.wire.headers import (
    AETH,
    BTH,
    RETH,
    ROCEV2_UDP_DPORT,
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    ImmDt,
)
from sw.roce.wire.opcodes import LAYOUTS, Opcode


def pad_count(payload_bytes: int) -> int:
    """Bytes of padding that bring a payload to a multiple of 4 (the BTH PadCnt)."""
    return -payload_bytes & 3


def check_fields(opcode: int, psn: int, payload_bytes: int, ecn: int, dqpn: int | None) -> None:
    """Reject values that do not fit their wire fields (shared by the Scapy and template builders)."""
    if opcode not in LAYOUTS:
        raise ValueError(f"opcode 0x{opcode:02x} is not an RC opcode or CNP")
    if not 0 <= psn < 1 << 24:
        raise ValueError(f"psn={psn}: must fit in 24 bits")
    if not 0 <= ecn <= 3:
        raise ValueError(f"ecn={ecn}: must be 0..3")
    if dqpn is not None and not 0 <= dqpn < 1 << 24:
        raise ValueError(f"dqpn={dqpn}: must fit in 24 bits")
    if payload_bytes and not LAYOUTS[Opcode(opcode)].has_payload:
        raise ValueError(f"{Opcode(opcode).name} carries no payload (got {payload_bytes} bytes)")


def scapy_packet(
    flow: Flow,
    opcode: int,
    *,
    psn: int = 0,
    payload: bytes = b"",
    ecn: int = ECN_ECT0,
    ackreq: bool = False,
    se: bool = False,
    dqpn: int | None = None,
    ext: HeaderFields = NO_FIELDS,
) -> Packet:
    """One complete RoCEv2 frame of ``flow`` built layer by layer with Scapy (ICRC by scapy.contrib.roce)."""
    check_fields(opcode, psn, len(payload), ecn, dqpn)
    op = Opcode(opcode)
    is_cnp = op == Opcode.CNP
    dscp = flow.cnp_dscp if is_cnp else flow.dscp
    tos = dscp << 2 | ecn
    if flow.ip_version == 4:
        l3: Packet = IP(tos=tos, id=0, flags="DF", ttl=flow.ttl, proto=17, src=flow.src_ip, dst=flow.dst_ip)
    else:
        l3 = IPv6(tc=tos, fl=flow.flow_label, nh=17, hlim=flow.ttl, src=flow.src_ip, dst=flow.dst_ip)
    pad = pad_count(len(payload))
    bth = BTH(
        opcode=int(op),
        solicited=int(se),
        migreq=flow.migreq,
        padcount=pad,
        version=0,
        pkey=flow.pkey,
        fecn=0,
        becn=int(is_cnp),
        resv6=0,
        dqpn=flow.dst_qpn if dqpn is None else dqpn,
        ackreq=int(ackreq),
        resv7=0,
        psn=psn,
    )
    pkt = (
        Ether(src=flow.src_mac, dst=flow.dst_mac)
        / l3
        / UDP(sport=flow.udp_sport, dport=ROCEV2_UDP_DPORT, chksum=0 if flow.ip_version == 4 else None)
        / bth
    )
    for header in LAYOUTS[op].headers:
        if header == "RETH":
            pkt = pkt / RETH(va=ext.va, rkey=ext.rkey, dma_len=ext.dma_len)
        elif header == "ImmDt":
            pkt = pkt / ImmDt(immdt=ext.immdt)
        elif header == "AETH":
            pkt = pkt / AETH(syndrome=ext.syndrome, msn=ext.msn)
        elif header == "AtomicETH":
            pkt = pkt / AtomicETH(va=ext.va, rkey=ext.rkey, swapdt=ext.swapdt, cmpdt=ext.cmpdt)
        elif header == "AtomicAckETH":
            pkt = pkt / AtomicAckETH(orig_rem_dt=ext.orig_rem_dt)
        elif header == "CNPPadding":
            pkt = pkt / CNPPadding()
    if payload or pad:
        pkt = pkt / Raw(payload + b"\0" * pad)
    return pkt


def scapy_frame(
    flow: Flow,
    opcode: int,
    *,
    psn: int = 0,
    payload: bytes = b"",
    ecn: int = ECN_ECT0,
    ackreq: bool = False,
    se: bool = False,
    dqpn: int | None = None,
    ext: HeaderFields = NO_FIELDS,
) -> bytes:
    """``bytes(scapy_packet(...))``: the reference frame (Ethernet header through ICRC, no FCS)."""
    return bytes(scapy_packet(flow, opcode, psn=psn, payload=payload, ecn=ecn, ackreq=ackreq, se=se, dqpn=dqpn,
                              ext=ext))
