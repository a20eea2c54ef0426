"""``starpulse fabric bench`` (issue 23, item 1) on a 2x2 fabric for a few seconds: the JSON's keys, packets
forwarded, and packet-hops that agree with the switches' counters and the NICs' own counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.emu
def test_fabric_bench_json_and_counters(tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    out = subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "bench", "--servers", "2", "--gpus-per-server",
                          "2", "--spines", "1", "--link-rate", "100M", "--time-dilation", "100", "--seconds", "2",
                          "--pattern", "all-to-all", "--json", "--plot", str(plot)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    for key in ("topology", "time_dilation", "nics", "pattern", "datapath", "offered_rate_bps", "wall_s", "sent_pkts",
                "delivered_pkts", "packet_hops", "hop_bytes", "forwarded_pkts_per_wall_s",
                "forwarded_bytes_per_wall_s", "cpu", "fidelity"):
        assert key in r, key
    assert set(r["cpu"]) == {"switches", "nics", "link_emulators", "collectives"}
    assert r["time_dilation"] == 100 and r["nics"] == 4 and r["fidelity"]["time_dilation"] == 100
    assert r["delivered_pkts"] > 0 and r["delivered_bad_icrc"] == 0
    # every frame crosses its leaf, cross-rail ones the spine and the other leaf too: at least one hop per frame
    # delivered, at most three per frame sent; what entered the switches and was not dropped left them
    assert r["delivered_pkts"] <= r["packet_hops"] <= 3 * r["sent_pkts"]
    assert r["packet_hops"] == r["switch_rx_pkts"] - r["queue_drop_pkts"] - r["pipeline_drop_pkts"]
    assert r["cpu"]["switches"]["processes"] == 3 and r["cpu"]["switches"]["cpu_s_per_m_packet_hops"] > 0
    assert r["cpu"]["nics"]["processes"] == 2 and r["cpu"]["nics"]["cpu_s"] > 0
    for c in r["cpu"].values():
        assert c["cpu_s"] == pytest.approx(c["user_s"] + c["system_s"], abs=2e-3)
    assert plot.stat().st_size > 1000


@pytest.mark.emu
def test_fabric_bench_bad_flag_is_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "bench", "--seconds", "0"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 2 and "--seconds" in out.stderr and "Traceback" not in out.stderr
    for argv, flag in ((["--backend", "bmv2"], "--backend bmv2"), (["--plot", "/nonexistent-dir/b.png"], "--plot")):
        out = subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "bench", "--time-dilation", "10", *argv],
                             capture_output=True, text=True, cwd=REPO, timeout=60)
        assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr, out.stderr
