"""``starpulse ops campaign`` end to end on its own small fabric (4 servers x 2 rails, 2 spines, PFC on since
pfc_storm is in the mix): nine faults, one of every kind, injected into a running training job, each found through
the telemetry store; the JSON contract of issue 18.  The congested port is another tenant's RoCE stream
(``emu.tenant``) sharing the leaf's port toward a NIC with the job.  About 1.5 minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sw.apps.ops_campaign import KINDS

pytestmark = pytest.mark.emu

TESTED = KINDS

REPO = Path(__file__).resolve().parents[2]
KEYS = ("faults", "detected", "top1_accuracy", "top3_accuracy", "false_alarms", "healthy_steps",
        "median_steps_to_detect", "median_time_to_localize_s", "median_wall_time_to_localize_s", "by_kind",
        "faults_detail")


def test_short_campaign_finds_each_injected_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never a running fabric of someone else
    store = tmp_path / "run.sqlite"
    res = subprocess.run([sys.executable, "-m", "sw.cli", "ops", "campaign", "--faults", str(len(TESTED)),
                          "--seed", "30", "--kinds", ",".join(TESTED),
                          "--servers", "4", "--gpus", "2", "--spines", "2", "--time-dilation", "20",
                          "--healthy-steps", "3", "--json", "--keep-store", str(store)],
                         capture_output=True, text=True, cwd=REPO, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    for key in KEYS:
        assert key in out, key
    n = len(TESTED)
    assert f"fault {n}/{n}" in res.stderr and "calibrated on steps" in res.stderr     # progress while it runs
    assert out["faults"] == len(TESTED) and out["healthy_steps"] == 3 and out["false_alarms"] == 0
    assert out["topology"]["pfc"] == "on"
    kinds = [d["kind"] for d in out["faults_detail"]]
    assert sorted(kinds) == sorted(TESTED)                          # each kind once
    places = {d["kind"]: d["place"] for d in out["faults_detail"]}
    assert places["lossy_link"] == "s3<->p0l0" and places["slow_nic"] == "s2-eth1", places
    assert places["pfc_storm"] == "s0<->p0l1" and places["dead_switch"] == "sp1", places
    assert places["congested_port"] == "p0l0 port 3", places
    assert set(out["by_kind"]) == set(kinds)
    for d in out["faults_detail"]:
        assert d["detected"] and d["top3"], d                      # every injected place among the top 3
        assert {"kind", "place", "severity", "diagnosis", "correct"} <= set(d)
    assert sum(d["correct"] for d in out["faults_detail"]) >= len(TESTED) - 1, out["faults_detail"]
    storm = next(d for d in out["faults_detail"] if d["kind"] == "pfc_storm")
    assert storm["diagnosis"][0]["kind"] == "pfc_storm", storm            # the storm, not its effects
    assert out["top3_accuracy"] == 1.0 and out["median_time_to_localize_s"] > 0
    assert out["fidelity"]["time_dilation"] == 20 and store.stat().st_size > 0
