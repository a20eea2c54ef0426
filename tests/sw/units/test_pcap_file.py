"""sw.units.pcap_file: ns timestamps in and out at either file resolution, and one error for unreadable files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sw.units.pcap_file import MAGIC_NS, MAGIC_US, PcapFormatError, PcapWriter, read_pcap, write_pcap

pytestmark = pytest.mark.unit

FRAMES = [bytes(range(i, i + 60)) for i in range(3)]


def test_ns_file_keeps_every_nanosecond(tmp_path: Path) -> None:
    times = [1_700_000_000_123_456_789 + i * 777 for i in range(3)]
    with PcapWriter(tmp_path / "a.pcap") as w:
        for t, f in zip(times, FRAMES, strict=True):
            w.write(f, t)
    assert struct.unpack("<I", (tmp_path / "a.pcap").read_bytes()[:4])[0] == MAGIC_NS
    assert list(read_pcap(tmp_path / "a.pcap")) == list(zip(times, FRAMES, strict=True))


def test_us_file_rounds_to_the_nearest_microsecond(tmp_path: Path) -> None:
    write_pcap(tmp_path / "b.pcap", [(1_000_499, FRAMES[0]), (1_000_500, FRAMES[1]), (2_999_999_999, FRAMES[2])])
    assert struct.unpack("<I", (tmp_path / "b.pcap").read_bytes()[:4])[0] == MAGIC_US
    assert [t for t, _ in read_pcap(tmp_path / "b.pcap")] == [1_000_000, 1_001_000, 3_000_000_000]


def test_unreadable_files_are_one_format_error(tmp_path: Path) -> None:
    (tmp_path / "short.pcap").write_bytes(b"\xd4\xc3\xb2\xa1")
    with pytest.raises(PcapFormatError, match="too short"):
        list(read_pcap(tmp_path / "short.pcap"))
    with pytest.raises(PcapFormatError, match="cannot read pcap"):
        list(read_pcap(tmp_path / "missing.pcap"))
