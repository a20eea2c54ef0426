"""Per-QP pacing: the sw.cc congestion-control model decides the rate, sw.cc's CcPacer (a TokenBucket that
follows the model) enforces it; this module picks the model per QP and charges whole frames on the wire.

The bucket is charged with each frame's size on the wire (frame + preamble, FCS and inter-frame gap) so a
QP paced at the link rate fills the link without queueing in front of it.  HPCC also caps the bytes in
flight with its window; it needs INT in the ACKs, which only the P4 fabric provides: without INT the model
keeps its initial window (one BDP) and rate (line rate), as `roce perf` reports under ``cc_feedback``.

INT echo to HPCC (``QpPacer.int_hops``): the switch writes times in µs (→ ns), queue occupancy in packets
(→ bytes: × the full data frame of the path MTU, ``frame_bytes``, since an incast queue holds data frames), and
no link rate: every hop's rate is the NIC's ``--link-rate`` (the model's line rate) unless the control plane
gave this QP's pacer a per-node table (``hop_link_kbps``: INT node id -> kbit/s).
"""

from __future__ import annotations

from sw.cc.base import AckInfo, CongestionControl, IntHop, NoCc
from sw.cc.dcqcn import DcqcnNp, DcqcnParams, DcqcnRp
from sw.cc.fixedpoint import kbps_from_bps
from sw.cc.hpcc import Hpcc, HpccParams
from sw.cc.pacer import UNITS_PER_BYTE, CcPacer
from sw.clock.lag import LagStats
from sw.roce.wire.int_md import IntHopRecord
from sw.units import ETH_WIRE_OVERHEAD_BYTES

IDLE_BURST_BYTES = 2 * 4200  # what a QP may burst after having nothing to send: two full frames
CC_NAMES = ("none", "dcqcn", "hpcc")
# DCQCN as NICs ship it (NVIDIA firmware clamp_tgt_rate=0, the HPCC authors' ns-3 DCQCN): a CNP lowers the target
# only after a rate increase.  With the paper's clamp (Rt = Rc on every CNP) the burst of CNPs an incast's first
# RTTs bring drives every flow's target down to the cut rate, and additive increase then needs ms to refill the
# link (sw.cc.sim, 8 -> 1 at 10 Gb/s, 1 MiB flows, eight seeds, the values below: 0.95 vs 0.88 utilisation).
DCQCN_CLAMP_TARGET_RATE = False
# Fast-recovery stages F = 1 (the paper's 5): the HPCC authors' ns-3 DCQCN (FAST_RECOVERY_TIMES 1 in their
# simulation/run.py) and NVIDIA firmware (rpg_threshold 1).  After one timer period without a CNP the target grows
# again, so a flow cut below its share by the incast's random marks catches up sooner (same simulation: 0.95 vs 0.91).
DCQCN_FAST_RECOVERY_STAGES = 1
# Alpha timer K = 4 us (the paper's 55 us), equal to the CNP spacing below as the paper keeps K (55 us) ~ N (50 us),
# so alpha holds under persistent marking and decays once it stops.  With K = 55 us alpha's half-life is 177 periods
# = 9.8 ms, longer than a 1 MiB flow at its share of 10 Gb/s: every CNP of the whole transfer still cuts ~alpha/2 =
# 25-50 %, all flows together (sw.cc.sim: synchronous dips of the aggregate to 6-7 Gb/s).  Not NVIDIA's 1 us
# (dce_tcp_rtt; the HPCC authors' ALPHA_RESUME_INTERVAL): sw.cc's alpha decays from the QP's creation, not from
# its first CNP (firmware's initial_alpha_value), so a QP idle for a few hundred us starts an incast at alpha's
# floor, and at 1 Gb/s with a 50 us RTT (tests/sw/roce/transport/test_transport_incast.py) the queue overflowed
# (6107 drops).
DCQCN_ALPHA_TIMER_NS = 4_000
# At most one CNP per QP per 4 us at the notification point (the paper's N = 50 us): sw.cc's reaction point cuts on
# every CNP, so this spacing is NVIDIA's rate_reduce_monitor_period (4 us between rate reductions) and the HPCC
# authors' RATE_DECREASE_INTERVAL 4 us.  A queue above Kmax now cuts each flow every 4 us instead of every 50 us.
DCQCN_CNP_INTERVAL_NS = 4_000
# Rate floor: line rate / 16 (625 Mb/s at 10 Gb/s; was min(100 Mb/s, line / 100)).  The HPCC authors' ns-3 DCQCN
# runs with MIN_RATE 1000 Mb/s (simulation/run.py) — 4 % of their 25 Gb/s links.  A floor bounds how deep the
# incast's first queue (hundreds of packets above Kmax, so every packet marked while it drains) cuts each flow: from
# 100 Mb/s the additive increase needs ms to refill the link (sw.cc.sim, 8 -> 1, the paper's B = 10 MB: 0.97 vs
# 0.93 utilisation with a 100 Mb/s floor; the paper's K = 55 us, N = 50 us with either floor: 0.95 / 0.93, completion
# times 1.5-1.9x apart).
# The price: at most 16 senders into one port can be slowed to their share — an N:1 incast with N > 16 keeps the
# port above line rate (sw.cc.sim: 1 Gb/s floors already overflow the 2 MB buffer at 12 -> 1).
DCQCN_MIN_RATE_LINE_DIVISOR = 16
# Rate increase: rate-independent additive increase, so DCQCN's cuts (each Rc * alpha/2, in proportion to the rate)
# and its increases (the same step for every flow) converge to equal shares, the AIMD fairness argument (Chiu and
# Jain 1989) the DCQCN paper relies on.  Two knobs, both NVIDIA ConnectX firmware parameters (mlxconfig / sysfs
# roce_rp): rpg_byte_reset (bytes a QP sends between byte-counter increases) and rpg_ai_rate (R_AI, Mb/s the target
# rate grows by per increase event).
# Byte counter B = 10 MB, the paper's value (Zhu et al. SIGCOMM'15; firmware default 32767 B): the rate-increase
# timer T (rpg_time_reset) alone then drives the increase.  Byte-counter events come in proportion to a flow's rate,
# so with B = 32767 B the first flow out of the incast's floor phase got more increases and ran away (through the P4
# fabric, sw.apps.incast_bench 8 x 1 MiB at 10 Gb/s: 2-3 Gb/s against 1-1.5 for the others, Jain 0.960-0.997, all three
# goals in 3 runs of 5).  With B = 10 MB a 1 MiB flow never reaches F byte-counter periods, so R_HAI never applies.
# R_AI = 100 Mb/s at 10 Gb/s (1 % of the line per T = 55 us; the paper's 40 Mb/s at 40 Gb/s is 0.1 %), at most
# line / 100 below 10 Gb/s: the timer-only increase must refill the link after the incast's floor phase and after
# the first completions; with the paper's 40 Mb/s (B = 10 MB) the link idled 0.3-0.8 ms after the first completions
# (wire utilisation 0.901-0.965, mean 0.935, in six runs).  With B = 10 MB and R_AI = 100 Mb/s, through the P4
# fabric: 0 drops, wire utilisation 0.967-0.991, Jain 0.9978-0.9993 in ten consecutive runs (load 6-13 on 2 cores);
# sw.cc.sim (8 -> 1, the fabric's RED profile, 20 seeds): utilisation 0.965-0.99, Jain >= 0.9987, against 0.92-0.97
# and >= 0.9955 with B = 32767 B and R_AI = 40 Mb/s.  Max queue 200-370 packets (the incast's first RTTs at line
# rate), within the 2 MB buffer; RED profiles of deployments (HPCC authors' 40/160 KB Pmax 0.2 at 10 Gb/s, a
# 14/139-packet ramp to Pmax 1) measured no better through the fabric with the firmware byte counter (0.914, 0.953).
DCQCN_BYTE_COUNTER_BYTES = 10_000_000
DCQCN_RATE_AI_KBPS = 100_000
DCQCN_RATE_AI_LINE_DIVISOR = 100
# Hyper-increase step R_HAI = 50 Mb/s: NVIDIA firmware's rpg_hai_rate default (for flows that send more than F + 1
# byte-counter periods between CNPs: 20 MB at the paper's B).
DCQCN_RATE_HAI_KBPS = 50_000


class CcConfigError(ValueError):
    """An unknown congestion-control name or a rate it cannot run at."""

    is_user_error = True


def make_cc(
    name: str, line_rate_bps: int, now_ns: int = 0, *, base_rtt_ns: int = 100_000
) -> CongestionControl:
    """A fresh per-QP model: 'none' (fixed line rate), 'dcqcn' (reaction point) or 'hpcc' (INT-driven)."""
    line_kbps = kbps_from_bps(line_rate_bps)
    if line_kbps < 1000:
        raise CcConfigError(f"line rate {line_rate_bps} bit/s: must be at least 1 Mb/s")
    if name == "none":
        return NoCc(line_kbps, now_ns)
    if name == "dcqcn":
        return DcqcnRp(
            DcqcnParams(
                line_rate_kbps=line_kbps,
                min_rate_kbps=max(1, line_kbps // DCQCN_MIN_RATE_LINE_DIVISOR),
                rate_ai_kbps=max(1, min(DCQCN_RATE_AI_KBPS, line_kbps // DCQCN_RATE_AI_LINE_DIVISOR)),
                rate_hai_kbps=max(1, min(DCQCN_RATE_HAI_KBPS, line_kbps // 20)),
                byte_counter_bytes=DCQCN_BYTE_COUNTER_BYTES,
                clamp_target_rate=DCQCN_CLAMP_TARGET_RATE,
                fast_recovery_stages=DCQCN_FAST_RECOVERY_STAGES,
                alpha_timer_ns=DCQCN_ALPHA_TIMER_NS,
                cnp_interval_ns=DCQCN_CNP_INTERVAL_NS,
            ),
            now_ns,
        )
    if name == "hpcc":
        min_kbps = max(
            HpccParams.min_rate_kbps if line_kbps > 10 * HpccParams.min_rate_kbps else line_kbps // 100,
            -(-8_000_000 // base_rtt_ns),
        )
        return Hpcc(
            HpccParams(
                line_rate_kbps=line_kbps,
                base_rtt_ns=base_rtt_ns,
                min_rate_kbps=min_kbps,
                rate_ai_kbps=max(1, min(HpccParams.rate_ai_kbps, line_kbps // 100)),
            ),
            now_ns,
        )
    raise CcConfigError(f"--cc {name!r}: expected one of {', '.join(CC_NAMES)}")


def make_np() -> DcqcnNp:
    """The NIC's DCQCN notification point: CNPs spaced as the host's reaction points expect (DCQCN_CNP_INTERVAL_NS)."""
    return DcqcnNp(DcqcnParams(cnp_interval_ns=DCQCN_CNP_INTERVAL_NS))


class QpPacer:
    """sw.cc CcPacer of one QP, charged with frame sizes on the wire; CNPs and ACKs reach the model here."""

    def __init__(self, cc: CongestionControl, now_ns: int, *, burst_bytes: int = 64 * 1024,
                 lag: LagStats | None = None) -> None:
        self.cc = cc
        # The NIC's pacer lateness: a frame that waited on the bucket, sent vs when its token schedule allowed it,
        # i.e. how long after that time the engine came back to this QP.  A frame held past that time by anything
        # else (the transport's window, PFC, no work) is not counted: ``mark_idle`` and a closed window clear the
        # due time, a CNP moves it back (tests/sw/roce/softnic/test_pacer_lag.py).
        self.lag = lag
        self._due_ns: int | None = None  # a frame waits on the bucket until then (None: not waiting on the pacer)
        self._pacer = CcPacer(cc, burst_bytes, now_ns)
        # Start with an empty bucket: an initial burst would become a standing queue in front of a link that
        # we then pace at exactly its rate, and every go-back-N retransmission would pay for that queue.
        self._pacer.bucket.credit = 0
        self._next_ns = now_ns  # the bucket is in deficit until then (see ``may_send``)
        self._idle = False
        self.cnps = 0
        self.hop_link_kbps: dict[int, int] = {}  # INT node id -> egress link rate; default the line rate
        self.int_echoes = 0  # ACKs that brought echoed INT to the model

    @property
    def rate_bps(self) -> int:
        return self._pacer.bucket.rate_bps

    @property
    def window_bytes(self) -> int | None:
        return self.cc.window_bytes

    def next_send_ns(self, now_ns: int, inflight_bytes: int = 0) -> int | None:
        """Earliest time >= now a frame may start; None while the window is closed (only an ACK reopens it,
        so the engine must not wake up for this QP before one arrives)."""
        if not self._pacer.window_open(inflight_bytes):
            return None
        if now_ns < self._next_ns:
            return self._next_ns
        t = self._pacer.next_send_ns(now_ns, inflight_bytes)
        return now_ns if t is None else t

    def may_send(self, now_ns: int, inflight_bytes: int = 0) -> bool:
        """May a frame leave now: the window (if the model has one) is open and the bucket holds a frame."""
        if not self._pacer.window_open(inflight_bytes):
            self._due_ns = None      # waiting on ACKs, not on the token schedule
            return False
        # Fast path: until the time computed at the last charge the bucket is in deficit for sure (a CNP can
        # only lower the rate; a rate increase is seen at most one packet time late).
        if now_ns < self._next_ns:
            self._due_ns = self._next_ns
            return False
        due = self._pacer.next_send_ns(now_ns, inflight_bytes)
        if due != now_ns:
            self._due_ns = due
            return False
        if self._idle:
            # Credit saved while the QP had nothing to send is not a backlog to catch up: clip it, so a
            # reaction (a retransmission, a read response) does not put a standing queue in front of the link.
            self._idle = False
            bucket = self._pacer.bucket
            bucket.credit = min(bucket.credit, IDLE_BURST_BYTES * UNITS_PER_BYTE)
        return True

    def mark_idle(self) -> None:
        """The QP had nothing it could send (no work, window closed): its saved credit is not a backlog."""
        self._idle = True
        self._due_ns = None

    def charge(self, frame_bytes: int, now_ns: int) -> None:
        """A frame of ``frame_bytes`` (no FCS) leaves at ``now_ns``; call only after ``may_send`` said yes."""
        if self._due_ns is not None:
            if self.lag is not None:    # this frame waited on the bucket: sent now, due at _due_ns
                self.lag.record(now_ns - self._due_ns)
            self._due_ns = None
        self._pacer.try_send(frame_bytes + ETH_WIRE_OVERHEAD_BYTES, now_ns)
        self._next_ns = self._pacer.bucket.next_eligible_ns(now_ns)

    def on_cnp(self, now_ns: int) -> None:
        self.cnps += 1
        self._pacer.on_cnp(now_ns)
        self._next_ns = self._pacer.bucket.next_eligible_ns(now_ns)
        if self._due_ns is not None and self._due_ns < self._next_ns:
            self._due_ns = self._next_ns     # the cut rate pushed the waiting frame's due time back

    def on_ack(self, acked_bytes: int, sent_bytes: int, now_ns: int, hops: tuple[IntHop, ...] = ()) -> None:
        """Cumulative bytes acknowledged / sent, and the INT hops the ACK echoed (HPCC's input; empty
        where no P4 fabric stamps INT)."""
        if hops:
            self.int_echoes += 1
        self._pacer.on_ack(AckInfo(acked_bytes, sent_bytes, hops), now_ns)
        self._next_ns = min(self._next_ns, self._pacer.bucket.next_eligible_ns(now_ns))

    def int_hops(self, records: list[IntHopRecord], frame_bytes: int) -> tuple[IntHop, ...]:
        """Echoed INT records (newest hop first, as on the wire) as HPCC hops in its units (module docstring)."""
        line_kbps = self._line_kbps()
        return tuple(
            IntHop(
                ts_ns=r.egress_timestamp * 1000,
                tx_bytes=r.egress_tx_bytes,
                qlen_bytes=r.queue_occupancy * frame_bytes,
                link_kbps=self.hop_link_kbps.get(r.node_id, line_kbps),
            )
            for r in records
        )

    def _line_kbps(self) -> int:
        params = getattr(self.cc, "params", None)
        kbps = getattr(params, "line_rate_kbps", None)
        return kbps if kbps is not None else max(1, self.rate_bps // 1000)
