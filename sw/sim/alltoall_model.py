"""All-to-all beyond the event-driven engine's reach (pairwise has n(n-1) flows: 10^10 at 100k GPUs): the
link-load model.

Model: the schedule's one phase (every flow starts at once, each block the same size, as the communicator posts
them) ends when its most loaded link has drained: T = max over links of bytes / (capacity x efficiency), plus the
phase's latency steps x (alpha + the longest path's latency).  That is a lower bound of the fluid max-min time the
engine computes, and equals it when the most loaded link stays saturated until its last flow ends; at <= 256 GPUs
``tests/sw/sim/test_alltoall_model.py`` checks it against the engine (the gap is stated in the README).
Link loads: exact, from the schedule's own flows on the fabric's own paths (``SimFabric.paths``: fabric.p4's ECMP
hash, rail round robin), while the phase has at most ``EXACT_FLOWS`` flows; above that, their expectation in
closed form (every NVLink port, NIC and tier link of a class carries the same bytes by symmetry; ECMP spreads a
leaf's or pod spine's flows over the members as a uniform 16-bit hash modulo each group would, including the
correlation of taking the same hash at every tier; round robin evenly), so ECMP's collisions of individual flows
are averaged out: at 10k GPUs and more every spine link carries thousands of flows.
"""

from __future__ import annotations

import numpy as np

from .flow_fabric import SimFabric
from .schedules import A2A_LATENCY_STEPS, alltoall_flows, alltoall_phase

EXACT_FLOWS = 1_100_000
"""Up to this many flows (1,000-GPU pairwise) the loads are counted flow by flow; above, in closed form."""
HASH_SPACE = 1 << 16


def ecmp_member_shares(spines: int, supers: int) -> np.ndarray:
    """Share of flows fabric.p4's ECMP puts on (pod spine k, super spine m): one 16-bit hash taken modulo each
    group, the hash uniform; shape (spines, max(supers, 1))."""
    h = np.arange(HASH_SPACE)
    out = np.zeros((max(spines, 1), max(supers, 1)))
    np.add.at(out, (h % max(spines, 1), h % max(supers, 1)), 1.0)
    return out / HASH_SPACE


def expected_link_bytes(fab: SimFabric, algo: str, routing: str, block_bytes: int) -> tuple[np.ndarray, float]:
    """Expected bytes on every directed link of the all-to-all, and its longest path's latency (s)."""
    g, servers, n = fab.g, fab.servers, fab.gpus
    spp = fab.spec.servers_per_pod
    s, m = fab.s, fab.m
    b = float(block_bytes)
    pxn = algo == "pairwise" and routing == "rail"
    if algo == "pairwise":
        nvlink = (g - 1) * (servers if pxn else 1) * b      # same-server blocks (+ with PXN the relayed ones)
        nic = (n - g) * b                                   # every off-server block (PXN: relayed, same count)
        leaf_out = spp * (g * (servers - spp) if pxn else n - g - (spp - 1)) * b
    else:
        nvlink = (g - 1) * servers * b                      # the shuffle: S blocks to each other local GPU
        nic = (servers - 1) * g * b                         # G blocks to each other server on my rail
        leaf_out = spp * (servers - spp) * g * b            # same-rail flows leave the leaf only to other pods
    pod_out = spp * g * g * (servers - spp) * b             # every GPU of a pod to every GPU of the others
    out = np.zeros(fab.n_links)
    out[:fab.off_nic] = nvlink if g > 1 else 0.0
    out[fab.off_nic:fab.off_ls] = nic if servers > 1 else 0.0
    shares = ecmp_member_shares(s, m) if routing == "ecmp" else np.full((max(s, 1), max(m, 1)), 1 / (max(s, 1)
                                                                                                     * max(m, 1)))
    if s and leaf_out:
        per_spine = leaf_out * shares.sum(axis=1)           # leaf -> spine k, and spine k -> leaf (symmetric)
        ls = np.repeat(per_spine[None, :], fab.leaves, axis=0).ravel()
        out[fab.off_ls:fab.off_ss:2] = ls
        out[fab.off_ls + 1:fab.off_ss:2] = ls
    if m and pod_out:
        ss = np.repeat((pod_out * shares)[None], fab.spec.pods, axis=0).ravel()
        out[fab.off_ss::2] = ss
        out[fab.off_ss + 1::2] = ss
    net_hops = 2 + (2 if s and leaf_out else 0) + (2 if m and pod_out else 0)
    intra = 2 * fab.intra_delay_s if g > 1 else 0.0
    latency = max((net_hops * fab.delay_s + (intra if pxn else 0.0)) if servers > 1 else 0.0, intra)
    return out, latency


def exact_link_bytes(fab: SimFabric, algo: str, routing: str, block_bytes: int) -> tuple[np.ndarray, float]:
    """Bytes on every directed link counted over the phase's flows and their paths, and the longest path's
    latency (s)."""
    ph = alltoall_phase(fab.servers, fab.g, algo, block_bytes)[0]
    paths = fab.paths(ph.src, ph.dst, routing)
    lat = np.zeros(len(ph.src))
    np.add.at(lat, paths.flow, fab.latency_s[paths.link])
    return (np.bincount(paths.link, weights=ph.nbytes[paths.flow].astype(np.float64), minlength=fab.n_links),
            float(lat.max(initial=0.0)))


def alltoall_link_load(fab: SimFabric, algo: str, block_bytes: int, routing: str, alpha_s: float,
                       efficiency: float = 1.0, exact_flows: int = EXACT_FLOWS) -> tuple[float, np.ndarray, str]:
    """(predicted time s, bytes per link, which loads: ``exact`` or ``expected``) of an all-to-all of
    ``block_bytes`` per destination by the link-load model."""
    exact = alltoall_flows(fab.servers, fab.g, algo) <= exact_flows
    loads, latency = (exact_link_bytes if exact else expected_link_bytes)(fab, algo, routing, block_bytes)
    drain = float((loads * 8 / fab.capacity_bps).max(initial=0.0)) / efficiency
    return drain + A2A_LATENCY_STEPS[algo] * (alpha_s + latency), loads, "exact" if exact else "expected"
