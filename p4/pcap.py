"""Minimal pcap (libpcap classic format) reader and writer: fast, no dependencies, Wireshark-compatible."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from p4.errors import P4Error

LINKTYPE_ETHERNET = 1
_MAGIC_US, _MAGIC_NS = 0xA1B2C3D4, 0xA1B23C4D


def read_pcap(path: str | Path) -> Iterator[tuple[float, bytes]]:
    """Yield (timestamp_s, frame) from a classic pcap file (either byte order, µs or ns resolution)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise P4Error(f"cannot read pcap {path}: {exc.strerror}") from None
    if len(data) < 24:
        raise P4Error(f"{path}: not a pcap file (too short)")
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", data[:4])[0]
        if magic in (_MAGIC_US, _MAGIC_NS):
            break
    else:
        raise P4Error(f"{path}: not a classic pcap file (pcapng is not supported; convert with "
                      "'editcap -F pcap IN OUT')")
    scale = 1e-9 if magic == _MAGIC_NS else 1e-6
    rec = struct.Struct(endian + "IIII")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = rec.unpack_from(data, off)
        off += 16
        if off + incl > len(data):
            raise P4Error(f"{path}: truncated record at byte {off - 16}")
        yield sec + frac * scale, data[off : off + incl]
        off += incl


class PcapWriter:
    """Append frames to a classic little-endian µs pcap (Ethernet link type)."""

    def __init__(self, path: str | Path, snaplen: int = 262144) -> None:
        self._f = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._f.write(struct.pack("<IHHiIII", _MAGIC_US, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))

    def write(self, frame: bytes, ts_s: float = 0.0) -> None:
        sec = int(ts_s)
        usec = int(round((ts_s - sec) * 1e6))
        if usec >= 1_000_000:
            sec, usec = sec + 1, usec - 1_000_000
        self._f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
        self._f.write(frame)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_pcap(path: str | Path, frames: list[tuple[float, bytes]]) -> None:
    with PcapWriter(path) as w:
        for ts, frame in frames:
            w.write(frame, ts)
