"""The fabric description: counts, port plan, addressing and routes follow the documented scheme."""

from __future__ import annotations

import ipaddress

import pytest

from sw.collectives.fabric_topology import Topology, TopologyError, TopologySpec

pytestmark = pytest.mark.unit


def test_default_fabric_counts_and_wiring():
    topo = Topology(TopologySpec(servers=4, gpus_per_server=2, spines=2))
    assert len(topo.nics) == 8 and len(topo.leaves) == 2 and len(topo.spines) == 2
    assert len(topo.links) == 8 + 2 * 2
    # NIC r of every server plugs into leaf r
    for nic in topo.nics:
        assert topo.switch(nic.leaf).rail == nic.rail
    assert topo.ports_of("p0l0") == {1: "p0l0-eth1", 2: "p0l0-eth2", 3: "p0l0-eth3", 4: "p0l0-eth4",
                                     5: "p0l0-eth5", 6: "p0l0-eth6"}
    assert topo.ports_of("sp1") == {1: "sp1-eth1", 2: "sp1-eth2"}


def test_addresses_unique_and_in_their_rail_subnet():
    topo = Topology(TopologySpec(servers=16, gpus_per_server=4, pods=2, spines=2))
    ips = [n.ip for n in topo.nics]
    macs = [n.mac for n in topo.nics]
    assert len(set(ips)) == len(ips) == 64 and len(set(macs)) == 64
    for nic in topo.nics:
        net = ipaddress.ip_network(f"10.{nic.pod}.{nic.rail}.0/24")
        assert ipaddress.ip_address(nic.ip) in net
        assert ipaddress.ip_address(nic.gateway_ip) in net


def test_routes_cover_every_destination_with_ecmp_up():
    topo = Topology(TopologySpec(servers=4, gpus_per_server=2, spines=3))
    leaf_routes = topo.routes("p0l1")
    hosts = [r for r in leaf_routes if r.prefix_len == 32]
    assert sorted(r.prefix for r in hosts) == sorted(n.ip for n in topo.nics if n.rail == 1)
    default = [r for r in leaf_routes if r.prefix_len == 8]
    assert default and default[0].ports == (5, 6, 7)
    spine_routes = topo.routes("sp0")
    assert {(r.prefix, r.ports) for r in spine_routes} == {("10.0.0.0", (1,)), ("10.0.1.0", (2,))}


def test_hop_counts_rail_local_vs_cross_rail():
    topo = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    a0, a1, b0, b1 = topo.nics
    assert topo.path_switch_hops(a0, b0) == 1
    assert topo.path_switch_hops(a0, b1) == 3
    rail_only = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=0))
    x0, _, _, y1 = rail_only.nics
    assert rail_only.path_switch_hops(x0, y1) == 0
    assert len(rail_only.reachable_pairs()) == 4


def test_oversubscription_sets_uplink_rate():
    spec = TopologySpec(servers=8, gpus_per_server=1, spines=2, link_rate_bps=100_000_000, oversubscription=2)
    assert spec.uplink_rate_bps == 200_000_000


@pytest.mark.parametrize("kwargs,flag", [
    ({"servers": 5, "pods": 2}, "--servers 5"),
    ({"gpus_per_server": 0}, "--gpus-per-server"),
    ({"spines": 0, "pods": 2, "servers": 4}, "--spines 0"),
    ({"mtu": 20000}, "--mtu"),
    ({"oversubscription": 0.5}, "--oversubscription"),
    ({"pfc_priority": 8}, "--pfc-priority 8"),
    ({"pfc_priority": 6}, "--pfc-priority 6"),     # the CNPs' strict-priority class is never the lossless one
])
def test_bad_options_name_the_flag(kwargs, flag):
    with pytest.raises(TopologyError) as exc:
        TopologySpec(**kwargs)
    assert flag in str(exc.value)


def test_pfc_priority_is_a_topology_option_in_the_spec_dict():
    from emu.status import spec_dict

    assert TopologySpec().pfc_priority is None
    d = spec_dict(TopologySpec(pfc_priority=3))
    assert d["pfc_priority"] == 3 and TopologySpec(**d) == TopologySpec(pfc_priority=3)   # state file round trip
