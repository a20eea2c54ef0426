"""Property-based fuzzing of the pcap/pcapng reader (sw/units/pcap_file.py): files mutated from real ones give
frames or one format error naming the file, never another exception. Bounded by max_examples."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import PcapNgWriter

from sw.units.pcap_file import PcapFormatError, read_pcap, write_pcap

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FUZZ = settings(max_examples=300, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
TRIED = {"files": 0, "frames": 0, "errors": 0}
_FRAMES = [bytes(Ether() / IP(dst=f"10.0.0.{i}") / UDP(sport=i) / bytes(i * 7)) for i in range(1, 6)]


def _originals() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        pcap, pcapng = Path(d) / "a.pcap", Path(d) / "a.pcapng"
        write_pcap(pcap, [(1_500_000_000 + i * 1_000_000_000, f) for i, f in enumerate(_FRAMES)])
        w = PcapNgWriter(str(pcapng))
        for i, f in enumerate(_FRAMES):
            p = Ether(f)
            p.time = 10 + i / 4
            w.write(p)
        w.close()
        big_endian = bytearray(pcap.read_bytes())          # the same capture in the other byte order
        big_endian[0:24] = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
        off = 24
        while off < len(big_endian):
            sec, usec, incl, orig = struct.unpack_from("<IIII", big_endian, off)
            big_endian[off : off + 16] = struct.pack(">IIII", sec, usec, incl, orig)
            off += 16 + incl
        return {"pcap": pcap.read_bytes(), "pcapng": pcapng.read_bytes(), "pcap_be": bytes(big_endian)}


def _length_fields(data: bytes) -> list[tuple[int, str]]:
    """(offset, struct format) of every length field of a capture: the places a short or long value hurts."""
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        out, off = [], 0
        while off + 12 <= len(data):
            btype, blen = struct.unpack_from("<II", data, off)
            out.append((off + 4, "<I"))
            out.append((off + blen - 4, "<I"))
            if btype == 6:
                out.append((off + 20, "<I"))                 # captured length
            elif btype == 1:
                out.append((off + 18, "<H"))                 # first option's length
            off += blen
        return out
    endian = "<" if data[:4] == struct.pack("<I", 0xA1B2C3D4) else ">"
    out, off = [], 24
    while off + 16 <= len(data):
        out.append((off + 8, endian + "I"))
        off += 16 + struct.unpack_from(endian + "I", data, off + 8)[0]
    return out


ORIGINALS = _originals()
LENGTHS = {name: _length_fields(data) for name, data in ORIGINALS.items()}
_U32 = [0, 1, 11, 12, 13, 16, 20, 0x7FFFFFFF, 0xFFFFFFFF, 0x0A0D0D0A, 0x1A2B3C4D, 0xA1B2C3D4]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(sorted(ORIGINALS)))
    data = bytearray(ORIGINALS[name])
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["truncate", "flip", "u32", "insert", "delete", "length", "length"]))
        if kind == "length":                               # a length field (of the original layout) set wrong
            off, fmt = draw(st.sampled_from(LENGTHS[name]))
            value = draw(st.sampled_from([0, 1, 4, 8, 11, 12, 13, 16, 20, 24, 28, 0xFFFF, 0xFFFFFFFF]))
            data[off : off + struct.calcsize(fmt)] = struct.pack(fmt, value & (0xFFFF if fmt[-1] == "H" else ~0))
        elif kind == "truncate":
            del data[at:]
        elif kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "u32":
            at -= at % 4
            data[at : at + 4] = struct.pack(draw(st.sampled_from(["<I", ">I"])), draw(st.sampled_from(_U32)))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[at : at + draw(st.integers(1, 40))]
    return bytes(data)


@FUZZ
@given(_mutated())
def test_mutated_captures_give_frames_or_one_format_error(data: bytes) -> None:
    TRIED["files"] += 1
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.pcap"
        path.write_bytes(data)
        try:
            frames = list(read_pcap(path))
        except PcapFormatError as exc:
            TRIED["errors"] += 1
            assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
            return
    for ts, frame in frames:
        assert isinstance(ts, int) and isinstance(frame, bytes)
    TRIED["frames"] += len(frames)


def test_originals_read_back_exactly() -> None:
    for name, data in ORIGINALS.items():
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / name
            path.write_bytes(data)
            assert [f for _, f in read_pcap(path)] == _FRAMES, name


def test_fuzz_counts() -> None:
    """Runs after the fuzzer in this module: it tried what it claims (printed with -s for the record)."""
    print(f"\npcap fuzz: {TRIED['files']} mutated files ({TRIED['errors']} format errors), "
          f"{TRIED['frames']} frames read")
    if TRIED["files"]:
        assert TRIED["files"] >= FUZZ.max_examples and 0 < TRIED["errors"] < TRIED["files"]
