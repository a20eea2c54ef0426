"""Switch ports on veths: promiscuous receive of exactly what was sent, no echo of our own frames, interface loss,
the receive ring's kernel timestamps read once per batch (first and last slot) with every slot given back."""

from __future__ import annotations

import select
import time

import pytest
from switchlab import host_link

from emu.netns import NetnsLab
from p4.switch.ports import RING_BYTES_ENV, SwitchPort, SwitchPortError, parse_interface_spec
from sw.units.pcap_file import PcapWriter, read_pcap

pytestmark = pytest.mark.emu


def _frame(i: int, size: int = 64) -> bytes:
    dst = bytes.fromhex("02aabbccdd%02x" % (i % 256))          # foreign unicast: needs promiscuous mode
    src = bytes.fromhex("020000000001")
    return (dst + src + b"\x88\xb5" + i.to_bytes(4, "big")).ljust(size, b"\x00")


def _drain(port: SwitchPort, want: int, timeout_s: float = 5.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        select.select([port], [], [], 0.1)
        got += port.recv_batch(64)
    return got


def test_port_receives_exactly_what_was_sent_and_not_its_own_frames(raw_socket, tmp_path) -> None:
    with NetnsLab() as lab:
        h1, root_if = host_link(lab)
        port = SwitchPort(1, root_if)
        try:
            host_sock = raw_socket(h1.name, "eth0")
            sent = [_frame(i) for i in range(200)]
            for f in sent:
                host_sock.send(f)
            got = _drain(port, len(sent))
            assert got == sent
            assert port.counters.rx_pkts == 200 and port.counters.rx_bytes == 200 * 64
            back = _frame(7, 1500)
            assert port.send(back)
            port.flush()                                   # the transmit ring sends what send() queued
            assert port.recv_batch(64) == []               # our own transmission is not received
            deadline = time.monotonic() + 5
            echoed = b""
            while time.monotonic() < deadline and echoed != back:
                select.select([host_sock], [], [], 0.1)
                try:
                    echoed = host_sock.recv(65536)
                except BlockingIOError:
                    continue
            assert echoed == back
            w = PcapWriter(tmp_path / "p1.pcap")
            for n, f in enumerate(got):
                w.write(f, 1_700_000_000_000_000_000 + n)
            w.close()
            assert [f for _, f in read_pcap(tmp_path / "p1.pcap")] == sent
        finally:
            port.close()


def _batches(port: SwitchPort, want: int, max_frames: int) -> list[tuple[list[bytes], int, int]]:
    """Receive batches until ``want`` frames came: each with the port's first/last kernel stamp after it."""
    out: list[tuple[list[bytes], int, int]] = []
    deadline = time.monotonic() + 10
    while sum(len(b) for b, _, _ in out) < want and time.monotonic() < deadline:
        select.select([port], [], [], 0.1)
        got = port.recv_batch(max_frames)
        if got:
            out.append((got, port.rx_first_ts_ns, port.rx_last_ts_ns))
    return out


def test_ring_stamps_each_batch_by_its_first_and_last_slot_and_gives_every_slot_back(raw_socket,
                                                                                    monkeypatch) -> None:
    """A two-slot ring: a slot whose release the timestamp read deferred and never made would stall the ring
    after the first batch (kernel drops); every batch's stamps lie between its sends and its receive, in order."""
    monkeypatch.setenv(RING_BYTES_ENV, "4096")
    with NetnsLab() as lab:
        h1, root_if = host_link(lab)
        port = SwitchPort(1, root_if)
        try:
            assert port._frames == 2                                   # the ring is as small as the test needs
            host_sock = raw_socket(h1.name, "eth0")
            sent: list[bytes] = []
            got: list[bytes] = []
            prev_last_ns = 0
            for rnd in range(40):
                pair = [_frame(2 * rnd + k) for k in range(2)]
                before_ns = time.time_ns()
                for f in pair:
                    host_sock.send(f)
                batches = _batches(port, 2, 1 if rnd % 2 else 64)     # odd rounds: one frame per batch
                after_ns = time.time_ns()
                sent += pair
                for frames, first_ns, last_ns in batches:
                    got += frames
                    assert before_ns <= first_ns <= last_ns <= after_ns
                    assert prev_last_ns <= first_ns                    # batches in the ring's order
                    if len(frames) == 1:
                        assert first_ns == last_ns                     # one slot: first and last are it
                    prev_last_ns = last_ns
            assert got == sent
            assert port.poll_kernel_drops() == 0 and port.counters.rx_pkts == 80
        finally:
            port.close()
        off = SwitchPort(2, root_if, rx_timestamps=False)              # --no-lag-accounting's ports
        try:
            host_sock.send(sent[0])
            assert [f for b, _, _ in _batches(off, 1, 64) for f in b] == [sent[0]]
            assert off.rx_first_ts_ns == 0 == off.rx_last_ts_ns
        finally:
            off.close()


def test_interface_deleted_marks_port_down_without_raising() -> None:
    with NetnsLab() as lab:
        h1 = lab.add_host("h1")
        root_if = f"{lab.prefix}p1"
        lab.add_link(None, h1, ifname_a=root_if, ifname_b="eth0")
        port = SwitchPort(3, root_if)
        try:
            h1.cmd("ip", "link", "delete", "eth0")          # takes the root-side peer with it
            for _ in range(3):
                port.recv_batch(8)
                port.send(_frame(1))
            assert not port.up
            assert port.counters.tx_errors >= 1
        finally:
            port.close()


@pytest.mark.parametrize("spec", ["eth1", "x@eth1", "1@", "600@eth1"])
def test_bad_interface_specs_are_user_errors(spec: str) -> None:
    with pytest.raises(SwitchPortError, match="-i"):
        parse_interface_spec(spec)


def test_missing_interface_is_a_user_error() -> None:
    with pytest.raises(SwitchPortError, match="does not exist"):
        SwitchPort(1, "nope-does-not-x")
