"""INT evidence on recorded data: the store of a real 8-kind campaign with INT collection on (4 servers x 2
rails, 2 spines, PFC on, dilation 20, seed 30, load average 13-16, fidelity not ok;
``data/campaign_4x2_seed30_int.sqlite.gz``): its sampled hop records came from every leaf's host ports with the RoCE
QP of their flow; the healthy steps raise no alarm with them; every fault's kind and place is still named first
within the 3 steps after it, and the 30 % cut of ``s2<->p0l0`` carries the INT line of the leaf port toward s2,
whose hop latency grew."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.expected import Expected
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

WINDOW_STEPS = 3


@pytest.fixture(scope="module")
def run(recorded_calibrated: Callable[[str], tuple[TelemetryStore, Expected]]) -> tuple[TelemetryStore, Expected]:
    return recorded_calibrated("campaign_4x2_seed30_int.sqlite.gz")


@pytest.fixture(scope="module")
def recorded(run: tuple[TelemetryStore, Expected]) -> TelemetryStore:
    return run[0]


@pytest.fixture(scope="module")
def expected(run: tuple[TelemetryStore, Expected]) -> Expected:
    return run[1]


def test_the_hop_rows_come_from_the_leaves_host_ports_with_their_flows(recorded: TelemetryStore,
                                                                      expected: Expected) -> None:
    rows = recorded.int_hops()
    assert len(rows) > 1000 and recorded.meta()["int_report_every"] == 64
    host_ports = {(lk["b"], lk["b_port"]) for lk in recorded.meta()["links"] if lk["kind"] == "host-leaf"}
    last: dict[tuple, dict] = {}                 # per report (its hops share the time and the flow): the sink's hop
    for r in rows:
        key = (r["t_ns"], r["src"], r["dst"], r["sport"])
        if key not in last or r["hop"] > last[key]["hop"]:
            last[key] = r
    assert {(r["switch"], r["egress_port"]) for r in last.values()} == host_ports
    assert all(r["qp"] >= 0 and r["dport"] == 4791 for r in rows)
    assert set(expected.int_ports) <= {(r["switch"], r["egress_port"]) for r in rows}
    for step in range(4, 7):
        result = window_diagnosis(recorded, expected, recorded.meta()["links"], *step_bounds(recorded, step))
        assert result["suspects"] == [] and result["symptoms"]["int_hop_records"] > 0, step


def _first_hit(store: TelemetryStore, exp: Expected, t_ns: int, kind: str, place: str) -> dict | None:
    """The campaign's looks after an injection: the first top suspect of its kind and place within 3 steps."""
    base = store.db.execute("SELECT max(step) FROM steps WHERE t1_ns <= ?", (t_ns,)).fetchone()[0]
    for k in range(1, WINDOW_STEPS + 1):
        end = store.db.execute("SELECT max(t1_ns) FROM steps WHERE step = ?", (base + k,)).fetchone()[0]
        suspects = window_diagnosis(store, exp, store.meta()["links"], t_ns, end)["suspects"]
        if suspects and (suspects[0]["kind"], suspects[0]["place"]) == (kind, place):
            return suspects[0]
    return None


@pytest.mark.parametrize(("action", "kind", "place"), [
    ("flap", "flapping_link", "p0l1<->sp1"), ("link_down", "down_link", "p0l0<->sp0"),
    ("slow_nic", "slow_nic", "s1-eth1"), ("pfc_storm", "pfc_storm", "s3<->p0l0"), ("loss", "lossy_link", "s1<->p0l0"),
    ("slow_gpu", "slow_gpu", "rank 1"), ("switch_stop", "dead_switch", "sp0"),
    ("slow_link", "degraded_link", "s2<->p0l0"),
])
def test_each_fault_keeps_its_verdict_with_int_rows(recorded: TelemetryStore, expected: Expected, action: str,
                                                    kind: str, place: str) -> None:
    (fault,) = [f for f in recorded.faults() if f["action"] == action]
    hit = _first_hit(recorded, expected, fault["t_ns"], kind, place)
    assert hit is not None
    if kind == "degraded_link":
        (line,) = [x for x in hit["evidence"] if x.startswith("INT:")]
        assert line.startswith("INT: p0l0 port 3 (toward s2): hop latency p90") and "latency grew" in line
