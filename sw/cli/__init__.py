"""The ``starpulse`` command: a thin dispatcher over each package's command module.

Each subcommand lives beside the code it drives (``sw.apps.roce_cli``, ``p4.cli``, ``hw.tools.cli``, ...) and is
imported only when invoked, so ``starpulse --help`` is instant and this module statically imports no package above it
(the CLI is the top layer; it is housed in ``sw/`` only because the top-level layout is fixed).

A command module provides ``add_arguments(parser)`` and ``run(args) -> int``, run under ``sw.units.cli_guard``
(user errors as one clear line, exit 2, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sw.units.cli_guard import ArgumentParser, call_guarded

# name -> (module, one-line help).  Later issues add their commands here.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("sw.cli.doctor", "check every external piece (root, netns, mnexec, simulators, tshark, BMv2)"),
    "roce": ("sw.apps.roce_cli", "RoCEv2 wire format and transport: pcap, bench, perf"),
    "p4": ("p4.cli", "P4_16 v1model target: check, sim, bench, switch, cli"),
    "hw": ("hw.tools.cli", "FPGA NIC RTL: verilog, report"),
    "cc": ("sw.cc.cli", "congestion-control golden models: sim, params"),
    "fabric": ("emu.cli", "multi-rail leaf/spine fabric of P4 switches: up, status, down, test"),
    "run": ("emu.run_cli", "run a command on every GPU rank of a fabric (torchrun-style env, per-rank logs)"),
    "bench": ("sw.apps.coll_bench", "nccl-tests-style collective benchmark on the fabric (or --local)"),
    "train": ("sw.apps.train", "training steps of a model (dense or MoE): comm share, link load (or --local)"),
    "hil": ("sw.apps.hil.cli", "hardware in the loop: the RTL NIC bridged onto a veth (bench)"),
    "sim": ("sw.sim.cli", "flow-level simulator of the fabric and collectives, up to 100k GPUs"),
    "ops": ("sw.apps.ops_cli", "operations: diagnose faults from a fabric run's telemetry, watch, fault campaign"),
}


def _top_parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())
    parser = ArgumentParser(
        prog="starpulse",
        description="StarPulse Lab: an emulated rail-optimized RoCEv2 AI-cluster fabric on one Linux box.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND", help="see below")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="see COMMAND --help")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    top = _top_parser().parse_args(argv[:1])
    module_name, help_ = COMMANDS[top.command]
    module = importlib.import_module(module_name)
    parser = ArgumentParser(prog=f"starpulse {top.command}", description=help_)
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    return call_guarded(f"starpulse {top.command}", module.run, args)


if __name__ == "__main__":
    sys.exit(main())
