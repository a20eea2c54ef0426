"""CRC-16 as BMv2 computes ``HashAlgorithm.crc16`` (CRC-16/ARC), the hash of fabric.p4's ECMP.

Part of the ``sw.units`` leaf, so that the P4 target (``p4.algorithms``), which may import only leaves, and the
flow-level simulator (``sw.sim``) both use this one definition, the simulator on columns of bytes of many keys
at once.
"""

from __future__ import annotations

from typing import Any


def _crc16_table() -> list[int]:
    # CRC-16/ARC: polynomial 0x8005 reflected (0xA001), init 0, no final xor - BMv2's "crc16".
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        table.append(c)
    return table


CRC16_TABLE: tuple[int, ...] = tuple(_crc16_table())


def crc16(data: Any, table: Any = CRC16_TABLE) -> Any:
    """CRC-16/ARC of ``data`` (bytes -> int).  Vectorised use: ``data`` a sequence of byte columns (numpy
    integer arrays, one per byte position of the keys) and ``table`` ``CRC16_TABLE`` as a numpy array."""
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc
