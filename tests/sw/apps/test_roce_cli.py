"""``starpulse roce``: pcap and bench sub-commands, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sw.cli import main
from sw.roce.wire.opcodes import LAYOUTS
from sw.roce.wire.sample_pcaps import pcap_name

pytestmark = pytest.mark.unit


def test_pcap_writes_one_file_per_opcode(tmp_path, capsys):
    outdir = tmp_path / "caps"
    assert main(["roce", "pcap", str(outdir)]) == 0
    names = sorted(p.name for p in outdir.iterdir())
    assert names == sorted(pcap_name(op) for op in LAYOUTS)
    assert "0x0a_RDMA_WRITE_ONLY.pcap" in names and "0x81_CNP.pcap" in names
    assert capsys.readouterr().out.count(".pcap") == len(LAYOUTS)


def test_pcap_onto_a_file_is_a_clean_error(tmp_path, capsys):
    target = tmp_path / "not_a_dir"
    target.write_text("x")
    assert main(["roce", "pcap", str(target)]) == 2
    err = capsys.readouterr().err
    assert "OUTDIR" in err and "not a directory" in err and "Traceback" not in err


def test_bench_prints_json_with_both_figures():
    out = subprocess.run([sys.executable, "-m", "sw.cli", "roce", "bench", "--seconds", "0.2", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["scapy_pps"] > 0 and result["template_pps"] > 0
    assert result["template_pps"] > result["scapy_pps"]
    assert result["payload_bytes"] == 1024 and result["ip_version"] == 4


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--seconds", "0"], "--seconds '0'"),
        (["--seconds", "soon"], "--seconds 'soon'"),
        (["--payload-bytes", "-5"], "--payload-bytes '-5'"),
        (["--opcode", "SEND_ALL"], "--opcode 'SEND_ALL'"),
        (["--opcode", "ACKNOWLEDGE"], "carries no payload"),
    ],
)
def test_bench_bad_flags_are_one_line_errors(argv, words, capsys):
    assert main(["roce", "bench", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_action_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["roce"])
    assert exc.value.code == 2
    assert "ACTION" in capsys.readouterr().err
