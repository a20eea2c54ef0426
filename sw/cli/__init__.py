"""The ``starpulse`` command: a thin dispatcher over each package's command module.

Each subcommand lives beside the code it drives (``sw.roce.cli``, ``p4.cli``, ``hw.tools.cli``, ...) and is imported
only when invoked, so ``starpulse --help`` is instant and this module statically imports no package above it
(the CLI is the top layer; it is housed in ``sw/`` only because the top-level layout is fixed).

A command module provides ``add_arguments(parser)`` and ``run(args) -> int``.  Exceptions whose class sets
``is_user_error = True`` are bad input: printed as one clear line, exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

# name -> (module, one-line help).  Later issues add their commands here.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("sw.cli.doctor", "check every external piece (root, netns, mnexec, simulators, tshark, BMv2)"),
    "roce": ("sw.roce.cli", "RoCEv2 wire format and transport: pcap, bench, perf"),
    "p4": ("p4.cli", "P4_16 v1model target: check, sim, bench, switch, cli"),
    "hw": ("hw.tools.cli", "FPGA NIC RTL: verilog, report"),
    "cc": ("sw.cc.cli", "congestion-control golden models: sim, params"),
    "fabric": ("emu.cli", "multi-rail leaf/spine fabric of P4 switches: up, status, down, test"),
    "run": ("emu.run_cli", "run a command on every GPU rank of a fabric (torchrun-style env, per-rank logs)"),
    "bench": ("sw.collectives.bench_cli", "nccl-tests-style collective benchmark on the fabric (or --local)"),
    "sim": ("sw.sim.cli", "flow-level simulator of the fabric and collectives, up to 100k GPUs"),
}

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``prog: error: argument --x: ...``, exit 2), as every other bad input
    is: the usage block stays in ``--help``.  Subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see --help)\n")


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


def call_guarded(prog: str, run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run one command the way every entry point must: user errors as one line (exit 2), never a traceback.

    Also used by the ``python -m ...`` entry points of command modules, so they behave as ``starpulse`` does.
    """
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into exit codes
        if getattr(exc, "is_user_error", False):
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return EXIT_USER_ERROR
        traceback.print_exc()
        print(f"{prog}: internal error (a bug, please report it): {exc}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
