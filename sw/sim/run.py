"""One simulated collective: phases from the shared schedules, paths on the shared topology, max-min time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from sw.collectives.fabric_topology import TopologySpec
from sw.collectives.tuner import CostModel, LinkCost

from .flow_fabric import LINK_CLASSES, SimFabric
from .maxmin import run_phase
from .schedules import phases

BUS_FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
               "allgather": lambda n: (n - 1) / n, "reducescatter": lambda n: (n - 1) / n}


@dataclass(frozen=True)
class SimParams:
    """Cost-model constants besides the topology: per-message overhead, NVLink stand-in rate, CC efficiency."""

    alpha_s: float = 5e-6
    intra_rate_bps: float = 0.0        # 0: 9x the rail link rate, as fabric jobs default
    efficiency: float = 1.0
    itemsize: int = 4


def simulate(spec: TopologySpec, op: str, algo: str, size_bytes: int, routing: str,
             params: SimParams = SimParams(), hot: int = 5) -> dict[str, Any]:
    """Predicted time of ``op`` and link statistics; the dict carries the ``sim collective --json`` keys and
    ``link_util`` (utilisation of every link that carried bytes, for the plot)."""
    t0 = time.perf_counter()
    intra = params.intra_rate_bps or 9 * spec.link_rate_bps
    fab = SimFabric(spec, intra, spec.delay_ns * 1e-9)
    link_bytes = np.zeros(fab.n_links)
    total_s, solves = 0.0, 0
    model = CostModel(LinkCost(params.alpha_s, intra), LinkCost(params.alpha_s, spec.link_rate_bps * params.efficiency))
    for ph in phases(op, algo, spec.servers, spec.rails, size_bytes, params.itemsize, model):
        paths = fab.paths(ph.src, ph.dst, routing)
        t, k = run_phase(paths, ph.nbytes, fab.capacity_bps, params.efficiency)
        solves += k
        path_lat = np.zeros(len(ph.src))
        np.add.at(path_lat, paths.flow, fab.latency_s[paths.link])
        total_s += ph.repeat * t + ph.latency_steps * (params.alpha_s + float(path_lat.max(initial=0.0)))
        link_bytes += np.bincount(paths.link, weights=ph.nbytes[paths.flow] * ph.repeat, minlength=fab.n_links)
    gpus = spec.servers * spec.rails
    util = link_bytes * 8 / (fab.capacity_bps * total_s) if total_s > 0 else np.zeros(fab.n_links)
    used = np.flatnonzero(link_bytes > 0)
    top = used[np.argsort(-util[used], kind="stable")[:hot]]
    algbw = size_bytes * 8 / total_s if total_s > 0 else 0.0
    return {
        "predicted_s": total_s,
        "algbw_bps": algbw,
        "busbw_bps": algbw * BUS_FACTORS[op](gpus),
        "bytes_by_link_class": {c: float(link_bytes[fab.link_class == i].sum()) for i, c in enumerate(LINK_CLASSES)},
        "max_link_util": float(util[used].max(initial=0.0)),
        "p99_link_util": float(np.percentile(util[used], 99)) if len(used) else 0.0,
        "hot_links": [{"link": fab.link_name(int(i)), "class": LINK_CLASSES[fab.link_class[i]],
                       "util": float(util[i]), "bytes": float(link_bytes[i])} for i in top],
        "wall_s": time.perf_counter() - t0,
        "gpus": gpus,
        "rate_solves": solves,
        "link_util": util[used],
    }
