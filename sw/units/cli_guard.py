"""The error guard every entry point runs under: user errors as one line (exit 2), never a traceback.

A leaf: the ``starpulse`` dispatcher and every ``python -m ...`` entry point (switch, fabric daemon, benches)
use it, so they behave alike.  Exceptions whose class sets ``is_user_error = True`` are bad input; those that set
``is_runtime_failure = True`` are a run that failed for a reason outside the program (a peer that stopped
answering, a dead rank): one line too, exit 1, as neither is a bug.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

EXIT_RUNTIME_FAILURE = 1
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``prog: error: argument --x: ...``, exit 2), as every other bad input
    is: the usage block stays in ``--help``.  Subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def call_guarded(prog: str, run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run one command the way every entry point must: user errors as one line (exit 2), runtime failures as one
    line (exit 1), never a traceback but for a bug (exit 70)."""
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if getattr(exc, "is_user_error", False):
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return EXIT_USER_ERROR
        if getattr(exc, "is_runtime_failure", False):
            print(f"{prog}: failed: {exc}", file=sys.stderr)
            return EXIT_RUNTIME_FAILURE
        traceback.print_exc()
        print(f"{prog}: internal error (a bug, please report it): {exc}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
