"""Training steps on forked ranks: results exact, the plan's sizes on the wire, the straggler hook slows one
rank's compute, and the report carries every rank."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sw.collectives.config import CommConfig
from sw.collectives.local import run_local
from sw.units.straggler import StragglerError, compute_factor, parse_slow, set_compute_factor
from sw.workload import ModelSpec, RankWorkload, plan_step, run_workload

pytestmark = pytest.mark.unit

LINE_BPS = 100e6
MOE = ModelSpec(name="t-moe", layers=2, hidden=64, tokens_per_step=256, gpu_tflops=1.0, scale=0.01, nic_gbps=100.0,
                experts=4, top_k=2, bucket_mb=0.5)
DENSE = ModelSpec(name="t-dense", layers=3, hidden=128, tokens_per_step=256, gpu_tflops=10.0, scale=0.01,
                  nic_gbps=100.0, bucket_mb=1.0)


def _job(comm, plan, slow_dir):
    return run_workload(comm, plan, 2, 1, factor=lambda: compute_factor(slow_dir, comm.rank))


def _run(spec: ModelSpec, slow_dir: str | None = None) -> list[dict]:
    plan = plan_step(spec, 4, LINE_BPS)
    config = CommConfig(inter_rate_bps=LINE_BPS, intra_rate_bps=9 * LINE_BPS)
    return run_local(2, 2, _job, plan, slow_dir, config=config, timeout_s=60)


def test_moe_steps_are_exact_and_every_rank_gets_the_whole_report() -> None:
    reports = _run(MOE)
    rep = reports[0]
    assert rep["wrong"] == 0
    assert [r["rank"] for r in rep["per_rank"]] == [0, 1, 2, 3]
    assert [(r["server"], r["gpu"]) for r in rep["per_rank"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["per_rank"] == rep["per_rank"] for r in reports)
    plan = plan_step(MOE, 4, LINE_BPS)
    assert rep["config"]["alltoalls_per_step"] == 8 and plan.a2a_elems % 4 == 0
    for r in rep["per_rank"]:
        assert r["compute_s"] >= 2 * (plan.fwd_ns + plan.bwd_ns) / 1e9 - 1e-6   # a clock sleep is never shorter
        assert r["exposed_comm_s"] > 0 and r["comm_busy_s"] > 0 and r["nic_bytes_per_step"] > 0
        assert 0 < r["comm_share"] < 1 and r["link_load"] > 0


def test_the_slow_hook_multiplies_one_ranks_compute(tmp_path: Path) -> None:
    set_compute_factor(tmp_path, 1, 4.0)
    rep = _run(DENSE, str(tmp_path))[0]
    plan = plan_step(DENSE, 4, LINE_BPS)
    fast, slow = rep["per_rank"][0], rep["per_rank"][1]
    planned_s = (3 * (plan.fwd_ns + plan.bwd_ns) + plan.opt_ns) / 1e9
    assert (fast["compute_factor"], slow["compute_factor"]) == (1.0, 4.0)
    assert slow["compute_s"] >= 4 * planned_s - 1e-6 and rep["wrong"] == 0      # a clock sleep is never shorter


def test_straggler_settings_are_checked(tmp_path: Path) -> None:
    assert parse_slow("3:2.5", world=4) == (3, 2.5)
    assert compute_factor(tmp_path, 0) == 1.0 and compute_factor(None, 0) == 1.0
    for bad in ("4:2", "x:2", "1:0.5", "1"):
        with pytest.raises(StragglerError, match=r"^--slow "):
            parse_slow(bad, world=4)
    with pytest.raises(StragglerError, match="factor 0.5"):
        set_compute_factor(tmp_path, 0, 0.5)


def _timeline_job(comm, plan):
    return run_workload(comm, plan, 1, 0)["timeline"][comm.rank]


def test_each_bucket_starts_after_its_last_layers_backward_and_in_stream_order() -> None:
    plan = plan_step(replace(DENSE, bucket_mb=0.3), 4, LINE_BPS)   # 3 layers of 3.9 kB, buckets of 3 kB
    assert [b.layers for b in plan.buckets] == [(2,), (1,), (0,)]
    config = CommConfig(inter_rate_bps=LINE_BPS, intra_rate_bps=9 * LINE_BPS)
    for row in run_local(2, 2, _timeline_job, plan, config=config, timeout_s=60):
        computes = [(a, b) for kind, a, b in row["segments"] if kind == "compute"]
        comms = [(a, b) for kind, a, b in row["segments"] if kind == "comm"]
        backward = computes[3:6]                              # after the 3 forward layers: layers 2, 1, 0
        assert len(comms) == len(plan.buckets) == 3 and len(computes) == 7
        for i, bucket in enumerate(plan.buckets):
            ready_end = backward[2 - bucket.ready_after][1]
            assert comms[i][0] >= ready_end                   # issued once its gradients exist
            assert i == 0 or comms[i][0] >= comms[i - 1][1]   # one stream: after the previous bucket
        assert comms[0][0] < computes[-1][0]                  # the first bucket was issued before the optimizer


def _live_job(comm, plan, slow_dir):
    work = RankWorkload(comm, plan, factor=lambda: compute_factor(slow_dir, comm.rank))
    work.run_step(0)
    if comm.rank == 0:
        set_compute_factor(slow_dir, 1, 5.0)                  # from outside rank 1, while the job runs
    comm.barrier()
    step = work.run_step(1)
    return sum(b - a for kind, a, b in step.segments if kind == "compute")


def test_a_factor_set_while_the_job_runs_takes_effect_at_the_next_step(tmp_path: Path) -> None:
    plan = plan_step(replace(DENSE, gpu_tflops=1.0), 4, LINE_BPS)
    planned_ns = 3 * (plan.fwd_ns + plan.bwd_ns) + plan.opt_ns
    config = CommConfig(inter_rate_bps=LINE_BPS, intra_rate_bps=9 * LINE_BPS)
    compute_ns = run_local(2, 2, _live_job, plan, str(tmp_path), config=config, timeout_s=60)
    assert compute_ns[1] >= 5 * planned_ns - 10                 # a clock sleep is never shorter
    assert compute_factor(tmp_path, 1) == 5.0 and compute_factor(tmp_path, 0) == 1.0


def _recording_job(comm, plan, db):
    from sw.units.telemetry import TelemetryStore

    with TelemetryStore(db) as store:
        return run_workload(comm, plan, 2, 1, telemetry=store)


def test_every_rank_records_each_step_and_collective_into_the_store(tmp_path: Path) -> None:
    from sw.units.telemetry import TelemetryStore

    db = tmp_path / "t.sqlite"
    TelemetryStore(db, create=True).close()
    plan = plan_step(MOE, 4, LINE_BPS)
    config = CommConfig(inter_rate_bps=LINE_BPS, intra_rate_bps=9 * LINE_BPS)
    run_local(2, 2, _recording_job, plan, str(db), config=config, timeout_s=60)
    with TelemetryStore(db) as store:
        steps, colls = store.steps(), store.collectives()
    assert sorted((s["step"], s["rank"]) for s in steps) == [(i, r) for i in range(3) for r in range(4)]  # warm-up too
    per_step = 8 + len(plan.buckets)                       # 8 all-to-alls (2 layers x 4) and one allreduce a bucket
    assert len(colls) == 3 * 4 * per_step
    assert {c["op"] for c in colls} == {"alltoall", "allreduce"} and all(c["algo"] for c in colls)
    assert all(c["post_ns"] <= c["start_ns"] <= c["end_ns"] and c["wait_ns"] >= 0 for c in colls)
    assert {c["nbytes"] for c in colls if c["op"] == "alltoall"} == {plan.a2a_elems * 2}
    for s in steps:                                        # the box's time base: steps of all ranks line up
        assert s["t0_ns"] < s["t1_ns"] and s["compute_ns"] > 0 and (s["server"], s["gpu"]) == divmod(s["rank"], 2)
    assert max(s["t0_ns"] for s in steps if s["step"] == 1) < min(s["t1_ns"] for s in steps if s["step"] == 1)
