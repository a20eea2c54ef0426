"""Scapy layers for the RoCEv2 headers an RC transport needs, bound to UDP port 4791.

``BTH`` (with its ICRC trailer) and the CNP padding come from ``scapy.contrib.roce``: its ICRC masking was
checked against our own implementation and a ConnectX-4 Lx capture (tests/sw/roce/wire/test_roce_icrc.py).  The
extended transport headers it lacks (RETH, ImmDt, AtomicETH, AtomicAckETH) are added here, and the BTH
opcode -> extended-header chain is bound for every RC opcode, so Scapy both builds and dissects them.
"""

from __future__ import annotations

from scapy.contrib import roce as _contrib
from scapy.fields import IntField, XIntField, XLongField
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers, bind_top_down, split_layers

from sw.roce.wire.opcodes import LAYOUTS, ROCEV2_UDP_DPORT, Opcode

BTH = _contrib.BTH
CNPPadding = _contrib.CNPPadding


def _bth_opcode(pkt: Packet) -> int | None:
    """The opcode of the BTH below ``pkt`` (extended headers are chosen by it, not by their own fields)."""
    lower = pkt.underlayer
    while lower is not None and not isinstance(lower, BTH):
        lower = lower.underlayer
    return None if lower is None else lower.opcode


class RETH(Packet):
    """RDMA Extended Transport Header: remote virtual address, R_Key and DMA length of a WRITE/READ."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        if _bth_opcode(self) == Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE:
            return ImmDt
        return Raw


class ImmDt(Packet):
    """Immediate Data Extended Transport Header: 32 bits handed to the receiver's completion."""

    name = "ImmDt"
    fields_desc = [XIntField("immdt", 0)]


class AETH(_contrib.AETH):
    """ACK Extended Transport Header: syndrome (ACK/RNR NAK/NAK + credit or code) and MSN.

    Scapy's own AETH fields are kept; this subclass only adds the AtomicAckETH that follows it in an
    ATOMIC ACKNOWLEDGE.
    """

    name = "AETH"

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        if _bth_opcode(self) == Opcode.ATOMIC_ACKNOWLEDGE:
            return AtomicAckETH
        return Raw


class AtomicETH(Packet):
    """Atomic Extended Transport Header: VA, R_Key, swap (or add) data and compare data."""

    name = "AtomicETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), XLongField("swapdt", 0), XLongField("cmpdt", 0)]


class AtomicAckETH(Packet):
    """Atomic ACK Extended Transport Header: the original remote data an atomic operation read."""

    name = "AtomicAckETH"
    fields_desc = [XLongField("orig_rem_dt", 0)]


_LAYER_OF: dict[str, type[Packet]] = {
    "RETH": RETH,
    "ImmDt": ImmDt,
    "AETH": AETH,
    "AtomicETH": AtomicETH,
    "AtomicAckETH": AtomicAckETH,
    "CNPPadding": CNPPadding,  # the CNP body (RoCEv2 annex A17.9.3): 16 reserved bytes after a BTH 0x81
}

# Scapy's contrib binds its plain AETH to the ACK opcodes first; ours must win the dissection.
split_layers(BTH, _contrib.AETH)
for _opcode, _layout in LAYOUTS.items():
    if _layout.headers:
        bind_layers(BTH, _LAYER_OF[_layout.headers[0]], opcode=int(_opcode))
bind_layers(UDP, BTH, dport=ROCEV2_UDP_DPORT)
# When a BTH is stacked on an extended header without an explicit opcode, pick the most common opcode
# carrying it (bind_layers above left the last one bound, e.g. ATOMIC_ACKNOWLEDGE for a bare AETH).
for _header, _default in (
    ("RETH", Opcode.RDMA_WRITE_ONLY),
    ("ImmDt", Opcode.SEND_ONLY_WITH_IMMEDIATE),
    ("AETH", Opcode.ACKNOWLEDGE),
    ("AtomicETH", Opcode.FETCH_ADD),
    ("CNPPadding", Opcode.CNP),
):
    bind_top_down(BTH, _LAYER_OF[_header], opcode=int(_default))


def layer_class(header: str) -> type[Packet]:
    """The Scapy class of an extended header named as in ``sw.roce.wire.opcodes.LAYOUTS`` ("RETH", ...)."""
    return _LAYER_OF[header]


__all__ = [
    "BTH",
    "CNPPadding",
    "RETH",
    "ImmDt",
    "AETH",
    "AtomicETH",
    "AtomicAckETH",
    "ROCEV2_UDP_DPORT",
    "layer_class",
]
