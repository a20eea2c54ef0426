"""In-memory networks for NIC ports on a ManualClock: a point-to-point wire with seeded loss, duplication,
reordering, delay and rate; a one-switch star with an ECN-marking, tail-dropping egress queue (incast); and
the discrete-event driver: the whole transport and its congestion control run deterministically, no root.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sw.clock import ManualClock
from sw.roce.softnic.nic import SoftNic
from sw.units import ETH_WIRE_OVERHEAD_BYTES


@dataclass(frozen=True)
class LinkProfile:
    """What one direction of the in-memory wire does to frames (percentages 0..100)."""

    delay_ns: int = 5_000
    rate_bps: int | None = None
    loss_pct: float = 0.0
    dup_pct: float = 0.0
    reorder_pct: float = 0.0
    drop: Callable[[bytes], bool] | None = None  # extra deterministic filter: True drops the frame
    transform: Callable[[bytes], bytes] | None = None  # e.g. sw.roce.wire.ecn.mark_ce, as a congested switch does


@dataclass
class LinkCounters:
    frames: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0


class MemoryPort:
    """One end of a ``MemoryWire``: ``send`` hands frames to the wire, ``recv_batch`` takes delivered ones."""

    def __init__(self, wire: MemoryWire | MemorySwitch, side: int) -> None:
        self.wire = wire
        self.side = side
        self.inbox: deque[bytes] = deque()

    def send(self, frame: bytes) -> None:
        self.wire.transmit(self.side, bytes(frame))

    def recv_batch(self, max_frames: int) -> list[bytes]:
        out = []
        while self.inbox and len(out) < max_frames:
            out.append(self.inbox.popleft())
        return out

    def wait(self, timeout_ns: int) -> None:
        """Nothing to wait for in memory: the driver advances the clock instead."""


class _TimedDelivery:
    """Frames in flight in an in-memory medium: each waits in a heap until its arrival time on the clock, then
    lands in its destination port's inbox (``deliver``); a medium ``_schedule``s them as it transmits."""

    clock: ManualClock
    ports: tuple[MemoryPort, ...]

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, bytes]] = []
        self._seq = 0

    def _schedule(self, arrival_ns: int, dst: int, frame: bytes) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (arrival_ns, self._seq, dst, frame))

    def deliver(self) -> bool:
        now = self.clock.now_ns()
        moved = False
        while self._heap and self._heap[0][0] <= now:
            _, _, dst, frame = heapq.heappop(self._heap)
            self.ports[dst].inbox.append(frame)
            moved = True
        return moved

    def next_event_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None


class MemoryWire(_TimedDelivery):
    """Two ports joined by a lossy, reordering, rate-limited channel with its own seeded randomness."""

    def __init__(
        self,
        clock: ManualClock,
        a_to_b: LinkProfile | None = None,
        b_to_a: LinkProfile | None = None,
        *,
        seed: int = 1,
    ) -> None:
        self.clock = clock
        self.ports = (MemoryPort(self, 0), MemoryPort(self, 1))
        self.profiles = (a_to_b or LinkProfile(), b_to_a or a_to_b or LinkProfile())
        self.counters = (LinkCounters(), LinkCounters())
        self._rng = random.Random(seed)
        self._free_ns = [0, 0]
        super().__init__()

    def transmit(self, side: int, frame: bytes) -> None:
        p = self.profiles[side]
        c = self.counters[side]
        c.frames += 1
        rng = self._rng
        if (p.drop is not None and p.drop(frame)) or (p.loss_pct and rng.random() * 100 < p.loss_pct):
            c.lost += 1
            return
        if p.transform is not None:
            frame = p.transform(frame)
        copies = 1
        if p.dup_pct and rng.random() * 100 < p.dup_pct:
            copies = 2
            c.duplicated += 1
        now = self.clock.now_ns()
        for _ in range(copies):
            start = max(now, self._free_ns[side])
            if p.rate_bps:
                self._free_ns[side] = start + (len(frame) + ETH_WIRE_OVERHEAD_BYTES) * 8 * 10**9 // p.rate_bps
            else:
                self._free_ns[side] = start
            release = self._free_ns[side] + p.delay_ns
            if p.reorder_pct and rng.random() * 100 < p.reorder_pct:
                release += (
                    p.delay_ns + 1 + rng.randrange(max(1, 4 * p.delay_ns))
                )  # held back: later frames pass
                c.reordered += 1
            self._schedule(release, 1 - side, frame)


@dataclass
class EgressCounters:
    """One switch egress port: what left, what was dropped or CE-marked, the deepest queue seen."""

    tx_frames: int = 0
    tx_bytes: int = 0
    dropped_frames: int = 0
    marked_frames: int = 0
    max_queue_bytes: int = 0


@dataclass(frozen=True)
class SwitchProfile:
    """Egress of the in-memory switch: link rate, buffer, RED/ECN marking (DCQCN's Kmin/Kmax/Pmax)."""

    rate_bps: int = 1_000_000_000
    delay_ns: int = 2_000
    buffer_bytes: int = 200_000
    ecn_kmin_bytes: int | None = 20_000
    ecn_kmax_bytes: int = 80_000
    ecn_pmax: float = 0.2


class MemorySwitch(_TimedDelivery):
    """A one-switch star of in-memory ports: frames go to the port whose host MAC they are addressed to, queue
    at that egress (tail drop beyond the buffer), get CE-marked RED-style, and leave at the egress rate."""

    def __init__(
        self,
        clock: ManualClock,
        macs: Sequence[str],
        profile: SwitchProfile | None = None,
        *,
        seed: int = 1,
        mark: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.clock = clock
        self.profile = profile or SwitchProfile()
        self.ports = tuple(MemoryPort(self, i) for i in range(len(macs)))
        self._port_of = {bytes.fromhex(m.replace(":", "")): i for i, m in enumerate(macs)}
        self.counters = tuple(EgressCounters() for _ in macs)
        self._queues: list[deque[tuple[int, int]]] = [deque() for _ in macs]  # (departure ns, bytes)
        self._queued = [0] * len(macs)
        self._free_ns = [0] * len(macs)
        super().__init__()
        self._rng = random.Random(seed)
        self._mark = mark

    def transmit(self, side: int, frame: bytes) -> None:
        out = self._port_of.get(frame[:6])
        if out is None:
            return
        p, c = self.profile, self.counters[out]
        now = self.clock.now_ns()
        q = self._queues[out]
        while q and q[0][0] <= now:
            self._queued[out] -= q.popleft()[1]
        qlen = self._queued[out]
        if qlen + len(frame) > p.buffer_bytes:
            c.dropped_frames += 1
            return
        if p.ecn_kmin_bytes is not None and self._mark is not None and qlen > p.ecn_kmin_bytes:
            prob = (
                1.0
                if qlen >= p.ecn_kmax_bytes
                else p.ecn_pmax * (qlen - p.ecn_kmin_bytes) / (p.ecn_kmax_bytes - p.ecn_kmin_bytes)
            )
            if self._rng.random() < prob:
                frame = self._mark(frame)
                c.marked_frames += 1
        start = max(now, self._free_ns[out])
        depart = start + (len(frame) + ETH_WIRE_OVERHEAD_BYTES) * 8 * 10**9 // p.rate_bps
        self._free_ns[out] = depart
        q.append((depart, len(frame)))
        self._queued[out] += len(frame)
        c.max_queue_bytes = max(c.max_queue_bytes, self._queued[out])
        c.tx_frames += 1
        c.tx_bytes += len(frame)
        self._schedule(depart + p.delay_ns, out, frame)


def run_until(
    clock: ManualClock,
    wire: MemoryWire | MemorySwitch,
    nics: Sequence[SoftNic],
    done: Callable[[], bool],
    max_ns: int,
) -> bool:
    """Discrete-event loop: progress every NIC while it has work, then jump the clock to the next event."""
    end_ns = clock.now_ns() + max_ns
    while not done():
        wire.deliver()
        busy = False
        for nic in nics:
            busy = nic.progress() or busy
        if busy or wire.deliver():
            continue
        if done():
            return True
        now = clock.now_ns()
        times = [t for t in [wire.next_event_ns(), *(n.next_deadline_ns() for n in nics)] if t is not None]
        nxt = min(times, default=None)
        if nxt is None or nxt > end_ns:
            return done()
        clock.advance_ns(max(nxt - now, 0) or 1)
    return True
