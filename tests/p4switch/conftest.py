"""Fixtures for switch tests: raw sockets opened inside a test's own namespaces, and leak checks."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading

import pytest

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003


def open_raw_socket(netns: str | None, ifname: str) -> socket.socket:
    """An AF_PACKET socket bound to ``ifname`` inside namespace ``netns`` (None: this one), non-blocking."""
    result: dict[str, object] = {}

    def opener() -> None:
        try:
            if netns is not None:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns({netns}) failed")
                finally:
                    os.close(fd)
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.bind((ifname, 0))
            sock.setblocking(False)
            result["sock"] = sock
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc

    t = threading.Thread(target=opener)   # setns changes only this short-lived thread's namespace
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def raw_socket():
    """Factory for raw sockets in namespaces; closes them all at the end."""
    socks: list[socket.socket] = []

    def make(netns: str | None, ifname: str) -> socket.socket:
        s = open_raw_socket(netns, ifname)
        socks.append(s)
        return s

    yield make
    for s in socks:
        s.close()
