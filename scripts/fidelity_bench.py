"""Invariance of network-time results under time dilation (issue 16): the same experiment at two dilations that
both report ``fidelity.ok`` must give the same figures within 5 %, and a too-small dilation must say ``ok: false``.

    .venv/bin/python scripts/fidelity_bench.py --json                 # the full table (minutes: high dilations)
    .venv/bin/python scripts/fidelity_bench.py --small --json         # a small case of each (a test runs it)

Experiments (each a product command, run as a user runs it, its JSON read back):
  allreduce  ``starpulse bench allreduce -A ring`` at SIZE: busbw / line rate
  incast     ``python -m sw.apps.incast_bench --cc dcqcn``: the last flow's completion time and the bottleneck
             queue's time-weighted p99 depth (``queue_p99_pkts``); its row also lists each run's max queue and
             p50 (``max_queue_pkts_runs``, ``queue_p50_pkts_runs``), not compared: a peak is set by the few
             events the verdict lets run late
  pfc        ``python -m sw.apps.incast_bench --cc none --pfc on``: PFC pauses sent
  too_small  ``starpulse bench`` at ``--low`` dilation: its fidelity must not be ok
  under_load issue 16 item 5: ``starpulse bench allreduce -A ring -b 1M -e 4M -f 2 -n 3 -w 1 -c 1 --link-rate
             100M`` with otherwise default flags (``--time-dilation auto``) beside ``--hog N`` busy processes this
             script starts and stops: busbw / line at 4 MiB >= 0.9, 0 drops, fidelity ok, the dilation it chose and
             the wall time it cost (not in the default set: ``--only under_load``)
Dilations: ``--dilations A,B`` (default: the two of each experiment's scale, see ``SCALES``).  Each experiment
runs ``--repeat`` times (default 3) at each dilation and a row compares the medians (its ``spread``: (max - min)
/ median per dilation).  The machine's load (``os.getloadavg``) is recorded with every run; each run prints a
progress line on stderr; ``--plot FILE`` draws each row's two medians relative to the first, against the 5 % band.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 0.05
# per experiment: (link rate, the two dilations compared); 10 Gb/s incasts need ~100x more than 100 Mb/s benches
SCALES = {"allreduce": ("100M", (200.0, 400.0)), "incast": ("10G", (10000.0, 20000.0)),
          "pfc": ("10G", (10000.0, 20000.0))}
TOO_SMALL_DILATION = 1.0
UNDER_LOAD_ARGV = ["sw.cli", "bench", "allreduce", "-A", "ring", "-b", "1M", "-e", "4M", "-f", "2", "-n", "3",
                   "-w", "1", "-c", "1", "--link-rate", "100M"]
UNDER_LOAD_MIN_BUSBW = 0.9
RERUN_LINE = "time dilation auto: the run at"


def progress(text: str) -> None:
    """One line per run on stderr (a full table takes tens of minutes)."""
    print(f"fidelity_bench {time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}: {text}", file=sys.stderr,
          flush=True)


@contextlib.contextmanager
def cpu_hog(n_procs: int, limit_s: float) -> Iterator[list[int]]:
    """``n_procs`` busy Python processes, each ending by itself after ``limit_s`` and stopped (by PID) on exit."""
    code = f"import time\nend = time.monotonic() + {limit_s!r}\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n_procs)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _run(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    """``python -m ARGV`` from the repo without an inherited dilation: its exit code, stdout and stderr; its
    stderr lines (the product's own progress: calibration, reruns, the table) are echoed as they come."""
    env = {k: v for k, v in os.environ.items() if k != "STARPULSE_TIME_DILATION"}
    proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env=env)
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, expire)
    timer.start()
    err_lines = []
    try:
        for line in proc.stderr:
            err_lines.append(line)
            print(f"  | {line.rstrip()}", file=sys.stderr, flush=True)
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join()
    if timed_out.is_set():
        raise RuntimeError(f"{' '.join(argv[:2])}: no result within {timeout_s:g} s (--timeout)")
    return code, "".join(stdout), "".join(err_lines)


def bench(size: str, rate: str, dilation: float, timeout_s: float) -> dict[str, Any]:
    """One ring allreduce at ``size`` on a 2x2 fabric: busbw / line rate, fidelity, load."""
    progress(f"allreduce {size} at dilation {dilation:g}")
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
    progress(f"{senders} -> 1 incast of {size} (cc {cc}, pfc {'on' if pfc else 'off'}) at dilation {dilation:g}")
    argv = ["sw.apps.incast_bench", "--cc", cc, "--senders", str(senders), "--size", size, "--link-rate", rate,
            "--time-dilation", repr(dilation), "--json", *(["--pfc", "on"] if pfc else [])]
    code, out, err = _run(argv, timeout_s)
    if code not in (0, 1) or not out.strip():
        raise RuntimeError(f"incast at dilation {dilation:g} failed ({code}): {err.strip()[-300:]}")
    run = json.loads(out)["runs"][0]
    return {"completion_ns": max(run["completion_ns"]), "max_queue_pkts": run["max_queue_pkts"],
            "queue_p99_pkts": run["queue_p99_pkts"], "queue_p50_pkts": run["queue_p50_pkts"],
            "pfc_pauses_sent": run["pfc_pauses_sent"], "drops": run["drops"], "fidelity": run["fidelity"],
            "load": os.getloadavg()[0]}


def under_load(hog_procs: int, timeout_s: float) -> dict[str, Any]:
    """Item 5's command, default flags (auto dilation), beside ``hog_procs`` busy processes: its figures, the
    dilation it chose, its reruns and its wall time."""
    with tempfile.TemporaryDirectory(prefix="fidelity-bench-") as tmp, cpu_hog(hog_procs, timeout_s + 60.0):
        path = Path(tmp) / "out.json"
        progress(f"under load: {' '.join(UNDER_LOAD_ARGV[1:])} beside {hog_procs} busy processes")
        start = time.monotonic()
        code, _, err = _run([*UNDER_LOAD_ARGV, "-J", str(path)], timeout_s)
        wall_s = time.monotonic() - start
        load = os.getloadavg()[0]
        if not path.exists():
            raise RuntimeError(f"bench under load failed ({code}): {err.strip()[-300:]}")
        report = json.loads(path.read_text())
    busbw = report["max_size_busbw_frac_line"]
    fid = report["fidelity"]
    return {"command": "starpulse " + " ".join(UNDER_LOAD_ARGV[1:]) + " -J out.json", "hog_procs": hog_procs,
            "exit_code": code, "time_dilation": report["time_dilation"],
            "reruns": [ln.strip() for ln in err.splitlines() if ln.startswith(RERUN_LINE)],
            "busbw_frac_line_4m": busbw, "drops": report["drops"], "fidelity": fid, "wall_s": round(wall_s, 1),
            "load_1min_after": round(load, 2),
            "passed": busbw >= UNDER_LOAD_MIN_BUSBW and report["drops"] == 0 and bool(fid["ok"])}


def compare(name: str, metric: str, runs: list[list[dict[str, Any]]], values: list[list[float]]) -> dict[str, Any]:
    """One row: the metric's median over the repeated runs at each of the two dilations, their spread, the
    fidelities, and whether the medians agree within ``TOLERANCE`` (a DCQCN incast's single runs scatter ~20 %
    with which flow a CNP hits first, so one run per dilation says little)."""
    medians = [statistics.median(v) for v in values]
    a, b = medians
    rel = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) else 0.0
    both_ok = all(r["fidelity"]["ok"] for group in runs for r in group)
    dilations = [group[0]["fidelity"]["time_dilation"] for group in runs]
    return {"experiment": name, "metric": metric, "dilations": dilations,
            "values": medians, "runs": values, "rel_diff": round(rel, 4),
            "spread": [round((max(v) - min(v)) / m, 4) if m else 0.0 for v, m in zip(values, medians, strict=True)],
            "fidelity_ok": [all(r["fidelity"]["ok"] for r in group) for group in runs],
            "loads": [round(max(r["load"] for r in group), 2) for group in runs],
            "invariant": (rel <= TOLERANCE) if both_ok else None}   # None: not comparable (a run was not ok)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    small = args.small
    rows: list[dict[str, Any]] = []
    size = "256K" if small else "4M"
    rate, ks = SCALES["allreduce"]
    ks = tuple(args.dilations) if args.dilations else ks
    if "allreduce" in args.only:
        runs = [[bench(size, rate, k, args.timeout) for _ in range(args.repeat)] for k in ks]
        rows.append(compare("allreduce", f"busbw/line at {size}", runs, [[r["value"] for r in g] for g in runs]))
    senders, flow = (2, "128KiB") if small else (8, "1MiB")
    for name, cc, pfc in (("incast", "dcqcn", False), ("pfc", "none", True)):
        if name not in args.only:
            continue
        rate, ks = SCALES[name]
        ks = tuple(args.incast_dilations) if args.incast_dilations else ks
        runs = [[incast(cc, pfc, senders, flow, rate, k, args.timeout) for _ in range(args.repeat)] for k in ks]
        metrics = ([("last completion (ns)", "completion_ns"), ("queue p99 (pkts)", "queue_p99_pkts")]
                   if name == "incast" else [("PFC pauses sent", "pfc_pauses_sent")])
        for metric, key in metrics:
            rows.append(compare(name, metric, runs, [[r[key] for r in g] for g in runs]))
        if name == "incast":                      # shown beside the p99, not compared: peaks and medians
            rows[-1].update({f"{k}_runs": [[r[k] for r in g] for g in runs] for k in ("max_queue_pkts",
                                                                                    "queue_p50_pkts")})
    out: dict[str, Any] = {"tolerance": TOLERANCE, "small": small, "rows": rows}
    if "too_small" in args.only:
        low = bench(size, SCALES["allreduce"][0], args.low, args.timeout)
        out["too_small"] = {"dilation": args.low, "fidelity": low["fidelity"], "load": round(low["load"], 2),
                            "reports_not_ok": not low["fidelity"]["ok"]}
    if "under_load" in args.only:
        out["under_load"] = under_load(args.hog, args.timeout)
    return out


def plot(out: dict[str, Any], path: str) -> None:
    """Each row's value at its two dilations, relative to the first, against the 5 % band."""
    from sw.units.plot import plot_figure  # here: the script runs the project only as subprocesses otherwise

    rows = out["rows"]
    with plot_figure(path, figsize=(7, 3.5), dpi=120) as (_, ax):
        ax.axhspan(1 - TOLERANCE, 1 + TOLERANCE, color="0.9", label="within 5 %")
        for i, r in enumerate(rows):
            a, b = r["values"]
            rel = b / a if a else float("nan")
            color = {True: "tab:green", False: "tab:red", None: "tab:gray"}[r["invariant"]]
            ax.plot([i, i], [1.0, rel], color=color)
            ax.scatter([i], [rel], color=color, zorder=3)
            ka, kb = r["dilations"]
            ax.annotate(f"k {ka:g} -> {kb:g}", (i, rel), textcoords="offset points", xytext=(6, 0), fontsize=7)
        ax.set_xticks(range(len(rows)), [f"{r['experiment']}\n{r['metric']}" for r in rows], fontsize=7)
        ax.set_ylabel("median at 2nd dilation / 1st")
        ax.set_title("Network-time results at two dilations (gray: a run was not fidelity-ok)", fontsize=9)
        ax.legend(fontsize=7)
    progress(f"plot written to {path}")


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
    p.add_argument("--repeat", type=int, default=3, help="runs per experiment and dilation, compared by their "
                   "medians (default 3)")
    p.add_argument("--hog", type=int, default=2, help="busy processes beside the under_load run (default 2)")
    p.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per run (default 3600)")
    p.add_argument("--plot", metavar="FILE", help="write the invariance plot (PNG) to FILE")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = args.only - {"allreduce", "incast", "pfc", "too_small", "under_load"}
    if unknown:
        p.error(f"--only: unknown experiment(s) {', '.join(sorted(unknown))} "
                "(allowed: allreduce, incast, pfc, too_small, under_load)")
    if args.repeat < 1:
        p.error(f"--repeat: {args.repeat} (allowed: 1 or more)")
    if args.hog < 0:
        p.error(f"--hog: {args.hog} is negative (allowed: 0 or more)")
    start = time.monotonic()
    out = run_all(args)
    out["wall_s"] = round(time.monotonic() - start, 1)
    if args.plot and out["rows"]:
        plot(out, args.plot)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in out["rows"]:
            print(f"{r['experiment']:9s} {r['metric']:22s} k={r['dilations']} medians {r['values']} (spread "
                  f"{r['spread']}) diff {r['rel_diff'] * 100:.1f} % ok={r['fidelity_ok']} invariant={r['invariant']} "
                  f"load={r['loads']}")
        if "too_small" in out:
            t = out["too_small"]
            print(f"too small: dilation {t['dilation']:g} reports ok={t['fidelity']['ok']} "
                  f"(worst {t['fidelity']['worst_component']})")
        if "under_load" in out:
            u = out["under_load"]
            print(f"under load ({u['hog_procs']} busy processes): dilation {u['time_dilation']:g}, busbw/line "
                  f"{u['busbw_frac_line_4m']:.3f} at 4 MiB, drops {u['drops']}, ok={u['fidelity']['ok']}, "
                  f"{u['wall_s']:.0f} s wall, {len(u['reruns'])} rerun(s): passed={u['passed']}")
    bad = [r for r in out["rows"] if r["invariant"] is False]
    failed = not out.get("too_small", {}).get("reports_not_ok", True) or not out.get("under_load", {}).get(
        "passed", True)
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
