"""Requester half of an RC QP: segments work requests into PSN-numbered packets, handles ACK/NAK/RNR and read
responses, and recovers losses with go-back-N driven by NAKs and a retransmission timer with back-off.

Pure state machine: time comes in as ``now_ns``; frames go out through ``next_frame``; no sockets here.
Work requests gather (SEND/WRITE) from, and scatter (READ responses, atomic results) into, SGE lists
(``sw.roce.transport.sgl``).  An atomic takes one PSN and is answered by an ATOMIC ACKNOWLEDGE carrying the original
value.  At most ``max_rd_atomic`` RDMA READ / atomic requests are outstanding (sent, response not yet complete):
the next one waits at the head of the send queue, and everything posted after it waits behind it (PSN order),
until a response completes an older one; SENDs and WRITEs after an outstanding READ go on unless fenced
(``SendWr.fence``).  So the responder never needs more than its ``max_dest_rd_atomic`` resources and its replay
cache always holds the result of any atomic we resend.
An ACK that echoes the forward path's INT (``sw.roce.wire.int_md``) hands those hops to HPCC with the progress it
reports; the data frame size used to turn queue occupancy (packets) into bytes is the path-MTU frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sw.roce.transport.atomic import U64_MASK, to_local_bytes
from sw.roce.transport.rules import (
    NAK_INV_REQ,
    NAK_PSN_SEQ_ERR,
    NAK_REM_ACCESS_ERR,
    RETRY_INFINITE,
    RNR_TIMER_NS,
    SEND_IMM_OPS,
    SEND_OPS,
    SYN_ACK,
    SYN_NAK,
    SYN_RNR,
    SYN_TYPE_MASK,
    WRITE_IMM_OPS,
    WRITE_OPS,
    n_packets,
    psn_add,
    psn_diff,
    segment_opcode,
)
from sw.roce.transport.sgl import LocalProtectionError, SgList, resolve
from sw.roce.transport.verbs import (
    ATOMIC_BYTES,
    ATOMIC_WR_OPCODES,
    Access,
    SendWr,
    VerbsError,
    WcStatus,
    WorkCompletion,
    WrOpcode,
    wc_opcode_of,
)
from sw.roce.wire.decode import RocePacket
from sw.roce.wire.fields import NO_FIELDS, HeaderFields
from sw.roce.wire.opcodes import Opcode
from sw.units import ROCE_DATA_FRAME_OVERHEAD_BYTES

if TYPE_CHECKING:
    from sw.roce.transport.qp import QueuePair

_OPS_OF = {
    WrOpcode.SEND: SEND_OPS,
    WrOpcode.SEND_WITH_IMM: SEND_IMM_OPS,
    WrOpcode.RDMA_WRITE: WRITE_OPS,
    WrOpcode.RDMA_WRITE_WITH_IMM: WRITE_IMM_OPS,
}
_NAK_STATUS = {NAK_INV_REQ: WcStatus.REM_INV_REQ_ERR, NAK_REM_ACCESS_ERR: WcStatus.REM_ACCESS_ERR}
_ATOMIC_OPCODE = {WrOpcode.ATOMIC_CMP_AND_SWP: Opcode.COMPARE_SWAP, WrOpcode.ATOMIC_FETCH_AND_ADD: Opcode.FETCH_ADD}
MAX_BACKOFF_SHIFT = 6
IPV6_EXTRA_BYTES = 20  # an IPv6 header is 20 bytes longer than IPv4's


@dataclass(slots=True)
class _Op:
    """One posted send-queue work request and the PSNs it occupies."""

    wr: SendWr
    segs: SgList
    length: int  # message bytes (8 for an atomic)
    first_psn: int
    n_pkts: int
    is_read: bool
    is_atomic: bool = False
    read_done: int = 0  # read response packets (or the one atomic ACK) received in order
    acked: int = 0  # SEND/WRITE bytes acknowledged so far (counted in ``Requester.acked_bytes`` packet by packet)

    @property
    def needs_response(self) -> bool:
        """Completed by response packets (READ responses, ATOMIC ACK) rather than by a plain ACK."""
        return self.is_read or self.is_atomic


class Requester:
    """Send queue of one QP: packetization, PSN bookkeeping, retransmission, completions."""

    def __init__(self, qp: QueuePair, sq_psn: int) -> None:
        self.qp = qp
        self.ops: list[_Op] = []
        self.head = 0  # index of the oldest uncompleted op
        self.tx_idx = 0  # index of the op holding tx_psn
        self.next_psn = sq_psn  # first PSN of the next posted op
        self.una_psn = sq_psn  # oldest unacknowledged PSN
        self.tx_psn = sq_psn  # next PSN to put on the wire
        self.max_sent_psn = sq_psn  # first PSN never sent (PSNs before it that go again are retransmissions)
        self.timer_ns: int | None = None
        self.retries_left = qp.attr.retry_cnt
        self.rnr_retries_left = qp.attr.rnr_retry
        self.backoff = 0
        self.rnr_until_ns: int | None = None
        self.read_gap_psn: int | None = None  # expected read-response PSN we already re-requested
        self.last_nak_psn: int | None = None  # a duplicated NAK must not trigger a second go-back
        self.acked_bytes = 0
        self.sent_bytes = 0
        self._ack_hops: tuple = ()  # HPCC hops echoed by the ACK being handled
        self._waiting_idx = -1  # send-queue index last held back by max_rd_atomic or a fence (counted once)

    # --- posting -------------------------------------------------------------------------------------------
    def post(self, wr: SendWr) -> None:
        what = f"post_send wr_id={wr.wr_id}"
        try:
            opcode = WrOpcode(wr.opcode)
        except ValueError:
            raise VerbsError(f"{what}: unknown opcode {wr.opcode!r}") from None
        is_read = opcode == WrOpcode.RDMA_READ
        is_atomic = opcode in ATOMIC_WR_OPCODES
        if (is_read or is_atomic) and self.qp.attr.max_rd_atomic == 0:
            raise VerbsError(f"{what}: {opcode.name} needs max_rd_atomic >= 1, this QP has max_rd_atomic=0")
        sges = wr.sg_list
        segs = resolve(
            self.qp.pd,
            sges,
            Access.LOCAL_WRITE if is_read or is_atomic else Access(0),
            max_sge=self.qp.cap.max_send_sge,
            what=what,
            cap_name="max_send_sge",
        )
        if is_atomic:
            if segs.length != ATOMIC_BYTES:
                raise VerbsError(
                    f"{what}: {opcode.name} needs SGEs of exactly {ATOMIC_BYTES} bytes for the original value, "
                    f"got {segs.length}"
                )
            for name in ("compare_add", "swap"):
                value = getattr(wr, name)
                if not isinstance(value, int) or not 0 <= value <= U64_MASK:
                    raise VerbsError(f"{what}: {name}={value!r} must be an unsigned 64-bit integer")
        if segs.length >= 1 << 31:
            raise VerbsError(f"{what}: length {segs.length} exceeds 2^31 - 1")
        n = 1 if is_atomic else n_packets(segs.length, self.qp.attr.path_mtu)
        self.ops.append(_Op(wr, segs, segs.length, self.next_psn, n, is_read, is_atomic))
        self.next_psn = psn_add(self.next_psn, n)

    @property
    def outstanding(self) -> int:
        """Work requests posted and not yet completed."""
        return len(self.ops) - self.head

    # --- transmit ------------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return self.tx_idx < len(self.ops)

    def blocked_until_ns(self, now_ns: int) -> int | None:
        """Why we cannot send now: the RNR wait deadline, or None when only an ACK can unblock us."""
        if self.rnr_until_ns is not None and now_ns < self.rnr_until_ns:
            return self.rnr_until_ns
        return None

    def can_send(self, now_ns: int) -> bool:
        if self.tx_idx >= len(self.ops):
            return False
        op = self.ops[self.tx_idx]
        if op.needs_response or op.wr.fence:
            # An outstanding READ / atomic limits the next one (max_rd_atomic) and holds a fenced request; the
            # response that completes it unblocks us.
            limit = 1 if op.wr.fence else self.qp.attr.max_rd_atomic
            if self._rd_atomic_in_flight(limit) >= limit:
                if self._waiting_idx != self.tx_idx:
                    self._waiting_idx = self.tx_idx
                    self.qp.counters.rd_atomic_waits += 1
                return False
        if self.rnr_until_ns is not None:
            if now_ns < self.rnr_until_ns:
                return False
            self.rnr_until_ns = None
        attr = self.qp.attr
        inflight_pkts = psn_diff(self.tx_psn, self.una_psn)
        if inflight_pkts >= attr.max_inflight_pkts:
            return False
        window = self.qp.pacer.window_bytes
        return window is None or inflight_pkts * attr.path_mtu < window or inflight_pkts == 0

    def _rd_atomic_in_flight(self, stop_at: int | None = None) -> int:
        """READ / atomic requests sent and not yet completed (counting stops at ``stop_at``)."""
        ops = self.ops
        n = 0
        for i in range(self.head, self.tx_idx):
            if ops[i].needs_response:
                n += 1
                if n == stop_at:
                    break
        return n

    def _window_fills(self) -> bool:
        """Will the packet being built close the send window? Then it asks for an ACK, or we would stall."""
        attr = self.qp.attr
        inflight_after = psn_diff(self.tx_psn, self.una_psn) + 1
        if inflight_after >= attr.max_inflight_pkts:
            return True
        window = self.qp.pacer.window_bytes
        return window is not None and inflight_after * attr.path_mtu >= window

    def build_next(self, now_ns: int) -> bytes | None:
        """The next request packet (call only when ``can_send``); advances the transmit pointer.

        None when the work request's local memory went away (its MR deregistered): it completes with
        LOC_PROT_ERR and the QP enters ERROR.
        """
        qp = self.qp
        mtu = qp.attr.path_mtu
        op = self.ops[self.tx_idx]
        wr = op.wr
        i = psn_diff(self.tx_psn, op.first_psn)
        psn = self.tx_psn
        if op.is_read:
            done = i * mtu
            ext = HeaderFields(va=wr.remote_addr + done, rkey=wr.rkey, dma_len=op.length - done)
            frame = qp.templates[Opcode.RDMA_READ_REQUEST].build(psn, b"", ackreq=True, ext=ext)
            step = op.n_pkts - i
        elif op.is_atomic:
            fetch_add = wr.opcode == WrOpcode.ATOMIC_FETCH_AND_ADD
            ext = HeaderFields(va=wr.remote_addr, rkey=wr.rkey, swapdt=wr.compare_add if fetch_add else wr.swap,
                               cmpdt=0 if fetch_add else wr.compare_add)
            frame = qp.templates[_ATOMIC_OPCODE[wr.opcode]].build(psn, b"", ackreq=True, ext=ext)
            step = 1
        else:
            start = i * mtu
            end = min(op.length, start + mtu)
            try:
                payload = op.segs.gather(start, end)
            except LocalProtectionError:
                self._fail(WcStatus.LOC_PROT_ERR, op)
                return None
            opcode = segment_opcode(_OPS_OF[wr.opcode], i, op.n_pkts)
            last = i == op.n_pkts - 1
            every = qp.attr.ack_every_pkts
            ackreq = last or i % every == every - 1 or self._window_fills()
            reth = i == 0 and opcode in (
                Opcode.RDMA_WRITE_FIRST,
                Opcode.RDMA_WRITE_ONLY,
                Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            )
            with_imm = wr.opcode in (WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE_WITH_IMM)
            imm = last and wr.imm_data is not None and with_imm
            ext = NO_FIELDS
            if reth or imm:
                ext = HeaderFields(va=wr.remote_addr, rkey=wr.rkey, dma_len=op.length, immdt=wr.imm_data or 0)
            frame = qp.templates[opcode].build(psn, payload, ackreq=ackreq, se=last, ext=ext)
            self.sent_bytes += end - start
            step = 1
        if psn_diff(psn, self.max_sent_psn) < 0:
            qp.counters.retransmitted_packets += 1
        self.tx_psn = psn_add(psn, step)
        if psn_diff(self.tx_psn, self.max_sent_psn) > 0:
            self.max_sent_psn = self.tx_psn
        if psn_diff(self.tx_psn, op.first_psn) >= op.n_pkts:
            self.tx_idx += 1
        if op.needs_response:
            counters = qp.counters
            counters.rd_atomic_peak = max(counters.rd_atomic_peak, self._rd_atomic_in_flight())
        if self.timer_ns is None:
            self.timer_ns = now_ns + self._timeout_ns()
        return frame

    # --- receive -------------------------------------------------------------------------------------------
    def _take_echo(self) -> None:
        """The forward-path INT the received ACK echoed (left by the NIC on the QP), as HPCC hops."""
        qp = self.qp
        records, qp.int_hops_rx = qp.int_hops_rx, None
        if records and getattr(records, "echoed", False) and qp.pacer is not None:
            extra = IPV6_EXTRA_BYTES if qp.templates is not None and qp.templates.flow.ip_version == 6 else 0
            self._ack_hops = qp.pacer.int_hops(records, qp.attr.path_mtu + ROCE_DATA_FRAME_OVERHEAD_BYTES + extra)
        else:
            self._ack_hops = ()

    def on_ack(self, pkt: RocePacket, now_ns: int) -> None:
        self._take_echo()
        syndrome = pkt.syndrome or 0
        psn = pkt.psn
        counters = self.qp.counters
        # Valid ACK PSNs lie in [una - 1, max_sent - 1]; anything else is a stale duplicate.
        if psn_diff(psn, self.una_psn) < -1 or psn_diff(psn, self.max_sent_psn) >= 0:
            counters.stale_acks += 1
            return
        kind = syndrome & SYN_TYPE_MASK
        if kind == SYN_ACK:
            counters.acks_received += 1
            self._acked_through(psn, now_ns)
        elif kind == SYN_RNR:
            counters.rnr_naks_received += 1
            self._acked_through(psn_add(psn, -1), now_ns)
            if self.rnr_retries_left != RETRY_INFINITE:
                if self.rnr_retries_left == 0:
                    self._fail(WcStatus.RNR_RETRY_EXC_ERR)
                    return
                self.rnr_retries_left -= 1
            delay_ns = max(RNR_TIMER_NS[syndrome & 0x1F], RNR_TIMER_NS[self.qp.attr.min_rnr_timer])
            self.rnr_until_ns = now_ns + delay_ns
            self._go_back(psn)
            self.timer_ns = self.rnr_until_ns + self._timeout_ns()
        elif kind == SYN_NAK:
            counters.naks_received += 1
            code = syndrome & 0x1F
            self._acked_through(psn_add(psn, -1), now_ns)
            if code == NAK_PSN_SEQ_ERR:
                duplicate = psn == self.last_nak_psn and psn == self.una_psn
                self.last_nak_psn = psn
                if not duplicate and psn_diff(self.tx_psn, psn) > 0 and self.head < len(self.ops):
                    self._go_back(psn)
            else:
                self._fail(_NAK_STATUS.get(code, WcStatus.REM_OP_ERR))

    def _response_head(self, pkt: RocePacket, now_ns: int, gap_if: Callable[[_Op], bool]) -> tuple[_Op, int] | None:
        """A READ response or ATOMIC ACK implicitly acknowledges every request before it; the head op it answers
        and its PSN distance from the response the head expects, or None when handled here (no op is waiting:
        stale; ``gap_if(op)`` and a later request answered: the head's response was lost, ask again)."""
        self._take_echo()
        psn = pkt.psn
        self._acked_through(psn_add(psn, -1), now_ns, stop_at_read=True)
        if self.head >= len(self.ops):
            self.qp.counters.stale_responses += 1
            return None
        op = self.ops[self.head]
        expected = psn_add(op.first_psn, op.read_done)
        d = psn_diff(psn, expected)
        if gap_if(op) and d > 0 and psn_diff(psn, self.max_sent_psn) < 0:
            self._response_gap(expected)
            return None
        return op, d

    def on_read_response(self, pkt: RocePacket, now_ns: int) -> None:
        head = self._response_head(pkt, now_ns, lambda op: op.is_atomic)   # the head atomic's ACK was lost
        if head is None:
            return
        op, d = head
        psn = pkt.psn
        if not op.is_read or d < 0 or psn_diff(psn, op.first_psn) >= op.n_pkts:
            self.qp.counters.duplicate_responses += 1
            return
        if d > 0:
            self._response_gap(psn_add(op.first_psn, op.read_done))   # the PSN the head expects
            return
        mtu = self.qp.attr.path_mtu
        start = op.read_done * mtu
        n = len(pkt.payload)
        last = op.read_done == op.n_pkts - 1
        if n != (op.length - start if last else mtu):
            self.qp.counters.malformed_responses += 1
            return
        try:
            op.segs.scatter(start, pkt.payload)
        except LocalProtectionError:
            self._fail(WcStatus.LOC_PROT_ERR)
            return
        op.read_done += 1
        self.acked_bytes += n
        self.una_psn = psn_add(psn, 1)
        self.read_gap_psn = None
        self._progress(now_ns)
        if last:
            self._complete_head(WcStatus.SUCCESS)
            self._after_pop(now_ns)

    def on_atomic_ack(self, pkt: RocePacket, now_ns: int) -> None:
        """ATOMIC ACKNOWLEDGE: the original remote value goes into the atomic's local SGE, which completes."""
        head = self._response_head(pkt, now_ns, lambda op: op.needs_response)   # a later atomic answered
        if head is None:
            return
        op, d = head
        psn = pkt.psn
        if not op.is_atomic or d != 0 or psn_diff(psn, self.max_sent_psn) >= 0:
            self.qp.counters.duplicate_responses += 1
            return
        try:
            op.segs.scatter(0, to_local_bytes(pkt.orig_rem_dt or 0))
        except LocalProtectionError:
            self._fail(WcStatus.LOC_PROT_ERR)
            return
        op.read_done = 1
        self.una_psn = psn_add(psn, 1)
        self.read_gap_psn = None
        self._progress(now_ns)
        self._complete_head(WcStatus.SUCCESS)
        self._after_pop(now_ns)

    def _response_gap(self, expected: int) -> None:
        """A response beyond ``expected`` arrived (responses leave in order): ask again from there, once."""
        self.qp.counters.out_of_sequence_received += 1
        if self.read_gap_psn != expected:
            self.read_gap_psn = expected
            self._go_back(expected)

    # --- timers --------------------------------------------------------------------------------------------
    def on_timer(self, now_ns: int) -> None:
        """Retransmission timeout: go back to the oldest unacknowledged PSN, or fail after retry_cnt tries."""
        self.timer_ns = None
        if self.head >= len(self.ops) or psn_diff(self.max_sent_psn, self.una_psn) <= 0:
            return
        self.qp.counters.timeouts += 1
        if self.retries_left == 0:
            self._fail(WcStatus.RETRY_EXC_ERR)
            return
        self.retries_left -= 1
        self.backoff = min(self.backoff + 1, MAX_BACKOFF_SHIFT)
        self._go_back(self.una_psn)
        self.timer_ns = now_ns + self._timeout_ns()

    def _timeout_ns(self) -> int:
        return self.qp.ack_timeout_ns << self.backoff

    # --- bookkeeping ---------------------------------------------------------------------------------------
    def _acked_through(self, psn: int, now_ns: int, *, stop_at_read: bool = False) -> None:
        """Every PSN up to and including ``psn`` is acknowledged: complete the ops it covers."""
        if psn_diff(psn, self.una_psn) < 0:
            return
        popped = False
        retry_read = False
        while self.head < len(self.ops):
            op = self.ops[self.head]
            if op.needs_response:
                # An ACK beyond an incomplete read/atomic means its responses were lost: ask again (implied NAK).
                gap = psn_add(op.first_psn, op.read_done)
                if not stop_at_read and psn_diff(psn, gap) >= 0 and self.read_gap_psn != gap:
                    self.read_gap_psn = gap
                    retry_read = True
                break
            last = psn_add(op.first_psn, op.n_pkts - 1)
            if psn_diff(psn, last) >= 0:
                self.acked_bytes += op.length - op.acked
                self._complete_head(WcStatus.SUCCESS)
                popped = True
                continue
            # HPCC's ack_seq moves with every packet acknowledged, not only when a long message completes: its
            # reference window follows the ACKs once per RTT (sw.cc.hpcc), which a WRITE-long ack_seq never passes
            done = min(op.length, (psn_diff(psn, op.first_psn) + 1) * self.qp.attr.path_mtu)
            if done > op.acked:
                self.acked_bytes += done - op.acked
                op.acked = done
            new_una = psn_add(psn, 1)
            if psn_diff(new_una, self.una_psn) > 0:
                self.una_psn = new_una
                self._progress(now_ns)
            break
        if popped:
            self._after_pop(now_ns)
        if retry_read:
            self._go_back(self.una_psn)

    def _after_pop(self, now_ns: int) -> None:
        if self.head < len(self.ops):
            op = self.ops[self.head]
            self.una_psn = psn_add(op.first_psn, op.read_done)
        else:
            self.una_psn = self.next_psn
        if self.tx_idx < self.head or psn_diff(self.tx_psn, self.una_psn) < 0:
            self.tx_idx = self.head
            self.tx_psn = self.una_psn
        self._progress(now_ns)
        if self.head > 4096 and self.head * 2 > len(self.ops):
            del self.ops[: self.head]
            self.tx_idx -= self.head
            self._waiting_idx -= self.head
            self.head = 0

    def _progress(self, now_ns: int) -> None:
        """The oldest PSN moved: reset retries and back-off, restart (or stop) the timer, tell CC."""
        self.retries_left = self.qp.attr.retry_cnt
        self.rnr_retries_left = self.qp.attr.rnr_retry
        self.backoff = 0
        outstanding = psn_diff(self.max_sent_psn, self.una_psn) > 0
        self.timer_ns = now_ns + self._timeout_ns() if outstanding else None
        hops, self._ack_hops = self._ack_hops, ()
        self.qp.pacer.on_ack(self.acked_bytes, self.sent_bytes, now_ns, hops)

    def _go_back(self, psn: int) -> None:
        """Go-back-N: retransmit from ``psn`` (which lies in an uncompleted op)."""
        idx = self.head
        while idx < len(self.ops) and psn_diff(psn, self.ops[idx].first_psn) >= self.ops[idx].n_pkts:
            idx += 1
        if idx >= len(self.ops):
            return
        if psn_diff(psn, self.ops[idx].first_psn) < 0:
            psn = self.ops[idx].first_psn
        self.tx_idx = idx
        self.tx_psn = psn
        self.qp.counters.go_back_events += 1

    def _complete_head(self, status: WcStatus) -> None:
        op = self.ops[self.head]
        self.head += 1
        if op.wr.signaled or status != WcStatus.SUCCESS:
            self.qp.send_cq.push(
                WorkCompletion(op.wr.wr_id, status, wc_opcode_of(op.wr.opcode), self.qp.qp_num, op.length)
            )

    def _fail(self, status: WcStatus, op: _Op | None = None) -> None:
        """Complete the oldest op (or ``op``, a later one that failed locally, after the ops before it) with an
        error and move the QP to ERROR (which flushes the rest)."""
        while op is not None and self.head < len(self.ops) and self.ops[self.head] is not op:
            self._complete_head(WcStatus.WR_FLUSH_ERR)
        if self.head < len(self.ops):
            self._complete_head(status)
        self.qp.to_error()

    def flush(self) -> None:
        """QP went to ERROR: every remaining op completes with WR_FLUSH_ERR."""
        while self.head < len(self.ops):
            self._complete_head(WcStatus.WR_FLUSH_ERR)
        self.tx_idx = self.head
        self.timer_ns = None
