"""The operations telemetry store (``sw.units.telemetry``): WAL mode, a step and its collectives in one
transaction, polls read back in time order, a missing or foreign file one clear error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sw.units.telemetry import TelemetryError, TelemetryStore

pytestmark = pytest.mark.unit


def _step(rank: int, step: int, t0: int) -> dict[str, int]:
    return {"rank": rank, "step": step, "server": rank // 2, "gpu": rank % 2, "t0_ns": t0, "t1_ns": t0 + 100,
            "compute_ns": 60, "comm_busy_ns": 50, "exposed_comm_ns": 40, "wait_ns": 10}


def test_store_is_wal_and_reads_back_what_ranks_and_pollers_wrote(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TelemetryStore(path, create=True) as w:
        assert w.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        w.set_meta(origin_ns=5, links=[{"a": "s0", "b": "p0l0"}])
        coll = {"rank": 1, "step": 0, "seq": 0, "op": "allreduce", "nbytes": 4096, "algo": "ring", "post_ns": 1,
                "start_ns": 2, "end_ns": 90, "wait_ns": 30}
        nic = {"rank": 1, "step": 0, "t_ns": 100, "peer": 3, "tx_pkts": 40, "retx_pkts": 2, "oos_pkts": 1,
               "timeouts": 0, "cnps_rx": 5, "rate_bps": 30_000_000, "line_rate_bps": 100_000_000}
        w.add_step(_step(1, 0, 0), [coll], [nic])
        w.add_step(_step(0, 0, 10), [])
        w.add_poll(50, [{"switch": "p0l0", "port": 1, "peer": "s0", "up": 1, "tx_bytes": 10, "tx_pkts": 1,
                         "rx_bytes": 0, "drops": 0, "ecn_marks": 2, "pfc_pauses": 7, "qdepth_pkts": 3,
                         "high_water_pkts": 4, "pfc_pauses_rx": 5, "pfc_paused_ns": 1_500_000}],
                   {"p0l0": "running", "sp0": "dead"})
        w.add_fault(60, "slow_gpu", "1", "2.0")
    with TelemetryStore(path) as r:        # another process's view: a second connection
        assert r.meta() == {"origin_ns": 5, "links": [{"a": "s0", "b": "p0l0"}]}
        assert [(s["step"], s["rank"]) for s in r.steps()] == [(0, 0), (0, 1)]
        assert r.collectives()[0]["algo"] == "ring" and r.collectives()[0]["wait_ns"] == 30
        assert r.port_polls(51) == [] and r.port_polls(50)[0]["ecn_marks"] == 2
        assert (r.port_polls()[0]["pfc_pauses_rx"], r.port_polls()[0]["pfc_paused_ns"]) == (5, 1_500_000)
        assert {p["switch"]: p["state"] for p in r.switch_polls()} == {"p0l0": "running", "sp0": "dead"}
        assert r.faults()[0]["target"] == "1"
        assert r.nic_counters(101) == [] and r.nic_counters(100) == [nic]
        assert r.counts() == {"steps": 2, "collectives": 1, "ports": 1, "switches": 2, "faults": 1, "nics": 1,
                              "int_hops": 0}
        assert r.int_hops() == []


def test_a_failed_step_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    with TelemetryStore(tmp_path / "t.sqlite", create=True) as w:
        with pytest.raises(KeyError):
            w.add_step(_step(0, 0, 0), [{"rank": 0}])          # a collective without its fields
        assert w.counts()["steps"] == 0


def test_missing_or_foreign_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="no telemetry store there"):
        TelemetryStore(tmp_path / "none.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(TelemetryError, match="not a telemetry store"):
        TelemetryStore(tmp_path / "junk.sqlite")
    sqlite3.connect(tmp_path / "other.sqlite").execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(TelemetryError, match="not a telemetry store"):
        TelemetryStore(tmp_path / "other.sqlite")
