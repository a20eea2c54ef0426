"""The switch's lag accounting (issue 16): ingress and TM lateness in ``lag_stats``, its bound following the
shaped port rate, a stalled switch (SIGSTOP while frames arrive) reported as late, not as fine; the receive
ring's once-per-batch timestamps (first and last slot, every slot given back); ``--no-lag-accounting``."""

from __future__ import annotations

import json
import select
import signal
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import FEATURES_P4, host_ip, host_mac

from emu.netns import NetnsLab
from p4.errors import CommandError
from p4.switch.ports import RING_BYTES_ENV, SwitchPort
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


def _batches(port: SwitchPort, want: int, max_frames: int) -> list[tuple[list[bytes], int, int]]:
    """Receive batches until ``want`` frames came: each with the port's first/last kernel stamp after it."""
    out: list[tuple[list[bytes], int, int]] = []
    deadline = time.monotonic() + 10
    while sum(len(b) for b, _, _ in out) < want and time.monotonic() < deadline:
        select.select([port], [], [], 0.1)
        got = port.recv_batch(max_frames)
        if got:
            out.append((got, port.rx_first_ts_ns, port.rx_last_ts_ns))
    return out


def test_ring_stamps_each_batch_by_its_first_and_last_slot_and_gives_every_slot_back(raw_socket,
                                                                                    monkeypatch) -> None:
    """A two-slot ring: a slot whose release the timestamp read deferred and never made would stall the ring
    after the first batch (kernel drops); every batch's stamps lie between its sends and its receive, in order."""
    monkeypatch.setenv(RING_BYTES_ENV, "4096")
    with NetnsLab() as lab:
        h1 = lab.add_host("h1")
        root_if = f"{lab.prefix}p1"
        lab.add_link(None, h1, ifname_a=root_if, ifname_b="eth0")
        h1.cmd("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        port = SwitchPort(1, root_if)
        try:
            assert port._frames == 2                                   # the ring is as small as the test needs
            host_sock = raw_socket(h1.name, "eth0")
            sent: list[bytes] = []
            got: list[bytes] = []
            prev_last_ns = 0
            for rnd in range(40):
                pair = [(b"\x02\xaa\xbb\xcc\xdd\x01\x02\x00\x00\x00\x00\x01\x88\xb5"
                         + (2 * rnd + k).to_bytes(4, "big")).ljust(64, b"\0") for k in range(2)]
                before_ns = time.time_ns()
                for f in pair:
                    host_sock.send(f)
                batches = _batches(port, 2, 1 if rnd % 2 else 64)     # odd rounds: one frame per batch
                after_ns = time.time_ns()
                sent += pair
                for frames, first_ns, last_ns in batches:
                    got += frames
                    assert before_ns <= first_ns <= last_ns <= after_ns
                    assert prev_last_ns <= first_ns                    # batches in the ring's order
                    if len(frames) == 1:
                        assert first_ns == last_ns                     # one slot: first and last are it
                    prev_last_ns = last_ns
            assert got == sent
            assert port.poll_kernel_drops() == 0 and port.counters.rx_pkts == 80
        finally:
            port.close()
        off = SwitchPort(2, root_if, rx_timestamps=False)              # --no-lag-accounting's ports
        try:
            host_sock.send(sent[0])
            assert [f for b, _, _ in _batches(off, 1, 64) for f in b] == [sent[0]]
            assert off.rx_first_ts_ns == 0 == off.rx_last_ts_ns
        finally:
            off.close()


def test_no_lag_accounting_forwards_and_lag_stats_refuses(switch_lab) -> None:
    switch_lab.start(FEATURES_P4, "--no-lag-accounting", commands=ROUTES)
    switch_lab.send(1, frames(10))
    assert len(switch_lab.recv(2, want=10)) >= 10
    for cmd in ("lag_stats", "lag_stats json"):        # no figures rather than empty ones ("never late")
        with pytest.raises(CommandError, match="--no-lag-accounting"):
            switch_lab.cli(cmd)
    assert switch_lab.stop() == 0
