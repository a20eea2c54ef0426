"""The congested-port rule on constructed telemetry rows (four servers on one rail, leaf p0l0): a leaf port toward
a NIC that sends at 70 % of its link's rate with a grown queue, twice what the leaf's other NIC ports send (the
job sends every NIC of the rail as much, so half of it is not the job's), while the others wait on the rank behind
it, is a ``congested_port`` even when the job is not slow overall (another tenant shares the port); the same port
sending less than its siblings with the job slow stays a ``degraded_link`` (a rate cut), and without the job slowing
or waiting the shared port raises nothing (load)."""

from __future__ import annotations

from typing import Any

import pytest

from sw.ops.diagnose import _where, diagnose, foreign_shares
from sw.ops.expected import AlphaBeta, Expected, PortLevel, port_deltas

pytestmark = pytest.mark.unit

RATE_BPS = 100_000_000
STEP_NS = 10_000_000
SERVERS = 4
LINKS = [{"a": f"s{i}", "b": "p0l0", "kind": "host-leaf", "a_ifname": f"s{i}-eth0", "a_port": 0, "b_port": i + 1,
          "rate_bps": RATE_BPS} for i in range(SERVERS)]
STEPS = (10, 11, 12)
T0 = 1_000_000_000
COLL_NS = 2_000_000
JOB_UTIL = 0.35
"""The share of its link's rate every leaf port toward a NIC sends of the job's traffic."""


def _expected() -> Expected:
    return Expected(first_step=1, last_step=3, compute_ns=dict.fromkeys(range(SERVERS), 5e6), step_ns=STEP_NS,
                    collectives={"alltoall": AlphaBeta(0.0, COLL_NS / 1_000_000)},
                    ports={("p0l0", i + 1): PortLevel(qdepth_max=4, high_water_pkts=6) for i in range(SERVERS)})


def _rows(step_x: float, waited: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Steps (``step_x`` of healthy) and their all-to-alls; with ``waited`` rank 1 posts each one late."""
    steps, colls = [], []
    for i, step in enumerate(STEPS):
        t0 = T0 + int(i * STEP_NS * step_x)
        t1 = t0 + int(STEP_NS * step_x)
        for rank in range(SERVERS):
            steps.append({"rank": rank, "step": step, "server": rank, "gpu": 0, "t0_ns": t0, "t1_ns": t1,
                          "compute_ns": 5_000_000, "comm_busy_ns": 0, "exposed_comm_ns": 0, "wait_ns": 0})
            for seq in range(3):
                post = t0 + seq * 2 * COLL_NS + (3 * COLL_NS if waited and rank == 1 else 0)
                colls.append({"rank": rank, "step": step, "seq": seq, "op": "alltoall", "nbytes": 1_000_000,
                              "algo": "", "post_ns": post, "start_ns": post, "end_ns": post + COLL_NS,
                              "wait_ns": 0})
    return steps, colls


def _polls(steps: list[dict[str, Any]], port2_util: float, queue: int) -> list[dict[str, Any]]:
    """Polls every 5 ms over the steps: port 2 (toward s1, rank 1) at ``port2_util`` of its rate with its queue at
    ``queue``, the other NIC ports at the job's ``JOB_UTIL`` with short queues."""
    t_first, t_last = steps[0]["t0_ns"], max(s["t1_ns"] for s in steps)
    out = []
    for k, t in enumerate(range(t_first, t_last + 1, 5_000_000)):
        dt = (t - t_first) / 1e9
        for port in range(1, SERVERS + 1):
            util, q = (port2_util, queue) if port == 2 else (JOB_UTIL, 2)
            out.append({"t_ns": t, "switch": "p0l0", "port": port, "peer": f"s{port - 1}", "up": 1,
                        "tx_bytes": int(util * RATE_BPS / 8 * dt), "tx_pkts": int(util * RATE_BPS / 8 / 1000 * dt),
                        "rx_bytes": 0, "drops": 0, "ecn_marks": 0, "pfc_pauses": 0, "qdepth_pkts": q if k else 0,
                        "high_water_pkts": q if k else 6, "pfc_pauses_rx": 0, "pfc_paused_ns": 0})
    return out


def _diagnose(step_x: float, waited: bool, port2_util: float, queue: int = 60) -> dict[str, Any]:
    steps, colls = _rows(step_x, waited)
    return diagnose(_expected(), LINKS, steps, colls, _polls(steps, port2_util, queue), [], [])


def test_the_foreign_share_of_a_port_is_what_it_sends_beyond_its_leafs_other_nic_ports() -> None:
    steps, _ = _rows(1.0, False)
    shares = foreign_shares(port_deltas(_polls(steps, 0.7, 60)), LINKS, _where(steps, LINKS))
    rank, share, bps, job_bps = shares[("p0l0", 2)]
    assert rank == 1 and share == pytest.approx(0.5, abs=0.01) and bps == pytest.approx(2 * job_bps, rel=0.01)
    assert shares[("p0l0", 1)][1] == 0.0                               # a port sending the job's rate: none
    assert foreign_shares(port_deltas(_polls(steps, 0.7, 60)), LINKS[:2], _where(steps, LINKS)) == {}  # 1 sibling


def test_a_port_shared_with_foreign_traffic_is_a_congested_port_while_its_rank_is_waited_on() -> None:
    result = _diagnose(step_x=1.1, waited=True, port2_util=0.7)
    top = result["suspects"][0]
    assert (top["kind"], top["place"]) == ("congested_port", "p0l0 port 2"), result["suspects"]
    assert any("50 % of what p0l0 port 2 sent was not the job's" in line for line in top["evidence"])
    assert any("its link is shared, not slow" in line for line in top["evidence"])
    assert any("waited on rank 1" in line for line in top["evidence"])     # the waiting joined this suspect
    assert all(s["place"] != "s1<->p0l0" for s in result["suspects"])


def test_a_rate_cut_port_sending_less_than_its_siblings_stays_a_degraded_link() -> None:
    result = _diagnose(step_x=1.6, waited=True, port2_util=0.3)
    top = result["suspects"][0]
    assert top["kind"] == "degraded_link" and top["place"] == "s1<->p0l0", result["suspects"]
    assert all(s["kind"] != "congested_port" for s in result["suspects"])


def test_foreign_traffic_with_the_job_neither_slow_nor_waiting_is_load() -> None:
    assert _diagnose(step_x=1.0, waited=False, port2_util=0.7)["suspects"] == []
