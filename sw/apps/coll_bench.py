"""``starpulse bench OP``: the nccl-tests-style sweep (``bench``) in one of three places.

Inside a launched job (RANK and STARPULSE_STORE set) it is one rank of the job; with ``--local`` every rank is
forked on this box (``run_local``: shared memory + loopback TCP throttled to ``--link-rate``, no fabric, no
root); otherwise it brings up a fabric from the topology flags (default 4 servers x 2 GPUs x 2 spines), or uses
the running ``starpulse fabric up``, runs every rank there through ``emu.launch`` and adds the switches' drop and
ECN-mark counters.  Imports ``emu`` lazily, inside ``run()`` (the CLI is the top layer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sw.clock.lag import ENV_LAG_DIR, add_strict_fidelity_flag, fidelity_exit
from sw.collectives.bench import OPS, ROOTED, BenchParams, CollBenchError, dtype_from_flag, run_bench
from sw.collectives.config import ENV_STORE
from sw.units import UnitError, int_flag, parse_size_bytes
from sw.units.cli_guard import ArgumentParser, call_guarded

from .rank_job import (
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

ENV_LINE_RATE = "STARPULSE_BENCH_LINE_RATE"
"""Per-rail line rate (bit/s) the ranks of a launched bench report against (set by the outer command)."""
MAX_ITERS = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("op", metavar="OP", help=f"collective: {', '.join(OPS)}")
    g = parser.add_argument_group("sweep (as nccl-tests)")
    g.add_argument("-b", "--minbytes", default="8K", metavar="SIZE", help="smallest size (default 8K)")
    g.add_argument("-e", "--maxbytes", default="64M", metavar="SIZE", help="largest size (default 64M)")
    g.add_argument("-f", "--stepfactor", type=int_flag(2, 1024), default=2,
                   metavar="F", help="size multiplier (default 2)")
    g.add_argument("-n", "--iters", type=int_flag(1, MAX_ITERS), default=20,
                   metavar="N", help="timed iterations (default 20)")
    g.add_argument("-w", "--warmup_iters", type=int_flag(0, MAX_ITERS), default=5,
                   metavar="N", help="warm-up iterations (default 5)")
    g.add_argument("-c", "--check", type=int, default=1, metavar="0|1", help="check results (default 1)")
    g.add_argument("-o", "--op", dest="redop", default="sum", metavar="OP",
                   help="reduction: sum, prod, min, max, avg (default sum)")
    g.add_argument("-d", "--datatype", default="float32", metavar="TYPE",
                   help="float32 (float), float16 (half), int32 (int), int64, bfloat16 (default float32)")
    g.add_argument("-r", "--root", type=int, default=0, metavar="RANK", help="root of broadcast/reduce (default 0)")
    g.add_argument("-A", "--algo", default=None, metavar="NAME",
                   help="force an algorithm (ring, tree, rhd, hier, pairwise, rail); default: the tuner")
    g.add_argument("-J", "--output_file", default=None, metavar="FILE", help="write the JSON report here")
    add_strict_fidelity_flag(g)
    g.add_argument("--line-rate", default=None, metavar="RATE",
                   help="per-rail line rate busbw is compared with (default: the fabric's --link-rate)")
    add_job_topology_arguments(parser)
    add_where_arguments(parser)


def _size(text: str, flag: str) -> int:
    try:
        return parse_size_bytes(text, what=flag)
    except UnitError as exc:
        raise CollBenchError(str(exc)) from None


def _rate(text: str, flag: str) -> int:
    return flag_rate_bps(text, flag, CollBenchError)


def params_from_args(args: argparse.Namespace, line_rate_bps: float | None) -> BenchParams:
    """Validated sweep parameters (one-line errors naming the flag)."""
    if args.check not in (0, 1):
        raise CollBenchError(f"-c {args.check}: expected 0 or 1")
    return BenchParams(op=args.op, min_bytes=_size(args.minbytes, "-b"), max_bytes=_size(args.maxbytes, "-e"),
                       factor=args.stepfactor, iters=args.iters, warmup=args.warmup_iters, check=bool(args.check),
                       redop=args.redop, dtype=dtype_from_flag(args.datatype), root=args.root, algo=args.algo,
                       line_rate_bps=line_rate_bps)


def _line_rate(args: argparse.Namespace) -> float:
    return float(_rate(args.line_rate or args.link_rate, "--line-rate" if args.line_rate else "--link-rate"))


def write_report(report: dict[str, Any], path: str | None) -> None:
    if path:
        try:
            Path(path).write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            raise CollBenchError(f"-J {path}: cannot write ({exc.strerror})") from None


def run(args: argparse.Namespace) -> int:
    if os.environ.get("RANK") and os.environ.get(ENV_STORE):
        return _run_rank(args)
    if args.local:
        return _run_local(args)
    return _run_fabric(args)


# --- one rank of a launched job ---------------------------------------------------------------------------------
def _run_rank(args: argparse.Namespace) -> int:
    from sw.collectives import init_from_env

    env_rate = os.environ.get(ENV_LINE_RATE)
    line_rate = float(env_rate) if env_rate else (float(_rate(args.line_rate, "--line-rate"))
                                                 if args.line_rate else None)
    p = params_from_args(args, line_rate)
    with init_from_env() as comm:
        on_row = (lambda line: print(line, flush=True)) if comm.rank == 0 else None
        report = run_bench(comm, p, on_row=on_row)
        if comm.rank == 0:
            write_report(report, args.output_file)
    return 1 if report["wrong"] > 0 else 0


# --- every rank forked on this box ------------------------------------------------------------------------------
def _local_rank(comm: Any, p: BenchParams) -> dict[str, Any]:
    on_row = (lambda line: print(line, flush=True)) if comm.rank == 0 else None
    return run_bench(comm, p, on_row=on_row)


def _run_local(args: argparse.Namespace) -> int:
    p = params_from_args(args, _line_rate(args))
    servers, gpus = local_topology(args)
    if p.op in ROOTED and p.root >= servers * gpus:
        raise CollBenchError(f"-r {p.root}: must be a rank in 0..{servers * gpus - 1}")
    reports, fid = run_local_job(args, servers, gpus, _local_rank, p)
    report = reports[0]
    report["fidelity"] = fid
    report["mode"] = "local"
    write_report(report, args.output_file)
    return (1 if report["wrong"] > 0 else 0) or fidelity_exit(report["fidelity"], args.strict_fidelity)


# --- on a fabric --------------------------------------------------------------------------------------------------
def _rank_argv(args: argparse.Namespace, json_path: str) -> list[str]:
    argv = [sys.executable, "-m", "sw.apps.coll_bench", args.op, "-b", args.minbytes, "-e", args.maxbytes,
            "-f", str(args.stepfactor), "-n", str(args.iters), "-w", str(args.warmup_iters), "-c", str(args.check),
            "-o", args.redop, "-d", args.datatype, "-r", str(args.root), "-J", json_path]
    return argv + (["-A", args.algo] if args.algo else [])


def _run_fabric(args: argparse.Namespace) -> int:
    """The sweep on a fabric (run again at a higher dilation while ``auto``'s choice proves not ok), then its
    report; the exit code is the launcher's, else ``--strict-fidelity``'s."""
    from emu.run_cli import rerun_until_faithful

    def once() -> tuple[tuple[dict[str, Any] | None, int], list[dict[str, Any] | None]]:
        out, code = _sweep_fabric(args)
        return (out, code), [out["fidelity"]] if out is not None else []

    out, code = rerun_until_faithful(args, once)
    if out is None:
        return code
    detail = ", ".join(f"{k} {v}" for k, v in out["drop_detail"].items() if v)
    print(f"# fabric: drops {out['drops']}{f' ({detail})' if detail else ''}, ECN marks {out['ecn_marks']} "
          "during the sweep")
    write_report(out, args.output_file)
    strict = fidelity_exit(out["fidelity"], args.strict_fidelity)
    return code or strict


def _sweep_fabric(args: argparse.Namespace) -> tuple[dict[str, Any] | None, int]:
    """One sweep on the fabric ``fabric_target`` gives: rank 0's report with the fabric's counters and fidelity
    (None when the job failed before writing it), and the launcher's exit code."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from emu.launch import ENV_NET, fabric_env, launch, roce_cc_of, terminate_as_interrupt
    from emu.reap import owned_tempdir
    from emu.run_cli import fabric_target, log_directory, report

    p = params_from_args(args, _line_rate(args))   # validate every flag before bringing anything up
    args.gpus = None
    with terminate_as_interrupt(), fabric_target(args) as target, log_directory(args.logdir) as (logdir, keep):
        spec = target.topo.spec
        line_rate = float(_rate(args.line_rate, "--line-rate")) if args.line_rate else float(spec.link_rate_bps)
        if p.op in ROOTED and p.root >= spec.servers * spec.gpus_per_server:
            raise CollBenchError(f"-r {p.root}: must be a rank in 0..{spec.servers * spec.gpus_per_server - 1}")
        dilation = target.clock.dilation if target.clock is not None else 1.0
        shared = fabric_env(spec, dilation, args.net, intra_rate=args.intra_rate, roce_cc=args.roce_cc)
        net, roce_cc = shared[ENV_NET], roce_cc_of(shared)
        json_path = str(owned_tempdir("starpulse-bench-") / "rank0.json")
        status = fabric_status(target, args.name)
        warn_hpcc(status, roce_cc)
        before = fabric_counters(status)
        lag_env = {ENV_LAG_DIR: status["lag_dir"]} if status.get("lag_dir") else {}   # ranks' NIC/throttle lag
        console = Console(stderr=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            task = progress.add_task(f"bench {p.op}", total=len(p.sizes))

            def show(text: str) -> None:   # the table on stdout; above the bar when both share a terminal
                if sys.stdout.isatty() and console.is_terminal:
                    progress.console.print(text, highlight=False, soft_wrap=True, markup=False)
                else:
                    print(text, flush=True)

            def echo(line: str) -> None:
                prefix, _, text = line.partition("] ")
                if prefix == "[rank 0":
                    show(text)
                    if text and not text.startswith("#"):
                        progress.advance(task)
                elif "Error" in text or "error" in text:
                    show(line)

            result = launch(target.topo, target.ns_pids, _rank_argv(args, json_path), logdir=logdir,
                            env={**os.environ, ENV_LINE_RATE: repr(line_rate), **lag_env, **autotune_env(args)},
                            timeout_s=args.timeout, echo=echo,
                            tcp_ecn=args.tcp_ecn, clock=target.clock, net=args.net, intra_rate=args.intra_rate,
                            roce_cc=args.roce_cc)
        status = fabric_status(target, args.name)
        after = fabric_counters(status)
        report(result, logdir, keep)
        if result.exit_code != 0 and not Path(json_path).exists():
            return None, result.exit_code
    out = json.loads(Path(json_path).read_text())
    Path(json_path).unlink()
    Path(json_path).parent.rmdir()
    out.update({"mode": "fabric", "net": net, "roce_cc": roce_cc, "time_dilation": dilation, "line_rate_bps": line_rate,
                **fabric_delta(before, after), "fidelity": status["fidelity"], "topology": topology_json(spec)})
    return out, result.exit_code


def main(argv: list[str] | None = None) -> int:
    """``python -m sw.apps.coll_bench``: what launched ranks run (user errors: one line, exit 2)."""
    parser = ArgumentParser(prog="starpulse bench")
    add_arguments(parser)
    return call_guarded("starpulse bench", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
