"""The PFC-storm rule on recorded data: the telemetry store of a real 9-kind campaign on a PFC fabric (4 servers x
2 rails, 2 spines, dilation 20, seed 7, under load; ``data/campaign_4x2_seed7_9kinds_pfc.sqlite.gz``), judged as
the campaign does: no suspects in its healthy steps (PFC on, no pause received anywhere before the storm), and
after the injected storm (NIC s1-eth1 sending maximum-quanta pauses into leaf p0l1) its link named first as a
``pfc_storm`` with its evidence (pauses received, held share, idle egress with packets queued).  The rule's other
half, ordinary PFC under an incast naming nothing, needs switches pausing each other: the live test
``tests/emu/test_ops_pfc_storm_vs_incast.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.diagnose import pfc_storms
from sw.ops.expected import Expected, calibrate, port_deltas
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

STORE = "campaign_4x2_seed7_9kinds_pfc.sqlite.gz"
WINDOW_STEPS = 3


@pytest.fixture(scope="module")
def recorded(recorded_store: Callable[[str], TelemetryStore]) -> TelemetryStore:
    return recorded_store(STORE)


@pytest.fixture(scope="module")
def expected(recorded: TelemetryStore) -> Expected:
    return calibrate(recorded.steps(), recorded.collectives(), recorded.port_polls(), 1, 3, recorded.nic_counters())


def _storm(store: TelemetryStore) -> dict:
    faults = [f for f in store.faults() if f["action"] == "pfc_storm"]
    assert len(faults) == 1
    return faults[0]


def test_no_port_received_a_pause_before_the_storm_and_healthy_steps_raise_no_alarm(
        recorded: TelemetryStore, expected: Expected) -> None:
    storm = _storm(recorded)
    before = [p for p in recorded.port_polls() if p["t_ns"] < storm["t_ns"]]
    assert before and all(p["pfc_pauses_rx"] == 0 and p["pfc_paused_ns"] == 0 for p in before)
    for step in range(4, 7):
        result = window_diagnosis(recorded, expected, recorded.meta()["links"], *step_bounds(recorded, step))
        assert result["suspects"] == [], (step, result["suspects"])


def test_the_storming_nics_link_is_named_first_with_its_evidence(recorded: TelemetryStore,
                                                                 expected: Expected) -> None:
    storm = _storm(recorded)
    assert storm["target"] == "s1:1"
    base = recorded.db.execute("SELECT max(step) FROM steps WHERE t1_ns <= ?", (storm["t_ns"],)).fetchone()[0]
    tops = []
    for k in range(1, WINDOW_STEPS + 1):
        end = recorded.db.execute("SELECT max(t1_ns) FROM steps WHERE step = ?", (base + k,)).fetchone()[0]
        result = window_diagnosis(recorded, expected, recorded.meta()["links"], storm["t_ns"], end)
        if result["suspects"]:
            tops.append(result["suspects"][0])
    hit = next((t for t in tops if (t["kind"], t["place"]) == ("pfc_storm", "s1<->p0l1")), None)
    assert hit is not None, tops
    assert hit["severity"] >= 0.5 and hit["confidence"] == 0.97
    assert "p0l1 port 2 (to s1)" in hit["evidence"][0] and "PFC pauses received" in hit["evidence"][0]
    assert "with up to" in hit["evidence"][1] and "pkts queued" in hit["evidence"][1]


def test_the_held_port_fails_the_rule_once_its_egress_moves_or_the_pauses_cover_too_little(
        recorded: TelemetryStore) -> None:
    storm = _storm(recorded)
    polls = recorded.port_polls(storm["t_ns"])
    links = recorded.meta()["links"]
    held = port_deltas(polls)[("p0l1", 2)]
    assert held["pfc_rx"] > 0 and held["paused_ns"] >= 0.5 * held["span_ns"]
    assert [s.place for s in pfc_storms(polls, set(), links)] == ["s1<->p0l1"]
    assert pfc_storms(polls, {"p0l1"}, links) == []                  # a dead switch's ports are not judged
    moving = [dict(p, tx_bytes=p["tx_bytes"] + (p["t_ns"] - polls[0]["t_ns"]) * 100_000_000 // 8 // 10**9 // 5)
              if (p["switch"], p["port"]) == ("p0l1", 2) else p for p in polls]
    assert pfc_storms(moving, set(), links) == []                    # 20 % of the link moving: flow control
    short = [dict(p, pfc_paused_ns=p["pfc_paused_ns"] // 4) if (p["switch"], p["port"]) == ("p0l1", 2) else p
             for p in polls]
    assert pfc_storms(short, set(), links) == []                     # held a quarter of the time: not stuck
