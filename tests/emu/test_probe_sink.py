"""emu.probe's sink waits ``start_ms`` for its first packet, then ``idle_ms`` between packets: on a 256-NIC
fabric the sender started after the sink had given up (1.5 s idle), and the ECN and INT-queue checks saw 0
packets."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from emu.probe import MAGIC, sink

pytestmark = pytest.mark.unit


def _send_later(port: int, delay_s: float, count: int) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(count):
                s.sendto(MAGIC + bytes(16), ("127.0.0.1", port))
    t = threading.Thread(target=run)
    t.start()
    return t


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sink_waits_start_ms_for_a_late_sender() -> None:
    port = _free_port()
    sender = _send_later(port, 0.6, 3)
    rows = sink("127.0.0.1", port, idle_ms=200, max_packets=100, start_ms=5000)
    sender.join()
    assert len(rows) == 3


def test_sink_without_start_ms_gives_up_after_idle_ms() -> None:
    port = _free_port()
    sender = _send_later(port, 0.6, 3)
    rows = sink("127.0.0.1", port, idle_ms=200, max_packets=100)
    sender.join()
    assert rows == []
