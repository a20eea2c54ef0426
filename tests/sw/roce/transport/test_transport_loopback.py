"""The RC transport between two NICs over a deterministic in-memory wire (ManualClock, seeded loss,
reordering and duplication):
data arrives exactly, every recovery path (NAK, timeout, RNR) works and its counters explain what happened.
"""

from __future__ import annotations

import numpy as np
import pytest

from sw.cc.dcqcn import DcqcnRp
from sw.clock import ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp import QpState, QueuePair
from sw.roce.transport.rules import ack_timeout_ns
from sw.roce.transport.verbs import Access, RecvWr, SendWr, VerbsError, WcOpcode, WcStatus, WrOpcode
from sw.roce.wire.decode import decode
from sw.roce.wire.ecn import mark_ce

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000
MAX_NS = 20 * 10**9


class Pair:
    """Two NICs on one wire with one connected QP each (more with ``add_qps``)."""

    def __init__(
        self,
        a_to_b: LinkProfile | None = None,
        b_to_a: LinkProfile | None = None,
        *,
        mtu: int = 1024,
        psn: int = 100,
        cc: str = "none",
        seed: int = 1,
        base_rtt_ns: int = 1_000_000,
        **attrs: int,
    ) -> None:
        self.clock = ManualClock()
        self.wire = MemoryWire(
            self.clock,
            a_to_b or LinkProfile(rate_bps=RATE_BPS),
            b_to_a or a_to_b or LinkProfile(rate_bps=RATE_BPS),
            seed=seed,
        )
        self.a = SoftNic(
            self.wire.ports[0],
            mac="02:00:00:00:00:01",
            ip="10.9.0.1",
            line_rate_bps=RATE_BPS,
            clock=self.clock,
            cc=cc,
            base_rtt_ns=base_rtt_ns,
        )
        self.b = SoftNic(
            self.wire.ports[1],
            mac="02:00:00:00:00:02",
            ip="10.9.0.2",
            line_rate_bps=RATE_BPS,
            clock=self.clock,
            cc=cc,
            base_rtt_ns=base_rtt_ns,
        )
        self.pd_a, self.pd_b = self.a.alloc_pd(), self.b.alloc_pd()
        self.cq_a, self.cq_b = self.a.create_cq(), self.b.create_cq()
        self.qa, self.qb = self.connect(mtu=mtu, psn=psn, **attrs)

    def connect(self, *, mtu: int = 1024, psn: int = 0, **attrs: int) -> tuple[QueuePair, QueuePair]:
        qa = self.a.create_qp(self.pd_a, self.cq_a)
        qb = self.b.create_qp(self.pd_b, self.cq_b)
        for qp, peer, nic in ((qa, qb, self.b), (qb, qa, self.a)):
            qp.modify(QpState.INIT)
            qp.modify(
                QpState.RTR,
                dest_qp_num=peer.qp_num,
                dest_mac=nic.mac,
                dest_ip=nic.ip,
                path_mtu=mtu,
                rq_psn=psn,
            )
            qp.modify(QpState.RTS, sq_psn=psn, **{"timeout": 8, **attrs})
        return qa, qb

    def run(self, done, max_ns: int = MAX_NS) -> bool:
        return run_until(self.clock, self.wire, [self.a, self.b], done, max_ns)

    def wait_wc(self, cq, n: int = 1, max_ns: int = MAX_NS) -> list:
        got: list = []

        def done() -> bool:
            got.extend(cq.poll(n - len(got)))
            return len(got) >= n

        assert self.run(done, max_ns), f"only {len(got)} of {n} completions"
        return got


def _pattern(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _write_then_read(pair: Pair, n: int) -> None:
    src, dst, back = _pattern(n), np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    mr_src, mr_back = pair.pd_a.reg_mr(src), pair.pd_a.reg_mr(back)
    mr_dst = pair.pd_b.reg_mr(dst)
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, mr_src.sge(), remote_addr=mr_dst.addr, rkey=mr_dst.rkey))
    pair.qa.post_send(SendWr(2, WrOpcode.RDMA_READ, mr_back.sge(), remote_addr=mr_dst.addr, rkey=mr_dst.rkey))
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [
        (1, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE),
        (2, WcStatus.SUCCESS, WcOpcode.RDMA_READ),
    ]
    assert np.array_equal(dst, src), "WRITE data differs"
    assert np.array_equal(back, src), "READ data differs"


@pytest.mark.parametrize("mtu", [256, 1024, 4096])
@pytest.mark.parametrize("size", [1, 255, 256, 257, 4096, 3 * 4096 + 5, 100_000])
def test_write_and_read_exact_at_every_mtu(mtu, size):
    pair = Pair(mtu=mtu)
    _write_then_read(pair, size)
    c = pair.a.qp_counters()
    assert c["retransmitted_packets"] == 0 and c["timeouts"] == 0


def test_zero_length_send_and_write_complete():
    pair = Pair()
    buf = pair.pd_a.reg_mr(np.zeros(4, np.uint8))
    remote = pair.pd_b.reg_mr(np.zeros(4, np.uint8))
    pair.qb.post_recv(RecvWr(3, remote.sge()))
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, buf.sge(0, 0)))
    pair.qa.post_send(
        SendWr(2, WrOpcode.RDMA_WRITE, buf.sge(0, 0), remote_addr=remote.addr, rkey=remote.rkey)
    )
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    (wc,) = pair.wait_wc(pair.cq_b, 1)
    assert (wc.wr_id, wc.byte_len) == (3, 0)


def test_psn_wraps_around_24_bits():
    pair = Pair(psn=0xFFFFFF - 3)
    _write_then_read(pair, 20 * 1024)
    assert pair.qa.req.next_psn < 100


@pytest.mark.parametrize(
    "profile, seed",
    [
        (LinkProfile(rate_bps=RATE_BPS, loss_pct=1.0), 1),
        (LinkProfile(rate_bps=RATE_BPS, loss_pct=5.0), 2),
        (LinkProfile(rate_bps=RATE_BPS, reorder_pct=3.0), 3),
        (LinkProfile(rate_bps=RATE_BPS, dup_pct=3.0), 4),
        (LinkProfile(rate_bps=RATE_BPS, loss_pct=2.0, reorder_pct=2.0, dup_pct=2.0), 5),
    ],
    ids=["loss1", "loss5", "reorder3", "dup3", "mixed"],
)
def test_impaired_link_still_exact_and_counters_explain_it(profile, seed):
    pair = Pair(profile, seed=seed)
    _write_then_read(pair, 512 * 1024)
    req, resp = pair.a.qp_counters(), pair.b.qp_counters()
    fwd, rev = pair.wire.counters
    if fwd.lost or rev.lost:
        assert req["retransmitted_packets"] > 0 or req["go_back_events"] > 0
        assert req["naks_received"] + req["timeouts"] + req["go_back_events"] > 0
    if fwd.duplicated:
        assert resp["duplicates_received"] + req["duplicate_responses"] > 0
    if fwd.reordered:
        assert resp["out_of_sequence_received"] + req["out_of_sequence_received"] > 0
    assert fwd.lost + fwd.duplicated + fwd.reordered > 0, "the profile must actually impair the link"


def test_no_loss_means_no_retransmission_and_acks_are_coalesced():
    pair = Pair()
    _write_then_read(pair, 256 * 1024)
    req, resp = pair.a.qp_counters(), pair.b.qp_counters()
    assert req["retransmitted_packets"] == 0 and resp["naks_sent"] == 0
    write_pkts = 256
    assert resp["acks_sent"] < write_pkts // 4, "AckReq only every 16th packet: far fewer ACKs than packets"


def test_send_recv_with_immediate_and_rnr_until_a_receive_is_posted():
    pair = Pair(min_rnr_timer=1)
    msg = _pattern(5000, seed=3)
    mr_msg = pair.pd_a.reg_mr(msg)
    inbox = np.zeros(8192, np.uint8)
    mr_in = pair.pd_b.reg_mr(inbox)
    pair.qa.post_send(SendWr(5, WrOpcode.SEND_WITH_IMM, mr_msg.sge(), imm_data=0xABCD))
    pair.run(lambda: pair.a.qp_counters()["rnr_naks_received"] >= 2, 10**8)
    assert pair.a.qp_counters()["rnr_naks_received"] >= 2 and not pair.cq_a.poll()
    pair.qb.post_recv(RecvWr(9, mr_in.sge()))
    (wc_recv,) = pair.wait_wc(pair.cq_b, 1)
    assert (wc_recv.wr_id, wc_recv.status, wc_recv.opcode) == (9, WcStatus.SUCCESS, WcOpcode.RECV)
    assert wc_recv.byte_len == 5000 and wc_recv.imm_data == 0xABCD
    assert np.array_equal(inbox[:5000], msg)
    (wc_send,) = pair.wait_wc(pair.cq_a, 1)
    assert (wc_send.wr_id, wc_send.status, wc_send.opcode) == (5, WcStatus.SUCCESS, WcOpcode.SEND)


def test_rnr_retry_exceeded_when_no_receive_ever_comes():
    pair = Pair(rnr_retry=2, min_rnr_timer=1)
    mr = pair.pd_a.reg_mr(_pattern(100))
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, mr.sge()))
    (wc,) = pair.wait_wc(pair.cq_a, 1)
    assert wc.status == WcStatus.RNR_RETRY_EXC_ERR
    assert pair.a.qp_counters()["rnr_naks_received"] == 3
    assert pair.qa.state == QpState.ERROR


def test_write_with_immediate_consumes_a_receive():
    pair = Pair()
    src, dst = _pattern(3000), np.zeros(3000, np.uint8)
    mr_src, mr_dst = pair.pd_a.reg_mr(src), pair.pd_b.reg_mr(dst)
    pair.qb.post_recv(RecvWr(77, pair.pd_b.reg_mr(np.zeros(1, np.uint8)).sge()))
    pair.qa.post_send(
        SendWr(
            1,
            WrOpcode.RDMA_WRITE_WITH_IMM,
            mr_src.sge(),
            remote_addr=mr_dst.addr,
            rkey=mr_dst.rkey,
            imm_data=42,
        )
    )
    (wc,) = pair.wait_wc(pair.cq_b, 1)
    assert (wc.wr_id, wc.opcode, wc.imm_data, wc.byte_len) == (77, WcOpcode.RECV_RDMA_WITH_IMM, 42, 3000)
    assert np.array_equal(dst, src)


@pytest.mark.parametrize("case", ["bad_rkey", "out_of_bounds", "no_remote_read"])
def test_remote_access_error(case):
    pair = Pair()
    local = pair.pd_a.reg_mr(np.zeros(4096, np.uint8))
    access = Access.LOCAL_WRITE | Access.REMOTE_WRITE if case == "no_remote_read" else None
    remote = pair.pd_b.reg_mr(np.zeros(2048, np.uint8), *([access] if access else []))
    rkey = remote.rkey + 1000 if case == "bad_rkey" else remote.rkey
    length = 4096 if case == "out_of_bounds" else 1024
    opcode = WrOpcode.RDMA_READ if case == "no_remote_read" else WrOpcode.RDMA_WRITE
    pair.qa.post_send(SendWr(1, opcode, local.sge(0, length), remote_addr=remote.addr, rkey=rkey))
    pair.qa.post_send(
        SendWr(2, WrOpcode.RDMA_WRITE, local.sge(0, 8), remote_addr=remote.addr, rkey=remote.rkey)
    )
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.REM_ACCESS_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert pair.qa.state == QpState.ERROR and pair.qb.state == QpState.ERROR


def test_retry_exceeded_when_the_peer_vanishes_with_exponential_backoff():
    pair = Pair(LinkProfile(rate_bps=RATE_BPS, drop=lambda frame: True), retry_cnt=3, timeout=8)
    mr = pair.pd_a.reg_mr(_pattern(10_000))
    remote = pair.pd_b.reg_mr(np.zeros(10_000, np.uint8))
    start_ns = pair.clock.now_ns()
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=remote.addr, rkey=remote.rkey))
    (wc,) = pair.wait_wc(pair.cq_a, 1)
    assert wc.status == WcStatus.RETRY_EXC_ERR
    c = pair.a.qp_counters()
    assert c["timeouts"] == 4 and c["retransmitted_packets"] == 3 * 10
    t = ack_timeout_ns(8)
    assert pair.clock.now_ns() - start_ns >= t * (1 + 2 + 4 + 8), "timeouts must back off exponentially"


def test_qp_state_machine_rejects_bad_transitions_and_posts():
    pair = Pair()
    qp = pair.a.create_qp(pair.pd_a, pair.cq_a)
    mr = pair.pd_a.reg_mr(np.zeros(16, np.uint8))
    with pytest.raises(VerbsError, match="RESET -> RTS"):
        qp.modify(QpState.RTS)
    qp.modify(QpState.INIT)
    with pytest.raises(VerbsError, match="needs RTS"):
        qp.post_send(SendWr(1, WrOpcode.SEND, mr.sge()))
    with pytest.raises(VerbsError, match="path_mtu=1000"):
        qp.modify(QpState.RTR, path_mtu=1000)
    with pytest.raises(VerbsError, match="outside MR"):
        pair.qa.post_send(SendWr(1, WrOpcode.SEND, type(mr.sge())(mr.addr + 8, 16, mr.lkey)))
    ro = pair.pd_a.reg_mr(np.zeros(16, np.uint8), Access.REMOTE_READ)
    with pytest.raises(VerbsError, match="lacks access"):
        pair.qa.post_send(SendWr(1, WrOpcode.RDMA_READ, ro.sge(), remote_addr=0, rkey=0))


def test_many_qps_share_a_nic_with_distinct_udp_source_ports():
    pair = Pair(LinkProfile(rate_bps=RATE_BPS, loss_pct=1.0))
    qps = [pair.connect(psn=i * 1000) for i in range(4)]
    bufs = []
    for i, (qa, _qb) in enumerate(qps):
        src, dst = _pattern(64 * 1024, seed=i), np.zeros(64 * 1024, np.uint8)
        ms, md = pair.pd_a.reg_mr(src), pair.pd_b.reg_mr(dst)
        qa.post_send(SendWr(i, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
        bufs.append((src, dst))
    wcs = pair.wait_wc(pair.cq_a, 4)
    assert sorted(w.wr_id for w in wcs) == [0, 1, 2, 3] and all(w.status == WcStatus.SUCCESS for w in wcs)
    assert all(np.array_equal(s, d) for s, d in bufs)
    sports = {qa.templates.flow.udp_sport for qa, _ in qps}
    assert len(sports) == 4 and all(0xC000 <= p <= 0xFFFF for p in sports)


def test_garbage_frames_are_counted_not_fatal():
    pair = Pair()
    good = pair.qa.templates.build(0x04, 5, b"x")  # SEND_ONLY to a valid QP, but out of sequence
    bad_icrc = good[:-1] + bytes([good[-1] ^ 1])
    for frame in (b"\x00" * 10, b"\xff" * 60, bad_icrc, good[:40]):
        pair.wire.ports[1].inbox.append(frame)
    pair.run(lambda: pair.b.counters.rx_frames >= 4, 10**6)
    c = pair.b.counters
    assert c.non_roce_frames + c.malformed_frames == 4
    _write_then_read(pair, 10_000)


def test_ce_marks_make_the_receiver_send_cnps_that_slow_a_dcqcn_sender():
    profile = LinkProfile(rate_bps=RATE_BPS, transform=mark_ce)
    pair = Pair(profile, LinkProfile(rate_bps=RATE_BPS), cc="dcqcn")
    src = _pattern(300_000)
    ms, md = pair.pd_a.reg_mr(src), pair.pd_b.reg_mr(np.zeros(300_000, np.uint8))
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
    pair.wait_wc(pair.cq_a, 1)
    assert (
        pair.b.counters.cnps_sent >= 2 and pair.a.qp_counters()["cnps_received"] == pair.b.counters.cnps_sent
    )
    assert isinstance(pair.qa.pacer.cc, DcqcnRp)
    assert pair.qa.pacer.rate_bps < RATE_BPS // 2, "each CNP at alpha ~1 roughly halves the rate"


def test_frames_on_the_wire_decode_with_the_wire_format_decoder():
    seen = []
    pair = Pair(LinkProfile(rate_bps=RATE_BPS, drop=lambda f: seen.append(f) and False))
    _write_then_read(pair, 5000)
    opcodes = {decode(f).opcode for f in seen}
    assert {0x06, 0x08, 0x0C} <= opcodes  # WRITE_FIRST, WRITE_LAST, READ_REQUEST


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_many_outstanding_reads_and_writes_interleaved_on_a_lossy_link(seed):
    pair = Pair(LinkProfile(rate_bps=RATE_BPS, loss_pct=3.0, reorder_pct=1.0), seed=seed)
    n, chunk = 8, 40_000
    remote_data = _pattern(n * chunk, seed=seed)
    remote = pair.pd_b.reg_mr(remote_data.copy())
    back = np.zeros(n * chunk, np.uint8)
    mr_back = pair.pd_a.reg_mr(back)
    src = _pattern(chunk, seed=seed + 100)
    mr_src = pair.pd_a.reg_mr(src)
    sink = pair.pd_b.reg_mr(np.zeros(chunk, np.uint8))
    for i in range(n):
        pair.qa.post_send(
            SendWr(
                i,
                WrOpcode.RDMA_READ,
                mr_back.sge(i * chunk, chunk),
                remote_addr=remote.addr + i * chunk,
                rkey=remote.rkey,
            )
        )
        if i % 2:
            pair.qa.post_send(
                SendWr(100 + i, WrOpcode.RDMA_WRITE, mr_src.sge(), remote_addr=sink.addr, rkey=sink.rkey)
            )
    wcs = pair.wait_wc(pair.cq_a, n + n // 2)
    assert all(w.status == WcStatus.SUCCESS for w in wcs), [w.status for w in wcs]
    assert [w.wr_id for w in wcs if w.wr_id < 100] == list(range(n)), "completions in posting order"
    assert np.array_equal(back, remote_data)
    assert np.array_equal(sink.buf, src)


def test_hpcc_window_limits_bytes_in_flight_and_never_stalls():
    # T = 20 us at 1 Gb/s: a 2500-byte window, less than three 1 KiB packets in flight.
    pair = Pair(cc="hpcc", base_rtt_ns=20_000)
    assert pair.qa.pacer.window_bytes == 2500
    _write_then_read(pair, 200_000)
    c = pair.a.qp_counters()
    assert c["timeouts"] == 0, "a packet that closes the window must ask for an ACK"
    assert c["acks_received"] >= 200_000 // 1024 // 3


def test_hpcc_ack_seq_moves_with_every_ack_of_a_long_write():
    # HPCC moves its reference window once its ack_seq passes the snd_nxt of its last update: an ack_seq that waited
    # for the WRITE's completion never did, so a long WRITE never cut its reference window (hil run, issue 17).
    pair = Pair(cc="hpcc", base_rtt_ns=20_000)
    seen: list[tuple[int, int]] = []
    on_ack = pair.qa.pacer.on_ack

    def record(acked: int, sent: int, now_ns: int, hops: tuple = ()) -> None:
        seen.append((acked, sent))
        on_ack(acked, sent, now_ns, hops)

    pair.qa.pacer.on_ack = record
    n = 100_000
    src, dst = pair.pd_a.reg_mr(_pattern(n)), pair.pd_b.reg_mr(np.zeros(n, np.uint8))
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, src.sge(), remote_addr=dst.addr, rkey=dst.rkey))
    pair.wait_wc(pair.cq_a, 1)
    acked = [a for a, _ in seen]
    assert len(seen) > 10 and 0 < acked[0] < n
    assert all(b > a for a, b in zip(acked, acked[1:], strict=False)), "every ACK moved ack_seq"
    assert all(a <= s for a, s in seen) and acked[-1] == n, "bytes acknowledged, never beyond those sent"


def test_send_larger_than_the_posted_receive_fails_on_both_sides():
    pair = Pair()
    msg = pair.pd_a.reg_mr(_pattern(3000))
    small = pair.pd_b.reg_mr(np.zeros(1000, np.uint8))
    pair.qb.post_recv(RecvWr(4, small.sge()))
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, msg.sge()))
    (wc_req,) = pair.wait_wc(pair.cq_a, 1)
    (wc_resp,) = pair.wait_wc(pair.cq_b, 1)
    assert wc_req.status == WcStatus.REM_INV_REQ_ERR
    assert (wc_resp.wr_id, wc_resp.status) == (4, WcStatus.LOC_LEN_ERR)
