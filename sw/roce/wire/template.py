"""Fast path: a RoCEv2 frame template built once with Scapy, then patched per packet with ``struct``.

Per packet only the variable fields are packed (PSN, dest QP, ack-request/solicited bits, ECN, payload and
its length and padding, the opcode's extended-header fields) and the ICRC is computed incrementally: the CRC
state over the invariant masked prefix (8 bytes of 1s + the first IP bytes) is computed once, per packet
zlib.crc32 continues over the masked variable headers and the payload.  IP total length, IPv4 checksum
(incrementally, from a precomputed sum) and UDP length are patched.  The UDP checksum is 0 over IPv4 (as
RoCEv2 NICs send it: the ICRC protects the packet) and computed over IPv6, where RFC 8200 requires it (RFC 6935's
zero-checksum exception is for configured tunnels, and tshark flags a zero IPv6 UDP checksum): headers from
precomputed sums, the payload with one numpy sum over 32-bit words (``payload_words_sum``).  The output is
byte-identical to ``sw.roce.wire.packets.scapy_frame`` (a property test checks every opcode).

Usage (the transport calls this per packet on an AF_PACKET socket)::

    tpl = FlowTemplates(flow)                       # once per connection direction
    frame = tpl[Opcode.RDMA_WRITE_ONLY].build(psn, payload, ext=HeaderFields(va=addr, rkey=key, dma_len=len(payload)))
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator

import numpy as np

from sw.roce.wire.fields import NO_FIELDS, HeaderFields
from sw.roce.wire.flow import ECN_ECT0, Flow
from sw.roce.wire.icrc import PSEUDO_LRH
from sw.roce.wire.opcodes import BTH_BYTES, ICRC_BYTES, LAYOUTS, Opcode, OpcodeLayout
from sw.roce.wire.packets import scapy_frame

Payload = bytes | bytearray | memoryview
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ICRC = struct.Struct("<I")
_UDP_BYTES = 8

# Extended-header layouts -> (struct format of their fields, kind code used by ``build``).
_EXT_FORMATS: dict[tuple[str, ...], tuple[str, int]] = {
    (): ("", 0),
    ("RETH",): ("QII", 1),
    ("ImmDt",): ("I", 2),
    ("RETH", "ImmDt"): ("QIII", 3),
    ("AETH",): ("I", 4),
    ("AETH", "AtomicAckETH"): ("IQ", 5),
    ("AtomicETH",): ("QIQQ", 6),
    ("CNPPadding",): ("16x", 0),
}


NUMPY_SUM_MIN_BYTES = 1024  # below this, one int.from_bytes is cheaper than a numpy call


def payload_words_sum(payload: Payload) -> int:
    """Big-endian 16-bit words of ``payload`` zero-padded to 4 bytes, summed modulo 0xFFFF (one's complement sum).

    Large payloads: numpy sums native 32-bit words (no overflow in uint64 below 16 GiB); as 2**16 == 1 (mod 0xFFFF)
    that sum is congruent to the sum of little-endian 16-bit words, which times 256 is the big-endian one
    (a byte swap is a multiplication by 2**8 modulo 0xFFFF)."""
    n = len(payload)
    if n < NUMPY_SUM_MIN_BYTES:
        return (int.from_bytes(payload, "big") << 8 * (-n & 3)) % 0xFFFF
    whole = n & ~3
    total = int(np.frombuffer(payload, np.uint32, whole >> 2).sum(dtype=np.uint64)) << 8
    if whole != n:
        total += int.from_bytes(payload[whole:], "big") << 8 * (-n & 3)
    return total % 0xFFFF


def _ones_sum(data: bytes) -> int:
    """Sum of the big-endian 16-bit words of ``data`` (even length), not yet folded."""
    return sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))


class PacketTemplate:
    """One opcode of one flow: ``build(psn, payload, ...)`` returns a complete frame (no FCS) as bytes.

    ``build(psn, payload=b"", ecn=ECN_ECT0, ackreq=False, se=False, dqpn=None, ext=HeaderFields(...))``: ``dqpn``
    None means the flow's destination QP; ``ext`` fields of headers this opcode does not carry are ignored.
    Values that do not fit raise ValueError.
    """

    def __init__(self, flow: Flow, opcode: Opcode | int) -> None:
        self.flow = flow
        self.opcode = Opcode(opcode)
        layout = LAYOUTS[self.opcode]
        self.has_payload = layout.has_payload
        # Built once with Scapy: every invariant byte of the frame is taken from this reference frame.
        ref = scapy_frame(flow, self.opcode, psn=0, payload=b"", ecn=0)
        make = _builder_v4 if flow.ip_version == 4 else _builder_v6
        self.build = make(self, ref, layout)


def _ext_values(kind: int, ext: HeaderFields) -> tuple[int, ...]:
    """The extended-header field values of one layout kind, in ``_EXT_FORMATS`` order."""
    if kind == 1:
        return (ext.va, ext.rkey, ext.dma_len)
    if kind == 2:
        return (ext.immdt,)
    if kind == 3:
        return (ext.va, ext.rkey, ext.dma_len, ext.immdt)
    if kind == 6:
        return (ext.va, ext.rkey, ext.swapdt, ext.cmpdt)
    syndrome, msn = ext.syndrome, ext.msn
    if msn >> 24 or syndrome >> 8 or msn < 0 or syndrome < 0:
        raise ValueError(f"syndrome={syndrome} / msn={msn}: must fit in 8 / 24 bits")
    if kind == 4:
        return (syndrome << 24 | msn,)
    return (syndrome << 24 | msn, ext.orig_rem_dt)


def _bad_fields(tpl: PacketTemplate, psn: int, dqpn: int, n: int, ecn: object) -> ValueError:
    if n and not tpl.has_payload:
        return ValueError(f"{tpl.opcode.name} carries no payload (got {n} bytes)")
    if ecn not in (0, 1, 2, 3):
        return ValueError(f"ecn={ecn!r}: must be 0..3")
    return ValueError(f"psn={psn} / dqpn={dqpn}: must fit in 24 bits")


def _bth_constants(ref: bytes, l4: int) -> tuple[int, int]:
    """BTH word 0 (opcode | SE,M,PadCnt,TVer | P_Key) with SE and PadCnt cleared, and resv8a (BECN on CNP)."""
    return int.from_bytes(ref[l4 + 8 : l4 + 12], "big") & ~(0xB << 20), ref[l4 + 12] << 24


def _builder_v4(tpl: PacketTemplate, ref: bytes, layout: OpcodeLayout) -> Callable[..., bytes]:
    """Per-packet builder of an IPv4 template; constants live in the closure (fast local lookups)."""
    if ref[14] != 0x45:
        raise ValueError("the IPv4 template assumes a 20-byte header without options")
    ext_fmt, kind = _EXT_FORMATS[layout.headers]
    # wire: eth+ver/ihl, tos, totlen, id..frag, ttl+proto, cksum, addrs+ports, udplen, udpck, BTH, ext
    wire = struct.Struct(f">15sBH6sH12sHH3I{ext_fmt}").pack
    c_eth, c_idttl, c_addrports = ref[0:15], ref[18:24], ref[26:38]
    # masked copy for the ICRC, after the precomputed state over 1s(8) + ver/ihl + 0xff(TOS)
    masked = struct.Struct(f">H20sH2s3I{ext_fmt}").pack
    m_mid = ref[18:22] + b"\xff" + ref[23:24] + b"\xff\xff" + ref[26:38]
    crc0 = zlib.crc32(PSEUDO_LRH + bytes((ref[14], 0xFF)))
    # IPv4 checksum: all header words but ver/TOS, total length and the checksum itself, plus ver/TOS per ECN.
    fixed = _ones_sum(ref[18:24]) + _ones_sum(ref[26:34])
    dscp = tpl.flow.cnp_dscp if tpl.opcode == Opcode.CNP else tpl.flow.dscp
    by_ecn = {ecn: (dscp << 2 | ecn, fixed + (ref[14] << 8 | dscp << 2 | ecn)) for ecn in range(4)}
    w0_base, resv8a = _bth_constants(ref, 34)
    udp_fixed = _UDP_BYTES + BTH_BYTES + layout.ext_bytes + ICRC_BYTES
    default_dqpn, has_payload = tpl.flow.dst_qpn, layout.has_payload
    crc32, icrc_pack, pads = zlib.crc32, _ICRC.pack, _PADS

    def build(psn: int, payload: Payload = b"", ecn: int = ECN_ECT0, ackreq: bool = False, se: bool = False,
              dqpn: int | None = None, ext: HeaderFields = NO_FIELDS) -> bytes:
        n = len(payload)
        if dqpn is None:
            dqpn = default_dqpn
        if (psn | dqpn) >> 24 or psn < 0 or dqpn < 0 or ecn not in by_ecn or (n and not has_payload):
            raise _bad_fields(tpl, psn, dqpn, n, ecn)
        tos, csum = by_ecn[ecn]
        pad = -n & 3
        udp_len = udp_fixed + n + pad
        tot_len = udp_len + 20
        csum += tot_len
        csum = (csum & 0xFFFF) + (csum >> 16)
        csum = ((csum & 0xFFFF) + (csum >> 16)) ^ 0xFFFF
        w0 = w0_base | se << 23 | pad << 20
        w2 = ackreq << 31 | psn
        ext = _ext_values(kind, ext) if kind else ()
        try:
            hdr = wire(c_eth, tos, tot_len, c_idttl, csum, c_addrports, udp_len, 0, w0, resv8a | dqpn, w2, *ext)
        except struct.error as exc:
            raise ValueError(f"{tpl.opcode.name}: a field does not fit its wire size ({exc})") from None
        crc = crc32(masked(tot_len, m_mid, udp_len, b"\xff\xff", w0, 0xFF000000 | dqpn, w2, *ext), crc0)
        if n:
            crc = crc32(payload, crc)
        if pad:
            return hdr + payload + pads[pad] + icrc_pack(crc32(pads[pad], crc))
        return hdr + payload + icrc_pack(crc)

    return build


def _builder_v6(tpl: PacketTemplate, ref: bytes, layout: OpcodeLayout) -> Callable[..., bytes]:
    """Per-packet builder of an IPv6 template (UDP checksum computed, as IPv6 requires)."""
    ext_fmt, kind = _EXT_FORMATS[layout.headers]
    # wire: eth, ver/tc/flow label, payload length, nh+hlim+addrs+ports, udplen, udpck, BTH, ext
    wire = struct.Struct(f">14sIH38sHH3I{ext_fmt}").pack
    c_eth, c_rest = ref[0:14], ref[20:58]
    masked = struct.Struct(f">H38sH2s3I{ext_fmt}").pack
    m_mid = ref[20:21] + b"\xff" + ref[22:58]
    crc0 = zlib.crc32(PSEUDO_LRH + bytes((ref[14] | 0x0F, 0xFF, 0xFF, 0xFF)))
    word0 = int.from_bytes(ref[14:18], "big") & 0xF00FFFFF
    dscp = tpl.flow.cnp_dscp if tpl.opcode == Opcode.CNP else tpl.flow.dscp
    by_ecn = {ecn: word0 | (dscp << 2 | ecn) << 20 for ecn in range(4)}
    # UDP checksum constant part: pseudo-header addresses and next header, and the two ports.
    csum0 = _ones_sum(ref[22:54]) + 17 + _ones_sum(ref[54:58])
    w0_base, resv8a = _bth_constants(ref, 54)
    udp_fixed = _UDP_BYTES + BTH_BYTES + layout.ext_bytes + ICRC_BYTES
    default_dqpn, has_payload = tpl.flow.dst_qpn, layout.has_payload
    crc32, icrc_pack, pads, from_bytes, words_sum = zlib.crc32, _ICRC.pack, _PADS, int.from_bytes, payload_words_sum

    def build(psn: int, payload: Payload = b"", ecn: int = ECN_ECT0, ackreq: bool = False, se: bool = False,
              dqpn: int | None = None, ext: HeaderFields = NO_FIELDS) -> bytes:
        n = len(payload)
        if dqpn is None:
            dqpn = default_dqpn
        if (psn | dqpn) >> 24 or psn < 0 or dqpn < 0 or ecn not in by_ecn or (n and not has_payload):
            raise _bad_fields(tpl, psn, dqpn, n, ecn)
        pad = -n & 3
        udp_len = udp_fixed + n + pad
        w0 = w0_base | se << 23 | pad << 20
        w1 = resv8a | dqpn
        w2 = ackreq << 31 | psn
        ext = _ext_values(kind, ext) if kind else ()
        try:
            crc = crc32(masked(udp_len, m_mid, udp_len, b"\xff\xff", w0, 0xFF000000 | dqpn, w2, *ext), crc0)
        except struct.error as exc:
            raise ValueError(f"{tpl.opcode.name}: a field does not fit its wire size ({exc})") from None
        if n:
            crc = crc32(payload, crc)
        if pad:
            crc = crc32(pads[pad], crc)
        icrc = icrc_pack(crc)
        # UDP checksum.  As 2**16 == 1 (mod 0xFFFF), the big-endian value of any even-length run of bytes is
        # congruent to the sum of its 16-bit words: 32/64-bit fields are added as integers, the payload (which
        # starts 4-byte aligned in the datagram) and its pad by payload_words_sum.
        total = (
            csum0 + 2 * udp_len + w0 + w1 + w2 + sum(ext) + from_bytes(icrc, "big") + (words_sum(payload) if n else 0)
        ) % 0xFFFF
        csum = total ^ 0xFFFF if total else 0xFFFF
        hdr = wire(c_eth, by_ecn[ecn], udp_len, c_rest, udp_len, csum, w0, w1, w2, *ext)
        if pad:
            return hdr + payload + pads[pad] + icrc
        return hdr + payload + icrc

    return build


class FlowTemplates:
    """The templates of every opcode for one flow, built lazily on first use: ``tpl[Opcode.X].build(...)``."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self._by_opcode: dict[int, PacketTemplate] = {}

    def __getitem__(self, opcode: Opcode | int) -> PacketTemplate:
        tpl = self._by_opcode.get(opcode)
        if tpl is None:
            tpl = self._by_opcode[int(opcode)] = PacketTemplate(self.flow, opcode)
        return tpl

    def build(
        self,
        opcode: Opcode | int,
        psn: int,
        payload: Payload = b"",
        *,
        ackreq: bool = False,
        ext: HeaderFields = NO_FIELDS,
    ) -> bytes:
        """Convenience form of ``self[opcode].build(psn, payload, ackreq=..., ext=...)``."""
        return self[opcode].build(psn, payload, ackreq=ackreq, ext=ext)

    def __iter__(self) -> Iterator[PacketTemplate]:
        return (self[op] for op in LAYOUTS)
