"""The incast through the P4 fabric over RoCEv2 on IPv6 (`--ipv6`): every byte arrives, the leaf stamps INT on the
IPv6 frames and the receiver echoes it, so HPCC runs over IPv6 as over IPv4 and keeps the queue below the buffer."""

from __future__ import annotations

import ipaddress
import json
import os

import pytest

from sw.apps.incast_bench import parse_args, run_incast
from sw.clock import ENV_DILATION, Clock

pytestmark = pytest.mark.emu

DILATION = 10000.0


def test_hpcc_incast_over_ipv6_runs_on_int():
    old = os.environ.get(ENV_DILATION)
    os.environ[ENV_DILATION] = repr(DILATION)
    try:
        args = parse_args(["--size", "128KiB", "--senders", "4", "--link-rate", "10G", "--timeout", "0.1", "--ipv6"])
        r = run_incast("hpcc", args, Clock(DILATION))
    finally:
        if old is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = old
    print(json.dumps({k: r[k] for k in ("ip_version", "receiver_ip", "drops", "utilization", "max_queue_pkts", "jain",
                                        "int_echoes")}))
    assert r["ip_version"] == 6 and ipaddress.ip_address(r["receiver_ip"]).version == 6
    assert r["data_ok"] and len(r["completion_ns"]) == 4
    assert r["int_echoes"] > 0, "the leaf stamped INT on IPv6 frames and the receiver echoed it"
    assert r["drops"] == 0
    assert r["max_queue_pkts"] < r["queue_depth_pkts"]
