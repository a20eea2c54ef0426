"""``starpulse train`` on its own small fabric (2 servers x 2 GPUs x 1 spine): the JSON contract with the
switches' drop counters, exact results, the straggler flag reaching the launched ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sw.apps import train

pytestmark = pytest.mark.emu

TINY_MOE = {"layers": 2, "hidden": 128, "tokens_per_step": 256, "gpu_tflops": 10.0, "scale": 0.01,
            "nic_gbps": 100.0, "experts": 4, "top_k": 2, "bucket_mb": 1.0}


@pytest.fixture(autouse=True)
def no_running_fabric(tmp_path, monkeypatch):
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never pick up someone's `fabric up`
    monkeypatch.setenv("STARPULSE_TIME_DILATION", "1")


def test_train_on_its_own_fabric_writes_the_json_contract(tmp_path: Path, capsys) -> None:
    model, out = tmp_path / "tiny.json", tmp_path / "train.json"
    model.write_text(json.dumps(TINY_MOE))
    code = train.main(["--servers", "2", "--gpus", "2", "--spines", "1", "--model", str(model), "--steps", "2",
                       "--warmup", "1", "--slow", "2:2", "--json", str(out), "--timeout", "180"])
    text = capsys.readouterr().out
    assert code == 0, text
    rep = json.loads(out.read_text())
    for key in ("step_s", "comm_share", "link_load", "drops", "wrong", "per_rank", "config", "fidelity"):
        assert key in rep, key
    assert rep["mode"] == "fabric" and rep["net"] == "roce" and isinstance(rep["drops"], int)
    assert rep["wrong"] == 0 and len(rep["per_rank"]) == 4
    assert [r["compute_factor"] for r in rep["per_rank"]] == [1.0, 1.0, 2.0, 1.0]
    assert all(r["nic_bytes_per_step"] > 0 for r in rep["per_rank"])
    assert rep["fidelity"]["worst_component"] is not None


def test_compare_on_one_fabric_runs_both_configurations_with_their_settings(tmp_path: Path, capsys) -> None:
    model, out = tmp_path / "tiny.json", tmp_path / "compare.json"
    model.write_text(json.dumps(TINY_MOE))
    code = train.main(["--servers", "2", "--gpus", "2", "--spines", "1", "--model", str(model), "--steps", "1",
                       "--warmup", "1", "--compare", "baseline,starpulse", "--json", str(out), "--timeout", "180"])
    text = capsys.readouterr().out
    assert code == 0, text
    rep = json.loads(out.read_text())
    base, new = rep["runs"]["baseline"], rep["runs"]["starpulse"]
    for run in (base, new):
        assert run["mode"] == "fabric" and run["net"] == "roce" and isinstance(run["drops"], int)
        assert run["wrong"] == 0 and len(run["per_rank"]) == 4
    assert rep["ratios"]["step_s"] == pytest.approx(new["step_s"] / base["step_s"])
    assert set(base["algorithms"]["alltoall"].values()) == {"pairwise"}
    assert set(new["algorithms"]["alltoall"].values()) == {"rail"}
    assert "--local" not in text and "ratios starpulse/baseline" in text
