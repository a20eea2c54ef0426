"""``starpulse ops cost``: what the operations collection costs the emulation (issue 18 item 1: < 5 % of its
throughput).

The same training job (the campaign's tiny MoE: all-to-all and bucketed allreduce every step) runs on a fresh
fabric of the same topology and fixed dilation with ops off and ops on (the switch poller, and the ranks recording
every step, collective and NIC counters into the store), in interleaved pairs (off/on, on/off, ...) so a load that
drifts hits both alike.  Per run: the job's collective bus bandwidth while it communicated (``busbw_bps``, network
time), steps per network and per wall second, the switches' forwarded packets per CPU second, the collector's own
CPU seconds, the store's rows and bytes per wall second, ``fidelity`` and the load average.  The summary gives per
figure the medians of each arm, the ratio on/off of the medians and of each pair, and the pair ratios' spread.
``scripts/ops_cost_bench.py`` runs it too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from sw.units import float_flag, int_flag
from sw.units.plot import plot_figure

TARGET_COST = 0.05
"""Issue 18 item 1: the collection costs less than 5 % of the emulation's throughput."""
DEFAULT_DILATION = 64.0
FIGURES = ("busbw_bps", "steps_per_net_s", "steps_per_wall_s", "switch_pkts_per_cpu_s")
"""Throughput figures compared on/off (higher is better); the first is the cost's headline."""


class OpsCostError(ValueError):
    """A bad flag or a run that failed: one line."""

    is_user_error = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    from sw.apps.rank_job import add_job_topology_arguments

    p.add_argument("--pairs", type=int_flag(1, 50), default=3, metavar="N",
                   help="pairs of runs, ops off and on, the order alternating (default 3)")
    p.add_argument("--steps", type=int_flag(1, 1000), default=8, metavar="N",
                   help="measured training steps per run (default 8; one warm-up step before them)")
    p.add_argument("--time-dilation", type=float_flag(1, 1e6), default=DEFAULT_DILATION, metavar="K",
                   help=f"the dilation of every run (a number: both arms alike; default {DEFAULT_DILATION:g})")
    p.add_argument("--timeout", type=float_flag(0, 86400, lo_exclusive=True, unit="seconds"), default=900.0,
                   metavar="S", help="stop a run's job after S wall seconds (default 900)")
    p.add_argument("--json", action="store_true", help="print the runs and the summary as JSON (progress: stderr)")
    p.add_argument("--plot", default=None, metavar="FILE", help="per-pair ratios on/off of each figure (PNG)")
    add_job_topology_arguments(p)
    p.set_defaults(servers=4, gpus_per_server=2)


def run(args: argparse.Namespace) -> int:
    if args.plot and not Path(args.plot).resolve().parent.is_dir():
        raise OpsCostError(f"--plot {args.plot}: its folder does not exist")
    if os.geteuid() != 0:
        raise OpsCostError("starpulse ops cost: needs root (it brings up fabrics in network namespaces)")
    args.name = f"opscost-{os.getpid()}"   # never a running fabric: every run brings up its own
    args.gpus = None
    args.local = False
    args.impairable = None
    args.pfc = "off"
    load_start = load_text()
    runs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        for ops_on in ((False, True) if i % 2 == 0 else (True, False)):
            r = run_once(args, ops_on)
            r["pair"] = i + 1
            runs.append(r)
            _progress(f"pair {i + 1} ops {'on ' if ops_on else 'off'}: busbw {r['busbw_bps'] / 1e6:.2f} Mb/s, "
                      f"{r['steps_per_wall_s']:.3f} steps/wall s, switches {r['switch_pkts_per_cpu_s']:,.0f} "
                      f"pkts/CPU s, collector {r['collector_cpu_s']:.2f} CPU s, fidelity "
                      f"{'ok' if r['fidelity'].get('ok') else 'NOT ok'} ({r['load']})")
    result = {"time_dilation": args.time_dilation, "pairs": args.pairs, "steps": args.steps,
              "topology": runs[0]["topology"], "load": {"start": load_start, "end": load_text()},
              "runs": runs, "summary": summarize(runs)}
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for line in summary_lines(result):
            print(line)
    return 0


def run_once(args: argparse.Namespace, ops_on: bool) -> dict[str, Any]:
    """One run: a fabric of the topology flags with ops ``ops_on``, the job on it, its figures."""
    from emu.fabric_bench import cpu_seconds
    from emu.reap import owned_tempdir
    from emu.run_cli import fabric_target
    from sw.apps.ops_campaign import CAMPAIGN_MODEL, Job
    from sw.apps.rank_job import topology_json
    from sw.units.telemetry import TelemetryStore

    args.ops = "on" if ops_on else "off"
    with fabric_target(args, echo=False) as target:
        fab = target.fabric
        clock = target.clock
        spec = target.topo.spec
        world = spec.servers * spec.gpus_per_server
        work = owned_tempdir("starpulse-opscost-")
        model = work / "model.json"
        model.write_text(json.dumps({**CAMPAIGN_MODEL, "experts": world}))   # one expert per rank
        status = fab.status()
        switch_pids = [s.proc.pid for s in fab.net.switches.values() if s.proc is not None]
        pkts0 = int(status["totals"]["tx_pkts"])
        store = TelemetryStore(fab.collector.store.path) if ops_on else None
        rows0 = sum(store.counts().values()) if store else 0
        bytes0 = store_bytes(store.path) if store else 0
        coll0 = (fab.collector.cpu_ns, fab.collector.polls) if ops_on else (0, 0)
        load = load_text()
        sw0 = sum(sum(cpu_seconds(p)) for p in switch_pids)
        ranks0 = children_cpu_ns()
        t0 = clock.now_ns()
        job = Job(target, model, args.steps, work, args.timeout).wait()
        wall_s = clock.wall_duration_ns(clock.now_ns() - t0) / 1e9
        ranks_cpu = (children_cpu_ns() - ranks0) / 1e9         # the ranks
        sw_cpu = sum(sum(cpu_seconds(p)) for p in switch_pids) - sw0
        coll1 = (fab.collector.cpu_ns, fab.collector.polls) if ops_on else (0, 0)
        rows = (sum(store.counts().values()) - rows0) if store else 0
        nbytes = (store_bytes(store.path) - bytes0) if store else 0
        if store:
            store.close()
        if job.exit_code != 0 or not (work / "rank0.json").exists():
            failed = [r for r in job.ranks if r.returncode and not r.stopped_by_launcher]
            where = f"rank {failed[0].rank} exit {failed[0].returncode}" if failed else f"exit {job.exit_code}"
            raise OpsCostError(f"the job (ops {args.ops}) failed: {where}; logs in {work / 'ranks'}")
        report = json.loads((work / "rank0.json").read_text())
        pkts = int(fab.status()["totals"]["tx_pkts"]) - pkts0
        fid = fab.fidelity()
        shutil.rmtree(work, ignore_errors=True)
    step_s = float(report["step_s"])
    return {"ops": ops_on, "time_dilation": clock.dilation, "topology": topology_json(spec),
            "step_s": step_s, "steps_per_net_s": 1 / step_s if step_s > 0 else 0.0,
            "steps_per_wall_s": (args.steps + 1) / wall_s, "busbw_bps": job_busbw_bps(report),
            "job_wall_s": round(wall_s, 3), "switch_pkts": pkts, "switch_cpu_s": round(sw_cpu, 3),
            "switch_pkts_per_cpu_s": pkts / sw_cpu if sw_cpu > 0 else 0.0, "ranks_cpu_s": round(ranks_cpu, 3),
            "collector_cpu_s": round((coll1[0] - coll0[0]) / 1e9, 4), "collector_polls": coll1[1] - coll0[1],
            "store_rows": rows, "store_bytes": nbytes, "store_rows_per_s": rows / wall_s,
            "store_bytes_per_s": nbytes / wall_s, "fidelity": fid, "load": load}


def job_busbw_bps(report: dict[str, Any]) -> float:
    """The job's collective bus bandwidth while it communicated (network time): per step, each collective's bytes
    times its busbw factor (nccl-tests': allreduce 2(n-1)/n, all-to-all (n-1)/n), over the ranks' mean time with
    a collective in flight per step (``comm_busy_s``)."""
    from sw.collectives.bench import bus_factor

    cfg = report["config"]
    n = int(cfg["world"])
    bus_bytes = sum(b["bytes"] for b in cfg["buckets"]) * bus_factor("allreduce", n) \
        + cfg["alltoall_bytes"] * cfg["alltoalls_per_step"] * bus_factor("alltoall", n)
    busy_s = statistics.mean(r["comm_busy_s"] for r in report["per_rank"])
    return 8 * bus_bytes / busy_s if busy_s > 0 else 0.0


def store_bytes(path: Path) -> int:
    """The store's size on disk: the database and its write-ahead log."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the medians with ops on and off, the ratio of the medians, the per-pair ratios (on / off),
    their median and spread (max - min); the cost (1 - median pair ratio of busbw) against the target."""
    out: dict[str, Any] = {}
    pairs = sorted({r["pair"] for r in runs})
    for key in FIGURES:
        on = {r["pair"]: r[key] for r in runs if r["ops"]}
        off = {r["pair"]: r[key] for r in runs if not r["ops"]}
        ratios = [on[p] / off[p] for p in pairs if off.get(p)]
        med_on, med_off = statistics.median(on.values()), statistics.median(off.values())
        out[key] = {"median_on": med_on, "median_off": med_off,
                    "ratio_of_medians": round(med_on / med_off, 4) if med_off else None,
                    "pair_ratios": [round(x, 4) for x in ratios],
                    "median_pair_ratio": round(statistics.median(ratios), 4) if ratios else None,
                    "spread": round(max(ratios) - min(ratios), 4) if ratios else None}
    on_runs = [r for r in runs if r["ops"]]
    out["collector_cpu_s_per_wall_s"] = round(statistics.median(r["collector_cpu_s"] / r["job_wall_s"]
                                                                for r in on_runs), 5)
    out["store_rows_per_s"] = round(statistics.median(r["store_rows_per_s"] for r in on_runs), 1)
    out["store_bytes_per_s"] = round(statistics.median(r["store_bytes_per_s"] for r in on_runs), 1)
    ratio = out["busbw_bps"]["median_pair_ratio"]
    out["cost"] = round(1 - ratio, 4) if ratio is not None else None
    out["target_met"] = out["cost"] is not None and out["cost"] < TARGET_COST
    out["all_fidelity_ok"] = all(r["fidelity"].get("ok") for r in runs)
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The text summary: one line per figure, the collector and store rates, the verdict with the loads."""
    s, t = result["summary"], result["topology"]
    lines = [f"# ops cost: {t['servers']} servers x {t['gpus_per_server']} rails, {t['spines']} spines, dilation "
             f"{result['time_dilation']:g}, {result['pairs']} pair(s) of {result['steps']} steps"]
    for key in FIGURES:
        f = s[key]
        lines.append(f"{key}: median off {f['median_off']:,.4g} / on {f['median_on']:,.4g} = "
                     f"{f['ratio_of_medians']} (pairs {f['pair_ratios']}, median {f['median_pair_ratio']}, spread "
                     f"{f['spread']})")
    lines.append(f"collector {s['collector_cpu_s_per_wall_s']:.4f} CPU s per wall s; store "
                 f"{s['store_rows_per_s']:,.0f} rows/s, {s['store_bytes_per_s']:,.0f} B/s (wall)")
    fid = "every run fidelity ok" if s["all_fidelity_ok"] else \
        "NOT every run fidelity ok: the figures are bent by CPU load (see each run's fidelity)"
    lines.append(f"cost {s['cost'] * 100:.1f} % of busbw (target < {TARGET_COST * 100:.0f} %: "
                 f"{'met' if s['target_met'] else 'NOT met'}); {fid}; {result['load']['start']} at start, "
                 f"{result['load']['end']} at end")
    return lines


def plot(result: dict[str, Any], path: str) -> None:
    """Per-pair ratios on/off of each figure, with the 5 % line."""
    s = result["summary"]
    with plot_figure(path, figsize=(8, 4), dpi=110) as (_, ax):
        for i, key in enumerate(FIGURES):
            ratios = s[key]["pair_ratios"]
            ax.scatter([i] * len(ratios), ratios, color="tab:blue", zorder=3)
            if s[key]["median_pair_ratio"] is not None:
                ax.hlines(s[key]["median_pair_ratio"], i - 0.25, i + 0.25, color="tab:orange")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(1 - TARGET_COST, color="tab:red", linestyle="--", linewidth=0.8, label="target (-5 %)")
        ax.set_xticks(range(len(FIGURES)), FIGURES, fontsize=8)
        ax.set_ylabel("ops on / ops off (per pair; orange: median)")
        fid = "" if s["all_fidelity_ok"] else "  (fidelity NOT ok in some runs: figures bent)"
        ax.set_title(f"ops collection cost, dilation {result['time_dilation']:g}, {result['load']['start']}{fid}",
                     fontsize=9)
        ax.legend(fontsize=8)


def children_cpu_ns() -> int:
    """User + system CPU of this process's reaped children so far (the ranks of the jobs it ran), in ns."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def load_text() -> str:
    """The load averages as ``uptime`` prints them."""
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
