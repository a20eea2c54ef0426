"""``starpulse train --backend sim``: the JSON contract with an honest model verdict, the step's overlap read from
the workload's own actions, sanity relations (faster GPUs raise the communication share, a straggler slows the job,
results are the same every run), ``--compare``, 1,024 GPUs of an MoE preset, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sw.apps import train
from sw.workload import PRESETS, plan_step
from sw.workload.schedule import OP_ALLREDUCE, OP_ALLTOALL, OP_COMPUTE, OP_WAIT_ALL

pytestmark = pytest.mark.unit

TINY_MOE = {"layers": 2, "hidden": 256, "tokens_per_step": 1024, "gpu_tflops": 10.0, "scale": 0.01,
            "nic_gbps": 100.0, "experts": 8, "top_k": 2, "bucket_mb": 1.0}
SINGLE_KEYS = ("step_s", "comm_share", "link_load", "drops", "wrong", "per_rank", "config", "fidelity")


def _run(tmp_path: Path, capfd, *argv: str, spec: dict | None = None, name: str = "out") -> dict:
    args = ["--backend", "sim", "--servers", "4", "--gpus", "2", "--steps", "2", "--warmup", "1",
            "--json", str(tmp_path / f"{name}.json"), *argv]
    if spec is not None:
        model = tmp_path / f"{name}-model.json"
        model.write_text(json.dumps(spec))
        args += ["--model", str(model)]
    code = train.main(args)
    err = capfd.readouterr().err
    assert code == 0, err
    return json.loads((tmp_path / f"{name}.json").read_text())


def test_step_ops_are_the_runners_order() -> None:
    plan = plan_step(PRESETS["moe-small"], 8, 100e6)
    ops = plan.ops()
    kinds = [op.kind for op in ops]
    layers = plan.spec.layers
    assert kinds.count(OP_ALLTOALL) == 4 * layers == plan.to_json()["alltoalls_per_step"]
    assert kinds[:3] == [OP_ALLTOALL, OP_COMPUTE, OP_ALLTOALL] and kinds[-2:] == [OP_WAIT_ALL, OP_COMPUTE]
    assert [op.bucket for op in ops if op.kind == OP_ALLREDUCE] == list(range(len(plan.buckets)))
    backward = ops[3 * layers:]
    first_ar = next(i for i, op in enumerate(backward) if op.kind == OP_ALLREDUCE)
    assert backward[first_ar - 1].kind == OP_ALLTOALL     # a bucket is posted right after its layer's backward
    assert ops[-1].ns == plan.opt_ns and ops[1].ns == plan.fwd_ns


def test_json_contract_and_an_honest_model_verdict(tmp_path: Path, capfd) -> None:
    rep = _run(tmp_path, capfd, spec=TINY_MOE)
    assert all(k in rep for k in SINGLE_KEYS) and rep["backend"] == "sim" and "timeline" not in rep
    assert rep["fidelity"]["model"] == "flow-level" and "ok" not in rep["fidelity"]
    assert rep["drops"] is None and rep["wrong"] is None
    assert len(rep["per_rank"]) == 8 and rep["config"]["world"] == 8
    assert 0 < rep["comm_share"] < 1 and 0 < rep["link_load"] <= 1 + 1e-9
    for r in rep["per_rank"]:
        assert r["exposed_comm_s"] <= r["comm_busy_s"] + 1e-9 and r["step_s"] >= r["compute_s"]
    assert set(rep["algorithms"]) == {"allreduce", "alltoall"}
    assert {c["op"] for c in rep["sim"]["collectives"]} == {"allreduce", "alltoall"}


def test_same_inputs_same_results_and_faster_gpus_raise_the_comm_share(tmp_path: Path, capfd) -> None:
    one = _run(tmp_path, capfd, spec=TINY_MOE, name="a")
    two = _run(tmp_path, capfd, spec=TINY_MOE, name="b")
    for rep in (one, two):
        rep["sim"].pop("wall_s")
        rep["config"]["model"].pop("name")             # the model file's stem
    assert one == two
    fast = _run(tmp_path, capfd, spec={**TINY_MOE, "gpu_tflops": 40.0}, name="fast")
    assert fast["comm_share"] > one["comm_share"] and fast["step_s"] < one["step_s"]


def test_a_straggler_slows_every_rank_at_the_next_collective(tmp_path: Path, capfd) -> None:
    base = _run(tmp_path, capfd, spec=TINY_MOE, name="base")
    slow = _run(tmp_path, capfd, "--slow", "3:2", spec=TINY_MOE, name="slow")
    r0, r3 = slow["per_rank"][0], slow["per_rank"][3]
    assert r3["compute_factor"] == 2.0 and r3["compute_s"] == pytest.approx(2 * r0["compute_s"], rel=1e-6)
    assert slow["step_s"] > base["step_s"]
    assert r0["exposed_comm_s"] > base["per_rank"][0]["exposed_comm_s"]   # the others wait for rank 3


def test_compare_runs_both_configurations_with_their_algorithms(tmp_path: Path, capfd) -> None:
    out = tmp_path / "cmp.json"
    model = tmp_path / "m.json"
    model.write_text(json.dumps(TINY_MOE))
    code = train.main(["--backend", "sim", "--servers", "4", "--gpus", "2", "--model", str(model), "--steps", "1",
                       "--compare", "baseline,starpulse", "--json", str(out)])
    text = capfd.readouterr()
    assert code == 0, text.err
    rep = json.loads(out.read_text())
    base, new = rep["runs"]["baseline"], rep["runs"]["starpulse"]
    assert set(base["algorithms"]["allreduce"].values()) == {"ring"}
    assert set(base["algorithms"]["alltoall"].values()) == {"pairwise"}
    assert rep["ratios"]["step_s"] == pytest.approx(new["step_s"] / base["step_s"])
    assert "--backend sim: predicted by the flow-level simulator" in text.out


def test_an_moe_preset_on_1024_gpus(tmp_path: Path, capfd) -> None:
    rep = _run(tmp_path, capfd, "--servers", "128", "--gpus", "8", "--spines", "8", "--model", "moe-1k",
               "--steps", "1", "--warmup", "0")
    assert rep["config"]["world"] == 1024 and len(rep["per_rank"]) == 1024
    a2a = [c for c in rep["sim"]["collectives"] if c["op"] == "alltoall"]
    assert a2a and a2a[0]["model"].startswith("link-load") and 0 < rep["comm_share"] < 1


@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "sim", "--local"], "--local: not with --backend sim"),
    (["--backend", "sim", "--intra-rate", "off"], "--intra-rate off: the simulator needs a rate"),
    (["--backend", "sim", "--servers", "300"], "--servers 300: must be within"),
    (["--backend", "sim", "--model", "moe-small", "--servers", "3"], "experts 8: not divisible"),
    (["--backend", "nope"], "argument --backend: nope: allowed embedded, bmv2, sim"),
])
def test_train_bad_input_is_one_line_and_exit_2(capfd, argv: list[str], message: str) -> None:
    try:
        code = train.main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capfd.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", [["bench", "allreduce"], ["ops", "campaign"]])
def test_other_commands_reject_the_sim_backend(capfd, command: list[str]) -> None:
    from sw.cli import main

    try:
        code = main([*command, "--backend", "sim"])
    except SystemExit as exc:
        code = exc.code
    err = capfd.readouterr().err
    assert code == 2 and "--backend: sim: only `starpulse train`" in err and len(err.strip().splitlines()) == 1, err
