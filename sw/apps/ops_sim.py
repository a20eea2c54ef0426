"""The flow-level simulator as the operations system's expected model: for a telemetry store's topology and the
collectives its job ran, the simulator's time of each (op, bytes, algorithm) on the healthy fabric, calibrated on the
run's first healthy steps (``sw.ops.expected.fit_sim``), and the job's step (``sw.apps.train_sim.step_records``,
the step model of ``train --backend sim``) with those times.

Here, in the top layer, because ``sw.ops`` is pure (standard library): it gets the simulator's figures as values.
A collective the simulator has no schedule for (an op or algorithm it does not run, a store without its
topology) keeps the alpha-beta line; a store that does not name its job (``meta.workload``) has no step prediction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sw.collectives.config import intra_rate_for
from sw.collectives.fabric_topology import TopologyError, TopologySpec
from sw.ops.expected import Expected, SimCollective, algo_name, fit_sim
from sw.sim import SimParams, simulate
from sw.sim.schedules import ScheduleError
from sw.workload import plan_step
from sw.workload.runner import DTYPE
from sw.workload.schedule import OP_ALLREDUCE, OP_ALLTOALL
from sw.workload.spec import ModelSpec, WorkloadSpecError, validate

from .train_sim import CollectiveCost, step_records

ROUTING = "ecmp"
"""The emulated fabric's switches hash every flow (fabric.p4's ECMP); the expected model routes so too."""
PROBE_ALPHA_S = 1e-3
"""The per-message cost of the second simulation: the difference to the first (none) counts the messages on the
collective's critical path."""


def topology_of(meta: dict[str, Any]) -> TopologySpec | None:
    """The fabric a store's run used (``meta.topology``), or None when the store does not say."""
    topo = meta.get("topology") or {}
    try:
        return TopologySpec(servers=int(topo["servers"]), gpus_per_server=int(topo["gpus_per_server"]),
                            pods=int(topo.get("pods", 1)), spines=int(topo["spines"]),
                            link_rate_bps=int(topo["link_rate_bps"]), delay_ns=int(topo.get("delay_ns", 0)))
    except (KeyError, TypeError, ValueError, TopologyError):
        return None


def sim_collective(spec: TopologySpec, op: str, algo: str, nbytes: int) -> SimCollective | None:
    """The simulator's figures of one collective on ``spec`` (None where it has no schedule for it)."""
    intra = intra_rate_for(None, float(spec.link_rate_bps)) or 0.0
    itemsize = np.dtype(DTYPE).itemsize
    try:
        wire = simulate(spec, op, algo, nbytes, ROUTING, SimParams(alpha_s=0.0, intra_rate_bps=intra,
                                                                   itemsize=itemsize))["predicted_s"]
        probe = simulate(spec, op, algo, nbytes, ROUTING, SimParams(alpha_s=PROBE_ALPHA_S, intra_rate_bps=intra,
                                                                    itemsize=itemsize))["predicted_s"]
    except (ScheduleError, ValueError):
        return None
    return SimCollective(op, nbytes, algo, wire * 1e9, max(1, round((probe - wire) / PROBE_ALPHA_S)))


def job_spec(meta: dict[str, Any]) -> ModelSpec | None:
    """The job's model as its rank 0 recorded it (``meta.workload``), or None."""
    data = meta.get("workload")
    if not isinstance(data, dict):
        return None
    try:
        return validate(ModelSpec(**data))
    except (TypeError, WorkloadSpecError):
        return None


def step_ns(spec: ModelSpec, topo: TopologySpec, durations: dict[tuple[str, int], tuple[str, float]]
            ) -> float | None:
    """One step of ``spec``'s plan on ``topo`` with collective times ``durations`` ((op, bytes) -> (algorithm,
    ns)), as ``train --backend sim`` steps it; None when a collective of the plan has no time."""
    world = topo.servers * topo.gpus_per_server
    try:
        plan = plan_step(spec, world, float(topo.link_rate_bps))
    except WorkloadSpecError:
        return None
    itemsize = np.dtype(DTYPE).itemsize
    sizes = [(OP_ALLREDUCE, b.nbytes) for b in plan.buckets]
    if plan.spec.moe:
        sizes.append((OP_ALLTOALL, plan.a2a_elems * itemsize))
    if any(k not in durations for k in sizes):
        return None
    costs = {k: CollectiveCost(k[0], k[1], durations[k][0], durations[k][1], np.zeros(world), "sim") for k in sizes}
    rec = step_records(plan, costs, np.ones(1), 1, 0)[0][0]
    return float(rec.t1_ns - rec.t0_ns)


def with_sim(exp: Expected, meta: dict[str, Any], collectives: list[dict[str, Any]]) -> Expected:
    """``exp`` with the simulator's calibrated predictions of every (op, bytes, algorithm) in ``collectives`` (the
    store's) and of the job's step; unchanged (alpha-beta) when the simulator times none of the healthy ones."""
    topo = topology_of(meta)
    if topo is None:
        return exp
    keys = sorted({(c["op"], c["nbytes"], algo_name(c["algo"])) for c in collectives})
    sims = [s for s in (sim_collective(topo, op, algo, n) for op, n, algo in keys) if s is not None]
    model = fit_sim(sims, collectives, exp.first_step, exp.last_step)
    if model is None:
        return exp
    spec = job_spec(meta)
    if spec is not None:
        itemsize = np.dtype(DTYPE).itemsize
        intra = intra_rate_for(None, float(topo.link_rate_bps)) or 0.0
        calibrated: dict[tuple[str, int], tuple[str, float]] = {}
        ideal: dict[tuple[str, int], tuple[str, float]] = {}
        for s in model.collectives.values():
            if (s.op, s.nbytes) in calibrated:     # one algorithm per size (the tuner's): the first recorded
                continue
            calibrated[(s.op, s.nbytes)] = (s.algo, model.predict_ns(s.op, s.nbytes, s.algo) or 0.0)
            got = simulate(topo, s.op, s.algo, s.nbytes, ROUTING, SimParams(intra_rate_bps=intra, itemsize=itemsize))
            ideal[(s.op, s.nbytes)] = (s.algo, got["predicted_s"] * 1e9)
        model.step_ns = step_ns(spec, topo, calibrated)
        model.step_sim_ns = step_ns(spec, topo, ideal)
    exp.sim = model
    return exp
