"""``starpulse hil``: hardware in the loop, the RTL NIC bridged onto a live interface (``bench``)."""

from __future__ import annotations

import argparse
import json

from sw.clock.lag import add_strict_fidelity_flag, fidelity_exit

MAX_FRAMES = 100_000


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="bench")
    b = sub.add_parser("bench", help="RTL cycles/s free-running vs bridged onto a veth, dilation, frames/s, cost")
    b.add_argument("--frames", type=_frames, default=2000, help="frames of one QP in each run (default 2000)")
    b.add_argument("--time-dilation", type=_dilation, default=None,
                   help="dilation of the bridged run (default: 2 x 400e6 / free-running cycles/s)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict_fidelity_flag(b)


def run(args: argparse.Namespace) -> int:
    from sw.apps.hil.bench import print_text, run_bench

    out = run_bench(args.frames, args.time_dilation, echo=None if args.json else print)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_text(out)
    return fidelity_exit(out["fidelity"], args.strict_fidelity)
