"""``starpulse train``: training steps of a model spec (``sw.workload``) on the ranks, in one of three places.

Inside a launched job (RANK and STARPULSE_STORE set) it is one rank; with ``--local`` every rank is forked on
this box (``rank_job.run_local_job``); otherwise it brings up a fabric from the topology flags (or uses the
running one), runs every rank there through ``emu.launch`` and adds the switches' drop counters.  Reports step
time, exposed communication share and link load per rank and summarized (JSON ``--json``, timeline ``--plot``),
with the ``fidelity`` verdict.  ``--slow RANK:FACTOR`` makes a rank a straggler (``sw.units.straggler``).
``--compare baseline,starpulse`` runs the same model and topology once per configuration (``train_compare``),
one after the other (on one fabric), and reports the runs and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from sw.clock.lag import ENV_LAG_DIR, add_strict_fidelity_flag, fidelity_exit
from sw.collectives.autotune import choice_lines
from sw.collectives.config import ENV_ROCE_CC, ENV_STORE
from sw.units import int_flag
from sw.units.cli_guard import ArgumentParser, call_guarded
from sw.units.plot import plot_figure
from sw.units.straggler import ENV_SLOW_DIR, compute_factor, nic_rate_share, parse_slow, set_compute_factor
from sw.units.telemetry import ENV_TELEMETRY_DB, TelemetryStore
from sw.workload import PRESETS, ModelSpec, load_spec, plan_step, run_workload
from sw.workload.runner import DTYPE, stderr_progress
from sw.workload.schedule import COMM, COMPUTE, WAIT

from .rank_job import (
    SIM_BACKEND,
    RankJobError,
    add_job_topology_arguments,
    add_where_arguments,
    autotune_env,
    fabric_counters,
    fabric_delta,
    fabric_status,
    flag_rate_bps,
    local_topology,
    run_local_job,
    topology_json,
    warn_hpcc,
)
from .train_compare import CompareConfig, parse_compare, ratios, table_lines

ENV_LINE_RATE = "STARPULSE_TRAIN_LINE_RATE"
"""Per-rail line rate (bit/s) the ranks of a launched train job compute link load and GPU speed against."""
MAX_STEPS = 100_000
MAX_RANK_LINES = 64
"""The text summary lists every rank up to this many, else the first half of it (the JSON has all)."""
TIMELINE_COLORS = {COMPUTE: "tab:blue", COMM: "tab:orange", WAIT: "tab:red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--model", default="gpt-small", metavar="PRESET|FILE",
                   help=f"a preset ({', '.join(PRESETS)}) or a JSON file of model fields "
                        "(default gpt-small)")
    g.add_argument("--steps", type=int_flag(1, MAX_STEPS), default=5, metavar="N", help="measured steps (default 5)")
    g.add_argument("--warmup", type=int_flag(0, MAX_STEPS), default=1, metavar="N", help="warm-up steps (default 1)")
    g.add_argument("--json", default=None, metavar="FILE", help="write the JSON report here")
    g.add_argument("--plot", default=None, metavar="FILE", help="per-rank timeline of the first steps (PNG)")
    g.add_argument("--slow", action="append", default=[], metavar="RANK:FACTOR",
                   help="straggler: RANK computes FACTOR times slower (repeatable)")
    g.add_argument("--compare", default=None, metavar="baseline,starpulse",
                   help="A/B: run once per configuration (baseline: ring allreduce, pairwise all-to-all, ECMP, no "
                        "CC; starpulse: the tuner's rail-aware choices, DCQCN or --roce-cc's CC) and print the ratios")
    add_strict_fidelity_flag(g)
    add_job_topology_arguments(parser, sim_backend=True)
    add_where_arguments(parser)


def _spec(args: argparse.Namespace) -> ModelSpec:
    return load_spec(args.model)


def _slow_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """Where this job's compute factors live: ``$STARPULSE_SLOW_DIR``, else the job's rendezvous store."""
    return env.get(ENV_SLOW_DIR) or env.get(ENV_STORE) or None


def _write_slow(args: argparse.Namespace, world: int, directory: str) -> None:
    """``--slow`` into the job's straggler directory, and where it is (a fault injector may change it later)."""
    for text in args.slow:
        rank, factor = parse_slow(text, world)
        set_compute_factor(directory, rank, factor)
    print(f"stragglers: sw.units.straggler.set_compute_factor({directory!r}, RANK, FACTOR) slows a rank from its "
          "next step", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if os.environ.get("RANK") and os.environ.get(ENV_STORE):
        return _run_rank(args)
    configs = _compare_configs(args)
    if args.backend == SIM_BACKEND:                       # no ranks: the flow-level simulator predicts the job
        from .train_sim import run_sim

        reports, rc = run_sim(args, configs), 0
    elif args.local:
        reports, rc = _run_local(args, configs), 0
    else:
        from emu.run_cli import rerun_until_faithful

        def once() -> tuple[tuple[list[dict[str, Any]], int], list[dict[str, Any] | None]]:
            out = _run_fabric(args, configs)
            complete = len(out[0]) == len(configs)   # a failed run is not repeated
            return out, [r.get("fidelity") for r in out[0]] if complete else []

        reports, rc = rerun_until_faithful(args, once)
    if len(reports) < len(configs):
        return rc                                        # a launched run failed before writing its report
    if args.compare:
        return _finish_compare(args, reports) or rc
    return _finish(args, reports[0]) or rc


def _compare_configs(args: argparse.Namespace) -> list[CompareConfig | None]:
    """``--compare``'s configurations, the starpulse side on ``--roce-cc`` (else $STARPULSE_ROCE_CC, else DCQCN);
    ``[None]`` for a plain run."""
    if not args.compare:
        return [None]
    if args.roce_cc:
        return parse_compare(args.compare, args.roce_cc)
    return parse_compare(args.compare, os.environ.get(ENV_ROCE_CC), f"${ENV_ROCE_CC}")


def _rank_job(comm: Any, spec: ModelSpec, steps: int, warmup: int, line_rate_bps: float,
              slow_dir: str | None) -> dict[str, Any]:
    """Every rank's part: the workload, its straggler factor read between steps from ``slow_dir``; the report
    names the algorithms the communicator's tuner picked for the plan's sizes (``algorithms``)."""
    plan = plan_step(spec, comm.world_size, line_rate_bps)
    db = os.environ.get(ENV_TELEMETRY_DB)          # the fabric's operations store (ops on): every step recorded
    store = TelemetryStore(db) if db else None
    if store is not None and comm.rank == 0:       # the job, for the expected model's step (sw.apps.ops_sim)
        store.set_meta(workload=asdict(spec))
    try:
        report = run_workload(comm, plan, steps, warmup, factor=lambda: compute_factor(slow_dir, comm.rank),
                              progress=stderr_progress, telemetry=store,
                              nic_share=lambda: nic_rate_share(slow_dir, comm.rank))
    finally:
        if store is not None:
            store.close()
    sizes = {"allreduce": sorted({b.nbytes for b in plan.buckets}),
             "alltoall": [plan.a2a_elems * np.dtype(DTYPE).itemsize] if plan.spec.moe else []}
    report["algorithms"] = {coll: {str(n): comm.tuner.algo(coll, n) for n in ns} for coll, ns in sizes.items()}
    if comm.autotune.enabled:
        report["autotune"] = comm.autotune.choices()
    return report


# --- one rank of a launched job ---------------------------------------------------------------------------------
def _run_rank(args: argparse.Namespace) -> int:
    from sw.collectives import init_from_env

    env_rate = os.environ.get(ENV_LINE_RATE)
    line_rate = float(env_rate) if env_rate else float(flag_rate_bps(args.link_rate, "--link-rate"))
    spec = _spec(args)
    with init_from_env() as comm:
        report = _rank_job(comm, spec, args.steps, args.warmup, line_rate, _slow_dir())
        if comm.rank == 0 and args.json:
            Path(args.json).write_text(json.dumps(report) + "\n")
    return 1 if report["wrong"] > 0 else 0


def _announce(config: CompareConfig | None) -> None:
    if config is not None:
        print(f"# --compare: running {config.name} ({config.description})", file=sys.stderr, flush=True)


def _tag(report: dict[str, Any], config: CompareConfig | None) -> dict[str, Any]:
    """A run's report with the comparison configuration it ran under (nothing added outside ``--compare``)."""
    if config is not None:
        report["comparison"] = config.to_json()
    return report


# --- every rank forked on this box ------------------------------------------------------------------------------
def _run_local(args: argparse.Namespace, configs: list[CompareConfig | None]) -> list[dict[str, Any]]:
    """One report per configuration (``[None]``: a plain run), each a job of forked ranks."""
    spec = _spec(args)
    line_rate = float(flag_rate_bps(args.link_rate, "--link-rate"))
    servers, gpus = local_topology(args)
    world = servers * gpus
    plan_step(spec, world, line_rate)                        # the spec's checks against the job, before forking
    out = []
    for config in configs:
        _announce(config)
        with tempfile.TemporaryDirectory(prefix="starpulse-slow-") as slow_dir:
            _write_slow(args, world, slow_dir)
            env = {ENV_SLOW_DIR: slow_dir, **(config.env if config else {})}
            reports, fid = run_local_job(args, servers, gpus, _rank_job, spec, args.steps, args.warmup, line_rate,
                                         slow_dir, env=env)
        report = reports[0]
        report.update({"drops": None, "fidelity": fid, "mode": "local"})   # no switches: drops not measured
        out.append(_tag(report, config))
    return out


# --- on a fabric --------------------------------------------------------------------------------------------------
def _rank_argv(args: argparse.Namespace, json_path: str) -> list[str]:
    model = args.model if args.model in PRESETS else str(Path(args.model).resolve())   # ranks' cwd may differ
    return [sys.executable, "-m", "sw.apps.train", "--model", model, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--json", json_path]


def _run_fabric(args: argparse.Namespace, configs: list[CompareConfig | None]
                ) -> tuple[list[dict[str, Any]], int]:
    """One report per configuration (``[None]``: a plain run), one after the other on the same fabric, and the
    launcher's worst exit code (a run that failed before writing its JSON ends the comparison)."""
    from emu.launch import ENV_NET, fabric_env, launch, roce_cc_of, terminate_as_interrupt
    from emu.reap import owned_tempdir
    from emu.run_cli import fabric_target, log_directory, report

    spec = _spec(args)   # validate every flag before bringing anything up
    flag_rate_bps(args.link_rate, "--link-rate")
    args.gpus = None
    reports: list[dict[str, Any]] = []
    worst = 0
    with terminate_as_interrupt(), fabric_target(args) as target, log_directory(args.logdir) as (logdir, keep):
        topo = target.topo.spec
        world = topo.servers * topo.gpus_per_server
        line_rate = float(topo.link_rate_bps)
        plan_step(spec, world, line_rate)
        dilation = target.clock.dilation if target.clock is not None else 1.0
        net = fabric_env(topo, dilation, args.net, intra_rate=args.intra_rate)[ENV_NET]

        def echo(line: str) -> None:
            prefix, _, text = line.partition("] ")
            if prefix == "[rank 0" or "Error" in text or "error" in text:
                print(line, file=sys.stderr, flush=True)

        for config in configs:
            _announce(config)
            work_dir = owned_tempdir("starpulse-train-")
            json_path = str(work_dir / "rank0.json")
            status = fabric_status(target, args.name)
            # the fabric's straggler directory, so `fabric fault slow_gpu RANK FACTOR` reaches the ranks mid-run
            slow_dir = status.get("straggler_dir") or str(work_dir / "slow")
            faulted = {int(r): f for r, f in ((status.get("faults") or {}).get("slow_gpus") or {}).items()}
            before = fabric_counters(status)
            lag_env = {ENV_LAG_DIR: status["lag_dir"]} if status.get("lag_dir") else {}
            if status.get("telemetry_db"):             # ops on: the ranks record every step and collective
                lag_env[ENV_TELEMETRY_DB] = status["telemetry_db"]
            env = {**os.environ, ENV_LINE_RATE: repr(line_rate), ENV_SLOW_DIR: slow_dir, **lag_env,
                   **(config.env if config else {}), **autotune_env(args)}
            roce_cc = None if config else args.roce_cc     # a comparison's configuration carries its own
            ran_cc = roce_cc_of(fabric_env(topo, dilation, args.net, env, args.intra_rate, roce_cc))
            warn_hpcc(status, ran_cc)
            try:
                _write_slow(args, world, slow_dir)
                result = launch(target.topo, target.ns_pids, _rank_argv(args, json_path), logdir=logdir, env=env,
                                timeout_s=args.timeout, echo=echo, tcp_ecn=args.tcp_ecn, clock=target.clock,
                                net=args.net, intra_rate=args.intra_rate, roce_cc=roce_cc)
            finally:   # --slow is this job's: the fabric's directory goes back to what its slow_gpu faults set
                for text in args.slow:
                    rank = parse_slow(text, world)[0]
                    set_compute_factor(slow_dir, rank, faulted.get(rank, 1.0))
            status = fabric_status(target, args.name)
            after = fabric_counters(status)
            report(result, logdir, keep)
            worst = worst or result.exit_code
            if result.exit_code != 0 and not Path(json_path).exists():
                shutil.rmtree(work_dir, ignore_errors=True)
                return reports, result.exit_code
            out = json.loads(Path(json_path).read_text())
            shutil.rmtree(work_dir, ignore_errors=True)
            out.update({"mode": "fabric", "net": net, "roce_cc": ran_cc, "time_dilation": dilation,
                        **fabric_delta(before, after), "fidelity": status["fidelity"], "topology": topology_json(topo)})
            reports.append(_tag(out, config))
    return reports, worst


# --- output -------------------------------------------------------------------------------------------------------
def _fidelity_word(fid: dict[str, Any] | None) -> str:
    """'ok', or a word that cannot be read as ok (the warning line itself goes to stderr)."""
    if not fid:
        return "unknown"
    if fid.get("model"):
        return f"n/a ({fid['model']} model: predicted, not emulated)"
    return "ok" if fid.get("ok") else "NOT-ok (figures bent by CPU load; see the warning)"


def summary_lines(rep: dict[str, Any]) -> list[str]:
    """The text summary: the job's figures, then one line per rank."""
    drops = ("not modelled" if rep.get("backend") == SIM_BACKEND else "not measured (no switches)") \
        if rep["drops"] is None else str(rep["drops"])
    wrong = "n/a (no data moved)" if rep["wrong"] is None else str(rep["wrong"])
    model = rep["config"]["model"]
    lines = [f"# train {model['name']} on {rep['config']['world']} ranks ({rep.get('mode')}), "
             f"{rep['config']['steps']} steps after {rep['config']['warmup']} warm-up",
             f"step_s {rep['step_s']:.6f}  comm_share {rep['comm_share']:.3f}  link_load {rep['link_load']:.3f}  "
             f"drops {drops}  wrong {wrong}  fidelity {_fidelity_word(rep.get('fidelity'))}",
             "# rank  step_ms  compute_ms  comm_busy_ms  exposed_ms  comm_share  link_load  factor"]
    if rep.get("algorithms"):
        picks = [f"{coll} {algo} ({size} B)" for coll, by_size in rep["algorithms"].items()
                 for size, algo in by_size.items()]
        lines.insert(2, "algorithms: " + ", ".join(picks))
    at = next(i for i, line in enumerate(lines) if line.startswith("# rank"))
    lines[at:at] = choice_lines(rep.get("autotune"))
    shown = rep["per_rank"] if len(rep["per_rank"]) <= MAX_RANK_LINES else rep["per_rank"][:MAX_RANK_LINES // 2]
    for r in shown:
        lines.append(f"  {r['rank']:4d}  {r['step_s'] * 1e3:7.2f}  {r['compute_s'] * 1e3:10.2f}  "
                     f"{r['comm_busy_s'] * 1e3:12.2f}  {r['exposed_comm_s'] * 1e3:10.2f}  {r['comm_share']:10.3f}  "
                     f"{r['link_load']:9.3f}  {r['compute_factor']:6g}")
    if len(shown) < len(rep["per_rank"]):
        lines.append(f"# ... and {len(rep['per_rank']) - len(shown)} more ranks (every one is in --json's per_rank)")
    return lines


def plot_timeline(rep: dict[str, Any], path: str) -> None:
    """Per-rank timeline of the first measured steps: compute, communication in flight, waiting (matplotlib)."""
    from matplotlib.patches import Patch

    timeline = rep["timeline"]
    with plot_figure(path, figsize=(12, 0.5 + 0.55 * len(timeline)), dpi=110) as (_, ax):
        for row in timeline:
            y = row["rank"]
            for kind, lanes in ((COMPUTE, (y - 0.4, 0.4)), (WAIT, (y - 0.4, 0.4)), (COMM, (y + 0.02, 0.35))):
                bars = [(a / 1e6, (b - a) / 1e6) for k, a, b in row["segments"] if k == kind and b > a]
                ax.broken_barh(bars, lanes, color=TIMELINE_COLORS[kind])
            for end in row["step_ends_ns"]:
                ax.plot([end / 1e6] * 2, [y - 0.45, y + 0.45], color="grey", linewidth=0.8)
        ax.set_yticks([r["rank"] for r in timeline], [f"rank {r['rank']}" for r in timeline])
        ax.invert_yaxis()
        ax.set_xlabel("ms of network time since the rank's first measured step (grey: step ends)")
        fid = rep.get("fidelity") or {}
        ax.set_title(f"{rep['config']['model']['name']}: comm_share {rep['comm_share']:.3f}, link_load "
                     f"{rep['link_load']:.3f}" + ("" if fid.get("ok", True) else "  (fidelity NOT ok: figures bent)"),
                     fontsize=10)
        ax.legend(handles=[Patch(color=c, label=k if k != COMM else "comm in flight")
                           for k, c in TIMELINE_COLORS.items()],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _finish(args: argparse.Namespace, rep: dict[str, Any]) -> int:
    """Print the summary, draw the plot, write the JSON (without the timeline); exit code from results and
    ``--strict-fidelity``."""
    for line in summary_lines(rep):
        print(line, flush=True)
    if args.plot:
        try:
            plot_timeline(rep, args.plot)
        except OSError as exc:
            raise RankJobError(f"--plot {args.plot}: cannot write ({exc.strerror})") from None
    out = {k: v for k, v in rep.items() if k != "timeline"}
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        except OSError as exc:
            raise RankJobError(f"--json {args.json}: cannot write ({exc.strerror})") from None
    return (1 if (rep["wrong"] or 0) > 0 else 0) or fidelity_exit(rep.get("fidelity"), args.strict_fidelity)


def _finish_compare(args: argparse.Namespace, reports: list[dict[str, Any]]) -> int:
    """Each run's summary and the comparison table; ``--plot FILE`` draws FILE's stem + ``.NAME`` per run;
    the JSON is ``runs`` (name -> a single run's object) and ``ratios``."""
    runs = {rep["comparison"]["name"]: rep for rep in reports}
    ratio = ratios(runs)
    for name, rep in runs.items():
        print(f"## {name}: {rep['comparison']['description']}", flush=True)
        for line in summary_lines(rep):
            print(line, flush=True)
    for line in table_lines(runs, ratio, local=bool(args.local)):
        print(line, flush=True)
    if args.plot:
        plot = Path(args.plot)
        for name, rep in runs.items():
            path = str(plot.with_name(f"{plot.stem}.{name}{plot.suffix or '.png'}"))
            try:
                plot_timeline(rep, path)
            except OSError as exc:
                raise RankJobError(f"--plot {args.plot}: cannot write {path} ({exc.strerror})") from None
    out = {"runs": {name: {k: v for k, v in rep.items() if k != "timeline"} for name, rep in runs.items()},
           "ratios": ratio}
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        except OSError as exc:
            raise RankJobError(f"--json {args.json}: cannot write ({exc.strerror})") from None
    wrong = any((rep["wrong"] or 0) > 0 for rep in runs.values())
    return (1 if wrong else 0) or max(fidelity_exit(rep.get("fidelity"), args.strict_fidelity)
                                      for rep in runs.values())


def main(argv: list[str] | None = None) -> int:
    """``python -m sw.apps.train``: what launched ranks run (user errors: one line, exit 2)."""
    parser = ArgumentParser(prog="starpulse train")
    add_arguments(parser)
    return call_guarded("starpulse train", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
