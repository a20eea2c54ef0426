"""Diagnosis on recorded data: the telemetry store of a real campaign (4 servers x 2 rails, 2 spines, dilation 20,
seed 5; ``data/campaign_4x2_seed5.sqlite.gz``), judged window by window as the campaign does: no suspects in
its healthy steps, and the injected place named first in the step after each slow GPU, the 25 % NIC link and
the dead spine."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sw.apps import ops_cli
from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.expected import calibrate, fit_alpha_beta
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

DATA = Path(__file__).with_name("data") / "campaign_4x2_seed5.sqlite.gz"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TelemetryStore:
    path = tmp_path_factory.mktemp("ops") / "run.sqlite"
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return TelemetryStore(path)


def _first_step_window(store: TelemetryStore, t_ns: int) -> tuple[int, int]:
    """From an injection to the end of the first step that started after it (the campaign's first look)."""
    row = store.db.execute("SELECT step, max(t1_ns) FROM steps WHERE t0_ns >= ? GROUP BY step ORDER BY step "
                           "LIMIT 1", (t_ns,)).fetchone()
    return t_ns, int(row[1])


def test_the_recorded_healthy_steps_raise_no_alarm(recorded: TelemetryStore) -> None:
    exp = calibrate(recorded.steps(), recorded.collectives(), recorded.port_polls(), 1, 3)
    assert set(exp.compute_ns) == set(range(8)) and {"allreduce", "alltoall"} <= set(exp.collectives)
    links = recorded.meta()["links"]
    for step in range(4, 10):
        result = window_diagnosis(recorded, exp, links, *step_bounds(recorded, step))
        assert result["suspects"] == [], (step, result["suspects"])


@pytest.mark.parametrize(("action", "target", "kind", "place"), [
    ("slow_gpu", "0", "slow_gpu", "rank 0"),
    ("slow_gpu", "1", "slow_gpu", "rank 1"),
    ("slow_gpu", "4", "slow_gpu", "rank 4"),
    ("slow_link", "s1:p0l0", "degraded_link", "s1<->p0l0"),       # the one cut to 25 % (the 57 % cut went unseen)
    ("switch_stop", "sp0", "dead_switch", "sp0"),
])
def test_the_first_step_after_a_fault_names_its_place_first(recorded: TelemetryStore, action: str, target: str,
                                                            kind: str, place: str) -> None:
    exp = calibrate(recorded.steps(), recorded.collectives(), recorded.port_polls(), 1, 3)
    faults = [f for f in recorded.faults() if f["action"] == action and f["target"] == target]
    if action == "slow_link":
        faults = [f for f in faults if int(f["value"]) < 30_000_000]
    assert len(faults) == 1
    result = window_diagnosis(recorded, exp, recorded.meta()["links"], *_first_step_window(recorded, faults[0]["t_ns"]))
    top = result["suspects"][0]
    assert (top["kind"], top["place"]) == (kind, place), result["suspects"]
    assert top["evidence"] and 0 < top["confidence"] <= 1
    if kind == "slow_gpu":          # the evidence chain: own history, peers, and who waited on whom
        assert "own healthy median" in top["evidence"][0] and "waited on it" in top["evidence"][2]
        assert top["severity"] > 1.3


def test_alpha_beta_fit_recovers_a_line_and_falls_back_to_one_size() -> None:
    model = fit_alpha_beta([(1000, 2000.0), (2000, 3000.0), (4000, 5000.0)])
    assert model.alpha_ns == pytest.approx(1000.0) and model.ns_per_byte == pytest.approx(1.0)
    assert fit_alpha_beta([(100, 50.0), (100, 70.0)]).predict_ns(100) == pytest.approx(60.0)


def test_diagnose_command_on_the_saved_store_prints_json(recorded: TelemetryStore, capsys) -> None:
    assert ops_cli.main(["diagnose", "--store", str(recorded.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"suspects", "symptoms", "window", "expected", "detected"}
    assert out["expected"]["steps"] == [1, 4]


def test_watch_prints_the_diagnosis_once_per_interval(recorded: TelemetryStore, capsys) -> None:
    assert ops_cli.main(["watch", "--store", str(recorded.path), "--count", "2", "--interval", "0.1",
                         "--since", "0"]) == 0
    out = capsys.readouterr().out
    assert "--- 1" in out and "--- 2" in out and "# window: steps" in out
    assert "1. " in out            # the whole recorded run holds faults: at least one suspect is ranked
