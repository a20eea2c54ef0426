"""Fast RoCEv2 frame decoder (struct, not Scapy): the fields a transport needs, or a typed error.

``decode(frame)`` takes an Ethernet frame as read from an AF_PACKET socket (optionally one 802.1Q tag,
trailing Ethernet padding ignored) and returns a ``RocePacket``.  Anything else raises a subclass of
``RoceFormatError`` that says why and at which byte offset: truncated, not RoCE, bad IP/BTH version,
unsupported opcode, inconsistent lengths, ICRC mismatch.  No other exception escapes for any input bytes.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from sw.roce.wire.errors import (
    BadLengthError,
    BadVersionError,
    IcrcMismatchError,
    IpChecksumError,
    NotRoceError,
    TruncatedFrameError,
    UnsupportedOpcodeError,
)
from sw.roce.wire.icrc import icrc as compute_icrc
from sw.roce.wire.opcodes import BTH_BYTES, ICRC_BYTES, LAYOUT_BY_BYTE, ROCEV2_UDP_DPORT

ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100

_U16 = struct.Struct(">H")
_BTH = struct.Struct(">BBHI I")
_IPV4 = struct.Struct(">BBHHHBBH4s4s")
_IPV6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")
_RETH = struct.Struct(">QII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_ATOMIC = struct.Struct(">QIQQ")


@dataclass(slots=True)
class RocePacket:
    """Decoded RoCEv2 frame; extended-header fields are None when the opcode does not carry that header."""

    opcode: int
    dest_qp: int
    psn: int
    ackreq: bool
    se: bool
    pad_count: int
    pkey: int
    fecn: bool
    becn: bool
    ip_version: int
    src_ip: str
    dst_ip: str
    dscp: int
    ecn: int
    ttl: int  # IPv4 TTL or IPv6 hop limit
    udp_sport: int
    src_mac: bytes
    dst_mac: bytes
    payload: memoryview  # application bytes, pad removed (a view into the frame: copy it to keep it)
    icrc: int  # the value on the wire
    icrc_ok: bool | None  # None when the ICRC was not checked
    va: int | None = None  # RETH or AtomicETH
    rkey: int | None = None  # RETH or AtomicETH
    dma_len: int | None = None  # RETH
    immdt: int | None = None  # ImmDt
    syndrome: int | None = None  # AETH
    msn: int | None = None  # AETH
    swapdt: int | None = None  # AtomicETH (swap or add data)
    cmpdt: int | None = None  # AtomicETH
    orig_rem_dt: int | None = None  # AtomicAckETH


def _need(frame_len: int, end: int, what: str) -> None:
    if frame_len < end:
        raise TruncatedFrameError(f"frame of {frame_len} bytes ends inside the {what} (needs {end})", frame_len)


def decode(
    frame: bytes | bytearray | memoryview, *, check_icrc: bool = True, raise_on_bad_icrc: bool = True
) -> RocePacket:
    """Decode one Ethernet frame.

    With ``check_icrc`` the IPv4 header checksum and the ICRC are verified: a wrong IPv4 checksum raises
    IpChecksumError; an ICRC mismatch raises IcrcMismatchError, or only sets ``icrc_ok=False`` when
    ``raise_on_bad_icrc`` is off.
    """
    mv = memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    size = len(mv)
    _need(size, 14, "Ethernet header")
    l3 = 14
    ethertype = _U16.unpack_from(mv, 12)[0]
    if ethertype == ETH_P_8021Q:
        _need(size, 18, "802.1Q tag")
        ethertype = _U16.unpack_from(mv, 16)[0]
        l3 = 18
    if ethertype == ETH_P_IPV4:
        _need(size, l3 + 20, "IPv4 header")
        ver_ihl, tos, tot_len, _, frag, ttl, proto, _, src, dst = _IPV4.unpack_from(mv, l3)
        if ver_ihl >> 4 != 4:
            raise BadVersionError(f"IP version {ver_ihl >> 4} under EtherType IPv4", l3)
        ihl_bytes = (ver_ihl & 0x0F) * 4
        if ihl_bytes < 20:
            raise BadLengthError(f"IPv4 header length {ihl_bytes} < 20", l3)
        if frag & 0x3FFF:
            raise NotRoceError("IPv4 fragment (RoCEv2 packets are never fragmented)", l3 + 6)
        if proto != 17:
            raise NotRoceError(f"IP protocol {proto} is not UDP (17)", l3 + 9)
        if tot_len < ihl_bytes + 8:
            raise BadLengthError(f"IPv4 total length {tot_len} is smaller than its headers", l3 + 2)
        end = l3 + tot_len
        _need(size, end, "IPv4 packet")
        l4 = l3 + ihl_bytes
        ip_version, dscp, ecn = 4, tos >> 2, tos & 3
        src_ip = socket.inet_ntop(socket.AF_INET, src)
        dst_ip = socket.inet_ntop(socket.AF_INET, dst)
    elif ethertype == ETH_P_IPV6:
        _need(size, l3 + 40, "IPv6 header")
        word0, plen, next_header, ttl, src, dst = _IPV6.unpack_from(mv, l3)
        if word0 >> 28 != 6:
            raise BadVersionError(f"IP version {word0 >> 28} under EtherType IPv6", l3)
        if next_header != 17:
            raise NotRoceError(f"IPv6 next header {next_header} is not UDP (17)", l3 + 6)
        end = l3 + 40 + plen
        _need(size, end, "IPv6 packet")
        l4 = l3 + 40
        tclass = (word0 >> 20) & 0xFF
        ip_version, dscp, ecn = 6, tclass >> 2, tclass & 3
        src_ip = socket.inet_ntop(socket.AF_INET6, src)
        dst_ip = socket.inet_ntop(socket.AF_INET6, dst)
    else:
        raise NotRoceError(f"EtherType 0x{ethertype:04x} is neither IPv4 nor IPv6", l3 - 2)

    if end < l4 + 8:
        raise TruncatedFrameError(f"IP packet of {end - l3} bytes ends inside the UDP header", end)
    sport, dport, udp_len, _ = _UDP.unpack_from(mv, l4)
    if dport != ROCEV2_UDP_DPORT:
        raise NotRoceError(f"UDP destination port {dport} is not RoCEv2 ({ROCEV2_UDP_DPORT})", l4 + 2)
    if udp_len != end - l4:
        raise BadLengthError(f"UDP length {udp_len} disagrees with the IP length ({end - l4} bytes of UDP)", l4 + 4)
    bth = l4 + 8
    if end < bth + BTH_BYTES + ICRC_BYTES:
        raise TruncatedFrameError(f"UDP datagram of {udp_len} bytes is too short for a BTH and an ICRC", l4 + 4)
    opcode, flags, pkey, w1, w2 = _BTH.unpack_from(mv, bth)
    tver = flags & 0x0F
    if tver != 0:
        raise BadVersionError(f"BTH transport version {tver} is not 0", bth + 1)
    layout = LAYOUT_BY_BYTE[opcode]
    if layout is None:
        raise UnsupportedOpcodeError(f"BTH opcode 0x{opcode:02x} is not an RC opcode or CNP", bth)
    icrc_at = end - ICRC_BYTES
    ext = bth + BTH_BYTES
    data = ext + layout.ext_bytes
    if data > icrc_at:
        raise TruncatedFrameError(
            f"opcode 0x{opcode:02x} needs {layout.ext_bytes} bytes of extended headers, "
            f"the datagram has {icrc_at - ext}",
            icrc_at,
        )
    pad = (flags >> 4) & 3
    if data + pad > icrc_at:
        raise BadLengthError(f"pad count {pad} exceeds the {icrc_at - data} payload bytes", bth + 1)
    if not layout.has_payload and data != icrc_at:
        raise BadLengthError(f"opcode 0x{opcode:02x} carries no payload, found {icrc_at - data} bytes", data)

    pkt = RocePacket(
        opcode,
        w1 & 0xFFFFFF,
        w2 & 0xFFFFFF,
        bool(w2 >> 31),
        bool(flags & 0x80),
        pad,
        pkey,
        bool(w1 >> 31),
        bool((w1 >> 30) & 1),
        ip_version,
        src_ip,
        dst_ip,
        dscp,
        ecn,
        ttl,
        sport,
        bytes(mv[6:12]),
        bytes(mv[0:6]),
        mv[data : icrc_at - pad],
        int.from_bytes(mv[icrc_at:end], "little"),
        None,
    )
    for header in layout.headers:
        if header == "RETH":
            pkt.va, pkt.rkey, pkt.dma_len = _RETH.unpack_from(mv, ext)
            ext += 16
        elif header == "ImmDt":
            pkt.immdt = _U32.unpack_from(mv, ext)[0]
            ext += 4
        elif header == "AETH":
            word = _U32.unpack_from(mv, ext)[0]
            pkt.syndrome, pkt.msn = word >> 24, word & 0xFFFFFF
            ext += 4
        elif header == "AtomicETH":
            pkt.va, pkt.rkey, pkt.swapdt, pkt.cmpdt = _ATOMIC.unpack_from(mv, ext)
            ext += 28
        elif header == "AtomicAckETH":
            pkt.orig_rem_dt = _U64.unpack_from(mv, ext)[0]
            ext += 8
    if check_icrc:
        # A correct IPv4 header sums (one's complement) to 0xFFFF, i.e. to 0 modulo 0xFFFF; its big-endian
        # value is congruent to that sum because 2**16 == 1 (mod 0xFFFF).
        if ip_version == 4 and int.from_bytes(mv[l3:l4], "big") % 0xFFFF:
            raise IpChecksumError("IPv4 header checksum is wrong", l3 + 10)
        computed = compute_icrc(mv[l3:end])
        pkt.icrc_ok = computed == pkt.icrc
        if not pkt.icrc_ok and raise_on_bad_icrc:
            raise IcrcMismatchError(
                f"ICRC on the wire 0x{pkt.icrc:08x} != computed 0x{computed:08x}",
                icrc_at,
                wire_icrc=pkt.icrc,
                computed_icrc=computed,
            )
    return pkt
