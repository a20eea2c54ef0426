"""The `starpulse p4` contract: check exit codes and messages, sim writes port<N>.pcap + drops.txt."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, raw
from scapy.utils import wrpcap

from sw.cli import main

pytestmark = pytest.mark.unit
PROGRAMS = Path(__file__).resolve().parents[3] / "p4" / "programs"


def test_check_ok_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "check", str(PROGRAMS / "basic.p4")]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("edit, message, col", [
    (("hdr.ipv4.ttl - 1;", "hdr.ipv4.tll - 1;"), "unknown field 'tll' in header ipv4_t", 33),
    (("hdr.ipv4.ttl - 1;", "hdr.ipv4.srcAddr;"), "cannot assign a value of type bit<32> to bit<8>", 24),
    (("hdr.ipv4.ttl - 1;", "hdr.ipv4.ttl - 1"), "syntax error at '}'", 5),
    (("mark_to_drop(standard_metadata);", "mark_to_dorp(standard_metadata);"),
     "unknown function or action 'mark_to_dorp'", 9),
    (("ipv4_lpm.apply();", "ipv4_lmp.apply();"), "unknown name 'ipv4_lmp'", 13),
])
def test_check_errors_exit_2_with_position_and_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     edit: tuple[str, str], message: str, col: int) -> None:
    src = (PROGRAMS / "basic.p4").read_text()
    assert edit[0] in src
    bad = tmp_path / "bad.p4"
    bad.write_text(src.replace(edit[0], edit[1], 1))
    assert main(["p4", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    first, text, caret = err.splitlines()[:3]
    assert first.startswith(f"{bad}:") and message in first
    line_no = int(first.split(":")[1])
    assert int(first.split(":")[2]) == col
    assert text == bad.read_text().splitlines()[line_no - 1]
    assert caret == " " * (col - 1) + "^"
    assert "Traceback" not in err


def test_check_missing_include_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "inc.p4"
    bad.write_text('#include <core.p4>\n#include "nothere.p4"\n')
    assert main(["p4", "check", str(bad)]) == 2
    assert f"{bad}:2:1: error: include file 'nothere.p4' not found" in capsys.readouterr().err
    assert main(["p4", "check", str(tmp_path / "missing.p4")]) == 2
    assert "no such file" in capsys.readouterr().err


def _frames() -> tuple[list[Ether], list[Ether]]:
    h1 = [Ether(src="00:00:00:00:01:01", dst="00:00:00:00:00:01") /
          IP(src="10.0.1.1", dst="10.0.2.2") / UDP(sport=1000 + i, dport=9) / Raw(b"a" * 20) for i in range(5)]
    h2 = [Ether(src="00:00:00:00:02:02", dst="00:00:00:00:00:01") /
          IP(src="10.0.2.2", dst=d) / UDP(sport=2000 + i, dport=9) / Raw(b"b" * 20)
          for i, d in enumerate(["10.0.1.1", "192.168.1.1", "10.0.1.1"])]
    for i, p in enumerate(h1):
        p.time = 1.0 + i          # 1, 2, 3, 4, 5
    for i, p in enumerate(h2):
        p.time = 1.5 + i          # 1.5, 2.5, 3.5
    return h1, h2


def test_sim_writes_port_pcaps_in_timestamp_order_and_drops(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    h1, h2 = _frames()
    wrpcap(str(tmp_path / "h1.pcap"), h1)
    wrpcap(str(tmp_path / "h2.pcap"), h2)
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.1.1/32 => 00:00:00:00:01:01 1\n"
                    "table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 00:00:00:00:02:02 2\n")
    out = tmp_path / "out"
    rc = main(["p4", "sim", str(PROGRAMS / "basic.p4"), "--commands", str(cmds),
               "--in", f"1:{tmp_path / 'h1.pcap'}", "--in", f"2:{tmp_path / 'h2.pcap'}", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["drops.txt", "port1.pcap", "port2.pcap"]
    drops = (out / "drops.txt").read_text()
    assert "packets_in 8" in drops and "dropped_total 1" in drops
    from scapy.utils import rdpcap
    p2 = rdpcap(str(out / "port2.pcap"))
    assert [int(p[UDP].sport) for p in p2] == [1000 + i for i in range(5)]
    assert all(p[IP].ttl == 63 and p[Ether].dst == "00:00:00:00:02:02" for p in p2)
    p1 = rdpcap(str(out / "port1.pcap"))
    assert [int(p[UDP].sport) for p in p1] == [2000, 2002]
    assert [float(p.time) for p in p1] == [1.5, 3.5]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_sim_output_is_valid_for_tshark_with_good_checksums(tmp_path: Path) -> None:
    h1, _ = _frames()
    wrpcap(str(tmp_path / "h1.pcap"), h1)
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("table_add ipv4_lpm ipv4_forward 10.0.2.2/32 => 00:00:00:00:02:02 2\n")
    assert main(["p4", "sim", str(PROGRAMS / "basic.p4"), "--commands", str(cmds),
                 "--in", f"1:{tmp_path / 'h1.pcap'}", "--out", str(tmp_path / "o")]) == 0
    res = subprocess.run(["tshark", "-r", str(tmp_path / "o" / "port2.pcap"), "-o", "ip.check_checksum:TRUE",
                          "-T", "fields", "-e", "ip.ttl", "-e", "ip.checksum.status", "-e", "eth.dst"],
                         capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split("\t") for line in res.stdout.strip().splitlines()]
    assert len(rows) == 5
    assert all(r == ["63", "1", "00:00:00:00:02:02"] for r in rows), rows  # status 1 = "Good"


def test_sim_bad_commands_and_inputs_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h1, _ = _frames()
    wrpcap(str(tmp_path / "h1.pcap"), h1)
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("\n\ntable_add ipv4_lpm ipv4_forward 10.0.2.2/33 => 00:00:00:00:02:02 2\n")
    args = ["p4", "sim", str(PROGRAMS / "basic.p4"), "--in", f"1:{tmp_path / 'h1.pcap'}", "--out",
            str(tmp_path / "o")]
    assert main([*args, "--commands", str(cmds)]) == 2
    assert f"{cmds}:3: table_add: match field hdr.ipv4.dstAddr: prefix length 33 out of range 0..32" \
        in capsys.readouterr().err
    assert main(["p4", "sim", str(PROGRAMS / "basic.p4"), "--in", "x:y.pcap", "--out", str(tmp_path)]) == 2
    assert "--in 'x:y.pcap': port 'x' is not a number" in capsys.readouterr().err


def test_bench_prints_packets_per_second(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "bench", str(PROGRAMS / "basic.p4"), "--packets", "2000", "--mode", "batch"]) == 0
    out = capsys.readouterr().out
    assert "packets/s" in out and "2000 forwarded)" in out


def test_pcapng_input_is_read_too(tmp_path: Path) -> None:
    from scapy.utils import PcapNgWriter

    from sw.units.pcap_file import read_pcap

    pkts = [Ether() / IP(dst="10.0.2.2") / UDP(sport=i) / Raw(b"n") for i in range(3)]
    for i, p in enumerate(pkts):
        p.time = 10 + i / 4
    with PcapNgWriter(str(tmp_path / "in.pcapng")) as w:
        for p in pkts:
            w.write(p)
    got = list(read_pcap(tmp_path / "in.pcapng"))
    assert [f for _, f in got] == [raw(p) for p in pkts]
    assert [t for t, _ in got] == [10_000_000_000, 10_250_000_000, 10_500_000_000]
