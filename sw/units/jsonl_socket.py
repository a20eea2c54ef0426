"""JSON lines over a stream socket (one JSON object per ``\\n``-terminated line): the framing both control
sockets speak, the P4 switch's (non-blocking, in its event loop) and the fabric daemon's (blocking).

A leaf: it imports no project package.
"""

from __future__ import annotations

import json
import socket
from collections import deque
from typing import Any

MAX_LINE_BYTES = 1 << 20


class LineTooLongError(ValueError):
    """A peer sent more than ``max_line_bytes`` without a newline."""


def encode_line(obj: Any) -> bytes:
    """``obj`` as one compact JSON line."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class LineFramer:
    """Splits a byte stream into its lines (newline dropped); a line longer than the bound is discarded."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines ``data`` finishes; LineTooLongError (the partial line dropped) when the bound is
        passed without a newline."""
        self.buf += data
        lines = []
        while (end := self.buf.find(b"\n")) >= 0:
            lines.append(bytes(self.buf[:end]))
            del self.buf[:end + 1]
        if len(self.buf) > self.max_line_bytes:
            self.buf.clear()
            raise LineTooLongError(f"request longer than {self.max_line_bytes} bytes")
        return lines


def connect(where: str | tuple[str, int], timeout_s: float) -> socket.socket:
    """A stream socket connected to a Unix socket path or a (host, port) TCP address."""
    family = socket.AF_UNIX if isinstance(where, str) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(where)
    except OSError:
        sock.close()
        raise
    return sock


class JsonLineStream:
    """Blocking JSON lines on a connected socket: ``send(obj)``, ``recv() -> obj`` (EOFError when the peer
    closes before a whole line; socket timeouts and errors pass through)."""

    def __init__(self, sock: socket.socket, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.sock = sock
        self._framer = LineFramer(max_line_bytes)
        self._lines: deque[bytes] = deque()

    def send(self, obj: Any) -> None:
        self.sock.sendall(encode_line(obj))

    def recv(self) -> Any:
        while not self._lines:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the peer closed the connection")
            self._lines.extend(line for line in self._framer.feed(data) if line.strip())
        return json.loads(self._lines.popleft())
