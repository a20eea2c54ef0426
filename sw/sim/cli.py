"""``starpulse sim collective OP``: predicted time and link loads of one collective on a simulated fabric."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sw.collectives.fabric_topology import MAX_SERVERS_PER_POD, TopologyError, TopologySpec
from sw.units import (
    flag_type,
    float_flag,
    format_rate_bps,
    int_flag,
    parse_duration_ns,
    parse_rate_bps,
    parse_size_bytes,
)
from sw.units.plot import plot_figure

from .flow_fabric import ROUTINGS
from .run import SimParams, simulate

OPS = ("allreduce", "allgather", "reducescatter", "alltoall")
JSON_KEYS = ("predicted_s", "algbw_bps", "busbw_bps", "bytes_by_link_class", "max_link_util", "p99_link_util",
             "hot_links", "wall_s", "gpus")


class SimUserError(ValueError):
    """A topology or size the simulator cannot build; one line."""

    is_user_error = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="collective")
    p = sub.add_parser("collective", help="one collective on a flow-level model of the fabric")
    p.add_argument("op", choices=OPS, metavar="OP", help=f"one of {', '.join(OPS)}")
    p.add_argument("--gpus", type=int_flag(1, 10_000_000), required=True, help="GPUs (ranks) in the job")
    p.add_argument("--gpus-per-server", type=int_flag(1, 16), default=8, help="GPUs = rails per server (8)")
    p.add_argument("--pods", type=int_flag(1, 100_000), default=None,
                   help=f"pods (default: fewest with at most {MAX_SERVERS_PER_POD} servers each)")
    p.add_argument("--spines", type=int_flag(0, 64), default=8, help="spines (per pod with --tiers 3; 8)")
    p.add_argument("--super-spines", type=int_flag(1, 64), default=None, help="super spines (--tiers 3; = --spines)")
    p.add_argument("--tiers", type=int, choices=(2, 3), default=2, help="2: leaf/spine, 3: + super spines")
    p.add_argument("--oversubscription", type=float_flag(1, 64), default=1.0, help="leaf downlink/uplink (1)")
    p.add_argument("--size", type=flag_type(parse_size_bytes), required=True, help="bytes per rank (1G, 64M)")
    p.add_argument("--algo", required=True, help="ring|tree|rhd|hier|hetero (allreduce), pairwise|rail (alltoall)")
    p.add_argument("--routing", choices=ROUTINGS, default="ecmp", help="fabric.p4's ECMP hash or rail-aware")
    p.add_argument("--link-rate", type=flag_type(parse_rate_bps), default=400_000_000_000, help="NIC rate (400G)")
    p.add_argument("--intra-rate", type=flag_type(parse_rate_bps), default=0,
                   help="NVLink stand-in per GPU (default 9x --link-rate)")
    p.add_argument("--delay", type=flag_type(parse_duration_ns), default=1000, help="per-link latency (1us)")
    p.add_argument("--alpha", type=flag_type(parse_duration_ns), default=5000, help="per-message overhead (5us)")
    p.add_argument("--efficiency", type=float_flag(0, 1, lo_exclusive=True), default=1.0,
                   help="congestion-control efficiency on max-min rates (1 = ideal)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--plot", metavar="FILE", help="PNG of the link utilisation distribution")


def spec_from_args(args: argparse.Namespace) -> TopologySpec:
    """The topology of ``--gpus/--gpus-per-server/--pods/...``; impossible ones raise a one-line error."""
    if args.gpus % args.gpus_per_server:
        raise SimUserError(f"--gpus {args.gpus}: must be a multiple of --gpus-per-server {args.gpus_per_server}")
    servers = args.gpus // args.gpus_per_server
    pods = args.pods
    if pods is None:
        pods = next(p for p in range(-(-servers // MAX_SERVERS_PER_POD), servers + 1) if servers % p == 0)
    try:
        return TopologySpec(servers=servers, gpus_per_server=args.gpus_per_server, pods=pods, spines=args.spines,
                            link_rate_bps=args.link_rate, delay_ns=args.delay, oversubscription=args.oversubscription,
                            tiers=args.tiers, super_spines=(args.super_spines or args.spines) if args.tiers == 3 else 0)
    except TopologyError as exc:
        raise SimUserError(f"--gpus {args.gpus} ({servers} servers of {args.gpus_per_server}): {exc}") from None


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    params = SimParams(alpha_s=args.alpha * 1e-9, intra_rate_bps=args.intra_rate, efficiency=args.efficiency)
    try:
        result = simulate(spec, args.op, args.algo, args.size, args.routing, params)
    except ValueError as exc:
        if getattr(exc, "is_user_error", False):
            raise
        raise SimUserError(str(exc)) from None
    util = result.pop("link_util")
    if args.plot:
        _plot(util, args.plot, f"{args.op} {args.algo} {args.routing}, {result['gpus']} GPUs")
    out: dict[str, Any] = {k: result[k] for k in JSON_KEYS}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.op} {args.algo} on {out['gpus']} GPUs ({spec.servers} servers, {spec.pods} pods, "
          f"{spec.tiers} tiers, {args.routing}): {out['predicted_s'] * 1e3:.3f} ms, algbw "
          f"{format_rate_bps(out['algbw_bps'])}, busbw {format_rate_bps(out['busbw_bps'])}")
    solves = f", {result['rate_solves']} rate solves" if result["rate_solves"] else ""
    print(f"link utilisation: max {out['max_link_util']:.3f}, p99 {out['p99_link_util']:.3f}; simulated in "
          f"{out['wall_s']:.2f} s ({result['model']}{solves})")
    for h in out["hot_links"]:
        print(f"  {h['link']:<28} {h['class']:<12} util {h['util']:.3f}")
    return 0


def _plot(util: Any, path: str, title: str) -> None:
    try:
        with plot_figure(path, figsize=(6, 3.5)) as (_, ax):
            ax.hist(util, bins=50)
            ax.set_xlabel("link utilisation over the collective")
            ax.set_ylabel("links")
            ax.set_title(title)
    except OSError as exc:
        raise SimUserError(f"--plot {path}: {exc.strerror or exc}") from None
