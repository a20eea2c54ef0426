"""The software RoCE NIC of one interface: verbs entry point (PD, CQ, QP), and the progress engine that
decodes received frames, dispatches them to QPs, sends CNPs on CE, fires retransmission timers and sends
paced frames.

The engine is single-threaded and driven by ``progress()``/``poll()``; all time comes from ``sw.clock``;
frames move through a port (an AF_PACKET socket, ``sw.roce.softnic.port``, or an in-memory wire for tests).
Lag accounting (``sw.clock.lag``): the pacers (send vs token schedule), the receive path (a frame serviced vs its
arrival, from the port's kernel receive stamps) and the reaction to congestion feedback (a CNP, or with HPCC an
INT-echo ACK, handed to the QP's rate model vs the arrival), each its own component.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sw.cc.base import CongestionControl
from sw.clock import Clock, get_clock
from sw.clock.lag import LagStats, mtu_serialization_ns, record_rx_batch, register
from sw.roce.softnic.pfc import NicPfc
from sw.roce.softnic.qp_pacer import make_cc, make_np
from sw.roce.transport.qp import QpCounters, QpState, QueuePair
from sw.roce.transport.verbs import CompletionQueue, ProtectionDomain, QpCap
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import NotRoceError, RoceFormatError
from sw.roce.wire.flow import ECN_CE
from sw.roce.wire.int_md import carries_int, strip_int
from sw.roce.wire.opcodes import Opcode

TX_BURST_FRAMES = 64  # frames sent per progress() before receiving again
RX_BURST_FRAMES = 256
# Token-bucket depth per QP: large enough to ride out a few ms of scheduling delay of this Python process on a
# busy host without losing link time, small enough for a tbf/emulator queue to absorb the burst.
DEFAULT_PACER_BURST_BYTES = 64 * 1024
# HPCC's T (its window is line rate x T): the base RTT of the path.  A Python host stack over veths has an RTT
# of about a millisecond, far from a NIC's microseconds; set it to the fabric's RTT where that is known.
DEFAULT_BASE_RTT_NS = 1_000_000
RX_CHECKED = 1
"""A port's verdict (``rx_checked``, the native port) that C verified a frame's IPv4 checksum and ICRC."""
FIRST_QPN = 0x11  # QPNs below it are reserved (QP0/QP1 and the low range verbs keep back)
MAX_QPN = (1 << 24) - 1


class FramePort(Protocol):
    """Where frames enter and leave a NIC.  A port that knows when the kernel received a batch's first and last
    frame (CLOCK_REALTIME ns) says so in ``rx_first_ts_ns``/``rx_last_ts_ns`` after ``recv_batch`` (0 or
    absent: unknown), and the NIC accounts its receive lateness from them."""

    def send(self, frame: bytes) -> None: ...

    def recv_batch(self, max_frames: int) -> list[bytes]: ...

    def wait(self, timeout_ns: int) -> None:
        """Block until a frame may be readable or ``timeout_ns`` of wall time passed."""


def send_frames(port: FramePort, frames: list[bytes]) -> None:
    """Put ``frames`` on ``port`` in order: in one batch where it has ``send_batch`` (the native port's sendmmsg),
    else one ``send`` each (the Python reference and the other frame ports)."""
    send_batch = getattr(port, "send_batch", None)
    if send_batch is not None:
        send_batch(frames)
        return
    send = port.send
    for frame in frames:
        send(frame)


@dataclass
class NicCounters:
    """Every received frame counts once: taken by a QP, by PFC, or dropped (no QP, not RoCE, malformed by reason):
    ``rx_frames == qp_frames + pfc_frames + unknown_qp_frames + non_roce_frames + malformed_frames``."""

    rx_frames: int = 0
    tx_frames: int = 0
    qp_frames: int = 0  # handed to a QP (data, ACK, CNP)
    pfc_frames: int = 0  # PFC frames consumed by the NIC's PFC (any priority)
    non_roce_frames: int = 0
    malformed_frames: int = 0
    unknown_qp_frames: int = 0
    int_frames: int = 0  # frames that arrived with an INT stack (stripped; the hops go to the QP)
    cnps_sent: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)  # RoceFormatError.kind -> frames (not_roce too)


class SoftNic:
    """One RoCEv2 NIC: owns the QP table of its interface (``mac``/``ip``) and moves their frames.

    Open one on an interface with ``sw.roce.softnic.port.open_device`` (ibv_open_device).  Verbs: ``alloc_pd``,
    ``create_cq``, ``create_qp``, ``destroy_qp``, ``close``.  The engine runs only when called: ``poll()`` (one
    round, then wait briefly for a frame or a timer) or ``run_until(done, timeout_ns)``; call one of them while
    waiting for completions, and keep calling on a passive side so it answers the peer's WRITEs and READs.
    ``qp_counters()`` and ``counters`` explain every retransmission and dropped frame.
    """

    def __init__(
        self,
        port: FramePort,
        *,
        mac: str,
        ip: str,
        line_rate_bps: int,
        cc: str = "none",
        clock: Clock | None = None,
        cc_factory: Callable[[int], CongestionControl] | None = None,
        pacer_burst_bytes: int = DEFAULT_PACER_BURST_BYTES,
        base_rtt_ns: int = DEFAULT_BASE_RTT_NS,
        pfc_priority: int | None = None,
        pfc_rx_xoff_frames: int = 0,
        pfc_rx_xon_frames: int = 0,
        first_qpn: int = FIRST_QPN,
    ) -> None:
        if not FIRST_QPN <= first_qpn <= MAX_QPN:
            raise ValueError(f"first QPN {first_qpn:#x}: allowed {FIRST_QPN:#x}..{MAX_QPN:#x}")
        self.port = port
        self.mac = mac
        self.ip = ip
        self.clock = clock or get_clock()
        self.line_rate_bps = line_rate_bps
        self.cc_name = cc
        self.base_rtt_ns = base_rtt_ns
        make_cc(cc, line_rate_bps, base_rtt_ns=base_rtt_ns)  # validate the name and rate now
        self._cc_factory = cc_factory
        self.pacer_burst_bytes = pacer_burst_bytes
        self.qps: dict[int, QueuePair] = {}
        self._next_qpn = first_qpn  # a second NIC process on the same interface takes its own range
        self.np = make_np()  # CNP spacing of the host's DCQCN (sw.roce.softnic.qp_pacer)
        self.counters = NicCounters()
        # how late the pacers of this NIC's QPs sent frames vs their token schedules (sw.clock.lag), how late the
        # receive path serviced frames vs their arrival, and how late congestion feedback reached the rate models
        bound_ns = mtu_serialization_ns(line_rate_bps)
        self.lag = register(f"nic {ip} pacer", LagStats(bound_ns))
        self.rx_lag = register(f"nic {ip} rx", LagStats(bound_ns))
        self.reaction_lag = register(f"nic {ip} cc reaction", LagStats(bound_ns))
        self._int_reaction = cc == "hpcc"     # INT-echo ACKs move the rate only under HPCC
        # PFC (sw.roce.softnic.pfc): honour pauses of the priority we send on; pause the switch on a receive backlog
        self.pfc = None if pfc_priority is None else NicPfc(
            mac=mac, line_rate_bps=line_rate_bps, send=port.send, priority=pfc_priority,
            rx_xoff_frames=pfc_rx_xoff_frames, rx_xon_frames=pfc_rx_xon_frames)

    # --- verbs ---------------------------------------------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        """ibv_alloc_pd: a protection domain to register memory in and create QPs with."""
        return ProtectionDomain()

    def create_cq(self, depth: int = 1 << 16) -> CompletionQueue:
        """ibv_create_cq: a completion queue holding up to ``depth`` entries."""
        return CompletionQueue(depth)

    def create_qp(
        self,
        pd: ProtectionDomain,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue | None = None,
        cap: QpCap | None = None,
    ) -> QueuePair:
        """ibv_create_qp; ``cap`` bounds the SGEs per work request (default ``QpCap()``)."""
        qpn = self._next_qpn
        self._next_qpn += 1
        qp = QueuePair(self, pd, send_cq, recv_cq or send_cq, qpn, cap)
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        """ibv_destroy_qp: the QP leaves the NIC's table (its frames are no longer received or sent)."""
        self.qps.pop(qp.qp_num, None)

    def close(self) -> None:
        """ibv_close_device: release the port (its socket); the NIC moves no frames afterwards."""
        self.qps.clear()
        close = getattr(self.port, "close", None)
        if close is not None:
            close()

    def new_cc(self) -> CongestionControl:
        """A fresh CC model for a QP entering RTR."""
        now_ns = self.clock.now_ns()
        if self._cc_factory is not None:
            return self._cc_factory(now_ns)
        return make_cc(self.cc_name, self.line_rate_bps, now_ns, base_rtt_ns=self.base_rtt_ns)

    def qp_counters(self) -> dict[str, int]:
        """Sum of every QP's counters."""
        total = QpCounters()
        for qp in self.qps.values():
            for f in dataclasses.fields(QpCounters):
                setattr(total, f.name, getattr(total, f.name) + getattr(qp.counters, f.name))
        return total.as_dict()

    # --- engine --------------------------------------------------------------------------------------------
    def progress(self) -> bool:
        """One round: receive a burst, fire due timers, send a burst; True if anything happened."""
        did = self._receive()
        now_ns = self.clock.now_ns()
        for qp in self.qps.values():
            deadline = qp.timer_deadline_ns()
            if deadline is not None and deadline <= now_ns:
                qp.on_timer(now_ns)
                did = True
        return self._transmit(now_ns) or did

    def _receive(self) -> bool:
        """One receive burst: every frame to PFC, its QP (data, ACK, CNP) or a drop counter; the burst's
        lateness (``rx_lag``) and each feedback reaction's (``reaction_lag``) when the port stamps arrivals."""
        port = self.port
        frames = port.recv_batch(RX_BURST_FRAMES)
        if not frames:
            if self.pfc is not None and self.pfc.xoff:    # drained while the port we paused sends nothing
                self.pfc.on_rx_idle(self.clock.now_ns())
            return False
        clock = self.clock
        now_ns = clock.now_ns()
        first_ts = getattr(port, "rx_first_ts_ns", 0)
        last_ts = getattr(port, "rx_last_ts_ns", 0) if first_ts else 0
        # A reaction's lateness is taken from the burst's first arrival: exact for a CNP that came first or
        # alone, else an upper bound by the burst's arrival spread (the per-frame stamps are not read: cost).
        reaction = self.reaction_lag if last_ts else None
        int_reaction = reaction if self._int_reaction else None
        counters = self.counters
        qps = self.qps
        pfc = self.pfc
        if pfc is not None:
            pfc.on_rx_burst(len(frames), now_ns)
        # the native port (sw.roce.softnic.native_port) checked IPv4 checksum + ICRC of plain IPv4 frames in C
        checked = getattr(port, "rx_checked", b"")
        for i, frame in enumerate(frames):
            counters.rx_frames += 1
            hops = None
            try:
                if checked and checked[i] == RX_CHECKED:
                    pkt = decode(frame, check_icrc=False)
                    pkt.icrc_ok = True
                else:
                    if pfc is not None and frame[12:14] == b"\x88\x08" and pfc.on_frame(frame, now_ns):
                        counters.pfc_frames += 1
                        continue
                    if carries_int(frame):
                        frame, hops = strip_int(frame)  # the fabric left INT for us: HPCC's input
                    pkt = decode(frame)
            except RoceFormatError as exc:  # the one error every parser raises on bad bytes: count and drop
                if isinstance(exc, NotRoceError):
                    counters.non_roce_frames += 1
                else:
                    counters.malformed_frames += 1
                reasons = counters.drop_reasons
                reasons[exc.kind] = reasons.get(exc.kind, 0) + 1
                continue
            if hops is not None:
                counters.int_frames += 1
            qp = qps.get(pkt.dest_qp)
            if qp is None:
                counters.unknown_qp_frames += 1
                continue
            counters.qp_frames += 1
            if pkt.opcode == Opcode.CNP:
                qp.on_cnp(now_ns)
                if reaction is not None:          # the cut rate is in effect from here
                    reaction.record(clock.net_age_ns(first_ts))
                continue
            if pkt.ecn == ECN_CE and self.np.on_packet(pkt.dest_qp, True, now_ns):
                qp.cnp_pending = True
                counters.cnps_sent += 1
            if hops is not None:
                qp.int_hops_rx = hops
            qp.on_packet(pkt, now_ns)
            if int_reaction is not None and hops is not None and hops.echoed:
                int_reaction.record(clock.net_age_ns(first_ts))
        if last_ts:                               # every frame of the burst serviced by now
            record_rx_batch(self.rx_lag, clock, len(frames), first_ts, last_ts)
        return True

    def _transmit(self, now_ns: int) -> bool:
        if self.pfc is not None and self.pfc.tx_paused(now_ns):
            # A paused link is not a backlog for the pacers to catch up on: without this, every QP leaves a
            # pause with a full bucket and its burst crosses the switch's XOFF again at once.
            for qp in self.qps.values():
                if qp.pacer is not None:
                    qp.pacer.mark_idle()
            return False
        out: list[bytes] = []
        active = [qp for qp in self.qps.values() if qp.state != QpState.RESET]
        while active and len(out) < TX_BURST_FRAMES:
            still = []
            for qp in active:
                frame = qp.next_frame(now_ns)
                if frame is not None:
                    out.append(frame)
                    still.append(qp)
            active = still
        if out:
            send_frames(self.port, out)   # the native port: the pass's frames in one sendmmsg
        self.counters.tx_frames += len(out)
        return bool(out)

    def next_deadline_ns(self) -> int | None:
        """Earliest network time at which a timer fires or a paced QP may send again."""
        pfc = self.pfc
        paused_until = pfc.paused_until_ns if pfc is not None and pfc.paused_until_ns > self.clock.now_ns() else None
        times = [t for qp in self.qps.values()                  # pacing waits for the pause
                 for t in (qp.timer_deadline_ns(), None if paused_until else qp.wake_ns) if t is not None]
        if paused_until:
            times.append(paused_until)
        return min(times, default=None)

    def poll(self, max_wait_ns: int = 1_000_000) -> bool:
        """``progress()``; if idle, wait for a frame or the next deadline (at most ``max_wait_ns``)."""
        if self.progress():
            return True
        now_ns = self.clock.now_ns()
        deadline = self.next_deadline_ns()
        wait_ns = max_wait_ns if deadline is None else min(max_wait_ns, deadline - now_ns)
        if wait_ns > 0:
            self.port.wait(int(self.clock.wall_duration_ns(wait_ns)))
        return False

    def run_until(self, done: Callable[[], bool], timeout_ns: int) -> bool:
        """Drive the engine until ``done()`` or ``timeout_ns`` of network time passed; returns ``done()``."""
        end_ns = self.clock.now_ns() + timeout_ns
        while not done():
            if self.clock.now_ns() >= end_ns:
                return done()
            self.poll(min(1_000_000, max(1, end_ns - self.clock.now_ns())))
        return True
