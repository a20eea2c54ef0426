"""What the commands that run ranks in three places share (``starpulse bench``, ``starpulse train``): the topology
and where-to-run flags, the ``--local`` job (forked ranks, the NVLink stand-in's rate, the lag directory that makes
the ``fidelity`` verdict) and the fabric's drop/ECN counters read before and after a launched job.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from sw.clock import get_clock
from sw.clock.lag import ENV_LAG_DIR, fidelity, read_lag_dir
from sw.collectives.autotune import ENV_AUTOTUNE, ENV_AUTOTUNE_DIR, MODES, parse_autotune_env
from sw.collectives.config import (
    DEFAULT_INTRA_RATIO,
    ENV_INTRA_RATE,
    ROCE_CC_HELP,
    ROCE_CCS,
    CommConfig,
    intra_rate_for,
)
from sw.collectives.fabric_topology import DEFAULT_FABRIC_MTU
from sw.collectives.tuner import ENV_HETERO_SPLIT, parse_hetero_split_env
from sw.units import AutoDilation, UnitError, add_time_dilation_flag, float_flag, parse_rate_bps

DEFAULT_LOCAL_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 86400.0
DEFAULT_SERVERS = 4
DEFAULT_GPUS = 2


class RankJobError(ValueError):
    """A bad flag of a rank job: the message names the flag, the value and what is allowed."""

    is_user_error = True


FABRIC_BACKENDS = ("embedded", "bmv2")
SIM_BACKEND = "sim"
"""``--backend sim``: no fabric, the flow-level simulator times the job (only ``starpulse train`` offers it)."""


def backend_flag(sim: bool) -> Callable[[str], str]:
    """``type=`` of ``--backend``: the P4 targets, and ``sim`` where the command offers it (argparse's one-line
    error, exit 2, names the flag otherwise)."""
    allowed = FABRIC_BACKENDS + ((SIM_BACKEND,) if sim else ())

    def check(text: str) -> str:
        if text in allowed:
            return text
        if text == SIM_BACKEND:
            raise argparse.ArgumentTypeError(f"{text}: only `starpulse train` runs on the flow-level simulator "
                                             f"(allowed here: {', '.join(allowed)})")
        raise argparse.ArgumentTypeError(f"{text}: allowed {', '.join(allowed)}")

    check.__name__ = "backend"
    return check


def add_job_topology_arguments(parser: argparse.ArgumentParser, sim_backend: bool = False) -> None:
    """The topology flags (as ``starpulse fabric``; ignored inside a launched job); ``sim_backend``: ``--backend``
    also takes ``sim``."""
    t = parser.add_argument_group("topology (as `starpulse fabric`; ignored inside a launched job)")
    t.add_argument("--servers", type=int, default=None, metavar="N", help="servers (default 4)")
    t.add_argument("--gpus-per-server", "--gpus", dest="gpus_per_server", type=int, default=None, metavar="R",
                   help="GPUs = NICs = rails per server (default 2)")
    t.add_argument("--pods", type=int, default=1, metavar="P", help="pods (default 1)")
    t.add_argument("--spines", type=int, default=2, metavar="S", help="spines, 0 = rail-only (default 2)")
    t.add_argument("--link-rate", default="100M", metavar="RATE", help="host link rate (default 100M)")
    t.add_argument("--delay", default="0", metavar="D", help="per-link delay (only 0 here)")
    t.add_argument("--mtu", type=int, default=DEFAULT_FABRIC_MTU, metavar="M",
                   help=f"MTU in bytes (default {DEFAULT_FABRIC_MTU}: jumbo, RoCE path MTU 4096)")
    t.add_argument("--backend", default="embedded", type=backend_flag(sim_backend),
                   metavar="embedded|bmv2" + ("|sim" if sim_backend else ""),
                   help="P4 target (default embedded)" + ("; sim: no fabric, the flow-level simulator predicts the "
                                                          "job (sw.sim)" if sim_backend else ""))
    t.add_argument("--oversubscription", type=float, default=1.0, metavar="X", help="leaf down/up ratio (default 1)")
    t.add_argument("--seed", type=int, default=1, metavar="N", help="seed (default 1)")


def add_where_arguments(parser: argparse.ArgumentParser, timeout_s: float = 3600.0) -> None:
    """Where the ranks run: ``--local``, a running fabric by name, the clock, transports, logs."""
    r = parser.add_argument_group("where to run")
    r.add_argument("--local", action="store_true",
                   help="fork every rank on this box (no fabric, no root); inter-server TCP throttled to --link-rate")
    r.add_argument("--name", default="default", help="use this running fabric if it is up (default 'default')")
    add_time_dilation_flag(r)
    r.add_argument("--timeout", type=float_flag(0, MAX_TIMEOUT_S, lo_exclusive=True, unit="seconds"),
                   default=timeout_s, metavar="S", help="stop the job after S wall seconds")
    r.add_argument("--net", choices=("roce", "tcp"), default=None,
                   help="ranks' inter-server transport on a fabric: roce (RC QPs, --roce-cc) or tcp "
                        "(default: $STARPULSE_NET, else roce)")
    r.add_argument("--roce-cc", choices=ROCE_CCS, default=None, help=ROCE_CC_HELP)
    r.add_argument("--intra-rate", default=None, metavar="RATE|Nx|off",
                   help="shared-memory (NVLink stand-in) egress per rank: a rate (900M), a multiple of the link rate "
                        f"(9x) or off (default: ${ENV_INTRA_RATE}, else {DEFAULT_INTRA_RATIO:g}x the link rate)")
    r.add_argument("--no-tcp-ecn", dest="tcp_ecn", action="store_false",
                   help="ranks' TCP without ECN (default: ECN on, so RED marks slow senders before drops)")
    r.add_argument("--logdir", default=None, metavar="DIR", help="keep per-rank logs here")
    r.add_argument("--ops", choices=("on", "off"), default="on",
                   help="operations telemetry on a fabric this command brings up: switch polls and every step and "
                        "collective of the ranks into the run's store (default on)")
    r.add_argument("--autotune", choices=MODES, default=None,
                   help="online auto-tune of the collectives' algorithm and chunk: on, off, or reset (forget the "
                        f"stored table of this topology first); default: ${ENV_AUTOTUNE}, else off")


def autotune_env(args: argparse.Namespace) -> dict[str, str]:
    """The ranks' tuning variables, checked here (a bad one is a one-line error before any rank starts):
    ``--autotune`` (else $STARPULSE_AUTOTUNE), $STARPULSE_AUTOTUNE_DIR and $STARPULSE_HETERO_SPLIT."""
    out = {var: os.environ[var] for var in (ENV_AUTOTUNE, ENV_AUTOTUNE_DIR, ENV_HETERO_SPLIT) if os.environ.get(var)}
    if getattr(args, "autotune", None):
        out[ENV_AUTOTUNE] = args.autotune
    if out.get(ENV_AUTOTUNE):
        parse_autotune_env(out[ENV_AUTOTUNE])
    if out.get(ENV_HETERO_SPLIT):
        parse_hetero_split_env(out[ENV_HETERO_SPLIT])
    return out


def flag_rate_bps(text: str, flag: str, error: type[Exception] = RankJobError) -> int:
    """A rate flag in bit/s; ``error`` (a user error naming the flag) when it does not parse."""
    try:
        return parse_rate_bps(text, what=flag)
    except UnitError as exc:
        raise error(str(exc)) from None


def local_topology(args: argparse.Namespace) -> tuple[int, int]:
    """(servers, GPUs per server) of a ``--local`` job from the topology flags, checked like a fabric's and
    against what this machine can fork."""
    from emu.run_cli import spec_for  # the topology flags' checks (no fabric: nothing of emu starts)
    from sw.collectives.local import check_local_ranks

    args.gpus = None
    spec = spec_for(args, DEFAULT_SERVERS, DEFAULT_GPUS)
    check_local_ranks(spec.servers * spec.gpus_per_server,
                      f"--servers {spec.servers} x --gpus {spec.gpus_per_server}")
    return spec.servers, spec.gpus_per_server


def run_local_job(args: argparse.Namespace, servers: int, gpus: int, fn: Callable[..., Any], *fn_args: Any,
                  env: dict[str, str] | None = None) -> tuple[list[Any], dict[str, Any]]:
    """``fn(comm, *fn_args)`` on every forked rank with the flags' link and intra-server rates and dilation;
    (the ranks' results, the ``fidelity`` verdict of the throttles that carried them)."""
    from sw.collectives.local import run_local

    if args.time_dilation is not None and not isinstance(args.time_dilation, AutoDilation):
        os.environ["STARPULSE_TIME_DILATION"] = repr(float(args.time_dilation))   # auto: no fabric to calibrate
    link_bps = float(flag_rate_bps(args.link_rate, "--link-rate"))
    given, what = (args.intra_rate, "--intra-rate") if args.intra_rate else (os.environ.get(ENV_INTRA_RATE),
                                                                             f"${ENV_INTRA_RATE}")
    config = CommConfig(inter_rate_bps=link_bps, intra_rate_bps=intra_rate_for(given, link_bps, what))
    with tempfile.TemporaryDirectory(prefix="starpulse-lag-") as lag_dir:
        os.environ[ENV_LAG_DIR] = lag_dir        # the forked ranks' throttles report here
        try:
            results = run_local(servers, gpus, fn, *fn_args, config=config, env={**(env or {}), **autotune_env(args)},
                                timeout_s=min(args.timeout, DEFAULT_LOCAL_TIMEOUT_S))
        finally:
            del os.environ[ENV_LAG_DIR]
        return results, fidelity(read_lag_dir(lag_dir), get_clock().dilation)


def fabric_status(target: Any, name: str) -> dict[str, Any]:
    """``fabric status`` of the fabric a job runs on (this process's, or the running one named ``name``)."""
    from emu.fabric_daemon import request

    if target.fabric is not None:
        return target.fabric.status()
    return request(name, {"op": "status"})["status"]


def hpcc_int_warning(status: dict[str, Any], roce_cc: str | None) -> str | None:
    """The warning for a job whose QPs run HPCC on a fabric that does not leave INT to the receivers (``fabric
    up --int-sink report`` strips it): no ACK echoes it, so HPCC keeps its initial window; None if all is well."""
    sink = status.get("int_sink", "host")
    if roce_cc != "hpcc" or sink == "host":
        return None
    return (f"warning: --roce-cc hpcc on a fabric whose INT sink is {sink!r}: the receivers get no INT to echo, so "
            "HPCC keeps its initial window (bring the fabric up with --int-sink host)")


def warn_hpcc(status: dict[str, Any], roce_cc: str | None) -> None:
    """Print ``hpcc_int_warning``'s line to stderr when there is one."""
    warning = hpcc_int_warning(status, roce_cc)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def fabric_counters(status: dict[str, Any]) -> dict[str, int]:
    """Fabric-wide drop and ECN-mark counters (all switches), drops split into queue and pipeline causes, and
    the bytes the spines sent (the cross-spine traffic; spine switch names start with 'sp')."""
    totals = status["totals"]
    out = {"drops": int(totals["drops"]), "ecn_marks": int(totals["ecn_marks"]),
           "queue_drops": int(totals["queue_drop_pkts"])}
    out["spine_tx_bytes"] = sum(int(p["tx_bytes"]) for name, sw in status["switches"].items()
                                if name.startswith("sp") for p in sw["ports"].values())
    for sw in status["switches"].values():
        for reason, n in sw.get("drop_reasons", {}).items():
            out[f"drops_{reason}"] = out.get(f"drops_{reason}", 0) + int(n)
    return out


def fabric_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """What the switches counted during a job (``fabric_counters`` before and after it): ``drops``,
    ``ecn_marks``, ``spine_tx_bytes`` and the drops by cause (``drop_detail``)."""
    delta = {k: v - before.get(k, 0) for k, v in after.items()}
    return {"drops": delta.pop("drops"), "ecn_marks": delta.pop("ecn_marks"),
            "spine_tx_bytes": delta.pop("spine_tx_bytes"), "drop_detail": delta}


def topology_json(spec: Any) -> dict[str, Any]:
    """The fabric's shape as the JSON reports record it."""
    return {"servers": spec.servers, "gpus_per_server": spec.gpus_per_server, "spines": spec.spines,
            "pods": spec.pods, "link_rate_bps": spec.link_rate_bps, "mtu": spec.mtu}
