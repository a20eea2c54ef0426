"""Expected behaviour of a run, calibrated on its first healthy steps: each rank's compute per step, a model of
each collective's time (the flow-level simulator's, calibrated: ``SimModel``; else an alpha-beta line, latency +
bytes / bandwidth, per op fitted to the healthy collectives), each step's length, each switch port's ECN-mark, drop
and queue levels, the NICs' retransmissions per step, and each switch egress port's INT hop latency and queue
occupancy (``sw.ops.int_evidence``).  Deviations are judged against it.

The simulator itself lives above this pure layer: ``sw.apps.ops_sim`` runs it and hands its predictions in as
``SimCollective`` values; the calibration of those predictions (``fit_sim``) is here."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .int_evidence import IntLevel, int_levels

MIN_CALIBRATION_STEPS = 2


class CalibrationError(ValueError):
    """Too little healthy data to calibrate on: names what is missing."""

    is_user_error = True


@dataclass(frozen=True)
class AlphaBeta:
    """t = alpha + nbytes / bandwidth for one collective op (network ns; least squares over the healthy ones)."""

    alpha_ns: float
    ns_per_byte: float

    def predict_ns(self, nbytes: int) -> float:
        return self.alpha_ns + self.ns_per_byte * nbytes


@dataclass(frozen=True)
class SimCollective:
    """The simulator's time of one collective (op, bytes per rank, algorithm) on the run's healthy fabric, split
    as the calibration needs it: ``wire_ns`` the flows' time with no per-message cost (link rates, sharing, path
    latency), ``messages`` the messages on its critical path (each pays the stack's per-message cost once)."""

    op: str
    nbytes: int
    algo: str
    wire_ns: float
    messages: int


@dataclass
class SimModel:
    """The simulator's predictions calibrated on the healthy steps: t = ``per_message_ns`` x messages +
    ``wire_factor`` x wire time.  The simulator has no Python stack in it: its per-message cost (the stack's
    latency per message, in network ns) and its rate below the line (``wire_factor`` >= 1 when the emulated NICs
    move bytes slower than the ideal max-min fabric) are fitted to the medians of the healthy collectives.  The
    step: ``step_sim_ns`` the job's step on the ideal fabric (the simulator's own per-message cost), ``step_ns``
    with the calibrated collective times (both None when the store does not say which job ran)."""

    per_message_ns: float
    wire_factor: float
    collectives: dict[tuple[str, int, str], SimCollective]
    step_sim_ns: float | None = None
    step_ns: float | None = None

    def predict_ns(self, op: str, nbytes: int, algo: str) -> float | None:
        """The calibrated time of a collective the simulator timed, else None."""
        c = self.collectives.get((op, nbytes, algo_name(algo)))
        return None if c is None else self.per_message_ns * c.messages + self.wire_factor * c.wire_ns


def algo_name(recorded: str) -> str:
    """The algorithm of a recorded collective's ``algo`` column (``"sum, hier"``: reduction, then algorithm)."""
    return recorded.rpartition(",")[2].strip()


def fit_sim(sims: list[SimCollective], collectives: list[dict[str, Any]], first_step: int,
            last_step: int) -> SimModel | None:
    """Least squares of measured = a x messages + b x wire over the median of each simulated (op, bytes, algo)
    of steps ``first_step..last_step`` (a, b >= 0; one of them alone when the other would be negative, ``b`` alone
    with one kind of collective); None when no healthy collective was simulated."""
    by_key = {(s.op, s.nbytes, s.algo): s for s in sims}
    measured: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for c in collectives:
        key = (c["op"], c["nbytes"], algo_name(c["algo"]))
        if first_step <= c["step"] <= last_step and key in by_key:
            measured[key].append(c["end_ns"] - c["start_ns"])
    pts = [(float(by_key[k].messages), by_key[k].wire_ns, float(statistics.median(v))) for k, v in measured.items()]
    if not pts:
        return None
    a, b = _nonneg_lsq(pts)
    return SimModel(per_message_ns=a, wire_factor=b, collectives=by_key)


def _nonneg_lsq(pts: list[tuple[float, float, float]]) -> tuple[float, float]:
    """min sum (a x + b y - t)^2 over a, b >= 0 for points (x, y, t): the 2x2 normal equations, else the best of
    the two one-variable fits."""
    sxx = sum(x * x for x, _, _ in pts)
    syy = sum(y * y for _, y, _ in pts)
    sxy = sum(x * y for x, y, _ in pts)
    sxt = sum(x * t for x, _, t in pts)
    syt = sum(y * t for _, y, t in pts)
    det = sxx * syy - sxy * sxy
    if len(pts) > 1 and det > 1e-9 * max(sxx * syy, 1e-30):
        a, b = (sxt * syy - syt * sxy) / det, (syt * sxx - sxt * sxy) / det
        if a >= 0 and b >= 0:
            return a, b
    only_b = (0.0, syt / syy if syy > 0 else 0.0)
    only_a = (sxt / sxx if sxx > 0 else 0.0, 0.0)

    def err(ab: tuple[float, float]) -> float:
        return sum((ab[0] * x + ab[1] * y - t) ** 2 for x, y, t in pts)

    return only_b if len(pts) == 1 or err(only_b) <= err(only_a) else only_a


@dataclass
class PortLevel:
    """A port's healthy levels: per network second of ECN marks and drops, and the deepest queue sampled."""

    ecn_per_s: float = 0.0
    drops_per_s: float = 0.0
    qdepth_max: int = 0
    high_water_pkts: int = 0


@dataclass
class Expected:
    """The calibrated model of one run: from steps ``first_step``..``last_step`` (inclusive) of every rank."""

    first_step: int
    last_step: int
    compute_ns: dict[int, float]
    step_ns: float
    collectives: dict[str, AlphaBeta]
    ports: dict[tuple[str, int], PortLevel] = field(default_factory=dict)
    until_ns: int = 0
    retx_per_step: float = 0.0
    """Packets the NICs of all ranks together retransmitted per healthy step (0 in a store without NIC rows)."""
    int_ports: dict[tuple[str, int], IntLevel] = field(default_factory=dict)
    """Healthy INT levels per (switch, egress port) (empty in a store without INT records)."""
    sim: SimModel | None = None
    """The simulator's calibrated predictions (None: no simulator for this run; alpha-beta only)."""

    @property
    def model(self) -> str:
        """Which model judges the collectives: ``sim`` (where it timed them; alpha-beta for the rest) or
        ``alpha-beta``."""
        return "sim" if self.sim is not None else "alpha-beta"

    def predict_ns(self, op: str, nbytes: int, algo: str = "") -> float | None:
        """A collective's expected time: the calibrated simulator's where it timed (op, bytes, algorithm), else the
        op's alpha-beta line, else None."""
        got = self.sim.predict_ns(op, nbytes, algo) if self.sim is not None else None
        if got is not None:
            return got
        line = self.collectives.get(op)
        return line.predict_ns(nbytes) if line is not None else None

    def to_json(self) -> dict[str, Any]:
        sim = self.sim
        out: dict[str, Any] = {
            "steps": [self.first_step, self.last_step], "step_s": self.step_ns / 1e9,
            "compute_s": {str(r): v / 1e9 for r, v in self.compute_ns.items()},
            "alpha_beta": {op: {"alpha_s": m.alpha_ns / 1e9, "bandwidth_Bps": 1e9 / m.ns_per_byte
                                if m.ns_per_byte > 0 else None} for op, m in self.collectives.items()},
            "retx_per_step": self.retx_per_step, "model": self.model, "calibrated_step_s": self.step_ns / 1e9,
            "predicted_step_s": sim.step_ns / 1e9 if sim is not None and sim.step_ns is not None else None}
        if sim is not None:
            out["sim"] = {"per_message_s": sim.per_message_ns / 1e9, "wire_factor": sim.wire_factor,
                          "step_sim_s": sim.step_sim_ns / 1e9 if sim.step_sim_ns is not None else None,
                          "collectives": [{"op": c.op, "bytes": c.nbytes, "algo": c.algo, "wire_s": c.wire_ns / 1e9,
                                           "messages": c.messages,
                                           "predicted_s": (sim.predict_ns(c.op, c.nbytes, c.algo) or 0) / 1e9}
                                          for c in sim.collectives.values()]}
        return out


def fit_alpha_beta(points: list[tuple[int, float]]) -> AlphaBeta:
    """Least squares of t = a + b * bytes (one size: a line through the origin and the median)."""
    sizes = {n for n, _ in points}
    if len(sizes) < 2:
        n = next(iter(sizes))
        return AlphaBeta(0.0, statistics.median(t for _, t in points) / max(n, 1))
    mx = statistics.fmean(n for n, _ in points)
    my = statistics.fmean(t for _, t in points)
    sxx = sum((n - mx) ** 2 for n, _ in points)
    b = sum((n - mx) * (t - my) for n, t in points) / sxx
    b = max(b, 0.0)
    return AlphaBeta(max(my - b * mx, 0.0), b)


def calibrate(steps: list[dict[str, Any]], collectives: list[dict[str, Any]], ports: list[dict[str, Any]],
              first_step: int, last_step: int, nics: list[dict[str, Any]] | None = None,
              int_hops: list[dict[str, Any]] | None = None) -> Expected:
    """The model from steps ``first_step..last_step`` of the store's rows (steps, collectives, port polls, NIC
    rows, INT hop records)."""
    window = [s for s in steps if first_step <= s["step"] <= last_step]
    per_rank: dict[int, list[int]] = defaultdict(list)
    per_step: dict[int, list[int]] = defaultdict(list)
    for s in window:
        per_rank[s["rank"]].append(s["compute_ns"])
        per_step[s["step"]].append(s["t1_ns"] - s["t0_ns"])
    if len(per_step) < MIN_CALIBRATION_STEPS:
        raise CalibrationError(f"calibration needs {MIN_CALIBRATION_STEPS} healthy steps of every rank; the store "
                               f"has {len(per_step)} in steps {first_step}..{last_step}")
    by_op: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for c in collectives:
        if first_step <= c["step"] <= last_step:
            by_op[c["op"]].append((c["nbytes"], c["end_ns"] - c["start_ns"]))
    until = max(s["t1_ns"] for s in window)
    since = min(s["t0_ns"] for s in window)
    return Expected(first_step=first_step, last_step=last_step,
                    compute_ns={r: statistics.median(v) for r, v in per_rank.items()},
                    step_ns=statistics.median(max(v) for v in per_step.values()),
                    collectives={op: fit_alpha_beta(p) for op, p in by_op.items()},
                    ports=port_levels([p for p in ports if since <= p["t_ns"] <= until]), until_ns=until,
                    retx_per_step=sum(n["retx_pkts"] for n in nics or () if first_step <= n["step"] <= last_step)
                    / len(per_step),
                    int_ports=int_levels([h for h in int_hops or () if since <= h["t_ns"] <= until]))


def port_deltas(polls: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (switch, port) over a run of polls: counter deltas (``pfc_rx``: PFC pauses received, ``paused_ns``: the
    time they held the port), the span in ns, the deepest sampled queue, the last sample's peer and state."""
    first: dict[tuple[str, int], dict[str, Any]] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for p in polls:
        key = (p["switch"], p["port"])
        f = first.setdefault(key, p)
        prev = out.get(key, {"qdepth_max": 0})
        out[key] = {"span_ns": p["t_ns"] - f["t_ns"], "peer": p["peer"], "up": p["up"],
                    "high_water_first": f["high_water_pkts"], "high_water": p["high_water_pkts"],
                    "ecn": p["ecn_marks"] - f["ecn_marks"], "drops": p["drops"] - f["drops"],
                    "tx_bytes": p["tx_bytes"] - f["tx_bytes"], "pfc": p["pfc_pauses"] - f["pfc_pauses"],
                    "pfc_rx": p.get("pfc_pauses_rx", 0) - f.get("pfc_pauses_rx", 0),
                    "paused_ns": p.get("pfc_paused_ns", 0) - f.get("pfc_paused_ns", 0),
                    "qdepth_max": max(prev["qdepth_max"], p["qdepth_pkts"]), "samples": prev.get("samples", 0) + 1}
    return out


def port_levels(polls: list[dict[str, Any]]) -> dict[tuple[str, int], PortLevel]:
    """Healthy levels per port from a calibration window of polls."""
    out = {}
    for key, d in port_deltas(polls).items():
        span_s = d["span_ns"] / 1e9
        out[key] = PortLevel(ecn_per_s=d["ecn"] / span_s if span_s > 0 else 0.0,
                             drops_per_s=d["drops"] / span_s if span_s > 0 else 0.0, qdepth_max=d["qdepth_max"],
                             high_water_pkts=d["high_water"])
    return out
