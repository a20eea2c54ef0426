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
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        yield from _read_pcapng(data, str(path))
        return
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", data[:4])[0]
        if magic in (_MAGIC_US, _MAGIC_NS):
            break
    else:
        raise P4Error(f"{path}: not a pcap or pcapng file")
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


def _read_pcapng(data: bytes, path: str) -> Iterator[tuple[float, bytes]]:
    """Enhanced/simple packet blocks of a pcapng file (timestamps per interface resolution).

    A block whose length is not a multiple of 4, runs past the file, or is too short for its own header or the
    packet it claims is one ``P4Error`` naming the block's byte offset."""
    endian = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    off = 0
    resolutions: list[float] = []
    while off + 12 <= len(data):
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4 or off + blen > len(data):
            raise P4Error(f"{path}: corrupt pcapng block at byte {off} (length {blen})")
        body = data[off + 8 : off + blen - 4]

        if btype == 0x0A0D0D0A:                       # section header: may switch byte order
            _need(path, off, body, 4, "section header")
            endian = "<" if body[:4] == b"\x4d\x3c\x2b\x1a" else ">"
            resolutions = []
        elif btype == 1:                              # interface description
            _need(path, off, body, 8, "interface description")
            res = 1e-6
            opt = 8
            while opt + 4 <= len(body):
                code, olen = struct.unpack_from(endian + "HH", body, opt)
                if code == 0:
                    break
                _need(path, off, body, opt + 4 + olen, f"option {code}")
                if code == 9 and olen >= 1:           # if_tsresol
                    v = body[opt + 4]
                    res = 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
                opt += 4 + ((olen + 3) & ~3)
            resolutions.append(res)
        elif btype == 6:                              # enhanced packet
            _need(path, off, body, 20, "enhanced packet header")
            iface, ts_hi, ts_lo, caplen, _orig = struct.unpack_from(endian + "IIIII", body, 0)
            _need(path, off, body, 20 + caplen, f"a {caplen}-byte packet")
            res = resolutions[iface] if iface < len(resolutions) else 1e-6
            yield ((ts_hi << 32) | ts_lo) * res, body[20 : 20 + caplen]
        elif btype == 3:                              # simple packet
            _need(path, off, body, 4, "simple packet header")
            (orig,) = struct.unpack_from(endian + "I", body, 0)
            yield 0.0, body[4 : 4 + orig]
        off += blen


def _need(path: str, off: int, body: bytes, n: int, what: str) -> None:
    if len(body) < n:
        raise P4Error(f"{path}: corrupt pcapng block at byte {off}: {what} needs {n} bytes, the block holds "
                      f"{len(body)}")


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
