"""Inter-server transport over RoCEv2 RC queue pairs (``sw.roce``) on the rank's rail NIC: one QP per remote peer.

Each peer's messages form a framed stream (``StreamChannel``) carried by signalled SENDs of up to ``SLOT_BYTES``
(``SendBudget.send_bytes``: two fit a peer's in-flight share) from registered send slots into the peer's
pre-posted receive slots.  Credit flow control: a sender posts a
SEND only while the receiver has a receive posted for it; the receiver returns credits by RDMA-writing its
cumulative count of posted receives into an 8-byte word of the sender's registered credit array, so credit
updates never consume receives.  The NIC engine is single-threaded and advanced by ``progress()``: inside a
collective by the waiting rank, between collectives by the communicator's worker (``host_progress``), so a rank
that computes still acknowledges, returns credits and puts its last paced frames on the wire.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from sw.clock import Clock, get_clock
from sw.roce.softnic.native_port import open_port
from sw.roce.softnic.nic import SoftNic, send_frames
from sw.roce.softnic.pfc import NicPfc
from sw.roce.softnic.port import (
    ROCE_HEADROOM_BYTES,
    NicPortError,
    RawSocketPort,
    env_pfc_options,
    path_mtu_for,
)
from sw.roce.softnic.route import RouteError, interface_of, next_hop_mac
from sw.roce.transport.qp import QueuePair
from sw.roce.transport.qp_connect import connect, qp_info, random_psn
from sw.roce.transport.rules import ack_timeout_ns
from sw.roce.transport.verbs import Access, RecvWr, SendWr, WcStatus, WrOpcode
from sw.units import ETH_WIRE_OVERHEAD_BYTES

from ..config import ROCE_CCS
from ..deadline import Deadline
from ..errors import CollectiveTimeoutError, CollectiveUserError, PeerGoneError
from ..store import CollectiveStore
from .base import ChannelTransport, StreamChannel

SLOT_BYTES = 16 * 1024
"""Bytes of one SEND (one receive slot): 4 frames at a 4096 path MTU, so the NIC's in-flight budget holds several
SENDs and completions free it while the next ones are on the wire (a budget of one SEND is stop-and-wait)."""
RECV_SLOTS = 128
"""Receives kept posted per peer (the credits a sender starts with): 2 MiB, several RTTs at a rail's rate."""
SEND_SLOTS = 128
CREDIT_BATCH = 32
"""Receives re-posted before the count is written back to the sender (must not exceed ``RECV_SLOTS``)."""
DEFAULT_LINE_RATE_BPS = 10_000_000_000
WIRE_BURST_FRAMES = 16
"""Full frames the wire may send back to back after an idle spell: a quarter of a 64-packet switch queue, so a
rank that was descheduled does not overrun the first queue when it wakes (64 KiB at a 4096-byte path MTU)."""
INFLIGHT_FRAMES = 12
"""Unacknowledged SEND frames over all peers of one NIC, at least (one more SEND may start below the limit): this
bounds what a NIC can have in a switch queue, so the three senders of a 4-server rail all-to-all (3 x 16 frames)
plus the ACKs and credit writes fit a 64-packet queue before DCQCN has reacted."""
BUDGET_PEERS = 2
"""The NIC's in-flight budget is this many peers' worth (each peer's own share stays at most one peer's budget):
a receiver that is slow to acknowledge (its process descheduled) then holds back only its own share while the
other peers' SENDs go on, and no receiver sees more than one peer's budget from any sender."""
INFLIGHT_RTT_WALL_S = 0.010
"""Wall-time round trip of this Python stack (scheduling included); the budget also covers one such round trip
at line rate in network time (rate x RTT / dilation), so an undilated fast link is not held back by the frames."""
ROUND_SLOTS = 1
"""SENDs a channel may post per turn of the transport's round robin over its peers: the wire budget goes to the
peers in turn (as a NIC's QP arbiter does), not all to the first peer with a backlog.  Serving peers in rank
order made every sender of an all-to-all pour into the same lowest-ranked receiver first (an N-to-1 incast
while the other receivers idled)."""
ACK_TIMEOUT_WALL_FLOOR_S = 0.5
"""The QPs' local ACK timeout is never shorter than this in wall time: shorter ones turned scheduling stalls of
Python ranks on a busy host into spurious go-back-N resends (a gap in the data is NAKed by the receiver at once;
the timeout only covers a lost tail or a lost last ACK).  A rank busy in its own code still answers: the
communicator's worker progresses the NIC between calls."""
ACK_TIMEOUT_NET_FLOOR_NS = 64_000_000
"""Nor shorter than 64 ms of network time (IBTA timeout 14, a common RoCE setting), as the timer must outlast the
queueing delay of a slow link: a cut link or a slowed NIC queues tens of ms of frames, and a timer shorter than
that resends whole windows that were only queued (at a dilation of 192 a 1 ms floor, 4.2 ms, made every degraded
link and slow NIC of the 50-fault campaign look lossy).  Capped by ``ACK_TIMEOUT_WALL_CEILING_S`` of wall time at
a high dilation."""
ACK_TIMEOUT_WALL_CEILING_S = 15.0
"""A lost tail must be resent well within the communicator's timeout (60 s wall without progress by default):
one timeout and a doubled second fit in it."""


QP_TIMEOUT_MAX = 17
"""The longest timeout the collectives use (0.54 s of network time), undilated and when network time runs faster
than wall time (a dead peer's QP then still gives up within ~10 s wall)."""


def qp_timeout_for(dilation: float) -> int:
    """The QP attribute ``timeout`` (4.096 us * 2^t of network time) for a run at ``dilation``: the shortest that
    clears the network floor, shortened while it exceeds the wall ceiling, lengthened while under the wall floor,
    at most ``QP_TIMEOUT_MAX``.  Undilated that is 17 (0.54 s); at a dilation of 192 it is 14 (67 ms of network time,
    12.9 s wall).  A timeout fixed in network time grows with the dilation in wall time: 0.54 s at 192 is 103 s
    wall, longer than the communicator's own timeout, so one lost tail on a lossy link killed the job."""
    timeout = 1
    while ack_timeout_ns(timeout) < ACK_TIMEOUT_NET_FLOOR_NS:     # 14 (67 ms), below QP_TIMEOUT_MAX
        timeout += 1
    while timeout > 1 and ack_timeout_ns(timeout) * dilation > ACK_TIMEOUT_WALL_CEILING_S * 1e9:
        timeout -= 1
    # network time faster than wall: lengthened toward the wall floor, but never past what it always was
    while ack_timeout_ns(timeout) * dilation < ACK_TIMEOUT_WALL_FLOOR_S * 1e9 and timeout < QP_TIMEOUT_MAX:
        timeout += 1
    return timeout


DRAIN_WALL_S = 60.0
"""Longest wall wait in ``close`` for our last SENDs to be acknowledged (``connect`` uses the communicator's
timeout): a SEND completes once staged, so a rank that closes at once still owes its peers the tail, and on a
lossy link the tail may need retransmission timeouts.  Channels whose QP failed are not waited for."""
_KIND_SEND, _KIND_RECV = 1, 2
_SLOT_BITS = 16
_KIND_BITS = 4


def _wr_id(kind: int, peer: int, slot: int) -> int:
    return (peer << (_SLOT_BITS + _KIND_BITS)) | (kind << _SLOT_BITS) | slot


def _split_wr_id(wr_id: int) -> tuple[int, int, int]:
    return (wr_id >> _SLOT_BITS) & ((1 << _KIND_BITS) - 1), wr_id >> (_SLOT_BITS + _KIND_BITS), \
        wr_id & ((1 << _SLOT_BITS) - 1)


class WirePort:
    """The NIC's one wire at ``rate_bps``: frames of every QP leave in order through a token bucket (network time).

    Adapter around ``sw.roce``'s port: its NIC paces each QP on its own at line rate, so several active QPs
    would together leave at a multiple of it and overrun the first switch queue; a real NIC's port serializes
    them.  Frames wait here (bounded by the transport's in-flight budget) instead of being dropped downstream.
    PFC (``$STARPULSE_NIC_PFC``): a pause of the NIC's priority, as its ``NicPfc`` (``sw.roce.softnic.pfc``) took and
    counts it, holds the queued frames too, without earning tokens; our own PFC frames leave at once.
    """

    def __init__(self, port: RawSocketPort, rate_bps: int, clock: Clock) -> None:
        self.port = port
        self.mac, self.ip, self.mtu, self.counters = port.mac, port.ip, port.mtu, port.counters
        self.clock = clock
        self.rate_bps = rate_bps
        self._bytes_per_ns = rate_bps / 8e9
        self.burst_bytes = WIRE_BURST_FRAMES * (14 + min(port.mtu, path_mtu_for(port.mtu) + ROCE_HEADROOM_BYTES)
                                                + ETH_WIRE_OVERHEAD_BYTES)
        self._tokens = float(self.burst_bytes)
        self._last_ns = clock.now_ns()
        self._queue: deque[bytes] = deque()
        self.pfc: NicPfc | None = None   # the NIC's PFC state, once the SoftNic exists (None: PFC off)

    def set_rate_bps(self, rate_bps: int) -> None:
        """Pace the port at ``rate_bps`` from now on (a rate-limited NIC: the fault injector's ``slow_nic``)."""
        self.drain()
        self.rate_bps = rate_bps
        self._bytes_per_ns = rate_bps / 8e9

    def _sent_at_once(self, frame: bytes) -> bool:
        """MAC control (the NIC's PFC) is not paced: the MAC sends it at once, paused or not."""
        if frame[12:14] == b"\x88\x08":
            self.port.send(frame)
            return True
        return False

    def send(self, frame: bytes) -> None:
        if self._sent_at_once(frame):
            return
        self._queue.append(frame)
        self.drain()

    def send_batch(self, frames: list[bytes]) -> None:
        """``send`` of each frame in order, the queue drained once (one sendmmsg on the native port)."""
        for frame in frames:
            if not self._sent_at_once(frame):
                self._queue.append(frame)
        self.drain()

    def drain(self) -> bool:
        """Put queued frames on the wire as far as the tokens allow; True if any left."""
        if not self._queue:
            return False
        now_ns = self.clock.now_ns()
        if self.pfc is not None and self.pfc.tx_paused(now_ns):
            self._last_ns = now_ns           # a paused link earns no burst to catch up with
            return False
        self._tokens = min(float(self.burst_bytes), self._tokens + (now_ns - self._last_ns) * self._bytes_per_ns)
        self._last_ns = now_ns
        out = []
        while self._queue and self._tokens >= len(self._queue[0]) + ETH_WIRE_OVERHEAD_BYTES:
            frame = self._queue.popleft()
            self._tokens -= len(frame) + ETH_WIRE_OVERHEAD_BYTES
            out.append(frame)
        if out:
            send_frames(self.port, out)     # the native port (sw.roce.softnic.native_port): one sendmmsg
        return bool(out)

    def ready_in_ns(self) -> float | None:
        """Network ns until the next queued frame may leave (None: nothing queued)."""
        if not self._queue:
            return None
        if self.pfc is not None and self.pfc.paused_until_ns:
            paused_ns = self.pfc.paused_until_ns - self.clock.now_ns()
            if paused_ns > 0:
                return float(paused_ns)
        deficit = len(self._queue[0]) + ETH_WIRE_OVERHEAD_BYTES - self._tokens
        return max(0.0, deficit / self._bytes_per_ns)

    def recv_batch(self, max_frames: int) -> list[bytes]:
        return self.port.recv_batch(max_frames)

    @property
    def rx_checked(self) -> bytes | bytearray:
        """The port's per-frame verdicts of the last ``recv_batch`` (native port; empty otherwise), for SoftNic."""
        return getattr(self.port, "rx_checked", b"")

    def wait(self, timeout_ns: int) -> None:
        self.port.wait(timeout_ns)

    def close(self) -> None:
        self.port.close()


def hpcc_base_rtt_ns(fabric_rtt_ns: int, dilation: float, rate_bps: float = 0.0, peer_budget_bytes: int = 0) -> int:
    """HPCC's T for this transport's QPs: the fabric's unloaded round trip (``fabric_rtt_ns``, network ns, from
    ``emu.launch.fabric_env``; 0 if unknown) plus this Python stack's own round trip in network time
    (``INFLIGHT_RTT_WALL_S`` over the dilation, as the in-flight budget counts it), and at least the time a peer's
    in-flight budget takes at ``rate_bps``: HPCC's largest window (line rate x T) then never holds a QP below
    what the transport itself lets fly, and INT alone decides the cuts.  A T of the wires alone would give a
    window the stack's round trip cannot fill."""
    stack_ns = fabric_rtt_ns + int(INFLIGHT_RTT_WALL_S * 1e9 / dilation)
    budget_ns = int(peer_budget_bytes * 8e9 / rate_bps) if rate_bps > 0 else 0
    return max(1000, stack_ns, budget_ns)


def inflight_budget_bytes(rate_bps: float, path_mtu: int, dilation: float) -> int:
    """Unacknowledged SEND bytes one NIC may have: ``INFLIGHT_FRAMES`` full frames, or one wall-time round trip
    at line rate (network time runs ``dilation`` times slower), whichever is larger."""
    return max(INFLIGHT_FRAMES * path_mtu, int(rate_bps / 8 * INFLIGHT_RTT_WALL_S / dilation))


def send_bytes_for(peer_limit_bytes: int, path_mtu: int) -> int:
    """Bytes per SEND: whole frames, at most ``SLOT_BYTES``, two of them within a peer's in-flight share, so the
    next SEND is on the wire while the previous one's last ACK comes back.  A SEND as large as the share is
    stop-and-wait: the wire idles one round trip of this stack per SEND, wall time over the dilation, which bent
    busbw with the dilation and the host's load."""
    return min(SLOT_BYTES, max(path_mtu, peer_limit_bytes // 2 // path_mtu * path_mtu))


class SendBudget:
    """Unacknowledged SEND bytes of all channels of one NIC, against ``limit_bytes``; each channel's own against
    ``peer_limit_bytes`` (default: the whole budget); ``send_bytes`` per SEND (``send_bytes_for``)."""

    def __init__(self, limit_bytes: int, peer_limit_bytes: int | None = None, path_mtu: int = SLOT_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self.peer_limit_bytes = limit_bytes if peer_limit_bytes is None else peer_limit_bytes
        self.send_bytes = send_bytes_for(self.peer_limit_bytes, path_mtu)
        self.inflight_bytes = 0


def link_speed_bps(ifname: str) -> int:
    """The interface's reported speed (a veth says 10 Gb/s), or ``DEFAULT_LINE_RATE_BPS`` if it reports none."""
    try:
        mbps = int(Path(f"/sys/class/net/{ifname}/speed").read_text())
    except (OSError, ValueError):
        return DEFAULT_LINE_RATE_BPS
    return mbps * 1_000_000 if mbps > 0 else DEFAULT_LINE_RATE_BPS


class RoceChannel(StreamChannel):
    """The stream to one remote peer over one RC QP: send slots, posted receive slots and credits."""

    def __init__(self, my_rank: int, peer: int, qp: QueuePair, credits: np.ndarray, budget: SendBudget) -> None:
        super().__init__(my_rank, peer)
        self.qp = qp
        self.budget = budget
        self.slot_bytes = [0] * SEND_SLOTS
        pd = qp.pd
        self.send_buf = np.zeros(SEND_SLOTS * SLOT_BYTES, np.uint8)
        self.send_mr = pd.reg_mr(self.send_buf, Access.LOCAL_WRITE)
        self.recv_buf = np.zeros(RECV_SLOTS * SLOT_BYTES, np.uint8)
        self.recv_mr = pd.reg_mr(self.recv_buf, Access.LOCAL_WRITE)  # SENDs land here: no remote access
        self.credit_src = np.zeros(1, np.int64)
        self.credit_src_mr = pd.reg_mr(self.credit_src, Access.LOCAL_WRITE)
        self.credits = credits  # credits[peer]: receives the peer has posted for us, written by the peer
        self.free_slots: deque[int] = deque(range(SEND_SLOTS))
        self.sends_posted = 0
        self.sends_inflight = 0
        self.inflight_bytes = 0
        self._stage_slot: int | None = None
        self._stage_fill = 0
        self.arrived: deque[tuple[int, int]] = deque()  # (slot, bytes) of completed receives, in order
        self._read_off = 0
        self.recvs_posted = 0
        self._advertised = 0
        self.remote_credit_addr = 0
        self.remote_credit_rkey = 0
        self.failed = False
        self.turn_slots = ROUND_SLOTS   # SENDs left in this turn of the round robin

    def fail(self, exc: BaseException) -> None:
        super().fail(exc)
        self.failed = True

    def post_initial_receives(self) -> None:
        for slot in range(RECV_SLOTS):
            self._post_recv_slot(slot)
        self._advertised = self.recvs_posted

    def _post_recv_slot(self, slot: int) -> None:
        self.qp.post_recv(RecvWr(_wr_id(_KIND_RECV, self.peer, slot), self.recv_mr.sge(slot * SLOT_BYTES, SLOT_BYTES)))
        self.recvs_posted += 1

    # --- sending: stage bytes in a slot, SEND it when full or at the end of a progress round -----------------
    def _write(self, view: memoryview) -> int:
        done = 0
        while done < len(view) and self.turn_slots > 0:
            if self._stage_slot is None:
                if (not self.free_slots or self.sends_posted >= int(self.credits[self.peer])
                        or self.budget.inflight_bytes >= self.budget.limit_bytes
                        or self.inflight_bytes >= self.budget.peer_limit_bytes):
                    break  # no send slot, no receive posted at the peer (never overrun it), or the wire is full
                self._stage_slot, self._stage_fill = self.free_slots.popleft(), 0
            n = min(self.budget.send_bytes - self._stage_fill, len(view) - done)
            start = self._stage_slot * SLOT_BYTES + self._stage_fill
            self.send_buf[start:start + n] = np.frombuffer(view[done:done + n], np.uint8)
            self._stage_fill += n
            done += n
            if self._stage_fill == self.budget.send_bytes:
                self.flush()
                self.turn_slots -= 1
        return done

    def flush(self) -> None:
        """SEND the partly filled slot, if any (coalesces a header with its payload and small messages)."""
        slot = self._stage_slot
        if slot is None or self._stage_fill == 0:
            return
        sge = self.send_mr.sge(slot * SLOT_BYTES, self._stage_fill)
        self.qp.post_send(SendWr(_wr_id(_KIND_SEND, self.peer, slot), WrOpcode.SEND, sge))
        self.sends_posted += 1
        self.sends_inflight += 1
        self.slot_bytes[slot] = self._stage_fill
        self.budget.inflight_bytes += self._stage_fill
        self.inflight_bytes += self._stage_fill
        self._stage_slot = None
        self._stage_fill = 0

    def on_send_done(self, slot: int) -> None:
        self.free_slots.append(slot)
        self.budget.inflight_bytes -= self.slot_bytes[slot]
        self.inflight_bytes -= self.slot_bytes[slot]
        self.sends_inflight -= 1

    # --- receiving: copy out of arrived slots, re-post them, return credits in batches ----------------------
    def _read(self, view: memoryview) -> int:
        done = 0
        while done < len(view) and self.arrived:
            slot, length = self.arrived[0]
            n = min(length - self._read_off, len(view) - done)
            start = slot * SLOT_BYTES + self._read_off
            view[done:done + n] = self.recv_buf[start:start + n].data
            done += n
            self._read_off += n
            if self._read_off == length:
                self.arrived.popleft()
                self._read_off = 0
                self._post_recv_slot(slot)
        if self.recvs_posted - self._advertised >= CREDIT_BATCH:
            self._advertise()
        return done

    def _advertise(self) -> None:
        """RDMA-write our cumulative posted-receive count into the peer's credit word for us."""
        self.credit_src[0] = self.recvs_posted
        self.qp.post_send(SendWr(0, WrOpcode.RDMA_WRITE, self.credit_src_mr.sge(), remote_addr=self.remote_credit_addr,
                                 rkey=self.remote_credit_rkey, signaled=False))
        self._advertised = self.recvs_posted


class RoceTransport(ChannelTransport):
    """RC QPs from this rank's rail NIC to every remote peer; ``cc`` is the NIC's congestion control."""

    name = "roce"
    host_progress = True

    def __init__(self, my_rank: int, nic: SoftNic, wire: WirePort, channels: dict[int, RoceChannel],
                 credits: np.ndarray, clock: Clock, drain_s: float = DRAIN_WALL_S) -> None:
        self.my_rank = my_rank
        self.drain_s = drain_s
        self.nic = nic
        self.wire = wire
        self.channels = channels
        self.credits = credits
        self.clock = clock
        self._by_qpn = {ch.qp.qp_num: ch for ch in channels.values()}
        self.cq = next(iter(channels.values())).qp.send_cq if channels else None
        self._rr = 0   # where the next round robin over the channels starts

    @classmethod
    def connect(cls, my_rank: int, world_size: int, remote: list[int], store: CollectiveStore, key: str, *,
                nic_addr: str, line_rate_bps: float | None, cc: str, timeout_s: float,
                clock: Clock | None = None, fabric_rtt_ns: int = 0) -> RoceTransport:
        """Open the rail NIC holding ``nic_addr``, create and connect one QP per rank in ``remote`` via the store
        (``fabric_rtt_ns``: the fabric's base round trip, part of HPCC's T, ``hpcc_base_rtt_ns``)."""
        clock = clock or get_clock()
        if cc not in ROCE_CCS:
            raise CollectiveUserError(f"RoCE congestion control {cc!r}: expected one of {', '.join(ROCE_CCS)}")
        try:
            ifname = interface_of(nic_addr)
        except RouteError as exc:
            raise CollectiveUserError(f"{exc} (set STARPULSE_NIC_ADDR to this rank's rail NIC)") from None
        rate_bps = int(line_rate_bps) if line_rate_bps else link_speed_bps(ifname)
        try:
            pfc_options = env_pfc_options()   # a PFC fabric's class: the NIC honours (and may send) its pauses
            wire = WirePort(open_port(ifname), rate_bps, clock)
        except NicPortError as exc:
            raise CollectiveUserError(f"RoCE NIC on {ifname}: {exc}") from None
        try:
            path_mtu = path_mtu_for(wire.mtu)
            peer_budget = inflight_budget_bytes(rate_bps, path_mtu, clock.dilation)
            nic = SoftNic(wire, mac=wire.mac, ip=wire.ip, line_rate_bps=rate_bps, cc=cc, clock=clock,
                          base_rtt_ns=hpcc_base_rtt_ns(fabric_rtt_ns, clock.dilation, rate_bps, peer_budget),
                          **pfc_options)
            wire.pfc = nic.pfc
            budget = SendBudget(min(BUDGET_PEERS, max(1, len(remote))) * peer_budget, peer_budget, path_mtu)
            pd = nic.alloc_pd()
            cq = nic.create_cq()
            credits = np.zeros(world_size, np.int64)
            credits_mr = pd.reg_mr(credits, Access.LOCAL_WRITE | Access.REMOTE_WRITE)  # peers write credits only
            channels: dict[int, RoceChannel] = {}
            mine: dict[str, dict[str, object]] = {}
            for peer in remote:
                qp = nic.create_qp(pd, cq)
                ch = RoceChannel(my_rank, peer, qp, credits, budget)
                psn = random_psn()
                mine[str(peer)] = qp_info(qp, psn) | {"path_mtu": path_mtu}
                channels[peer] = ch
            me = {"qps": mine, "credit_addr": credits_mr.addr, "credit_rkey": credits_mr.rkey,
                  "recv_slots": RECV_SLOTS}
            store.set(f"{key}roce/{my_rank}", me)
            for peer, ch in channels.items():
                theirs = store.wait(f"{key}roce/{peer}", clock.net_duration_ns(timeout_s * 1e9))
                info = dict(theirs["qps"][str(my_rank)])
                try:
                    info["mac"] = next_hop_mac(str(info["ip"]), nic.ip, ifname, str(info["mac"]), clock=clock)
                except RouteError as exc:
                    raise CollectiveTimeoutError(str(exc)) from None
                connect(ch.qp, int(mine[str(peer)]["psn"]), info,
                        path_mtu=min(path_mtu, int(info["path_mtu"])),
                        timeout=qp_timeout_for(clock.dilation))
                ch.remote_credit_addr = int(theirs["credit_addr"]) + 8 * my_rank
                ch.remote_credit_rkey = int(theirs["credit_rkey"])
                credits[peer] = int(theirs["recv_slots"])
                ch.post_initial_receives()
        except BaseException:
            wire.close()
            raise
        return cls(my_rank, nic, wire, channels, credits, clock, drain_s=timeout_s)


    def _poll_cq(self) -> bool:
        if self.cq is None:
            return False
        wcs = self.cq.poll(1024)
        for wc in wcs:
            ch = self._by_qpn.get(wc.qp_num)
            if ch is None:
                continue
            if wc.status != WcStatus.SUCCESS:
                err = PeerGoneError(f"rank {self.my_rank}: RoCE QP {wc.qp_num:#x} to rank {ch.peer} failed with "
                                    f"{wc.status.name} (the peer exited, crashed or is unreachable)")
                ch.fail(err)
                raise err
            kind, _, slot = _split_wr_id(wc.wr_id)
            if kind == _KIND_RECV:
                ch.arrived.append((slot, wc.byte_len))
            elif kind == _KIND_SEND:
                ch.on_send_done(slot)
        return bool(wcs)

    def progress(self) -> bool:
        moved = self.wire.drain()
        moved |= self.nic.progress()
        moved |= self._poll_cq()
        chans = list(self.channels.values())
        for ch in chans:
            moved |= ch._progress_rx()
        moved |= self._send_round_robin(chans)
        for ch in chans:
            ch.flush()
        moved |= self.nic.progress()
        return moved

    def _send_round_robin(self, chans: list[RoceChannel]) -> bool:
        """Stage the peers' queued bytes ``ROUND_SLOTS`` SENDs per peer and turn, turns in rotation (the start
        moves on each call), until the NIC budget, the credits or the queues stop every peer."""
        moved = False
        if not chans:
            return False
        start = self._rr % len(chans)
        self._rr += 1
        order = chans[start:] + chans[:start]
        turn = True
        while turn:
            turn = False
            for ch in order:
                if not ch._sendq:
                    continue
                ch.turn_slots = ROUND_SLOTS
                if ch._progress_tx():
                    turn = moved = True
        for ch in chans:
            ch.turn_slots = ROUND_SLOTS
        return moved

    def wake_hint_ns(self) -> float | None:
        """Network ns until the wire, the NIC's pacer or a retransmission timer needs the engine again."""
        deadline = self.nic.next_deadline_ns()
        hints = [h for h in (self.wire.ready_in_ns(),
                             None if deadline is None else max(0.0, float(deadline - self.clock.now_ns())))
                 if h is not None]
        return min(hints, default=None)

    def nic_counters(self) -> dict[int, dict[str, int]]:
        """Per remote rank, its QP's cumulative packets sent, retransmitted, received out of sequence,
        retransmission timeouts and CNPs received (the operations store's NIC evidence)."""
        out = {}
        for peer, ch in self.channels.items():
            c = ch.qp.counters
            out[peer] = {"tx_pkts": c.tx_packets, "retx_pkts": c.retransmitted_packets,
                         "oos_pkts": c.out_of_sequence_received, "timeouts": c.timeouts, "cnps_rx": c.cnps_received}
        return out

    def cc_counters(self) -> dict[int, dict[str, int]]:
        """Per remote rank, its QP's rate-model inputs: ACKs that echoed the fabric's INT (``int_echoes``) and
        HPCC window updates they made (``hpcc_updates``; 0 under another CC)."""
        out = {}
        for peer, ch in self.channels.items():
            pacer = ch.qp.pacer
            out[peer] = {"int_echoes": pacer.int_echoes if pacer is not None else 0,
                         "hpcc_updates": int(getattr(pacer.cc, "updates", 0)) if pacer is not None else 0}
        return out

    def port_rate_bps(self) -> tuple[int, int]:
        """(pacing rate, line rate) of the NIC's port in bit/s of network time."""
        return self.wire.rate_bps, self.nic.line_rate_bps

    def set_rate_share(self, share: float) -> None:
        """Pace the NIC's port at ``share`` (0 < share <= 1) of its line rate."""
        self.wire.set_rate_bps(max(1, int(self.nic.line_rate_bps * share)))

    def rx_drops(self) -> dict[str, int]:
        """Frames the rail NIC received and could not parse, by reason (counted and dropped, never fatal)."""
        return dict(self.nic.counters.drop_reasons)

    def readable_fds(self) -> list[int]:
        """The NIC port's raw socket: frames for any QP of this rank make it readable."""
        return [self.wire.port.sock.fileno()] if self.channels else []

    def _inflight(self) -> bool:
        return any((ch.sends_inflight or ch._sendq) and not ch.failed for ch in self.channels.values())

    def close(self) -> None:
        """Let our last SENDs be acknowledged (at most ``drain_s`` wall seconds), then close the NIC's port."""
        deadline = Deadline(self.drain_s, self.clock)
        while self._inflight() and not deadline.expired():
            try:
                if not self.progress():
                    self.nic.poll(200_000)
            except PeerGoneError:
                continue  # that peer left or crashed (its channel is failed): keep draining to the others
        for ch in self.channels.values():
            self.nic.destroy_qp(ch.qp)
        self.channels = {}
        self.wire.close()
