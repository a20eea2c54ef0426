"""Diagnosis on recorded data with the NIC rows: the telemetry store of a real 7-kind campaign (4 servers x 2
rails, 2 spines, dilation 20, seed 7, load average ~19; ``data/campaign_4x2_seed7_7kinds.sqlite.gz``), judged as
the campaign does: no suspects in its healthy steps, and each injected fault's kind and place named first within
the 3 steps after it (lossy link from the NICs' retransmissions, slow NIC from its port's pacing rate, flapping
link from the switch ports' carrier going down and back)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.expected import Expected, calibrate
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

DATA = Path(__file__).with_name("data") / "campaign_4x2_seed7_7kinds.sqlite.gz"
WINDOW_STEPS = 3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TelemetryStore:
    path = tmp_path_factory.mktemp("ops") / "run.sqlite"
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return TelemetryStore(path)


@pytest.fixture(scope="module")
def expected(recorded: TelemetryStore) -> Expected:
    return calibrate(recorded.steps(), recorded.collectives(), recorded.port_polls(), 1, 3, recorded.nic_counters())


def test_the_store_has_nic_rows_and_healthy_steps_raise_no_alarm(recorded: TelemetryStore, expected: Expected) -> None:
    rows = recorded.nic_counters()
    assert {r["rank"] for r in rows} == set(range(8)) and all(r["line_rate_bps"] == 100_000_000 for r in rows)
    assert expected.retx_per_step == 0.0           # a healthy rail loses nothing
    for step in range(4, 7):
        result = window_diagnosis(recorded, expected, recorded.meta()["links"], *step_bounds(recorded, step))
        assert result["suspects"] == [], (step, result["suspects"])


def _windows(store: TelemetryStore, exp: Expected, t_ns: int) -> list[dict]:
    """The campaign's looks after an injection at ``t_ns``: from it to the end of each of the next steps."""
    base = store.db.execute("SELECT max(step) FROM steps WHERE t1_ns <= ?", (t_ns,)).fetchone()[0]
    out = []
    for k in range(1, WINDOW_STEPS + 1):
        end = store.db.execute("SELECT max(t1_ns) FROM steps WHERE step = ?", (base + k,)).fetchone()[0]
        out.append(window_diagnosis(store, exp, store.meta()["links"], t_ns, end))
    return out


@pytest.mark.parametrize(("action", "kind", "place", "evidence"), [
    ("loss", "lossy_link", "s0<->p0l0", "retransmitted"),
    ("slow_nic", "slow_nic", "s0-eth0", "paces its port at"),
    ("flap", "flapping_link", "p0l0<->sp0", "came back"),
    ("link_down", "down_link", "p0l0<->sp1", "is down"),
    ("slow_link", "degraded_link", "s3<->p0l0", ""),
    ("switch_stop", "dead_switch", "sp1", "state"),
    ("slow_gpu", "slow_gpu", "rank 2", "own healthy median"),
])
def test_each_injected_fault_is_named_first_within_three_steps(recorded: TelemetryStore, expected: Expected,
                                                               action: str, kind: str, place: str,
                                                               evidence: str) -> None:
    faults = [f for f in recorded.faults() if f["action"] == action]
    assert len(faults) == 1
    tops = [w["suspects"][0] for w in _windows(recorded, expected, faults[0]["t_ns"]) if w["suspects"]]
    hit = next((t for t in tops if (t["kind"], t["place"]) == (kind, place)), None)
    assert hit is not None, tops
    assert any(evidence in line for line in hit["evidence"]) and 0 < hit["confidence"] <= 1, hit


def test_lossy_link_evidence_names_the_rank_its_peers_and_no_switch_drops(recorded: TelemetryStore,
                                                                          expected: Expected) -> None:
    fault = next(f for f in recorded.faults() if f["action"] == "loss")
    top = _windows(recorded, expected, fault["t_ns"])[0]["suspects"][0]
    assert top["kind"] == "lossy_link" and top["severity"] > 0
    assert "rank 0 (NIC s0-eth0)" in top["evidence"][0]            # its rail peers: the ranks it lost frames with
    assert "(ranks 2, 4, 6)" in top["evidence"][1] and "lost on the wire" in top["evidence"][2]


CONGESTED = Path(__file__).with_name("data") / "campaign_4x2_seed3_congested.sqlite.gz"


def test_foreign_traffic_into_a_leaf_port_is_a_congested_port_not_a_slow_link(tmp_path: Path) -> None:
    """A recorded campaign of two ``congest`` faults (4x2, dilation 20, seed 3, ``--kinds congested_port``): UDP
    from another NIC of the rail at 92 % and 98 % of the link's rate into s3-eth1 and s0-eth0.  Quiet healthy steps;
    each named first as the leaf's port toward that NIC, with its queue and its full rate as evidence, in the window
    the campaign judged: the 0.48 s (network) after the injection, when it found it and stopped the traffic (the
    job's steps stalled longer than that: a window to a step's end would hold the recovery too)."""
    path = tmp_path / "run.sqlite"
    path.write_bytes(gzip.decompress(CONGESTED.read_bytes()))
    store = TelemetryStore(path)
    exp = calibrate(store.steps(), store.collectives(), store.port_polls(), 1, 3, store.nic_counters())
    for step in (4, 5):
        assert window_diagnosis(store, exp, store.meta()["links"], *step_bounds(store, step))["suspects"] == []
    faults = store.faults()
    assert [(f["action"], f["target"]) for f in faults] == [("congest", "s3-eth1"), ("congest", "s0-eth0")]
    for fault, place in zip(faults, ("p0l1 port 4", "p0l0 port 1"), strict=True):
        suspects = window_diagnosis(store, exp, store.meta()["links"], fault["t_ns"],
                                    fault["t_ns"] + 480_000_000)["suspects"]
        hit = suspects[0]
        assert (hit["kind"], hit["place"]) == ("congested_port", place), suspects
        assert any("queue" in line for line in hit["evidence"]) and "more traffic than the link carries" in \
            hit["evidence"][-1] and hit["severity"] >= 0.75
