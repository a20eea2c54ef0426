"""The fabric's paths end to end: reachability on every rail, INT hop counts, ECMP spread, faults and reroute."""

from __future__ import annotations

import json

import pytest

from emu.checks import (
    check_ecmp,
    check_int_hops,
    check_int_report,
    check_mtu,
    check_reachability,
    check_reroute,
    chi2_critical,
    fabric_pairs,
)
from emu.fabric import Fabric
from emu.faults import FaultError
from emu.net import leftovers
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def fab(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("faults") / "faults.jsonl"
    fabric = Fabric(TopologySpec(servers=4, gpus_per_server=2, spines=2), fault_log=str(log))
    with fabric:
        yield fabric


def _ok(results: list[dict]) -> set[tuple[str, str]]:
    return {(r["src"], r["dst"]) for r in results if r["ok"]}


def test_every_nic_reaches_every_other_nic_rail_local_and_cross_rail(fab: Fabric) -> None:
    result, results = check_reachability(fab)
    pairs = fabric_pairs(fab)
    assert len(pairs) == 8 * 6            # 8 NICs, each to the 6 NICs of the other 3 servers
    assert result.ok, result.detail
    assert all(r["ok"] for r in results)
    assert result.data["rail_local_pairs"] == 24
    for name, sw in fab.status()["switches"].items():   # no ARP or other non-IPv4 frame ever reached a switch
        assert sum(sw["drop_reasons"].values()) == 0, (name, sw["drop_reasons"])


def test_hosts_route_by_source_address_with_static_neighbours(fab: Fabric) -> None:
    s0 = fab.net.hosts["s0"]
    assert "dev s0-eth0" in s0.cmd("ip route get 10.0.1.2 from 10.0.0.1")   # cross-rail leaves by its source NIC
    assert "dev s0-eth1" in s0.cmd("ip route get 10.0.1.2")                  # no source: the destination's rail
    neigh = [line for line in s0.cmd("ip neigh show").strip().splitlines() if line]
    assert len(neigh) == 2 * (1 + 3)                      # per NIC: its gateway and the 3 peers on its leaf
    assert all("PERMANENT" in line for line in neigh)


def test_int_stack_counts_one_hop_rail_local_and_three_cross_rail(fab: Fabric) -> None:
    pairs = fabric_pairs(fab)
    results = fab.probe([(a.ip, b.ip) for a, b in pairs])
    result = check_int_hops(fab, pairs, results)
    assert result.ok, result.detail
    assert result.data["hop_histogram"] == {1: 48, 3: 48}
    for (a, b), r in zip(pairs, results, strict=True):
        if a.leaf != b.leaf:   # reply path newest hop first: source's leaf, a spine, the replier's leaf
            ids = r["rev_node_ids"]
            assert ids[0] == fab.topo.switch(a.leaf).device_id and ids[2] == fab.topo.switch(b.leaf).device_id
            assert fab.topo.switch(next(s.name for s in fab.topo.spines if s.device_id == ids[1])).role == "spine"


def test_ecmp_spreads_flows_over_spines_within_chi_square_bound(fab: Fabric) -> None:
    result = check_ecmp(fab, flows=400)
    assert result.data["flows"] == 400
    assert sum(result.data["per_spine_pkts"]) == 400, result.detail
    assert result.data["chi2"] <= chi2_critical(1), result.detail
    assert min(result.data["per_spine_pkts"]) > 0


def test_leaf_spine_link_down_reroutes_with_no_loss(fab: Fabric) -> None:
    result = check_reroute(fab)
    assert result.ok, result.detail
    assert result.data["pkts_to_down_uplink"] == 0


def test_host_link_down_isolates_that_nic_only_and_recovers(fab: Fabric) -> None:
    pairs = [(a.ip, b.ip) for a, b in fabric_pairs(fab)]
    fab.faults.link_down("s1:p0l0")
    try:
        down = fab.probe(pairs, retries=1, timeout_ms=200)
    finally:
        fab.faults.link_up("s1:p0l0")
    dead = "10.0.0.2"
    assert all(not r["ok"] for r in down if dead in (r["src"], r["dst"]))
    assert all(r["ok"] for r in down if dead not in (r["src"], r["dst"]))
    assert _ok(fab.probe(pairs)) == set(pairs)


def test_switch_stop_blackholes_then_start_restores(fab: Fabric) -> None:
    pairs = fabric_pairs(fab)
    fab.faults.switch_stop("sp0")
    try:
        assert fab.status()["switches"]["sp0"]["running"] is False
        during = fab.probe([(a.ip, b.ip) for a, b in pairs], retries=0, timeout_ms=2000)
    finally:
        fab.faults.switch_start("sp0")
    rail_local = [r for (a, b), r in zip(pairs, during, strict=True) if a.leaf == b.leaf]
    cross = [r for (a, b), r in zip(pairs, during, strict=True) if a.leaf != b.leaf]
    assert all(r["ok"] for r in rail_local)          # never touch a spine
    assert any(not r["ok"] for r in cross)          # flows hashed to the stopped spine die
    after = fab.probe([(a.ip, b.ip) for a, b in pairs])
    assert all(r["ok"] for r in after)


def test_slow_link_shapes_the_switch_port_and_restores(fab: Fabric) -> None:
    fab.faults.slow_link("p0l0:sp1", "10M")
    assert fab.faults.active()["slow_links"] == {"p0l0:sp1": 10_000_000}
    fab.faults.restore_link("p0l0:sp1")
    assert fab.faults.active()["slow_links"] == {}
    with pytest.raises(FaultError, match="rate"):
        fab.faults.slow_link("p0l0:sp1", "fast")


def test_loss_and_delay_faults_say_why_they_are_unavailable(fab: Fabric) -> None:
    for action in ("loss", "delay"):
        with pytest.raises(FaultError, match="no tc netem"):
            fab.faults.apply(action, "s0:p0l0", "2")
    with pytest.raises(FaultError, match="no such link"):
        fab.faults.link_down("s0:sp0")
    with pytest.raises(FaultError, match="allowed"):
        fab.faults.apply("explode", "s0:p0l0")


def test_fault_log_has_one_json_line_per_action(fab: Fabric) -> None:
    before = fab.faults.log_path.read_text().splitlines() if fab.faults.log_path.exists() else []
    fab.faults.run_script("# flap one uplink\n+0s link_down p0l1:sp1\n+50ms link_up p0l1:sp1\n")
    lines = fab.faults.log_path.read_text().splitlines()[len(before):]
    events = [json.loads(line) for line in lines]
    assert [(e["action"], e["target"], e["ok"]) for e in events] == [
        ("link_down", "p0l1:sp1", True), ("link_up", "p0l1:sp1", True)]
    assert events[1]["t_ns"] - events[0]["t_ns"] >= 50_000_000
    assert fab.faults.active()["down_links"] == []


def test_status_reports_every_port_with_counters(fab: Fabric) -> None:
    assert all(r["ok"] for r in fab.probe([("10.0.0.1", "10.0.1.2")]))
    status = fab.status()
    assert set(status["switches"]) == {"p0l0", "p0l1", "sp0", "sp1"}
    leaf = status["switches"]["p0l0"]
    assert set(leaf["ports"]) == {"1", "2", "3", "4", "5", "6"}
    assert leaf["ports"]["1"]["peer"] == "s0-eth0" and leaf["ports"]["5"]["peer"] == "sp0"
    assert status["totals"]["rx_pkts"] > 0
    for key in ("high_water_pkts", "ecn_marks", "queue_drop_pkts", "tx_bytes"):
        assert key in leaf["ports"]["1"]
    assert set(leaf["drop_reasons"]) == {"no_route", "ttl", "parser", "acl"}
    links = {entry["link"]: entry for entry in status["links"]}
    assert len(links) == len(fab.topo.links) == 8 + 4
    up = links["p0l0:sp0"]["a_to_b"]
    assert up["tx_pkts"] == leaf["ports"]["5"]["tx_pkts"] and "ecn_marks" in up and "high_water_pkts" in up
    assert links["s0:p0l0"]["a_to_b"]["tx_pkts"] == leaf["ports"]["1"]["rx_pkts"] > 0


def test_jumbo_frames_cross_leaf_spine_leaf() -> None:
    with Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1, mtu=9000)) as jumbo:
        result = check_mtu(jumbo)
        assert result.ok, result.detail
        assert "(3 switches)" in result.detail
        assert result.data["udp_received"] == 3       # full-size UDP/4791 grew by 3 INT hops and still arrived
        s0 = jumbo.net.hosts["s0"]
        too_big = s0.cmd("ping -n -q -c 1 -W 1 -M do -s 9001 -I 10.0.0.1 10.0.1.2; echo rc=$?")
        assert not too_big.strip().endswith("rc=0")


def test_int_report_mode_strips_at_the_sink_and_reports_to_the_collector() -> None:
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1), int_sink="report")
    with fab:
        assert fab.net.collector is not None and len(fab.net.collector_ifnames) == 2
        result = check_int_report(fab)
        assert result.ok, result.detail
        assert result.data["reports"] == 2 * 8            # a report per request and per reply
        fp = fab.footprint
        assert fp is not None and len(fp.netns_inodes) == 2 + 3 + 1   # servers, switches, the collector
    assert leftovers(fp) == []
