"""``starpulse p4 cli``: an interactive shell (history, completion) or a command-file runner for a switch.

Like ``simple_switch_CLI``: a terminal gets a prompt with readline editing, history and tab completion of
command, table, action and other object names; a pipe or file on stdin is run line by line (``#`` comments
and blank lines skipped), output printed, errors reported with their line number.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from p4.errors import CommandError
from p4.switch.control import ControlClient

PROMPT = "p4> "
HISTORY_ENV = "STARPULSE_P4CLI_HISTORY"
_EXIT_WORDS = {"exit", "quit", "EOF"}


def history_path() -> Path:
    env = os.environ.get(HISTORY_ENV)
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "starpulse" / "p4cli_history"


def run_script(client: ControlClient, lines: Iterable[str], out: TextIO, err: TextIO) -> int:
    """Run each command line; returns the number of failed commands (every line is still attempted)."""
    failures = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line in _EXIT_WORDS:
            break
        try:
            text = client.run(line)
        except CommandError as exc:
            failures += 1
            print(f"line {lineno}: {line.split()[0]}: error: {exc}", file=err)
            continue
        if text:
            print(text.rstrip("\n"), file=out)
    return failures


class _Completer:
    """readline completer asking the switch what fits at the cursor (commands, then tables, actions, ...)."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client
        self.matches: list[str] = []

    def __call__(self, text: str, state: int) -> str | None:
        import readline

        if state == 0:
            line = readline.get_line_buffer()[: readline.get_endidx()]
            try:
                self.matches = [c + " " for c in self.client.complete(line) if c.startswith(text)]
            except Exception:  # completion must never break the prompt
                self.matches = []
        return self.matches[state] if state < len(self.matches) else None


def interactive(client: ControlClient) -> int:
    """A prompt with history and completion until EOF/exit; errors are printed and the shell goes on."""
    import readline

    info = client.describe()
    readline.set_completer(_Completer(client))
    readline.set_completer_delims(" \t\n")
    readline.parse_and_bind("tab: complete")
    hist = history_path()
    try:
        readline.read_history_file(hist)
    except OSError:
        pass
    try:
        while True:
            try:
                line = input(PROMPT)
            except EOFError:
                print()
                break
            except KeyboardInterrupt:
                print()
                continue
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line in _EXIT_WORDS:
                break
            if line == "help":
                print("commands: " + " ".join(sorted(info.get("commands", []))))
                continue
            try:
                text = client.run(line)
            except CommandError as exc:
                print(f"error: {exc}", file=sys.stderr)
                continue
            if text:
                print(text.rstrip("\n"))
    finally:
        try:
            hist.parent.mkdir(parents=True, exist_ok=True)
            readline.set_history_length(2000)
            readline.write_history_file(hist)
        except OSError:
            pass
    return 0
