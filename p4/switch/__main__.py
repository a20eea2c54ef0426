"""``python -m p4.switch PROG.p4 -i ...`` (the switch) or ``python -m p4.switch cli --ctl ...`` (the shell).

The same entry points as ``starpulse p4 switch`` / ``starpulse p4 cli``, for Mininet nodes and tests that
must not depend on the dispatcher; user errors print one line and exit 2, like the dispatcher.
"""

from __future__ import annotations

import argparse
import sys

from p4.switch.cli import add_cli_arguments, add_switch_arguments, run_cli, run_switch
from sw.units.cli_guard import call_guarded


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    is_cli = bool(argv) and argv[0] == "cli"
    parser = argparse.ArgumentParser(prog="starpulse p4 " + ("cli" if is_cli else "switch"))
    (add_cli_arguments if is_cli else add_switch_arguments)(parser)
    args = parser.parse_args(argv[1:] if is_cli else argv)
    return call_guarded(parser.prog, run_cli if is_cli else run_switch, args)


if __name__ == "__main__":
    sys.exit(main())
