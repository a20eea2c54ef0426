"""``starpulse run --servers S --gpus G [fabric options] -- python script.py``: every GPU rank of a fabric runs
the command in its server's namespace (``emu.launch``).  Uses the fabric of ``starpulse fabric up`` when one
is running, else brings up a temporary one and tears it down; ``--local`` runs the ranks on this box without a
fabric (no root).  The exit code is the worst rank's."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from emu.cli import add_topology_arguments, output_dir, spec_from_args
from emu.fabric_daemon import DEFAULT_NAME, read_state
from emu.launch import (
    NETS,
    JobResult,
    LaunchError,
    launch,
    namespace_pids_from_state,
    resolve_command,
    roce_cc_choice,
    terminate_as_interrupt,
)
from emu.reap import owned_tempdir, record
from sw.clock import ENV_DILATION, Clock, get_clock
from sw.collectives.config import DEFAULT_INTRA_RATIO, ENV_INTRA_RATE, ROCE_CC_HELP, ROCE_CCS, intra_rate_for
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.collectives.local import check_local_ranks
from sw.units import AutoDilation, add_time_dilation_flag, float_flag
from sw.units.cli_guard import ArgumentParser, call_guarded

DEFAULT_SERVERS = 4
DEFAULT_GPUS = 2
R = TypeVar("R")
MAX_TIMEOUT_S = 7 * 86400.0   # --timeout: a week of wall time at most


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Topology flags (as ``starpulse fabric``, plus ``--gpus`` = ``--gpus-per-server``) and launcher flags."""
    add_topology_arguments(parser)
    parser.set_defaults(servers=None, gpus_per_server=None)   # None: not given (a running fabric decides)
    g = parser.add_argument_group("launcher")
    g.add_argument("--gpus", type=int, default=None, metavar="G", help="GPUs per server (= --gpus-per-server)")
    g.add_argument("--name", default=DEFAULT_NAME, help=f"running fabric to use if up (default {DEFAULT_NAME})")
    g.add_argument("--local", action="store_true",
                   help="no fabric, no root: every rank runs on this box (shared memory in a server, loopback TCP "
                        "throttled to --link-rate between servers)")
    g.add_argument("--logdir", default=None, metavar="DIR", help="per-rank logs rank<N>.log (default: a temp dir)")
    g.add_argument("--timeout", type=float_flag(0, MAX_TIMEOUT_S, lo_exclusive=True, unit="seconds"), default=3600.0,
                   metavar="S",
                   help="stop every rank after S wall seconds (default 3600)")
    add_time_dilation_flag(g)
    add_net_argument(g)
    g.add_argument("--roce-cc", choices=ROCE_CCS, default=None, help=ROCE_CC_HELP)
    add_intra_rate_argument(g)
    g.add_argument("--no-tcp-ecn", dest="tcp_ecn", action="store_false",
                   help="leave TCP without ECN in the server namespaces (default: ECN on, RED marks slow senders)")
    g.add_argument("--quiet", action="store_true", help="do not echo rank output (logs are still written)")


def add_net_argument(group: argparse._ArgumentGroup) -> None:
    """``--net roce|tcp``: the ranks' inter-server transport (default: $STARPULSE_NET, else RoCE)."""
    group.add_argument("--net", choices=NETS, default=None,
                       help="inter-server transport of the ranks: roce (RC QPs on the rail NIC, --roce-cc) or tcp "
                            "(default: $STARPULSE_NET, else roce)")


def add_intra_rate_argument(group: argparse._ArgumentGroup) -> None:
    """``--intra-rate RATE|Nx|off``: the ranks' shared-memory ("NVLink") rate per GPU."""
    group.add_argument("--intra-rate", default=None, metavar="RATE|Nx|off",
                       help=f"shared-memory (NVLink stand-in) egress per rank: a rate (900M), a multiple of the link "
                            f"rate (9x) or off (default: ${ENV_INTRA_RATE}, else {DEFAULT_INTRA_RATIO:g}x the "
                            "link rate, a DGX-class NVLink/NIC ratio per GPU)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_launch_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (run by every rank)")


@dataclass
class Target:
    """Where ranks run: a topology and the namespace PID of each server."""

    topo: Topology
    ns_pids: dict[str, int]
    started_here: bool
    fabric: object | None = None   # the emu.fabric.Fabric we brought up, if any (status counters)
    clock: Clock | None = None     # the fabric's clock (its dilation is handed to the ranks)


def _gpus(args: argparse.Namespace) -> int | None:
    if args.gpus is not None and args.gpus_per_server is not None and args.gpus != args.gpus_per_server:
        raise LaunchError(f"--gpus {args.gpus} and --gpus-per-server {args.gpus_per_server} disagree")
    return args.gpus if args.gpus is not None else args.gpus_per_server


def _check_values(args: argparse.Namespace) -> None:
    if args.timeout is not None and not args.timeout > 0:
        raise LaunchError(f"--timeout {args.timeout}: must be > 0 seconds")
    if getattr(args, "intra_rate", None):
        intra_rate_for(args.intra_rate, 1e9)   # the syntax, before a fabric comes up (the rate needs its links)
    roce_cc_choice(getattr(args, "roce_cc", None), os.environ)   # $STARPULSE_ROCE_CC too, before a fabric comes up
    if getattr(args, "logdir", None):
        args.logdir = str(output_dir("--logdir", args.logdir, create=False))   # created when the ranks start


def spec_for(args: argparse.Namespace, default_servers: int = DEFAULT_SERVERS,
             default_gpus: int = DEFAULT_GPUS) -> TopologySpec:
    """The requested topology with defaults filled in (validated, one-line errors)."""
    gpus = _gpus(args)
    ns = argparse.Namespace(**vars(args))
    ns.servers = default_servers if args.servers is None else args.servers
    ns.gpus_per_server = default_gpus if gpus is None else gpus
    return spec_from_args(ns)


def apply_dilation(args: argparse.Namespace) -> Clock | None:
    """Export ``--time-dilation`` so switches and ranks started from here share the same clock factor (``auto``:
    none yet, ``fabric_target`` calibrates one)."""
    if args.time_dilation is None or isinstance(args.time_dilation, AutoDilation):
        return None
    os.environ[ENV_DILATION] = repr(float(args.time_dilation))
    return Clock(args.time_dilation)


@contextlib.contextmanager
def fabric_target(args: argparse.Namespace, *, default_servers: int = DEFAULT_SERVERS,
                  default_gpus: int = DEFAULT_GPUS, echo: bool = True) -> Iterator[Target]:
    """The running fabric named ``--name`` if there is one (its topology must match any given flags), else a
    temporary fabric from the flags, torn down on exit (also on errors and Ctrl-C)."""
    _check_values(args)
    clock = apply_dilation(args)
    state = read_state(args.name)
    if state is not None:
        t = state["topology"]
        given = {"--servers": (args.servers, t["servers"]), "--gpus": (_gpus(args), t["gpus_per_server"])}
        for flag, (want, have) in given.items():
            if want is not None and want != have:
                raise LaunchError(f"{flag} {want}: the running fabric {args.name!r} has {have} "
                                  f"(`starpulse fabric down` first, or drop the flag)")
        spec = TopologySpec(**t)
        topo = Topology(spec)
        if echo:
            print(f"using running fabric {args.name!r} (pid {state['pid']}): {spec.servers} servers x "
                  f"{spec.gpus_per_server} GPUs", file=sys.stderr, flush=True)
        if clock is None and state.get("time_dilation"):     # the running fabric's (auto may have chosen it)
            os.environ[ENV_DILATION] = repr(float(state["time_dilation"]))
            clock = Clock(float(state["time_dilation"]))
        yield Target(topo, namespace_pids_from_state(state, topo.servers), started_here=False,
                     clock=clock or get_clock())
        return
    from emu.cli import pfc_from_args
    from emu.fabric import Fabric

    spec = spec_for(args, default_servers, default_gpus)
    pfc = pfc_from_args(args)
    ops = getattr(args, "ops", "on") == "on"     # operations telemetry: on unless the command says otherwise
    wired = getattr(args, "impairable", None)    # links built through a link emulator (loss/delay faults)
    from emu.calibrate import calibrated_fabric, resolve_dilation

    chosen = resolve_dilation(args.time_dilation)    # auto unless a number was given (flag or environment)
    auto = chosen if isinstance(chosen, AutoDilation) else None
    if auto is not None:
        fab, _ = calibrated_fabric(lambda c: Fabric(spec, backend=args.backend, clock=c, pfc=pfc, ops=ops,
                                                    wired_links=wired), auto,
                                   echo=(lambda line: print(line, file=sys.stderr, flush=True)) if echo else None)
    else:
        fab = Fabric(spec, backend=args.backend, clock=clock, pfc=pfc, ops=ops, wired_links=wired)
    try:
        if auto is None:
            fab.up()
        if echo:
            print(f"fabric up in {fab.timings.up_s:.1f} s: {spec.servers} servers x {spec.gpus_per_server} GPUs, "
                  f"{spec.spines} spines, links {spec.link_rate_bps / 1e6:g} Mb/s", file=sys.stderr, flush=True)
        pids = fab.net.node_pids()
        yield Target(fab.topo, {s: pids[s] for s in fab.topo.servers}, started_here=True, fabric=fab,
                     clock=fab.clock)
    finally:
        fab.down()
        if echo:
            print(f"fabric down in {fab.timings.down_s:.1f} s", file=sys.stderr, flush=True)


def rerun_until_faithful(args: argparse.Namespace, run_once: Callable[[], tuple[R, list[dict[str, Any] | None]]],
                         ) -> R:
    """``run_once()`` (the measured part, on a fabric of ``fabric_target``), run again at a higher dilation while
    its own fidelity is not ok, when ``--time-dilation`` is auto and the fabric is this command's own.

    The calibration probe loads the switches and link emulators only; a job's NIC pacers and shared-memory
    throttles can fall behind at the dilation it chose.  A run that was not ok is repeated at the dilation its
    worst lag asks for (``next_dilation``), up to the ceiling; at the ceiling its not-ok result is returned as is.
    ``run_once`` returns its result and the fidelity of each of its runs."""
    from emu.calibrate import resolve_dilation
    from sw.clock.lag import late_summary, next_dilation

    auto = resolve_dilation(args.time_dilation) if read_state(args.name) is None else None
    while True:
        result, fids = run_once()
        bad = [f for f in fids if f is not None and not f.get("ok") and f.get("time_dilation")]
        if not isinstance(auto, AutoDilation) or not bad:
            return result
        k = max(float(f["time_dilation"]) for f in bad)
        if k >= auto.ceiling:
            return result
        nxt = max(next_dilation(k, f, auto.ceiling) for f in bad)
        worst = max(bad, key=lambda f: f["late_share"])
        print(f"time dilation auto: the run at {k:g} was not ok ({late_summary(worst)}): running it again at "
              f"{nxt:g}", file=sys.stderr, flush=True)
        args.time_dilation = nxt


@contextlib.contextmanager
def log_directory(logdir: str | None) -> Iterator[tuple[Path, bool]]:
    """``--logdir`` (kept) or a temporary directory (kept only if a rank failed: the caller decides)."""
    if logdir:
        yield Path(logdir), True
        return
    yield owned_tempdir("starpulse-run-"), False   # named with its owner: reaped if this run is killed


def report(result: JobResult, logdir: Path, keep: bool) -> None:
    """One line per failed rank, where the logs are; removes a temporary log dir of a clean run."""
    if result.exit_code == 0:
        if not keep:
            shutil.rmtree(logdir, ignore_errors=True)
        return
    if not keep:
        record(logdir, keep=True)   # a temporary log dir the user is pointed to: never reaped
    for r in result.ranks:
        if r.returncode and not r.stopped_by_launcher:
            print(f"starpulse run: rank {r.rank} ({r.server}) exited with {r.returncode}; log {r.log_path}",
                  file=sys.stderr)
    if result.timed_out:
        print("starpulse run: the job timed out", file=sys.stderr)
    print(f"starpulse run: logs in {logdir}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise LaunchError("no command: usage: starpulse run [options] -- python script.py [args]")
    resolve_command(cmd)   # a missing program fails here, before any fabric comes up
    echo = None if args.quiet else (lambda line: print(line, flush=True))
    if args.local:
        return _run_local(args, cmd, echo)
    with terminate_as_interrupt(), fabric_target(args) as target, log_directory(args.logdir) as (logdir, keep):
        result = launch(target.topo, target.ns_pids, cmd, logdir=logdir, timeout_s=args.timeout, echo=echo,
                        tcp_ecn=args.tcp_ecn, clock=target.clock, net=args.net, intra_rate=args.intra_rate,
                        roce_cc=args.roce_cc)
        report(result, logdir, keep)
    return result.exit_code


def _run_local(args: argparse.Namespace, cmd: list[str], echo: Callable[[str], None] | None) -> int:
    """``--local``: the ranks of the requested servers x GPUs on this box, in our namespace (no fabric)."""
    _check_values(args)
    topo = Topology(spec_for(args))
    check_local_ranks(len(topo.nics), f"--servers {topo.spec.servers} x --gpus {topo.spec.gpus_per_server}")
    clock = apply_dilation(args)
    with terminate_as_interrupt(), log_directory(args.logdir) as (logdir, keep):
        result = launch(topo, None, cmd, logdir=logdir, timeout_s=args.timeout, echo=echo, clock=clock,
                        net=args.net, intra_rate=args.intra_rate)
        report(result, logdir, keep)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    """``python -m emu.run_cli ...``: the same command without the ``starpulse`` dispatcher (user errors exit 2)."""
    parser = ArgumentParser(prog="starpulse run")
    add_arguments(parser)
    return call_guarded("starpulse run", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
