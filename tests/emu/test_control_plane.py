"""The control plane turns the topology into fabric.p4 table entries in simple_switch_CLI syntax."""

from __future__ import annotations

import re

import pytest

from emu.control_plane import EcnConfig, IntConfig, dscp_priority_map, fabric_commands, qos_commands, switch_commands
from sw.collectives.fabric_topology import Topology, TopologyError, TopologySpec

pytestmark = pytest.mark.unit


def test_leaf_gets_host_routes_and_an_ecmp_group():
    topo = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))
    cmds = switch_commands(topo, "p0l0")
    assert "table_set_default FabricEgress.switch_config set_switch 1" in cmds
    hosts = [c for c in cmds if " forward " in c and "ipv4_lpm" in c]
    assert hosts == ["table_add FabricIngress.ipv4_lpm forward 10.0.0.1/32 => 1 02:53:00:00:00:01",
                     "table_add FabricIngress.ipv4_lpm forward 10.0.0.2/32 => 2 02:53:00:00:01:01"]
    assert "table_add FabricIngress.ipv4_lpm ecmp_select 10.0.0.0/8 => 1 2" in cmds
    members = [c for c in cmds if "set_ecmp_member" in c]
    assert [m.split("=>")[1].split()[0] for m in members] == ["3", "4"]


def test_spine_routes_each_rail_subnet_down():
    topo = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    cmds = switch_commands(topo, "sp0")
    routes = sorted(c for c in cmds if "ipv4_lpm" in c)
    assert len(routes) == 2 and all(re.search(r"10\.0\.[01]\.0/24 => [12] ", r) for r in routes)


def test_ecn_and_int_settings_appear():
    topo = Topology(TopologySpec(servers=2, gpus_per_server=1, spines=0))
    cmds = switch_commands(topo, "p0l0", EcnConfig(kmin=10_000, kmax=200_000, pmax=0.05, unit="bytes"),
                           IntConfig(sink_mode="report", collector_port=9))
    assert "table_add FabricEgress.ecn_config set_red_bytes 1 => 10000 200000 3277" in cmds
    assert "mirroring_add 250 9" in cmds
    assert sum("int_sink_config" in c for c in cmds) == 2


def test_every_switch_programmed():
    topo = Topology(TopologySpec(servers=4, gpus_per_server=2, spines=2))
    cmds = fabric_commands(topo)
    assert set(cmds) == {"p0l0", "p0l1", "sp0", "sp1"}


@pytest.mark.parametrize("kwargs", [{"kmin": 5, "kmax": 5}, {"pmax": 0.0}, {"unit": "furlongs"}])
def test_bad_ecn_config(kwargs):
    with pytest.raises(TopologyError):
        EcnConfig(**kwargs)


def test_lossless_roce_class_maps_dscps_and_enables_pfc_on_that_priority_only():
    from emu.fabric import PfcSettings

    assert dscp_priority_map(3) == {26: 3, 48: 6, 0x17: "int"}     # RoCE, CNPs, INT-carrying (by original DSCP)
    assert qos_commands(5) == ["pfc_dscp_map 26 5", "pfc_dscp_map 48 6", "pfc_dscp_map 23 int"]
    cmds = PfcSettings(True, 9000, 3000, 6000).commands([1, 2], priority=3)
    assert cmds[1:4] == qos_commands(3)
    assert [c for c in cmds if c.startswith("pfc_enable")] == ["pfc_enable 1 1 3", "pfc_enable 2 1 3"]
    legacy = PfcSettings(True, 9000, 3000, 6000).commands([1])      # no class: every priority, no DSCP map
    assert "pfc_enable 1 1" in legacy and not any("dscp" in c for c in legacy)
