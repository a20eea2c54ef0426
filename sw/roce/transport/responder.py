"""Responder half of an RC QP: checks PSNs, places SEND/WRITE data, serves READs, answers with coalesced ACKs,
NAKs (sequence error, access error, invalid request) and RNR NAKs when no receive is posted.

Everything the responder sends leaves in one FIFO (ACKs queue behind read responses, as on a NIC), so an ACK
for a later PSN never overtakes the responses of an earlier READ.

Receives scatter a SEND across the posted receive's SGE list in order (longer than all of them: LOC_LEN_ERR).
Atomics (compare-and-swap, fetch-and-add) run once on 8 aligned bytes of an MR with REMOTE_ATOMIC access
(``sw.roce.transport.atomic``); their result is kept in the replay cache so a retransmitted request gets the same answer
without running again.

Responder resources (``max_dest_rd_atomic``): a new READ or atomic holds one until its last response has left
once (the requester cannot complete it before, so a requester within its ``max_rd_atomic`` never finds them all
taken); a new READ / atomic when all are taken gets NAK Invalid Request and the QP goes to ERROR, as IBTA
prescribes for a requester exceeding the responder's resources.  Duplicates (replays) take none.

INT echo (HPCC): when the request an ACK answers arrived with the fabric's INT stack, the ACK carries those
hops back (``sw.roce.wire.int_md.insert_int``; a coalesced ACK carries the newest request's hops).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sw.roce.transport import atomic
from sw.roce.transport.rules import (
    CREDITS_INVALID,
    NAK_INV_REQ,
    NAK_PSN_SEQ_ERR,
    NAK_REM_ACCESS_ERR,
    NAK_REM_OP_ERR,
    READ_RESP_OPS,
    SEND_ANY,
    SEND_FIRSTISH,
    SEND_LASTISH,
    SYN_ACK,
    SYN_NAK,
    SYN_RNR,
    WITH_IMM,
    WRITE_ANY,
    WRITE_FIRSTISH,
    WRITE_LASTISH,
    n_packets,
    psn_add,
    psn_diff,
    segment_opcode,
)
from sw.roce.transport.sgl import LocalProtectionError, SgList, resolve
from sw.roce.transport.verbs import (
    ATOMIC_BYTES,
    Access,
    MemoryRegion,
    RecvWr,
    VerbsError,
    WcOpcode,
    WcStatus,
    WorkCompletion,
)
from sw.roce.wire.decode import RocePacket
from sw.roce.wire.fields import NO_FIELDS, HeaderFields
from sw.roce.wire.int_md import IntHopRecord, insert_int
from sw.roce.wire.opcodes import Opcode

ATOMIC_OPS = frozenset({Opcode.COMPARE_SWAP, Opcode.FETCH_ADD})

if TYPE_CHECKING:
    from sw.roce.transport.qp import QueuePair


@dataclass(slots=True)
class _Ack:
    syndrome: int
    psn: int
    msn: int
    hops: list[IntHopRecord] | None = None  # forward-path INT of the request answered, echoed in the ACK
    orig: int | None = None  # an ATOMIC ACKNOWLEDGE: the original value the atomic read


@dataclass(slots=True)
class _ReadJob:
    """Responses still to send for one READ request."""

    first_psn: int
    mr: MemoryRegion
    off: int
    length: int
    n_pkts: int
    msn: int
    next_i: int = 0


@dataclass(slots=True)
class _Incoming:
    """A multi-packet SEND or WRITE being received."""

    segs: SgList
    capacity: int
    received: int = 0
    recv: RecvWr | None = None


class Responder:
    """Receive side of one QP."""

    def __init__(self, qp: QueuePair, rq_psn: int) -> None:
        self.qp = qp
        self.epsn = rq_psn
        self.msn = 0
        self.recv_queue: deque[tuple[RecvWr, SgList]] = deque()
        self.atomic_replay = atomic.AtomicReplayCache(qp.attr.max_dest_rd_atomic)
        self.rd_atomic_busy: set[int] = set()  # last response PSN of each new READ / atomic not yet answered once
        self.out: deque[_Ack | _ReadJob] = deque()
        self.nak_sent = False  # one NAK per sequence-error episode
        self.resp_high_psn = (
            rq_psn  # first read-response PSN never sent (earlier ones going again are resends)
        )
        self.send_in: _Incoming | None = None
        self.write_in: _Incoming | None = None
        self._rx_hops: list[IntHopRecord] | None = None  # INT of the request being handled
        self.int_echoes_sent = 0
        self.last_echo: list[IntHopRecord] | None = None  # hops of the latest echoing ACK (for inspection)

    def post_recv(self, wr: RecvWr) -> None:
        segs = resolve(
            self.qp.pd,
            wr.sg_list,
            Access.LOCAL_WRITE,
            max_sge=self.qp.cap.max_recv_sge,
            what=f"post_recv wr_id={wr.wr_id}",
            cap_name="max_recv_sge",
        )
        self.recv_queue.append((wr, segs))

    # --- receive -------------------------------------------------------------------------------------------
    def on_request(self, pkt: RocePacket, now_ns: int) -> None:
        counters = self.qp.counters
        hops, self.qp.int_hops_rx = self.qp.int_hops_rx, None  # the NIC left this packet's INT (if any)
        self._rx_hops = hops if hops and not getattr(hops, "echoed", False) else None
        d = psn_diff(pkt.psn, self.epsn)
        if d > 0:
            counters.out_of_sequence_received += 1
            if not self.nak_sent:
                self.nak_sent = True
                counters.naks_sent += 1
                self._queue_ack(SYN_NAK | NAK_PSN_SEQ_ERR, self.epsn, coalesce=False)
            return
        if d < 0:
            counters.duplicates_received += 1
            if pkt.opcode == Opcode.RDMA_READ_REQUEST:
                self._serve_read(pkt, replay=True)  # reads are idempotent: serve the duplicate again
            elif pkt.opcode in ATOMIC_OPS:
                self._replay_atomic(pkt)  # atomics are not: answer from the replay cache
            elif pkt.ackreq:
                self._queue_ack(SYN_ACK | CREDITS_INVALID, psn_add(self.epsn, -1))
            return
        op = pkt.opcode
        if op in WRITE_ANY:
            ok = self._on_write(pkt)
        elif op in SEND_ANY:
            ok = self._on_send(pkt)
        elif op == Opcode.RDMA_READ_REQUEST:
            if self._take_resource(pkt):
                self._serve_read(pkt, replay=False)
            return
        elif op in ATOMIC_OPS:
            if self._take_resource(pkt):
                self._on_atomic(pkt)
            return
        else:
            self._nak(NAK_INV_REQ, pkt.psn)
            return
        if not ok:
            return
        self.nak_sent = False
        self.epsn = psn_add(self.epsn, 1)
        if pkt.ackreq:
            self._queue_ack(SYN_ACK | CREDITS_INVALID, pkt.psn)

    def _on_send(self, pkt: RocePacket) -> bool:
        op = pkt.opcode
        incoming = self.send_in
        if op in SEND_FIRSTISH:
            if not self.recv_queue:
                self.qp.counters.rnr_naks_sent += 1
                self.nak_sent = True  # the packets behind this one are dropped silently until it comes again
                self._queue_ack(SYN_RNR | self.qp.attr.min_rnr_timer, pkt.psn, coalesce=False)
                return False
            wr, segs = self.recv_queue.popleft()
            incoming = self.send_in = _Incoming(segs, segs.length, recv=wr)
        elif incoming is None:
            self._nak(NAK_INV_REQ, pkt.psn)
            return False
        n = len(pkt.payload)
        if incoming.received + n > incoming.capacity:
            self._recv_complete(incoming, WcStatus.LOC_LEN_ERR, WcOpcode.RECV, None)
            self._nak(NAK_INV_REQ, pkt.psn)
            return False
        try:
            incoming.segs.scatter(incoming.received, pkt.payload)
        except LocalProtectionError:
            self._recv_complete(incoming, WcStatus.LOC_PROT_ERR, WcOpcode.RECV, None)
            self._nak(NAK_REM_OP_ERR, pkt.psn)
            return False
        incoming.received += n
        if op in SEND_LASTISH:
            self.send_in = None
            self.msn = (self.msn + 1) & 0xFFFFFF
            self._recv_complete(
                incoming, WcStatus.SUCCESS, WcOpcode.RECV, pkt.immdt if op in WITH_IMM else None
            )
        return True

    def _on_write(self, pkt: RocePacket) -> bool:
        op = pkt.opcode
        incoming = self.write_in
        if op in WRITE_FIRSTISH:
            mr = self.qp.pd.by_rkey(pkt.rkey or 0)
            try:
                if mr is None:
                    raise VerbsError(f"unknown rkey {pkt.rkey:#x}")
                off = mr.offset(pkt.va or 0, pkt.dma_len or 0, Access.REMOTE_WRITE, what="RDMA WRITE")
            except VerbsError:
                self._nak(NAK_REM_ACCESS_ERR, pkt.psn)
                return False
            incoming = self.write_in = _Incoming(SgList.single(mr, off, pkt.dma_len or 0), pkt.dma_len or 0)
        elif incoming is None:
            self._nak(NAK_INV_REQ, pkt.psn)
            return False
        n = len(pkt.payload)
        if incoming.received + n > incoming.capacity:
            self._nak(NAK_INV_REQ, pkt.psn)
            return False
        if op in WITH_IMM and not self.recv_queue:
            self.qp.counters.rnr_naks_sent += 1
            self.nak_sent = True
            self._queue_ack(SYN_RNR | self.qp.attr.min_rnr_timer, pkt.psn, coalesce=False)
            return False
        try:
            incoming.segs.scatter(incoming.received, pkt.payload)
        except LocalProtectionError:  # the target MR was deregistered while the WRITE was arriving
            self._nak(NAK_REM_ACCESS_ERR, pkt.psn)
            return False
        incoming.received += n
        if op in WRITE_LASTISH:
            self.write_in = None
            self.msn = (self.msn + 1) & 0xFFFFFF
            if op in WITH_IMM:
                wr, _ = self.recv_queue.popleft()
                self.qp.recv_cq.push(
                    WorkCompletion(
                        wr.wr_id,
                        WcStatus.SUCCESS,
                        WcOpcode.RECV_RDMA_WITH_IMM,
                        self.qp.qp_num,
                        incoming.received,
                        pkt.immdt,
                    )
                )
        return True

    def _take_resource(self, pkt: RocePacket) -> bool:
        """Room for one more new READ / atomic? Otherwise NAK Invalid Request (the requester broke the limit)."""
        busy = self.rd_atomic_busy
        counters = self.qp.counters
        if len(busy) >= self.qp.attr.max_dest_rd_atomic:
            counters.rd_atomic_over_limit += 1
            self._nak(NAK_INV_REQ, pkt.psn)
            return False
        n = n_packets(pkt.dma_len or 0, self.qp.attr.path_mtu) if pkt.opcode == Opcode.RDMA_READ_REQUEST else 1
        busy.add(psn_add(pkt.psn, n - 1))
        counters.dest_rd_atomic_peak = max(counters.dest_rd_atomic_peak, len(busy))
        return True

    def _serve_read(self, pkt: RocePacket, *, replay: bool) -> None:
        mr = self.qp.pd.by_rkey(pkt.rkey or 0)
        length = pkt.dma_len or 0
        try:
            if mr is None:
                raise VerbsError(f"unknown rkey {pkt.rkey:#x}")
            off = mr.offset(pkt.va or 0, length, Access.REMOTE_READ, what="RDMA READ")
        except VerbsError:
            if not replay:
                self.rd_atomic_busy.discard(psn_add(pkt.psn, n_packets(length, self.qp.attr.path_mtu) - 1))
            self._nak(NAK_REM_ACCESS_ERR, pkt.psn)
            return
        n = n_packets(length, self.qp.attr.path_mtu)
        if not replay:
            self.nak_sent = False
            self.epsn = psn_add(self.epsn, n)
            self.msn = (self.msn + 1) & 0xFFFFFF
        else:
            if psn_diff(psn_add(pkt.psn, n), self.epsn) > 0:
                return  # a "duplicate" reaching past what we executed is malformed: ignore it
            jobs = [item for item in self.out if isinstance(item, _ReadJob)]
            if any(
                0 <= psn_diff(pkt.psn, psn_add(j.first_psn, j.next_i)) < j.n_pkts - j.next_i for j in jobs
            ):
                return  # a queued job will still send this PSN: the request is redundant
            # The requester went back to this PSN and discards responses after it: drop those still queued.
            self.out = deque(
                item
                for item in self.out
                if not (
                    isinstance(item, _ReadJob)
                    and psn_diff(psn_add(item.first_psn, item.next_i), pkt.psn) >= 0
                )
            )
        self.out.append(_ReadJob(pkt.psn, mr, off, length, n, self.msn))

    def _on_atomic(self, pkt: RocePacket) -> None:
        """Run a new atomic once, save its result for replays, answer with an ATOMIC ACKNOWLEDGE."""
        mr = self.qp.pd.by_rkey(pkt.rkey or 0)
        va = pkt.va or 0
        try:
            if mr is None:
                raise VerbsError(f"unknown rkey {pkt.rkey:#x}")
            off = mr.offset(va, ATOMIC_BYTES, Access.REMOTE_ATOMIC, what="atomic")
        except VerbsError:
            self.rd_atomic_busy.discard(pkt.psn)
            self._nak(NAK_REM_ACCESS_ERR, pkt.psn)
            return
        if va % ATOMIC_BYTES:
            self.rd_atomic_busy.discard(pkt.psn)
            self._nak(NAK_INV_REQ, pkt.psn)  # IBTA: an atomic's VA must be naturally aligned
            return
        orig = atomic.execute(mr, off, pkt.opcode, pkt.swapdt or 0, pkt.cmpdt or 0)
        self.qp.counters.atomics_executed += 1
        self.nak_sent = False
        self.epsn = psn_add(self.epsn, 1)
        self.msn = (self.msn + 1) & 0xFFFFFF
        self.atomic_replay.save(pkt.psn, orig, self.msn)
        self.out.append(_Ack(SYN_ACK | CREDITS_INVALID, pkt.psn, self.msn, self._rx_hops, orig))

    def _replay_atomic(self, pkt: RocePacket) -> None:
        """A retransmitted atomic: resend the saved result; one no longer cached is dropped (never re-run)."""
        saved = self.atomic_replay.lookup(pkt.psn)
        if saved is None:
            return
        self.qp.counters.atomic_replays += 1
        orig, msn = saved
        self.out.append(_Ack(SYN_ACK | CREDITS_INVALID, pkt.psn, msn, self._rx_hops, orig))

    def _recv_complete(
        self, incoming: _Incoming, status: WcStatus, opcode: WcOpcode, imm: int | None
    ) -> None:
        wr = incoming.recv
        if wr is not None:
            self.qp.recv_cq.push(
                WorkCompletion(wr.wr_id, status, opcode, self.qp.qp_num, incoming.received, imm)
            )

    def _nak(self, code: int, psn: int) -> None:
        """A fatal NAK (access error, invalid request): send it, then the QP goes to ERROR."""
        self.qp.counters.naks_sent += 1
        self._queue_ack(SYN_NAK | code, psn, coalesce=False)
        self.qp.to_error()

    def _queue_ack(self, syndrome: int, psn: int, *, coalesce: bool = True) -> None:
        if coalesce and self.out:
            tail = self.out[-1]
            if isinstance(tail, _Ack) and tail.syndrome == syndrome and tail.orig is None:
                tail.psn, tail.msn = psn, self.msn
                if self._rx_hops is not None:
                    tail.hops = self._rx_hops
                self.qp.counters.acks_coalesced += 1
                return
        self.out.append(_Ack(syndrome, psn, self.msn, self._rx_hops))

    # --- transmit ------------------------------------------------------------------------------------------
    def next_is_ack(self) -> bool:
        return bool(self.out) and isinstance(self.out[0], _Ack)

    def build_next(self) -> tuple[bytes, bool]:
        """The next frame of the FIFO and whether it is paced data (a read response) rather than an ACK."""
        item = self.out[0]
        tpl = self.qp.templates
        if isinstance(item, _Ack):
            self.out.popleft()
            self.qp.counters.acks_sent += 1
            if item.orig is None:
                ext = HeaderFields(syndrome=item.syndrome, msn=item.msn)
                frame = tpl[Opcode.ACKNOWLEDGE].build(item.psn, b"", ext=ext)
            else:
                ext = HeaderFields(syndrome=item.syndrome, msn=item.msn, orig_rem_dt=item.orig)
                frame = tpl[Opcode.ATOMIC_ACKNOWLEDGE].build(item.psn, b"", ext=ext)
                self.rd_atomic_busy.discard(item.psn)  # answered once: its responder resource is free
            if item.hops:
                frame = insert_int(frame, item.hops)
                self.int_echoes_sent += 1
                self.last_echo = item.hops
            return frame, False
        mtu = self.qp.attr.path_mtu
        i = item.next_i
        start = item.off + i * mtu
        end = min(item.off + item.length, start + mtu)
        opcode = segment_opcode(READ_RESP_OPS, i, item.n_pkts)
        ext = NO_FIELDS
        if opcode != Opcode.RDMA_READ_RESPONSE_MIDDLE:
            ext = HeaderFields(syndrome=SYN_ACK | CREDITS_INVALID, msn=item.msn)
        frame = tpl[opcode].build(psn_add(item.first_psn, i), item.mr.view[start:end], ext=ext)
        item.next_i += 1
        psn = psn_add(item.first_psn, i)
        if psn_diff(psn, self.resp_high_psn) < 0:
            self.qp.counters.retransmitted_packets += 1  # this response PSN went out before
        else:
            self.resp_high_psn = psn_add(psn, 1)
        if item.next_i >= item.n_pkts:
            self.out.popleft()
            self.rd_atomic_busy.discard(psn)  # the last response left once: the READ's resource is free
        return frame, True

    def flush(self) -> None:
        """QP went to ERROR: posted receives complete with WR_FLUSH_ERR."""
        while self.recv_queue:
            wr, _ = self.recv_queue.popleft()
            self.qp.recv_cq.push(
                WorkCompletion(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, self.qp.qp_num)
            )
        self.send_in = self.write_in = None
        self.out = deque(item for item in self.out if isinstance(item, _Ack))  # pending NAKs still leave
