"""Invariance of network-time results under time dilation (issue 16): the same experiment at two dilations that
both report ``fidelity.ok`` must give the same figures within 5 %, and a too-small dilation must say ``ok: false``.

    .venv/bin/python scripts/fidelity_bench.py --json                 # the full table (minutes: high dilations)
    .venv/bin/python scripts/fidelity_bench.py --small --json         # a small case of each (a test runs it)

Experiments (each a product command, run as a user runs it, its JSON read back):
  allreduce  ``starpulse bench allreduce -A ring`` at SIZE: busbw / line rate
  incast     ``python -m sw.apps.incast_bench --cc dcqcn``: the last flow's completion time and the max queue
  pfc        ``python -m sw.apps.incast_bench --cc none --pfc on``: PFC pauses sent
  too_small  ``starpulse bench`` at ``--low`` dilation: its fidelity must not be ok
Dilations: ``--dilations A,B`` (default: the two of each experiment's scale, see ``SCALES``).  The machine's
load (``os.getloadavg``) is recorded with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 0.05
# per experiment: (link rate, the two dilations compared); 10 Gb/s incasts need ~100x more than 100 Mb/s benches
SCALES = {"allreduce": ("100M", (200.0, 400.0)), "incast": ("10G", (10000.0, 20000.0)),
          "pfc": ("10G", (10000.0, 20000.0))}
TOO_SMALL_DILATION = 1.0


def _run(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STARPULSE_TIME_DILATION"}
    out = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=timeout_s)
    return out.returncode, out.stdout, out.stderr


def bench(size: str, rate: str, dilation: float, timeout_s: float) -> dict[str, Any]:
    """One ring allreduce at ``size`` on a 2x2 fabric: busbw / line rate, fidelity, load."""
    with tempfile.TemporaryDirectory(prefix="fidelity-bench-") as tmp:
        path = Path(tmp) / "out.json"
        code, _, err = _run(["sw.apps.coll_bench", "allreduce", "-A", "ring", "-b", size, "-e", size,
                             "-n", "2", "-w", "1", "-c", "1", "--servers", "2", "--gpus", "2", "--spines", "1",
                             "--link-rate", rate, "--time-dilation", repr(dilation), "-J", str(path)], timeout_s)
        if not path.exists():
            raise RuntimeError(f"bench at dilation {dilation:g} failed ({code}): {err.strip()[-300:]}")
        report = json.loads(path.read_text())
    return {"value": report["max_size_busbw_frac_line"], "drops": report["drops"],
            "fidelity": report["fidelity"], "load": os.getloadavg()[0]}


def incast(cc: str, pfc: bool, senders: int, size: str, rate: str, dilation: float,
           timeout_s: float) -> dict[str, Any]:
    """One N -> 1 incast through the fabric: its report's figures, fidelity and load."""
    argv = ["sw.apps.incast_bench", "--cc", cc, "--senders", str(senders), "--size", size, "--link-rate", rate,
            "--time-dilation", repr(dilation), "--json", *(["--pfc", "on"] if pfc else [])]
    code, out, err = _run(argv, timeout_s)
    if code not in (0, 1) or not out.strip():
        raise RuntimeError(f"incast at dilation {dilation:g} failed ({code}): {err.strip()[-300:]}")
    run = json.loads(out)["runs"][0]
    return {"completion_ns": max(run["completion_ns"]), "max_queue_pkts": run["max_queue_pkts"],
            "pfc_pauses_sent": run["pfc_pauses_sent"], "drops": run["drops"], "fidelity": run["fidelity"],
            "load": os.getloadavg()[0]}


def compare(name: str, metric: str, runs: list[dict[str, Any]], values: list[float]) -> dict[str, Any]:
    """One row: the metric at both dilations, both fidelities, and whether they agree within ``TOLERANCE``."""
    a, b = values
    rel = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) else 0.0
    both_ok = all(r["fidelity"]["ok"] for r in runs)
    return {"experiment": name, "metric": metric, "dilations": [r["fidelity"]["time_dilation"] for r in runs],
            "values": values, "rel_diff": round(rel, 4), "fidelity_ok": [r["fidelity"]["ok"] for r in runs],
            "loads": [round(r["load"], 2) for r in runs],
            "invariant": (rel <= TOLERANCE) if both_ok else None}   # None: not comparable (a run was not ok)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    small = args.small
    rows: list[dict[str, Any]] = []
    size = "256K" if small else "4M"
    rate, ks = SCALES["allreduce"]
    ks = tuple(args.dilations) if args.dilations else ks
    if "allreduce" in args.only:
        runs = [bench(size, rate, k, args.timeout) for k in ks]
        rows.append(compare("allreduce", f"busbw/line at {size}", runs, [r["value"] for r in runs]))
    senders, flow = (2, "128KiB") if small else (8, "1MiB")
    for name, cc, pfc in (("incast", "dcqcn", False), ("pfc", "none", True)):
        if name not in args.only:
            continue
        rate, ks = SCALES[name]
        ks = tuple(args.incast_dilations) if args.incast_dilations else ks
        runs = [incast(cc, pfc, senders, flow, rate, k, args.timeout) for k in ks]
        if name == "incast":
            rows.append(compare(name, "last completion (ns)", runs, [r["completion_ns"] for r in runs]))
            rows.append(compare(name, "max queue (pkts)", runs, [r["max_queue_pkts"] for r in runs]))
        else:
            rows.append(compare(name, "PFC pauses sent", runs, [r["pfc_pauses_sent"] for r in runs]))
    out: dict[str, Any] = {"tolerance": TOLERANCE, "small": small, "rows": rows}
    if "too_small" in args.only:
        low = bench(size, SCALES["allreduce"][0], args.low, args.timeout)
        out["too_small"] = {"dilation": args.low, "fidelity": low["fidelity"], "load": round(low["load"], 2),
                            "reports_not_ok": not low["fidelity"]["ok"]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/fidelity_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="small sizes and 2 -> 1 incasts (a test's case)")
    p.add_argument("--only", default="allreduce,incast,pfc,too_small",
                   help="comma list of allreduce, incast, pfc, too_small (default all)")
    p.add_argument("--dilations", type=lambda s: [float(x) for x in s.split(",")],
                   help="the allreduce's two dilations (default 200,400)")
    p.add_argument("--incast-dilations", type=lambda s: [float(x) for x in s.split(",")],
                   help="the incasts' two dilations (default 10000,20000)")
    p.add_argument("--low", type=float, default=TOO_SMALL_DILATION, help="the too-small dilation (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per run (default 1800)")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    start = time.monotonic()
    out = run_all(args)
    out["wall_s"] = round(time.monotonic() - start, 1)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in out["rows"]:
            print(f"{r['experiment']:9s} {r['metric']:22s} k={r['dilations']} {r['values']} diff "
                  f"{r['rel_diff'] * 100:.1f} % ok={r['fidelity_ok']} invariant={r['invariant']} load={r['loads']}")
        if "too_small" in out:
            t = out["too_small"]
            print(f"too small: dilation {t['dilation']:g} reports ok={t['fidelity']['ok']} "
                  f"(worst {t['fidelity']['worst_component']})")
    bad = [r for r in out["rows"] if r["invariant"] is False]
    return 1 if bad or not out.get("too_small", {}).get("reports_not_ok", True) else 0


if __name__ == "__main__":
    sys.exit(main())
