"""INT-MD (v2.1, over UDP) as the fabric stamps it into RoCEv2 frames: parse the hop stack and strip it.

The fabric program (p4/programs/fabric.p4) marks an INT-carrying packet with DSCP ``DSCP_INT`` and inserts
shim (4 B) + MD header (12 B) + one 28-byte record per hop, newest first, between UDP and BTH. The receiving
NIC strips it to get the original RoCEv2 frame back (lengths and DSCP restored, so the ICRC checks again) and
hands the hop records to congestion control (HPCC echoes them to the sender).

INT echo (HPCC): the responder puts the forward-path hops it received back into its ACK with ``insert_int``, in
the same wire format (DSCP_INT, shim, MD header, hop stack after UDP) with two differences: the MD header's
remaining hop count is 0, so the fabric's transit logic adds no reverse-path hop (it only sets the E bit), and
its domain-specific id is ``INT_ECHO_DOMAIN_ID``, which tells the requester the hops describe its own
forward path. The fabric's INT source never re-stamps a packet that already carries a shim, so the echo
arrives unchanged; ``strip_int`` restores the plain ACK, whose ICRC (and tshark dissection) is valid again.

IPv4 and IPv6 alike: the marker is the DSCP of the IPv4 TOS byte or of the IPv6 traffic class; the lengths are
the IPv4 total length (and header checksum) or the IPv6 payload length, and the UDP length.  Over IPv4 the UDP
checksum stays 0 (none); over IPv6 it is mandatory (RFC 8200), so inserting or stripping INT adjusts it
incrementally (RFC 1624) by the INT words and the length change, as fabric.p4 does — never over the payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sw.roce.wire.errors import BadLengthError, NotRoceError, TruncatedFrameError

DSCP_INT = 0x17
INT_SHIM_BYTES = 4
INT_MD_BYTES = 12
INT_HOP_BYTES = 28
INT_HOP_WORDS = INT_HOP_BYTES // 4
INT_ECHO_DOMAIN_ID = 0x4543  # "EC" in the MD header's domain-specific id: hops echoed back to the sender
INT_INSTRUCTIONS = 0xF500  # the bitmap fabric.p4 stamps: node id, ports, hop latency, queue, egress ts, tx bytes
INT_MD_VERSION = 2
MAX_INT_HOPS = 4  # the hop stack depth fabric.p4 parses
ETH_BYTES = 14
IPV4_BYTES = 20
IPV6_BYTES = 40
UDP_BYTES = 8

_HOP = struct.Struct(">IHHIBBHQI")  # node, in port, out port, latency, qid, occupancy (24 bit = B + H), ts, tx


@dataclass(frozen=True, slots=True)
class IntHopRecord:
    """One switch's metadata as carried on the wire (units as the switch writes them)."""

    node_id: int
    ingress_port: int
    egress_port: int
    hop_latency: int
    queue_id: int
    queue_occupancy: int
    egress_timestamp: int
    egress_tx_bytes: int


class IntHops(list[IntHopRecord]):
    """Hop records of one INT stack, newest first; ``echoed`` when an ACK carries them back to the sender."""

    echoed: bool = False


def _is_ipv4_udp(frame: bytes | memoryview) -> bool:
    return (len(frame) >= ETH_BYTES + IPV4_BYTES and frame[12] == 0x08 and frame[13] == 0x00
            and frame[ETH_BYTES + 9] == 17)


def _is_ipv6_udp(frame: bytes | memoryview) -> bool:
    return (len(frame) >= ETH_BYTES + IPV6_BYTES and frame[12] == 0x86 and frame[13] == 0xDD
            and frame[ETH_BYTES + 6] == 17)


def _ipv6_dscp(frame: bytes | memoryview) -> int:
    """The DSCP of an IPv6 frame: the upper 6 bits of the traffic class (bits 4..11 of the header)."""
    return ((frame[ETH_BYTES] & 0x0F) << 2) | (frame[ETH_BYTES + 1] >> 6)


def carries_int(frame: bytes | memoryview) -> bool:
    """True when an IPv4/UDP or IPv6/UDP frame is marked as carrying INT (DSCP = DSCP_INT)."""
    if _is_ipv4_udp(frame):
        return (frame[ETH_BYTES + 1] >> 2) == DSCP_INT
    return _is_ipv6_udp(frame) and _ipv6_dscp(frame) == DSCP_INT


def _ip_header_bytes(frame: bytes | memoryview) -> int:
    """The IP header length of an IPv4 (IHL) or IPv6 (fixed 40 B, no extension headers: next header is UDP) frame."""
    return (frame[ETH_BYTES] & 0x0F) * 4 if frame[12] == 0x08 else IPV6_BYTES


def _udp6_checksum_adjust(udp: bytearray, delta_words: int) -> None:
    """Add ``delta_words`` (a signed sum of 16-bit words) to an IPv6 UDP header's checksum (RFC 1624); 0 = none."""
    csum = struct.unpack_from(">H", udp, 6)[0]
    if csum == 0:
        return  # the sender sent no checksum: nothing to keep right
    total = ((csum ^ 0xFFFF) + delta_words) % 0xFFFF
    struct.pack_into(">H", udp, 6, 0xFFFF - total if total else 0xFFFF)


def _set_ip_fields(ip: bytearray, dscp: int, delta_bytes: int) -> None:
    """Rewrite the DSCP and grow the length of an IPv4 (checksum too) or IPv6 header by ``delta_bytes``."""
    if len(ip) == IPV6_BYTES:
        ip[0] = (ip[0] & 0xF0) | (dscp >> 2)
        ip[1] = ((dscp & 0x03) << 6) | (ip[1] & 0x3F)
        struct.pack_into(">H", ip, 4, struct.unpack_from(">H", ip, 4)[0] + delta_bytes)
        return
    ip[1] = (dscp << 2) | (ip[1] & 0x03)
    struct.pack_into(">H", ip, 2, struct.unpack_from(">H", ip, 2)[0] + delta_bytes)
    struct.pack_into(">H", ip, 10, 0)
    struct.pack_into(">H", ip, 10, ipv4_checksum(ip))


def _words_sum(data: bytes | bytearray | memoryview) -> int:
    """The 16-bit words of ``data`` (even length) summed modulo 0xFFFF (2**16 == 1 mod 0xFFFF)."""
    return int.from_bytes(data, "big") % 0xFFFF


def _ip_udp_lengths(frame: bytes | memoryview, ip_bytes: int) -> tuple[int, int]:
    """The bytes the IP header announces after the Ethernet header (IPv4 total length, or 40 + IPv6 payload
    length) and the UDP length."""
    ip_len = struct.unpack_from(">H", frame, ETH_BYTES + 2)[0] if ip_bytes != IPV6_BYTES else \
        IPV6_BYTES + struct.unpack_from(">H", frame, ETH_BYTES + 4)[0]
    return ip_len, struct.unpack_from(">H", frame, ETH_BYTES + ip_bytes + 4)[0]


def parse_int(frame: bytes | memoryview) -> tuple[list[IntHopRecord], int, int]:
    """The hop records (newest first), the INT length in bytes and the original DSCP of an INT frame.

    Raises a ``RoceFormatError`` unless the frame, its IP length and its UDP length all hold the whole stack
    of whole 7-word hops (so ``strip_int`` can take it out)."""
    if not carries_int(frame):
        raise NotRoceError("frame is not an IPv4/IPv6 UDP packet marked with the INT DSCP", ETH_BYTES + 1)
    ip_bytes = _ip_header_bytes(frame)
    if ip_bytes < IPV4_BYTES:
        raise BadLengthError(f"IPv4 header length {ip_bytes} < {IPV4_BYTES}", ETH_BYTES)
    shim = ETH_BYTES + ip_bytes + UDP_BYTES
    if len(frame) < shim + INT_SHIM_BYTES + INT_MD_BYTES:
        raise TruncatedFrameError("frame ends inside the INT shim/MD header", len(frame))
    int_bytes = frame[shim + 1] * 4
    orig_dscp = frame[shim + 2] & 0x3F
    hop_words = frame[shim + 4 + 2] & 0x1F
    stack_bytes = int_bytes - INT_SHIM_BYTES - INT_MD_BYTES
    if stack_bytes < 0:
        raise BadLengthError(f"INT length {int_bytes} B is shorter than its shim and MD header", shim + 1)
    if stack_bytes and hop_words != INT_HOP_WORDS:
        raise BadLengthError(f"INT hop length {hop_words} words: only {INT_HOP_WORDS} is understood", shim + 6)
    if stack_bytes % INT_HOP_BYTES:
        raise BadLengthError(f"INT length {int_bytes} B does not hold whole {hop_words}-word hops", shim + 1)
    if len(frame) < shim + int_bytes:
        raise TruncatedFrameError(f"frame ends inside the INT stack ({int_bytes} B announced)", len(frame))
    ip_len, udp_len = _ip_udp_lengths(frame, ip_bytes)
    if ip_len < ip_bytes + UDP_BYTES + int_bytes:
        raise BadLengthError(f"IP length {ip_len} does not hold the headers and the {int_bytes}-byte INT stack",
                             ETH_BYTES + (4 if ip_bytes == IPV6_BYTES else 2))
    if udp_len < UDP_BYTES + int_bytes:
        raise BadLengthError(f"UDP length {udp_len} does not hold the {int_bytes}-byte INT stack",
                             ETH_BYTES + ip_bytes + 4)
    hops = []
    for off in range(shim + INT_SHIM_BYTES + INT_MD_BYTES, shim + int_bytes, INT_HOP_BYTES):
        node, inp, outp, lat, qid, occ_hi, occ_lo, ts, tx = _HOP.unpack_from(frame, off)
        hops.append(IntHopRecord(node, inp, outp, lat, qid, (occ_hi << 16) | occ_lo, ts, tx))
    return hops, int_bytes, orig_dscp


def strip_int(frame: bytes | memoryview) -> tuple[bytes, IntHops]:
    """The original frame without INT (DSCP, IP length, IPv4 header or IPv6 UDP checksum and UDP length restored)
    and the hops."""
    records, int_bytes, orig_dscp = parse_int(frame)
    ip_bytes = _ip_header_bytes(frame)
    shim = ETH_BYTES + ip_bytes + UDP_BYTES
    hops = IntHops(records)
    hops.echoed = struct.unpack_from(">H", frame, shim + INT_SHIM_BYTES + 6)[0] == INT_ECHO_DOMAIN_ID
    ip = bytearray(frame[ETH_BYTES:ETH_BYTES + ip_bytes])
    _set_ip_fields(ip, orig_dscp, -int_bytes)
    udp = bytearray(frame[ETH_BYTES + ip_bytes:shim])
    struct.pack_into(">H", udp, 4, struct.unpack_from(">H", udp, 4)[0] - int_bytes)
    if ip_bytes == IPV6_BYTES:  # the UDP length counts twice (pseudo-header and header)
        _udp6_checksum_adjust(udp, -_words_sum(frame[shim:shim + int_bytes]) - 2 * int_bytes)
    out = bytes(frame[:ETH_BYTES]) + bytes(ip) + bytes(udp) + bytes(frame[shim + int_bytes:])
    return out, hops


def insert_int(
    frame: bytes | memoryview, hops: list[IntHopRecord], *, echo: bool = True, remaining_hop_cnt: int = 0
) -> bytes:
    """Inverse of ``strip_int``: ``frame`` (IPv4 or IPv6 UDP, no INT) with an INT stack of ``hops`` after UDP.

    ``echo`` marks the stack as forward-path hops carried back (domain-specific id ``INT_ECHO_DOMAIN_ID``);
    ``remaining_hop_cnt`` = 0 keeps switches on the way from adding theirs."""
    if not (_is_ipv4_udp(frame) or _is_ipv6_udp(frame)):
        raise NotRoceError("INT goes into IPv4/UDP or IPv6/UDP frames only", 12)
    if carries_int(frame):
        raise BadLengthError("frame already carries INT", ETH_BYTES + 1)
    if len(hops) > MAX_INT_HOPS:
        raise BadLengthError(f"{len(hops)} INT hops: the fabric parses at most {MAX_INT_HOPS}", 0)
    ip_bytes = _ip_header_bytes(frame)
    shim = ETH_BYTES + ip_bytes + UDP_BYTES
    if len(frame) < shim:
        raise TruncatedFrameError("frame ends inside the UDP header", len(frame))
    int_bytes = INT_SHIM_BYTES + INT_MD_BYTES + INT_HOP_BYTES * len(hops)
    ip = bytearray(frame[ETH_BYTES:ETH_BYTES + ip_bytes])
    orig_dscp = _ipv6_dscp(frame) if ip_bytes == IPV6_BYTES else ip[1] >> 2
    _set_ip_fields(ip, DSCP_INT, int_bytes)
    udp = bytearray(frame[ETH_BYTES + ip_bytes:shim])  # IPv4: checksum kept, RoCEv2 sends 0 (none)
    struct.pack_into(">H", udp, 4, struct.unpack_from(">H", udp, 4)[0] + int_bytes)
    stack = bytearray(int_bytes)
    stack[0] = 1 << 4  # type 1 = INT-MD, npt 0: the original DSCP is kept in the shim
    stack[1] = int_bytes // 4
    stack[2] = orig_dscp
    struct.pack_into(">BBBBHHHH", stack, INT_SHIM_BYTES, INT_MD_VERSION << 4, 0, INT_HOP_WORDS, remaining_hop_cnt,
                     INT_INSTRUCTIONS, INT_ECHO_DOMAIN_ID if echo else 0, 0, 0)
    for i, h in enumerate(hops):
        _HOP.pack_into(stack, INT_SHIM_BYTES + INT_MD_BYTES + i * INT_HOP_BYTES, h.node_id, h.ingress_port,
                       h.egress_port, h.hop_latency, h.queue_id, h.queue_occupancy >> 16,
                       h.queue_occupancy & 0xFFFF, h.egress_timestamp, h.egress_tx_bytes)
    if ip_bytes == IPV6_BYTES:
        _udp6_checksum_adjust(udp, _words_sum(stack) + 2 * int_bytes)
    return bytes(frame[:ETH_BYTES]) + bytes(ip) + bytes(udp) + bytes(stack) + bytes(frame[shim:])


def ipv4_checksum(header: bytes | bytearray) -> int:
    """The checksum field value of an IPv4 header whose checksum field is 0."""
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
