"""Fixtures for switch tests: raw sockets in a test's own namespaces, a switch lab, leak checks."""

from __future__ import annotations

import socket

import pytest
from switchlab import SwitchLab, netns_names, open_raw_socket

from emu.netns import NetnsLab


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


@pytest.fixture
def switch_lab(tmp_path, raw_socket):
    """A 4-host lab (switch not started yet); everything is removed afterwards, also on failure."""
    lab = NetnsLab()
    slab = None
    try:
        slab = SwitchLab(lab, 4, tmp_path, raw_socket)
        yield slab
    finally:
        lab.destroy()
        if slab is not None and slab.proc is not None:
            assert slab.proc.poll() is not None, "switch process left running"
        leftover = {n for n in netns_names() if n.startswith(lab.prefix + "-")}
        assert not leftover, f"namespaces left behind: {leftover}"
