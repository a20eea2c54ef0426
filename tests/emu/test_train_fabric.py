"""``starpulse train`` on its own small fabric (2 servers x 2 GPUs x 1 spine): the JSON contract with the
switches' drop counters, exact results, the straggler flag reaching the launched ranks, ``--compare`` on one
fabric, and ``fabric fault slow_gpu`` on a running fabric reaching the ranks of a job run on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sw.apps import train
from sw.units.straggler import compute_factor

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]

TINY_MOE = {"layers": 2, "hidden": 128, "tokens_per_step": 256, "gpu_tflops": 10.0, "scale": 0.01,
            "nic_gbps": 100.0, "experts": 4, "top_k": 2, "bucket_mb": 1.0}


@pytest.fixture(autouse=True)
def no_running_fabric(tmp_path, monkeypatch):
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never pick up someone's `fabric up`
    monkeypatch.setenv("STARPULSE_TIME_DILATION", "1")


def _train_on_own_fabric(tmp_path: Path, capsys, *flags: str) -> tuple[dict, str]:
    """``starpulse train`` of the tiny MoE on its own 2x2 fabric with ``flags``: its JSON report and its output."""
    model, out = tmp_path / "tiny.json", tmp_path / "train.json"
    model.write_text(json.dumps(TINY_MOE))
    code = train.main(["--servers", "2", "--gpus", "2", "--spines", "1", "--model", str(model), *flags,
                       "--json", str(out), "--timeout", "180"])
    text = capsys.readouterr().out
    assert code == 0, text
    return json.loads(out.read_text()), text


def test_train_on_its_own_fabric_writes_the_json_contract(tmp_path: Path, capsys) -> None:
    rep, _ = _train_on_own_fabric(tmp_path, capsys, "--steps", "2", "--warmup", "1", "--slow", "2:2")
    for key in ("step_s", "comm_share", "link_load", "drops", "wrong", "per_rank", "config", "fidelity"):
        assert key in rep, key
    assert rep["mode"] == "fabric" and rep["net"] == "roce" and isinstance(rep["drops"], int)
    assert rep["wrong"] == 0 and len(rep["per_rank"]) == 4
    assert [r["compute_factor"] for r in rep["per_rank"]] == [1.0, 1.0, 2.0, 1.0]
    assert all(r["nic_bytes_per_step"] > 0 for r in rep["per_rank"])
    assert rep["fidelity"]["worst_component"] is not None


def test_compare_on_one_fabric_runs_both_configurations_with_their_settings(tmp_path: Path, capsys) -> None:
    rep, text = _train_on_own_fabric(tmp_path, capsys, "--steps", "1", "--warmup", "1",
                                     "--compare", "baseline,starpulse")
    base, new = rep["runs"]["baseline"], rep["runs"]["starpulse"]
    assert (base["roce_cc"], new["roce_cc"]) == ("none", "dcqcn")      # what the ranks' QPs ran
    for run in (base, new):
        assert run["mode"] == "fabric" and run["net"] == "roce" and isinstance(run["drops"], int)
        assert run["wrong"] == 0 and len(run["per_rank"]) == 4
    assert rep["ratios"]["step_s"] == pytest.approx(new["step_s"] / base["step_s"])
    assert set(base["algorithms"]["alltoall"].values()) == {"pairwise"}
    assert set(new["algorithms"]["alltoall"].values()) == {"rail"}
    assert "--local" not in text and "ratios starpulse/baseline" in text


def _fabric_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emu.cli", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_slow_gpu_fault_on_a_running_fabric_slows_that_rank_of_a_train_job(tmp_path: Path) -> None:
    name = f"slowgpu{os.getpid()}"
    up = subprocess.Popen([sys.executable, "-m", "emu.cli", "up", "--servers", "2", "--gpus-per-server", "2",
                           "--spines", "1", "--time-dilation", "64", "--name", name], cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        state = Path(os.environ["STARPULSE_STATE_DIR"]) / f"fabric-{name}" / "state.json"
        deadline = time.monotonic() + 180
        while not state.exists():
            assert up.poll() is None, up.stderr.read() if up.stderr else ""
            assert time.monotonic() < deadline, "no state file after 180 s"
            time.sleep(0.1)
        bad = _fabric_cli("fault", "slow_gpu", "4", "2", "--name", name)
        assert bad.returncode == 2 and "slow_gpu 4: expected a rank in 0..3" in bad.stderr, bad.stderr
        ok = _fabric_cli("fault", "slow_gpu", "1", "3", "--name", name)
        assert ok.returncode == 0 and "slow_gpu 1 3: ok" in ok.stdout, ok.stderr
        status = json.loads(_fabric_cli("status", "--json", "--name", name).stdout)
        assert status["faults"]["slow_gpus"] == {"1": 3.0} and status["straggler_dir"]

        model, out = tmp_path / "tiny.json", tmp_path / "train.json"
        model.write_text(json.dumps(TINY_MOE))
        code = train.main(["--name", name, "--model", str(model), "--steps", "1", "--warmup", "1",
                           "--json", str(out), "--timeout", "180"])
        assert code == 0
        assert [r["compute_factor"] for r in json.loads(out.read_text())["per_rank"]] == [1.0, 3.0, 1.0, 1.0]
        code = train.main(["--name", name, "--model", str(model), "--steps", "1", "--warmup", "0", "--slow", "1:2",
                           "--slow", "2:5", "--json", str(out), "--timeout", "180"])   # --slow outranks the fault
        assert code == 0
        assert [r["compute_factor"] for r in json.loads(out.read_text())["per_rank"]] == [1.0, 2.0, 5.0, 1.0]
        stragglers = status["straggler_dir"]           # after the job: the fault's factor again, --slow's gone
        assert (compute_factor(stragglers, 1), compute_factor(stragglers, 2)) == (3.0, 1.0)

        restore = _fabric_cli("fault", "restore_gpu", "1", "--name", name)
        assert restore.returncode == 0, restore.stderr
        status = json.loads(_fabric_cli("status", "--json", "--name", name).stdout)
        assert status["faults"]["slow_gpus"] == {}
        assert _fabric_cli("down", "--name", name).returncode == 0
        assert up.wait(timeout=60) == 0
    finally:
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=60)
