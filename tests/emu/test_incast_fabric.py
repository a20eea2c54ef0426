"""8 -> 1 RDMA WRITE incast through the P4 fabric (sw.roce.incast): every byte arrives with each congestion
control, HPCC runs on the INT the receiver echoes, and HPCC keeps the bottleneck queue and drops at or below
what the same incast does without congestion control."""

from __future__ import annotations

import os

import pytest

from sw.clock import ENV_DILATION, Clock
from sw.roce.incast import parse_args, run_incast

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    old = os.environ.get(ENV_DILATION)
    os.environ[ENV_DILATION] = "1000.0"  # 10 Gb/s of network rate = 10 Mb/s of wall rate
    try:
        args = parse_args(["--size", "256KiB", "--link-rate", "10G", "--base-rtt", "4us", "--qp-timeout", "8",
                           "--timeout", "0.5"])
        clock = Clock(1000.0)
        return {cc: run_incast(cc, args, clock) for cc in ("hpcc", "none")}
    finally:
        if old is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = old


def test_every_flow_arrives_exactly(runs):
    for cc, r in runs.items():
        assert r["data_ok"], f"{cc}: data did not verify"
        assert len(r["completion_ns"]) == 8 and all(t > 0 for t in r["completion_ns"])


def test_hpcc_runs_on_echoed_int_and_holds_the_queue(runs):
    hpcc, none = runs["hpcc"], runs["none"]
    assert hpcc["int_echoes"] > 0, "ACKs carried the forward path's INT back to the senders"
    assert none["int_echoes"] > 0, "the receiver echoes whatever the sender's CC"
    assert hpcc["drops"] <= none["drops"]
    assert hpcc["max_queue_pkts"] <= none["max_queue_pkts"]
    assert 0 < hpcc["jain"] <= 1.0 and 0 < hpcc["utilization"]
