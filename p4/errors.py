"""User-facing errors of the P4 front end and runtime: ``file:line:col: message`` plus a caret line."""

from __future__ import annotations

from dataclasses import dataclass

_SHOWN_CHARS = 160        # at most this much of a source line under an error


@dataclass(frozen=True)
class SourcePos:
    """A position in an original source file (after undoing preprocessing)."""

    file: str
    line: int
    col: int
    text: str = ""  # the source line, for the caret display

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class P4Error(Exception):
    """Base of every error caused by bad input (program, commands, packets files): printed, exit 2."""

    is_user_error = True

    def __init__(self, message: str, pos: SourcePos | None = None) -> None:
        self.message = message
        self.pos = pos
        super().__init__(self.render())

    def render(self) -> str:
        if self.pos is None:
            return self.message
        out = f"{self.pos}: error: {self.message}"
        if self.pos.text:
            line = self.pos.text.rstrip("\n").expandtabs(1)
            col = max(self.pos.col - 1, 0)
            if len(line) > _SHOWN_CHARS:          # a huge line: show a window around the column
                start = max(0, min(col - _SHOWN_CHARS // 2, len(line) - _SHOWN_CHARS))
                line, col = line[start : start + _SHOWN_CHARS], col - start
            out += f"\n{line}\n{' ' * col}^"
        return out


class CompileError(P4Error):
    """The program is malformed, ill-typed or uses something this target does not support."""


class CommandError(P4Error):
    """A runtime (simple_switch_CLI-style) command is malformed or refers to unknown objects."""
