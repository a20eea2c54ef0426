"""INT hop records in the store and in the diagnosis: the ``int_hops`` table round-trips; a store older than it
reads as no INT; on a recorded campaign store (``data/campaign_4x2_seed5.sqlite.gz``) given constructed INT rows
(healthy in the calibration steps, a deep queue at the leaf port toward s1 after its 25 % cut) the degraded link
keeps its verdict and gains the INT line; a healthy window with healthy INT rows raises nothing."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from sw.apps.ops_campaign import step_bounds, window_diagnosis
from sw.ops.expected import calibrate
from sw.ops.int_evidence import IntLevel, grown_hops, place_ports
from sw.units.telemetry import INT_FIELDS, TelemetryStore

pytestmark = pytest.mark.unit

DATA = Path(__file__).with_name("data") / "campaign_4x2_seed5.sqlite.gz"
LEAF_PORT_TO_S1 = 2          # p0l0's port toward s1 (the recorded store's links)


def _row(t_ns: int, latency_ns: int, queue: int, switch: str = "p0l0", port: int = LEAF_PORT_TO_S1) -> dict[str, Any]:
    return {"t_ns": t_ns, "switch": switch, "node_id": 1, "hop": 0, "ingress_port": 1, "egress_port": port,
            "hop_latency_ns": latency_ns, "queue_id": 0, "queue_pkts": queue, "src": "10.0.0.1",
            "dst": "10.0.0.2", "sport": 49152, "dport": 4791, "qp": 17}


def _copy(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return path


def _cut_window(store: TelemetryStore) -> tuple[int, int]:
    """From the 25 % cut of s1<->p0l0 to the end of the first step that started after it."""
    fault = next(f for f in store.faults() if f["action"] == "slow_link" and int(f["value"]) < 30_000_000)
    row = store.db.execute("SELECT max(t1_ns) FROM steps WHERE step = (SELECT min(step) FROM steps WHERE t0_ns >= ?)",
                           (fault["t_ns"],)).fetchone()
    return fault["t_ns"], int(row[0])


def test_int_rows_round_trip_and_count(tmp_path: Path) -> None:
    with TelemetryStore(tmp_path / "s.sqlite", create=True) as store:
        store.add_int_hops([_row(10, 5_000, 1), _row(20, 9_000, 3, port=1)])
        assert store.counts()["int_hops"] == 2
        got = store.int_hops(15)
        assert [tuple(r[k] for k in INT_FIELDS) for r in got] == [tuple(_row(20, 9_000, 3, port=1)[k]
                                                                        for k in INT_FIELDS)]
        assert store.int_hops(0, 15)[0]["t_ns"] == 10


def test_a_store_older_than_the_table_reads_as_no_int(tmp_path: Path) -> None:
    store = TelemetryStore(_copy(tmp_path, "old.sqlite"))
    assert store.int_hops() == [] and "int_hops" not in store.counts()
    exp = calibrate(store.steps(), store.collectives(), store.port_polls(), 1, 3, store.nic_counters(),
                    store.int_hops())
    assert exp.int_ports == {}
    result = window_diagnosis(store, exp, store.meta()["links"], *_cut_window(store))
    assert result["symptoms"]["int_hop_records"] == 0
    assert not any(line.startswith("INT:") for s in result["suspects"] for line in s["evidence"])


def test_a_grown_int_queue_joins_the_degraded_links_evidence_and_changes_no_verdict(tmp_path: Path) -> None:
    plain = TelemetryStore(_copy(tmp_path, "plain.sqlite"))
    store = TelemetryStore(_copy(tmp_path, "int.sqlite"), create=True)     # create: adds the int_hops table
    lo, _ = step_bounds(store, 1)
    _, hi = step_bounds(store, 3)
    since, until = _cut_window(store)
    healthy = [_row(t, 4_000 + t % 3 * 1_000, t % 2) for t in range(lo, hi, (hi - lo) // 40)]
    grown = [_row(t, 900_000, 25) for t in range(since, until, (until - since) // 12)]
    elsewhere = [_row(t, 3_000, 0, switch="p0l1", port=2) for t in range(since, until, (until - since) // 12)]
    store.add_int_hops(healthy + grown + elsewhere)
    links = store.meta()["links"]

    def run(s: TelemetryStore, window: tuple[int, int]) -> dict[str, Any]:
        exp = calibrate(s.steps(), s.collectives(), s.port_polls(), 1, 3, s.nic_counters(), s.int_hops())
        return window_diagnosis(s, exp, links, *window)

    before, after = run(plain, (since, until)), run(store, (since, until))
    assert [(x["kind"], x["place"], x["confidence"]) for x in after["suspects"]] == \
        [(x["kind"], x["place"], x["confidence"]) for x in before["suspects"]]
    top = after["suspects"][0]
    assert (top["kind"], top["place"]) == ("degraded_link", "s1<->p0l0")
    (line,) = [x for x in top["evidence"] if x.startswith("INT:")]
    assert f"p0l0 port {LEAF_PORT_TO_S1} (toward s1)" in line and "queue up to 25 pkts" in line
    assert "latency and queue grew" in line and "healthy p90" in line
    assert after["symptoms"]["int_hop_records"] == len(grown) + len(elsewhere)
    h_lo, h_hi = step_bounds(store, 5)
    store.add_int_hops([_row(t, 5_000, 1) for t in range(h_lo, h_hi, (h_hi - h_lo) // 5)])
    assert run(store, (h_lo, h_hi))["suspects"] == []


def test_the_ports_of_a_place_and_the_floors_of_an_idle_port() -> None:
    links = [{"a": "s1", "b": "p0l0", "a_port": 0, "b_port": 2, "kind": "host-leaf", "a_ifname": "s1-eth0"},
             {"a": "p0l0", "b": "sp0", "a_port": 5, "b_port": 1, "kind": "leaf-spine"}]
    assert place_ports(links, "s1<->p0l0") == place_ports(links, "s1-eth0") == [(("p0l0", 2), "s1")]
    assert place_ports(links, "sp0<->p0l0") == [(("p0l0", 5), "sp0"), (("sp0", 1), "p0l0")]
    assert place_ports(links, "p0l0 port 3") == [(("p0l0", 3), "")] and place_ports(links, "rank 2") == []
    idle = {("p0l0", 2): IntLevel(0.0, 0, 30)}
    assert grown_hops(idle, [_row(1, 19_000, 1)], links, "s1<->p0l0") == []          # under the floors
    (line,) = grown_hops(idle, [_row(1, 61_000, 1)], links, "s1<->p0l0")
    assert "latency grew" in line and "queue" not in line.split(":")[-1]
