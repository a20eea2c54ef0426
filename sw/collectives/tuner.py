"""Picks the algorithm and pipeline chunk size of each call from an alpha-beta cost model of the topology.

Each link class (``intra``: shared memory in a server; ``inter``: a rail between servers) costs
alpha + bytes / bandwidth per message.  The model starts from the configured rates and default latencies
and can be replaced by a short measured calibration.  ``STARPULSE_ALGO`` (like NCCL_ALGO) and
``STARPULSE_CHUNK_BYTES`` override it, and so do per-call arguments (an environment choice that the layout
cannot run, e.g. 'rhd' allgather on 6 ranks, falls back to the model, as NCCL_ALGO does).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from sw.units import UnitError, parse_size_bytes

from .errors import CollectiveUserError
from .rank_layout import RankLayout

ALGOS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree", "rhd", "hier", "hetero"),
    "broadcast": ("ring", "tree"),
    "reduce": ("ring", "tree"),
    "allgather": ("ring", "rhd"),
    "reducescatter": ("ring", "rhd"),
    "alltoall": ("pairwise", "rail"),
}
"""The schedules each collective offers."""

ENV_ALGO = "STARPULSE_ALGO"
ENV_CHUNK = "STARPULSE_CHUNK_BYTES"
ENV_HETERO_SPLIT = "STARPULSE_HETERO_SPLIT"
"""Share (0..1) of a ``hetero`` allreduce sent through the hierarchical path, instead of the model's choice."""
MIN_CHUNK_BYTES = 4 * 1024
MAX_CHUNK_BYTES = 4 * 1024 * 1024
HETERO_STEPS = 64
"""The heterogeneous allreduce's split is a multiple of 1/HETERO_STEPS of the buffer."""
HETERO_SLACK = 0.05
"""Allreduce: the model chooses ``hetero`` only when it is modelled this much faster than the best single-path
algorithm (its second thread and lane cost something the model does not charge)."""
RAIL_SLACK = 0.02
"""All-to-all: rail-aligned is chosen unless pairwise is modelled more than this much faster.  Both put the same
bytes on every NIC, and the model charges pairwise nothing for what only it is exposed to (ECMP collisions on
spine uplinks, oversubscription not seen by a one-flow calibration, other jobs' spine traffic)."""


@dataclass(frozen=True)
class LinkCost:
    """alpha (per-message latency, s) and bandwidth (bit/s) of one link class, in network time."""

    alpha_s: float
    rate_bps: float

    def time_s(self, nbytes: float, messages: float = 1.0) -> float:
        return messages * self.alpha_s + 8 * nbytes / self.rate_bps


@dataclass(frozen=True)
class CostModel:
    """Costs of the link classes: ``intra`` (shm), ``inter`` (same rail, via one leaf) and ``cross`` (between
    rails, via a spine; the same as ``inter`` unless measured or configured otherwise)."""

    intra: LinkCost
    inter: LinkCost
    cross: LinkCost | None = None

    @property
    def cross_link(self) -> LinkCost:
        return self.cross or self.inter


def hier_stages(model: CostModel, servers: int, gpus: int, nbytes: float) -> list[tuple[str, float]]:
    """Hierarchical allreduce of ``nbytes`` as (resource, seconds alone) stages: intra reduce-scatter on shared
    memory, per-rail allreduce of 1/G on the NIC, intra allgather."""
    half = model.intra.time_s((gpus - 1) / gpus * nbytes, gpus - 1) if gpus > 1 else 0.0
    rail = model.inter.time_s(2 * (servers - 1) / servers * nbytes / gpus, 2 * (servers - 1)) if servers > 1 else 0.0
    return [("shm", half), ("nic", rail), ("shm", half)]


def rail_first_stages(model: CostModel, servers: int, gpus: int, nbytes: float) -> list[tuple[str, float]]:
    """Rail-first allreduce of ``nbytes`` as stages: per-rail reduce-scatter on the NIC, intra allreduce of the
    owned 1/S on shared memory, per-rail allgather."""
    half = model.inter.time_s((servers - 1) / servers * nbytes, servers - 1) if servers > 1 else 0.0
    intra = model.intra.time_s(2 * (gpus - 1) / gpus * nbytes / servers, 2 * (gpus - 1)) if gpus > 1 else 0.0
    return [("nic", half), ("shm", intra), ("nic", half)]


def overlap_time_s(lanes: list[list[tuple[str, float]]]) -> float:
    """Time of stage sequences run at once, each lane's stages in order; lanes whose current stages use the
    same resource share it equally (a two-resource fluid model of the heterogeneous allreduce)."""
    pos = [0] * len(lanes)
    left = [lane[0][1] if lane else 0.0 for lane in lanes]
    t = 0.0
    while True:
        active = [k for k, lane in enumerate(lanes) if pos[k] < len(lane)]
        if not active:
            return t
        users: dict[str, int] = {}
        for k in active:
            res = lanes[k][pos[k]][0]
            users[res] = users.get(res, 0) + 1
        share = {k: 1.0 / users[lanes[k][pos[k]][0]] for k in active}
        dt = min(left[k] / share[k] for k in active)
        t += dt
        for k in active:
            left[k] -= share[k] * dt
            while pos[k] < len(lanes[k]) and left[k] <= 1e-15:
                pos[k] += 1
                left[k] = lanes[k][pos[k]][1] if pos[k] < len(lanes[k]) else 0.0


def hier_time_s(model: CostModel, servers: int, gpus: int, nbytes: float) -> float:
    """Modelled time of the hierarchical allreduce (its stages in sequence)."""
    return sum(t for _, t in hier_stages(model, servers, gpus, nbytes))


def hetero_time_s(model: CostModel, servers: int, gpus: int, nbytes: float, hier_fraction: float) -> float:
    """Modelled time of the heterogeneous allreduce with ``hier_fraction`` of the bytes on the hierarchical path
    and the rest on the rail-first path, run at once (``overlap_time_s``)."""
    lanes = []
    if hier_fraction > 0:
        lanes.append(hier_stages(model, servers, gpus, hier_fraction * nbytes))
    if hier_fraction < 1:
        lanes.append(rail_first_stages(model, servers, gpus, (1 - hier_fraction) * nbytes))
    return overlap_time_s(lanes)


def hetero_fraction(model: CostModel, servers: int, gpus: int, nbytes: float) -> float:
    """The share of the buffer the heterogeneous allreduce sends through the hierarchical path: the multiple of
    1/HETERO_STEPS with the least modelled time (the larger share on a tie), where both parts finish together."""
    steps = range(HETERO_STEPS, -1, -1)
    best = min(steps, key=lambda k: hetero_time_s(model, servers, gpus, nbytes, k / HETERO_STEPS))
    return best / HETERO_STEPS


def parse_algo_env(raw: str) -> dict[str, str]:
    """'ring' (every collective that has it) or 'allreduce=hier,alltoall=rail' -> {collective: algo}."""
    known = {a for algos in ALGOS.values() for a in algos}
    out: dict[str, str] = {}
    for item in (s.strip() for s in raw.split(",") if s.strip()):
        coll, _, algo = item.rpartition("=")
        algo = algo.strip().lower()
        coll = coll.strip().lower()
        if coll and coll not in ALGOS:
            raise CollectiveUserError(f"${ENV_ALGO}={raw!r}: unknown collective {coll!r} "
                                      f"(allowed: {', '.join(ALGOS)})")
        if algo not in (ALGOS[coll] if coll else known):
            allowed = ALGOS[coll] if coll else sorted(known)
            raise CollectiveUserError(f"${ENV_ALGO}={raw!r}: unknown algorithm {algo!r} "
                                      f"(allowed: {', '.join(allowed)})")
        for c in [coll] if coll else [c for c, algos in ALGOS.items() if algo in algos]:
            out[c] = algo
    return out


def parse_chunk_env(raw: str) -> int:
    try:
        value = parse_size_bytes(raw, what=f"${ENV_CHUNK}")
    except UnitError as exc:
        raise CollectiveUserError(str(exc)) from None
    if value < 1:
        raise CollectiveUserError(f"${ENV_CHUNK}={raw!r}: must be at least 1 byte")
    return value


def parse_hetero_split_env(raw: str) -> float:
    """$STARPULSE_HETERO_SPLIT: a number in 0..1 (the hierarchical share of a ``hetero`` allreduce)."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise CollectiveUserError(f"${ENV_HETERO_SPLIT}={raw!r}: expected a number from 0 to 1 (the share of a "
                                  "hetero allreduce on the hierarchical path)")
    return value


class Tuner:
    """Deterministic choice (every rank computes the same) of algorithm and chunk bytes per call."""

    def __init__(self, layout: RankLayout, model: CostModel, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.env = env
        self.layout = layout
        self.model = model
        self.env_algo = parse_algo_env(env[ENV_ALGO]) if env.get(ENV_ALGO, "").strip() else {}
        self.env_chunk = parse_chunk_env(env[ENV_CHUNK]) if env.get(ENV_CHUNK, "").strip() else None
        raw_split = env.get(ENV_HETERO_SPLIT, "").strip()
        self.env_hetero_split = parse_hetero_split_env(raw_split) if raw_split else None

    # --- model ----------------------------------------------------------------------------------------------
    def _flat_link(self) -> LinkCost:
        """The slowest link class a rank-order ring or tree crosses on this layout."""
        if len(self.layout.servers) == 1:
            return self.model.intra
        if self.layout.gpus_per_server == 1:
            return self.model.inter
        return min((self.model.inter, self.model.cross_link), key=lambda link: (link.rate_bps, -link.alpha_s))

    def available(self, coll: str) -> tuple[str, ...]:
        """Algorithms that can run on this layout (rhd needs 2^k ranks outside allreduce; hier/rail uniformity)."""
        n = self.layout.world_size
        out = []
        for algo in ALGOS[coll]:
            if algo == "rhd" and coll != "allreduce" and n & (n - 1):
                continue
            if algo in ("hier", "rail", "hetero") and not self.layout.uniform:
                continue
            out.append(algo)
        return tuple(out)

    def estimate_s(self, coll: str, algo: str, nbytes: int) -> float:
        """Modelled time of one call moving ``nbytes`` per rank (the full buffer of allreduce/broadcast)."""
        n = self.layout.world_size
        if n == 1:
            return 0.0
        link = self._flat_link()
        logn = math.ceil(math.log2(n))
        if coll == "allreduce":
            if algo == "ring":
                return link.time_s(2 * (n - 1) / n * nbytes, 2 * (n - 1))
            if algo == "tree":
                return link.time_s(2 * nbytes, 2 * logn)
            if algo == "rhd":
                fold = 0 if n & (n - 1) == 0 else 2
                return link.time_s(2 * (n - 1) / n * nbytes + fold * nbytes, 2 * logn + fold)
            g, s = self.layout.gpus_per_server, len(self.layout.servers)
            if algo == "hetero":
                return hetero_time_s(self.model, s, g, nbytes, self.hetero_fraction(nbytes))
            return hier_time_s(self.model, s, g, nbytes)
        if coll in ("broadcast", "reduce"):
            return link.time_s(nbytes, n - 1) if algo == "ring" else link.time_s(2 * nbytes, logn)
        if coll in ("allgather", "reducescatter"):
            total = nbytes * (n - 1) / n
            return link.time_s(total, n - 1 if algo == "ring" else logn)
        return self._alltoall_s(algo, nbytes)

    def _alltoall_s(self, algo: str, nbytes: int) -> float:
        """All-to-all of ``nbytes`` per rank (n blocks B): both schedules put (S-1)*G blocks on every NIC.

        Pairwise posts everything at once: the NIC carries S-1 same-rail and n-G-(S-1) cross-rail blocks while
        shared memory carries G-1.  Rail-aligned (pipelined per block) sends its own S-1 blocks at once and
        each relayed one when it has landed: it ends with the NIC's (S-1)*G blocks, or with the first relayed
        block's shared-memory hop plus the (G-1)*(S-1) relayed ones, or with the whole shuffle ((G-1)*S blocks
        out of each rank) plus the last block's rail hop, whichever is latest."""
        g, s = self.layout.gpus_per_server, len(self.layout.servers)
        block = nbytes / self.layout.world_size
        intra, inter = self.model.intra, self.model.inter
        if algo == "pairwise":
            nic = (inter.time_s(block * (s - 1), s - 1)
                   + self.model.cross_link.time_s(block * (g * (s - 1) - (s - 1)), g * (s - 1) - (s - 1)))
            return max(intra.time_s(block * (g - 1), g - 1) if g > 1 else 0.0, nic)
        if s == 1:
            return intra.time_s(block * (g - 1), g - 1)
        nic = inter.time_s(block * g * (s - 1), g * (s - 1))
        if g == 1:
            return nic
        relayed = intra.time_s(block) + inter.time_s(block * (g - 1) * (s - 1), (g - 1) * (s - 1))
        shuffle = intra.time_s(block * (g - 1) * s, (g - 1) * s) + inter.time_s(block)
        return max(nic, relayed, shuffle)

    def hetero_fraction(self, nbytes: int) -> float:
        """Share of an ``nbytes`` allreduce the ``hetero`` algorithm runs through the hierarchical path
        ($STARPULSE_HETERO_SPLIT, else the model's)."""
        if self.env_hetero_split is not None:
            return self.env_hetero_split
        return hetero_fraction(self.model, len(self.layout.servers), self.layout.gpus_per_server, nbytes)

    # --- choices --------------------------------------------------------------------------------------------
    def algo(self, coll: str, nbytes: int, requested: str | None = None) -> str:
        """The per-call choice, else $STARPULSE_ALGO, else the cheapest modelled one (all-to-all: rail-aligned
        unless pairwise is modelled more than RAIL_SLACK faster; allreduce: hetero only when it is modelled
        more than HETERO_SLACK faster than the best other)."""
        if requested is not None:
            if requested not in ALGOS[coll]:
                raise CollectiveUserError(f"algo {requested!r}: unknown for {coll} (allowed: {', '.join(ALGOS[coll])})")
            return requested
        options = self.available(coll)
        env = self.env_algo.get(coll)
        if env is not None and env in options:
            return env
        best = self.model_best(coll, nbytes, options)
        if coll == "alltoall" and "rail" in options and (
                self.estimate_s(coll, "rail", nbytes) <= (1 + RAIL_SLACK) * self.estimate_s(coll, best, nbytes)):
            return "rail"
        return best

    def model_best(self, coll: str, nbytes: int, options: tuple[str, ...]) -> str:
        """The cheapest modelled algorithm of ``options`` (earlier ones win ties; ``hetero`` needs HETERO_SLACK)."""
        best = min(options, key=lambda a: (self.estimate_s(coll, a, nbytes), options.index(a)))
        single = [a for a in options if a != "hetero"]
        if best == "hetero" and single:
            other = min(single, key=lambda a: (self.estimate_s(coll, a, nbytes), single.index(a)))
            if self.estimate_s(coll, best, nbytes) * (1 + HETERO_SLACK) > self.estimate_s(coll, other, nbytes):
                return other
        return best

    def chunk_bytes(self, coll: str, algo: str, nbytes: int, requested: int | None = None) -> int:
        """Pipeline chunk: per call, else $STARPULSE_CHUNK_BYTES, else sqrt(alpha * bandwidth * segment)."""
        if requested is not None:
            if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
                raise CollectiveUserError(f"chunk_bytes {requested!r}: expected a positive integer")
            return requested
        if self.env_chunk is not None:
            return self.env_chunk
        link = self._flat_link()
        seg = max(1, nbytes // max(1, self.layout.world_size))
        best = math.sqrt(link.alpha_s * link.rate_bps / 8 * seg)
        return int(min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, 2 ** round(math.log2(max(best, 1))))))
