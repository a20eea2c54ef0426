"""Invariant CRC of RoCEv2 (IBTA annex A17.3.3): CRC-32 over a masked copy of IP/UDP/BTH and the payload.

The CRC runs over 8 bytes of 1s (standing in for the LRH RoCEv2 lacks), then the IP header, UDP header, BTH
and everything up to the ICRC, with the fields routers may change masked to 1s: IPv4 TOS (DSCP+ECN), TTL and
header checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum; the BTH resv8a byte (which
holds FECN/BECN).  The CRC is the Ethernet CRC-32 (zlib.crc32); it goes on the wire least significant byte
first.
"""

from __future__ import annotations

import zlib

from sw.roce.wire.errors import BadVersionError, NotRoceError, TruncatedFrameError

PSEUDO_LRH = b"\xff" * 8
UDP_BYTES = 8
BTH_RESV8A_OFFSET = 4  # byte of the BTH holding FECN, BECN and 6 reserved bits


def masked_headers(l3: bytes | bytearray | memoryview) -> tuple[bytearray, int]:
    """Masked copy of the IP, UDP and BTH headers of IP packet ``l3``, and the offset where the BTH ends."""
    if len(l3) < 1:
        raise TruncatedFrameError("empty IP packet", 0)
    version = l3[0] >> 4
    if version == 4:
        ihl_bytes = (l3[0] & 0x0F) * 4
        end = ihl_bytes + UDP_BYTES + 12
        if len(l3) < end:
            raise TruncatedFrameError(f"IPv4/UDP/BTH headers need {end} bytes, packet has {len(l3)}", len(l3))
        hdr = bytearray(l3[:end])
        hdr[1] = 0xFF  # TOS: DSCP + ECN
        hdr[8] = 0xFF  # TTL
        hdr[10:12] = b"\xff\xff"  # header checksum
    elif version == 6:
        ihl_bytes = 40
        end = ihl_bytes + UDP_BYTES + 12
        if len(l3) < end:
            raise TruncatedFrameError(f"IPv6/UDP/BTH headers need {end} bytes, packet has {len(l3)}", len(l3))
        if l3[6] != 17:
            raise NotRoceError(f"IPv6 next header {l3[6]} is not UDP (17)", 6)
        hdr = bytearray(l3[:end])
        hdr[0] |= 0x0F  # traffic class (high nibble) ...
        hdr[1:4] = b"\xff\xff\xff"  # ... traffic class (low nibble) and flow label
        hdr[7] = 0xFF  # hop limit
    else:
        raise BadVersionError(f"IP version {version} is neither 4 nor 6", 0)
    udp = ihl_bytes
    hdr[udp + 6 : udp + 8] = b"\xff\xff"  # UDP checksum
    hdr[udp + UDP_BYTES + BTH_RESV8A_OFFSET] = 0xFF
    return hdr, end


def icrc(l3: bytes | bytearray | memoryview) -> int:
    """ICRC of an IP packet whose last 4 bytes are the ICRC slot (their content is ignored)."""
    hdr, end = masked_headers(l3)
    crc = zlib.crc32(hdr, zlib.crc32(PSEUDO_LRH))
    return zlib.crc32(memoryview(l3)[end : len(l3) - 4], crc)


def icrc_bytes(value: int) -> bytes:
    """The 4 wire bytes of an ICRC value (least significant byte first, as NICs send it)."""
    return value.to_bytes(4, "little")


def wire_icrc(l3: bytes | bytearray | memoryview) -> int:
    """The ICRC value carried in the last 4 bytes of an IP packet."""
    return int.from_bytes(bytes(l3[len(l3) - 4 :]), "little")
