"""8 -> 1 RDMA WRITE incast through the P4 fabric with PFC (sw.apps.incast_bench ``--pfc on``): without congestion
control and PFC on nothing is dropped and the leaf pauses the senders (their NICs honour it); PFC off drops;
DCQCN with PFC is lossless too and pauses far less, because it slows the senders before their ingress buffers
reach XOFF (both pause counts are printed).

Datacenter rates (10 Gb/s) at a time dilation of 10000: DCQCN's µs timers only mean something at such rates,
and the dilation keeps the Python NICs' wall-time latency at ~1 µs of network time."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from sw.apps.incast_bench import parse_args, run_incast
from sw.clock import ENV_DILATION, Clock

pytestmark = pytest.mark.emu

DILATION = 10000.0
COMMON = ["--size", "256KiB", "--link-rate", "10G", "--buffer", "1MiB", "--pfc-xoff", "32K", "--pfc-xon", "16K",
          "--pfc-headroom", "64K", "--timeout", "0.1"]


def incast(cc: str, pfc: str) -> dict[str, Any]:
    args = parse_args([*COMMON, "--pfc", pfc])
    return run_incast(cc, args, Clock(DILATION))   # its own clock: the process-wide one may run at another dilation


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    old = os.environ.get(ENV_DILATION)
    os.environ[ENV_DILATION] = repr(DILATION)     # the switch processes inherit it
    try:
        out = {"none_pfc": incast("none", "on"), "none_nopfc": incast("none", "off"),
               "dcqcn_pfc": incast("dcqcn", "on")}
    finally:
        if old is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = old
    keys = ("data_ok", "drops", "pfc_pauses_sent", "pfc_xoff_events", "pfc_headroom_drop_pkts", "ecn_marks", "cnps",
            "max_queue_pkts", "utilization", "jain", "completion_ns")
    print(json.dumps({name: {k: r[k] for k in keys} for name, r in out.items()}))
    return out


def test_pfc_on_without_cc_is_lossless_and_pauses(runs) -> None:
    r = runs["none_pfc"]
    assert r["data_ok"]
    assert r["drops"] == 0 and r["pfc_headroom_drop_pkts"] == 0
    assert r["pfc_pauses_sent"] > 0


def test_pfc_off_without_cc_drops(runs) -> None:
    r = runs["none_nopfc"]
    assert r["data_ok"] and r["drops"] > 0 and r["pfc_pauses_sent"] == 0


def test_dcqcn_with_pfc_is_lossless_and_pauses_less_than_no_cc(runs) -> None:
    r, none = runs["dcqcn_pfc"], runs["none_pfc"]
    assert r["data_ok"] and r["drops"] == 0
    assert r["ecn_marks"] > 0 and r["cnps"] > 0
    assert r["pfc_pauses_sent"] < none["pfc_pauses_sent"], (r["pfc_pauses_sent"], none["pfc_pauses_sent"])
