"""What the switch ports' transmit ring gains (issue 23 item 3): the forwarding bench with and without it.

    sudo .venv/bin/python scripts/tx_ring_bench.py --pairs 5                     # 64 B, flat out (trafgen)
    sudo .venv/bin/python scripts/tx_ring_bench.py --pairs 5 --port-rate 100G    # every packet through the queues

Runs ``python -m p4.switch.bench --json`` (the tutorials' basic L3 program through veths) N times as a pair: the
switch with its transmit ring (the default) and with ``STARPULSE_P4SWITCH_TX_RING=0`` (one ``send()`` per frame),
the order alternating from pair to pair so a load that drifts hits both alike.  Prints every run with the load
average, then per arm the medians of forwarded pps and of the switch's CPU per packet, the ratio of the medians
(ring / per-frame) and the median of the per-pair ratios.  Forwarded pps measures the ring only when the switch had
its core (switch CPU near 100 %); on a busy machine CPU per packet is the figure to read.  Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from lag_cost_bench import add_run_arguments, bad_run_arguments, bench_argv, compare, pairs_line

from p4.switch.ports import TX_RING_ENV

REPO = Path(__file__).resolve().parent.parent
ARMS = {True: "ring", False: "per_frame"}


def bench_once(args: argparse.Namespace, ring: bool) -> dict[str, Any]:
    """One ``p4.switch.bench`` run at one frame size with the ring on or off; its row and the load before it."""
    argv = bench_argv(args)
    env = {**os.environ, TX_RING_ENV: "1" if ring else "0"}
    load = os.getloadavg()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=args.seconds + args.warmup + 120)
    if out.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv[1:])}` failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    report = json.loads(out.stdout)
    row = report["results"][0]
    if row["switch_tx_ring"] != ring or not report["switch_alive_after"]:
        raise RuntimeError(f"bench run (tx ring {ring}) did not run as asked: {report}")
    return {"arm": ARMS[ring], "forwarded_pps": row["forwarded_pps"], "offered_pps": row["offered_pps"],
            "switch_cpu_us_per_pkt": row["switch_cpu_us_per_pkt"], "switch_cpu_share": row["switch_cpu_share"],
            "switch_tx_errors": row["switch_tx_errors"], "load_avg_1m": round(load[0], 2)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the medians per arm, ring / per-frame of the medians and the median of the per-pair ratios."""
    by_arm = {arm: [r for r in runs if r["arm"] == arm] for arm in ARMS.values()}
    out: dict[str, Any] = {}
    for key in ("forwarded_pps", "switch_cpu_us_per_pkt"):
        ring = [r[key] for r in by_arm["ring"]]
        plain = [r[key] for r in by_arm["per_frame"]]
        pairs = [a / b for a, b in zip(ring, plain, strict=True) if a and b]
        med_ring = statistics.median(v for v in ring if v)
        med_plain = statistics.median(v for v in plain if v)
        out[key] = {"median_ring": med_ring, "median_per_frame": med_plain,
                    "ratio_of_medians": round(med_ring / med_plain, 4),
                    "median_pair_ratio": round(statistics.median(pairs), 4)}
    out["switch_cpu_share_median"] = statistics.median(r["switch_cpu_share"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/tx_ring_bench.py", description=__doc__.splitlines()[0])
    add_run_arguments(parser, pairs_default=5)
    args = parser.parse_args(argv)
    error = bad_run_arguments(args, "tx_ring_bench")
    if error:
        print(error, file=sys.stderr)
        return 2
    done = compare(args, "tx_ring_bench", bench_once, lambda ring: f"{ARMS[ring]:<9}", summarize)
    if isinstance(done, int):
        return done
    summary, loads = done
    print(f"{pairs_line(args, summary, ('ring', 'per_frame'), ('ring', 'per-frame'))}; {loads['start']} at start, "
          f"{loads['end']} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
