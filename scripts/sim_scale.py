"""Cost of the flow-level simulator: hierarchical allreduce of 1 GiB on 1k, 10k and 100k GPUs (8 rails, 3 tiers).

    python scripts/sim_scale.py [--json] [--gpus 1000,10000,100000]

Each size runs in a fresh process (its own peak RSS); prints wall time, RSS, the predicted time and the fitted
growth exponent of wall time in the number of GPUs, with the machine's load (figures move with it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOALS = {1000: (1.0, None), 100_000: (60.0, 8 * 2**30)}   # gpus -> (wall s, RSS bytes)


def child(gpus: int) -> dict:
    """One simulation in this process: wall and peak RSS included."""
    sys.path.insert(0, str(ROOT))
    from sw.sim.cli import spec_from_args
    from sw.sim.run import simulate

    t0 = time.perf_counter()
    ns = argparse.Namespace(gpus=gpus, gpus_per_server=8, pods=None, spines=8, super_spines=8, tiers=3,
                            link_rate=400_000_000_000, delay=1000, oversubscription=1.0)
    r = simulate(spec_from_args(ns), "allreduce", "hier", 2**30, "ecmp")
    return {"gpus": gpus, "wall_s": time.perf_counter() - t0,
            "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "predicted_s": r["predicted_s"], "busbw_bps": r["busbw_bps"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--gpus", default="1000,10000,100000", help="comma-separated GPU counts (multiples of 8)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    try:
        sizes = [int(x) for x in args.gpus.split(",")]
    except ValueError:
        ap.exit(2, f"sim_scale: --gpus {args.gpus!r}: expected comma-separated integers\n")
    rows = []
    for gpus in sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(gpus)], capture_output=True, text=True)
        if out.returncode:
            ap.exit(2, f"sim_scale: {gpus} GPUs: {out.stderr.strip().splitlines()[-1]}\n")
        rows.append(json.loads(out.stdout))
    for row in rows:
        wall_goal, rss_goal = GOALS.get(row["gpus"], (None, None))
        row["meets_goal"] = ((wall_goal is None or row["wall_s"] <= wall_goal)
                             and (rss_goal is None or row["rss_bytes"] <= rss_goal))
    exponent = float(np.polyfit(np.log([r["gpus"] for r in rows]), np.log([r["wall_s"] for r in rows]), 1)[0]) \
        if len(rows) > 1 else None
    result = {"rows": rows, "wall_growth_exponent": exponent, "load_avg": list(os.getloadavg()),
              "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(result))
        return 0
    for r in rows:
        print(f"{r['gpus']:>7} GPUs: wall {r['wall_s']:.2f} s, RSS {r['rss_bytes'] / 2**20:.0f} MiB, predicted "
              f"{r['predicted_s'] * 1e3:.2f} ms{'' if r['meets_goal'] else '  (misses the goal)'}")
    if exponent is not None:
        print(f"wall time grows as GPUs^{exponent:.2f}; load average {result['load_avg'][0]:.2f} on {result['cpus']} "
              "CPUs (shared machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
