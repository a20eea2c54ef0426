"""``starpulse train --compare baseline,starpulse``: the configurations an A/B training run compares, the
environment each gives the ranks (the communicator's existing knobs), and the ratios and table of the runs.

baseline: flat ring allreduce and pairwise all-to-all (``$STARPULSE_ALGO``), so cross-rail all-to-all bytes
cross the spines on the fabric's ECMP with no intra-server hop, and RoCE without congestion control
(``$STARPULSE_ROCE_CC=none``).  starpulse: the tuner's choices (hierarchical allreduce, rail-aligned all-to-all
where its cost model picks them) and DCQCN, or the congestion control ``--roce-cc`` (else $STARPULSE_ROCE_CC)
names, e.g. HPCC; baseline stays without one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sw.collectives.autotune import ENV_AUTOTUNE
from sw.collectives.config import ENV_ROCE_CC, ROCE_CCS
from sw.collectives.tuner import ENV_ALGO

RATIO_KEYS = ("comm_share", "step_s", "link_load")
"""The ``ratios`` of a comparison: starpulse's figure / baseline's."""


class CompareError(ValueError):
    """A bad ``--compare`` value (a user error: one line, exit 2)."""

    is_user_error = True


@dataclass(frozen=True)
class CompareConfig:
    """One configuration of an A/B run: the ranks' environment and what it means, in words."""

    name: str
    env: dict[str, str]
    description: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "env": dict(self.env), "description": self.description}


STARPULSE_CC = "dcqcn"
"""The starpulse side's RoCE congestion control unless ``--roce-cc`` or $STARPULSE_ROCE_CC names another."""


CONFIGS: dict[str, CompareConfig] = {
    "baseline": CompareConfig("baseline", {ENV_ALGO: "allreduce=ring,alltoall=pairwise", ENV_ROCE_CC: "none",
                                           ENV_AUTOTUNE: "off"},
                              "flat ring allreduce, pairwise all-to-all (cross-rail bytes over the spines' "
                              "ECMP, no intra-server hop), no congestion control"),
    "starpulse": CompareConfig("starpulse", {ENV_ALGO: "", ENV_ROCE_CC: STARPULSE_CC, ENV_AUTOTUNE: "on"},
                               "the tuner's rail-aware choices (hier or hetero allreduce, rail-aligned all-to-all "
                               "where its model picks them) refined by online auto-tune, DCQCN"),
}
"""The configurations by name (the names are a contract of issue 20)."""


def parse_compare(text: str, roce_cc: str | None = None, what: str = "--roce-cc") -> list[CompareConfig]:
    """``baseline,starpulse`` as its configurations (both, each once); one-line error naming ``--compare``.
    ``roce_cc`` (named ``what`` in its error): the starpulse side's RoCE congestion control (default dcqcn)."""
    names = [n.strip() for n in text.split(",")]
    allowed = ", ".join(CONFIGS)
    for name in names:
        if name not in CONFIGS:
            raise CompareError(f"--compare {text}: unknown configuration {name!r} (allowed: {allowed})")
    if sorted(names) != sorted(CONFIGS):
        raise CompareError(f"--compare {text}: give each of {allowed} once (e.g. --compare baseline,starpulse)")
    return [_with_cc(CONFIGS[n], roce_cc, what) if n == "starpulse" else CONFIGS[n] for n in names]


def _with_cc(config: CompareConfig, roce_cc: str | None, what: str) -> CompareConfig:
    """``config`` with its RoCE congestion control replaced by ``roce_cc`` (None or the same: unchanged)."""
    cc = (roce_cc or "").strip().lower()
    if not cc or cc == config.env[ENV_ROCE_CC]:
        return config
    if cc not in ROCE_CCS:
        raise CompareError(f"{what}={roce_cc!r}: expected one of {', '.join(ROCE_CCS)}")
    head, _, _ = config.description.rpartition(", ")
    return dataclasses.replace(config, env={**config.env, ENV_ROCE_CC: cc}, description=f"{head}, {cc.upper()}")


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """starpulse / baseline of ``comm_share``, ``step_s`` and ``link_load`` (None where baseline's is 0)."""
    base, new = runs["baseline"], runs["starpulse"]
    return {k: (new[k] / base[k] if base[k] else None) for k in RATIO_KEYS}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def table_lines(runs: dict[str, dict[str, Any]], ratio: dict[str, float | None], local: bool) -> list[str]:
    """The comparison table: one row per configuration, then the ratios (and, ``local``, what does not apply)."""
    lines = ["# compare  step_s     comm_share  link_load  drops  wrong  fidelity"]
    for name, rep in runs.items():
        drops = "-" if rep.get("drops") is None else str(rep["drops"])
        wrong = "-" if rep.get("wrong") is None else str(rep["wrong"])
        fid = rep.get("fidelity") or {}
        verdict = "model" if fid.get("model") else "ok" if fid.get("ok") else "NOT-ok"
        lines.append(f"  {name:<9} {rep['step_s']:.6f}  {rep['comm_share']:10.3f}  {rep['link_load']:9.3f}  "
                     f"{drops:>5}  {wrong:>5}  {verdict}")
    lines.append("ratios starpulse/baseline: " + "  ".join(f"{k} {_fmt(ratio[k])}" for k in RATIO_KEYS))
    if any(rep.get("backend") == "sim" for rep in runs.values()):
        lines.append("# --backend sim: predicted by the flow-level simulator on ECMP; congestion control and online "
                     "auto-tune are not modelled, so only the algorithm choices differ")
    elif any(not (rep.get("fidelity") or {}).get("ok") for rep in runs.values()):
        lines.append("# a run's fidelity is NOT ok: its figures, and so the ratios, are bent by CPU load")
    if any(rep.get("net") == "tcp" for rep in runs.values()):
        cc = ((runs.get("starpulse", {}).get("comparison") or {}).get("env") or {}).get(ENV_ROCE_CC, STARPULSE_CC)
        lines.append(f"# --net tcp: the RoCE congestion-control setting (none vs {cc}) does not apply")
    if local:
        lines.append("# --local: no switches, no RoCE: routing (ECMP vs rail) and congestion control do not apply;"
                     " only the algorithm choices differ")
    return lines
