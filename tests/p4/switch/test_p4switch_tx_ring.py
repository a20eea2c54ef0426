"""The switch port's transmit ring on veths: frames queued by ``send()`` leave on ``flush()`` byte-identical and in
order (read by a plain packet socket only after the ring wrapped many times: the kernel copied them, the slots they
came from were reused meanwhile), a full ring counts and returns, a link down refuses exactly the queued frames and
the port sends again once it is up, frames the interface cannot carry are refused, and ``..._TX_RING=0`` keeps the
per-frame send()."""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from socket import socket

import pytest
from switchlab import host_link

from emu.netns import NetnsLab
from p4.switch.ports import TX_RING_ENV, SwitchPort

pytestmark = pytest.mark.emu

SMALL_RING_BYTES = 16384         # 8 slots of 2 KiB at MTU 1500


def _frame(i: int, size: int) -> bytes:
    dst = bytes.fromhex("02aabbccdd01")
    src = bytes.fromhex("020000000001")
    return (dst + src + b"\x88\xb5" + i.to_bytes(4, "big") + bytes([i % 251]) * 8).ljust(size, bytes([i % 7]))


@dataclass
class RingPort:
    """A switch port with an 8-slot transmit ring on a root-namespace veth, and a plain packet socket reading its
    peer (eth0 of host h1)."""

    port: SwitchPort
    reader: socket
    root_if: str


@contextmanager
def _ring_port(raw_socket) -> Iterator[RingPort]:
    with NetnsLab() as lab:
        h1, root_if = host_link(lab)
        reader = raw_socket(h1.name, "eth0")           # a plain packet socket: reads long after the sends
        port = SwitchPort(1, root_if, tx_ring_bytes=SMALL_RING_BYTES)
        try:
            yield RingPort(port, reader, root_if)
        finally:
            port.close()


@pytest.fixture
def ring_port(raw_socket) -> Iterator[RingPort]:
    with _ring_port(raw_socket) as rp:
        yield rp


def _read(sock, want: int, timeout_s: float = 5.0) -> list[bytes]:
    """Up to ``want`` of our test frames (EtherType 0x88b5, or 802.1Q-tagged) from ``sock``; the root namespace's
    own frames on the link (IPv6 neighbour discovery, MLD) are passed over."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        select.select([sock], [], [], 0.1)
        try:
            while len(got) < want:
                frame = sock.recv(65536)
                if frame[12:14] in (b"\x88\xb5", b"\x81\x00"):
                    got.append(frame)
        except BlockingIOError:
            pass
    return got


@pytest.mark.parametrize("ring", [True, False], ids=["tx_ring", "per_frame"])
def test_frames_arrive_byte_identical_in_order_after_the_ring_wrapped(monkeypatch, raw_socket, ring: bool) -> None:
    if not ring:
        monkeypatch.setenv(TX_RING_ENV, "0")
    with _ring_port(raw_socket) as rp:
        port = rp.port
        assert (port.tx_ring is not None) == ring
        if ring:
            assert port.tx_ring.slots == 8
        sizes = [60, 64, 128, 1514, 333, 1000, 61, 1500]
        sent = [_frame(i, sizes[i % len(sizes)]) for i in range(60)]
        for i, f in enumerate(sent):
            assert port.send(f)
            if i % 5 == 4:                          # batches of 5; the 8-slot ring wraps 7 times
                port.flush()
        port.flush()
        assert _read(rp.reader, len(sent)) == sent
        c = port.counters
        assert (c.tx_pkts, c.tx_bytes, c.tx_errors, c.tx_ring_full) == (60, sum(map(len, sent)), 0, 0)
        if ring:
            assert port.tx_ring.queued_pkts == 0 and port.tx_ring.partial_flushes == 0   # one send took all


def test_more_frames_than_slots_without_a_flush_go_out_in_order(ring_port: RingPort) -> None:
    """A full ring of queued frames is flushed by the next send(): nothing is refused, order is kept."""
    port, reader = ring_port.port, ring_port.reader
    sent = [_frame(i, 64) for i in range(30)]
    assert all(port.send(f) for f in sent)
    assert port.counters.tx_pkts == 24 and port.tx_ring.queued_pkts == 6     # three full rings went out
    port.flush()
    assert _read(reader, 30) == sent
    assert port.counters.tx_pkts == 30 and port.counters.tx_errors == 0


def test_full_ring_counts_and_returns_and_recovers(ring_port: RingPort) -> None:
    """Slots stay in flight while a slow qdisc (tbf at 8 kbit/s) holds their frames: send() refuses at once and
    counts tx_ring_full (in tx_errors too); once the qdisc is gone the port sends again."""
    port, reader, root_if = ring_port.port, ring_port.reader, ring_port.root_if
    subprocess.run(["tc", "qdisc", "replace", "dev", root_if, "root", "tbf", "rate", "8kbit", "burst", "1600",
                    "limit", "100000"], check=True, capture_output=True)
    results = [port.send(_frame(i, 1514)) for i in range(20)]
    port.flush()
    c = port.counters
    assert results[:8] == [True] * 8 and not all(results)        # 8 slots queued, then in flight
    assert c.tx_ring_full == results.count(False) and c.tx_errors == c.tx_ring_full
    assert c.tx_pkts + c.tx_errors == 20                  # every frame either taken or counted refused
    subprocess.run(["tc", "qdisc", "del", "dev", root_if, "root"], check=True, capture_output=True)
    while _read(reader, 1, 0.2):                          # what the tbf let through
        pass
    after = [_frame(100 + i, 200) for i in range(3)]
    assert all(port.send(f) for f in after)
    port.flush()
    assert _read(reader, 3) == after
    assert c.tx_pkts + c.tx_errors == 23


def test_link_down_refuses_the_queued_frames_and_up_sends_again(ring_port: RingPort) -> None:
    port, reader, root_if = ring_port.port, ring_port.reader, ring_port.root_if
    for i in range(5):
        assert port.send(_frame(i, 64))
    subprocess.run(["ip", "link", "set", root_if, "down"], check=True)
    port.flush()
    c = port.counters
    assert (c.tx_pkts, c.tx_errors) == (0, 5) and port.tx_ring.queued_pkts == 0
    assert port.up                                       # down, not gone: the port stays
    subprocess.run(["ip", "link", "set", root_if, "up"], check=True)
    deadline = time.monotonic() + 5
    while "LOWER_UP" not in subprocess.run(["ip", "link", "show", root_if], capture_output=True,
                                           text=True).stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = [_frame(10 + i, 64) for i in range(12)]       # wraps the 8 slots the refused frames used
    assert all(port.send(f) for f in sent)
    port.flush()
    assert _read(reader, 12) == sent
    assert (c.tx_pkts, c.tx_errors) == (12, 5)


def test_frames_the_interface_cannot_carry_are_refused_and_counted(ring_port: RingPort) -> None:
    port, reader = ring_port.port, ring_port.reader
    too_long = _frame(1, 1515)                            # MTU 1500 + 14, untagged: EMSGSIZE per frame
    tagged = (bytes.fromhex("02aabbccdd01020000000001") + b"\x81\x00\x00\x05\x88\xb5").ljust(1518, b"\x01")
    runt = _frame(3, 64)[:13]
    good = _frame(4, 64)
    assert [port.send(f) for f in (too_long, tagged, runt, good)] == [False, True, False, True]
    port.flush()
    got = _read(reader, 2)
    # a raw socket reads a tagged frame untagged (the receive path moves the tag into metadata)
    assert len(got) == 2 and got[0] in (tagged, tagged[:12] + tagged[16:]) and got[1] == good
    c = port.counters
    assert (c.tx_pkts, c.tx_bytes, c.tx_errors, c.tx_ring_full) == (2, 1518 + 64, 2, 0)
