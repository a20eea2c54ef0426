"""One simulated collective: phases from the shared schedules, paths on the shared topology, max-min time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from sw.collectives.fabric_topology import TopologySpec
from sw.collectives.tuner import CostModel, LinkCost

from .alltoall_model import alltoall_link_load
from .flow_fabric import LINK_CLASSES, FlowPaths, SimFabric
from .maxmin import maxmin_rates, run_phase
from .schedules import MAX_FLOWS, Phase, alltoall_flows, check_op, phases, unit_steps

BUS_FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
               "allgather": lambda n: (n - 1) / n, "reducescatter": lambda n: (n - 1) / n}


@dataclass(frozen=True)
class SimParams:
    """Cost-model constants besides the topology: per-message overhead, NVLink stand-in rate, CC efficiency."""

    alpha_s: float = 5e-6
    intra_rate_bps: float = 0.0        # 0: 9x the rail link rate, as fabric jobs default
    efficiency: float = 1.0
    itemsize: int = 4
    link_shares: tuple[tuple[str, str, float], ...] = ()
    """Links ``(a, b, share)`` running at ``share`` of their rate (``SimFabric.scale_links``): a what-if."""


def run_lanes(fab: SimFabric, schedule: list[Phase], routing: str, params: SimParams, batch: float = 0.01
              ) -> tuple[float, int, np.ndarray]:
    """Lanes of phases at the same time, each lane's steps in order: the flows of every lane's current step share
    the links max-min; a lane whose step has ended starts its next one after that step's latency.  Returns
    (time, rate computations, bytes per link)."""
    lanes = sorted({ph.lane for ph in schedule})
    steps = [unit_steps([ph for ph in schedule if ph.lane == lane]) for lane in lanes]
    link_bytes = np.zeros(fab.n_links)
    prepared: list[list[tuple[FlowPaths, np.ndarray, float]]] = []
    for lane_steps in steps:
        out = []
        for ph in lane_steps:
            paths = fab.paths(ph.src, ph.dst, routing)
            lat = np.zeros(len(ph.src))
            np.add.at(lat, paths.flow, fab.latency_s[paths.link])
            out.append((paths, ph.nbytes.astype(np.float64) * 8, ph.latency_steps * (params.alpha_s + float(
                lat.max(initial=0.0)))))
            link_bytes += np.bincount(paths.link, weights=ph.nbytes[paths.flow], minlength=fab.n_links)
        prepared.append(out)
    idx = [0] * len(prepared)
    left = [p[0][1].copy() if p else np.zeros(0) for p in prepared]
    ready = [0.0] * len(prepared)
    t, solves = 0.0, 0
    while any(i < len(p) for i, p in zip(idx, prepared, strict=True)):
        running = [k for k, p in enumerate(prepared) if idx[k] < len(p) and ready[k] <= t]
        waiting = [ready[k] - t for k, p in enumerate(prepared) if idx[k] < len(p) and ready[k] > t]
        if not running:
            t += min(waiting)
            continue
        flows, links, hops, offsets, off = [], [], [], [], 0
        for k in running:
            paths = prepared[k][idx[k]][0]
            flows.append(paths.flow + off)
            links.append(paths.link)
            hops.append(paths.hops)
            offsets.append(off)
            off += len(paths.hops)
        union = FlowPaths(np.concatenate(flows), np.concatenate(links), np.concatenate(hops))
        bits = np.concatenate([left[k] for k in running])
        active = bits > 0
        rate = maxmin_rates(union, fab.capacity_bps, active, tol=batch) * params.efficiency
        solves += 1
        finish = np.full(len(bits), np.inf)
        finish[active] = bits[active] / rate[active]
        first = float(finish.min(initial=np.inf))
        dt = min([first, *waiting])
        done = active & (finish <= dt * (1 + batch)) if dt == first else np.zeros(len(bits), dtype=bool)
        step_dt = float(finish[done].max()) if done.any() else dt
        bits[active] -= rate[active] * step_dt
        bits[done] = 0.0
        t += step_dt
        for k, start in zip(running, offsets, strict=True):
            left[k] = bits[start:start + len(left[k])]
            if not (left[k] > 0).any():
                ready[k] = t + prepared[k][idx[k]][2]
                idx[k] += 1
                if idx[k] < len(prepared[k]):
                    left[k] = prepared[k][idx[k]][1].copy()
    return max([t, *ready]), solves, link_bytes


A2A_MODELS = ("auto", "engine", "link-load")
"""All-to-all timing: the event-driven max-min engine, the link-load model (``alltoall_model``), or ``auto``: the
engine while the phase has at most ``schedules.MAX_FLOWS`` flows, else the link-load model."""


def simulate(spec: TopologySpec, op: str, algo: str, size_bytes: int, routing: str,
             params: SimParams = SimParams(), hot: int = 5, a2a_model: str = "auto") -> dict[str, Any]:
    """Predicted time of ``op`` and link statistics; the dict carries the ``sim collective --json`` keys,
    ``link_util`` (utilisation of every link that carried bytes, for the plot), ``nic_tx_bytes`` (per rank, what
    its NIC sent), ``rate_solves`` and ``model`` (what timed it: ``engine``, ``link-load exact|expected``)."""
    t0 = time.perf_counter()
    intra = params.intra_rate_bps or 9 * spec.link_rate_bps
    fab = SimFabric(spec, intra, spec.delay_ns * 1e-9)
    fab.scale_links(params.link_shares)
    link_bytes = np.zeros(fab.n_links)
    total_s, solves, how = 0.0, 0, "engine"
    gpus = spec.servers * spec.rails
    check_op(op, algo, gpus, size_bytes, params.itemsize)
    if op == "alltoall" and (a2a_model == "link-load" or (
            a2a_model == "auto" and alltoall_flows(spec.servers, spec.rails, algo) > MAX_FLOWS)):
        block = (size_bytes // params.itemsize // gpus) * params.itemsize
        total_s, link_bytes, loads = alltoall_link_load(fab, algo, block, routing, params.alpha_s, params.efficiency)
        return _result(fab, op, size_bytes, total_s, link_bytes, 0, f"link-load {loads}", t0, hot)
    model = CostModel(LinkCost(params.alpha_s, intra), LinkCost(params.alpha_s, spec.link_rate_bps * params.efficiency))
    schedule = phases(op, algo, spec.servers, spec.rails, size_bytes, params.itemsize, model)
    if any(ph.lane for ph in schedule):
        total_s, solves, link_bytes = run_lanes(fab, schedule, routing, params)
        schedule = []
    for ph in schedule:
        paths = fab.paths(ph.src, ph.dst, routing)
        t, k = run_phase(paths, ph.nbytes, fab.capacity_bps, params.efficiency)
        solves += k
        path_lat = np.zeros(len(ph.src))
        np.add.at(path_lat, paths.flow, fab.latency_s[paths.link])
        total_s += ph.repeat * t + ph.latency_steps * (params.alpha_s + float(path_lat.max(initial=0.0)))
        link_bytes += np.bincount(paths.link, weights=ph.nbytes[paths.flow] * ph.repeat, minlength=fab.n_links)
    return _result(fab, op, size_bytes, total_s, link_bytes, solves, how, t0, hot)


def _result(fab: SimFabric, op: str, size_bytes: int, total_s: float, link_bytes: np.ndarray, solves: int,
            how: str, t0: float, hot: int) -> dict[str, Any]:
    """``simulate``'s dict from the collective's time and bytes per link."""
    gpus = fab.gpus
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
        "model": how,
        "link_util": util[used],
        "nic_tx_bytes": link_bytes[fab.off_nic:fab.off_ls:2].copy(),
    }
