"""``scripts/ops_cost_bench.py`` (``starpulse ops cost``, issue 18 item 1): one pair on a tiny fabric writes JSON
with every run's figures and the summary's ratios; the summary's arithmetic; bad flags are one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sw.apps.ops_cost import FIGURES, summarize

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "ops_cost_bench.py")
RUN_KEYS = {"ops", "pair", "time_dilation", "step_s", "busbw_bps", "steps_per_net_s", "steps_per_wall_s",
            "job_wall_s", "switch_pkts", "switch_cpu_s", "switch_pkts_per_cpu_s", "ranks_cpu_s", "collector_cpu_s",
            "collector_polls", "store_rows", "store_bytes", "store_rows_per_s", "store_bytes_per_s", "fidelity",
            "load"}


@pytest.mark.emu
def test_one_pair_on_a_tiny_fabric_writes_the_json(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, SCRIPT, "--pairs", "1", "--steps", "1", "--servers", "2", "--gpus", "1",
                          "--spines", "1", "--time-dilation", "16", "--json", "--plot", str(tmp_path / "cost.png")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pair 1 ops off" in out.stderr and "pair 1 ops on" in out.stderr      # progress lines
    report = json.loads(out.stdout)
    runs = report["runs"]
    assert [r["ops"] for r in runs] == [False, True]                          # pair 1: off first
    for r in runs:
        assert RUN_KEYS <= r.keys(), RUN_KEYS - r.keys()
        assert r["time_dilation"] == 16.0 and r["busbw_bps"] > 0 and r["switch_pkts"] > 0
        assert {"ok", "worst_component", "late_share"} <= r["fidelity"].keys()
    off, on = runs
    assert off["collector_polls"] == 0 and off["store_rows"] == 0                # ops off: nothing recorded
    assert on["collector_polls"] > 0 and on["collector_cpu_s"] > 0
    assert on["store_rows"] >= 2 * 2 and on["store_bytes"] > 0                   # 2 ranks x (warm-up + 1) steps
    s = report["summary"]
    for key in FIGURES:
        assert s[key]["pair_ratios"] == [round(on[key] / off[key], 4)]
    assert s["cost"] == round(1 - s["busbw_bps"]["median_pair_ratio"], 4)
    assert report["load"]["start"].startswith("load average: ")
    assert (tmp_path / "cost.png").stat().st_size > 0


def _run(pair: int, ops: bool, busbw: float, ok: bool = True) -> dict:
    return {"pair": pair, "ops": ops, "busbw_bps": busbw, "steps_per_net_s": 10.0, "steps_per_wall_s": 1.0,
            "switch_pkts_per_cpu_s": 1000.0, "collector_cpu_s": 0.1, "job_wall_s": 10.0, "store_rows_per_s": 5.0,
            "store_bytes_per_s": 100.0, "fidelity": {"ok": ok}}


@pytest.mark.unit
def test_summary_ratios_spread_and_verdict() -> None:
    runs = [_run(1, False, 100), _run(1, True, 98), _run(2, True, 90), _run(2, False, 100),
            _run(3, False, 100), _run(3, True, 97)]
    s = summarize(runs)
    assert s["busbw_bps"]["pair_ratios"] == [0.98, 0.9, 0.97]
    assert s["busbw_bps"]["median_pair_ratio"] == 0.97 and s["busbw_bps"]["spread"] == 0.08
    assert s["cost"] == 0.03 and s["target_met"] is True and s["all_fidelity_ok"] is True
    assert s["collector_cpu_s_per_wall_s"] == 0.01
    worse = summarize([_run(1, False, 100), _run(1, True, 90, ok=False)])
    assert worse["cost"] == 0.1 and worse["target_met"] is False and worse["all_fidelity_ok"] is False


@pytest.mark.unit
def test_bad_flags_are_one_line() -> None:
    for argv, words in ((["--pairs", "0"], "--pairs"), (["--time-dilation", "auto"], "--time-dilation"),
                        (["--plot", "/nonexistent-dir/x.png"], "--plot")):
        out = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr
