"""Hash and checksum algorithms of BMv2 simple_switch (crc16, crc32, csum16, xor16, identity).

Inputs are the big-endian concatenation of the fields (``value`` as an int of ``nbits`` bits, padded with
zero bits at the end to a whole number of bytes, as BMv2 serialises field lists).
"""

from __future__ import annotations

import zlib


def _crc16_table() -> list[int]:
    # CRC-16/ARC: polynomial 0x8005 reflected (0xA001), init 0, no final xor - BMv2's "crc16".
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC16 = _crc16_table()


def to_bytes(value: int, nbits: int) -> bytes:
    """Field-list bits, left-aligned in whole bytes."""
    nbytes = (nbits + 7) // 8
    return (value << (nbytes * 8 - nbits)).to_bytes(nbytes, "big")


def crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ _CRC16[(crc ^ b) & 0xFF]
    return crc


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
