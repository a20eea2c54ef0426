"""RDMA READ / atomic limits over the deterministic in-memory wire: the requester never has more than
max_rd_atomic READs and atomics outstanding (its counters say so, and the responder's agree), random mixes of
READ / atomic / WRITE arrive exact at limits 1, 2 and 16 with and without loss, connect() negotiates the
initiator depth down to the peer's responder resources, bad values are one-line errors, a fence holds a WRITE
behind earlier READs, and a peer that ignores the limit gets NAK Invalid Request.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from sw.clock import ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp import QpState
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import (
    ACCESS_ALL,
    Access,
    SendWr,
    VerbsError,
    WcStatus,
    WrOpcode,
    query_device,
)
from sw.roce.wire.opcodes import Opcode

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000
MAX_NS = 60 * 10**9
BTH_OFFSET = 14 + 20 + 8  # Ethernet, IPv4, UDP
FAA, CAS, READ, WRITE = (
    WrOpcode.ATOMIC_FETCH_AND_ADD,
    WrOpcode.ATOMIC_CMP_AND_SWP,
    WrOpcode.RDMA_READ,
    WrOpcode.RDMA_WRITE,
)


class Link:
    """Two NICs on one in-memory wire; QPs connect through qp_info/connect or by explicit modify_qp."""

    def __init__(self, profile: LinkProfile | None = None, *, seed: int = 1) -> None:
        self.clock = ManualClock()
        fwd = profile or LinkProfile(rate_bps=RATE_BPS)
        self.wire = MemoryWire(self.clock, fwd, fwd, seed=seed)
        self.a, self.b = (
            SoftNic(self.wire.ports[i], mac=f"02:00:00:00:01:0{i + 1}", ip=f"10.8.0.{i + 1}", line_rate_bps=RATE_BPS,
                clock=self.clock)
            for i in range(2)
        )
        self.pd_a, self.pd_b = self.a.alloc_pd(), self.b.alloc_pd()
        self.cq_a, self.cq_b = self.a.create_cq(), self.b.create_cq()
        self.qa = self.a.create_qp(self.pd_a, self.cq_a)
        self.qb = self.b.create_qp(self.pd_b, self.cq_b)

    def negotiate(self, a: tuple[int, int], b: tuple[int, int], *, mtu: int = 256) -> None:
        """Connect through the rendezvous dicts; ``a``/``b`` = (max_rd_atomic, max_dest_rd_atomic) asked for."""
        info_a = qp_info(self.qa, 11, max_rd_atomic=a[0], max_dest_rd_atomic=a[1])
        info_b = qp_info(self.qb, 22, max_rd_atomic=b[0], max_dest_rd_atomic=b[1])
        connect(self.qa, 11, info_b, path_mtu=mtu, max_rd_atomic=a[0], max_dest_rd_atomic=a[1], timeout=8)
        connect(self.qb, 22, info_a, path_mtu=mtu, max_rd_atomic=b[0], max_dest_rd_atomic=b[1], timeout=8)

    def force(self, *, init_a: int, dest_b: int, mtu: int = 1024) -> None:
        """Set the limits directly, ignoring the peer (as a misbehaving requester would)."""
        sides = ((self.qa, self.qb, self.b, init_a, 16), (self.qb, self.qa, self.a, 16, dest_b))
        for qp, peer, nic, init, dest in sides:
            qp.modify(QpState.INIT)
            qp.modify(QpState.RTR, dest_qp_num=peer.qp_num, dest_mac=nic.mac, dest_ip=nic.ip, path_mtu=mtu,
                      rq_psn=5, max_dest_rd_atomic=dest)
            qp.modify(QpState.RTS, sq_psn=5, timeout=8, max_rd_atomic=init)

    def wait_wc(self, n: int) -> list:
        got: list = []

        def done() -> bool:
            got.extend(self.cq_a.poll(n - len(got)))
            return len(got) >= n

        assert run_until(self.clock, self.wire, [self.a, self.b], done, MAX_NS), f"{len(got)} of {n} completions"
        return got


def _pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _random_mix(link: Link, n_ops: int, seed: int) -> None:
    """Post ``n_ops`` random READs / atomics / WRITEs at once, wait for all, and check every byte and value."""
    rng = random.Random(seed)
    max_len = 2000
    src_b = _pattern(64 * 1024, seed)  # READ source: never written, so a re-executed READ returns the same bytes
    mr_src_b = link.pd_b.reg_mr(src_b, Access.REMOTE_READ)
    dst_b = np.zeros(n_ops * max_len, np.uint8)  # one WRITE slot per op
    mr_dst_b = link.pd_b.reg_mr(dst_b, Access.REMOTE_WRITE | Access.LOCAL_WRITE)
    words = np.zeros(4, np.uint64)  # word 0: a compare-and-swap chain 0 -> 1 -> 2 ...; words 1..3: fetch-and-add
    mr_words = link.pd_b.reg_mr(words, ACCESS_ALL | Access.REMOTE_ATOMIC)
    src_a = _pattern(n_ops * max_len, seed + 1)
    mr_src_a = link.pd_a.reg_mr(src_a)
    land_a = np.zeros(n_ops * max_len, np.uint8)  # READ landing slot per op
    mr_land_a = link.pd_a.reg_mr(land_a)
    olds = np.full(n_ops, 0xFFFF_FFFF, np.uint64)  # atomic result slot per op
    mr_olds = link.pd_a.reg_mr(olds)
    plan: list[tuple[WrOpcode, int, int, int]] = []  # (opcode, length or word, remote offset, compare/add)
    cas_next = 0
    faa_sum = [0, 0, 0, 0]
    for i in range(n_ops):
        kind = rng.choice((READ, READ, WRITE, FAA, CAS))
        slot = i * max_len
        if kind == READ:
            n, off = rng.randint(1, max_len), rng.randrange(0, 64 * 1024 - max_len)
            wr = SendWr(i, READ, mr_land_a.sge(slot, n), remote_addr=mr_src_b.addr + off, rkey=mr_src_b.rkey)
            plan.append((READ, n, off, 0))
        elif kind == WRITE:
            n = rng.randint(1, max_len)
            wr = SendWr(i, WRITE, mr_src_a.sge(slot, n), remote_addr=mr_dst_b.addr + slot, rkey=mr_dst_b.rkey)
            plan.append((WRITE, n, slot, 0))
        elif kind == CAS:
            wr = SendWr(i, CAS, mr_olds.sge(8 * i, 8), remote_addr=mr_words.addr, rkey=mr_words.rkey,
                        compare_add=cas_next, swap=cas_next + 1)
            plan.append((CAS, 0, 0, cas_next))
            cas_next += 1
        else:
            word, add = rng.randint(1, 3), rng.randint(1, 1000)
            wr = SendWr(i, FAA, mr_olds.sge(8 * i, 8), remote_addr=mr_words.addr + 8 * word, rkey=mr_words.rkey,
                        compare_add=add)
            plan.append((FAA, word, 0, add))
            faa_sum[word] += add
        link.qa.post_send(wr)
    wcs = link.wait_wc(n_ops)
    assert [w.wr_id for w in wcs] == list(range(n_ops)), "RC completes in posting order"
    bad = [(w.wr_id, w.status.name) for w in wcs if w.status != WcStatus.SUCCESS]
    assert not bad, f"failed completions: {bad[:5]}"
    seen_add = [0, 0, 0, 0]
    for i, (kind, n, off, value) in enumerate(plan):
        slot = i * max_len
        if kind == READ:
            assert np.array_equal(land_a[slot : slot + n], src_b[off : off + n]), f"READ {i} of {n} bytes"
        elif kind == WRITE:
            assert np.array_equal(dst_b[slot : slot + n], src_a[slot : slot + n]), f"WRITE {i} of {n} bytes"
        elif kind == CAS:
            assert int(olds[i]) == value, f"CAS {i} saw {int(olds[i])}, expected {value} (ran once, in order)"
        else:
            assert int(olds[i]) == seen_add[n], f"FAA {i} on word {n} saw {int(olds[i])}, expected {seen_add[n]}"
            seen_add[n] += value
    assert [int(w) for w in words] == [cas_next, *faa_sum[1:]], "every atomic ran exactly once"


@pytest.mark.parametrize("limit", [1, 2, 16])
@pytest.mark.parametrize("loss_pct", [0.0, 3.0])
def test_random_read_atomic_write_mix_exact_and_outstanding_never_exceeds_the_limit(limit, loss_pct):
    link = Link(LinkProfile(rate_bps=RATE_BPS, loss_pct=loss_pct), seed=limit * 7 + int(loss_pct))
    link.negotiate((limit, 16), (16, limit))
    assert (link.qa.attr.max_rd_atomic, link.qb.attr.max_dest_rd_atomic) == (limit, limit)
    _random_mix(link, 1000, seed=100 + limit)
    req, resp = link.a.qp_counters(), link.b.qp_counters()
    assert req["rd_atomic_peak"] == limit, f"requester peak {req['rd_atomic_peak']} vs limit {limit}"
    assert 1 <= resp["dest_rd_atomic_peak"] <= limit, f"responder peak {resp['dest_rd_atomic_peak']}"
    assert resp["rd_atomic_over_limit"] == 0, "a requester within its limit never runs out the responder"
    assert req["rd_atomic_waits"] > 0, "the limit held READs/atomics back in the send queue"
    if loss_pct:
        assert req["go_back_events"] > 0 and req["retransmitted_packets"] + resp["retransmitted_packets"] > 0
        assert req["timeouts"] + req["naks_received"] + req["out_of_sequence_received"] > 0
    else:
        assert req["retransmitted_packets"] == resp["retransmitted_packets"] == 0


def test_lossy_duplicating_reordering_link_with_limit_two_is_exact_and_never_naks():
    link = Link(LinkProfile(rate_bps=RATE_BPS, loss_pct=2.0, dup_pct=3.0, reorder_pct=2.0), seed=5)
    link.negotiate((2, 2), (2, 2))
    _random_mix(link, 400, seed=77)
    req, resp = link.a.qp_counters(), link.b.qp_counters()
    assert req["rd_atomic_peak"] == 2 and resp["dest_rd_atomic_peak"] <= 2
    assert resp["rd_atomic_over_limit"] == 0, "duplicated and replayed requests take no responder resource"
    assert resp["duplicates_received"] > 0


@pytest.mark.parametrize(
    "a, b, expect",
    [
        ((16, 16), (16, 16), ((16, 16), (16, 16))),
        ((8, 2), (4, 16), ((8, 2), (2, 16))),
        ((1, 16), (16, 5), ((1, 16), (16, 5))),
        ((16, 3), (16, 0), ((0, 3), (3, 0))),
    ],
)
def test_connect_negotiates_initiator_depth_to_the_peers_responder_resources(a, b, expect):
    link = Link()
    link.negotiate(a, b)
    got = tuple((q.attr.max_rd_atomic, q.attr.max_dest_rd_atomic) for q in (link.qa, link.qb))
    assert got == expect


def test_negotiated_depth_is_what_the_wire_sees():
    link = Link()
    link.negotiate((8, 16), (16, 3))  # a asks for 8 outstanding, b serves 3: a gets 3
    remote = _pattern(32 * 1024, 3)
    mr_r = link.pd_b.reg_mr(remote)
    local = np.zeros(32 * 1024, np.uint8)
    mr_l = link.pd_a.reg_mr(local)
    for i in range(32):
        link.qa.post_send(SendWr(i, READ, mr_l.sge(1024 * i, 1024), remote_addr=mr_r.addr + 1024 * i, rkey=mr_r.rkey))
    assert all(w.status == WcStatus.SUCCESS for w in link.wait_wc(32))
    assert np.array_equal(local, remote)
    assert link.a.qp_counters()["rd_atomic_peak"] == 3
    assert link.b.qp_counters()["rd_atomic_over_limit"] == 0


def test_old_peer_without_rd_atomic_keys_gets_the_device_maximum():
    link = Link()
    info_b = {k: v for k, v in qp_info(link.qb, 2).items() if not k.startswith("max_")}
    connect(link.qa, 1, info_b, path_mtu=1024, max_rd_atomic=12)
    assert link.qa.attr.max_rd_atomic == min(12, query_device().max_qp_rd_atom)


@pytest.mark.parametrize(
    "state, attrs, match",
    [
        (QpState.RTS, {"max_rd_atomic": 17}, r"modify_qp max_rd_atomic=17: must be 0\.\.16 \(device max_qp_init_rd"),
        (QpState.RTS, {"max_rd_atomic": -1}, r"max_rd_atomic=-1: must be 0\.\.16"),
        (QpState.RTS, {"max_rd_atomic": "4"}, r"max_rd_atomic='4': must be 0\.\.16"),
        (QpState.RTR, {"max_dest_rd_atomic": 255}, r"max_dest_rd_atomic=255: must be 0\.\.16 \(device max_qp_rd_at"),
        (QpState.RTS, {"max_dest_rd_atomic": 4}, r"max_dest_rd_atomic: responder resources are set on INIT -> RTR"),
    ],
)
def test_bad_rd_atomic_values_are_one_line_errors_naming_the_field(state, attrs, match):
    link = Link()
    qp = link.qa
    qp.modify(QpState.INIT)
    rtr = {"dest_qp_num": 2, "dest_mac": link.b.mac, "dest_ip": link.b.ip, "path_mtu": 1024}
    if state == QpState.RTS:
        qp.modify(QpState.RTR, **rtr)
    else:
        rtr.update(attrs)
    with pytest.raises(VerbsError, match=match) as info:
        qp.modify(state, **(attrs if state == QpState.RTS else rtr))
    assert info.value.is_user_error and "\n" not in str(info.value)
    assert qp.state == (QpState.RTR if state == QpState.RTS else QpState.INIT), "a rejected modify changes nothing"


def test_connect_and_qp_info_reject_out_of_range_limits():
    link = Link()
    with pytest.raises(VerbsError, match=r"connect max_rd_atomic=20: must be 0\.\.16"):
        connect(link.qa, 1, qp_info(link.qb, 2), path_mtu=1024, max_rd_atomic=20)
    with pytest.raises(VerbsError, match=r"connect max_dest_rd_atomic=-2: must be 0\.\.16"):
        qp_info(link.qa, 1, max_dest_rd_atomic=-2)
    with pytest.raises(VerbsError, match="peer published max_dest_rd_atomic='x'"):
        connect(link.qa, 1, qp_info(link.qb, 2) | {"max_dest_rd_atomic": "x"}, path_mtu=1024)
    assert link.qa.state == QpState.RESET


def test_read_on_a_qp_with_max_rd_atomic_zero_is_refused_at_post_time():
    link = Link()
    link.negotiate((0, 16), (16, 16))
    mr = link.pd_a.reg_mr(np.zeros(64, np.uint8))
    with pytest.raises(VerbsError, match="RDMA_READ needs max_rd_atomic >= 1, this QP has max_rd_atomic=0"):
        link.qa.post_send(SendWr(1, READ, mr.sge(), remote_addr=0, rkey=0))
    link.qa.post_send(SendWr(2, WRITE, mr.sge(0, 8), remote_addr=mr.addr, rkey=0))  # WRITEs need no resources


def _wire_log(link: Link) -> list[tuple[int, int, int]]:
    """Replace both directions' profiles with ones that log (time ns, side, opcode) of every frame sent."""
    log: list[tuple[int, int, int]] = []

    def tap(side: int):
        def record(frame: bytes) -> bytes:
            log.append((link.clock.now_ns(), side, frame[BTH_OFFSET]))
            return frame

        return record

    link.wire.profiles = tuple(LinkProfile(rate_bps=RATE_BPS, transform=tap(side)) for side in (0, 1))
    return log


def _first(log: list[tuple[int, int, int]], side: int, opcode: Opcode, nth: int = 1) -> int:
    times = [t for t, s, op in log if s == side and op == opcode]
    return times[nth - 1]


@pytest.mark.parametrize("limit, fence", [(1, False), (16, False), (16, True)])
def test_send_queue_order_limit_and_fence_on_the_wire(limit, fence):
    link = Link()
    log = _wire_log(link)
    link.negotiate((limit, 16), (16, 16), mtu=1024)
    remote = _pattern(20_000, 9)
    mr_r = link.pd_b.reg_mr(remote)
    local = np.zeros(20_000, np.uint8)
    mr_l = link.pd_a.reg_mr(local)
    link.qa.post_send(SendWr(1, READ, mr_l.sge(0, 8192), remote_addr=mr_r.addr, rkey=mr_r.rkey))
    link.qa.post_send(SendWr(2, READ, mr_l.sge(8192, 8192), remote_addr=mr_r.addr + 8192, rkey=mr_r.rkey))
    link.qa.post_send(SendWr(3, WRITE, mr_l.sge(16_384, 512), remote_addr=mr_r.addr + 16_384, rkey=mr_r.rkey,
                             fence=fence))
    assert [w.status for w in link.wait_wc(3)] == [WcStatus.SUCCESS] * 3
    assert np.array_equal(local[:16_384], remote[:16_384])
    assert np.array_equal(remote[16_384:16_896], local[16_384:16_896])
    read2_req = _first(log, 0, Opcode.RDMA_READ_REQUEST, 2)
    write = _first(log, 0, Opcode.RDMA_WRITE_ONLY)
    read1_done = _first(log, 1, Opcode.RDMA_READ_RESPONSE_LAST, 1)
    read2_done = _first(log, 1, Opcode.RDMA_READ_RESPONSE_LAST, 2)
    assert read2_req <= write, "requests leave in posting (PSN) order"
    if limit == 1:
        assert read2_req > read1_done, "with max_rd_atomic=1 the second READ waits for the first's last response"
        assert write > read1_done, "the WRITE queues behind the held-back READ"
    else:
        assert read2_req < read1_done, "16 outstanding: the second READ does not wait"
    if fence:
        assert write > read2_done, "a fenced WRITE waits for every earlier READ to complete"
    elif limit == 16:
        assert write < read1_done, "an unfenced WRITE after outstanding READs goes at once"
    waits = link.a.qp_counters()["rd_atomic_waits"]
    assert waits == (1 if limit == 1 else 0) + (1 if fence else 0)


@pytest.mark.parametrize("op", [READ, FAA])
def test_requester_over_the_peers_responder_resources_gets_nak_invalid_request(op):
    link = Link()
    link.force(init_a=4, dest_b=0 if op == FAA else 1)  # a ignores what b can serve
    remote = np.zeros(4 * 16_384, np.uint8)
    mr_r = link.pd_b.reg_mr(remote, ACCESS_ALL | Access.REMOTE_ATOMIC)
    local = np.zeros(4 * 16_384, np.uint8)
    mr_l = link.pd_a.reg_mr(local)
    for i in range(4):
        if op == READ:
            wr = SendWr(i, READ, mr_l.sge(16_384 * i, 16_384), remote_addr=mr_r.addr + 16_384 * i, rkey=mr_r.rkey)
        else:
            wr = SendWr(i, FAA, mr_l.sge(8 * i, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey, compare_add=1)
        link.qa.post_send(wr)
    wcs = link.wait_wc(4)
    errors = [w.status for w in wcs if w.status != WcStatus.SUCCESS]
    assert errors and errors[0] == WcStatus.REM_INV_REQ_ERR, [w.status.name for w in wcs]
    assert all(s == WcStatus.WR_FLUSH_ERR for s in errors[1:])
    assert link.qa.state == link.qb.state == QpState.ERROR
    resp = link.b.qp_counters()
    assert resp["rd_atomic_over_limit"] == 1 and resp["naks_sent"] == 1
    if op == FAA:
        assert resp["atomics_executed"] == 0 and not remote[:8].any(), "the refused atomic never ran"
    else:
        assert resp["dest_rd_atomic_peak"] == 1
