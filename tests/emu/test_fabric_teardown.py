"""Bringing a fabric up and down leaves no namespace, veth or process behind, also when bring-up fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.fabric import Fabric, FabricError
from emu.net import leftovers
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

BASIC_P4 = str(Path(__file__).resolve().parents[2] / "p4" / "programs" / "basic.p4")


def test_up_then_down_leaves_nothing_behind() -> None:
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    try:
        fab.up()
        fp = fab.footprint
        assert fp is not None
        assert len(fp.netns_inodes) == 2 + 3            # 2 hosts, 2 leaves, 1 spine: each its own namespace
        assert leftovers(fp) != []                     # everything exists while up
        workdir = fab.workdir
    finally:
        fab.down()
    assert leftovers(fp) == []
    assert not workdir.exists()
    fab.down()                                          # idempotent


def test_failed_programming_tears_everything_down() -> None:
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=0), program=BASIC_P4)
    with pytest.raises(FabricError, match="programming switch p0l0"):
        fab.up()
    assert fab.footprint is not None
    assert leftovers(fab.footprint) == []
    assert fab.fnet is None


def test_two_fabrics_with_the_same_names_run_side_by_side() -> None:
    a = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    b = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    with a, b:
        assert a.footprint is not None and b.footprint is not None
        assert not set(a.footprint.netns_inodes) & set(b.footprint.netns_inodes)
        for fab in (a, b):
            results = fab.probe([("10.0.0.1", "10.0.1.2"), ("10.0.1.2", "10.0.0.1")])
            assert all(r["ok"] and r["fwd_hops"] == 3 for r in results)
    assert leftovers(a.footprint) == [] and leftovers(b.footprint) == []
