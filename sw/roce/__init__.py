"""RoCEv2 on the wire: Scapy layers, ICRC, fast packet templates and a fast decoder (the transport uses them).

Public entry points: ``Flow`` (addressing of one connection), ``FlowTemplates``/``PacketTemplate`` (fast
build), ``decode``/``RocePacket`` (fast parse), ``scapy_packet`` (reference build), ``Opcode``, and the
``RoceFormatError`` family.  Importing ``sw.roce.headers`` registers the Scapy layers on UDP port 4791.
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
