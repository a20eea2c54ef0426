"""The one pcap reader/writer of the project: classic pcap out (Ethernet link type), classic pcap or pcapng in.

Timestamps are integer nanoseconds everywhere in the API; a file's resolution (µs or ns) is chosen when writing
(``resolution="us"``: microseconds rounded to nearest, libpcap's default magic) and is converted when reading.
A leaf: no dependencies, Wireshark/tshark open the files.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Literal

LINKTYPE_ETHERNET = 1
SNAPLEN_BYTES = 262144
MAGIC_US, MAGIC_NS = 0xA1B2C3D4, 0xA1B23C4D
_PCAPNG_BYTE_ORDER = b"\x4d\x3c\x2b\x1a"
_NS_PER_S = 1_000_000_000

Resolution = Literal["us", "ns"]


class PcapFormatError(ValueError):
    """A capture that cannot be read: not pcap/pcapng, truncated or corrupt (the message names the file)."""

    is_user_error = True


class PcapWriter:
    """Appends frames to one classic little-endian pcap; buffered, flushed on ``flush()``/``close()``."""

    def __init__(self, path: str | Path, *, resolution: Resolution = "ns", snaplen: int = SNAPLEN_BYTES,
                 buffering: int = 1 << 16) -> None:
        self.path = Path(path)
        self._ns = resolution == "ns"
        self._f: BinaryIO = open(self.path, "wb", buffering=buffering)
        magic = MAGIC_NS if self._ns else MAGIC_US
        self._f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self.frames = 0

    def write(self, frame: bytes, timestamp_ns: int) -> None:
        if self._ns:
            sec, frac = divmod(timestamp_ns, _NS_PER_S)
        else:
            sec, frac = divmod((timestamp_ns + 500) // 1000, 1_000_000)
        n = len(frame)
        self._f.write(struct.pack("<IIII", sec, frac, n, n))
        self._f.write(frame)
        self.frames += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_pcap(path: str | Path, records: Iterable[tuple[int, bytes]], *, resolution: Resolution = "us",
               snaplen: int = SNAPLEN_BYTES) -> None:
    """Write ``(timestamp_ns, frame)`` records to a new classic pcap file."""
    with PcapWriter(path, resolution=resolution, snaplen=snaplen) as w:
        for ts_ns, frame in records:
            w.write(frame, ts_ns)


def read_pcap(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(timestamp_ns, frame)`` from a classic pcap (either byte order, µs or ns) or a pcapng file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PcapFormatError(f"cannot read pcap {path}: {exc.strerror}") from None
    if len(data) < 24:
        raise PcapFormatError(f"{path}: not a pcap file (too short)")
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        yield from _read_pcapng(data, str(path))
        return
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", data[:4])[0]
        if magic in (MAGIC_US, MAGIC_NS):
            break
    else:
        raise PcapFormatError(f"{path}: not a pcap or pcapng file")
    frac_ns = 1 if magic == MAGIC_NS else 1000
    rec = struct.Struct(endian + "IIII")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = rec.unpack_from(data, off)
        off += 16
        if off + incl > len(data):
            raise PcapFormatError(f"{path}: truncated record at byte {off - 16}")
        yield sec * _NS_PER_S + frac * frac_ns, data[off : off + incl]
        off += incl


def _ticks_to_ns(ticks: int, tsresol: int) -> int:
    """pcapng ``if_tsresol``: bit 7 set = 2^-n s per tick, else 10^-n s per tick."""
    n = tsresol & 0x7F
    if tsresol & 0x80:
        return (ticks * _NS_PER_S) >> n
    return ticks * 10 ** (9 - n) if n <= 9 else ticks // 10 ** (n - 9)


def _read_pcapng(data: bytes, path: str) -> Iterator[tuple[int, bytes]]:
    """Enhanced/simple packet blocks of a pcapng file (timestamps per interface resolution).

    A block whose length is not a multiple of 4, runs past the file, or is too short for its own header or the
    packet it claims is one ``PcapFormatError`` naming the block's byte offset."""
    endian = "<" if data[8:12] == _PCAPNG_BYTE_ORDER else ">"
    off = 0
    resolutions: list[int] = []
    while off + 12 <= len(data):
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4 or off + blen > len(data):
            raise PcapFormatError(f"{path}: corrupt pcapng block at byte {off} (length {blen})")
        body = data[off + 8 : off + blen - 4]

        if btype == 0x0A0D0D0A:                       # section header: may switch byte order
            _need(path, off, body, 4, "section header")
            endian = "<" if body[:4] == _PCAPNG_BYTE_ORDER else ">"
            resolutions = []
        elif btype == 1:                              # interface description
            _need(path, off, body, 8, "interface description")
            res = 6
            opt = 8
            while opt + 4 <= len(body):
                code, olen = struct.unpack_from(endian + "HH", body, opt)
                if code == 0:
                    break
                _need(path, off, body, opt + 4 + olen, f"option {code}")
                if code == 9 and olen >= 1:           # if_tsresol
                    res = body[opt + 4]
                opt += 4 + ((olen + 3) & ~3)
            resolutions.append(res)
        elif btype == 6:                              # enhanced packet
            _need(path, off, body, 20, "enhanced packet header")
            iface, ts_hi, ts_lo, caplen, _orig = struct.unpack_from(endian + "IIIII", body, 0)
            _need(path, off, body, 20 + caplen, f"a {caplen}-byte packet")
            res = resolutions[iface] if iface < len(resolutions) else 6
            yield _ticks_to_ns((ts_hi << 32) | ts_lo, res), body[20 : 20 + caplen]
        elif btype == 3:                              # simple packet
            _need(path, off, body, 4, "simple packet header")
            (orig,) = struct.unpack_from(endian + "I", body, 0)
            yield 0, body[4 : 4 + orig]
        off += blen


def _need(path: str, off: int, body: bytes, n: int, what: str) -> None:
    if len(body) < n:
        raise PcapFormatError(f"{path}: corrupt pcapng block at byte {off}: {what} needs {n} bytes, the block "
                              f"holds {len(body)}")
