"""The RC transport over real veths between two namespaces: AF_PACKET NICs move RDMA WRITE/READ/SEND exactly,
also through a lossy, reordering, duplicating link; RNR, access errors and a vanished peer complete with the
right status; tshark dissects the captured frames as RoCEv2 (InfiniBand over UDP 4791).
"""

from __future__ import annotations

import ctypes
import os
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest

from emu.netns import Host, NetnsLab
from emu.wire import WireProfile
from sw.clock import get_clock
from sw.clock.lag import mtu_serialization_ns
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import RawSocketPort
from sw.roce.transport.qp import QpState, QueuePair
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import Access, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode
from sw.roce.wire.gid import interface_ipv6

pytestmark = pytest.mark.emu

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
RATE_BPS = 200_000_000
ADDR_A, ADDR_B = "10.78.0.1", "10.78.0.2"


@contextmanager
def in_netns(host: Host) -> Iterator[None]:
    """Run the block in ``host``'s network namespace (sockets created here stay in it)."""
    with open("/proc/self/ns/net") as orig, open(f"/var/run/netns/{host.name}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {host.name}")
        try:
            yield
        finally:
            if _libc.setns(orig.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")


@dataclass
class End:
    """One host's NIC with a PD, a CQ and one QP."""

    host: Host
    port: RawSocketPort
    nic: SoftNic

    def __post_init__(self) -> None:
        self.pd = self.nic.alloc_pd()
        self.cq = self.nic.create_cq()
        self.qp: QueuePair = self.nic.create_qp(self.pd, self.cq)


def _end(host: Host, **nic_kw) -> End:
    with in_netns(host):
        port = RawSocketPort("eth0")
    return End(host, port, SoftNic(port, mac=port.mac, ip=port.ip, line_rate_bps=RATE_BPS, **nic_kw))


def _connect(a: End, b: End, *, mtu: int = 4096, **attrs: int) -> None:
    ia, ib = qp_info(a.qp, 1000), qp_info(b.qp, 2000)
    connect(a.qp, 1000, ib, path_mtu=mtu, **attrs)
    connect(b.qp, 2000, ia, path_mtu=mtu, **attrs)


def _drive(ends: list[End], done: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    """Progress both NICs from this one thread until ``done()``; sleeps in select when both are idle."""
    clock = get_clock()
    end_ns = clock.now_ns() + int(timeout_s * 1e9)
    socks = [e.port.sock for e in ends]
    while not done():
        busy = False
        for e in ends:
            busy = e.nic.progress() or busy
        if busy:
            continue
        now = clock.now_ns()
        if now > end_ns:
            return done()
        deadlines = [d for e in ends if (d := e.nic.next_deadline_ns()) is not None]
        wait_ns = min([1_000_000, *(max(0, d - now) for d in deadlines)])
        if wait_ns:
            select.select(socks, [], [], wait_ns / 1e9)
    return True


def _wait_wcs(ends: list[End], cq, n: int, timeout_s: float = 60.0) -> list:
    got: list = []

    def done() -> bool:
        got.extend(cq.poll(n - len(got)))
        return len(got) >= n

    assert _drive(ends, done, timeout_s), f"only {len(got)} of {n} completions"
    return got


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    with NetnsLab() as lab:
        yield lab


def _pair(lab: NetnsLab, profile: WireProfile | None = None, *, stats: str | None = None) -> tuple[End, End]:
    h1, h2 = lab.add_host("h1"), lab.add_host("h2")
    kw = {
        "ifname_a": "eth0",
        "ifname_b": "eth0",
        "addr_a": f"{ADDR_A}/24",
        "addr_b": f"{ADDR_B}/24",
        "mtu": 9000,
    }
    if profile is None:
        lab.add_link(h1, h2, **kw)
    else:
        lab.add_wired_link(h1, h2, profile, stats_path=stats, **kw)
    return _end(h1), _end(h2)


def _write_read(a: End, b: End, size: int) -> None:
    src = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    dst, back = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    ms, mb, md = a.pd.reg_mr(src), a.pd.reg_mr(back), b.pd.reg_mr(dst)
    a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
    a.qp.post_send(SendWr(2, WrOpcode.RDMA_READ, mb.sge(), remote_addr=md.addr, rkey=md.rkey))
    wcs = _wait_wcs([a, b], a.cq, 2, timeout_s=120)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    assert np.array_equal(dst, src), "RDMA WRITE data differs"
    assert np.array_equal(back, src), "RDMA READ data differs"


def test_write_read_send_exact_over_veth_and_tshark_dissects_rocev2(lab, tmp_path):
    a, b = _pair(lab)
    _connect(a, b, mtu=1024)
    pcap = tmp_path / "roce.pcap"
    dump = b.host.popen(
        [
            "tcpdump",
            "-i",
            "eth0",
            "-U",
            "--immediate-mode",
            "-s",
            "256",
            "-B",
            "32768",
            "-w",
            str(pcap),
            "udp port 4791",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # test set-up, not the data path: let tcpdump attach before traffic starts
    _write_read(a, b, 3 * 1024 * 1024 + 77)
    inbox = np.zeros(8192, np.uint8)
    b.qp.post_recv(RecvWr(5, b.pd.reg_mr(inbox).sge()))
    msg = np.arange(5000, dtype=np.uint8)
    a.qp.post_send(SendWr(3, WrOpcode.SEND_WITH_IMM, a.pd.reg_mr(msg).sge(), imm_data=7))
    (wc,) = _wait_wcs([a, b], b.cq, 1)
    assert (wc.opcode, wc.byte_len, wc.imm_data) == (WcOpcode.RECV, 5000, 7)
    assert np.array_equal(inbox[:5000], msg)
    _wait_wcs([a, b], a.cq, 1)
    time.sleep(1.5)  # let tcpdump write the last frames before it is stopped
    dump.terminate()
    _, dump_err = dump.communicate(timeout=10)
    assert "\n0 packets dropped by kernel" in dump_err, dump_err
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines() if line.strip()]
    opcodes = {int(r[0], 0) for r in rows if r[0]}
    # RDMA WRITE FIRST/MIDDLE/LAST, READ REQUEST, READ RESPONSE FIRST/MIDDLE/LAST, ACK, SEND FIRST/LAST w/ imm
    assert {0x06, 0x07, 0x08, 0x0C, 0x0D, 0x0E, 0x0F, 0x11, 0x00, 0x03} <= opcodes, sorted(opcodes)
    assert {int(r[1], 0) for r in rows if len(r) > 1 and r[1]} == {a.qp.qp_num, b.qp.qp_num}
    assert a.nic.counters.malformed_frames == 0 and b.nic.counters.malformed_frames == 0


@pytest.mark.parametrize(
    "profile",
    [
        WireProfile(rate_bps=RATE_BPS, loss_pct=1.0),
        WireProfile(rate_bps=RATE_BPS, loss_pct=5.0),
        WireProfile(rate_bps=RATE_BPS, reorder_pct=2.0, dup_pct=2.0, delay_ns=2_000_000),
    ],
    ids=["loss1", "loss5", "reorder_dup"],
)
def test_impaired_link_write_read_exact_and_counters_explain(lab, tmp_path, profile):
    stats = tmp_path / "wire.json"
    a, b = _pair(lab, profile, stats=str(stats))
    _connect(a, b, timeout=10)
    _write_read(a, b, 2 * 1024 * 1024)
    ca, cb = a.nic.qp_counters(), b.nic.qp_counters()
    lab.destroy()
    import json

    wire = json.loads(stats.read_text())
    lost = wire["a_to_b"]["lost_frames"] + wire["b_to_a"]["lost_frames"]
    dups = wire["a_to_b"]["duplicated_frames"] + wire["b_to_a"]["duplicated_frames"]
    reordered = wire["a_to_b"]["reordered_frames"] + wire["b_to_a"]["reordered_frames"]
    assert lost + dups + reordered > 0, "the emulated link must have impaired something"
    if lost:
        assert ca["retransmitted_packets"] + cb["retransmitted_packets"] > 0
        assert ca["naks_received"] + ca["timeouts"] + ca["go_back_events"] > 0
    if dups:
        assert cb["duplicates_received"] + ca["duplicate_responses"] + ca["stale_acks"] > 0
    if reordered:
        assert cb["out_of_sequence_received"] + ca["out_of_sequence_received"] > 0


def test_rnr_then_success_and_remote_access_error_over_veth(lab):
    a, b = _pair(lab)
    _connect(a, b, min_rnr_timer=4)
    msg = a.pd.reg_mr(np.ones(3000, np.uint8))
    a.qp.post_send(SendWr(1, WrOpcode.SEND, msg.sge()))
    assert _drive([a, b], lambda: a.qp.counters.rnr_naks_received >= 2, 30)
    inbox = np.zeros(4096, np.uint8)
    b.qp.post_recv(RecvWr(9, b.pd.reg_mr(inbox).sge()))
    (wc,) = _wait_wcs([a, b], a.cq, 1)
    assert wc.status == WcStatus.SUCCESS and inbox[:3000].all()
    remote = b.pd.reg_mr(np.zeros(100, np.uint8))
    a.qp.post_send(SendWr(2, WrOpcode.RDMA_WRITE, msg.sge(), remote_addr=remote.addr, rkey=remote.rkey))
    (wc,) = _wait_wcs([a, b], a.cq, 1)
    assert wc.status == WcStatus.REM_ACCESS_ERR
    assert a.qp.state == QpState.ERROR


def test_retry_exceeded_when_the_peer_vanishes(lab):
    a, b = _pair(lab)
    _connect(a, b, timeout=8, retry_cnt=2)
    src = a.pd.reg_mr(np.ones(50_000, np.uint8))
    dst = b.pd.reg_mr(np.zeros(50_000, np.uint8))
    b.port.close()
    b.host.cmd("ip", "link", "set", "eth0", "down")
    a.qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, src.sge(), remote_addr=dst.addr, rkey=dst.rkey))
    (wc,) = _wait_wcs([a], a.cq, 1, timeout_s=30)
    assert wc.status == WcStatus.RETRY_EXC_ERR
    assert a.qp.counters.timeouts == 3 and a.qp.counters.retransmitted_packets > 0


def test_non_roce_frames_are_counted_and_ignored(lab):
    a, b = _pair(lab)
    _connect(a, b)
    a.host.cmd("ping", "-c", "3", "-i", "0.2", "-W", "1", ADDR_B, check=False)
    _write_read(a, b, 100_000)
    assert b.nic.counters.non_roce_frames > 0, "the pings reached the NIC and were counted"


def test_each_nic_accounts_its_receive_path_from_the_kernels_stamps(lab):
    """Issue 16: every frame a NIC took off the veth counts in its ``rx`` lag component (per batch, from the
    kernel's receive stamps of its first and last frame), judged against one MTU at its line rate."""
    before_ns = time.time_ns()                # the stamps are CLOCK_REALTIME, taken after the veths exist
    a, b = _pair(lab)
    _connect(a, b)
    _write_read(a, b, 200_000)
    after_ns = time.time_ns()
    for e in (a, b):
        assert e.port.rx_timestamps
        assert before_ns <= e.port.rx_first_ts_ns <= e.port.rx_last_ts_ns <= after_ns
        assert e.nic.rx_lag.events == e.nic.counters.rx_frames > 0
        assert e.nic.rx_lag.bound_ns == mtu_serialization_ns(RATE_BPS)


def _perf(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.environ.get("PYTHON", "python"), "-m", "sw.apps.perf_selftest", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )


@pytest.fixture
def python_env(monkeypatch):
    import sys

    monkeypatch.setenv("PYTHON", sys.executable)


@pytest.mark.parametrize(
    "argv",
    [
        ["--op", "write", "--size", "2M"],
        ["--op", "read", "--size", "2M", "--loss", "1"],
        ["--op", "send", "--size", "1M", "--cc", "dcqcn"],
        ["--op", "write", "--size", "1M", "--cc", "hpcc"],
    ],
    ids=["write", "read_loss1", "send_dcqcn", "write_hpcc_window"],
)
def test_perf_selftest_prints_one_json_object_with_the_contract_keys(python_env, argv):
    import json

    out = _perf("--selftest", *argv, "--json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert {"goodput_bps", "link_rate_bps", "retransmissions", "data_ok"} <= set(result)
    assert result["data_ok"] is True
    assert 0 < result["goodput_bps"] <= result["link_rate_bps"]
    fid = result["fidelity"]
    assert list(fid) == ["time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns", "worst_component",
                         "ok"]
    assert fid["worst_component"] is not None      # the NICs' pacers (and the emulator of a lossy link) reported
    rx = {name: c for name, c in result["lag_components"].items() if name.endswith(" rx")}
    assert len(rx) == 2 and all(c["events"] > 0 for c in rx.values()), result["lag_components"]   # both NICs
    if "--loss" in argv:
        assert (
            result["wire_counters"]["b_to_a"]["lost_frames"]
            + result["wire_counters"]["a_to_b"]["lost_frames"]
            > 0
        )
        assert result["retransmissions"] > 0


def test_perf_bad_flag_is_one_line_exit_2(python_env):
    out = _perf("--selftest", "--loss", "150", "--json")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--loss 150" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize(
    "impairment",
    [["--loss", "1"], ["--loss", "5"], ["--reorder", "2", "--dup", "2"]],
    ids=["loss1", "loss5", "reorder2_dup2"],
)
def test_64mib_exact_through_perf_selftest_on_an_impaired_link(python_env, op, impairment):
    import json

    out = _perf(
        "--selftest", "--op", op, "--size", "64M", "--link-rate", "200M", *impairment, "--json", timeout=600
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["data_ok"] is True and result["size_bytes"] == 64 << 20
    wire = result["wire_counters"]
    assert (
        sum(
            wire[d]["lost_frames"] + wire[d]["duplicated_frames"] + wire[d]["reordered_frames"]
            for d in ("a_to_b", "b_to_a")
        )
        > 0
    )
    if "--loss" in impairment:
        assert result["retransmissions"] > 0, "losses must be explained by retransmissions"
    else:
        c = result["client_counters"] if op == "read" else result["server_counters"]
        assert c["duplicates_received"] + c["out_of_sequence_received"] + c["duplicate_responses"] > 0


def test_perf_server_and_client_sweep_print_a_table(lab, tmp_path, python_env):
    import sys

    h1, h2 = lab.add_host("h1"), lab.add_host("h2")
    lab.add_link(
        h1, h2, ifname_a="eth0", ifname_b="eth0", addr_a=f"{ADDR_A}/24", addr_b=f"{ADDR_B}/24", mtu=1500
    )
    common = [
        "--dev",
        "eth0",
        "--store",
        str(tmp_path),
        "--name",
        "sweep",
        "--sizes",
        "64,4K,64K",
        "--link-rate",
        "200M",
        "--timeout",
        "60",
    ]
    me = [sys.executable, "-m", "sw.apps.perf_selftest"]
    server = h2.popen([*me, "server", *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = h1.popen(
        [*me, "client", *common, "--op", "send", "--iters", "50", "--lat-iters", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = client.communicate(timeout=120)
    server.communicate(timeout=30)
    assert client.returncode == 0, err
    lines = out.strip().splitlines()
    assert "path MTU 1024" in lines[0], lines[0]  # 1500-byte interface: the largest RoCE MTU that fits
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["64", "4K", "64K"]
    assert all(r[-1] == "yes" for r in rows), out


def test_many_qps_on_one_nic_over_veth_each_with_its_own_udp_source_port(lab, tmp_path):
    a, b = _pair(lab)
    pcap = tmp_path / "qps.pcap"
    dump = b.host.popen(
        ["tcpdump", "-i", "eth0", "-U", "--immediate-mode", "-s", "128", "-w", str(pcap), "udp port 4791"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # test set-up: let tcpdump attach
    pairs, bufs = [], []
    for i in range(4):
        qa, qb = a.nic.create_qp(a.pd, a.cq), b.nic.create_qp(b.pd, b.cq)
        connect(qa, i, qp_info(qb, 100 + i), path_mtu=1024)
        connect(qb, 100 + i, qp_info(qa, i), path_mtu=1024)
        src = np.random.default_rng(i).integers(0, 256, 300_000, dtype=np.uint8)
        dst = np.zeros_like(src)
        ms, md = a.pd.reg_mr(src), b.pd.reg_mr(dst)
        qa.post_send(SendWr(i, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
        pairs.append((qa, qb))
        bufs.append((src, dst))
    wcs = _wait_wcs([a, b], a.cq, 4)
    assert sorted(w.wr_id for w in wcs) == [0, 1, 2, 3] and all(w.status == WcStatus.SUCCESS for w in wcs)
    assert all(np.array_equal(s, d) for s, d in bufs)
    time.sleep(1.5)  # let tcpdump write the last frames
    dump.terminate()
    dump.communicate(timeout=10)
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "udp.srcport", "-e", "infiniband.bth.destqp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    ports_by_qp: dict[int, set[int]] = {}
    for line in out.stdout.splitlines():
        sport, dqp = line.split("\t")
        ports_by_qp.setdefault(int(dqp, 0), set()).add(int(sport))
    expected = {qb.qp_num: {qa.templates.flow.udp_sport} for qa, qb in pairs}
    assert {q: p for q, p in ports_by_qp.items() if q in expected} == expected
    assert len({p for ps in expected.values() for p in ps}) == 4, "one UDP source port per QP pair (ECMP)"


ADDR6_A, ADDR6_B = "fd78::1", "fd78::2"


def _pair_ipv6(lab: NetnsLab) -> tuple[End, End]:
    """Two hosts over a veth with ULA IPv6 addresses only (no DAD wait: ``nodad``); NICs open on IPv6."""
    h1, h2 = lab.add_host("h1"), lab.add_host("h2")
    lab.add_link(h1, h2, ifname_a="eth0", ifname_b="eth0", mtu=9000)
    ends = []
    for host, addr in ((h1, ADDR6_A), (h2, ADDR6_B)):
        host.cmd("ip", "-6", "addr", "add", f"{addr}/64", "dev", "eth0", "nodad")
        with in_netns(host):
            port = RawSocketPort("eth0", ip=interface_ipv6("eth0"))
        ends.append(End(host, port, SoftNic(port, mac=port.mac, ip=port.ip, line_rate_bps=RATE_BPS)))
    return ends[0], ends[1]


def test_ipv6_qp_moves_4mib_write_and_read_exactly_and_tshark_sees_ipv6(lab, tmp_path):
    a, b = _pair_ipv6(lab)
    assert (a.nic.ip, b.nic.ip) == (ADDR6_A, ADDR6_B)
    info_b = qp_info(b.qp, 2000)
    assert info_b["gid"] == ADDR6_B
    _connect(a, b, mtu=4096)
    assert a.qp.templates.flow.ip_version == 6
    pcap = tmp_path / "v6.pcap"
    dump = b.host.popen(  # whole frames: tshark verifies the UDP checksum only on untruncated ones
        ["tcpdump", "-i", "eth0", "-U", "--immediate-mode", "-s", "0", "-B", "32768", "-w", str(pcap),
         "udp port 4791"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # test set-up: let tcpdump attach
    _write_read(a, b, 4 << 20)
    # Atomics over the same IPv6 QP: a matching compare-and-swap, then a fetch-and-add.
    word = np.array([77], dtype=np.uint64)
    mr_word = b.pd.reg_mr(word, Access.LOCAL_WRITE | Access.REMOTE_ATOMIC)
    olds = np.zeros(2, dtype=np.uint64)
    mr_olds = a.pd.reg_mr(olds)
    rdma = {"remote_addr": mr_word.addr, "rkey": mr_word.rkey}
    a.qp.post_send(SendWr(3, WrOpcode.ATOMIC_CMP_AND_SWP, mr_olds.sge(0, 8), compare_add=77, swap=1000, **rdma))
    a.qp.post_send(SendWr(4, WrOpcode.ATOMIC_FETCH_AND_ADD, mr_olds.sge(8, 8), compare_add=5, **rdma))
    wcs = _wait_wcs([a, b], a.cq, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(3, WcStatus.SUCCESS), (4, WcStatus.SUCCESS)]
    assert olds.tolist() == [77, 1000] and int(word[0]) == 1005
    time.sleep(1.5)  # let tcpdump write the last frames
    dump.terminate()
    dump.communicate(timeout=10)
    out = subprocess.run(
        [
            "tshark", "-r", str(pcap), "-o", "udp.check_checksum:TRUE", "-T", "fields", "-E", "separator=,",
            "-e", "ipv6.src", "-e", "udp.checksum.status", "-e", "infiniband.bth.opcode",
            "-e", "infiniband.atomiceth.swapdt", "-e", "infiniband.atomicacketh.origremdt",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = [line.split(",") for line in out.stdout.splitlines()]
    assert len(rows) > 1000, out.stderr
    assert {r[0] for r in rows} == {ADDR6_A, ADDR6_B}
    assert {r[1] for r in rows} == {"1"}, "every UDP checksum over IPv6 is present and good"
    assert {6, 7, 8, 12, 13, 14, 15, 17} <= {int(r[2]) for r in rows}  # WRITE F/M/L, READ req/resp, ACK
    atomics = [(int(r[2]), r[3] or r[4]) for r in rows if int(r[2]) in (0x12, 0x13, 0x14)]
    assert [x for x in atomics if x[0] != 0x12] == [(0x13, "1000"), (0x14, "5")], atomics  # swap / add operands
    assert [x for x in atomics if x[0] == 0x12] == [(0x12, "77"), (0x12, "1000")], atomics  # original values


@pytest.mark.parametrize(
    "argv",
    [
        ["--op", "atomic", "--iters", "300", "--lat-iters", "10"],
        ["--op", "atomic", "--iters", "300", "--lat-iters", "0", "--loss", "3", "--ipv6"],
        ["--op", "read", "--size", "4M", "--ipv6", "--link-rate", "200M"],
    ],
    ids=["atomic", "atomic_loss3_ipv6", "read_ipv6"],
)
def test_perf_selftest_atomic_and_ipv6_keep_the_contract_keys(python_env, argv):
    import json

    out = _perf("--selftest", *argv, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"goodput_bps", "link_rate_bps", "retransmissions", "data_ok"} <= set(result)
    assert result["data_ok"] is True
    assert result["ip_version"] == (6 if "--ipv6" in argv else 4)
    if "atomic" in argv:
        assert result["size_bytes"] == 8 and result["atomic_ops"] == 300 and result["atomic_ops_per_s"] > 0
        server = result["server_counters"]
        lat = int(argv[argv.index("--lat-iters") + 1])
        assert server["atomics_executed"] == 300 + lat, "the server's word grew once per operation (data_ok)"
        if "--loss" in argv:
            lost = sum(result["wire_counters"][d]["lost_frames"] for d in ("a_to_b", "b_to_a"))
            assert lost > 0 and result["retransmissions"] > 0
        else:
            assert result["lat_us_median"] > 0
    else:
        assert result["size_bytes"] == 4 << 20


def test_perf_atomic_with_another_size_is_one_line_exit_2(python_env):
    out = _perf("--selftest", "--op", "atomic", "--size", "4K", "--json")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--op atomic works on 8-byte words" in out.stderr
