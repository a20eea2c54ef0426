"""``starpulse hw``: emit the NIC RTL as Verilog, and report its FPGA resources per block."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from hw.errors import HwParamError
from hw.tools.blocks import BLOCKS, DEFAULT_DATA_WIDTH, DEFAULT_N_QPS, check_sizes, write_verilog


def _size_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-width", type=int, default=DEFAULT_DATA_WIDTH,
                        help=f"AXI-Stream data width in bits (default {DEFAULT_DATA_WIDTH})")
    parser.add_argument("--qps", type=int, default=DEFAULT_N_QPS,
                        help=f"number of queue pairs, a power of two (default {DEFAULT_N_QPS})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = sub.add_parser("verilog", help="write one Verilog file per RTL block into OUTDIR")
    v.add_argument("outdir", metavar="OUTDIR", help="directory for the .v files (created if missing)")
    _size_flags(v)
    r = sub.add_parser("report", help="synthesize each block with yosys and print LUT/FF/memory counts and "
                                      "logic levels (deepest register-to-register path)")
    r.add_argument("--json", action="store_true", help="print JSON instead of a table")
    r.add_argument("--block", action="append", choices=sorted(BLOCKS),
                   help="only this block (repeatable; default: all)")
    _size_flags(r)


def run(args: argparse.Namespace) -> int:
    check_sizes(args.data_width, args.qps)
    if args.action == "verilog":
        outdir = Path(args.outdir)
        if outdir.exists() and not outdir.is_dir():
            raise HwParamError(f"OUTDIR {args.outdir!r}: exists and is not a directory")
        for path in write_verilog(outdir, args.data_width, args.qps):
            print(path)
        return 0
    return _report(args)


def _report(args: argparse.Namespace) -> int:
    from hw.tools.synth import LEVELS_RULE, MAX_LEVELS_400MHZ, synthesize

    names = args.block or list(BLOCKS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="starpulse-hw-") as tmp:
        workdir = Path(tmp)
        write_verilog(workdir, args.data_width, args.qps)
        for name in names:
            rows.append(synthesize(workdir / f"{name}.v", name, workdir).as_dict())
    if args.json:
        print(json.dumps({"data_width": args.data_width, "qps": args.qps, "blocks": rows,
                          "max_levels_400mhz": MAX_LEVELS_400MHZ, "levels_rule": LEVELS_RULE}, indent=2))
        return 0
    cols = ["block", "luts", "ffs", "lutram", "bram", "dsp", "carry", "levels"]
    print(f"FPGA resources (yosys synth_xilinx, UltraScale+), data width {args.data_width}, {args.qps} QPs")
    print("  ".join(f"{c:>10}" for c in cols))
    for row in rows:
        flag = "  (> 400 MHz budget)" if row["levels"] > MAX_LEVELS_400MHZ else ""
        print("  ".join(f"{row[c]!s:>10}" for c in cols) + flag)
    print(f"levels: LUT/MUXF = 1, CARRY4 = 1/2 (CARRY8 = 1); rule of thumb {LEVELS_RULE}")
    return 0
