"""RC queue pair: the RESET -> INIT -> RTR -> RTS state machine, its attributes and counters, and the glue
that routes packets to the requester or responder half and picks the next frame to send (ACKs first, then
paced data).  Deterministic: the NIC engine passes time in and takes frames out.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from sw.roce.softnic.qp_pacer import QpPacer
from sw.roce.transport.requester import Requester
from sw.roce.transport.responder import Responder
from sw.roce.transport.rules import PATH_MTUS, TO_REQUESTER, ack_timeout_ns
from sw.roce.transport.verbs import (
    MAX_QP_INIT_RD_ATOM,
    MAX_QP_RD_ATOM,
    CompletionQueue,
    ProtectionDomain,
    QpCap,
    RecvWr,
    SendWr,
    VerbsError,
    query_device,
)
from sw.roce.wire.decode import RocePacket
from sw.roce.wire.flow import DSCP_ROCE_DEFAULT, Flow
from sw.roce.wire.gid import GidError, ip_of_gid, ip_version
from sw.roce.wire.int_md import IntHopRecord
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import FlowTemplates

if TYPE_CHECKING:
    from sw.roce.softnic.nic import SoftNic


class QpState(IntEnum):
    """ibv_qp_state, the states an RC QP moves through."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


_NEXT = {QpState.RESET: QpState.INIT, QpState.INIT: QpState.RTR, QpState.RTR: QpState.RTS}


@dataclass
class QpAttr:
    """QP attributes (ibv_qp_attr names); the remote address fields are set on INIT -> RTR."""

    path_mtu: int = 1024
    dest_qp_num: int = 0
    dest_mac: str = "00:00:00:00:00:00"
    dest_ip: str = "0.0.0.0"
    rq_psn: int = 0
    sq_psn: int = 0
    timeout: int = 14  # local ACK timeout 4.096 us * 2^14 = 67 ms
    retry_cnt: int = 7
    rnr_retry: int = 7  # 7 = infinite
    min_rnr_timer: int = 12  # 0.64 ms
    max_inflight_pkts: int = 1024  # send window in packets (our NIC's outstanding-PSN limit)
    ack_every_pkts: int = 16  # AckReq on every n-th packet of a long message (and on every last packet)
    # RDMA READ / atomic requests this QP may have outstanding as requester (initiator depth, set on RTR -> RTS;
    # at most the peer's max_dest_rd_atomic), and those it serves at once as responder (responder resources, set
    # on INIT -> RTR; also the depth of the atomic replay cache).
    max_rd_atomic: int = MAX_QP_INIT_RD_ATOM
    max_dest_rd_atomic: int = MAX_QP_RD_ATOM
    traffic_class: int = DSCP_ROCE_DEFAULT << 2  # GRH traffic class: DSCP in bits 7..2 (PFC class); ECN is the NIC's

    def check(self) -> None:
        """VerbsError naming the first attribute out of its range."""
        if self.path_mtu not in PATH_MTUS:
            raise VerbsError(f"path_mtu={self.path_mtu}: must be one of {', '.join(map(str, PATH_MTUS))}")
        for name, lo, hi in (
            ("dest_qp_num", 0, 0xFFFFFF),
            ("rq_psn", 0, 0xFFFFFF),
            ("sq_psn", 0, 0xFFFFFF),
            ("timeout", 1, 31),
            ("retry_cnt", 0, 7),
            ("rnr_retry", 0, 7),
            ("min_rnr_timer", 0, 31),
            ("max_inflight_pkts", 1, 1 << 22),
            ("ack_every_pkts", 1, 1 << 16),
            ("traffic_class", 0, 255),
        ):
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise VerbsError(f"modify_qp {name}={value}: must be {lo}..{hi}")
        dev = query_device()
        for name, cap_name in (("max_rd_atomic", "max_qp_init_rd_atom"), ("max_dest_rd_atomic", "max_qp_rd_atom")):
            value, cap = getattr(self, name), getattr(dev, cap_name)
            if not isinstance(value, numbers.Integral) or not 0 <= value <= cap:
                raise VerbsError(f"modify_qp {name}={value!r}: must be 0..{cap} (device {cap_name})")


@dataclass
class QpCounters:
    """Per-QP packet counters: every retransmission and drop is explained by one of these."""

    tx_packets: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    retransmitted_packets: int = 0
    go_back_events: int = 0
    timeouts: int = 0
    acks_sent: int = 0
    acks_coalesced: int = 0
    acks_received: int = 0
    stale_acks: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    rnr_naks_sent: int = 0
    rnr_naks_received: int = 0
    duplicates_received: int = 0
    out_of_sequence_received: int = 0
    duplicate_responses: int = 0
    stale_responses: int = 0
    malformed_responses: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    atomics_executed: int = 0  # responder: atomics run on local memory (each exactly once)
    atomic_replays: int = 0  # responder: retransmitted atomics answered from the replay cache
    # The two *_peak counters are per QP (SoftNic.qp_counters adds QPs up: read them from one QP's counters).
    rd_atomic_peak: int = 0  # requester: most RDMA READ / atomic requests outstanding at once (<= max_rd_atomic)
    rd_atomic_waits: int = 0  # requester: READs / atomics (or fenced requests) held in the send queue by the limit
    dest_rd_atomic_peak: int = 0  # responder: most responder resources in use at once (<= max_dest_rd_atomic)
    rd_atomic_over_limit: int = 0  # responder: new READs / atomics beyond max_dest_rd_atomic (NAK invalid request)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class QueuePair:
    """One reliable-connected QP of a NIC (``SoftNic.create_qp``), created in RESET.

    State machine (``modify``, ibv_modify_qp): RESET -> INIT -> RTR (ready to receive: the peer's ``dest_qp_num``,
    ``dest_mac``, ``dest_ip``/GID, ``path_mtu``, ``rq_psn``, ``max_dest_rd_atomic``) -> RTS (ready to send:
    ``sq_psn``, ``timeout``, ``retry_cnt``, ``rnr_retry``, ``max_rd_atomic``); any state -> ERROR (flushes the
    queued work requests with WR_FLUSH_ERR) or -> RESET.  ``sw.roce.transport.qp_connect.connect`` walks the three steps
    from the peer's ``qp_info``.  ``post_recv`` needs RTR or RTS, ``post_send`` needs RTS; completions go to
    ``send_cq`` / ``recv_cq``.  Attributes: ``qp_num``, ``state``, ``attr`` (``QpAttr``), ``counters``.
    """

    def __init__(
        self,
        nic: SoftNic,
        pd: ProtectionDomain,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
        qp_num: int,
        cap: QpCap | None = None,
    ) -> None:
        self.nic = nic
        self.cap = cap or QpCap()
        self.pd = pd
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.qp_num = qp_num
        self.state = QpState.RESET
        self.attr = QpAttr()
        self.counters = QpCounters()
        self.templates: FlowTemplates | None = None
        self.pacer: QpPacer | None = None
        self.req: Requester | None = None
        self.resp: Responder | None = None
        self.ack_timeout_ns = ack_timeout_ns(self.attr.timeout)
        self.cnp_pending = False
        self.wake_ns: int | None = None  # when the pacer or an RNR wait lets us send again
        # Latest INT stack the fabric left on a packet to this QP (the forward path of the peer's traffic);
        # HPCC needs it echoed to the peer, which waits for an INT-echo format in the wire layer.
        self.int_hops_rx: list[IntHopRecord] | None = None

    # --- state machine -------------------------------------------------------------------------------------
    def modify(self, state: QpState, **attrs: int | str) -> None:
        """ibv_modify_qp: move to ``state`` (the next state, ERROR or RESET), setting ``attrs`` on the way."""
        if state not in (QpState.ERROR, QpState.RESET) and _NEXT.get(self.state) != state:
            raise VerbsError(
                f"modify_qp: {self.state.name} -> {QpState(state).name} is not a valid transition"
            )
        new_attr = dataclasses.replace(self.attr)
        for name, value in attrs.items():
            if not hasattr(new_attr, name):
                raise VerbsError(f"modify_qp: unknown attribute {name!r}")
            setattr(new_attr, name, value)
        if "max_dest_rd_atomic" in attrs and state == QpState.RTS:
            raise VerbsError(
                "modify_qp max_dest_rd_atomic: responder resources are set on INIT -> RTR, not on RTR -> RTS"
            )
        new_attr.check()
        self.attr = new_attr
        self.ack_timeout_ns = ack_timeout_ns(new_attr.timeout)
        if state == QpState.INIT:
            self.resp = None
        elif state == QpState.RTR:
            flow = self._flow(new_attr)
            self.templates = FlowTemplates(flow)
            self.pacer = QpPacer(
                self.nic.new_cc(), self.nic.clock.now_ns(), burst_bytes=self.nic.pacer_burst_bytes,
                lag=self.nic.lag,
            )
            self.resp = Responder(self, new_attr.rq_psn)
        elif state == QpState.RTS:
            self.req = Requester(self, new_attr.sq_psn)
        elif state == QpState.ERROR:
            self.to_error()
            return
        elif state == QpState.RESET:
            self.req = self.resp = None
            self.templates = self.pacer = None
        self.state = state

    def _flow(self, attr: QpAttr) -> Flow:
        """The connection's addressing; ``dest_ip`` may be a GID (IPv6, or IPv4-mapped for an IPv4 peer)."""
        try:
            dest_ip = ip_of_gid(attr.dest_ip)
        except GidError as exc:
            raise VerbsError(f"modify_qp dest_ip={attr.dest_ip!r}: {exc}") from None
        if ip_version(dest_ip) != ip_version(self.nic.ip):
            raise VerbsError(
                f"modify_qp dest_ip={attr.dest_ip}: IPv{ip_version(dest_ip)} peer, but this NIC's address "
                f"{self.nic.ip} is IPv{ip_version(self.nic.ip)} (open both ends with the same family)"
            )
        try:
            return Flow(self.nic.mac, attr.dest_mac, self.nic.ip, dest_ip, self.qp_num, attr.dest_qp_num,
                        dscp=attr.traffic_class >> 2)
        except ValueError as exc:
            raise VerbsError(f"modify_qp: {exc}") from None

    def to_error(self) -> None:
        """Enter ERROR: flush both queues with WR_FLUSH_ERR (a pending NAK still goes out)."""
        self.state = QpState.ERROR
        if self.req is not None:
            self.req.flush()
        if self.resp is not None:
            self.resp.flush()

    # --- verbs ---------------------------------------------------------------------------------------------
    def post_send(self, wr: SendWr) -> None:
        """ibv_post_send: queue a SEND, RDMA WRITE/READ or atomic (``SendWr``); its completion goes to ``send_cq``
        if ``wr.signaled``.  VerbsError unless in RTS, or for a bad SGE / opcode."""
        if self.state != QpState.RTS or self.req is None:
            raise VerbsError(f"post_send on QP {self.qp_num} in state {self.state.name}: needs RTS")
        self.req.post(wr)

    def post_recv(self, wr: RecvWr) -> None:
        """ibv_post_recv: a buffer for the next incoming SEND (completion on ``recv_cq``); needs RTR or RTS."""
        if self.state not in (QpState.RTR, QpState.RTS) or self.resp is None:
            raise VerbsError(f"post_recv on QP {self.qp_num} in state {self.state.name}: needs RTR or RTS")
        self.resp.post_recv(wr)

    # --- engine interface ----------------------------------------------------------------------------------
    def on_packet(self, pkt: RocePacket, now_ns: int) -> None:
        """Engine: a decoded packet for this QP (to the requester or the responder half)."""
        self.counters.rx_packets += 1
        if self.state not in (QpState.RTR, QpState.RTS):
            return
        if pkt.opcode in TO_REQUESTER:
            if self.req is None:
                return
            if pkt.opcode == Opcode.ACKNOWLEDGE:
                self.req.on_ack(pkt, now_ns)
            elif pkt.opcode == Opcode.ATOMIC_ACKNOWLEDGE:
                self.req.on_atomic_ack(pkt, now_ns)
            else:
                self.req.on_read_response(pkt, now_ns)
        elif self.resp is not None:
            self.resp.on_request(pkt, now_ns)

    def on_cnp(self, now_ns: int) -> None:
        """Engine: a CNP arrived for this QP (its congestion control slows the pacer)."""
        self.counters.cnps_received += 1
        if self.pacer is not None:
            self.pacer.on_cnp(now_ns)

    def timer_deadline_ns(self) -> int | None:
        """Engine: when the retransmission / RNR timer fires next (network ns), or None."""
        return self.req.timer_ns if self.req is not None and self.state == QpState.RTS else None

    def on_timer(self, now_ns: int) -> None:
        """Engine: the timer fired (retransmit from the oldest unacknowledged PSN)."""
        if self.req is not None and self.state == QpState.RTS:
            self.req.on_timer(now_ns)

    def next_frame(self, now_ns: int) -> bytes | None:
        """The next frame to send now, or None (then ``wake_ns`` says when to ask again, if pacing blocks)."""
        self.wake_ns = None
        tpl = self.templates
        if tpl is None:
            return None
        if self.cnp_pending:
            self.cnp_pending = False
            self.counters.cnps_sent += 1
            return self._count(tpl[Opcode.CNP].build(0))
        resp = self.resp
        if resp is not None and resp.out:
            if resp.next_is_ack():
                return self._count(resp.build_next()[0])
            if self.state != QpState.ERROR:
                return self._paced(now_ns, lambda: resp.build_next()[0])
        if self.state != QpState.RTS:
            return None
        req = self.req
        if req is None or not req.can_send(now_ns):
            if req is not None:
                self.wake_ns = req.blocked_until_ns(now_ns)
            if self.pacer is not None:
                self.pacer.mark_idle()
            return None
        return self._paced(now_ns, lambda: req.build_next(now_ns))

    def _paced(self, now_ns: int, build: Callable[[], bytes | None]) -> bytes | None:
        pacer = self.pacer
        assert pacer is not None
        if not pacer.may_send(now_ns):
            self.wake_ns = pacer.next_send_ns(now_ns)
            return None
        frame = build()
        if frame is None:  # the work request failed locally (LOC_PROT_ERR): nothing goes out
            return None
        pacer.charge(len(frame), now_ns)
        return self._count(frame)

    def _count(self, frame: bytes) -> bytes:
        self.counters.tx_packets += 1
        self.counters.tx_bytes += len(frame)
        return frame
