"""The traffic manager between ingress and egress: per egress port FIFO queues, shaping, tail drop, priorities.

A deterministic object driven only by the times handed to it (network ns from ``sw.clock``), so tests run it on
a ``ManualClock``.  Semantics follow BMv2 simple_switch: depth in packets (default 64), ``set_queue_rate`` in
packets/s (default: unlimited), ``enq_qdepth`` = packets already queued at the port when a packet arrives,
``deq_qdepth`` = packets left at the port when it leaves, ``deq_timedelta`` = time spent queued.  Beyond BMv2:
a port shaper in bytes/s (to emulate a line rate) and up to 8 priority queues per port (``--priority-queues``,
selected by ``standard_metadata.priority`` or the switch's DSCP map; 7 is the highest).

Priority queues: the scheduler between a port's queues is strict priority (BMv2's, the default: a higher value
always goes first) or round-robin (one packet per backlogged queue in turn, highest first), per port at run time
(``tm_scheduler``).  A PFC pause holds one queue; the others keep the port.  ``enq_qdepth``/``deq_qdepth`` count
the packet's own queue by default (what RED/ECN and INT want per priority); ``tm_qdepth_scope port`` gives
BMv2 simple_switch's per-port total.  With one queue per port (the default) both are the same.  A priority
beyond the configured queues goes to the highest queue (BMv2 drops it and logs an error).

Each port keeps, beside its high-water mark, a time-weighted histogram of its depth (network ns spent at each depth,
one list add per enqueue and dequeue, none on the cut-through paths): ``port_counters``' ``queue_p50_pkts`` and
``queue_p99_pkts``, figures a few late events cannot set as they set a peak.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from p4.errors import P4Error
from sw.clock.lag import quantile_index

DEFAULT_QUEUE_DEPTH_PKTS = 64
MAX_PRIORITY_LEVELS = 8
NS_PER_S = 1_000_000_000
SCHEDULERS = ("strict", "rr")
QDEPTH_SCOPES = ("queue", "port")

TM_COMMANDS = {
    "tm_scheduler": "tm_scheduler strict|rr [EGRESS_PORT]  (between a port's priority queues: strict priority, "
                    "7 first, as BMv2; or round-robin, one packet per backlogged queue in turn; no port = every port)",
    "tm_qdepth_scope": "tm_qdepth_scope queue|port  (what enq_qdepth/deq_qdepth count: the packet's priority queue, "
                       "the default, or the whole port as BMv2 simple_switch does)",
    "queue_stats": "queue_stats [EGRESS_PORT]  (per port x priority queue: depth, high-water mark, enqueued, "
                   "dequeued, tail drops, PFC pauses that held it, paused now)",
}


class TrafficManagerError(P4Error):
    """A queue setting out of range (bad port, priority, depth or rate)."""


@dataclass(slots=True)
class QueuedPacket:
    """One packet waiting in a queue, with the queueing metadata the egress pipeline reads."""

    item: Any
    length_bytes: int
    enq_timestamp_ns: int
    enq_qdepth_pkts: int
    priority: int = 0
    egress_port: int = 0
    deq_timestamp_ns: int = 0
    deq_qdepth_pkts: int = 0

    @property
    def deq_timedelta_ns(self) -> int:
        return self.deq_timestamp_ns - self.enq_timestamp_ns


class _Shaper:
    """Spacing of departures: packets/s or bytes/s (``None`` = unlimited); remembers when it is next free."""

    __slots__ = ("rate_pps", "rate_Bps", "overhead_bytes", "free_at_ns")

    def __init__(self) -> None:
        self.rate_pps: float | None = None
        self.rate_Bps: float | None = None
        self.overhead_bytes = 0          # per packet on top of the frame (24 = preamble, SFD, FCS, gap)
        self.free_at_ns = 0

    def limited(self) -> bool:
        return self.rate_pps is not None or self.rate_Bps is not None

    def consume(self, start_ns: int, length_bytes: int) -> None:
        if self.rate_Bps is not None:
            self.free_at_ns = start_ns + int((length_bytes + self.overhead_bytes) * NS_PER_S / self.rate_Bps)
        elif self.rate_pps is not None:
            self.free_at_ns = start_ns + int(NS_PER_S / self.rate_pps)
        else:
            self.free_at_ns = start_ns


@dataclass
class QueueStats:
    """Counters of one (port, priority) queue."""

    enq_pkts: int = 0
    deq_pkts: int = 0
    drop_pkts: int = 0
    high_water_pkts: int = 0
    pauses: int = 0              # times a PFC pause (a new or extended one) held this queue


@dataclass
class _Queue:
    depth_pkts: int
    fifo: deque[QueuedPacket] = field(default_factory=deque)
    shaper: _Shaper = field(default_factory=_Shaper)
    stats: QueueStats = field(default_factory=QueueStats)


class _Port:
    """All queues of one egress port plus the port-level shaper shared by them."""

    def __init__(self, levels: int, depth_pkts: int) -> None:
        self.queues = [_Queue(depth_pkts) for _ in range(levels)]
        self.shaper = _Shaper()
        self.qdepth_pkts = 0
        self.high_water_pkts = 0
        # time-weighted depth histogram: network ns the port spent at each depth (index), counted from its first
        # depth change since the last reset (-1: none yet) to its last one (an idle tail or head is not counted)
        self.depth_ns: list[int] = [0] * (min(levels * depth_pkts, 1024) + 1)
        self.depth_since_ns = -1
        self.shaped = False          # any shaper on this port or its queues (cut-through needs none)
        self.paused_until_ns = [0] * levels   # per queue: PFC pause received for it holds its head until then
        self.paused = False          # some queue has a pause set (cut-through must queue instead)
        self.backlogged = 0          # bit q set: queue q holds packets (one bit set = the cheap one-queue path)
        self.round_robin = False     # scheduler between the queues: strict priority (False) or round-robin
        self.rr_next = levels - 1    # round-robin: the queue served first on a tie

    def update_shaped(self) -> None:
        self.shaped = self.shaper.limited() or any(q.shaper.limited() for q in self.queues)

    def head_ready_ns(self) -> tuple[int, int] | None:
        """(departure time, priority) of the packet this port sends next, or None when empty."""
        queues = self.queues
        if len(queues) == 1:                       # the common case, kept cheap: it runs per packet
            q = queues[0]
            if not q.fifo:
                return None
            t = q.fifo[0].enq_timestamp_ns
            if q.shaper.free_at_ns > t:
                t = q.shaper.free_at_ns
            if self.shaper.free_at_ns > t:
                t = self.shaper.free_at_ns
            if self.paused and self.paused_until_ns[0] > t:
                t = self.paused_until_ns[0]
            return (t, 0)
        mask = self.backlogged
        if not mask:
            return None
        if not mask & (mask - 1):                  # one backlogged queue (single-priority traffic): no scan
            prio = mask.bit_length() - 1
            q = queues[prio]
            t = q.fifo[0].enq_timestamp_ns
            if q.shaper.free_at_ns > t:
                t = q.shaper.free_at_ns
            if self.shaper.free_at_ns > t:
                t = self.shaper.free_at_ns
            if self.paused and self.paused_until_ns[prio] > t:
                t = self.paused_until_ns[prio]
            return (t, prio)
        # Several queues: the earliest departure; a tie (the usual case on a busy port, all waiting for the
        # port's shaper) goes to the highest priority, or with round-robin to the next queue in turn.
        levels = len(queues)
        start = self.rr_next if self.round_robin else levels - 1
        best: tuple[int, int] | None = None
        for k in range(levels):
            prio = (start - k) % levels
            if not mask >> prio & 1:
                continue
            q = queues[prio]
            t = max(q.fifo[0].enq_timestamp_ns, q.shaper.free_at_ns, self.shaper.free_at_ns,
                    self.paused_until_ns[prio])
            if best is None or t < best[0]:
                best = (t, prio)
        return best


def _grow_depth_ns(p: _Port, held_ns: int) -> None:
    """``held_ns`` at a depth beyond the histogram's list (a deeper queue setting): grow it, then count."""
    p.depth_ns.extend([0] * (p.qdepth_pkts + 1 - len(p.depth_ns)))
    p.depth_ns[p.qdepth_pkts] += held_ns


def _hold_depth(p: _Port, t_ns: int) -> None:
    """Before the port's depth changes at ``t_ns``: count the time it held its depth since the last change (the
    time-weighted histogram; a change scheduled before the last one counts no time)."""
    since = p.depth_since_ns
    if t_ns > since:
        if since >= 0:
            try:
                p.depth_ns[p.qdepth_pkts] += t_ns - since
            except IndexError:
                _grow_depth_ns(p, t_ns - since)
        p.depth_since_ns = t_ns


class TrafficManager:
    """Egress queues of one switch; ``enqueue`` at ingress end, ``dequeue_due(now)`` feeds egress in time order."""

    def __init__(self, *, priority_levels: int = 1, default_depth_pkts: int = DEFAULT_QUEUE_DEPTH_PKTS) -> None:
        if not 1 <= priority_levels <= MAX_PRIORITY_LEVELS:
            raise TrafficManagerError(f"priority levels {priority_levels}: allowed 1..{MAX_PRIORITY_LEVELS}")
        if default_depth_pkts < 1:
            raise TrafficManagerError(f"queue depth {default_depth_pkts}: must be >= 1 packet")
        self.priority_levels = priority_levels
        self.default_depth_pkts = default_depth_pkts
        self.default_rate_pps: float | None = None
        self.ports: dict[int, _Port] = {}
        self._heap: list[tuple[int, int, int]] = []   # (time, seq, port): lazy departure candidates
        self._seq = 0
        self.queued_pkts = 0                           # over all ports: 0 means nothing to service
        self.any_shaped = False                        # some port or queue has a rate: no bulk cut-through
        self.qdepth_per_queue = True                   # enq/deq_qdepth: the packet's queue (False: the port)
        self.round_robin = False                       # scheduler of ports created from now on

    # --- configuration (simple_switch_CLI set_queue_depth / set_queue_rate, plus a byte-rate shaper) --------
    def _port(self, port: int) -> _Port:
        p = self.ports.get(port)
        if p is None:
            if port < 0:
                raise TrafficManagerError(f"egress port {port}: must be >= 0")
            p = _Port(self.priority_levels, self.default_depth_pkts)
            p.round_robin = self.round_robin
            if self.default_rate_pps is not None:
                p.shaper.rate_pps = self.default_rate_pps
                p.update_shaped()
            self.ports[port] = p
            self._refresh_shaped()
        return p

    def _refresh_shaped(self) -> None:
        self.any_shaped = any(p.shaped for p in self.ports.values())

    def _check_priority(self, priority: int) -> None:
        if not 0 <= priority < self.priority_levels:
            raise TrafficManagerError(
                f"priority {priority}: allowed 0..{self.priority_levels - 1} (switch has {self.priority_levels}"
                " priority queue(s) per port)")

    def set_queue_depth(self, depth_pkts: int, port: int | None = None, priority: int | None = None) -> None:
        """Depth of one port's queue(s) or, without a port, of every queue (existing and future)."""
        if depth_pkts < 1:
            raise TrafficManagerError(f"queue depth {depth_pkts}: must be >= 1 packet")
        if priority is not None:
            self._check_priority(priority)
        if port is None:
            self.default_depth_pkts = depth_pkts
            targets = list(self.ports.values())
        else:
            targets = [self._port(port)]
        for p in targets:
            for prio, q in enumerate(p.queues):
                if priority is None or prio == priority:
                    q.depth_pkts = depth_pkts

    def set_queue_rate(self, rate_pps: float | None, port: int | None = None, priority: int | None = None) -> None:
        """Service rate in packets/s (None = unlimited): of a port, of one priority queue, or of every port."""
        if rate_pps is not None and not rate_pps > 0:
            raise TrafficManagerError(f"queue rate {rate_pps} pps: must be > 0")
        if priority is not None:
            self._check_priority(priority)
            if port is None:
                raise TrafficManagerError("a priority needs an egress port")
            p = self._port(port)
            p.queues[priority].shaper.rate_pps = rate_pps
            p.update_shaped()
            self._refresh_shaped()
            return
        targets = [self._port(port)] if port is not None else list(self.ports.values())
        if port is None:
            self.default_rate_pps = rate_pps
        for p in targets:
            p.shaper.rate_pps = rate_pps
            p.shaper.rate_Bps = None
            p.update_shaped()
        self._refresh_shaped()

    def set_port_rate_Bps(self, rate_Bps: float | None, port: int, overhead_bytes: int = 0) -> None:
        """Shape a port to ``rate_Bps`` bytes/s (a line rate), counting each frame plus ``overhead_bytes``
        (24 for Ethernet's preamble, SFD, FCS and inter-frame gap); None removes the shaper."""
        if rate_Bps is not None and not rate_Bps > 0:
            raise TrafficManagerError(f"port rate {rate_Bps} B/s: must be > 0")
        if not 0 <= overhead_bytes <= 1024:
            raise TrafficManagerError(f"per-packet overhead {overhead_bytes} B: allowed 0..1024")
        p = self._port(port)
        p.shaper.rate_Bps = rate_Bps
        p.shaper.overhead_bytes = overhead_bytes
        if rate_Bps is not None:
            p.shaper.rate_pps = None
        p.update_shaped()
        self._refresh_shaped()

    def set_scheduler(self, scheduler: str, port: int | None = None) -> None:
        """Scheduler between a port's priority queues ("strict" or "rr"); without a port, of every port."""
        if scheduler not in SCHEDULERS:
            raise TrafficManagerError(f"scheduler {scheduler!r}: allowed {', '.join(SCHEDULERS)}")
        rr = scheduler == "rr"
        if port is None:
            self.round_robin = rr
            targets = list(self.ports)
        else:
            self._port(port)
            targets = [port]
        for num in targets:
            p = self.ports[num]
            p.round_robin = rr
            ready = p.head_ready_ns()
            if ready is not None:                  # the next head may change: re-file the port
                self._push(ready[0], num)

    def set_qdepth_scope(self, scope: str) -> None:
        """What ``enq_qdepth``/``deq_qdepth`` count: "queue" (the packet's priority queue) or "port" (BMv2)."""
        if scope not in QDEPTH_SCOPES:
            raise TrafficManagerError(f"queue depth scope {scope!r}: allowed {', '.join(QDEPTH_SCOPES)}")
        self.qdepth_per_queue = scope == "queue"

    def set_paused_until(self, port: int, priority: int, until_ns: int, now_ns: int) -> None:
        """PFC: hold ``priority``'s queue of ``port`` until ``until_ns`` (0 = resume now); its packets keep
        their place, the other priorities keep flowing.  A pause ended early (XON, the watchdog) ends at
        ``now_ns`` (or at its expiry, if that came first): the packets it held become due then, not back at
        their arrival (their departure is what the lag accounting judges the switch against)."""
        self._check_priority(priority)
        p = self._port(port)
        if until_ns and until_ns != p.paused_until_ns[priority]:
            p.queues[priority].stats.pauses += 1
        if until_ns < p.paused_until_ns[priority]:       # resumed (or shortened): held until it ended, not less
            until_ns = max(until_ns, min(p.paused_until_ns[priority], now_ns))
        p.paused_until_ns[priority] = until_ns
        p.paused = any(p.paused_until_ns)
        ready = p.head_ready_ns()
        if ready is not None:
            self._push(ready[0], port)

    def port_rate_Bps(self, port: int) -> float | None:
        """The port's byte-rate shaper (its emulated line rate), None when unshaped."""
        p = self.ports.get(port)
        return p.shaper.rate_Bps if p else None

    # --- data path -----------------------------------------------------------------------------------------
    def cut_through(self, port: int, item: Any, length_bytes: int, now_ns: int,
                    priority: int = 0) -> QueuedPacket | None:
        """The packet as dequeued at once when its port is unshaped and idle (what the queue would give it
        anyway: zero depths, zero delay), counted like a queued one; None when it must really be queued."""
        p = self.ports.get(port)
        if p is None:
            p = self._port(port)
        if priority >= self.priority_levels:
            priority = self.priority_levels - 1
        if p.qdepth_pkts or p.shaped or (p.paused and p.paused_until_ns[priority] > now_ns):
            return None
        st = p.queues[priority].stats
        st.enq_pkts += 1
        st.deq_pkts += 1
        if not st.high_water_pkts:
            st.high_water_pkts = 1
        if not p.high_water_pkts:
            p.high_water_pkts = 1
        return QueuedPacket(item, length_bytes, now_ns, 0, priority, port, now_ns, 0)

    def note_cut_through(self, port: int, n_pkts: int, priority: int = 0) -> None:
        """Count ``n_pkts`` that passed an idle, unshaped ``port`` in bulk (the switch's batched fast path), in
        the queue of ``priority`` (beyond the configured queues: the highest, as ``enqueue``)."""
        p = self.ports.get(port)
        if p is None:
            p = self._port(port)
        st = p.queues[min(priority, self.priority_levels - 1)].stats
        st.enq_pkts += n_pkts
        st.deq_pkts += n_pkts
        if not st.high_water_pkts:
            st.high_water_pkts = 1
        if not p.high_water_pkts:
            p.high_water_pkts = 1

    def enqueue(self, port: int, item: Any, length_bytes: int, now_ns: int, priority: int = 0) -> QueuedPacket | None:
        """Queue ``item`` for ``port``; None when the queue is full (tail drop, counted)."""
        p = self._port(port)
        if priority >= self.priority_levels:
            priority = self.priority_levels - 1   # beyond the configured queues: the highest one
        q = p.queues[priority]
        fifo = q.fifo
        n = len(fifo)
        if n >= q.depth_pkts:
            q.stats.drop_pkts += 1
            return None
        qp = QueuedPacket(item, length_bytes, now_ns, n if self.qdepth_per_queue else p.qdepth_pkts, priority, port)
        fifo.append(qp)
        q.stats.enq_pkts += 1
        if n >= q.stats.high_water_pkts:
            q.stats.high_water_pkts = n + 1
        _hold_depth(p, now_ns)
        p.qdepth_pkts += 1
        self.queued_pkts += 1
        if p.qdepth_pkts > p.high_water_pkts:
            p.high_water_pkts = p.qdepth_pkts
        if not n:
            p.backlogged |= 1 << priority
            # a queue that was empty has a new head: the port's departure may come earlier (or the port was
            # empty and needs its heap entry). Otherwise the heads, and so the port's entry, are unchanged.
            ready = p.head_ready_ns()
            if ready is not None:
                self._push(ready[0], port)
        return qp

    def _push(self, t_ns: int, port: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, port))

    def next_departure_ns(self) -> int | None:
        """Earliest time any queued packet may leave (None when all queues are empty)."""
        heap = self._heap
        while heap:
            t_ns, _, port = heap[0]
            ready = self.ports[port].head_ready_ns()
            if ready is None:
                heapq.heappop(heap)
            elif ready[0] != t_ns:
                heapq.heapreplace(heap, (ready[0], self._seq + 1, port))
                self._seq += 1
            else:
                return t_ns
        return None

    def dequeue_due(self, now_ns: int, limit: int | None = None) -> list[QueuedPacket]:
        """Every packet whose departure time is <= ``now_ns``, in departure order (at most ``limit``)."""
        out: list[QueuedPacket] = []
        heap, ports = self._heap, self.ports
        heappop, heapreplace = heapq.heappop, heapq.heapreplace
        while heap and (limit is None or len(out) < limit):
            t_ns, _, port = heap[0]
            p = ports[port]
            ready = p.head_ready_ns()
            if ready is None:                      # stale entry of a port that emptied
                heappop(heap)
                continue
            if ready[0] != t_ns:                   # stale time: re-file the port at its real one
                self._seq += 1
                heapreplace(heap, (ready[0], self._seq, port))
                continue
            if t_ns > now_ns:
                break
            prio = ready[1]
            q = p.queues[prio]
            fifo = q.fifo
            qp = fifo.popleft()
            _hold_depth(p, t_ns)
            p.qdepth_pkts -= 1
            self.queued_pkts -= 1
            q.stats.deq_pkts += 1
            qp.deq_timestamp_ns = t_ns
            if not fifo:
                p.backlogged &= ~(1 << prio)
            if p.round_robin:
                p.rr_next = (prio - 1) % len(p.queues)
            qp.deq_qdepth_pkts = len(fifo) if self.qdepth_per_queue else p.qdepth_pkts
            q.shaper.consume(t_ns, qp.length_bytes)
            p.shaper.consume(t_ns, qp.length_bytes)
            out.append(qp)
            nxt = p.head_ready_ns()
            if nxt is not None:                    # the port's next head takes the popped entry's place
                self._seq += 1
                heapreplace(heap, (nxt[0], self._seq, port))
            else:
                heappop(heap)
        return out

    def has_due(self, now_ns: int) -> bool:
        """Whether ``dequeue_due(now_ns)`` may return a packet: a cheap check per received frame (heap entries
        are never later than their port's real departure time, so False is exact)."""
        heap = self._heap
        return bool(heap) and heap[0][0] <= now_ns

    # --- counters ------------------------------------------------------------------------------------------
    def qdepth_pkts(self, port: int) -> int:
        p = self.ports.get(port)
        return p.qdepth_pkts if p else 0

    def port_counters(self, port: int) -> dict[str, int]:
        """Totals over the port's queues: enqueued, dequeued, tail-dropped, depth now, high-water mark and the
        time-weighted depth's p50/p99 (``depth_percentile_pkts``)."""
        p = self.ports.get(port)
        if p is None:
            return {"enq_pkts": 0, "deq_pkts": 0, "queue_drop_pkts": 0, "qdepth_pkts": 0, "high_water_pkts": 0,
                    "queue_p50_pkts": 0, "queue_p99_pkts": 0}
        return {
            "enq_pkts": sum(q.stats.enq_pkts for q in p.queues),
            "deq_pkts": sum(q.stats.deq_pkts for q in p.queues),
            "queue_drop_pkts": sum(q.stats.drop_pkts for q in p.queues),
            "qdepth_pkts": p.qdepth_pkts,
            "high_water_pkts": p.high_water_pkts,
            "queue_p50_pkts": self.depth_percentile_pkts(port, 0.5),
            "queue_p99_pkts": self.depth_percentile_pkts(port, 0.99),
        }

    def depth_percentile_pkts(self, port: int, q: float) -> int:
        """The depth (packets) the port's queues together stayed at or below for a share ``q`` (0..1) of the
        network time since the last reset (first to last depth change; 0 before any): a figure a late tail of
        events does not set, unlike the high-water mark."""
        p = self.ports.get(port)
        if p is None:
            return 0
        return quantile_index(p.depth_ns, sum(p.depth_ns), q)

    def queue_stats(self, port: int, priority: int = 0) -> QueueStats:
        self._check_priority(priority)
        return self._port(port).queues[priority].stats

    def queue_rows(self, port: int, now_ns: int) -> list[dict[str, int]]:
        """Per priority queue of ``port``: depth, high-water mark, enqueued, dequeued, tail drops, paused now."""
        p = self.ports.get(port)
        if p is None:
            return []
        return [{"prio": prio, "qdepth_pkts": len(q.fifo), "high_water_pkts": q.stats.high_water_pkts,
                 "enq_pkts": q.stats.enq_pkts, "deq_pkts": q.stats.deq_pkts, "drop_pkts": q.stats.drop_pkts,
                 "pauses": q.stats.pauses, "paused": int(p.paused_until_ns[prio] > now_ns)}
                for prio, q in enumerate(p.queues)]

    def stats_text(self, only: int | None, now_ns: int) -> str:
        """The ``queue_stats`` table: one row per port x priority queue that has seen a packet (queue 0 always)."""
        if only is not None and only not in self.ports:
            raise TrafficManagerError(f"queue_stats {only}: no queue at that port (ports: {sorted(self.ports)})")
        cols = ["qdepth_pkts", "high_water_pkts", "enq_pkts", "deq_pkts", "drop_pkts", "pauses", "paused"]
        rows = [["port", "prio", "scheduler", *cols]]
        for port in sorted(self.ports) if only is None else [only]:
            sched = "rr" if self.ports[port].round_robin else "strict"
            for r in self.queue_rows(port, now_ns):
                if r["prio"] and not any(r[c] for c in cols):
                    continue
                rows.append([str(port), str(r["prio"]), sched, *(str(r[c]) for c in cols)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join(" ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows)

    def execute(self, words: list[str], now_ns: int) -> str:
        """One ``tm_*``/``queue_stats`` command (see ``TM_COMMANDS``)."""
        cmd, args = words[0], words[1:]
        usage = f"{cmd} {' '.join(args)!r}: usage: {TM_COMMANDS[cmd]}"
        if any(not a.isdigit() for a in args[1:]) or (cmd == "queue_stats" and args and not args[0].isdigit()):
            raise TrafficManagerError(usage)
        if cmd == "tm_scheduler":
            if len(args) not in (1, 2) or args[0] not in SCHEDULERS:
                raise TrafficManagerError(usage)
            self.set_scheduler(args[0], int(args[1]) if len(args) == 2 else None)
        elif cmd == "tm_qdepth_scope":
            if len(args) != 1 or args[0] not in QDEPTH_SCOPES:
                raise TrafficManagerError(usage)
            self.set_qdepth_scope(args[0])
        elif cmd == "queue_stats":
            if len(args) > 1:
                raise TrafficManagerError(usage)
            return self.stats_text(int(args[0]) if args else None, now_ns)
        return ""

    def reset_counters(self) -> None:
        """Zero enqueue/dequeue/drop counts and depth histograms; high-water marks restart from the current depths."""
        for p in self.ports.values():
            p.high_water_pkts = p.qdepth_pkts
            p.depth_ns = [0] * len(p.depth_ns)
            p.depth_since_ns = -1
            for q in p.queues:
                q.stats = QueueStats(high_water_pkts=len(q.fifo))
