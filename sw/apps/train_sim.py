"""``starpulse train --backend sim``: the training step of ``sw.workload`` (its plan and its actions in order,
``StepPlan.ops``) timed by the flow-level simulator (``sw.sim``) instead of run on ranks: a model, not an emulation.

Every action in order, per class of ranks with the same compute factor (``--slow``; ranks of a class behave
alike): compute takes its planned time x the factor; a collective runs on the ranks' one communication stream
(first in, first out, as the communicator's worker thread runs them): it starts when every rank has posted it and
its stream is free, and lasts what ``sw.sim`` predicts on the topology flags' fabric (ECMP, as fabric.p4 routes)
for the algorithm the communicator's tuner picks for its size; an all-to-all blocks its rank, an allreduce runs
under the backward until the step waits for it.  The report is ``sw.workload``'s own (``job_report``).
Not modelled: congestion control (max-min rates, efficiency 1), online auto-tune (the tuner's alpha-beta prior
picks), contention between a rank's collectives (they run one at a time anyway) and packet loss: ``drops`` and
``wrong`` are null, and ``fidelity`` says ``{"model": "flow-level", ...}`` with no ``ok`` verdict.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from sw.collectives.bootstrap import default_model
from sw.collectives.config import ENV_INTRA_RATE, CommConfig, intra_rate_for
from sw.collectives.fabric_topology import TopologySpec
from sw.collectives.rank_layout import RankLayout
from sw.collectives.tuner import Tuner
from sw.sim import SimParams, simulate
from sw.sim.schedules import ScheduleError
from sw.units import UnitError, parse_duration_ns
from sw.units.straggler import parse_slow
from sw.workload import ModelSpec, StepPlan, load_spec, plan_step
from sw.workload.runner import DTYPE, StepRecord, job_report, rank_row
from sw.workload.schedule import COMM, COMPUTE, OP_ALLREDUCE, OP_ALLTOALL, OP_COMPUTE, WAIT

from .rank_job import DEFAULT_GPUS, DEFAULT_SERVERS, RankJobError, flag_rate_bps, topology_json
from .train_compare import CompareConfig

ROUTING = "ecmp"
"""The emulated fabric's switches hash every flow (fabric.p4's ECMP); so does the simulator here."""
PLOT_RANKS = 16
"""Ranks whose timeline the report keeps (the first ones and every straggler), for ``--plot``."""
FIDELITY = {"model": "flow-level", "engine": "sw.sim",
            "note": "a prediction of the flow-level simulator: nothing ran on a clock, so there is no lag to judge "
                    "and no ok verdict"}


@dataclass(frozen=True)
class CollectiveCost:
    """One collective of the plan as the simulator predicts it: the tuner's algorithm, its time and what each
    rank's NIC sends."""

    op: str
    nbytes: int
    algo: str
    duration_ns: float
    nic_tx_bytes: np.ndarray
    model: str

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "bytes": self.nbytes, "algo": self.algo, "predicted_s": self.duration_ns / 1e9,
                "model": self.model}


def sim_topology(args: argparse.Namespace) -> TopologySpec:
    """The topology flags as the simulator's fabric (checked by ``TopologySpec``: one-line errors)."""
    if args.local:
        raise RankJobError("--local: not with --backend sim (the simulator runs no ranks; drop one of them)")
    rate = flag_rate_bps(args.link_rate, "--link-rate")
    try:
        delay_ns = parse_duration_ns(args.delay, what="--delay", default_unit="ns")
    except UnitError as exc:
        raise RankJobError(str(exc)) from None
    return TopologySpec(servers=DEFAULT_SERVERS if args.servers is None else args.servers,
                        gpus_per_server=DEFAULT_GPUS if args.gpus_per_server is None else args.gpus_per_server,
                        pods=args.pods, spines=args.spines, link_rate_bps=rate, delay_ns=delay_ns, mtu=args.mtu,
                        oversubscription=args.oversubscription, seed=args.seed)


def _intra_rate_bps(args: argparse.Namespace, link_bps: float) -> float:
    given, what = (args.intra_rate, "--intra-rate") if args.intra_rate else (os.environ.get(ENV_INTRA_RATE),
                                                                             f"${ENV_INTRA_RATE}")
    rate = intra_rate_for(given, link_bps, what)
    if rate is None:
        raise RankJobError(f"{what} off: the simulator needs a rate for the NVLink stand-in (a rate like 900M or a "
                           "multiple like 9x)")
    return rate


def collective_costs(plan: StepPlan, topo: TopologySpec, tuner: Tuner, params: SimParams
                     ) -> dict[tuple[str, int], CollectiveCost]:
    """Every distinct collective of the plan (bucket allreduces, the MoE all-to-all) with the tuner's algorithm,
    timed once by ``sw.sim``."""
    itemsize = np.dtype(DTYPE).itemsize
    sizes = [(OP_ALLREDUCE, b.nbytes) for b in plan.buckets]
    if plan.spec.moe:
        sizes.append((OP_ALLTOALL, plan.a2a_elems * itemsize))
    out: dict[tuple[str, int], CollectiveCost] = {}
    for op, nbytes in sizes:
        if (op, nbytes) in out:
            continue
        algo = tuner.algo(op, nbytes)
        try:
            got = simulate(topo, op, algo, nbytes, ROUTING, params)
        except ScheduleError as exc:
            raise RankJobError(f"--model {plan.spec.name}: its {op} of {nbytes} bytes on {plan.world} ranks: {exc} "
                               "(raise the model's bucket_mb or scale)") from None
        out[(op, nbytes)] = CollectiveCost(op, nbytes, algo, got["predicted_s"] * 1e9, got["nic_tx_bytes"],
                                           got["model"])
    return out


def _ns(x: float) -> int:
    """A time in network ns as the integer the report's table holds."""
    return int(round(float(x)))


def step_records(plan: StepPlan, costs: dict[tuple[str, int], CollectiveCost], factors: np.ndarray, steps: int,
                 warmup: int) -> list[list[StepRecord]]:
    """The measured steps of each rank class (``factors``: its compute factor), in network ns from 0: the plan's
    actions in order, collectives on one FIFO stream that starts a collective when every class has posted it."""
    itemsize = np.dtype(DTYPE).itemsize
    ncls = len(factors)
    t = np.zeros(ncls)
    free = np.zeros(ncls)
    out: list[list[StepRecord]] = [[] for _ in range(ncls)]
    ops = plan.ops()
    for i in range(warmup + steps):
        recs = [StepRecord(t0_ns=_ns(t[c])) for c in range(ncls)]
        pending: list[float] = []
        for op in ops:
            if op.kind == OP_COMPUTE:
                end = t + op.ns * factors
                for c, rec in enumerate(recs):
                    rec.segments.append((COMPUTE, _ns(t[c]), _ns(end[c])))
                t = end
            elif op.kind in (OP_ALLTOALL, OP_ALLREDUCE):
                nbytes = plan.a2a_elems * itemsize if op.kind == OP_ALLTOALL else plan.buckets[op.bucket].nbytes
                local = np.maximum(t, free)                  # this rank's stream takes it up
                done = float(local.max()) + costs[(op.kind, nbytes)].duration_ns
                free[:] = done
                for c, rec in enumerate(recs):
                    rec.segments.append((COMM, _ns(local[c]), _ns(done)))
                if op.kind == OP_ALLTOALL:                   # on the critical path: the rank waits for it
                    for c, rec in enumerate(recs):
                        rec.segments.append((WAIT, _ns(t[c]), _ns(done)))
                    t = np.full(ncls, done)
                else:
                    pending.append(done)
            else:                                            # wait for every posted allreduce
                for done in pending:
                    end = np.maximum(t, done)
                    for c, rec in enumerate(recs):
                        rec.segments.append((WAIT, _ns(t[c]), _ns(end[c])))
                    t = end
                pending = []
        for c, rec in enumerate(recs):
            rec.t1_ns = _ns(t[c])
            if i >= warmup:
                out[c].append(rec)
    return out


def _nic_bytes_per_step(plan: StepPlan, costs: dict[tuple[str, int], CollectiveCost]) -> np.ndarray:
    """What each rank's NIC sends in one step (every collective of the step once)."""
    itemsize = np.dtype(DTYPE).itemsize
    total = np.zeros(plan.world)
    for op in plan.ops():
        if op.kind == OP_ALLTOALL:
            total += costs[(OP_ALLTOALL, plan.a2a_elems * itemsize)].nic_tx_bytes
        elif op.kind == OP_ALLREDUCE:
            total += costs[(OP_ALLREDUCE, plan.buckets[op.bucket].nbytes)].nic_tx_bytes
    return total


def sim_report(spec: ModelSpec, topo: TopologySpec, intra_bps: float, slow: list[str], steps: int, warmup: int,
               env: dict[str, str], params: SimParams | None = None) -> dict[str, Any]:
    """One ``train`` report of ``spec`` on ``topo`` predicted by the simulator; ``env``: the communicator's tuning
    variables (``$STARPULSE_ALGO``, ...) its tuner reads."""
    t0 = time.perf_counter()
    world = topo.servers * topo.gpus_per_server
    link_bps = float(topo.link_rate_bps)
    plan = plan_step(spec, world, link_bps)
    factor = np.ones(world)
    for text in slow:
        rank, f = parse_slow(text, world)
        factor[rank] = f
    params = params or SimParams(intra_rate_bps=intra_bps, itemsize=np.dtype(DTYPE).itemsize)
    tuner = Tuner(RankLayout.grid(topo.servers, topo.gpus_per_server),
                  default_model(CommConfig(inter_rate_bps=link_bps, intra_rate_bps=intra_bps)), env)
    costs = collective_costs(plan, topo, tuner, params)
    values, cls = np.unique(factor, return_inverse=True)
    records = step_records(plan, costs, values, steps, warmup)
    nic = _nic_bytes_per_step(plan, costs) * steps
    rows, nscalar, nshown = [], 0, 0
    for c in range(len(values)):
        row, nscalar, nshown = rank_row(records[c], 0, 0, float(values[c]), 0, 0)
        rows.append(row)
    table = np.stack([rows[cls[r]] for r in range(world)])
    table[:, 4] = np.rint(nic).astype(np.int64)              # rank_row's totals: ..., NIC bytes, wrong, factor,
    table[:, 7] = np.arange(world) // topo.gpus_per_server   # server, GPU
    table[:, 8] = np.arange(world) % topo.gpus_per_server
    report = job_report(plan, steps, warmup, table, nscalar, nshown)
    keep = set(range(min(PLOT_RANKS, world))) | {r for r in range(world) if factor[r] != 1.0}
    report["timeline"] = [row for row in report["timeline"] if row["rank"] in keep]
    for r in report["per_rank"]:
        r["wrong"] = None                                    # no data moves: nothing to check
    by_op: dict[str, dict[str, str]] = {}
    for cost in costs.values():
        by_op.setdefault(cost.op, {})[str(cost.nbytes)] = cost.algo
    report.update({
        "wrong": None, "drops": None, "backend": "sim", "mode": "sim", "fidelity": dict(FIDELITY),
        "topology": {**topology_json(topo), "oversubscription": topo.oversubscription, "delay_ns": topo.delay_ns},
        "algorithms": {op: by_op.get(op, {}) for op in (OP_ALLREDUCE, OP_ALLTOALL)},
        "sim": {"routing": ROUTING, "alpha_s": params.alpha_s, "efficiency": params.efficiency,
                "intra_rate_bps": intra_bps, "collectives": [c.to_json() for c in costs.values()],
                "not_modelled": ["congestion control (max-min rates x efficiency)",
                                 "online auto-tune (the tuner's alpha-beta prior picks)", "queues, loss, PFC"],
                "wall_s": time.perf_counter() - t0},
    })
    return report


def run_sim(args: argparse.Namespace, configs: list[CompareConfig | None]) -> list[dict[str, Any]]:
    """``train --backend sim``: one report per configuration (``[None]``: a plain run)."""
    spec = load_spec(args.model)
    topo = sim_topology(args)
    intra = _intra_rate_bps(args, float(topo.link_rate_bps))
    out = []
    for config in configs:
        env = {**os.environ, **(config.env if config else {})}
        report = sim_report(spec, topo, intra, args.slow, args.steps, args.warmup, env)
        if config is not None:
            report["comparison"] = config.to_json()
        out.append(report)
    return out
