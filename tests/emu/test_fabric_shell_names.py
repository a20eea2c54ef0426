"""How the fabric's CLI reads NIC names: s1 = rail 0 (or the other end's rail), s1:1 / s1-eth1 = rail 1, an
address names itself; in node commands only server names become addresses (interface names stay)."""

from __future__ import annotations

import pytest

from emu.fabric_shell import ShellError, resolve_nic, resolve_pair, substitute
from sw.collectives.fabric_topology import Topology, TopologySpec

pytestmark = pytest.mark.unit

TOPO = Topology(TopologySpec(servers=4, gpus_per_server=2, pods=2, spines=2))


@pytest.mark.parametrize(("token", "ifname"), [("s0", "s0-eth0"), ("s3:1", "s3-eth1"), ("s3-eth1", "s3-eth1"),
                                               ("10.1.1.2", "s3-eth1"), ("10.0.0.1", "s0-eth0")])
def test_names_pick_one_nic(token: str, ifname: str) -> None:
    assert resolve_nic(TOPO, token).ifname == ifname


@pytest.mark.parametrize(("token", "words"), [("s4", "servers s0..s3"), ("s1:2", "rails 0..1"), ("p0l0", "not a"),
                                              ("10.9.9.9", "not a"), ("s1:", "not a")])
def test_bad_names_say_what_is_allowed(token: str, words: str) -> None:
    with pytest.raises(ShellError, match=words):
        resolve_nic(TOPO, token)


def test_a_bare_server_follows_the_rail_the_other_end_names() -> None:
    pairs = {(a, b): tuple(n.ifname for n in resolve_pair(TOPO, a, b))
             for a, b in (("s0", "s1"), ("s0:1", "s1"), ("s0", "s1:1"), ("s0:0", "s1:1"), ("s0", "10.1.1.2"))}
    assert pairs == {("s0", "s1"): ("s0-eth0", "s1-eth0"), ("s0:1", "s1"): ("s0-eth1", "s1-eth1"),
                     ("s0", "s1:1"): ("s0-eth1", "s1-eth1"), ("s0:0", "s1:1"): ("s0-eth0", "s1-eth1"),
                     ("s0", "10.1.1.2"): ("s0-eth1", "s3-eth1")}


def test_node_commands_substitute_servers_not_interfaces() -> None:
    words = "ping -c 1 s2 s2:1 s2-eth1 p0l0 s9 -I 10.0.0.1".split()
    assert [substitute(TOPO, w) for w in words] == [
        "ping", "-c", "1", "10.1.0.1", "10.1.1.1", "s2-eth1", "p0l0", "s9", "-I", "10.0.0.1"]
