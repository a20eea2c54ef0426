"""``starpulse ops campaign`` end to end on its own small fabric (4 servers x 2 rails, 2 spines): seven faults, one
of every kind (seed 7: a NIC link cut to 23 %, a dead spine, a flapping leaf-spine link, a NIC paced at 43 %, a
leaf-spine link down, a slow GPU, a NIC link losing 0.89 % of its frames; the lossy link is built through a link
emulator) injected into a running training job, each found through the telemetry store; the JSON contract of
issue 18.  About 2 minutes (1 min 56 s at load average 19)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sw.apps.ops_campaign import KINDS

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
KEYS = ("faults", "detected", "top1_accuracy", "top3_accuracy", "false_alarms", "healthy_steps",
        "median_steps_to_detect", "median_time_to_localize_s", "median_wall_time_to_localize_s", "by_kind",
        "faults_detail")


def test_short_campaign_finds_each_injected_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never a running fabric of someone else
    store = tmp_path / "run.sqlite"
    res = subprocess.run([sys.executable, "-m", "sw.cli", "ops", "campaign", "--faults", "7", "--seed", "7",
                          "--servers", "4", "--gpus", "2", "--spines", "2", "--time-dilation", "20",
                          "--healthy-steps", "3", "--json", "--keep-store", str(store)],
                         capture_output=True, text=True, cwd=REPO, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    for key in KEYS:
        assert key in out, key
    assert "fault 7/7" in res.stderr and "calibrated on steps" in res.stderr     # progress while it runs
    assert out["faults"] == 7 and out["healthy_steps"] == 3 and out["false_alarms"] == 0
    kinds = [d["kind"] for d in out["faults_detail"]]
    assert sorted(kinds) == sorted(KINDS)                          # each kind once
    places = {d["kind"]: d["place"] for d in out["faults_detail"]}
    assert places["lossy_link"] == "s0<->p0l0" and places["slow_nic"] == "s0-eth0", places
    assert set(out["by_kind"]) == set(kinds)
    for d in out["faults_detail"]:
        assert d["detected"] and d["top3"], d                      # every injected place among the top 3
        assert {"kind", "place", "severity", "diagnosis", "correct"} <= set(d)
    assert sum(d["correct"] for d in out["faults_detail"]) >= 6, out["faults_detail"]
    assert out["top3_accuracy"] == 1.0 and out["median_time_to_localize_s"] > 0
    assert out["fidelity"]["time_dilation"] == 20 and store.stat().st_size > 0
