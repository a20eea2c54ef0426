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


class NotText(ValueError):
    """Bytes that are not UTF-8 text: ``offset`` of the first bad byte and ``what`` it is."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(what)
        self.offset, self.what = offset, what


def utf8_text(data: bytes) -> str:
    """Decode source or command bytes: UTF-8 without NUL bytes, else ``NotText`` at the first bad byte."""
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not 0 <= nul < exc.start:
            raise NotText(exc.start, f"byte 0x{data[exc.start]:02x} is not UTF-8") from None
    if nul >= 0:
        raise NotText(nul, "binary data (a NUL byte)")
    return text


class CompileError(P4Error):
    """The program is malformed, ill-typed or uses something this target does not support."""


class CommandError(P4Error):
    """A runtime (simple_switch_CLI-style) command is malformed or refers to unknown objects."""
