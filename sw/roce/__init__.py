"""RoCEv2 on the wire (Scapy layers, ICRC, fast packet templates, a fast decoder) and the verbs API above it.

The verbs API (ibverbs names; see ``examples/rdma_write_read.py``), loaded on first use of a name:
``open_device`` (a ``Nic`` on an interface: ``alloc_pd``, ``create_cq``, ``create_qp``, ``poll``, ``run_until``),
``ProtectionDomain.reg_mr`` -> ``MemoryRegion`` (``addr``, ``lkey``, ``rkey``, ``sge()``), ``CompletionQueue.poll``
-> ``WorkCompletion``, ``QueuePair`` (``QpState`` RESET -> INIT -> RTR -> RTS, ``modify``, ``post_send``,
``post_recv``), work requests ``SendWr``/``RecvWr``/``Sge`` with ``WrOpcode``, ``Access`` flags, ``WcStatus``/
``WcOpcode``; connection set-up through a rendezvous ``FileStore``: ``qp_info``, ``exchange``, ``connect``,
``random_psn``; addressing: ``interface_of``, ``next_hop_mac``, ``path_mtu_for``; errors ``VerbsError``,
``PortError``, ``RouteError``, ``StoreError``.

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

import importlib

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

_VERBS_API = {
    "sw.roce.verbs": ("ACCESS_ALL", "Access", "CompletionQueue", "DeviceAttr", "MemoryRegion", "ProtectionDomain",
                      "QpCap", "RecvWr", "SendWr", "Sge", "VerbsError", "WcOpcode", "WcStatus", "WorkCompletion",
                      "WrOpcode", "query_device"),
    "sw.roce.nic": ("Nic",),
    "sw.roce.nic_port": ("PortError", "open_device", "path_mtu_for"),
    "sw.roce.qp": ("QpAttr", "QpState", "QueuePair"),
    "sw.roce.qp_connect": ("connect", "exchange", "qp_info", "random_psn"),
    "sw.roce.route": ("RouteError", "interface_of", "next_hop_mac"),
    "sw.units.file_store": ("FileStore", "StoreError"),
}
_LAZY = {name: module for module, names in _VERBS_API.items() for name in names}


def __getattr__(name: str) -> object:
    """The verbs API names, imported on first use (``import sw.roce`` stays as cheap as the wire layer)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sw.roce' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    *sorted(_LAZY),
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
