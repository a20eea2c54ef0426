"""Rail-optimized routing vs ECMP (hash collisions) in the flow-level simulator, with spine oversubscription.

    python scripts/sim_study.py [--json] [--oversubscription 1,2] [--plot FILE]

Allreduce of 1 GiB (flat ring, and hierarchical) at 1k, 10k and 100k GPUs (8 rails, 3 tiers, 8 spines per pod),
and a MoE-style all-to-all of 256 MiB per GPU (pairwise and rail-aligned) in a 128-GPU expert-parallel group (the
event-driven engine) and across 1k, 10k and 100k GPUs (the link-load model, ``sw.sim.alltoall_model``); each with
``ecmp`` and ``rail`` routing.  Rows: predicted time, busbw, spine bytes, max link utilisation, the ECMP/rail time
ratio and which model timed it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sw.sim.cli import spec_from_args  # noqa: E402
from sw.sim.run import simulate  # noqa: E402
from sw.units.plot import plot_figure  # noqa: E402

CASES = [("allreduce", "ring", 2**30, (1000, 10_000, 100_000)),
         ("allreduce", "hier", 2**30, (1000, 10_000, 100_000)),
         ("alltoall", "pairwise", 2**28, (128, 1000, 10_000, 100_000)),
         ("alltoall", "rail", 2**28, (1000, 10_000, 100_000))]


def run_study(oversubscriptions: list[float], cases=CASES) -> Iterator[dict]:
    """One row per (case, GPUs, oversubscription) with both routings, as each is done."""
    for op, algo, size, gpu_counts in cases:
        for gpus in gpu_counts:
            for ov in oversubscriptions:
                ns = argparse.Namespace(gpus=gpus, gpus_per_server=8, pods=None, spines=8, super_spines=8, tiers=3,
                                        link_rate=400_000_000_000, delay=1000, oversubscription=ov)
                spec = spec_from_args(ns)
                got = {r: simulate(spec, op, algo, size, r) for r in ("ecmp", "rail")}
                yield ({"op": op, "algo": algo, "gpus": gpus, "size_bytes": size, "oversubscription": ov,
                             **{f"{r}_s": got[r]["predicted_s"] for r in got},
                             **{f"{r}_busbw_bps": got[r]["busbw_bps"] for r in got},
                             **{f"{r}_spine_bytes": got[r]["bytes_by_link_class"]["leaf-spine"] for r in got},
                             **{f"{r}_max_link_util": got[r]["max_link_util"] for r in got},
                             "ecmp_over_rail": got["ecmp"]["predicted_s"] / got["rail"]["predicted_s"],
                             "model": got["ecmp"]["model"]})


def _plot(rows: list[dict], path: str) -> None:
    with plot_figure(path, figsize=(7, 3.5)) as (_, ax):
        labels = [f"{r['op']} {r['algo']}\n{r['gpus']} GPUs ov {r['oversubscription']:g}" for r in rows]
        ax.bar(range(len(rows)), [r["ecmp_over_rail"] for r in rows])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=60, ha="right")
        ax.set_ylabel("time ECMP / rail routing")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--oversubscription", default="1,2", help="comma-separated leaf oversubscriptions (1..64)")
    ap.add_argument("--plot", metavar="FILE", help="PNG: ECMP/rail time ratio per row")
    args = ap.parse_args()
    try:
        ovs = [float(x) for x in args.oversubscription.split(",")]
    except ValueError:
        ap.exit(2, f"sim_study: --oversubscription {args.oversubscription!r}: expected numbers like 1,2\n")
    if not all(1 <= v <= 64 for v in ovs):
        ap.exit(2, f"sim_study: --oversubscription {args.oversubscription!r}: each must be within 1..64\n")
    if args.json:
        rows = list(run_study(ovs))
        if args.plot:
            _plot(rows, args.plot)
        print(json.dumps({"rows": rows}))
        return 0
    print("| op | algo | GPUs | oversub | ECMP ms | rail ms | ECMP/rail | ECMP spine GB | rail spine GB | model |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = []
    for r in run_study(ovs):
        rows.append(r)
        print(f"| {r['op']} | {r['algo']} | {r['gpus']:,} | {r['oversubscription']:g} | {r['ecmp_s'] * 1e3:.1f} | "
              f"{r['rail_s'] * 1e3:.1f} | {r['ecmp_over_rail']:.2f} | {r['ecmp_spine_bytes'] / 1e9:.1f} | "
              f"{r['rail_spine_bytes'] / 1e9:.1f} | {r['model']} |", flush=True)
    if args.plot:
        _plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
