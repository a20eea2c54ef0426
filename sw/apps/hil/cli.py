"""``starpulse hil``: hardware in the loop, the RTL NIC bridged onto a live interface (``bench``) or onto a host of
a P4 fabric as a live sender (``run``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sw.clock.lag import add_strict_fidelity_flag, fidelity_exit

MAX_FRAMES = 100_000
MAX_DURATION_NS = 1_000_000_000     # 1 s of network time is 400e6 RTL clocks: hours of simulation
CC_CHOICES = ("none", "dcqcn", "hpcc")
# hil run's fabric: 2 leaves of 2 one-GPU servers and a spine: the RTL on s0, the receiver on the other leaf, s1 and s3
# sending beside the RTL with the software NIC (a 3-to-1 incast; s0 and s1 share their leaf's uplink)
RUN_TOPOLOGY = {"servers": 4, "gpus_per_server": 1, "pods": 2, "spines": 1, "link_rate": "4G"}


def _frames(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_FRAMES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of frames in 1..{MAX_FRAMES}")
    return n


def _dilation(text: str) -> float:
    try:
        k = float(text)
    except ValueError:
        k = 0.0
    if not 1 <= k <= 1e9:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number in 1..1e9 (default: measured, x2)")
    return k


def _duration_ns(text: str) -> int:
    from sw.units import UnitError, parse_duration_ns

    try:
        ns = parse_duration_ns(text, what="", default_unit="ns", max_ns=MAX_DURATION_NS)
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None
    if ns <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0 (e.g. 4ms; at most {MAX_DURATION_NS / 1e9:g} s)")
    return ns


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    """``hil run``'s flags: the fabric's topology flags (``emu.cli``) with a smaller default, and the run's."""
    from emu.cli import add_topology_arguments

    add_topology_arguments(r)
    r.set_defaults(int_sink="host", **RUN_TOPOLOGY)
    r.add_argument("--hil-host", default="s0", metavar="HOST", help="the host whose NIC is the RTL (default s0)")
    r.add_argument("--cc", default="none", choices=CC_CHOICES, help="the congestion control of the RTL and the "
                   "software senders (default none; dcqcn: the receiver's CNPs cut the RTL's QP_RATE; hpcc: the "
                   "receiver's INT-echo ACKs drive the RTL's HPCC engine; both replayed through sw.cc)")
    r.add_argument("--duration", type=_duration_ns, default=1_200_000, metavar="T",
                   help="network time the RTL sends for, e.g. 4ms (default 1.2ms: ~1,000 frames at 4G; > 0, at "
                        "most 1 s)")
    r.add_argument("--time-dilation", type=_dilation, default=None,
                   help="dilation of the run (default: 2 x 400e6 / free-running cycles/s, measured first)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--plot", metavar="FILE", help="PNG: every sender's throughput and the RTL's QP_RATE over "
                   "network time")
    add_strict_fidelity_flag(r)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="bench|run")
    b = sub.add_parser("bench", help="RTL cycles/s free-running vs bridged onto a veth, dilation, frames/s, cost")
    b.add_argument("--frames", type=_frames, default=2000, help="frames of one QP in each run (default 2000)")
    b.add_argument("--time-dilation", type=_dilation, default=None,
                   help="dilation of the bridged run (default: 2 x 400e6 / free-running cycles/s)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict_fidelity_flag(b)
    r = sub.add_parser("run", help="(root) a P4 fabric with the RTL NIC on --hil-host and every other host but "
                       "the receiver (on another leaf) sending to it: goodput, Jain, drops, RTL counters, QP_RATE "
                       "trace against the golden model, dilation, fidelity",
                       description="Topology defaults here: " + " ".join(
                           f"--{k.replace('_', '-')} {v}" for k, v in RUN_TOPOLOGY.items())
                       + " (2 leaves of 2 servers, 1 spine).")
    add_run_arguments(r)


def _run(args: argparse.Namespace) -> int:
    from emu.cli import fabric_options
    from sw.apps.hil.fabric_run import HilRunError, plot, run_hil

    if args.plot and not Path(args.plot).expanduser().resolve().parent.is_dir():
        raise HilRunError(f"--plot {args.plot}: its folder {Path(args.plot).expanduser().resolve().parent} does "
                             "not exist")
    echo = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    out = run_hil(fabric_options(args), hil_host=args.hil_host, cc=args.cc, duration_ns=args.duration,
                  dilation=args.time_dilation, echo=echo)
    if args.plot:
        plot(out, args.plot)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_run_text(out)
    return fidelity_exit(out["fidelity"], args.strict_fidelity)


def print_run_text(out: dict) -> None:
    """``hil run``'s text report."""
    rx, rtl = out["receiver"], out["rtl"]
    for s in out["senders"]:
        print(f"sender {s['name']} ({s['kind']}): goodput {s['goodput_bps'] / 1e6:.1f} Mb/s")
    print(f"receiver {rx['name']}: {rx['frames']}/{rtl['frames_tx']} frames, ICRC ok {rx['icrc_ok']}, payload ok "
          f"{rx['payload_ok']}, PSNs in order {rx['psn_in_order']}, gaps {rx['gaps']}; drops {out['drops']} "
          f"(fabric counters {out['fabric_drops']})")
    print(f"Jain among senders (last half): {out['jain']}")
    print(f"RTL: TX_FRAMES {rtl['frames_tx']}, CNP_RECEIVED {rtl['cnp_received']}, INT_ACKS {rtl['int_acks']}, "
          f"RX_ICRC_ERRORS {rtl['rx_icrc_errors']}, QP_RATE trace as the model: {rtl['rate_trace_matches_model']}"
          + (f" ({rtl['replay']['compared']} reads compared)" if "replay" in rtl else ""))
    if "hpcc_updates" in rtl:
        rep = rtl["replay"]
        print(f"HPCC: {rep['acks']} INT-echo ACKs taken ({rtl['int_acks_dropped']} dropped), {rtl['hpcc_updates']} "
              f"window updates; rate after every ACK as sw.cc.Hpcc: {rep['per_ack_matches']}"
              + (f" (first divergence: ACK {rep['first_divergence']['ack']})" if rep["first_divergence"] else ""))
    print(f"{out['cycles_per_s']} cycles/s in the loop at time dilation {out['time_dilation']:g} "
          f"({out['dilation_formula']} = {out['time_dilation_min']})")
    print(f"fidelity ok={out['fidelity']['ok']} worst {out['fidelity']['worst_component']} "
          f"lag p99 {out['fidelity']['lag_p99_ns']} ns")


def run(args: argparse.Namespace) -> int:
    if args.cmd == "run":
        return _run(args)
    from sw.apps.hil.bench import print_text, run_bench

    out = run_bench(args.frames, args.time_dilation, echo=None if args.json else print)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_text(out)
    return fidelity_exit(out["fidelity"], args.strict_fidelity)
