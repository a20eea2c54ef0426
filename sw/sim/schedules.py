"""The collectives' schedules as phases of concurrent flows, read from the same functions the communicator runs
(``sw.collectives.algorithms``: ``ring_step``, ``heap_links``, ``mirrored``, ``halving_plan``, ``fold_survivors``,
``pairwise_peers``, ``rail_order``, ``hier_owned_segment``, ``segment_bounds``; the hetero split from the tuner's
``hetero_fraction``): no second copy of any schedule.

A phase is a set of flows that start together, repeated ``repeat`` times (the steps of a ring move the same
pairs).  Simplifications: a ring's segments differ by at most one element, the phase takes each flow's step-0
segment for every step; pipelined trees and the rail-aligned all-to-all's shuffle are one phase each (their
chunks overlap), with the tree's depth counted in latency steps.  The heterogeneous allreduce's two schedules
are two ``lane``s: each lane's phases run in order, the lanes at the same time (``sw.sim.run``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sw.collectives.algorithms.alltoall import pairwise_peers, rail_order
from sw.collectives.algorithms.common import segment_bounds
from sw.collectives.algorithms.hier import hier_owned_segment
from sw.collectives.algorithms.rhd import fold_survivors, halving_plan
from sw.collectives.algorithms.ring import ring_step
from sw.collectives.algorithms.tree import heap_links, mirrored
from sw.collectives.tuner import ALGOS, CostModel, hetero_fraction

MAX_FLOWS = 66_000
"""All-to-all: the event-driven engine takes one phase of at most this many flows (pairwise 256 GPUs: n(n-1));
larger all-to-alls are timed by the link-load model (``sw.sim.alltoall_model``)."""

A2A_LATENCY_STEPS = {"pairwise": 1, "rail": 2}
"""Latency steps on an all-to-all's critical path: pairwise one message; rail-aligned an NVLink hop, then the rail."""


class ScheduleError(ValueError):
    """An operation, algorithm or size the simulator cannot schedule; one line naming the flag."""

    is_user_error = True


@dataclass(frozen=True)
class Phase:
    """Flows ``src[i] -> dst[i]`` of ``nbytes[i]`` each, started together, ``repeat`` times in a row."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    repeat: int = 1
    latency_steps: int = 1   # per-message overheads and path latencies on the critical path of one repeat
    lane: int = 0            # phases of one lane run in order; different lanes run at the same time


def _sizes(counts: np.ndarray, n: int) -> np.ndarray:
    """Segment sizes (elements) of each group's buffer cut in ``n`` (``segment_bounds``), shape (groups, n)."""
    return np.array([[hi - lo for lo, hi in segment_bounds(int(c), n)] for c in counts], dtype=np.int64)


def ring_phases(groups: np.ndarray, counts: np.ndarray, itemsize: int, rs: bool, ag: bool,
                off: int = 0) -> list[Phase]:
    """Rings over each row of ``groups`` (ranks) on buffers of ``counts`` elements: reduce-scatter and/or
    allgather, n-1 steps each, position p sending to p+1."""
    n = groups.shape[1]
    if n < 2:
        return []
    pos = np.arange(n)
    sizes = _sizes(counts, n)
    out = []
    for reducing in [True] * rs + [False] * ag:
        _, send_seg, _ = ring_step(pos, n, 0, reducing, off)
        out.append(Phase(groups.ravel(), np.roll(groups, -1, axis=1).ravel(),
                         (sizes[:, send_seg] * itemsize).ravel(), repeat=n - 1, latency_steps=n - 1))
    return out


def tree_phases(n: int, count: int, itemsize: int) -> list[Phase]:
    """Double binary tree allreduce: half the buffer up each of two mirrored heap trees, then down."""
    half = [count // 2, count - count // 2]
    edges: list[tuple[int, int, int]] = []   # (child, parent, elements)
    for t, mirror in enumerate((False, True)):
        for q in range(1, n):
            parent, _ = heap_links(q, n)
            assert parent is not None
            a, b = (mirrored(q, n), mirrored(parent, n)) if mirror else (q, parent)
            edges.append((a, b, half[t]))
    e = np.array(edges, dtype=np.int64).reshape(-1, 3)
    depth = max(1, int(np.ceil(np.log2(n + 1))) - 1)
    return [Phase(e[:, 0], e[:, 1], e[:, 2] * itemsize, latency_steps=depth),
            Phase(e[:, 1], e[:, 0], e[:, 2] * itemsize, latency_steps=depth)]


def rhd_phases(n: int, count: int, itemsize: int) -> list[Phase]:
    """Recursive halving-doubling allreduce (with the fold of the ranks beyond the largest power of two)."""
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    ranks = np.array(fold_survivors(n), dtype=np.int64)
    bounds = segment_bounds(count, pof2)
    plans = [halving_plan(q, pof2) for q in range(pof2)]
    full = np.full(rem, count * itemsize, dtype=np.int64)
    evens = np.arange(0, 2 * rem, 2, dtype=np.int64)
    out = [Phase(evens, evens + 1, full)] if rem else []
    halving = []
    for j in range(len(plans[0])):
        partner = np.array([plans[q][j][0] for q in range(pof2)], dtype=np.int64)
        sent = [plans[q][j][2] for q in range(pof2)]
        kept = [plans[q][j][1] for q in range(pof2)]
        span = [(bounds[b[1] - 1][1] - bounds[b[0]][0]) * itemsize for b in sent]
        span_keep = [(bounds[b[1] - 1][1] - bounds[b[0]][0]) * itemsize for b in kept]
        out.append(Phase(ranks, ranks[partner], np.array(span, dtype=np.int64)))
        halving.append(Phase(ranks, ranks[partner], np.array(span_keep, dtype=np.int64)))
    out += halving[::-1]
    if rem:
        out.append(Phase(evens + 1, evens, full))
    return out


def hier_phases(servers: int, gpus: int, count: int, itemsize: int) -> list[Phase]:
    """Hierarchical allreduce: intra-server ring reduce-scatter, per-rail ring allreduce of the owned segment,
    intra-server ring allgather."""
    local = np.arange(servers * gpus, dtype=np.int64).reshape(servers, gpus)
    bounds = segment_bounds(count, gpus)
    owned = hier_owned_segment(np.arange(gpus), gpus)
    rail_counts = np.array([bounds[s][1] - bounds[s][0] for s in owned], dtype=np.int64)
    counts = np.full(servers, count, dtype=np.int64)
    return (ring_phases(local, counts, itemsize, rs=True, ag=False)
            + ring_phases(local.T.copy(), rail_counts, itemsize, rs=True, ag=True)
            + ring_phases(local, counts, itemsize, rs=False, ag=True))


def rail_first_phases(servers: int, gpus: int, count: int, itemsize: int) -> list[Phase]:
    """Rail-first allreduce: per-rail ring reduce-scatter, intra-server ring allreduce of the segment each
    server owns, per-rail ring allgather."""
    local = np.arange(servers * gpus, dtype=np.int64).reshape(servers, gpus)
    bounds = segment_bounds(count, servers)
    owned = hier_owned_segment(np.arange(servers), servers)
    seg_counts = np.array([bounds[s][1] - bounds[s][0] for s in owned], dtype=np.int64)
    counts = np.full(gpus, count, dtype=np.int64)
    return (ring_phases(local.T.copy(), counts, itemsize, rs=True, ag=False)
            + ring_phases(local, seg_counts, itemsize, rs=True, ag=True)
            + ring_phases(local.T.copy(), counts, itemsize, rs=False, ag=True))


def unit_steps(phs: list[Phase]) -> list[Phase]:
    """Each phase repeated ``repeat`` times as that many one-step phases (latency split evenly)."""
    return [Phase(ph.src, ph.dst, ph.nbytes, 1, max(1, ph.latency_steps // ph.repeat), ph.lane)
            for ph in phs for _ in range(ph.repeat)]


def hetero_phases(servers: int, gpus: int, count: int, itemsize: int, hier_fraction: float) -> list[Phase]:
    """Heterogeneous allreduce: the first ``hier_fraction`` of the buffer hierarchical (lane 0), the rest
    rail-first (lane 1), at once (the communicator's split: ``round(count * hier_fraction)`` elements)."""
    hier_count = int(round(count * hier_fraction))
    a = hier_phases(servers, gpus, hier_count, itemsize) if hier_count else []
    b = rail_first_phases(servers, gpus, count - hier_count, itemsize) if count - hier_count else []
    return a + [Phase(p.src, p.dst, p.nbytes, p.repeat, p.latency_steps, lane=1) for p in b]


def pairwise_phases(n: int, block_bytes: int) -> list[Phase]:
    """Pairwise all-to-all: every step's blocks are posted at once, so all n(n-1) flows share one phase."""
    pos = np.arange(n, dtype=np.int64)
    dst = np.concatenate([to for to, _ in pairwise_peers(pos, n)]) if n > 1 else pos[:0]
    return [Phase(np.tile(pos, n - 1), dst, np.full(len(dst), block_bytes, dtype=np.int64),
                  latency_steps=A2A_LATENCY_STEPS["pairwise"])]


def rail_phases(servers: int, gpus: int, block_bytes: int) -> list[Phase]:
    """Rail-aligned all-to-all, pipelined: each GPU sends every local GPU b the blocks for rail b (one per
    server) over NVLink, and each rail carries G blocks between every pair of servers, all overlapping."""
    src, dst, nbytes = [], [], []
    r = np.arange(servers * gpus, dtype=np.int64).reshape(servers, gpus)
    for b in range(1, gpus):                         # intra: GPU a -> GPU a+b of the same server
        src.append(r.ravel())
        dst.append(np.roll(r, -b, axis=1).ravel())
        nbytes.append(np.full(r.size, servers * block_bytes, dtype=np.int64))
    for i in range(servers):                         # rail: server i's GPU g -> GPU g of each other server
        for j in rail_order(i, servers):
            src.append(r[i])
            dst.append(r[j])
            nbytes.append(np.full(gpus, gpus * block_bytes, dtype=np.int64))
    if not src:
        return []
    return [Phase(np.concatenate(src), np.concatenate(dst), np.concatenate(nbytes),
                  latency_steps=A2A_LATENCY_STEPS["rail"])]


def check_op(op: str, algo: str, n: int, size_bytes: int, itemsize: int) -> None:
    """``op`` with ``algo`` on ``n`` ranks of ``size_bytes`` each is something the simulator schedules; else a
    one-line ``ScheduleError`` naming the flag."""
    if op not in ("allreduce", "alltoall", "allgather", "reducescatter"):
        raise ScheduleError(f"OP {op!r}: the simulator runs allreduce, allgather, reducescatter, alltoall")
    if algo not in ALGOS[op] or (op in ("allgather", "reducescatter") and algo != "ring"):
        allowed = ALGOS[op] if op in ("allreduce", "alltoall") else ("ring",)
        raise ScheduleError(f"--algo {algo!r}: allowed for {op}: {', '.join(allowed)}")
    if size_bytes // itemsize < n:
        raise ScheduleError(f"--size {size_bytes}: must be at least {n * itemsize} bytes ({itemsize}-byte elements, "
                            f"one per rank)")


def alltoall_flows(servers: int, gpus: int, algo: str) -> int:
    """Flows of the all-to-all's one phase: n(n-1) pairwise; G(G-1) per server plus G per ordered server pair
    rail-aligned."""
    n = servers * gpus
    return n * (n - 1) if algo == "pairwise" else servers * gpus * (gpus - 1) + servers * (servers - 1) * gpus


def alltoall_phase(servers: int, gpus: int, algo: str, block_bytes: int) -> list[Phase]:
    """The one phase of ``algo``'s all-to-all (any size: the caller decides whether its flows fit)."""
    n = servers * gpus
    return pairwise_phases(n, block_bytes) if algo == "pairwise" else rail_phases(servers, gpus, block_bytes)


def phases(op: str, algo: str, servers: int, gpus: int, size_bytes: int, itemsize: int = 4,
           model: CostModel | None = None) -> list[Phase]:
    """The phases of collective ``op`` with ``algo`` on ``servers`` x ``gpus`` ranks, ``size_bytes`` per rank;
    ``model`` (the link costs) sets the hetero allreduce's split as the communicator's tuner would."""
    n = servers * gpus
    check_op(op, algo, n, size_bytes, itemsize)
    count = size_bytes // itemsize
    everyone = np.arange(n, dtype=np.int64).reshape(1, n)
    if op == "allreduce":
        if algo == "ring":
            return ring_phases(everyone, np.array([count]), itemsize, rs=True, ag=True)
        if algo == "tree":
            return tree_phases(n, count, itemsize)
        if algo == "rhd":
            return rhd_phases(n, count, itemsize)
        if algo == "hetero":
            if model is None:
                raise ScheduleError("--algo hetero: needs the link cost model to choose its split")
            frac = hetero_fraction(model, servers, gpus, count * itemsize)
            return hetero_phases(servers, gpus, count, itemsize, frac)
        return hier_phases(servers, gpus, count, itemsize)
    if op in ("allgather", "reducescatter"):
        return ring_phases(everyone, np.array([count]), itemsize, rs=op == "reducescatter", ag=op == "allgather",
                           off=-1)
    flows = alltoall_flows(servers, gpus, algo)
    if flows > MAX_FLOWS:
        raise ScheduleError(f"--gpus {n}: alltoall {algo} has {flows:,} flows, the event-driven engine holds "
                            f"{MAX_FLOWS:,} (larger ones run on the link-load model, sw.sim.alltoall_model)")
    return alltoall_phase(servers, gpus, algo, (count // n) * itemsize)
