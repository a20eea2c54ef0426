"""The flow-level simulator as the operations system's expected model: for a telemetry store's topology and the
collectives its job ran, the simulator's time of each (op, bytes, algorithm) on the healthy fabric, calibrated on the
run's first healthy steps (``sw.ops.expected.fit_sim``), and the job's step (``sw.apps.train_sim.step_records``,
the step model of ``train --backend sim``) with those times.

Here, in the top layer, because ``sw.ops`` is pure (standard library): it gets the simulator's figures as values.
A collective the simulator has no schedule for (an op or algorithm it does not run, a store without its
topology) keeps the alpha-beta line; a store that does not name its job (``meta.workload``) has no step prediction.
The store does not record the job's NVLink stand-in rate: the jobs' default (``intra_rate_for``: 9x the link) is
assumed.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from sw.collectives.config import intra_rate_for
from sw.collectives.fabric_topology import TopologyError, TopologySpec
from sw.ops.expected import Expected, SimCollective, SimModel, algo_name, calibrate, fit_sim
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


def store_expected(store: Any, calibration: tuple[int, int]) -> Expected:
    """The expected model of the run in ``store`` (a ``TelemetryStore``), calibrated on steps ``calibration``
    (inclusive) from every table it reads, with ``with_sim``'s predictions; ``CalibrationError`` when those steps
    do not calibrate."""
    lo, hi = calibration
    collectives = store.collectives()
    exp = calibrate(store.steps(), collectives, store.port_polls(), lo, hi, store.nic_counters(), store.int_hops())
    return with_sim(exp, store.meta(), collectives)


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


HYPOTHESIS_SHARES = (0.02, 1.0)
"""The rates a degraded-link hypothesis tries, as shares of the link's rate."""
HYPOTHESIS_ITERATIONS = 10
"""Bisection steps on a log scale of the share: 2-100 % to within 0.4 % of the share found (a factor 50^(1/1024))."""


def sim_link(place: str) -> tuple[str, str] | None:
    """A suspect's link ``a<->b`` in the simulator's names (a server's end is its NIC on the leaf's rail:
    ``s1<->p0l0`` is ``s1-eth0``-``p0l0``), or None when ``place`` is not a link."""
    a, sep, b = place.partition("<->")
    if not sep:
        return None
    ends = []
    for x, other in ((a, b), (b, a)):
        leaf = re.fullmatch(r"p\d+l(\d+)", other)
        ends.append(f"{x}-eth{leaf.group(1)}" if re.fullmatch(r"s\d+", x) and leaf else x)
    return ends[0], ends[1]


def explain(result: dict[str, Any], exp: Expected, meta: dict[str, Any],
            window: list[dict[str, Any]]) -> dict[str, Any]:
    """Test each degraded-link suspect of ``result`` (``diagnose``'s, over the collectives ``window``) in the
    simulator: the share of the link's rate at which the calibrated model slows the window's collectives as much
    as observed (``symptoms.comm_ratio``), and the step at that rate; added to the suspect as ``hypothesis`` and a
    line of evidence.  Verdicts are not changed."""
    observed = result["symptoms"].get("comm_ratio")
    topo = topology_of(meta)
    sim = exp.sim
    if sim is None or topo is None or not observed or observed <= 1.0:
        return result
    keys = [k for k in ((c["op"], c["nbytes"], algo_name(c["algo"])) for c in window) if k in sim.collectives]
    if not keys:
        return result
    for suspect in result["suspects"]:
        link = sim_link(suspect["place"]) if suspect["kind"] == "degraded_link" else None
        if link is None:
            continue
        try:
            share, ratio = _reproduce(topo, sim, keys, link, observed)
        except ValueError:                  # not a link of the simulated fabric
            continue
        hyp: dict[str, Any] = {"link": suspect["place"], "share": round(share, 3), "comm_ratio": round(ratio, 3),
                               "observed_comm_ratio": round(observed, 3), "step_s": None}
        spec = job_spec(meta)
        if spec is not None:
            durations = {(op, n): (algo, _calibrated(topo, sim, (op, n, algo), link, share))
                         for op, n, algo in sim.collectives}
            t = step_ns(spec, topo, durations)
            hyp["step_s"] = t / 1e9 if t is not None else None
        suspect["hypothesis"] = hyp
        if ratio >= observed:
            line = (f"simulator: with {suspect['place']} at {100 * share:.0f} % of its rate the window's collectives "
                    f"take x{ratio:.2f} of expected (observed x{observed:.2f})")
            if hyp["step_s"] is not None:
                line += f", a step {hyp['step_s'] * 1e3:.1f} ms (healthy {exp.step_ns / 1e6:.1f} ms)"
        else:
            line = (f"simulator: even at {100 * share:.0f} % of its rate {suspect['place']} slows the window's "
                    f"collectives only x{ratio:.2f} (observed x{observed:.2f}): more than this link is slow")
        suspect["evidence"].append(line)
    return result


def _calibrated(topo: TopologySpec, sim: SimModel, key: tuple[str, int, str], link: tuple[str, str],
                share: float) -> float:
    """The calibrated time of collective ``key`` with ``link`` at ``share`` of its rate."""
    op, nbytes, algo = key
    c = sim.collectives[key]
    intra = intra_rate_for(None, float(topo.link_rate_bps)) or 0.0
    wire = simulate(topo, op, algo, nbytes, ROUTING, SimParams(
        alpha_s=0.0, intra_rate_bps=intra, itemsize=np.dtype(DTYPE).itemsize,
        link_shares=((link[0], link[1], share),)))["predicted_s"] * 1e9
    return float(sim.per_message_ns * c.messages + sim.wire_factor * wire)


def _reproduce(topo: TopologySpec, sim: SimModel, keys: list[tuple[str, int, str]], link: tuple[str, str],
               observed: float) -> tuple[float, float]:
    """(share, ratio): the largest share of ``link``'s rate whose median slowdown of ``keys`` (the window's
    collectives) reaches ``observed`` (bisection on a log scale; the lowest share tried when none does)."""
    healthy = {k: sim.predict_ns(*k) or 1.0 for k in set(keys)}

    def ratio(share: float) -> float:
        times = {k: _calibrated(topo, sim, k, link, share) for k in set(keys)}
        return float(np.median([times[k] / healthy[k] for k in keys]))

    lo, hi = HYPOTHESIS_SHARES          # ratio(lo) is the largest, ratio(hi) ~ 1
    r_lo = ratio(lo)
    if r_lo < observed:
        return lo, r_lo
    for _ in range(HYPOTHESIS_ITERATIONS):
        mid = float(np.sqrt(lo * hi))
        if ratio(mid) >= observed:
            lo = mid
        else:
            hi = mid
    return lo, ratio(lo)
