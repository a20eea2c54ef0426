"""Connection set-up pieces that need no root: the rendezvous store, QP connection through it, and the perf
command's flag validation (one clear line naming the flag)."""

from __future__ import annotations

import argparse
import threading

import numpy as np
import pytest

from sw.apps.perf_selftest import PerfArgError, add_perf_arguments, run_perf
from sw.clock import Clock, ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import chosen_path_mtu, device_path_mtu, path_mtu_for
from sw.roce.transport.qp import QpState
from sw.roce.transport.qp_connect import connect, exchange, qp_info
from sw.roce.transport.verbs import SendWr, VerbsError, WcStatus, WrOpcode
from sw.units import UnitError
from sw.units.file_store import FileStore

pytestmark = pytest.mark.unit


def test_two_qps_connect_through_the_store_and_move_data(tmp_path):
    clock = ManualClock()
    wire = MemoryWire(clock)
    nics = [
        SoftNic(port, mac=f"02:00:00:00:00:0{i + 1}", ip=f"10.5.0.{i + 1}", line_rate_bps=10**9, clock=clock)
        for i, port in enumerate(wire.ports)
    ]
    pds = [n.alloc_pd() for n in nics]
    cqs = [n.create_cq() for n in nics]
    qps = [n.create_qp(pd, cq) for n, pd, cq in zip(nics, pds, cqs, strict=True)]
    dst = np.zeros(10_000, np.uint8)
    mr_dst = pds[1].reg_mr(dst)
    store = FileStore(tmp_path, clock=Clock())
    peer: dict = {}
    t = threading.Thread(
        target=lambda: peer.update(exchange(store, "b", "a", qp_info(qps[1], 7, mr_dst), 10**10))
    )
    t.start()
    info_b = exchange(store, "a", "b", qp_info(qps[0], 3), 10**10)
    t.join()
    connect(qps[0], 3, info_b, path_mtu=1024)
    connect(qps[1], 7, peer, path_mtu=1024)
    assert qps[0].state == qps[1].state == QpState.RTS
    src = np.arange(10_000, dtype=np.uint32).astype(np.uint8)
    qps[0].post_send(
        SendWr(
            1, WrOpcode.RDMA_WRITE, pds[0].reg_mr(src).sge(), remote_addr=info_b["addr"], rkey=info_b["rkey"]
        )
    )
    assert run_until(clock, wire, nics, lambda: len(cqs[0]) > 0, 10**9)
    assert cqs[0].poll()[0].status == WcStatus.SUCCESS and np.array_equal(dst, src)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_perf_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--selftest", "--loss", "150"], "--loss 150"),
        (["--selftest", "--link-rate", "10X"], "--link-rate '10X'"),
        (["--selftest", "--size", "0"], "--size"),
        (["client"], "--dev IFNAME is required"),
        ([], "give a role"),
        (["server", "--selftest"], "drop 'server'"),
        (["client", "--dev", "lo", "--base-rtt", "soon"], "--base-rtt 'soon'"),
        (["client", "--dev", "lo", "--op", "read", "--rd-atomic", "0"], r"--rd-atomic 0: must be 1\.\.16"),
        (["--selftest", "--op", "read", "--rd-atomic", "17"], r"--rd-atomic 17: must be 1\.\.16"),
    ],
)
def test_perf_flag_errors_are_user_errors_naming_the_flag(argv, match):
    with pytest.raises((PerfArgError, UnitError), match=match) as info:
        run_perf(_args(*argv))
    assert getattr(info.value, "is_user_error", False)


@pytest.mark.parametrize("argv", [["client", "--dev", "lo", "--qp-timeout", "40"], ["--selftest", "--iters", "0"]])
def test_perf_flag_out_of_its_range_is_an_argparse_error(argv):
    with pytest.raises(SystemExit):                # one line naming the flag and its range, exit 2
        _args(*argv)


def test_path_mtu_follows_the_interface_mtu():
    assert path_mtu_for(1500) == 1024
    assert path_mtu_for(9000) == 4096
    assert path_mtu_for(4200) == 4096
    with pytest.raises(OSError, match="too small"):
        path_mtu_for(300)


def test_a_requested_path_mtu_is_a_roce_mtu_no_larger_than_the_interface_carries():
    assert chosen_path_mtu(None, 1024, flag="--path-mtu", dev="eth0") == 1024
    assert chosen_path_mtu(256, 1024, flag="--path-mtu", dev="eth0") == 256
    for bad in (2048, 300):
        with pytest.raises(OSError, match=f"--path-mtu {bad}: must be one of .* and at most 1024 on eth0") as info:
            chosen_path_mtu(bad, 1024, flag="--path-mtu", dev="eth0")
        assert info.value.is_user_error


def test_a_device_path_mtu_is_the_largest_its_interface_carries_unless_one_is_asked_for():
    largest = path_mtu_for(65536)                   # the loopback interface's MTU
    assert device_path_mtu("lo", "127.0.0.1", None, flag="--mtu") == largest == 4096
    assert device_path_mtu("lo", "::1", 512, flag="--mtu") == 512


def test_traffic_class_sets_the_dscp_of_every_packet_and_is_range_checked():
    seen_dscp: list[int] = []

    def record(frame: bytes) -> bytes:
        seen_dscp.append(frame[15] >> 2)  # IPv4 TOS byte after the 14-byte Ethernet header
        return frame

    clock = ManualClock()
    wire = MemoryWire(clock, LinkProfile(transform=record), LinkProfile(transform=record))
    nics = [
        SoftNic(port, mac=f"02:00:00:00:00:0{i + 1}", ip=f"10.5.0.{i + 1}", line_rate_bps=10**9, clock=clock)
        for i, port in enumerate(wire.ports)
    ]
    pds = [n.alloc_pd() for n in nics]
    qps = [n.create_qp(pd, n.create_cq()) for n, pd in zip(nics, pds, strict=True)]
    dst = np.zeros(5000, np.uint8)
    infos = [qp_info(qps[0], 1), qp_info(qps[1], 2, pds[1].reg_mr(dst))]
    with pytest.raises(VerbsError, match="traffic_class=256: must be 0..255"):
        connect(qps[0], 1, infos[1], path_mtu=1024, traffic_class=256)
    qps[0].modify(QpState.RESET)
    for i, qp in enumerate(qps):
        connect(qp, i + 1, infos[1 - i], path_mtu=1024, traffic_class=34 << 2)
    src = np.arange(5000, dtype=np.uint8)
    qps[0].post_send(SendWr(1, WrOpcode.RDMA_WRITE, pds[0].reg_mr(src).sge(), remote_addr=infos[1]["addr"],
                            rkey=infos[1]["rkey"]))
    assert run_until(clock, wire, nics, lambda: len(qps[0].send_cq) > 0, 10**9)
    assert np.array_equal(dst, src)
    assert len(seen_dscp) >= 6 and set(seen_dscp) == {34}  # 5 WRITE segments and the ACK(s)
