"""The flow-level simulator: max-min filling, closed forms, ECMP collisions, shared schedules and topology, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sw.collectives.algorithms import alltoall, hier, rhd, ring, tree
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.sim import SimParams, simulate
from sw.sim import schedules as sim_schedules
from sw.sim.flow_fabric import FlowPaths, SimFabric, ecmp_index
from sw.sim.maxmin import maxmin_rates, run_phase

pytestmark = pytest.mark.unit


def _paths(flow_links: list[list[int]]) -> FlowPaths:
    flow = np.repeat(np.arange(len(flow_links)), [len(x) for x in flow_links])
    return FlowPaths(flow=flow, link=np.array([link for x in flow_links for link in x], dtype=np.int64),
                     hops=np.array([len(x) for x in flow_links]))


def test_maxmin_one_bottleneck_shares_equally():
    rates = maxmin_rates(_paths([[0], [0], [0, 1]]), np.array([30.0, 100.0]))
    assert rates == pytest.approx([10, 10, 10])


def test_maxmin_two_bottlenecks():
    # link 0 (10) carries f0, f1; link 1 (30) carries f1, f2: f0 = f1 = 5, f2 takes the rest of link 1
    rates = maxmin_rates(_paths([[0], [0, 1], [1]]), np.array([10.0, 30.0]))
    assert rates == pytest.approx([5, 5, 25])


def test_maxmin_parking_lot():
    # one long flow over three unit links, one short flow per link: everyone gets 1/2
    rates = maxmin_rates(_paths([[0, 1, 2], [0], [1], [2]]), np.ones(3))
    assert rates == pytest.approx([0.5, 0.5, 0.5, 0.5])


def test_event_driven_phase_reallocates_when_a_flow_ends():
    # 8 bit/s link; 1 and 3 bytes: both at 4 bit/s for 2 s, then the second alone at 8 bit/s for 2 s
    t, solves = run_phase(_paths([[0], [0]]), np.array([1, 3]), np.array([8.0]))
    assert t == pytest.approx(4.0) and solves == 2


def test_ring_allreduce_matches_alpha_beta_closed_form():
    n, rate, delay_ns, alpha = 8, 100e9, 1000, 3e-6
    size = n * 4 * 1000
    spec = TopologySpec(servers=n, gpus_per_server=1, pods=1, spines=2, link_rate_bps=int(rate), delay_ns=delay_ns)
    got = simulate(spec, "allreduce", "ring", size, "ecmp", SimParams(alpha_s=alpha))
    closed = 2 * (n - 1) * (alpha + 2 * delay_ns * 1e-9 + (size / n) * 8 / rate)
    assert got["predicted_s"] == pytest.approx(closed, rel=1e-9)
    assert got["busbw_bps"] == pytest.approx(got["algbw_bps"] * 2 * (n - 1) / n)


def test_ecmp_collisions_slow_cross_pod_flows_rail_routing_does_not():
    from p4.algorithms import compute  # tests may import the P4 target; the simulator must not

    spec = TopologySpec(servers=8, gpus_per_server=1, pods=2, spines=4, link_rate_bps=100_000_000_000)
    assert spec.uplink_rate_bps == spec.link_rate_bps
    fab = SimFabric(spec, 9 * spec.link_rate_bps, 0.0)
    src, dst = np.arange(4), np.arange(4, 8)          # pod 0 -> pod 1, one flow per server
    nbytes = np.full(4, 1 << 20)
    times = {r: run_phase(fab.paths(src, dst, r), nbytes, fab.capacity_bps)[0] for r in ("ecmp", "rail")}
    from sw.roce.wire.flow import udp_sport
    sport = udp_sport(src + 1, dst + 1)
    spine = ecmp_index(fab.nic_ip(src), fab.nic_ip(dst), sport, 1 << 16) % spec.spines
    for i in range(4):   # the same hash as the P4 target's crc16 over the 104-bit 5-tuple key
        ips = int(fab.nic_ip(src)[i]) << 72 | int(fab.nic_ip(dst)[i]) << 40
        key = ips | 17 << 32 | int(sport[i]) << 16 | 4791
        assert compute("crc16", key, 104) % spec.spines == spine[i]
    worst = np.bincount(spine).max()
    assert worst > 1, "this case is meant to collide"
    one = (1 << 20) * 8 / spec.link_rate_bps
    assert times["rail"] == pytest.approx(one)
    assert times["ecmp"] == pytest.approx(worst * one)


def test_three_tier_cross_pod_path_climbs_to_a_super_spine():
    spec = TopologySpec(servers=4, gpus_per_server=2, pods=2, spines=2, tiers=3, super_spines=2)
    fab = SimFabric(spec, 1e12, 0.0)
    p = fab.paths(np.array([0, 0]), np.array([4, 2]), "ecmp")   # other pod, same pod other server
    names = [fab.link_name(int(i)) for i in p.link[p.flow == 0]]
    assert len(names) == 6 and names[0] == "s0-eth0>p0l0" and names[-1] == "p1l0>s2-eth0"
    assert names[2].startswith("p0sp") and names[2].split(">")[1].startswith("ss")
    assert p.hops[1] == 2   # same leaf: NIC up, NIC down


def test_sim_fabric_links_are_the_emulated_topologys_links():
    spec = TopologySpec(servers=4, gpus_per_server=2, pods=2, spines=2, link_rate_bps=10**9, oversubscription=2)
    fab = SimFabric(spec, 1e10, 0.0)
    emu_links = {(link.a, link.b, link.rate_bps) for link in Topology(spec).links}
    emu_links |= {(b, a, r) for a, b, r in emu_links}
    sim_links = {(*fab.link_name(i).split(">"), int(fab.capacity_bps[i])) for i in range(fab.n_links)
                 if fab.link_class[i] != 0}
    sim_links = {(a.split("-eth")[0] if a.startswith("s") and "-eth" in a else a,
                  b.split("-eth")[0] if b.startswith("s") and "-eth" in b else b, r) for a, b, r in sim_links}
    assert sim_links == emu_links


def _calls(fn) -> set[str]:
    """Global names a function's code (and its comprehensions') refers to."""
    todo, names = [fn.__code__], set()
    while todo:
        code = todo.pop()
        names |= set(code.co_names)
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return names


def test_schedules_are_the_communicators_own_functions():
    assert sim_schedules.ring_step is ring.ring_step
    assert sim_schedules.pairwise_peers is alltoall.pairwise_peers
    assert sim_schedules.rail_order is alltoall.rail_order
    assert sim_schedules.hier_owned_segment is hier.hier_owned_segment
    assert sim_schedules.fold_survivors is rhd.fold_survivors and sim_schedules.halving_plan is rhd.halving_plan
    assert "fold_survivors" in _calls(rhd.rhd_allreduce)
    assert sim_schedules.mirrored is tree.mirrored and sim_schedules.heap_links is tree.heap_links
    assert "mirrored" in _calls(tree.tree_allreduce)
    assert "ring_steps" in _calls(ring.ring)                    # the communicator runs them
    assert "ring_step" in _calls(ring.ring_steps)
    assert "pairwise_peers" in _calls(alltoall.pairwise_alltoall)
    assert "rail_order" in _calls(alltoall.rail_alltoall)
    assert "hier_owned_segment" in _calls(hier.hier_allreduce)


@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "tree"), ("allreduce", "rhd"),
                                     ("allreduce", "hier"), ("alltoall", "pairwise"), ("alltoall", "rail")])
def test_every_schedule_moves_the_bytes_it_should_off_a_spine_or_not(op, algo):
    spec = TopologySpec(servers=6, gpus_per_server=2, pods=1, spines=2, link_rate_bps=10**10)
    got = simulate(spec, op, algo, 12 * 4 * 64, "rail")
    assert got["predicted_s"] > 0 and 0 < got["max_link_util"] <= 1 + 1e-9
    if algo in ("hier", "rail"):   # rail-aligned: nothing crosses rails over the network
        assert got["bytes_by_link_class"]["leaf-spine"] == 0


def test_cli_json_keys_and_plot(capsys, tmp_path):
    from sw.cli import main

    plot = tmp_path / "util.png"
    rc = main(["sim", "collective", "allreduce", "--gpus", "64", "--gpus-per-server", "8", "--size", "64M",
               "--algo", "hier", "--routing", "ecmp", "--tiers", "3", "--spines", "2", "--pods", "2",
               "--link-rate", "400G", "--json", "--plot", str(plot)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and list(out) == ["predicted_s", "algbw_bps", "busbw_bps", "bytes_by_link_class",
                                     "max_link_util", "p99_link_util", "hot_links", "wall_s", "gpus"]
    assert out["gpus"] == 64 and plot.stat().st_size > 1000


@pytest.mark.parametrize("argv,needle", [
    (["--gpus", "12", "--gpus-per-server", "8"], "--gpus 12: must be a multiple of --gpus-per-server 8"),
    (["--gpus", "16", "--pods", "3"], "must be a multiple of --pods 3"),
    (["--gpus", "16", "--size", "4"], "--size 4: must be at least"),
    (["--gpus", "16", "--algo", "rail"], "--algo 'rail': allowed for allreduce"),
    (["--gpus", "16", "--size", "lots"], "argument --size"),
    (["--gpus", "16", "--tiers", "3", "--spines", "0"], "--tiers 3 with --spines 0"),
    (["--gpus", "0"], "argument --gpus"),
])
def test_cli_rejects_impossible_topologies_and_sizes(capsys, argv, needle):
    from sw.cli import main

    base = {"--size": "1M", "--algo": "ring"}
    args = list(argv)
    for flag, value in base.items():
        if flag not in args:
            args += [flag, value]
    with pytest.raises(SystemExit) as exc_info:
        rc = main(["sim", "collective", "allreduce", *args])
        raise SystemExit(rc)
    err = capsys.readouterr().err
    assert exc_info.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
