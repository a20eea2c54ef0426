"""The switch's control socket: JSON lines over a Unix socket or TCP on 127.0.0.1, served inside the event loop.

Requests (one JSON object per line):
  ``{"cmd": "table_add ipv4_lpm forward 10.0.0.1/32 => 1"}`` -> ``{"ok": true, "out": "..."}`` or
  ``{"ok": false, "error": "..."}`` (the command text is simple_switch_CLI syntax);
  ``{"describe": true}`` -> ``{"ok": true, "commands": [...], "names": [...]}``;
  ``{"complete": "table_add MyIng"}`` -> ``{"ok": true, "candidates": [...]}`` (the shell's tab completion);
  ``{"subscribe": ["digest", "packet_in"]}`` -> ``{"ok": true}``, then events ``{"event": "digest", ...}``;
  ``{"packet_out": {"port": N, "frame": "<hex>"}}`` -> the frame enters ingress as if received on port N;
  ``{"port_stats": true}`` -> ``{"ok": true, "ports": {"1": {"rx_pkts": ..., "high_water_pkts": ...}, ...}}``.
Commands run between packets on the switch's single thread, so they never race the data path.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from p4.errors import CommandError, P4Error
from sw.units.jsonl_socket import JsonLineStream, LineFramer, LineTooLongError, connect, encode_line

MAX_REQUEST_BYTES = 1 << 20
MAX_PENDING_OUT_BYTES = 16 << 20


class ControlAddressError(P4Error):
    """A ``--ctl`` value that is neither a TCP port nor a usable socket path."""


def parse_ctl_address(text: str) -> tuple[str, Any]:
    """'9090' -> ('tcp', ('127.0.0.1', 9090)); anything else -> ('unix', path)."""
    if text.isdigit():
        port = int(text)
        if not 1 <= port <= 65535:
            raise ControlAddressError(f"--ctl {text}: TCP port must be within 1..65535")
        return "tcp", ("127.0.0.1", port)
    if not text:
        raise ControlAddressError("--ctl '': expected a Unix socket PATH or a TCP PORT")
    return "unix", text


class _Conn:
    __slots__ = ("sock", "framer", "outbuf", "subscriptions")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.framer = LineFramer(MAX_REQUEST_BYTES)
        self.outbuf = bytearray()
        self.subscriptions: set[str] = set()


class ControlServer:
    """Accepts control connections on ``address`` and answers requests with ``execute(cmd) -> output``."""

    def __init__(self, address: str, selector: selectors.BaseSelector, execute: Callable[[str], str],
                 describe: Callable[[], dict[str, list[str]]],
                 inject: Callable[[int, bytes], None] | None = None,
                 stats: Callable[[], dict[int, dict[str, Any]]] | None = None,
                 complete: Callable[[str], list[str]] | None = None) -> None:
        self.kind, where = parse_ctl_address(address)
        self.address = address
        self.selector = selector
        self.execute = execute
        self.describe = describe
        self.inject = inject
        self.stats = stats
        self.complete = complete
        self.conns: dict[int, _Conn] = {}
        if self.kind == "tcp":
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        else:
            lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            path = Path(where)
            if path.is_socket():
                path.unlink()   # a stale socket of a previous run
        try:
            lsock.bind(where)
        except OSError as exc:
            lsock.close()
            raise ControlAddressError(f"--ctl {address}: cannot listen there: {exc.strerror or exc}") from None
        lsock.listen(16)
        lsock.setblocking(False)
        self.lsock = lsock
        selector.register(lsock, selectors.EVENT_READ, self._on_accept)

    def _on_accept(self, _sock: socket.socket) -> None:
        try:
            sock, _ = self.lsock.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self.conns[sock.fileno()] = conn
        self.selector.register(sock, selectors.EVENT_READ, lambda _s, c=conn: self._on_io(c))

    def _on_io(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            data = None
        except OSError:
            data = b""
        if data == b"":
            self._close(conn)
            return
        if data:
            try:
                lines = conn.framer.feed(data)
            except LineTooLongError as exc:
                lines = []
                self._reply(conn, {"ok": False, "error": str(exc)})
            for line in lines:
                if line.strip():
                    self._reply(conn, self._handle(conn, line))
        self._flush(conn)

    def _handle(self, conn: _Conn, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return {"ok": False, "error": f"malformed request (expected one JSON object per line): {exc}"}
        except RecursionError:         # JSON nested deeper than the parser's stack: would end the switch
            return {"ok": False, "error": "malformed request (expected one JSON object per line): nested too "
                                          "deeply"}
        if not isinstance(req, dict):
            return {"ok": False, "error": "malformed request: expected a JSON object"}
        if "cmd" in req:
            cmd = req["cmd"]
            if not isinstance(cmd, str):
                return {"ok": False, "error": "'cmd' must be a string"}
            try:
                return {"ok": True, "out": self.execute(cmd)}
            except P4Error as exc:
                return {"ok": False, "error": str(exc)}
            except Exception as exc:  # a command bug must never take the switch down
                return {"ok": False, "error": f"internal error running {cmd.split()[:1]}: "
                                              f"{type(exc).__name__}: {exc}"}
        if req.get("describe"):
            return {"ok": True, **self.describe()}
        if "subscribe" in req:
            topics = req["subscribe"]
            if not isinstance(topics, list) or not all(t in ("digest", "packet_in") for t in topics):
                return {"ok": False, "error": "'subscribe' takes a list of: digest, packet_in"}
            conn.subscriptions.update(topics)
            return {"ok": True}
        if "complete" in req and self.complete is not None:
            if not isinstance(req["complete"], str):
                return {"ok": False, "error": "'complete' takes the line typed so far"}
            return {"ok": True, "candidates": self.complete(req["complete"])}
        if req.get("port_stats") and self.stats is not None:
            return {"ok": True, "ports": {str(k): v for k, v in self.stats().items()}}
        if "packet_out" in req and self.inject is not None:
            po = req["packet_out"]
            try:
                port, frame = int(po["port"]), bytes.fromhex(po["frame"])
            except (TypeError, KeyError, ValueError):
                return {"ok": False, "error": "'packet_out' takes {\"port\": N, \"frame\": \"<hex>\"}"}
            if not 0 <= port <= 510 or len(frame) < 14:
                return {"ok": False, "error": "packet_out: port must be 0..510 and the frame >= 14 bytes"}
            self.inject(port, frame)
            return {"ok": True}
        return {"ok": False, "error": "unknown request: expected a 'cmd', 'describe', 'subscribe' or "
                                      "'packet_out' key"}

    def _reply(self, conn: _Conn, obj: dict[str, Any]) -> None:
        conn.outbuf += encode_line(obj)

    def _flush(self, conn: _Conn) -> None:
        if conn.sock.fileno() < 0:
            return
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except BlockingIOError:
                break
            except OSError:
                self._close(conn)
                return
            del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        self.selector.modify(conn.sock, events, lambda _s, c=conn: self._on_io(c))
        if len(conn.outbuf) > MAX_PENDING_OUT_BYTES:
            self._close(conn)   # a subscriber that never reads must not eat the switch's memory

    def publish(self, topic: str, event: dict[str, Any]) -> int:
        """Send an event to every subscriber of ``topic``; returns how many got it."""
        n = 0
        for conn in list(self.conns.values()):
            if topic in conn.subscriptions:
                self._reply(conn, {"event": topic, **event})
                self._flush(conn)
                n += 1
        return n

    def _close(self, conn: _Conn) -> None:
        self.conns.pop(conn.sock.fileno(), None)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        try:
            self.selector.unregister(self.lsock)
        except (KeyError, ValueError):
            pass
        self.lsock.close()
        if self.kind == "unix":
            try:
                os.unlink(self.address)
            except OSError:
                pass


class ControlClient:
    """Talks to a running switch: ``run(cmd)`` returns the output or raises ``CommandError`` with its message."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        _kind, where = parse_ctl_address(address)
        self.timeout_s = timeout_s
        try:
            self.sock = connect(where, timeout_s)
        except OSError as exc:
            raise ControlAddressError(
                f"--ctl {address}: no switch answers there ({exc.strerror or exc}); is `starpulse p4 switch"
                f" ... --ctl {address}` running in this network namespace?") from None
        self._stream = JsonLineStream(self.sock)
        self._events: deque[dict[str, Any]] = deque()

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its reply (events arriving meanwhile are kept for ``next_event``)."""
        try:
            self.sock.settimeout(self.timeout_s)
            self._stream.send(obj)
            while True:
                reply = self._read()
                if "event" not in reply:
                    return reply
                self._events.append(reply)
        except TimeoutError:
            raise ControlAddressError(f"the switch did not answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ControlAddressError(f"lost the connection to the switch: {exc.strerror or exc}") from None

    def pipeline(self, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send every request in one write and return their replies in order: the switch serves them in one
        wake-up of its loop (a poller's many small reads cost it one)."""
        try:
            self.sock.settimeout(self.timeout_s)
            self.sock.sendall(b"".join(encode_line(o) for o in objs))
            replies: list[dict[str, Any]] = []
            while len(replies) < len(objs):
                reply = self._read()
                (self._events if "event" in reply else replies).append(reply)
            return replies
        except TimeoutError:
            raise ControlAddressError(f"the switch did not answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise ControlAddressError(f"lost the connection to the switch: {exc.strerror or exc}") from None

    def _read(self) -> dict[str, Any]:
        try:
            return self._stream.recv()
        except EOFError:
            raise ControlAddressError("the switch closed the control connection") from None

    def run(self, cmd: str) -> str:
        reply = self.request({"cmd": cmd})
        if not reply.get("ok"):
            raise CommandError(reply.get("error", "command failed"))
        return str(reply.get("out", ""))

    def describe(self) -> dict[str, list[str]]:
        return self.request({"describe": True})

    def complete(self, line: str) -> list[str]:
        """Completion candidates for the last word of ``line`` (commands, then names that fit there)."""
        reply = self.request({"complete": line})
        return list(reply.get("candidates", [])) if reply.get("ok") else []

    def subscribe(self, *topics: str) -> None:
        reply = self.request({"subscribe": list(topics)})
        if not reply.get("ok"):
            raise CommandError(reply.get("error", "subscribe failed"))

    def port_stats(self) -> dict[int, dict[str, Any]]:
        """Per-port counters as numbers (the JSON form of the ``port_stats`` command)."""
        reply = self.request({"port_stats": True})
        if not reply.get("ok"):
            raise CommandError(reply.get("error", "port_stats failed"))
        return {int(k): v for k, v in reply["ports"].items()}

    def packet_out(self, port: int, frame: bytes) -> None:
        """Inject ``frame`` into the switch's ingress as if it arrived on ``port`` (e.g. the CPU port)."""
        reply = self.request({"packet_out": {"port": port, "frame": frame.hex()}})
        if not reply.get("ok"):
            raise CommandError(reply.get("error", "packet_out failed"))

    def next_event(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event pushed by the switch, or None when none comes within ``timeout_s``."""
        if self._events:
            return self._events.popleft()
        self.sock.settimeout(timeout_s)
        try:
            while True:
                reply = self._read()
                if "event" in reply:
                    return reply
        except TimeoutError:
            return None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
