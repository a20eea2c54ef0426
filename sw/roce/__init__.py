"""RoCEv2 on the wire: Scapy layers, ICRC, fast packet templates and a fast decoder (the transport uses them).

Public entry points: ``Flow`` (addressing of one connection), ``FlowTemplates``/``PacketTemplate`` (fast
build), ``decode``/``RocePacket`` (fast parse), ``scapy_packet`` (reference build), ``Opcode``, and the
``RoceFormatError`` family.  Importing ``sw.roce.headers`` registers the Scapy layers on UDP port 4791.

Typical use on an AF_PACKET socket::

    flow = Flow(src_mac, dst_mac, "10.0.0.1", "10.0.0.2", src_qpn=0x11, dst_qpn=0x22)
    tx = FlowTemplates(flow)                                    # per connection, once
    sock.send(tx[Opcode.RDMA_WRITE_ONLY].build(psn, data, ackreq=True, va=va, rkey=rkey, dma_len=len(data)))
    try:
        pkt = decode(sock.recv(65535))                          # RocePacket: opcode, dest_qp, psn, ecn, ...
    except RoceFormatError:
        ...                                                     # not ours, truncated, or bad ICRC: drop
"""

from __future__ import annotations

from sw.roce.decode import RocePacket, decode
from sw.roce.errors import (
    BadLengthError,
    BadVersionError,
    IcrcMismatchError,
    IpChecksumError,
    NotRoceError,
    RoceFormatError,
    TruncatedFrameError,
    UnsupportedOpcodeError,
)
from sw.roce.flow import ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, Flow, udp_sport
from sw.roce.opcodes import LAYOUTS, Opcode
from sw.roce.packets import scapy_frame, scapy_packet
from sw.roce.template import FlowTemplates, PacketTemplate

__all__ = [
    "BadLengthError",
    "BadVersionError",
    "ECN_CE",
    "ECN_ECT0",
    "ECN_ECT1",
    "ECN_NOT_ECT",
    "Flow",
    "FlowTemplates",
    "IcrcMismatchError",
    "IpChecksumError",
    "LAYOUTS",
    "NotRoceError",
    "Opcode",
    "PacketTemplate",
    "RoceFormatError",
    "RocePacket",
    "TruncatedFrameError",
    "UnsupportedOpcodeError",
    "decode",
    "scapy_frame",
    "scapy_packet",
    "udp_sport",
]
