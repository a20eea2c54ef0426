"""8 -> 1 RDMA WRITE incast through the P4 fabric (sw.apps.incast_bench): every byte arrives with each congestion
control; DCQCN's loop is closed end to end (every CE mark the leaf sets reaches the receiver's NP, every CNP it
sends reaches its sender and is applied by that sender's reaction point); HPCC runs on the INT the receiver
echoes and keeps the bottleneck queue and drops at or below what the same incast does without congestion control.
Figures (utilization, fairness, completion times) are printed, not asserted: they depend on the machine's load."""

from __future__ import annotations

import json
import os

import pytest

from sw.apps.incast_bench import parse_args, run_incast
from sw.clock import ENV_DILATION, Clock

pytestmark = pytest.mark.emu

DILATION = 10000.0   # 10 Gb/s of network rate = 1 Mb/s of wall rate: the Python NICs' latency is ~1 us of network time


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    old = os.environ.get(ENV_DILATION)
    os.environ[ENV_DILATION] = repr(DILATION)
    try:
        args = parse_args(["--size", "128KiB", "--link-rate", "10G", "--timeout", "0.1"])
        out = {cc: run_incast(cc, args, Clock(DILATION)) for cc in ("dcqcn", "hpcc", "none")}
    finally:
        if old is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = old
    keys = ("drops", "utilization", "max_queue_pkts", "queue_p50_pkts", "queue_p99_pkts", "jain", "completion_ns",
            "ecn_marks", "cnps", "int_echoes", "fidelity")
    print(json.dumps({cc: {k: r[k] for k in keys} for cc, r in out.items()}))
    return out


def test_every_flow_arrives_exactly(runs):
    for cc, r in runs.items():
        assert r["data_ok"], f"{cc}: data did not verify"
        assert len(r["completion_ns"]) == 8 and all(t > 0 for t in r["completion_ns"])
        assert list(r["fidelity"]) == ["time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns",
                                       "worst_component", "ok"]
        assert r["fidelity"]["time_dilation"] == DILATION and r["fidelity"]["worst_component"] is not None


def test_dcqcn_closes_the_loop_through_the_fabric(runs):
    r = runs["dcqcn"]
    assert r["ecn_marks"] > 0 and r["ce_packets_rx"] == r["ecn_marks"], "every CE mark reached the receiver's NP"
    assert r["cnps"] > 0 and sum(r["cnps_received"]) == r["cnps"], "every CNP reached its sender"
    assert r["cnps_applied"] == r["cnps_received"], "each sender's reaction point acted on every CNP it got"
    assert all(n > 0 for n in r["cnps_received"]), "every flow was slowed"
    reactions = [c for name, c in r["lag_components"].items() if name.endswith(" cc reaction")]
    assert sum(c["events"] for c in reactions) == sum(r["cnps_received"]), "each CNP's reaction was timed"
    assert r["drops"] <= runs["none"]["drops"]


def test_hpcc_runs_on_echoed_int_and_holds_the_queue(runs):
    hpcc, none = runs["hpcc"], runs["none"]
    assert hpcc["int_echoes"] > 0, "ACKs carried the forward path's INT back to the senders"
    reactions = [c for name, c in hpcc["lag_components"].items() if name.endswith(" cc reaction")]
    assert sum(c["events"] for c in reactions) >= hpcc["int_echoes"], "each INT echo's reaction was timed"
    assert none["int_echoes"] > 0, "the receiver echoes whatever the sender's CC"
    assert hpcc["drops"] <= none["drops"]
    assert hpcc["max_queue_pkts"] <= none["max_queue_pkts"]
    assert 0 < hpcc["jain"] <= 1.0 and 0 < hpcc["utilization"]


def test_queue_depth_percentiles_sit_at_or_below_the_peak(runs):
    """The bottleneck's time-weighted depth p50/p99 (the switch's port_stats) beside its high-water mark."""
    for cc, r in runs.items():
        assert 0 <= r["queue_p50_pkts"] <= r["queue_p99_pkts"] <= r["max_queue_pkts"], cc
    assert runs["none"]["queue_p99_pkts"] > 0, "8 senders at line rate queue for more than 1 % of the incast"
