"""The host driver's port to an RTL NIC running in another process (the ``starpulse hil`` bridge): register
reads/writes and doorbells as JSON lines over a local stream socket (a Unix socket path; no network traffic).

Requests ``{"op": "read", "addr"}``, ``{"op": "write", "addr", "value"}``, ``{"op": "doorbell", "qp", "bytes"}``,
``{"op": "stats"}`` and ``{"op": "stop"}``; every request gets one reply, ``{"value": ...}`` or ``{"error": ...}``.
"""

from __future__ import annotations

from typing import Any

from sw.roce.softnic.rtl_nic_driver import RtlNicError
from sw.units.jsonl_socket import JsonLineStream, connect

OPS = ("read", "write", "doorbell", "stats", "stop")


class SocketNicPort:
    """``NicPort`` (``rtl_nic_driver``) over the bridge's control socket at ``path``."""

    def __init__(self, path: str, timeout_s: float = 60.0) -> None:
        self.path = path
        self.stream = JsonLineStream(connect(path, timeout_s))

    def call(self, request: dict[str, Any]) -> Any:
        """One request and its reply's value; the bridge's error as ``RtlNicError``."""
        self.stream.send(request)
        reply = self.stream.recv()
        if "error" in reply:
            raise RtlNicError(f"RTL NIC bridge at {self.path}: {reply['error']}")
        return reply["value"]

    async def read(self, addr: int) -> int:
        return int(self.call({"op": "read", "addr": addr}))

    async def write(self, addr: int, value: int) -> None:
        self.call({"op": "write", "addr": addr, "value": value})

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        self.call({"op": "doorbell", "qp": qp, "bytes": n_bytes})

    def stats(self) -> dict[str, Any]:
        """The bridge's figures so far (cycles, frames, lag)."""
        return dict(self.call({"op": "stats"}))

    def stop(self) -> dict[str, Any]:
        """End the testbench; returns its final figures."""
        out = dict(self.call({"op": "stop"}))
        self.stream.sock.close()
        return out
