"""``starpulse p4``: check (compile only), sim (pcaps through the pipeline), bench (packets/s in-process);
``stf`` (p4c's STF packet tests, ``p4.stf_cli``); ``switch`` and ``cli`` come from ``p4.switch`` (the switch
process) when it is installed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from p4.errors import P4Error

if TYPE_CHECKING:
    from p4.compiler import Pass
    from p4.program import Program


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="p4_command", metavar="SUBCOMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("program", metavar="PROG.p4", help="P4_16 program for the v1model architecture")
        p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                       help="extra #include directory (ours with core.p4/v1model.p4 is always searched)")
        p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                       help="preprocessor definition")

    c = sub.add_parser("check", help="compile only: exit 0, or 2 with file:line:col and a caret line")
    common(c)
    c.add_argument("--dump", action="store_true", help="print the generated Python")
    c.add_argument("--target-compat", metavar="bmv2", choices=("bmv2",),
                   help="also report (file:line:col, exit 2) what p4c's back end for this target would reject")
    c.add_argument("--p4runtime-files", metavar="OUT[,OUT2]",
                   help="write P4Info as p4c does; the suffix picks the format: .txtpb/.txt (protobuf text), "
                        ".bin (binary), .json (protobuf JSON mapping)")

    s = sub.add_parser("sim", help="feed pcaps through ingress -> queues -> egress -> deparser")
    common(s)
    s.add_argument("--commands", metavar="CMDS.txt", help="simple_switch_CLI commands to run first")
    s.add_argument("--in", dest="inputs", action="append", default=[], metavar="PORT:FILE.pcap", required=True,
                   help="input pcap for an ingress port (repeatable)")
    s.add_argument("--out", required=True, metavar="DIR", help="writes DIR/port<N>.pcap and DIR/drops.txt")
    s.add_argument("--seed", type=int, default=0, help="seed of random() / RNG externs (default 0)")

    b = sub.add_parser("bench", help="packets/s through the in-process pipeline (basic IPv4 forwarding)")
    common(b)
    b.add_argument("--commands", metavar="CMDS.txt", help="table entries (default: a route 10.0.0.0/8 when the "
                                                         "program has MyIngress.ipv4_lpm/ipv4_forward)")
    b.add_argument("--packets", type=int, default=50000, help="packets per run (default 50000)")
    b.add_argument("--size", type=int, default=64, help="frame size in bytes (default 64)")
    b.add_argument("--mode", choices=("single", "batch", "both"), default="both",
                   help="per-packet process() calls, process_batch(), or both (default)")
    b.add_argument("--json", action="store_true", help="print results as JSON")

    t = sub.add_parser("stf", help="run p4c STF packet tests: PROG.p4 TEST.stf, or every X.p4/X.stf of --corpus DIR")
    t.add_argument("program", nargs="?", metavar="PROG.p4", help="P4_16 program for the v1model architecture")
    t.add_argument("stf", nargs="?", metavar="TEST.stf", help="its STF test (entries, packets, expected packets)")
    t.add_argument("--corpus", metavar="DIR", help="run every X.p4 of DIR that has an X.stf beside it")
    t.add_argument("--json", nargs="?", const="-", metavar="OUT",
                   help="results as JSON (tests, passed, failed, pass_rate): on stdout, or written to OUT")
    t.add_argument("--timeout-s", type=float, default=120.0, metavar="S",
                   help="--corpus: a test still running after S wall seconds counts as a crash (default 120)")
    t.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                   help="extra #include directory (ours with core.p4/v1model.p4 is always searched)")
    t.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="preprocessor definition")

    try:  # the switch process (p4/switch, issue 4) adds `switch` and `cli` when present
        from p4.switch import cli as switch_cli
    except ImportError:
        return
    sw = sub.add_parser("switch", help="run the P4 switch on real interfaces (like BMv2 simple_switch)")
    switch_cli.add_switch_arguments(sw)
    cl = sub.add_parser("cli", help="control a running switch (simple_switch_CLI language; shell or script)")
    switch_cli.add_cli_arguments(cl)


def _defines(items: list[str]) -> dict[str, str]:
    out = {}
    for d in items:
        k, _, v = d.partition("=")
        out[k] = v or "1"
    return out


def _compile(args: argparse.Namespace) -> Program:
    from p4.compiler import compile_file

    path = Path(args.program)
    if not path.is_file():
        raise P4Error(f"{args.program}: no such file")
    checks: tuple[Pass, ...] = ()
    if getattr(args, "target_compat", None):
        from p4.compat_bmv2 import check_pass

        checks = (check_pass(args.target_compat),)
    prog = compile_file(path, include_dirs=[Path(d) for d in args.include], defines=_defines(args.define),
                        seed=getattr(args, "seed", 0), checks=checks)
    for warning in prog.warnings:
        print(warning, file=sys.stderr)
    return prog


def run(args: argparse.Namespace) -> int:
    try:
        if args.p4_command == "check":
            return _check(args)
        if args.p4_command == "sim":
            return _sim(args)
        if args.p4_command == "bench":
            return _bench(args)
        if args.p4_command == "stf":
            from p4 import stf_cli

            return stf_cli.run(args, _defines(args.define))
        if args.p4_command in ("switch", "cli"):
            from p4.switch import cli as switch_cli

            return switch_cli.run_switch(args) if args.p4_command == "switch" else switch_cli.run_cli(args)
    except P4Error as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    raise AssertionError(args.p4_command)


def _check(args: argparse.Namespace) -> int:
    outputs = []
    if args.p4runtime_files is not None:          # a bad flag fails before compiling
        from p4.p4info import check_outputs

        outputs = check_outputs(args.p4runtime_files)
    prog = _compile(args)
    if args.dump:
        print(prog.source)
    if outputs:
        from p4.p4info import build_p4info, write_p4info

        write_p4info(build_p4info(prog), outputs)
        for path in outputs:
            print(f"wrote {path}")
    compat = f", compatible with {args.target_compat}" if getattr(args, "target_compat", None) else ""
    print(f"{args.program}: ok ({len(prog.tables)} tables, {len(prog.actions)} actions, "
          f"{len(prog.init_state)} state slots{compat})")
    return 0


def _sim(args: argparse.Namespace) -> int:
    from p4 import sim
    from p4.pipeline import Pipeline
    from p4.runtime_cli import RuntimeCLI
    from sw.clock import ManualClock

    inputs = [sim.parse_in_spec(s) for s in args.inputs]
    for _, p in inputs:
        if not p.is_file():
            raise P4Error(f"--in: {p}: no such file")
    prog = _compile(args)
    pipe = Pipeline(prog, clock=ManualClock())
    if args.commands:
        for line in RuntimeCLI(pipe).run_file(args.commands):
            print(line)
    res = sim.run(pipe, inputs)
    written = sim.write_outputs(res, Path(args.out))
    for p in written:
        print(f"wrote {p}")
    for d in res.digests:
        print(f"digest receiver={d.receiver} {d.name} {json.dumps(d.fields)}")
    print(f"{res.packets_in} packets in, {sum(len(v) for v in res.outputs.values())} out, "
          f"{sum(res.drops.values())} dropped (see {Path(args.out) / 'drops.txt'})")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from p4.bench import check_bench_args, run_bench

    check_bench_args(args.packets, args.size)          # before compiling: a bad flag fails at once
    prog = _compile(args)
    results = run_bench(prog, packets=args.packets, size=args.size, mode=args.mode, commands=args.commands)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results["runs"]:
            print(f"{r['mode']:<7} {r['packets']} packets of {results['frame_bytes']} B in {r['elapsed_s']:.3f} s: "
                  f"{r['pps']:,.0f} packets/s ({r['pps_per_cpu']:,.0f} per CPU-second; {r['forwarded']} forwarded)")
    return 0
