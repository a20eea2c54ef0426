"""The simulator against the emulation (issue 19 item 4): each collective on the emulated fabric (``starpulse
bench``, its JSON read back) and in ``sw.sim`` with the same topology, link rate and sizes; predicted vs measured.

    .venv/bin/python scripts/sim_validate.py --json                         # the full table (hours of wall time)
    .venv/bin/python scripts/sim_validate.py --topologies 4x2 --ops allreduce --algos ring -b 1M -e 1M --json

measured_s: the bench's out-of-place ``time_us`` of that size (mean of ``-n`` iterations, the slowest rank, in
network time; the run's ``fidelity`` object is kept with the row).  predicted_s: ``sw.sim.simulate`` on the
bench's own topology (servers, GPUs per server, spines, one pod, link rate, delay 0), the shared-memory rate the
bench reports (``intra_rate_bps``) and ECMP routing.  error = (predicted_s - measured_s) / measured_s.

Model: T = L x alpha + B / eta, where B is the simulator's max-min time (alpha 0, eta 1) and L its count of
per-message latency steps on the critical path.  alpha (per-message overhead of the emulated host stack) and eta
(congestion-control / host efficiency on the max-min rates) are fitted per topology by least squares (alpha >= 0;
one size: alpha = 0) on a separate calibration run, ring allreduce at ``--calib-sizes`` (below the validated
sizes by default); the calibration is reported and is not a validation row.  Limits: one alpha for every
message size and link class, one eta for every link; no queueing or PFC model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sw.collectives.fabric_topology import TopologyError, TopologySpec  # noqa: E402
from sw.collectives.tuner import ALGOS  # noqa: E402
from sw.sim.run import SimParams, simulate  # noqa: E402
from sw.units import UnitError, parse_rate_bps, parse_size_bytes  # noqa: E402
from sw.units.plot import plot_figure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOPOLOGIES = ("4x2", "8x2", "16x4")
OPS = ("allreduce", "alltoall")
CALIB = ("allreduce", "ring")


class ValidateError(ValueError):
    """A bad flag or a failed emulated run; one line."""


def progress(text: str) -> None:
    print(f"[sim_validate {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def parse_topology(text: str) -> tuple[int, int]:
    servers, sep, gpus = text.partition("x")
    if not sep or not servers.isdigit() or not gpus.isdigit() or int(servers) < 1 or int(gpus) < 1:
        raise ValidateError(f"--topologies {text!r}: expected SERVERSxGPUS, e.g. 4x2")
    return int(servers), int(gpus)


def bench(op: str, algo: str, servers: int, gpus: int, sizes: tuple[str, str, int], args: argparse.Namespace
          ) -> dict[str, Any]:
    """One ``starpulse bench`` sweep on its own emulated fabric; its ``-J`` report."""
    lo, hi, factor = sizes
    with tempfile.TemporaryDirectory(prefix="sim-validate-") as tmp:
        path = Path(tmp) / "bench.json"
        argv = [sys.executable, "-m", "sw.apps.coll_bench", op, "-A", algo, "-b", lo, "-e", hi, "-f", str(factor),
                "-n", str(args.iters), "-w", str(args.warmup), "-c", "0", "--servers", str(servers),
                "--gpus-per-server", str(gpus), "--spines", str(args.spines), "--link-rate", args.link_rate,
                "--time-dilation", args.time_dilation, "-J", str(path)]
        out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=args.timeout)
        if not path.exists():
            tail = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise ValidateError(f"bench {op} -A {algo} on {servers}x{gpus} failed (exit {out.returncode}): {tail[0]}")
        return json.loads(path.read_text())


def sim_terms(spec: TopologySpec, op: str, algo: str, size: int, intra_bps: float, routing: str
              ) -> tuple[float, float]:
    """(B, L) of the model T = L * alpha + B / eta: the max-min time and the latency-step count of the schedule."""
    b = simulate(spec, op, algo, size, routing, SimParams(alpha_s=0.0, intra_rate_bps=intra_bps))["predicted_s"]
    b1 = simulate(spec, op, algo, size, routing, SimParams(alpha_s=1.0, intra_rate_bps=intra_bps))["predicted_s"]
    return b, b1 - b


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(alpha_s, eta) from (B, L, measured) points: least squares on measured = L alpha + B / eta with alpha >= 0
    (alpha = 0 and a bandwidth-only fit when the free fit gives a negative overhead)."""
    a = np.array([[lat, bw] for bw, lat, _ in points])
    y = np.array([m for _, _, m in points])
    alpha, inv_eta = np.linalg.lstsq(a, y, rcond=None)[0] if len(points) > 1 else (-1.0, 0.0)
    if alpha < 0:
        alpha, inv_eta = 0.0, float(a[:, 1] @ y / (a[:, 1] @ a[:, 1]))
    if inv_eta <= 0:
        raise ValidateError("calibration: no bandwidth term fits the calibration runs (times do not grow with size)")
    return float(alpha), float(1 / inv_eta)


def spec_for(servers: int, gpus: int, args: argparse.Namespace) -> TopologySpec:
    try:
        return TopologySpec(servers=servers, gpus_per_server=gpus, pods=1, spines=args.spines,
                            link_rate_bps=args.link_rate_bps, delay_ns=0)
    except TopologyError as exc:
        raise ValidateError(f"--topologies {servers}x{gpus}: {exc}") from None


def validate_topology(servers: int, gpus: int, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    """Calibration and the validation rows of one topology."""
    name = f"{servers}x{gpus}"
    spec = spec_for(servers, gpus, args)
    progress(f"{name}: calibration run ({CALIB[0]} {CALIB[1]} at {','.join(args.calib_sizes)})")
    lo, hi = args.calib_sizes[0], args.calib_sizes[-1]
    factor = max(2, round(parse_size_bytes(hi) / parse_size_bytes(lo))) if len(args.calib_sizes) > 1 else 2
    cal = bench(*CALIB, servers, gpus, (lo, hi, factor), args)
    intra = float(cal.get("intra_rate_bps") or 0.0)
    points = []
    for r in cal["results"]:
        b, lat = sim_terms(spec, *CALIB, r["size_bytes"], intra, args.routing)
        points.append((b, lat, r["time_us"] * 1e-6))
    alpha, eta = fit(points)
    calibration = {"topology": name, "op": CALIB[0], "algo": CALIB[1],
                   "sizes": [r["size_bytes"] for r in cal["results"]],
                   "measured_s": [p[2] for p in points], "alpha_s": alpha, "efficiency": eta,
                   "intra_rate_bps": intra, "fidelity": cal["fidelity"]}
    progress(f"{name}: alpha {alpha * 1e6:.1f} us, efficiency {eta:.3f} (fidelity ok={cal['fidelity']['ok']}, "
             f"dilation {cal['fidelity']['time_dilation']:g})")
    rows = []
    params = SimParams(alpha_s=alpha, intra_rate_bps=intra, efficiency=eta)
    for op in args.ops:
        for algo in [a for a in ALGOS[op] if a in args.algos]:
            progress(f"{name}: {op} {algo} (emulated)")
            rep = bench(op, algo, servers, gpus, (args.minbytes, args.maxbytes, args.stepfactor), args)
            for r in rep["results"]:
                measured = r["time_us"] * 1e-6
                predicted = simulate(spec, op, algo, r["size_bytes"], args.routing, params)["predicted_s"]
                error = (predicted - measured) / measured if measured > 0 else math.nan
                row = {"topology": name, "op": op, "algo": algo, "size_bytes": r["size_bytes"],
                       "measured_s": measured, "predicted_s": predicted, "error": error, "algo_run": r["algo"],
                       "fidelity": rep["fidelity"], "drops": rep.get("drops"), "load": round(os.getloadavg()[0], 2)}
                rows.append(row)
                progress(f"{name}: {op} {algo} {r['size_bytes']} B: measured {measured * 1e3:.2f} ms, predicted "
                         f"{predicted * 1e3:.2f} ms, error {error * 100:+.1f} % (fidelity ok={rep['fidelity']['ok']})")
    return calibration, rows


def plot(rows: list[dict[str, Any]], path: str) -> None:
    try:
        with plot_figure(path, figsize=(5.5, 5)) as (_, ax):
            for op, marker in (("allreduce", "o"), ("alltoall", "s")):
                sel = [r for r in rows if r["op"] == op]
                if sel:
                    ax.scatter([r["measured_s"] for r in sel], [r["predicted_s"] for r in sel], marker=marker, label=op)
            top = max((t for r in rows for t in (r["measured_s"], r["predicted_s"])), default=0.0) * 1.1
            if top > 0:
                lim = np.array([0.0, top])
                ax.plot(lim, lim, "k-", lw=0.8, label="predicted = measured")
                ax.fill_between(lim, lim * 0.9, lim * 1.1, color="grey", alpha=0.2, label="±10 %")
                ax.set_xlim(lim)
                ax.set_ylim(lim)
            ax.set_xlabel("measured (emulated fabric), s of network time")
            ax.set_ylabel("predicted (flow-level simulator), s")
            ax.legend()
    except OSError as exc:
        raise ValidateError(f"--plot {path}: {exc.strerror or exc}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/sim_validate.py", description=__doc__.splitlines()[0])
    p.add_argument("--topologies", default=",".join(TOPOLOGIES), help="SERVERSxGPUS list (default 4x2,8x2,16x4)")
    p.add_argument("--ops", default=",".join(OPS), help="allreduce,alltoall (default both)")
    p.add_argument("--algos", default=None, help="algorithms to run (default: every one the communicator has)")
    p.add_argument("-b", "--minbytes", default="1M", help="smallest validated size per rank (default 1M)")
    p.add_argument("-e", "--maxbytes", default="4M", help="largest validated size (default 4M)")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="size multiplier (default 4)")
    p.add_argument("--calib-sizes", default="64K,256K", help="two sizes of the calibration run (default 64K,256K)")
    p.add_argument("--link-rate", default="100M", help="host link rate of fabric and model (default 100M)")
    p.add_argument("--spines", type=int, default=2, help="spines (default 2)")
    p.add_argument("--routing", choices=("ecmp", "rail"), default="ecmp", help="simulator routing (default ecmp)")
    p.add_argument("--time-dilation", default="auto", help="the bench's --time-dilation (default auto)")
    p.add_argument("-n", "--iters", type=int, default=2, help="timed iterations per size (default 2)")
    p.add_argument("-w", "--warmup", type=int, default=1, help="warm-up iterations (default 1)")
    p.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per bench run (default 3600)")
    p.add_argument("--out", default="build/sim_validate.json", help="JSON file (default build/sim_validate.json)")
    p.add_argument("--plot", default="build/sim_validate.png", help="PNG, predicted vs measured")
    p.add_argument("--json", action="store_true", help="print the JSON on stdout")
    args = p.parse_args(argv)
    args.topologies = [parse_topology(t.strip()) for t in args.topologies.split(",") if t.strip()]
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for op in args.ops:
        if op not in OPS:
            raise ValidateError(f"--ops {op!r}: allowed: {', '.join(OPS)}")
    known = {a for op in args.ops for a in ALGOS[op]}
    args.algos = [a.strip() for a in args.algos.split(",")] if args.algos else sorted(known)
    for a in args.algos:
        if a not in known:
            raise ValidateError(f"--algos {a!r}: allowed for {','.join(args.ops)}: {', '.join(sorted(known))}")
    args.calib_sizes = [s.strip() for s in args.calib_sizes.split(",") if s.strip()]
    try:
        args.link_rate_bps = parse_rate_bps(args.link_rate, what="--link-rate")
        sizes = [("-b", args.minbytes), ("-e", args.maxbytes), *(("--calib-sizes", c) for c in args.calib_sizes)]
        for flag, s in sizes:
            parse_size_bytes(s, what=flag)
    except UnitError as exc:
        raise ValidateError(str(exc)) from None
    if not 1 <= len(args.calib_sizes) <= 2:
        raise ValidateError(f"--calib-sizes {','.join(args.calib_sizes)}: one or two sizes")
    return args


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    try:
        args = parse_args(argv)
        calibrations, rows = [], []
        for servers, gpus in args.topologies:
            cal, got = validate_topology(servers, gpus, args)
            calibrations.append(cal)
            rows += got
        errors = [abs(r["error"]) for r in rows if math.isfinite(r["error"])]
        out = {"rows": rows, "max_abs_error": max(errors) if errors else None, "calibration": calibrations,
               "link_rate_bps": args.link_rate_bps, "routing": args.routing, "load": os.getloadavg(),
               "wall_s": round(time.monotonic() - start, 1)}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        if args.plot and rows:
            plot(rows, args.plot)
    except (ValidateError, subprocess.TimeoutExpired) as exc:
        print(f"sim_validate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in rows:
            print(f"{r['topology']:>5} {r['op']:9} {r['algo']:8} {r['size_bytes']:>10} B  measured "
                  f"{r['measured_s'] * 1e3:9.2f} ms  predicted {r['predicted_s'] * 1e3:9.2f} ms  error "
                  f"{r['error'] * 100:+6.1f} %  fidelity ok={r['fidelity']['ok']}")
        if out["max_abs_error"] is not None:
            print(f"max |error| {out['max_abs_error'] * 100:.1f} % over {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
