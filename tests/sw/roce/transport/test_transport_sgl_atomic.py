"""Scatter/gather lists and atomics over the deterministic in-memory wire: SENDs and WRITEs gather from several
SGEs, RECVs and READs scatter into them, every SGE is checked; compare-and-swap and fetch-and-add return the
original value, run exactly once even when requests are retransmitted (replay cache), and stay atomic across
QPs and threads.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from sw.clock import ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport import atomic
from sw.roce.transport.qp import QpState, QueuePair
from sw.roce.transport.verbs import (
    ACCESS_ALL,
    Access,
    QpCap,
    RecvWr,
    SendWr,
    Sge,
    VerbsError,
    WcOpcode,
    WcStatus,
    WrOpcode,
)
from sw.roce.wire.opcodes import Opcode

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000
MAX_NS = 20 * 10**9
ATOMIC_ACCESS = ACCESS_ALL | Access.REMOTE_ATOMIC
FAA, CAS = WrOpcode.ATOMIC_FETCH_AND_ADD, WrOpcode.ATOMIC_CMP_AND_SWP


class Pair:
    """Two NICs on one in-memory wire with one connected QP each (more with ``connect``)."""

    def __init__(self, profile: LinkProfile | None = None, back: LinkProfile | None = None, *, mtu: int = 256,
                 seed: int = 1, cap: QpCap | None = None, **attrs: int) -> None:
        self.clock = ManualClock()
        fwd = profile or LinkProfile(rate_bps=RATE_BPS)
        self.wire = MemoryWire(self.clock, fwd, back or fwd, seed=seed)
        self.a, self.b = (
            SoftNic(self.wire.ports[i], mac=f"02:00:00:00:00:0{i + 1}", ip=f"10.9.0.{i + 1}", line_rate_bps=RATE_BPS,
                clock=self.clock)
            for i in range(2)
        )
        self.pd_a, self.pd_b = self.a.alloc_pd(), self.b.alloc_pd()
        self.cq_a, self.cq_b = self.a.create_cq(), self.b.create_cq()
        self.qa, self.qb = self.connect(mtu=mtu, cap=cap, **attrs)

    def connect(self, *, mtu: int = 256, psn: int = 50, cap: QpCap | None = None,
                **attrs: int) -> tuple[QueuePair, QueuePair]:
        qa = self.a.create_qp(self.pd_a, self.cq_a, cap=cap)
        qb = self.b.create_qp(self.pd_b, self.cq_b, cap=cap)
        rtr = {k: attrs.pop(k) for k in ("max_dest_rd_atomic",) if k in attrs}  # responder resources: on RTR
        for qp, peer, nic in ((qa, qb, self.b), (qb, qa, self.a)):
            qp.modify(QpState.INIT)
            qp.modify(QpState.RTR, dest_qp_num=peer.qp_num, dest_mac=nic.mac, dest_ip=nic.ip, path_mtu=mtu,
                      rq_psn=psn, **rtr)
            qp.modify(QpState.RTS, sq_psn=psn, **{"timeout": 8, **attrs})
        return qa, qb

    def wait_wc(self, cq, n: int = 1) -> list:
        got: list = []

        def done() -> bool:
            got.extend(cq.poll(n - len(got)))
            return len(got) >= n

        assert run_until(self.clock, self.wire, [self.a, self.b], done, MAX_NS), f"{len(got)} of {n} completions"
        return got


def _pattern(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _pieces(mr, bounds: list[tuple[int, int]]) -> list[Sge]:
    return [mr.sge(off, n) for off, n in bounds]


# --- scatter / gather ---------------------------------------------------------------------------------------
def test_send_gathers_from_several_sges_and_recv_scatters_across_several():
    pair = Pair(mtu=256)
    a1, a2 = _pattern(700, 1), _pattern(500, 2)
    m1, m2 = pair.pd_a.reg_mr(a1), pair.pd_a.reg_mr(a2)
    gather = [m1.sge(100, 300), m2.sge(0, 0), m2.sge(10, 457), m1.sge(0, 99)]  # 856 bytes, a zero-length SGE
    msg = np.concatenate([a1[100:400], a2[10:467], a1[0:99]])
    r1, r2 = np.zeros(300, np.uint8), np.zeros(1000, np.uint8)
    n1, n2 = pair.pd_b.reg_mr(r1), pair.pd_b.reg_mr(r2)
    pair.qb.post_recv(RecvWr(9, [n1.sge(0, 255), n2.sge(500, 257), n1.sge(255, 45), n2.sge(0, 400)]))
    pair.qa.post_send(SendWr(1, WrOpcode.SEND_WITH_IMM, gather, imm_data=5))
    (wc,) = pair.wait_wc(pair.cq_b)
    assert (wc.wr_id, wc.status, wc.byte_len, wc.imm_data) == (9, WcStatus.SUCCESS, 856, 5)
    landed = np.concatenate([r1[0:255], r2[500:757], r1[255:300], r2[0:299]])
    assert np.array_equal(landed, msg)
    assert not r2[299:500].any(), "nothing past the message"
    (wc,) = pair.wait_wc(pair.cq_a)
    assert (wc.status, wc.opcode, wc.byte_len) == (WcStatus.SUCCESS, WcOpcode.SEND, 856)


@pytest.mark.parametrize("loss_pct", [0.0, 4.0])
def test_write_gathers_and_read_scatters_across_sge_boundaries(loss_pct):
    pair = Pair(LinkProfile(rate_bps=RATE_BPS, loss_pct=loss_pct), mtu=256, seed=3)
    src = _pattern(20_000, 4)
    ms = pair.pd_a.reg_mr(src)
    bounds = [(0, 1000), (5000, 1), (1001, 3999), (9000, 11_000)]  # 16000 bytes, none MTU-aligned
    dst = np.zeros(16_000, np.uint8)
    md = pair.pd_b.reg_mr(dst)
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, _pieces(ms, bounds), remote_addr=md.addr, rkey=md.rkey))
    back1, back2 = np.zeros(7000, np.uint8), np.zeros(9000, np.uint8)
    mb1, mb2 = pair.pd_a.reg_mr(back1), pair.pd_a.reg_mr(back2)
    read_sges = [mb2.sge(0, 3333), mb1.sge(0, 7000), mb2.sge(3333, 5667)]
    pair.qa.post_send(SendWr(2, WrOpcode.RDMA_READ, read_sges, remote_addr=md.addr, rkey=md.rkey))
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(1, WcStatus.SUCCESS, 16_000),
                                                               (2, WcStatus.SUCCESS, 16_000)]
    expected = np.concatenate([src[o : o + n] for o, n in bounds])
    assert np.array_equal(dst, expected), "WRITE gathered the SGEs in order"
    assert np.array_equal(np.concatenate([back2[:3333], back1, back2[3333:]]), expected), "READ scattered in order"
    if loss_pct:
        assert pair.a.qp_counters()["retransmitted_packets"] + pair.b.qp_counters()["retransmitted_packets"] > 0


@pytest.mark.parametrize("seed", range(5))
def test_sglist_gather_and_scatter_match_the_concatenated_segments(seed):
    from sw.roce.transport.sgl import SgList
    from sw.roce.transport.verbs import ProtectionDomain

    rng = np.random.default_rng(seed)
    pd = ProtectionDomain()
    segs = []
    for i in range(int(rng.integers(1, 7))):  # one MR per segment, some segments empty
        mr = pd.reg_mr(_pattern(500, seed * 10 + i))
        off = int(rng.integers(0, 500))
        segs.append((mr, off, int(rng.integers(0, 500 - off + 1))))
    sgl = SgList(segs)
    whole = b"".join(bytes(mr.view[off : off + n]) for mr, off, n in segs)
    assert sgl.length == len(whole)
    for _ in range(20):
        lo = int(rng.integers(0, len(whole) + 1))
        hi = int(rng.integers(lo, len(whole) + 1))
        assert bytes(sgl.gather(lo, hi)) == whole[lo:hi]
    lo = int(rng.integers(0, len(whole) + 1))
    data = bytes(rng.integers(0, 256, len(whole) - lo, dtype=np.uint8))
    sgl.scatter(lo, data)
    assert bytes(sgl.gather(0, len(whole))) == whole[:lo] + data


def test_send_longer_than_all_receive_sges_is_a_local_length_error():
    pair = Pair()
    msg = pair.pd_a.reg_mr(_pattern(1000))
    small = pair.pd_b.reg_mr(np.zeros(1000, np.uint8))
    pair.qb.post_recv(RecvWr(4, [small.sge(0, 300), small.sge(500, 300)]))  # 600 bytes in all
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, msg.sge()))
    (wc_resp,) = pair.wait_wc(pair.cq_b)
    (wc_req,) = pair.wait_wc(pair.cq_a)
    assert (wc_resp.wr_id, wc_resp.status) == (4, WcStatus.LOC_LEN_ERR)
    assert wc_req.status == WcStatus.REM_INV_REQ_ERR


def test_max_sge_caps_are_enforced_at_post_time():
    pair = Pair(cap=QpCap(max_send_sge=2, max_recv_sge=3))
    mr = pair.pd_a.reg_mr(np.zeros(64, np.uint8))
    with pytest.raises(VerbsError, match=r"wr_id=7: 3 SGEs exceed the QP's max_send_sge=2"):
        pair.qa.post_send(SendWr(7, WrOpcode.SEND, [mr.sge(0, 8)] * 3))
    rb = pair.pd_b.reg_mr(np.zeros(64, np.uint8))
    with pytest.raises(VerbsError, match=r"post_recv wr_id=8: 4 SGEs exceed the QP's max_recv_sge=3"):
        pair.qb.post_recv(RecvWr(8, [rb.sge(0, 8)] * 4))
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, [mr.sge(0, 8)] * 2))  # at the cap: fine
    default_qp = pair.a.create_qp(pair.pd_a, pair.cq_a)
    assert (default_qp.cap.max_send_sge, default_qp.cap.max_recv_sge) == (16, 16)
    for bad in (0, 31):
        with pytest.raises(VerbsError, match=f"max_send_sge={bad}: must be 1..30"):
            QpCap(max_send_sge=bad)


def test_every_sge_is_checked_and_the_error_names_it():
    pair = Pair()
    mr = pair.pd_a.reg_mr(np.zeros(64, np.uint8))
    ro = pair.pd_a.reg_mr(np.zeros(64, np.uint8), Access.REMOTE_READ)
    remote = pair.pd_b.reg_mr(np.zeros(256, np.uint8))
    rdma = {"remote_addr": remote.addr, "rkey": remote.rkey}
    with pytest.raises(VerbsError, match=r"sge\[1\]: unknown lkey 0x"):
        pair.qa.post_send(SendWr(1, WrOpcode.SEND, [mr.sge(0, 8), Sge(mr.addr, 8, 0xDEAD)]))
    with pytest.raises(VerbsError, match=r"sge\[2\].*outside MR"):
        pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, [mr.sge(0, 8), mr.sge(8, 8), Sge(mr.addr + 60, 8, mr.lkey)],
                                 **rdma))
    with pytest.raises(VerbsError, match=r"sge\[1\]: MR 0x[0-9a-f]+ lacks access"):
        pair.qa.post_send(SendWr(1, WrOpcode.RDMA_READ, [mr.sge(0, 8), ro.sge(0, 8)], **rdma))
    with pytest.raises(VerbsError, match=r"sge\[0\]: expected an Sge"):
        pair.qa.post_send(SendWr(1, WrOpcode.SEND, [(mr.addr, 8, mr.lkey)]))
    assert pair.qa.state == QpState.RTS and not pair.cq_a.poll(), "a rejected post leaves the QP untouched"


def test_mr_deregistered_after_posting_completes_with_local_protection_error():
    pair = Pair()
    src, other = pair.pd_a.reg_mr(_pattern(4000)), pair.pd_a.reg_mr(_pattern(100))
    remote = pair.pd_b.reg_mr(np.zeros(8000, np.uint8))
    pair.qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, [other.sge(), src.sge()], remote_addr=remote.addr,
                             rkey=remote.rkey))
    pair.qa.post_send(SendWr(2, WrOpcode.RDMA_WRITE, other.sge(), remote_addr=remote.addr, rkey=remote.rkey))
    pair.pd_a.dereg_mr(src)  # before the engine ran: the HCA finds out when it gathers
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.LOC_PROT_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert pair.qa.state == QpState.ERROR


def test_receive_buffer_deregistered_before_the_send_lands_fails_both_sides():
    pair = Pair()
    inbox = pair.pd_b.reg_mr(np.zeros(1000, np.uint8))
    pair.qb.post_recv(RecvWr(3, inbox.sge()))
    pair.pd_b.dereg_mr(inbox)
    pair.qa.post_send(SendWr(1, WrOpcode.SEND, pair.pd_a.reg_mr(_pattern(500)).sge()))
    (wc_resp,) = pair.wait_wc(pair.cq_b)
    (wc_req,) = pair.wait_wc(pair.cq_a)
    assert (wc_resp.wr_id, wc_resp.status) == (3, WcStatus.LOC_PROT_ERR)
    assert wc_req.status == WcStatus.REM_OP_ERR


# --- atomics ------------------------------------------------------------------------------------------------
def _atomic_pair(**kw) -> tuple[Pair, np.ndarray, object, np.ndarray, object]:
    pair = Pair(**kw)
    remote = np.array([1000, 7, 0, 2**64 - 1], dtype=np.uint64)
    mr_remote = pair.pd_b.reg_mr(remote, ATOMIC_ACCESS)
    local = np.zeros(4, dtype=np.uint64)
    mr_local = pair.pd_a.reg_mr(local)
    return pair, remote, mr_remote, local, mr_local


def test_fetch_and_add_and_compare_and_swap_return_the_original_value():
    pair, remote, mr_r, local, mr_l = _atomic_pair()
    post = pair.qa.post_send
    post(SendWr(1, FAA, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=5))
    post(SendWr(2, CAS, mr_l.sge(8, 8), remote_addr=mr_r.addr + 8, rkey=mr_r.rkey, compare_add=7, swap=99))
    post(SendWr(3, CAS, mr_l.sge(16, 8), remote_addr=mr_r.addr + 8, rkey=mr_r.rkey, compare_add=7, swap=1))
    post(SendWr(4, FAA, mr_l.sge(24, 8), remote_addr=mr_r.addr + 24, rkey=mr_r.rkey, compare_add=2))
    wcs = pair.wait_wc(pair.cq_a, 4)
    assert [(w.wr_id, w.status, w.opcode, w.byte_len) for w in wcs] == [
        (1, WcStatus.SUCCESS, WcOpcode.FETCH_ADD, 8),
        (2, WcStatus.SUCCESS, WcOpcode.COMP_SWAP, 8),
        (3, WcStatus.SUCCESS, WcOpcode.COMP_SWAP, 8),
        (4, WcStatus.SUCCESS, WcOpcode.FETCH_ADD, 8),
    ]
    assert local.tolist() == [1000, 7, 99, 2**64 - 1], "original values, in host order"
    assert remote.tolist() == [1005, 99, 0, 1], "CAS 2 matched and swapped, CAS 3 did not; FAA wraps mod 2^64"
    assert pair.b.qp_counters()["atomics_executed"] == 4


def test_atomics_interleave_with_writes_and_reads_in_order():
    pair, remote, mr_r, local, mr_l = _atomic_pair()
    data = pair.pd_a.reg_mr(_pattern(3000))
    sink = pair.pd_b.reg_mr(np.zeros(3000, np.uint8))
    back = pair.pd_a.reg_mr(np.zeros(3000, np.uint8))
    for i in range(6):
        pair.qa.post_send(SendWr(10 + i, WrOpcode.RDMA_WRITE, data.sge(), remote_addr=sink.addr, rkey=sink.rkey))
        pair.qa.post_send(SendWr(20 + i, FAA, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=1))
    pair.qa.post_send(SendWr(30, WrOpcode.RDMA_READ, back.sge(), remote_addr=sink.addr, rkey=sink.rkey))
    wcs = pair.wait_wc(pair.cq_a, 13)
    assert [w.wr_id for w in wcs] == [x for i in range(6) for x in (10 + i, 20 + i)] + [30]
    assert all(w.status == WcStatus.SUCCESS for w in wcs)
    assert int(remote[0]) == 1006 and int(local[0]) == 1005
    assert np.array_equal(back.buf, data.buf)


@pytest.mark.parametrize("case", ["no_remote_atomic", "misaligned", "out_of_bounds", "bad_rkey"])
def test_atomic_remote_errors_complete_with_the_right_status(case):
    pair = Pair()
    access = ACCESS_ALL if case == "no_remote_atomic" else ATOMIC_ACCESS
    remote = pair.pd_b.reg_mr(np.zeros(4, np.uint64), access)
    local = pair.pd_a.reg_mr(np.zeros(1, np.uint64))
    addr = remote.addr + {"misaligned": 4, "out_of_bounds": 32}.get(case, 0)
    rkey = remote.rkey + 999 if case == "bad_rkey" else remote.rkey
    pair.qa.post_send(SendWr(1, FAA, local.sge(), remote_addr=addr, rkey=rkey, compare_add=1))
    (wc,) = pair.wait_wc(pair.cq_a)
    want = WcStatus.REM_INV_REQ_ERR if case == "misaligned" else WcStatus.REM_ACCESS_ERR
    assert (wc.status, wc.opcode) == (want, WcOpcode.FETCH_ADD)
    assert not remote.buf.any() and pair.b.qp_counters()["atomics_executed"] == 0


def test_atomic_post_checks_local_sge_and_operands():
    pair = Pair()
    local = pair.pd_a.reg_mr(np.zeros(16, np.uint8))
    ro = pair.pd_a.reg_mr(np.zeros(8, np.uint8), Access.REMOTE_READ)
    with pytest.raises(VerbsError, match="ATOMIC_FETCH_AND_ADD needs SGEs of exactly 8 bytes.*got 4"):
        pair.qa.post_send(SendWr(1, FAA, local.sge(0, 4), remote_addr=0, rkey=1))
    with pytest.raises(VerbsError, match="swap=18446744073709551616 must be an unsigned 64-bit integer"):
        pair.qa.post_send(SendWr(1, CAS, local.sge(0, 8), remote_addr=0, rkey=1, swap=2**64))
    with pytest.raises(VerbsError, match="lacks access"):
        pair.qa.post_send(SendWr(1, CAS, ro.sge(), remote_addr=0, rkey=1))
    pair.qa.post_send(SendWr(1, CAS, [local.sge(0, 3), local.sge(8, 5)], remote_addr=0, rkey=1))  # 8 in 2 SGEs


def _drop_first(opcode: Opcode, count: int = 1):
    """A drop filter that loses the first ``count`` frames of ``opcode``."""
    left = [count]

    def drop(frame: bytes) -> bool:
        if frame[42] == opcode and left[0] > 0:  # BTH opcode of an IPv4 frame
            left[0] -= 1
            return True
        return False

    return drop


def test_lost_atomic_ack_is_answered_from_the_replay_cache_not_run_twice():
    pair, remote, mr_r, local, mr_l = _atomic_pair(
        back=LinkProfile(rate_bps=RATE_BPS, drop=_drop_first(Opcode.ATOMIC_ACKNOWLEDGE, 2))
    )
    pair.qa.post_send(SendWr(1, FAA, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=10))
    (wc,) = pair.wait_wc(pair.cq_a)
    assert wc.status == WcStatus.SUCCESS
    assert int(remote[0]) == 1010 and int(local[0]) == 1000, "ran once, the replay returns the saved value"
    req, resp = pair.a.qp_counters(), pair.b.qp_counters()
    assert resp["atomics_executed"] == 1 and resp["atomic_replays"] == 2
    assert req["timeouts"] == 2 and req["retransmitted_packets"] == 2


def test_ack_past_a_lost_atomic_ack_makes_the_requester_ask_again():
    pair, remote, mr_r, local, mr_l = _atomic_pair(
        back=LinkProfile(rate_bps=RATE_BPS, drop=_drop_first(Opcode.ATOMIC_ACKNOWLEDGE))
    )
    data, sink = pair.pd_a.reg_mr(_pattern(100)), pair.pd_b.reg_mr(np.zeros(100, np.uint8))
    pair.qa.post_send(SendWr(1, CAS, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=1000,
                             swap=1))
    pair.qa.post_send(SendWr(2, WrOpcode.RDMA_WRITE, data.sge(), remote_addr=sink.addr, rkey=sink.rkey))
    wcs = pair.wait_wc(pair.cq_a, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    assert int(remote[0]) == 1 and int(local[0]) == 1000
    assert pair.a.qp_counters()["timeouts"] == 0, "the later ACK, not the timer, triggered the resend"
    assert pair.b.qp_counters()["atomic_replays"] == 1


def test_ack_of_a_later_atomic_past_a_lost_one_makes_the_requester_ask_again():
    pair, remote, mr_r, local, mr_l = _atomic_pair(
        back=LinkProfile(rate_bps=RATE_BPS, drop=_drop_first(Opcode.ATOMIC_ACKNOWLEDGE))
    )
    olds = pair.pd_a.reg_mr(np.zeros(5, dtype=np.uint64))
    for i in range(5):
        pair.qa.post_send(SendWr(i, FAA, olds.sge(8 * i, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=1))
    wcs = pair.wait_wc(pair.cq_a, 5)
    assert [(w.wr_id, w.status) for w in wcs] == [(i, WcStatus.SUCCESS) for i in range(5)]
    assert olds.buf.tolist() == [1000, 1001, 1002, 1003, 1004] and int(remote[0]) == 1005
    req, resp = pair.a.qp_counters(), pair.b.qp_counters()
    assert req["timeouts"] == 0 and req["out_of_sequence_received"] >= 1, "the gap, not the timer, resent it"
    assert resp["atomics_executed"] == 5 and resp["atomic_replays"] >= 1


@pytest.mark.parametrize("seed", [21, 22])
def test_fetch_and_add_from_several_qps_on_a_lossy_duplicating_link_is_exact(seed):
    profile = LinkProfile(rate_bps=RATE_BPS, loss_pct=5.0, dup_pct=5.0, reorder_pct=2.0)
    pair = Pair(profile, seed=seed, max_rd_atomic=4, max_dest_rd_atomic=4)
    counter = np.zeros(1, dtype=np.uint64)
    mr_c = pair.pd_b.reg_mr(counter, ATOMIC_ACCESS)
    qps = [pair.qa] + [pair.connect(psn=1000 * i, max_rd_atomic=4, max_dest_rd_atomic=4)[0] for i in (1, 2)]
    per_qp = 40
    olds = np.zeros(len(qps) * per_qp, dtype=np.uint64)
    mr_o = pair.pd_a.reg_mr(olds)
    for k in range(per_qp):
        for q, qp in enumerate(qps):
            slot = q * per_qp + k
            qp.post_send(SendWr(slot, FAA, mr_o.sge(slot * 8, 8), remote_addr=mr_c.addr, rkey=mr_c.rkey,
                                compare_add=3))
    wcs = pair.wait_wc(pair.cq_a, len(olds))
    assert all(w.status == WcStatus.SUCCESS for w in wcs)
    assert int(counter[0]) == 3 * len(olds), "every fetch-and-add ran exactly once"
    assert sorted(olds.tolist()) == [3 * i for i in range(len(olds))], "each saw a distinct original value"
    resp = pair.b.qp_counters()
    assert resp["atomics_executed"] == len(olds)
    assert resp["duplicates_received"] > 0 and resp["atomic_replays"] > 0, "the link made duplicates to replay"


def test_requester_keeps_at_most_max_rd_atomic_atomics_in_flight():
    pair, remote, mr_r, local, mr_l = _atomic_pair(max_rd_atomic=3)
    for i in range(20):
        pair.qa.post_send(SendWr(i, FAA, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=1))
    pair.wait_wc(pair.cq_a, 20)
    assert int(remote[0]) == 1020
    peak = pair.qa.counters.rd_atomic_peak
    assert peak == 3, f"at most max_rd_atomic atomics in flight, and the limit was reached: peak {peak}"


def test_atomic_execution_is_indivisible_across_threads():
    from sw.roce.transport.verbs import ProtectionDomain

    mr = ProtectionDomain().reg_mr(np.zeros(1, dtype=np.uint64), ATOMIC_ACCESS)
    n_threads, per_thread = 4, 5000
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: an unlocked read-modify-write would tear
    try:
        threads = [
            threading.Thread(target=lambda: [atomic.execute(mr, 0, Opcode.FETCH_ADD, 1, 0) for _ in range(per_thread)])
            for _ in range(n_threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
    assert int(mr.buf[0]) == n_threads * per_thread


def test_replay_cache_keeps_the_newest_results():
    cache = atomic.AtomicReplayCache(2)
    for psn, value in ((5, 50), (6, 60), (7, 70)):
        cache.save(psn, value, psn)
    assert (cache.lookup(5), cache.lookup(6), cache.lookup(7), len(cache)) == (None, (60, 6), (70, 7), 2)
