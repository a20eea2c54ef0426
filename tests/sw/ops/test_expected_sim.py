"""The flow-level simulator as the expected model (``sw.apps.ops_sim``, ``sw.ops.expected.fit_sim``): its
calibration recovers a per-message cost and a wire factor, it judges the recorded campaigns' windows with the
verdicts of the alpha-beta model, its step for a recorded run is within a stated factor of the run's calibrated
step, it falls back to alpha-beta where it has no schedule, and ``train`` records the job it needs."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sw.apps import ops_cli, train
from sw.apps.ops_campaign import CAMPAIGN_MODEL, step_bounds, window_diagnosis
from sw.apps.ops_sim import job_spec, with_sim
from sw.ops.expected import Expected, SimCollective, calibrate, fit_sim
from sw.units.telemetry import ENV_TELEMETRY_DB, TelemetryStore

pytestmark = pytest.mark.unit

DATA = Path(__file__).with_name("data")
STORES = sorted(p.name for p in DATA.glob("*.sqlite.gz"))
SIM_STEP_SHARE = (0.5, 1.0)
"""The simulator's step on the ideal fabric (no Python stack) as a share of the recorded run's calibrated step:
below it (the stack costs time), but more than half of it (the fabric and the compute are most of a step)."""
CALIBRATED_STEP_SHARE = (0.8, 1.2)
"""The step with the calibrated collective times: within 20 % of the measured one (what is left: the ranks' skew
and waits, which the step model does not have)."""


def _rows(key: tuple[str, int, str], step: int, ns: list[int]) -> list[dict[str, object]]:
    return [{"op": key[0], "nbytes": key[1], "algo": f"sum, {key[2]}", "step": step, "start_ns": 0, "end_ns": t}
            for t in ns]


def test_fit_recovers_the_per_message_cost_and_the_wire_factor() -> None:
    sims = [SimCollective("alltoall", 4000, "rail", 2e6, 2), SimCollective("allreduce", 8000, "hier", 5e6, 8),
            SimCollective("allreduce", 64000, "hier", 40e6, 8)]
    rows = []
    for s in sims:   # measured = 300 us per message + 1.5 x the wire time, medians of three
        t = int(300e3 * s.messages + 1.5 * s.wire_ns)
        rows += _rows((s.op, s.nbytes, s.algo), 1, [t - 10, t, t + 10])
    rows += _rows(("alltoall", 4000, "rail"), 9, [10**12])      # outside the calibration steps: ignored
    model = fit_sim(sims, rows, 1, 3)
    assert model is not None
    assert model.per_message_ns == pytest.approx(300e3, rel=1e-6) and model.wire_factor == pytest.approx(1.5)
    assert model.predict_ns("allreduce", 8000, "sum, hier") == pytest.approx(8 * 300e3 + 1.5 * 5e6)
    assert model.predict_ns("allreduce", 8000, "ring") is None
    # a negative per-message cost is not a model: the better one-variable fit (here the wire factor alone)
    odd = [SimCollective("alltoall", 4000, "rail", 2e6, 8), SimCollective("allreduce", 8000, "hier", 5e6, 2)]
    alone = fit_sim(odd, _rows(("alltoall", 4000, "rail"), 1, [2 * 10**6]) + _rows(("allreduce", 8000, "hier"), 1,
                                                                                  [9 * 10**6]), 1, 3)
    assert alone is not None and alone.per_message_ns == 0.0 and alone.wire_factor == pytest.approx(49 / 29)
    assert fit_sim(sims, _rows(("broadcast", 4000, "ring"), 1, [5]), 1, 3) is None


def _expected(store: TelemetryStore) -> Expected:
    return calibrate(store.steps(), store.collectives(), store.port_polls(), 1, 3, store.nic_counters())


def _windows(store: TelemetryStore) -> list[tuple[int, int]]:
    """The campaign's windows: each healthy step before the first fault, and from each injection to the end of
    the first step that started after it."""
    faults = store.faults()
    first = faults[0]["t_ns"] if faults else 2**62
    last = max(s["step"] for s in store.steps())
    out = [w for w in (step_bounds(store, k) for k in range(4, last + 1)) if w[1] < first]
    for f in faults:
        row = store.db.execute("SELECT max(t1_ns) FROM steps WHERE step = (SELECT min(step) FROM steps WHERE "
                               "t0_ns >= ?)", (f["t_ns"],)).fetchone()
        if row[0] is not None:
            out.append((f["t_ns"], int(row[0])))
    return out


@pytest.mark.parametrize("name", STORES)
def test_the_sim_model_keeps_every_recorded_verdict(recorded_store: Callable[[str], TelemetryStore],
                                                    name: str) -> None:
    store = recorded_store(name)
    alpha_beta = _expected(store)
    sim = with_sim(copy.deepcopy(alpha_beta), store.meta(), store.collectives())
    assert sim.model == "sim" and alpha_beta.model == "alpha-beta"
    assert sim.sim is not None and sim.sim.per_message_ns >= 0 and sim.sim.wire_factor > 0
    links = store.meta()["links"]
    windows = _windows(store)
    assert len(windows) >= 4
    named = 0
    for a, b in windows:
        want, got = (window_diagnosis(store, e, links, a, b) for e in (alpha_beta, sim))
        named += bool(want["suspects"])
        assert got["symptoms"]["model"] == "sim"
        assert [(s["kind"], s["place"], s["severity"], s["confidence"]) for s in got["suspects"]] == \
            [(s["kind"], s["place"], s["severity"], s["confidence"]) for s in want["suspects"]], (name, a, b)
    assert named >= 2          # the fault windows: there are verdicts to keep


@pytest.fixture
def with_job(tmp_path: Path) -> TelemetryStore:
    """A copy of the seed-5 campaign's store that names its job (the campaign's model, one expert per rank), as
    ``train`` now records it."""
    path = tmp_path / "run.sqlite"
    path.write_bytes(gzip.decompress((DATA / "campaign_4x2_seed5.sqlite.gz").read_bytes()))
    store = TelemetryStore(path)
    store.set_meta(workload={"name": "campaign", **CAMPAIGN_MODEL, "experts": 8})
    yield store
    store.close()


def test_the_sim_step_of_a_recorded_run_is_within_the_stated_factor_of_its_calibrated_step(
        with_job: TelemetryStore) -> None:
    exp = with_sim(_expected(with_job), with_job.meta(), with_job.collectives())
    assert exp.sim is not None and exp.sim.step_ns is not None and exp.sim.step_sim_ns is not None
    assert SIM_STEP_SHARE[0] <= exp.sim.step_sim_ns / exp.step_ns <= SIM_STEP_SHARE[1]
    assert CALIBRATED_STEP_SHARE[0] <= exp.sim.step_ns / exp.step_ns <= CALIBRATED_STEP_SHARE[1]
    for op in ("alltoall", "allreduce"):     # each healthy collective's median, from the calibrated simulator
        rows = [c for c in with_job.collectives() if c["op"] == op and 1 <= c["step"] <= 3]
        med = sorted(c["end_ns"] - c["start_ns"] for c in rows)[len(rows) // 2]
        got = exp.predict_ns(op, rows[0]["nbytes"], rows[0]["algo"])
        assert got is not None and 0.9 <= got / med <= 1.1, (op, got, med)
    js = exp.to_json()
    assert js["model"] == "sim" and js["predicted_step_s"] == pytest.approx(exp.sim.step_ns / 1e9)
    assert js["calibrated_step_s"] == js["step_s"] and {c["algo"] for c in js["sim"]["collectives"]} == {"hier",
                                                                                                         "rail"}


def test_without_a_schedule_or_a_topology_the_model_stays_alpha_beta(with_job: TelemetryStore) -> None:
    exp = _expected(with_job)
    assert with_sim(copy.deepcopy(exp), {k: v for k, v in with_job.meta().items() if k != "topology"},
                    with_job.collectives()).model == "alpha-beta"
    colls = [{**c, "op": "broadcast"} for c in with_job.collectives()]    # no simulator schedule for it
    assert with_sim(copy.deepcopy(exp), with_job.meta(), colls).model == "alpha-beta"
    sim = with_sim(copy.deepcopy(exp), with_job.meta(), with_job.collectives())
    line = exp.collectives["allreduce"]
    assert sim.predict_ns("allreduce", 123_456, "sum, hier") == line.predict_ns(123_456)   # a size it never timed


def test_diagnose_json_names_the_model_and_the_steps(with_job: TelemetryStore, capsys) -> None:
    assert ops_cli.main(["diagnose", "--store", str(with_job.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    exp = out["expected"]
    assert exp["model"] == "sim" and out["symptoms"]["model"] == "sim"
    assert exp["predicted_step_s"] > 0 and exp["calibrated_step_s"] == exp["step_s"] > 0
    assert exp["sim"]["per_message_s"] >= 0 and exp["sim"]["step_sim_s"] < exp["calibrated_step_s"]
    assert ops_cli.main(["diagnose", "--store", str(with_job.path)]) == 0
    assert "of sim" in capsys.readouterr().out.splitlines()[0]


def test_a_recording_job_names_its_model_in_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.sqlite"
    TelemetryStore(db, create=True).close()
    model = {"layers": 1, "hidden": 64, "tokens_per_step": 256, "gpu_tflops": 10.0, "scale": 0.01,
             "nic_gbps": 100.0, "experts": 4, "top_k": 2, "bucket_mb": 1.0}
    (tmp_path / "tiny.json").write_text(json.dumps(model))
    monkeypatch.setenv(ENV_TELEMETRY_DB, str(db))
    assert train.main(["--local", "--servers", "2", "--gpus", "2", "--model", str(tmp_path / "tiny.json"),
                       "--steps", "1", "--warmup", "0"]) == 0
    with TelemetryStore(db) as store:
        spec = job_spec(store.meta())
    assert spec is not None and spec.name == "tiny" and spec.experts == 4 and spec.hidden == 64


HYPOTHESIS_FACTOR = 2.5
"""The share of its rate at which the simulator reproduces a degraded link's slowdown, against the injected one:
within this factor (the calibrated model charges the stack's per-message cost, which the cut does not slow)."""


def test_the_simulator_finds_a_share_of_the_cut_links_rate_that_reproduces_the_slowdown(
        with_job: TelemetryStore) -> None:
    exp = with_sim(_expected(with_job), with_job.meta(), with_job.collectives())
    fault = next(f for f in with_job.faults() if f["action"] == "slow_link" and int(f["value"]) < 30_000_000)
    injected = int(fault["value"]) / with_job.meta()["topology"]["link_rate_bps"]
    row = with_job.db.execute("SELECT max(t1_ns) FROM steps WHERE step = (SELECT min(step) FROM steps WHERE "
                              "t0_ns >= ?)", (fault["t_ns"],)).fetchone()
    result = window_diagnosis(with_job, exp, with_job.meta()["links"], fault["t_ns"], int(row[0]))
    top = result["suspects"][0]
    assert (top["kind"], top["place"]) == ("degraded_link", "s1<->p0l0")
    hyp = top["hypothesis"]
    assert injected / HYPOTHESIS_FACTOR <= hyp["share"] <= injected * HYPOTHESIS_FACTOR, (hyp, injected)
    assert hyp["comm_ratio"] == pytest.approx(result["symptoms"]["comm_ratio"], rel=0.05)
    assert hyp["step_s"] > exp.step_ns / 1e9 and top["evidence"][-1].startswith("simulator: with s1<->p0l0 at")
    for f in with_job.faults():         # no hypothesis where no link is suspected
        if f["action"] == "slow_gpu":
            res = window_diagnosis(with_job, exp, with_job.meta()["links"], f["t_ns"])
            assert all("hypothesis" not in s for s in res["suspects"] if s["kind"] != "degraded_link")
