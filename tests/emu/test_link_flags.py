"""``emu.link_flags``: the operations poller's rtnetlink read of another namespace's links agrees with ``ip link``
(UP and LOWER_UP) as a veth peer goes down and up, and never moves this process's own namespace."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from emu.link_flags import NetnsLinks
from emu.netns import NetnsLab
from emu.ops_collect import link_carrier

pytestmark = pytest.mark.emu

_IP_LINK = re.compile(r"^\d+:\s+([^:@]+)[^<]*<([^>]*)>")


def _ip_carrier(host_name: str) -> dict[str, bool]:
    """What ``ip -o link show`` in the namespace says: interface -> UP and LOWER_UP among its flags."""
    text = subprocess.run(["ip", "netns", "exec", host_name, "ip", "-o", "link", "show"], capture_output=True,
                          text=True, check=True).stdout
    out = {}
    for line in text.splitlines():
        m = _IP_LINK.match(line)
        if m:
            flags = set(m.group(2).split(","))
            out[m.group(1)] = "UP" in flags and "LOWER_UP" in flags
    return out


def test_carrier_follows_the_peer_and_agrees_with_ip_link() -> None:
    own_ns = os.readlink("/proc/self/ns/net")
    with NetnsLab() as lab:
        a, b = lab.add_host("a"), lab.add_host("b")
        lab.add_link(a, b, ifname_a="sw-eth1", ifname_b="peer0")
        lab.add_link(a, b, ifname_a="sw-eth2", ifname_b="peer1")
        holder = a.popen([sys.executable, "-c", "import time; time.sleep(60)"])   # a process in a's namespace
        pid = holder.pid
        for _ in range(100):                      # `ip netns exec` has entered the namespace and exec'd python
            if os.readlink(f"/proc/{pid}/ns/net") != own_ns:
                break
            lab.clock.sleep_ns(20_000_000)
        links = NetnsLinks(pid)
        try:
            up = links.carrier()
            assert up == _ip_carrier(a.name), up
            assert up["sw-eth1"] is True and up["sw-eth2"] is True and "peer0" not in up
            b.cmd("ip", "link", "set", "peer0", "down")          # the far end down: no carrier here
            down = links.carrier()                               # the same kept socket, read again
            assert down == _ip_carrier(a.name), down
            assert down["sw-eth1"] is False and down["sw-eth2"] is True
            a.cmd("ip", "link", "set", "sw-eth2", "down")        # this end down administratively
            assert link_carrier(pid) == _ip_carrier(a.name) == {**down, "sw-eth2": False}
            b.cmd("ip", "link", "set", "peer0", "up")
            assert links.carrier()["sw-eth1"] is True
        finally:
            links.close()
    assert os.readlink("/proc/self/ns/net") == own_ns          # only the helper thread entered the namespace
    assert link_carrier(None) == {} and link_carrier(2 ** 22 + 12345) == {}   # no such process: nothing read
