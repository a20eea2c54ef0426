"""The operations telemetry store: one SQLite file per fabric run (WAL mode), written by ranks and switch pollers
and read by ``starpulse ops``.  A leaf, so ranks (``sw.workload``), the fabric (``emu``) and the top can all use it.

Times are network ns on the box's common time base (``Clock.box_ns``), so records of different processes line up.
WAL lets many writer processes append (each commit is one short lock) while a reader queries a consistent
snapshot; ``busy_timeout`` absorbs the writers' brief contention.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ENV_TELEMETRY_DB = "STARPULSE_TELEMETRY_DB"
"""The store a launched job's ranks record into (set by ``starpulse train`` on a fabric with ops on)."""
BUSY_TIMEOUT_MS = 30_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (rank INTEGER NOT NULL, step INTEGER NOT NULL, server INTEGER NOT NULL,
    gpu INTEGER NOT NULL, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL, compute_ns INTEGER NOT NULL,
    comm_busy_ns INTEGER NOT NULL, exposed_comm_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL,
    PRIMARY KEY (rank, step));
CREATE TABLE IF NOT EXISTS collectives (rank INTEGER NOT NULL, step INTEGER NOT NULL, seq INTEGER NOT NULL,
    op TEXT NOT NULL, nbytes INTEGER NOT NULL, algo TEXT NOT NULL, post_ns INTEGER NOT NULL,
    start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, wait_ns INTEGER NOT NULL, PRIMARY KEY (rank, step, seq));
CREATE TABLE IF NOT EXISTS ports (t_ns INTEGER NOT NULL, switch TEXT NOT NULL, port INTEGER NOT NULL,
    peer TEXT NOT NULL, up INTEGER NOT NULL, tx_bytes INTEGER NOT NULL, tx_pkts INTEGER NOT NULL,
    rx_bytes INTEGER NOT NULL, drops INTEGER NOT NULL, ecn_marks INTEGER NOT NULL, pfc_pauses INTEGER NOT NULL,
    qdepth_pkts INTEGER NOT NULL, high_water_pkts INTEGER NOT NULL, pfc_pauses_rx INTEGER NOT NULL DEFAULT 0,
    pfc_paused_ns INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS ports_t ON ports (t_ns);
CREATE TABLE IF NOT EXISTS switches (t_ns INTEGER NOT NULL, switch TEXT NOT NULL, state TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS switches_t ON switches (t_ns);
CREATE TABLE IF NOT EXISTS faults (t_ns INTEGER NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
    value TEXT);
CREATE TABLE IF NOT EXISTS nics (rank INTEGER NOT NULL, step INTEGER NOT NULL, t_ns INTEGER NOT NULL,
    peer INTEGER NOT NULL, tx_pkts INTEGER NOT NULL, retx_pkts INTEGER NOT NULL, oos_pkts INTEGER NOT NULL,
    timeouts INTEGER NOT NULL, cnps_rx INTEGER NOT NULL, rate_bps INTEGER NOT NULL, line_rate_bps INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS nics_t ON nics (t_ns);
CREATE TABLE IF NOT EXISTS int_hops (t_ns INTEGER NOT NULL, switch TEXT NOT NULL, node_id INTEGER NOT NULL,
    hop INTEGER NOT NULL, ingress_port INTEGER NOT NULL, egress_port INTEGER NOT NULL,
    hop_latency_ns INTEGER NOT NULL, queue_id INTEGER NOT NULL, queue_pkts INTEGER NOT NULL, src TEXT NOT NULL,
    dst TEXT NOT NULL, sport INTEGER NOT NULL, dport INTEGER NOT NULL, qp INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS int_hops_t ON int_hops (t_ns);
"""

PORT_FIELDS = ("switch", "port", "peer", "up", "tx_bytes", "tx_pkts", "rx_bytes", "drops", "ecn_marks",
               "pfc_pauses", "qdepth_pkts", "high_water_pkts", "pfc_pauses_rx", "pfc_paused_ns")
"""A switch port at a poll (cumulative counters): ``pfc_pauses`` counts PFC pause frames sent and received,
``pfc_pauses_rx`` those received, ``pfc_paused_ns`` how long received pauses held its egress queues (network ns;
both 0 in a store older than the columns)."""
STEP_FIELDS = ("rank", "step", "server", "gpu", "t0_ns", "t1_ns", "compute_ns", "comm_busy_ns", "exposed_comm_ns",
               "wait_ns")
COLL_FIELDS = ("rank", "step", "seq", "op", "nbytes", "algo", "post_ns", "start_ns", "end_ns", "wait_ns")
NIC_FIELDS = ("rank", "step", "t_ns", "peer", "tx_pkts", "retx_pkts", "oos_pkts", "timeouts", "cnps_rx", "rate_bps",
              "line_rate_bps")
"""A rank's RoCE NIC at ``t_ns`` during (or at the end of) ``step``, per remote peer (its QP): packets sent,
retransmitted, received out of sequence, retransmission timeouts and CNPs received since its previous row
(deltas), and the NIC port's pacing and line rate."""
INT_FIELDS = ("t_ns", "switch", "node_id", "hop", "ingress_port", "egress_port", "hop_latency_ns", "queue_id",
              "queue_pkts", "src", "dst", "sport", "dport", "qp")
"""One switch's INT metadata from a sampled report (``emu.int_collect``): when the collector received it, the
switch (name and INT node id), its place on the path (0: the first switch), ingress and egress port, hop latency
(network ns queued), queue id and occupancy (packets), and the flow: addresses, UDP ports, RoCE destination QP
(-1: not RoCE)."""
TABLES = ("steps", "collectives", "ports", "switches", "faults", "nics", "int_hops")


class TelemetryError(ValueError):
    """A store that does not exist or is not one of ours: the message names the file."""

    is_user_error = True


class TelemetryStore:
    """One run's store: ``create`` makes the file (and its schema) when missing, else it must exist."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise TelemetryError(f"{self.path}: no telemetry store there (is ops collection on for that fabric?)")
        try:
            self.db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                      check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if create:
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.executescript(SCHEMA)
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("SELECT count(*) FROM steps").fetchone()
        except sqlite3.DatabaseError as exc:
            raise TelemetryError(f"{self.path}: not a telemetry store ({exc})") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TelemetryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writers ---------------------------------------------------------------------------------------------
    def set_meta(self, **items: Any) -> None:
        """Run-wide facts (topology, dilation, origin); values are stored as JSON."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in items.items()])

    def add_step(self, step: Mapping[str, int], collectives: Iterable[Mapping[str, Any]],
                 nics: Iterable[Mapping[str, int]] = ()) -> None:
        """One rank's step, the collectives it ran in it and its NIC's counters (``NIC_FIELDS``), in one
        transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(f"INSERT OR REPLACE INTO steps VALUES ({','.join('?' * len(STEP_FIELDS))})",
                            [int(step[k]) for k in STEP_FIELDS])
            self.db.executemany(f"INSERT OR REPLACE INTO collectives VALUES ({','.join('?' * len(COLL_FIELDS))})",
                                [[c[k] for k in COLL_FIELDS] for c in collectives])
            self._insert_nics(nics)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def add_nics(self, nics: Iterable[Mapping[str, int]]) -> None:
        """NIC rows sampled between step ends (a stalled step's NIC still reports)."""
        with self.db:
            self._insert_nics(nics)

    def _insert_nics(self, nics: Iterable[Mapping[str, int]]) -> None:
        self.db.executemany(f"INSERT INTO nics VALUES ({','.join('?' * len(NIC_FIELDS))})",
                            [[int(n[k]) for k in NIC_FIELDS] for n in nics])

    def add_poll(self, t_ns: int, ports: Iterable[Mapping[str, Any]], switches: Mapping[str, str]) -> None:
        """One poll of the switches: every port's cumulative counters and every switch's state at ``t_ns``."""
        with self.db:
            self.db.executemany(f"INSERT INTO ports VALUES (?, {','.join('?' * len(PORT_FIELDS))})",
                                [[t_ns, *(p[k] for k in PORT_FIELDS)] for p in ports])
            self.db.executemany("INSERT INTO switches VALUES (?, ?, ?)",
                                [(t_ns, name, state) for name, state in switches.items()])

    def add_int_hops(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Hop records of INT reports (``INT_FIELDS``), one transaction."""
        with self.db:
            self.db.executemany(f"INSERT INTO int_hops VALUES ({','.join('?' * len(INT_FIELDS))})",
                                [[r[k] for k in INT_FIELDS] for r in rows])

    def add_fault(self, t_ns: int, action: str, target: str, value: str | None) -> None:
        """An injected fault (the campaign's ground truth; diagnosis never reads it)."""
        with self.db:
            self.db.execute("INSERT INTO faults VALUES (?, ?, ?, ?)", (t_ns, action, target, value))

    # --- readers ---------------------------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, tuple(args))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def steps(self, since_ns: int = 0) -> list[dict[str, Any]]:
        """Every rank's steps that ended at or after ``since_ns``, by step then rank."""
        return self._rows("SELECT * FROM steps WHERE t1_ns >= ? ORDER BY step, rank", (since_ns,))

    def collectives(self, since_ns: int = 0) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM collectives WHERE end_ns >= ? ORDER BY step, seq, rank", (since_ns,))

    def port_polls(self, since_ns: int = 0) -> list[dict[str, Any]]:
        """Port samples at or after ``since_ns`` by time (cumulative counters: deltas are the reader's job)."""
        return self._rows("SELECT * FROM ports WHERE t_ns >= ? ORDER BY t_ns, switch, port", (since_ns,))

    def switch_polls(self, since_ns: int = 0) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM switches WHERE t_ns >= ? ORDER BY t_ns, switch", (since_ns,))

    def nic_counters(self, since_ns: int = 0) -> list[dict[str, Any]]:
        """NIC rows (per rank, step and peer: that step's deltas) recorded at or after ``since_ns``; none from a
        store older than the table."""
        if not self._has("nics"):
            return []
        return self._rows("SELECT * FROM nics WHERE t_ns >= ? ORDER BY t_ns, rank, peer", (since_ns,))

    def int_hops(self, since_ns: int = 0, until_ns: int | None = None) -> list[dict[str, Any]]:
        """INT hop records received in [since, until] by time; none from a store older than the table (no INT)."""
        if not self._has("int_hops"):
            return []
        return self._rows("SELECT * FROM int_hops WHERE t_ns >= ? AND t_ns <= ? ORDER BY t_ns, switch, hop",
                          (since_ns, 2**62 if until_ns is None else until_ns))

    def _has(self, table: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                               (table,)).fetchone() is not None

    def faults(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM faults ORDER BY t_ns")

    def counts(self) -> dict[str, int]:
        """Rows per table (how much a run recorded)."""
        return {t: int(self.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES if self._has(t)}
