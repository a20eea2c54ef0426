"""Expected behaviour of a run, calibrated on its first healthy steps: each rank's compute per step, an
alpha-beta model (latency + bytes / bandwidth) per collective op fitted to the healthy collectives, each step's
length, each switch port's ECN-mark, drop and queue levels, the NICs' retransmissions per step, and each switch
egress port's INT hop latency and queue occupancy (``sw.ops.int_evidence``).  Deviations are
judged against it."""

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

    def to_json(self) -> dict[str, Any]:
        return {"steps": [self.first_step, self.last_step], "step_s": self.step_ns / 1e9,
                "compute_s": {str(r): v / 1e9 for r, v in self.compute_ns.items()},
                "alpha_beta": {op: {"alpha_s": m.alpha_ns / 1e9, "bandwidth_Bps": 1e9 / m.ns_per_byte
                                    if m.ns_per_byte > 0 else None} for op, m in self.collectives.items()},
                "retx_per_step": self.retx_per_step}


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
