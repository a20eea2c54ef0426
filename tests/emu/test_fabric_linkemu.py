"""Loss and delay through link emulators spliced into chosen links (no netem here): faults and --delay."""

from __future__ import annotations

import json

import pytest

from emu.fabric import Fabric, FabricError
from emu.faults import FaultError
from emu.net import leftovers
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

THROUGH = [("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.3")]     # both cross s1's link
BESIDE = [("10.0.0.1", "10.0.0.3")]                                 # does not


def test_loss_and_delay_faults_on_an_impairable_link(tmp_path) -> None:
    log = tmp_path / "faults.jsonl"
    fab = Fabric(TopologySpec(servers=3, gpus_per_server=1, spines=0), wired_links=["s1:p0l0"], fault_log=str(log))
    with fab:
        assert list(fab.net.wires) == [frozenset(("s1", "p0l0"))]
        assert all(r["ok"] for r in fab.probe(THROUGH + BESIDE))
        fab.faults.delay("s1:p0l0", "20ms")
        delayed = fab.probe(THROUGH + BESIDE)
        assert all(r["ok"] for r in delayed)
        assert all(r["rtt_ns"] >= 40_000_000 for r in delayed[:2])     # 20 ms each way through the link
        fab.faults.loss("s1:p0l0", 100)
        lossy = fab.probe(THROUGH + BESIDE, retries=1, timeout_ms=300)
        assert [r["ok"] for r in lossy] == [False, False, True]
        assert fab.faults.active()["impaired_links"] == {"p0l0:s1": {"loss_pct": 100.0, "extra_delay_ns": 20_000_000}}
        fab.faults.restore_link("s1:p0l0")
        assert fab.faults.active()["impaired_links"] == {}
        assert all(r["ok"] for r in fab.probe(THROUGH + BESIDE))
        with pytest.raises(FaultError, match="--impairable s0:p0l0"):
            fab.faults.loss("s0:p0l0", 5)
        with pytest.raises(FaultError, match="loss"):
            fab.faults.loss("s1:p0l0", 150)
        fp = fab.footprint
    assert fp is not None and leftovers(fp) == []
    actions = [(e["action"], e["ok"]) for e in map(json.loads, log.read_text().splitlines())]
    assert actions[:3] == [("delay", True), ("loss", True), ("restore_link", True)]


def test_topology_delay_runs_every_link_through_a_delay_line() -> None:
    delay_ns = 2_000_000
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1, delay_ns=delay_ns))
    with fab:
        assert len(fab.net.wires) == len(fab.topo.links) == 6
        rail_local, cross = fab.probe([("10.0.0.1", "10.0.0.2"), ("10.0.0.1", "10.0.1.2")])
        assert rail_local["ok"] and cross["ok"]
        assert rail_local["rtt_ns"] >= 4 * delay_ns      # 2 links each way
        assert cross["rtt_ns"] >= 8 * delay_ns           # 4 links each way
        assert cross["fwd_hops"] == 3                    # the emulators are invisible to INT
        fp = fab.footprint
    assert fp is not None and leftovers(fp) == []


def test_unknown_impairable_link_is_a_clear_error() -> None:
    with pytest.raises(FabricError, match="--impairable s0:sp9: no such link"):
        Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=1), wired_links="s0:sp9")
