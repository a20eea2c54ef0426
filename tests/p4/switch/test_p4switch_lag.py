"""The switch's lag accounting (issue 16): ingress and TM lateness in ``lag_stats``, its bound following the
shaped port rate, a stalled switch (SIGSTOP while frames arrive) reported as late, not as fine, and
``--no-lag-accounting`` (the ring's once-per-batch timestamps: test_p4switch_ports)."""

from __future__ import annotations

import json
import signal
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import FEATURES_P4, host_ip, host_mac

from p4.errors import CommandError
from p4.switch.switch_lag import parse_lag_json
from sw.clock.lag import mtu_serialization_ns

pytestmark = pytest.mark.emu

ROUTES = "\n".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {host_ip(i)}/32 => {host_mac(i)} {i}"
                   for i in range(1, 3)) + "\n"


def frames(n: int) -> list[bytes]:
    return [bytes(Ether(src=host_mac(1), dst="02:00:00:00:00:fe") / IP(src=host_ip(1), dst=host_ip(2), id=i)
                  / UDP(sport=1, dport=2) / bytes(200)) for i in range(n)]


def test_lag_stats_counts_ingress_and_tm_and_reports_a_stall(switch_lab) -> None:
    switch_lab.start(FEATURES_P4, commands=ROUTES + "set_port_rate 2 100M\n")
    lag = parse_lag_json(switch_lab.cli("lag_stats json"))
    assert set(lag) == {"ingress", "tm"}
    assert lag["tm"].bound_ns == mtu_serialization_ns(100e6)         # follows the shaped port's line rate
    switch_lab.send(1, frames(50))
    assert len(switch_lab.recv(2, want=50)) >= 50
    lag = parse_lag_json(switch_lab.cli("lag_stats json"))
    assert lag["ingress"].events >= 50 and lag["tm"].events >= 49     # the first may cut through
    table = switch_lab.cli("lag_stats")
    assert table.splitlines()[0].split()[:3] == ["component", "events", "late"] and "ingress" in table

    switch_lab.cli("lag_stats bound 1000000")                          # 1 ms network time
    switch_lab.cli("lag_stats reset")
    switch_lab.proc.send_signal(signal.SIGSTOP)                        # the switch starved of CPU for 0.3 s
    try:
        switch_lab.send(1, frames(20))
        time.sleep(0.3)
    finally:
        switch_lab.proc.send_signal(signal.SIGCONT)
    assert len(switch_lab.recv(2, want=20)) >= 20
    late = parse_lag_json(switch_lab.cli("lag_stats json"))["ingress"]
    assert late.events >= 20 and late.max_ns >= 250_000_000 and not late.ok
    assert json.loads(switch_lab.cli("lag_stats json"))["ingress"]["bound_ns"] == 1_000_000
    for bad in ("lag_stats bound 0", "lag_stats bound x", "lag_stats nope"):
        with pytest.raises(CommandError, match="usage: lag_stats"):
            switch_lab.cli(bad)
    assert switch_lab.stop() == 0


def test_no_lag_accounting_forwards_and_lag_stats_refuses(switch_lab) -> None:
    switch_lab.start(FEATURES_P4, "--no-lag-accounting", commands=ROUTES)
    switch_lab.send(1, frames(10))
    assert len(switch_lab.recv(2, want=10)) >= 10
    for cmd in ("lag_stats", "lag_stats json"):        # no figures rather than empty ones ("never late")
        with pytest.raises(CommandError, match="--no-lag-accounting"):
            switch_lab.cli(cmd)
    assert switch_lab.stop() == 0
