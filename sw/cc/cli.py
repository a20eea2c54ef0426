"""``starpulse cc``: run the golden models on the single-bottleneck simulator and print the figures.

``starpulse cc sim --cc dcqcn,hpcc,none --flows 8 --link-rate 25G --duration 20ms [--flow-size 1M] [--json]``
prints drops, bottleneck utilisation, max queue, Jain fairness and per-flow completion times;
``starpulse cc params [--json]`` prints the default DCQCN and HPCC parameters (the RTL CSR reset values).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from sw.cc.dcqcn import DcqcnParams
from sw.cc.errors import CcParamError
from sw.cc.fixedpoint import kbps_from_bps
from sw.cc.hpcc import HpccParams
from sw.cc.sim import CC_NAMES, CcSimResult, SimConfig, simulate
from sw.units import MAX_LINK_RATE_BPS, int_flag, parse_duration_ns, parse_rate_bps, parse_size_bytes

SIM_FLAGS = {"n_flows": "--flows", "link_kbps": "--link-rate", "mtu_bytes": "--mtu", "duration_ns": "--duration",
             "warmup_ns": "--warmup", "to_switch_ns": "--prop-delay", "to_receiver_ns": "--prop-delay",
             "back_ns": "--prop-delay", "start_gap_ns": "--start-gap", "flow_bytes": "--flow-size"}
"""The flag behind each ``SimConfig`` field, so a range error names what the user typed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sim = sub.add_parser("sim", help="N senders -> one bottleneck: compare CC schemes")
    sim.add_argument("--cc", default="dcqcn,hpcc,none", help="comma-separated schemes (dcqcn, hpcc, none)")
    sim.add_argument("--flows", type=int, default=8, help="number of senders (incast degree)")
    sim.add_argument("--link-rate", default="25G", help="bottleneck and NIC rate, e.g. 25G or 100G")
    sim.add_argument("--mtu", default="1024", help="packet size in bytes")
    sim.add_argument("--duration", default="20ms", help="simulated time, e.g. 20ms")
    sim.add_argument("--warmup", default="", help="time excluded from throughput figures (default: half)")
    sim.add_argument("--flow-size", default="0", help="bytes per flow (0 = unlimited, long-lived flows)")
    sim.add_argument("--start-gap", default="0ns", help="flow i starts at i * GAP")
    sim.add_argument("--prop-delay", default="2us",
                     help="one-way propagation per leg: sender->switch and switch->receiver; ACKs/CNPs take 2x")
    sim.add_argument("--seed", type=int_flag(0, 2**32 - 1), default=1, help="seed of the switch's RED marking draws")
    sim.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    params = sub.add_parser("params", help="print the default DCQCN and HPCC parameters")
    params.add_argument("--json", action="store_true")


def _summary(r: CcSimResult, wall_s: float) -> dict[str, Any]:
    fcts = [f.completion_ns for f in r.flows]
    return {
        "cc": r.config.cc,
        "flows": r.config.n_flows,
        "link_rate_bps": r.config.link_kbps * 1000,
        "base_rtt_ns": r.config.base_rtt_ns,
        "drops": r.drops,
        "utilization": round(r.utilization, 4),
        "max_queue_bytes": r.max_queue_bytes,
        "jain": round(r.jain, 4),
        "ecn_marks": r.marks,
        "cnps": sum(f.cnps for f in r.flows),
        "throughput_bps": [round(x) for x in r.throughputs_bps()],
        "completion_ns": fcts,
        "completed": r.completed,
        "events": r.events,
        "wall_s": round(wall_s, 3),
    }


def _run_sim(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.cc.split(",") if n.strip()]
    for n in names:
        if n not in CC_NAMES:
            raise CcParamError(f"--cc {n!r}: expected one or more of {', '.join(CC_NAMES)} (comma-separated)")
    link_kbps = kbps_from_bps(parse_rate_bps(args.link_rate, what="--link-rate", max_bps=MAX_LINK_RATE_BPS))
    duration = parse_duration_ns(args.duration, what="--duration")
    flow_bytes = parse_size_bytes(args.flow_size, what="--flow-size")
    default_warmup = 0 if flow_bytes else duration // 2
    warmup = parse_duration_ns(args.warmup, what="--warmup") if args.warmup else default_warmup
    prop = parse_duration_ns(args.prop_delay, what="--prop-delay")
    rows = []
    for name in names:
        cfg = _sim_config(
            cc=name, n_flows=args.flows, link_kbps=link_kbps, mtu_bytes=parse_size_bytes(args.mtu, what="--mtu"),
            duration_ns=duration, warmup_ns=warmup,
            flow_bytes=flow_bytes,
            start_gap_ns=parse_duration_ns(args.start_gap, what="--start-gap"), seed=args.seed,
            to_switch_ns=prop, to_receiver_ns=prop, back_ns=2 * prop,
            dcqcn=DcqcnParams(line_rate_kbps=link_kbps), hpcc=None,
        )
        t0 = time.perf_counter()  # wall time of the simulator itself, reported only
        result = simulate(cfg)
        rows.append(_summary(result, time.perf_counter() - t0))
    if args.json:
        print(json.dumps({"runs": rows}))
        return 0
    print(f"{'cc':<6} {'drops':>7} {'util':>7} {'maxq_B':>9} {'jain':>7} {'marks':>7} {'cnps':>6} "
          f"{'max_fct_us':>11} {'events':>8} {'wall_s':>7}")
    for row in rows:
        fcts = [t for t in row["completion_ns"] if t is not None]
        if not args.flow_size or parse_size_bytes(args.flow_size) == 0:
            fct = "-"
        else:
            fct = f"{max(fcts) / 1000:.1f}" if len(fcts) == row["flows"] else f"{len(fcts)} done"
        print(f"{row['cc']:<6} {row['drops']:>7} {row['utilization']:>7.4f} {row['max_queue_bytes']:>9} "
              f"{row['jain']:>7.4f} {row['ecn_marks']:>7} {row['cnps']:>6} {fct:>11} {row['events']:>8} "
              f"{row['wall_s']:>7}")
    return 0


def _sim_config(**fields: Any) -> SimConfig:
    """``SimConfig(**fields)``; its range errors are prefixed with the flag that set the field."""
    try:
        return SimConfig(**fields)
    except CcParamError as exc:
        field = str(exc).split("=", 1)[0].removeprefix("sim.")
        if field in SIM_FLAGS:
            raise CcParamError(f"{SIM_FLAGS[field]}: {exc}") from None
        raise


def _run_params(args: argparse.Namespace) -> int:
    hp = HpccParams()
    data = {"dcqcn": dataclasses.asdict(DcqcnParams()),
            "hpcc": {**dataclasses.asdict(hp), "w_max_bytes": hp.w_max_bytes, "w_ai_bytes": hp.w_ai_bytes}}
    if args.json:
        print(json.dumps(data))
    else:
        for model, fields in data.items():
            for key, value in fields.items():
                print(f"{model}.{key} = {value}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "sim":
        if args.flows < 1:
            raise CcParamError(f"--flows {args.flows}: expected an integer >= 1")
        return _run_sim(args)
    return _run_params(args)
