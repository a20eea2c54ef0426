"""A minimal libpcap writer (nanosecond timestamps, Ethernet link type) for per-port captures Wireshark opens."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

PCAP_MAGIC_NS = 0xA1B23C4D          # libpcap magic for nanosecond-resolution timestamps
LINKTYPE_ETHERNET = 1
SNAPLEN_BYTES = 262144
_GLOBAL_HEADER = struct.pack("<IHHiIII", PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN_BYTES, LINKTYPE_ETHERNET)
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """Appends frames to one pcap file; buffered, flushed on ``flush()``/``close()`` (the switch flushes often)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._f: BinaryIO = open(self.path, "wb", buffering=1 << 16)  # noqa: SIM115 - closed by close()
        self._f.write(_GLOBAL_HEADER)
        self.frames = 0

    def write(self, frame: bytes, timestamp_ns: int) -> None:
        sec, nsec = divmod(timestamp_ns, 1_000_000_000)
        n = len(frame)
        self._f.write(_RECORD.pack(sec, nsec, n, n))
        self._f.write(frame)
        self.frames += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def read_pcap(path: str | Path) -> list[tuple[int, bytes]]:
    """(timestamp_ns, frame) of every record of a pcap written by any libpcap tool (µs or ns, either endian)."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap file (only {len(data)} bytes)")
    magic_le = struct.unpack("<I", data[:4])[0]
    magic_be = struct.unpack(">I", data[:4])[0]
    known = {0xA1B2C3D4: 1000, 0xA1B23C4D: 1}
    if magic_le in known:
        endian, scale = "<", known[magic_le]
    elif magic_be in known:
        endian, scale = ">", known[magic_be]
    else:
        raise ValueError(f"{path}: not a pcap file (magic {data[:4].hex()})")
    rec = struct.Struct(endian + "IIII")
    out: list[tuple[int, bytes]] = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = rec.unpack_from(data, off)
        off += 16
        out.append((sec * 1_000_000_000 + frac * scale, data[off:off + incl]))
        off += incl
    return out
