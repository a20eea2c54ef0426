"""Hash and checksum algorithms of BMv2 simple_switch (crc16, crc32, csum16, xor16, identity).

Inputs are the big-endian concatenation of the fields (``value`` as an int of ``nbits`` bits, padded with
zero bits at the end to a whole number of bytes, as BMv2 serialises field lists).
"""

from __future__ import annotations

import zlib

from sw.units.crc16 import crc16  # the one CRC-16 (a leaf; the flow-level simulator hashes ECMP with it)


def to_bytes(value: int, nbits: int) -> bytes:
    """Field-list bits, left-aligned in whole bytes."""
    nbytes = (nbits + 7) // 8
    return (value << (nbytes * 8 - nbits)).to_bytes(nbytes, "big")


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def csum16(data: bytes) -> int:
    """RFC 1071 internet checksum (ones' complement of the ones' complement sum of 16-bit words)."""
    if len(data) % 2:
        data += b"\0"
    v = int.from_bytes(data, "big")
    return csum16_int(v)


def csum16_int(v: int) -> int:
    """Internet checksum of the 16-bit words of ``v`` (a multiple of 16 bits long): sum mod 0xFFFF trick."""
    if v == 0:
        return 0xFFFF
    r = v % 0xFFFF
    return 0 if r == 0 else 0xFFFF - r


def xor16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    r = 0
    for i in range(0, len(data), 2):
        r ^= (data[i] << 8) | data[i + 1]
    return r


def identity(data: bytes) -> int:
    """BMv2's identity: the first (up to) 8 bytes as a big-endian number."""
    return int.from_bytes(data[:8], "big")


HASHES = {"crc16": crc16, "crc32": crc32, "csum16": csum16, "xor16": xor16, "identity": identity}


def compute(algo: str, value: int, nbits: int) -> int:
    """Hash the field-list ``value`` of ``nbits`` bits with a v1model HashAlgorithm name."""
    fn = HASHES.get(algo)
    if fn is None:
        raise ValueError(f"hash algorithm {algo!r} is not supported (use one of {', '.join(HASHES)})")
    return fn(to_bytes(value, nbits))
