"""A tiny deterministic discrete-event simulator: N paced senders -> one switch queue -> one bottleneck link.

The switch marks ECN at egress RED-style (no mark below ``kmin``, always above ``kmax``, linear up to ``pmax`` in
between, drawn from a seeded PRNG) on the queue length at dequeue, or at enqueue with ``mark_at="enqueue"`` (the
depth the packet found on arrival, as old as its queueing delay by the time it leaves) and stamps one INT hop
(egress time, cumulative tx bytes, queue length, link rate) into every packet. The receiver runs a
:class:`~sw.cc.dcqcn.DcqcnNp` (CNPs) and returns an ACK per packet carrying the INT hop. Each sender is a CC model
(DCQCN RP, HPCC or none) driving a :class:`~sw.cc.pacer.TokenBucket`; HPCC senders are also window-limited (send
while in-flight < W). Used by the tests to check the models' closed-loop behaviour; bounded by ``duration_ns`` and
``max_events``.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sw.cc.base import AckInfo, CongestionControl, IntHop, NoCc
from sw.cc.dcqcn import DcqcnNp, DcqcnParams, DcqcnRp
from sw.cc.errors import CcParamError, check_int_range, check_range
from sw.cc.hpcc import Hpcc, HpccParams
from sw.cc.pacer import CcPacer

CC_NAMES = ("dcqcn", "hpcc", "none")
MARK_POINTS = ("dequeue", "enqueue")  # where RED reads the queue length

# event kinds (ints keep the heap tuples cheap and deterministic)
_TX, _ARRIVE, _DEQUEUE_DONE, _RX, _FEEDBACK, _SAMPLE = range(6)


@dataclass(frozen=True)
class SimConfig:
    """One single-bottleneck experiment. Rates kb/s, times ns, sizes bytes.

    RED/ECN defaults (``kmin`` 5 KB, ``kmax`` 200 KB, ``pmax`` 1 %) are the DCQCN paper's (Zhu et al.,
    SIGCOMM'15). Flow i starts at ``i * start_gap_ns``. The default propagation legs (2 + 2 us out, 4 us back)
    give an 8.7 us base RTT at 25 Gb/s, a 27 KB bandwidth-delay product: HPCC's queue term qlen/(B*T) is then
    not dominated by a single packet.
    """

    n_flows: int = 2
    cc: str = "dcqcn"
    link_kbps: int = 25_000_000
    mtu_bytes: int = 1024
    to_switch_ns: int = 2_000
    to_receiver_ns: int = 2_000
    back_ns: int = 4_000
    buffer_bytes: int = 2_000_000
    kmin_bytes: int = 5_000
    kmax_bytes: int = 200_000
    pmax: float = 0.01
    duration_ns: int = 10_000_000
    warmup_ns: int = 0
    start_gap_ns: int = 0
    flow_bytes: int = 0
    seed: int = 1
    sample_ns: int = 0
    max_events: int = 5_000_000
    mark_at: str = "dequeue"
    dcqcn: DcqcnParams | None = None
    hpcc: HpccParams | None = None

    def __post_init__(self) -> None:
        m = "sim"
        if self.cc not in CC_NAMES:
            raise CcParamError(f"{m}.cc={self.cc!r}: allowed values are {', '.join(CC_NAMES)}")
        if self.mark_at not in MARK_POINTS:
            raise CcParamError(f"{m}.mark_at={self.mark_at!r}: allowed values are {', '.join(MARK_POINTS)}")
        check_int_range(m, "n_flows", self.n_flows, 1, 1024)
        check_int_range(m, "link_kbps", self.link_kbps, 1_000, 1_000_000_000)
        check_int_range(m, "mtu_bytes", self.mtu_bytes, 64, 9_216)
        check_int_range(m, "buffer_bytes", self.buffer_bytes, self.mtu_bytes, 1 << 32)
        check_int_range(m, "kmin_bytes", self.kmin_bytes, 0, self.buffer_bytes)
        check_int_range(m, "kmax_bytes", self.kmax_bytes, self.kmin_bytes, 1 << 32)
        check_range(m, "pmax", self.pmax, 0.0, 1.0)
        check_int_range(m, "duration_ns", self.duration_ns, 1, 10**11)
        check_int_range(m, "warmup_ns", self.warmup_ns, 0, self.duration_ns - 1)
        for name in ("to_switch_ns", "to_receiver_ns", "back_ns", "start_gap_ns", "flow_bytes", "sample_ns"):
            check_int_range(m, name, getattr(self, name), 0, 10**11)
        check_int_range(m, "max_events", self.max_events, 1, 10**9)

    @property
    def serialization_ns(self) -> int:
        """Time one MTU packet occupies the bottleneck (ceil)."""
        return -(-self.mtu_bytes * 8_000_000 // self.link_kbps)

    @property
    def base_rtt_ns(self) -> int:
        """Unloaded RTT: host and bottleneck serialisation plus the three propagation legs."""
        return 2 * self.serialization_ns + self.to_switch_ns + self.to_receiver_ns + self.back_ns


@dataclass
class FlowStats:
    """What one flow did during the run."""

    sent_bytes: int = 0
    rx_bytes: int = 0
    rx_bytes_measured: int = 0
    cnps: int = 0
    ce_marked: int = 0
    dropped: int = 0
    completion_ns: int | None = None
    rate_samples_kbps: list[int] = field(default_factory=list)


@dataclass
class CcSimResult:
    """Totals of a run; throughputs are over [warmup_ns, duration_ns]."""

    config: SimConfig
    flows: list[FlowStats]
    link_busy_bytes: int
    max_queue_bytes: int
    drops: int
    marks: int
    events: int
    queue_samples_bytes: list[int]
    end_ns: int

    @property
    def completed(self) -> int:
        """Flows whose ``flow_bytes`` all arrived (0 for long-lived flows)."""
        return sum(f.completion_ns is not None for f in self.flows)

    @property
    def measure_ns(self) -> int:
        """Length of the measurement window: warm-up to the end of the run, or to the link's last byte when
        every finite flow completed."""
        return max(1, self.end_ns - self.config.warmup_ns)

    @property
    def utilization(self) -> float:
        """Bottleneck bytes serialised in the window over what the link could carry."""
        return self.link_busy_bytes * 8_000_000 / (self.config.link_kbps * self.measure_ns)

    def throughputs_bps(self) -> list[float]:
        return [f.rx_bytes_measured * 8e9 / self.measure_ns for f in self.flows]

    @property
    def jain(self) -> float:
        """Jain's fairness index of the per-flow throughputs: (sum x)^2 / (n * sum x^2)."""
        xs = self.throughputs_bps()
        sq = sum(x * x for x in xs)
        return (sum(xs) ** 2) / (len(xs) * sq) if sq else 0.0


class _Flow:
    __slots__ = ("idx", "cc", "pacer", "snd_nxt", "acked", "lost", "start_ns", "tx_token", "stats")

    def __init__(self, idx: int, cc: CongestionControl, pacer: CcPacer, start_ns: int) -> None:
        self.idx = idx
        self.cc = cc
        self.pacer = pacer
        self.snd_nxt = 0
        self.acked = 0
        self.lost = 0
        self.start_ns = start_ns
        self.tx_token = 0
        self.stats = FlowStats()


class BottleneckSim:
    """Runs one :class:`SimConfig` to completion; ``run()`` returns a :class:`CcSimResult`."""

    def __init__(self, config: SimConfig) -> None:
        self.cfg = c = config
        self._rng = random.Random(c.seed)
        self._heap: list[tuple[int, int, int, Any]] = []   # (time, seq, kind, the kind's arguments)
        self._seq = 0
        self._queue: deque[tuple[int, int, int, bool]] = deque()   # (flow, size, end_seq, CE at enqueue)
        self._queue_bytes = 0
        self._link_busy = False
        self._tx_bytes_total = 0
        self._np = DcqcnNp(c.dcqcn or DcqcnParams(line_rate_kbps=c.link_kbps))
        self._flows = [self._make_flow(i) for i in range(c.n_flows)]
        self.link_busy_bytes = 0
        self.max_queue_bytes = 0
        self.drops = 0
        self.marks = 0
        self.queue_samples: list[int] = []
        self.last_done_ns = 0

    def _make_flow(self, i: int) -> _Flow:
        c = self.cfg
        start = i * c.start_gap_ns
        cc: CongestionControl
        if c.cc == "dcqcn":
            cc = DcqcnRp(c.dcqcn or DcqcnParams(line_rate_kbps=c.link_kbps), now_ns=start)
        elif c.cc == "hpcc":
            cc = Hpcc(c.hpcc or HpccParams(line_rate_kbps=c.link_kbps, base_rtt_ns=c.base_rtt_ns), now_ns=start)
        else:
            cc = NoCc(c.link_kbps, now_ns=start)
        return _Flow(i, cc, CcPacer(cc, c.mtu_bytes, now_ns=start), start)

    def _push(self, t: int, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, data))

    # --- sender ---------------------------------------------------------------------------------------------
    def _schedule_tx(self, f: _Flow, t: int) -> None:
        f.tx_token += 1
        self._push(t, _TX, (f.idx, f.tx_token))

    def _try_send(self, f: _Flow, now: int) -> None:
        c = self.cfg
        if c.flow_bytes and f.snd_nxt >= c.flow_bytes:
            return
        inflight = f.snd_nxt - f.acked - f.lost
        t_ok = f.pacer.next_send_ns(now, inflight)
        if t_ok is None:
            return                                     # window-limited: an ACK reschedules
        if t_ok > now:
            self._schedule_tx(f, t_ok)
            return
        size = c.mtu_bytes if not c.flow_bytes else min(c.mtu_bytes, c.flow_bytes - f.snd_nxt)
        f.pacer.try_send(size, now, inflight)
        f.snd_nxt += size
        f.stats.sent_bytes += size
        host_ser = -(-size * 8_000_000 // c.link_kbps)   # the sender NIC runs at the bottleneck's rate
        self._push(now + host_ser + c.to_switch_ns, _ARRIVE, (f.idx, size, f.snd_nxt))
        self._schedule_tx(f, now + host_ser)

    # --- switch ---------------------------------------------------------------------------------------------
    def _arrive(self, now: int, flow: int, size: int, end_seq: int) -> None:
        if self._queue_bytes + size > self.cfg.buffer_bytes:
            self.drops += 1
            f = self._flows[flow]
            f.stats.dropped += 1
            f.lost += size
            return
        ce = self.cfg.mark_at == "enqueue" and self._mark_probability_hit(self._queue_bytes)
        self._queue.append((flow, size, end_seq, ce))
        self._queue_bytes += size
        self.max_queue_bytes = max(self.max_queue_bytes, self._queue_bytes)
        if not self._link_busy:
            self._start_tx(now)

    def _mark_probability_hit(self, qlen: int) -> bool:
        c = self.cfg
        if qlen <= c.kmin_bytes:
            return False
        if qlen >= c.kmax_bytes:
            return True
        p = c.pmax * (qlen - c.kmin_bytes) / (c.kmax_bytes - c.kmin_bytes)
        return self._rng.random() < p

    def _start_tx(self, now: int) -> None:
        flow, size, end_seq, ce = self._queue.popleft()
        qlen_before = self._queue_bytes
        self._queue_bytes -= size
        if self.cfg.mark_at == "dequeue":
            ce = self._mark_probability_hit(qlen_before)
        if ce:
            self.marks += 1
        self._tx_bytes_total += size
        hop = IntHop(now, self._tx_bytes_total, self._queue_bytes, self.cfg.link_kbps)
        ser = -(-size * 8_000_000 // self.cfg.link_kbps)
        self._link_busy = True
        done = now + ser
        if done > self.cfg.warmup_ns and done <= self.cfg.duration_ns:
            self.link_busy_bytes += size
        self.last_done_ns = done
        self._push(done, _DEQUEUE_DONE, None)
        self._push(done + self.cfg.to_receiver_ns, _RX, (flow, size, end_seq, ce, hop))

    # --- receiver -------------------------------------------------------------------------------------------
    def _receive(self, now: int, flow: int, size: int, end_seq: int, ce: bool, hop: IntHop) -> None:
        c = self.cfg
        f = self._flows[flow]
        st = f.stats
        st.rx_bytes += size
        if now > c.warmup_ns:
            st.rx_bytes_measured += size
        if c.flow_bytes and st.completion_ns is None and st.rx_bytes >= c.flow_bytes:
            st.completion_ns = now - f.start_ns
        if ce:
            st.ce_marked += 1
        if c.cc == "dcqcn" and self._np.on_packet(flow, ce, now):
            st.cnps += 1
            self._push(now + c.back_ns, _FEEDBACK, (flow, None))
        if c.cc == "hpcc":
            self._push(now + c.back_ns, _FEEDBACK, (flow, (end_seq, hop)))

    def _feedback(self, now: int, flow: int, ack: tuple[int, IntHop] | None) -> None:
        f = self._flows[flow]
        if ack is None:
            f.pacer.on_cnp(now)
        else:
            end_seq, hop = ack
            f.acked = max(f.acked, end_seq)
            f.pacer.on_ack(AckInfo(end_seq, f.snd_nxt, (hop,)), now)
        self._try_send(f, now)   # new rate or window: re-evaluate at once (supersedes the pending TX)

    # --- main loop ------------------------------------------------------------------------------------------
    def run(self) -> CcSimResult:
        c = self.cfg
        for f in self._flows:
            self._schedule_tx(f, f.start_ns)
        if c.sample_ns:
            self._push(c.sample_ns, _SAMPLE, None)
        events = 0
        heap = self._heap
        while heap and events < c.max_events:
            now, _, kind, data = heapq.heappop(heap)
            if now > c.duration_ns:
                break
            events += 1
            if kind == _TX:
                idx, token = data
                f = self._flows[idx]
                if token == f.tx_token:
                    self._try_send(f, now)
            elif kind == _ARRIVE:
                self._arrive(now, *data)
            elif kind == _DEQUEUE_DONE:
                self._link_busy = False
                if self._queue:
                    self._start_tx(now)
            elif kind == _RX:
                self._receive(now, *data)
            elif kind == _FEEDBACK:
                self._feedback(now, *data)
            else:
                self.queue_samples.append(self._queue_bytes)
                for f in self._flows:
                    f.stats.rate_samples_kbps.append(f.cc.rate_kbps)
                self._push(now + c.sample_ns, _SAMPLE, None)
        stats = [f.stats for f in self._flows]
        all_done = bool(c.flow_bytes) and all(st.completion_ns is not None for st in stats)
        end = min(c.duration_ns, self.last_done_ns) if all_done else c.duration_ns
        return CcSimResult(c, stats, self.link_busy_bytes, self.max_queue_bytes, self.drops, self.marks, events,
                         self.queue_samples, end)


def simulate(config: SimConfig) -> CcSimResult:
    """Run one single-bottleneck experiment deterministically (same config and seed -> same result)."""
    return BottleneckSim(config).run()
