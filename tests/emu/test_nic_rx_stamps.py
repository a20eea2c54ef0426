"""The NIC port's receive stamps (issue 16, lag accounting): read as control messages while batches are short and
by ioctl once a long batch comes (and back after a run of short ones); in every mode each batch's first and last
stamp lie between its frames' send and their receive, in order."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from emu.netns import NetnsLab
from sw.roce.softnic.port import STAMP_CMSG_AFTER, STAMP_IOCTL_BATCH, RawSocketPort

pytestmark = pytest.mark.emu

SENDER = r"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((sys.argv[1], 0)); frame = bytes.fromhex(sys.argv[2])
for line in sys.stdin:
    for _ in range(int(line)):
        s.send(frame)
    print("sent", flush=True)
"""


def test_stamps_follow_the_batch_length_and_stay_exact_across_the_switches() -> None:
    with NetnsLab() as lab:
        gen = lab.add_host("gen")
        gen.cmd("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        root_if = f"{lab.prefix}p1"
        lab.add_link(None, gen, ifname_a=root_if, ifname_b="eth0")
        port = RawSocketPort(root_if, claim_udp_port=False, ip="10.79.0.1")
        frame = bytes.fromhex(port.mac.replace(":", "") + "020000000002" + "88b5") + bytes(50)   # to this host
        sender = gen.popen([sys.executable, "-c", SENDER, "eth0", frame.hex()], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)

        def burst(n: int, max_frames: int) -> list[int]:
            """Send ``n`` frames, read them in batches of at most ``max_frames``: each batch's length."""
            assert sender.stdin is not None and sender.stdout is not None
            before_ns = time.time_ns()
            sender.stdin.write(f"{n}\n")
            sender.stdin.flush()
            assert sender.stdout.readline().strip() == "sent"
            batches: list[tuple[int, int, int]] = []
            deadline = time.monotonic() + 10
            while sum(b[0] for b in batches) < n and time.monotonic() < deadline:
                port.wait(100_000_000)
                got = port.recv_batch(max_frames)
                if got:
                    batches.append((len(got), port.rx_first_ts_ns, port.rx_last_ts_ns))
            after_ns = time.time_ns()
            assert sum(b[0] for b in batches) == n
            prev_ns = before_ns
            for k, first_ns, last_ns in batches:
                assert prev_ns <= first_ns <= last_ns <= after_ns
                assert k > 1 or first_ns == last_ns
                prev_ns = last_ns
            return [b[0] for b in batches]

        try:
            assert port.rx_timestamps and port._stamp_cmsg
            assert burst(3, 1) == [1, 1, 1] and port._stamp_cmsg          # short batches: control messages
            assert max(burst(64, 64)) >= STAMP_IOCTL_BATCH
            assert not port._stamp_cmsg                                     # a long batch: the ioctls
            burst(8, 64)
            assert not port._stamp_cmsg
            burst(STAMP_CMSG_AFTER - 1, 1)
            assert not port._stamp_cmsg
            burst(1, 1)                                                     # the run of short ones is complete
            assert port._stamp_cmsg
            burst(5, 1)
            assert port.counters.rx_frames == 3 + 64 + 8 + STAMP_CMSG_AFTER + 5
        finally:
            sender.kill()
            sender.wait()
            port.close()
