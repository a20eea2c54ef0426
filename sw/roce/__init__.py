"""RoCEv2 on the wire (Scapy layers, ICRC, fast packet templates, a fast decoder) and the verbs API above it.

The verbs API (ibverbs names; see ``examples/rdma_write_read.py``), loaded on first use of a name:
``open_device`` (a ``SoftNic`` on an interface: ``alloc_pd``, ``create_cq``, ``create_qp``, ``poll``, ``run_until``),
``ProtectionDomain.reg_mr`` -> ``MemoryRegion`` (``addr``, ``lkey``, ``rkey``, ``sge()``), ``CompletionQueue.poll``
-> ``WorkCompletion``, ``QueuePair`` (``QpState`` RESET -> INIT -> RTR -> RTS, ``modify``, ``post_send``,
``post_recv``), work requests ``SendWr``/``RecvWr``/``Sge`` with ``WrOpcode``, ``Access`` flags, ``WcStatus``/
``WcOpcode``; connection set-up through a rendezvous ``FileStore``: ``qp_info``, ``exchange``, ``connect``,
``random_psn``; addressing: ``interface_of``, ``next_hop_mac``, ``path_mtu_for``; errors ``VerbsError``,
``NicPortError``, ``RouteError``, ``StoreError``.

Public entry points: ``Flow`` (addressing of one connection), ``FlowTemplates``/``PacketTemplate`` (fast
build), ``HeaderFields`` (the extended headers' values every builder takes), ``decode``/``RocePacket`` (fast
parse), ``scapy_packet`` (reference build), ``Opcode``, and the ``RoceFormatError`` family.
Every name loads on first use, so ``import sw.roce`` imports no Scapy; importing ``sw.roce.wire.headers`` registers
the Scapy layers on UDP port 4791.

Typical use on an AF_PACKET socket::

    flow = Flow(src_mac, dst_mac, "10.0.0.1", "10.0.0.2", src_qpn=0x11, dst_qpn=0x22)
    tx = FlowTemplates(flow)                                    # per connection, once
    reth = HeaderFields(va=va, rkey=rkey, dma_len=len(data))   # sw.roce.wire.fields: the extended headers
    sock.send(tx[Opcode.RDMA_WRITE_ONLY].build(psn, data, ackreq=True, ext=reth))
    try:
        pkt = decode(sock.recv(65535))                          # RocePacket: opcode, dest_qp, psn, ecn, ...
    except RoceFormatError:
        ...                                                     # not ours, truncated, or bad ICRC: drop
"""

from __future__ import annotations

import importlib

_API = {
    "sw.roce.wire.decode": ("RocePacket", "decode"),
    "sw.roce.wire.fields": ("HeaderFields",),
    "sw.roce.wire.errors": ("BadLengthError", "BadVersionError", "IcrcMismatchError", "IpChecksumError",
                            "NotRoceError", "RoceFormatError", "TruncatedFrameError", "UnsupportedOpcodeError"),
    "sw.roce.wire.flow": ("ECN_CE", "ECN_ECT0", "ECN_ECT1", "ECN_NOT_ECT", "Flow", "udp_sport"),
    "sw.roce.wire.opcodes": ("LAYOUTS", "Opcode"),
    "sw.roce.wire.packets": ("scapy_frame", "scapy_packet"),
    "sw.roce.wire.template": ("FlowTemplates", "PacketTemplate"),
    "sw.roce.transport.verbs": ("ACCESS_ALL", "Access", "CompletionQueue", "DeviceAttr", "MemoryRegion",
                                "ProtectionDomain", "QpCap", "RecvWr", "SendWr", "Sge", "VerbsError", "WcOpcode",
                                "WcStatus", "WorkCompletion", "WrOpcode", "query_device"),
    "sw.roce.softnic.nic": ("SoftNic",),
    "sw.roce.softnic.port": ("NicPortError", "open_device", "path_mtu_for"),
    "sw.roce.transport.qp": ("QpAttr", "QpState", "QueuePair"),
    "sw.roce.transport.qp_connect": ("connect", "exchange", "qp_info", "random_psn"),
    "sw.roce.softnic.route": ("RouteError", "interface_of", "next_hop_mac"),
    "sw.units.file_store": ("FileStore", "StoreError"),
}
_LAZY = {name: module for module, names in _API.items() for name in names}


def __getattr__(name: str) -> object:
    """The public names, imported on first use (``import sw.roce`` costs no Scapy and no NumPy)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sw.roce' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
