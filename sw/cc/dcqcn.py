"""DCQCN golden model: reaction point (per-QP rate control) and notification point (CNP generation).

Algorithm: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015 (DCQCN), which
builds on IEEE 802.1Qau QCN's fast recovery / additive / hyper-active increase. Integer arithmetic, exact
operation order and register widths below are the contract the RTL CC engine (hw/) matches bit for bit.

Reaction point state per QP (widths are the RTL's):
  ``rc_kbps``, ``rt_kbps``  u32  current and target rate, kb/s
  ``alpha_q16``             u17  Q1.16, 65536 = 1.0
  ``t_count``, ``bc_count`` u8   rate-increase timer / byte-counter expirations since the last CNP, saturating
  ``bytes_acc``             u32  bytes sent since the last byte-counter expiry (always < byte_counter_bytes)
  ``next_alpha_ns``, ``next_rate_ns``  deadlines of the alpha timer and the rate-increase timer

Events, in the order the model (and the RTL) applies them:
  CNP at t:         if clamp_target_rate or t_count != 0: Rt = Rc
                    Rc = max(min_rate, Rc - ((Rc * alpha) >> 17))          # Rc * (1 - alpha/2), floor
                    alpha = min(ONE, alpha - (alpha >> g_shift) + (ONE >> g_shift))   # (1-g)alpha + g
                    t_count = bc_count = 0; bytes_acc = 0
                    next_alpha = t + alpha_timer; next_rate = t + rate_timer
  alpha timer at d: alpha = alpha - (alpha >> g_shift); next_alpha = d + alpha_timer   # (1-g)alpha
  rate timer at d:  t_count = sat8(t_count + 1); INCREASE; next_rate = d + rate_timer
  byte counter:     bytes_acc += n
                    while bytes_acc >= B: bytes_acc -= B; bc_count = sat8(bc_count + 1); INCREASE
  INCREASE:         if max(t_count, bc_count) <= F:   fast recovery  (Rt unchanged)
                    elif min(t_count, bc_count) <= F: additive       Rt = min(line, Rt + rate_ai)
                    else:                             hyper          Rt = min(line, Rt + rate_hai)
                    Rc = (Rt + Rc + 1) >> 1                                # mean, rounded up
``advance(now)`` first applies all alpha-timer expiries <= now, then all rate-timer expiries <= now (the two
timers touch disjoint state, so this equals the interleaved order). Every event method first calls
``advance(now)``: expiries at exactly ``now`` happen before the event itself. The hyper-increase step is the
constant R_HAI (as NVIDIA firmware's ``rpg_hai_rate`` and the HPCC authors' ns-3 DCQCN do), not QCN's i*R_HAI.
Invariants: min_rate <= Rc <= Rt <= line rate; the mean rounds up so Rc reaches Rt exactly (a floor mean
would stall one unit below). Alpha decays to a floor of (1 << g_shift) - 1 (255/65536 for g = 1/256).
Not modelled (firmware variants, not the paper): NVIDIA's rate_reduce_monitor_period (at most one cut per few
us; the NP's one CNP per 50 us per QP already bounds cuts) and the variant that applies the alpha increase at
the next alpha-timer tick instead of on the CNP (the HPCC authors' ns-3 'Mellanox DCQCN').
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum

from sw.cc.base import AckInfo, ModelTime
from sw.cc.errors import CcParamError, check_int_range
from sw.cc.fixedpoint import ALPHA_FRAC_BITS, ALPHA_ONE, KBPS, RATE_MAX_KBPS

STAGE_COUNTER_MAX = 255
"""t_count / bc_count are 8-bit saturating counters."""

U32_MAX = (1 << 32) - 1


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN parameters with literature defaults; every field overridable, validated on construction.

    Defaults and sources:
      * ``g_shift=8`` (g = 1/256), ``alpha_timer_ns=55_000`` (K = 55 us), ``rate_timer_ns=55_000``
        (T = 55 us), ``byte_counter_bytes=10_000_000`` (B = 10 MB), ``fast_recovery_stages=5`` (F = 5),
        ``rate_ai_kbps=40_000`` (R_AI = 40 Mb/s), ``cnp_interval_ns=50_000`` (N = 50 us): Zhu et al.,
        SIGCOMM'15, DCQCN parameter table and text. (NVIDIA firmware's rate-increase timer
        ``rpg_time_reset`` is 300 us: pass ``rate_timer_ns=300_000`` to model it.)
      * ``rate_hai_kbps=100_000`` (R_HAI = 100 Mb/s) and ``min_rate_kbps=100_000`` (100 Mb/s): RATE_HAI and
        MIN_RATE of the DCQCN configuration shipped with the HPCC authors' ns-3 simulator
        (alibaba-edu/High-Precision-Congestion-Control, mix/config.txt); the SIGCOMM'15 paper gives none.
      * ``alpha_init_q16=65536`` (alpha = 1: a new flow halves on its first CNP), as in the paper.
      * ``line_rate_kbps=100_000_000`` (100 Gb/s), the rate a QP starts at; set it to the NIC's line rate.
      * ``clamp_target_rate=True``: the paper's rule, Rt = Rc on every CNP. False keeps Rt across CNPs that
        arrive before any timer increase (Rt = Rc only if t_count != 0), as the HPCC authors' ns-3 DCQCN
        with CLAMP_TARGET_RATE 0 (their shipped setting) and NVIDIA's ``clamp_tgt_rate`` = 0: deep incast
        cuts then recover to the pre-incast target in F timer periods instead of by additive increase.
    """

    line_rate_kbps: int = 100_000_000
    min_rate_kbps: int = 100_000
    g_shift: int = 8
    alpha_init_q16: int = ALPHA_ONE
    alpha_timer_ns: int = 55_000
    rate_timer_ns: int = 55_000
    byte_counter_bytes: int = 10_000_000
    fast_recovery_stages: int = 5
    rate_ai_kbps: int = 40_000
    rate_hai_kbps: int = 100_000
    cnp_interval_ns: int = 50_000
    clamp_target_rate: bool = True

    def __post_init__(self) -> None:
        m = "dcqcn"
        if not isinstance(self.clamp_target_rate, bool):
            raise CcParamError(f"{m}.clamp_target_rate={self.clamp_target_rate!r}: allowed values are True, False")
        check_int_range(m, "line_rate_kbps", self.line_rate_kbps, 1_000, RATE_MAX_KBPS)
        check_int_range(m, "min_rate_kbps", self.min_rate_kbps, 1, self.line_rate_kbps)
        check_int_range(m, "g_shift", self.g_shift, 1, ALPHA_FRAC_BITS)
        check_int_range(m, "alpha_init_q16", self.alpha_init_q16, 0, ALPHA_ONE)
        check_int_range(m, "alpha_timer_ns", self.alpha_timer_ns, 1, U32_MAX)
        check_int_range(m, "rate_timer_ns", self.rate_timer_ns, 1, U32_MAX)
        check_int_range(m, "byte_counter_bytes", self.byte_counter_bytes, 1, U32_MAX)
        check_int_range(m, "fast_recovery_stages", self.fast_recovery_stages, 0, STAGE_COUNTER_MAX - 1)
        check_int_range(m, "rate_ai_kbps", self.rate_ai_kbps, 0, self.line_rate_kbps)
        check_int_range(m, "rate_hai_kbps", self.rate_hai_kbps, 0, self.line_rate_kbps)
        check_int_range(m, "cnp_interval_ns", self.cnp_interval_ns, 0, U32_MAX)

    def replace(self, **changes: int | bool) -> DcqcnParams:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


class RpStage(IntEnum):
    """Which increase rule the last rate-increase event used (for coverage of CC states)."""

    NONE = 0
    FAST_RECOVERY = 1
    ADDITIVE = 2
    HYPER = 3


@dataclass(frozen=True, slots=True)
class RpState:
    """A snapshot of one reaction point's registers: what an RTL scoreboard compares."""

    rc_kbps: int
    rt_kbps: int
    alpha_q16: int
    t_count: int
    bc_count: int
    bytes_acc: int
    next_alpha_ns: int
    next_rate_ns: int
    last_stage: RpStage


class DcqcnRp:
    """DCQCN reaction point of one QP: starts at line rate, cuts on CNPs, recovers on timer/byte events."""

    name = "dcqcn"

    def __init__(self, params: DcqcnParams | None = None, now_ns: int = 0) -> None:
        self.params = p = params or DcqcnParams()
        self._time = ModelTime(now_ns)
        self.rc_kbps = p.line_rate_kbps
        self.rt_kbps = p.line_rate_kbps
        self.alpha_q16 = p.alpha_init_q16
        self.t_count = 0
        self.bc_count = 0
        self.bytes_acc = 0
        self.next_alpha_ns = now_ns + p.alpha_timer_ns
        self.next_rate_ns = now_ns + p.rate_timer_ns
        self.last_stage = RpStage.NONE
        self.cnps = 0
        self.increases = 0

    # --- outputs -------------------------------------------------------------------------------------------
    @property
    def rate_kbps(self) -> int:
        return self.rc_kbps

    @property
    def rate_bps(self) -> int:
        return self.rc_kbps * KBPS

    @property
    def window_bytes(self) -> int | None:
        return None

    @property
    def now_ns(self) -> int:
        return self._time.now_ns

    @property
    def next_deadline_ns(self) -> int:
        """The earliest pending timer deadline (alpha or rate increase): when a timer scan must next visit."""
        return min(self.next_alpha_ns, self.next_rate_ns)

    def state(self) -> RpState:
        return RpState(self.rc_kbps, self.rt_kbps, self.alpha_q16, self.t_count, self.bc_count,
                       self.bytes_acc, self.next_alpha_ns, self.next_rate_ns, self.last_stage)

    # --- events --------------------------------------------------------------------------------------------
    def advance(self, now_ns: int) -> None:
        """Apply every alpha-timer then every rate-timer expiry with deadline <= ``now_ns``."""
        self._time.move_to(now_ns)
        p = self.params
        if self.next_alpha_ns <= now_ns:
            n = (now_ns - self.next_alpha_ns) // p.alpha_timer_ns + 1
            for _ in range(n):
                step = self.alpha_q16 >> p.g_shift
                if step == 0:
                    break                      # fixpoint: further decays change nothing
                self.alpha_q16 -= step
            self.next_alpha_ns += n * p.alpha_timer_ns
        if self.next_rate_ns <= now_ns:
            n = (now_ns - self.next_rate_ns) // p.rate_timer_ns + 1
            for _ in range(n):
                before = (self.rc_kbps, self.rt_kbps, self.t_count, self.last_stage)
                self.t_count = min(self.t_count + 1, STAGE_COUNTER_MAX)
                self._increase()
                if (self.rc_kbps, self.rt_kbps, self.t_count, self.last_stage) == before:
                    break                      # fixpoint: the remaining expiries are identical no-ops
            self.next_rate_ns += n * p.rate_timer_ns

    def on_cnp(self, now_ns: int) -> None:
        """Congestion notification: remember Rc as target, cut Rc by alpha/2, raise alpha, reset timers."""
        self.advance(now_ns)
        p = self.params
        self.cnps += 1
        if p.clamp_target_rate or self.t_count != 0:
            self.rt_kbps = self.rc_kbps
        cut = (self.rc_kbps * self.alpha_q16) >> (ALPHA_FRAC_BITS + 1)
        self.rc_kbps = max(p.min_rate_kbps, self.rc_kbps - cut)
        alpha = self.alpha_q16 - (self.alpha_q16 >> p.g_shift) + (ALPHA_ONE >> p.g_shift)
        self.alpha_q16 = min(ALPHA_ONE, alpha)
        self.t_count = 0
        self.bc_count = 0
        self.bytes_acc = 0
        self.next_alpha_ns = now_ns + p.alpha_timer_ns
        self.next_rate_ns = now_ns + p.rate_timer_ns

    def on_bytes_sent(self, nbytes: int, now_ns: int) -> None:
        """Count sent bytes; each full ``byte_counter_bytes`` is one rate-increase event."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, not {nbytes}")
        self.advance(now_ns)
        b = self.params.byte_counter_bytes
        self.bytes_acc += nbytes
        while self.bytes_acc >= b:
            self.bytes_acc -= b
            before = (self.rc_kbps, self.rt_kbps, self.bc_count, self.last_stage)
            self.bc_count = min(self.bc_count + 1, STAGE_COUNTER_MAX)
            self._increase()
            if (self.rc_kbps, self.rt_kbps, self.bc_count, self.last_stage) == before:
                self.bytes_acc %= b            # fixpoint: the remaining expiries are identical no-ops
                break

    def on_ack(self, ack: AckInfo, now_ns: int) -> None:
        """DCQCN ignores ACK contents; only time moves."""
        self.advance(now_ns)

    # --- the increase rule ---------------------------------------------------------------------------------
    def _increase(self) -> None:
        p = self.params
        f = p.fast_recovery_stages
        if max(self.t_count, self.bc_count) <= f:
            self.last_stage = RpStage.FAST_RECOVERY
        elif min(self.t_count, self.bc_count) <= f:
            self.last_stage = RpStage.ADDITIVE
            self.rt_kbps = min(p.line_rate_kbps, self.rt_kbps + p.rate_ai_kbps)
        else:
            self.last_stage = RpStage.HYPER
            self.rt_kbps = min(p.line_rate_kbps, self.rt_kbps + p.rate_hai_kbps)
        self.rc_kbps = (self.rt_kbps + self.rc_kbps + 1) >> 1   # rounded up so Rc reaches Rt exactly
        self.increases += 1


class DcqcnNp:
    """DCQCN notification point: for CE-marked packets, at most one CNP per QP per ``cnp_interval_ns``.

    Per QP the NP keeps the time of the last CNP it emitted; a CE packet at ``t`` emits a CNP iff the QP never
    had one or ``t - last >= cnp_interval_ns`` (so with N = 50 us, CE packets at 0, 49.999 and 50 us emit at
    0 and 50 us).
    """

    def __init__(self, params: DcqcnParams | None = None) -> None:
        self.params = params or DcqcnParams()
        self._last_cnp_ns: dict[int, int] = {}
        self.ce_packets = 0
        self.cnps_sent = 0

    def on_packet(self, qpn: int, ce: bool, now_ns: int) -> bool:
        """One received RoCE data packet of QP ``qpn``; returns True when a CNP must be sent now."""
        if not ce:
            return False
        self.ce_packets += 1
        last = self._last_cnp_ns.get(qpn)
        if last is not None:
            if now_ns < last:
                raise ValueError(f"time went backwards for QP {qpn}: {now_ns} ns < {last} ns")
            if now_ns - last < self.params.cnp_interval_ns:
                return False
        self._last_cnp_ns[qpn] = now_ns
        self.cnps_sent += 1
        return True

    def on_ce(self, qpn: int, now_ns: int) -> bool:
        """A CE-marked packet of QP ``qpn``; returns True when a CNP must be sent now."""
        return self.on_packet(qpn, True, now_ns)
