"""The namespace lab builds reachable hosts, emulates links, and removes exactly what it created."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from emu.netns import NetnsError, NetnsLab
from emu.wire import WireProfile

pytestmark = pytest.mark.emu


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _rtt_ms(ping_output: str) -> float:
    m = re.search(r"= [\d.]+/([\d.]+)/", ping_output)
    assert m, ping_output
    return float(m.group(1))


def test_two_hosts_ping_rate_limit_and_cleanup():
    before = _netns_names()
    with NetnsLab() as lab:
        h1, h2 = lab.add_host("h1"), lab.add_host("h2")
        lab.add_link(h1, h2, ifname_a="eth0", ifname_b="eth0", addr_a="10.250.0.1/24", addr_b="10.250.0.2/24")
        lab.shape_rate(h1, "eth0", 50_000_000)
        out = h1.cmd("ping", "-c", "2", "-i", "0.2", "-W", "2", "10.250.0.2")
        assert " 0% packet loss" in out
        assert "tbf" in h1.cmd("tc", "qdisc", "show", "dev", "eth0")
        proc = h2.popen(["sleep", "60"])
        assert {h1.name, h2.name} <= _netns_names()
    assert proc.poll() is not None, "lab must kill the processes it started"
    assert _netns_names() == before


def test_wired_link_adds_delay_and_counts_loss(tmp_path):
    before = _netns_names()
    stats = tmp_path / "wire.json"
    with NetnsLab() as lab:
        h1, h2 = lab.add_host("h1"), lab.add_host("h2")
        lab.add_wired_link(h1, h2, WireProfile(delay_ns=20_000_000), ifname_a="eth0", ifname_b="eth0",
                           addr_a="10.250.1.1/24", addr_b="10.250.1.2/24", stats_path=str(stats))
        out = h1.cmd("ping", "-c", "3", "-i", "0.2", "-W", "2", "10.250.1.2")
        assert " 0% packet loss" in out
        rtt_ms = _rtt_ms(out)
        assert 40.0 <= rtt_ms < 200.0, f"two 20 ms one-way delays should give ~40 ms RTT, got {rtt_ms}"
    counters = json.loads(stats.read_text())
    assert counters["a_to_b"]["tx_frames"] >= 3 and counters["b_to_a"]["tx_frames"] >= 3
    assert _netns_names() == before


def test_wired_link_loss_is_seeded_and_counted(tmp_path):
    stats = tmp_path / "wire.json"
    with NetnsLab() as lab:
        h1, h2 = lab.add_host("h1"), lab.add_host("h2")
        lab.add_wired_link(h1, h2, WireProfile(loss_pct=50.0), ifname_a="eth0", ifname_b="eth0",
                           addr_a="10.250.2.1/24", addr_b="10.250.2.2/24", stats_path=str(stats), seed=7)
        h1.cmd("ping", "-c", "20", "-i", "0.02", "-W", "1", "10.250.2.2", check=False)
    counters = json.loads(stats.read_text())
    lost = counters["a_to_b"]["lost_frames"] + counters["b_to_a"]["lost_frames"]
    assert lost > 0
    ab = counters["a_to_b"]
    assert ab["rx_frames"] == ab["tx_frames"] + ab["lost_frames"]


def test_cleanup_happens_on_failure():
    before = _netns_names()
    with pytest.raises(ZeroDivisionError):
        with NetnsLab() as lab:
            lab.add_host("x")
            1 / 0  # noqa: B018
    assert _netns_names() == before


def test_bad_interface_name_and_profile_are_clear():
    with NetnsLab() as lab:
        h = lab.add_host("h")
        with pytest.raises(NetnsError, match="longer than 15"):
            lab.add_link(h, None, ifname_a="a-very-long-interface-name", ifname_b="x0")
    with pytest.raises(ValueError, match="loss_pct=150"):
        WireProfile(loss_pct=150)
