"""HPCC golden model: INT-driven window and rate of one sender (Li et al., "HPCC: High Precision Congestion
Control", SIGCOMM 2019, Algorithm 1), in integer arithmetic the RTL INT/HPCC engine matches bit for bit.

State (widths are the RTL's): ``window_bytes`` W and ``wc_bytes`` Wc (u32 bytes), ``u_q16`` U (u24 Q8.16,
saturating at ``U_MAX``), ``inc_stage`` (u8, never above max_stage), ``last_update_seq`` (u64 bytes), the
previous ACK's INT hops, and the derived ``rate_kbps`` (u32).

Per ACK carrying INT hops L'[i] (previous ACK's hops L[i]; T = base RTT in ns, B in kb/s):
  for each hop with dts = (L'.ts - L.ts) mod 2^int_ts_bits in 1 .. 2^(int_ts_bits-1) - 1:
      dtx = (L'.tx_bytes - L.tx_bytes) mod 2^int_tx_bits, or 0 if >= 2^(int_tx_bits-1) (went backwards)
      q = min(L'.qlen, L.qlen)
  and B > 0 (a record without a link rate gives no sample either):
      u_i = sat(sat(((q * 8_000_000) << 16) // (B * T)) + sat(((dtx * 8_000_000) << 16) // (B * dts)))
            # = qlen / (B * T) + txRate / B in Q.16, each term floored; sat(x) = min(x, U_MAX)
      keep the largest u_i (first hop wins ties) and its dts as tau
  if no hop qualified: W, Wc, U unchanged.  Else:
  tau = min(tau, T)
  U = ((T - tau) * U + tau * u_max) // T                   # EWMA over one base RTT (never above U_MAX)
  update = ack.ack_seq > last_update_seq        (then last_update_seq = ack.snd_nxt: Wc moves once per RTT)
  if U >= eta or inc_stage >= max_stage:  W = (Wc * eta) // max(U, 1) + W_AI;  if update: inc_stage = 0
  else:                                   W = Wc + W_AI;                        if update: inc_stage += 1
  W = clamp(W, W_min, W_max);  if update: Wc = W
  rate_kbps = clamp((W * 8_000_000) // T, min_rate, line_rate)
The INT counters wrap (serial-number arithmetic above): fabric.p4 carries a 32-bit egress tx byte count that
wraps every 0.34 s at 100 Gb/s, hence ``int_tx_bits=32``; a timestamp that went backwards (or did not move)
gives no sample for that hop. W_max = line_rate * T // 8_000_000 (one BDP, also the initial W and Wc),
W_min = min_rate * T // 8_000_000, W_AI = rate_ai * T // 8_000_000. The first ACK with INT (or one whose hop
count changed) only records the hops; every ACK with INT replaces the stored hops. ACKs without INT change
nothing. B is the link rate in the newer record.

Hardware form: every division is a floor division of unsigned integers whose quotient is either known to be
bounded (the EWMA by U_MAX, the rate by line_rate) or saturated/clamped right after (each utilisation term at
U_MAX, W at W_max), so a sequential divider with a fixed, small quotient width and an overflow check gives
the same bits (hw/hpcc.py); the saturation of each term is the only place the model departs from plain
Algorithm 1 arithmetic, and it only matters beyond 256x load where U is saturated anyway.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sw.cc.base import AckInfo, IntHop, ModelTime, TimeOnlyEvents
from sw.cc.errors import check_int_range
from sw.cc.fixedpoint import BITS_NS_PER_KBPS, KBPS, RATE_MAX_KBPS, U_FRAC_BITS, U_MAX, U_ONE, bytes_in_ns

ETA_DEFAULT_Q16 = 62259
"""eta = 0.95 in Q.16, rounded to nearest (62259 / 65536 = 0.949997)."""


@dataclass(frozen=True)
class HpccParams:
    """HPCC parameters with literature defaults; every field overridable, validated on construction.

    Defaults and sources:
      * ``eta_q16=62259`` (eta = 95 %) and ``max_stage=5``: Li et al., SIGCOMM'19, section 5 settings.
      * ``rate_ai_kbps=50_000`` (additive increase 50 Mb/s, i.e. W_AI = R_AI * T) and
        ``min_rate_kbps=100_000``: RATE_AI and MIN_RATE of the HPCC authors' ns-3 simulator configuration
        (alibaba-edu/High-Precision-Congestion-Control, mix/config.txt), which applies W_AI as a rate step.
      * ``line_rate_kbps=100_000_000`` (100 Gb/s) and ``base_rtt_ns=10_000``: properties of the deployment,
        not of the algorithm - set them to the NIC's line rate and the fabric's largest base RTT (the paper's
        T, "GLOBAL_T" in the authors' simulator).
      * ``int_ts_bits=64``, ``int_tx_bits=32``: widths of the INT egress timestamp and tx byte counter
        (those of p4/programs/fabric.p4); deltas are taken modulo these widths.
    """

    line_rate_kbps: int = 100_000_000
    base_rtt_ns: int = 10_000
    eta_q16: int = ETA_DEFAULT_Q16
    max_stage: int = 5
    rate_ai_kbps: int = 50_000
    min_rate_kbps: int = 100_000
    int_ts_bits: int = 64
    int_tx_bits: int = 32

    def __post_init__(self) -> None:
        m = "hpcc"
        check_int_range(m, "int_ts_bits", self.int_ts_bits, 16, 64)
        check_int_range(m, "int_tx_bits", self.int_tx_bits, 16, 64)
        check_int_range(m, "line_rate_kbps", self.line_rate_kbps, 1_000, RATE_MAX_KBPS)
        check_int_range(m, "base_rtt_ns", self.base_rtt_ns, 100, 100_000_000)
        check_int_range(m, "eta_q16", self.eta_q16, 1, U_ONE)
        check_int_range(m, "max_stage", self.max_stage, 0, 254)
        check_int_range(m, "rate_ai_kbps", self.rate_ai_kbps, 0, self.line_rate_kbps)
        check_int_range(m, "min_rate_kbps", self.min_rate_kbps, 1, self.line_rate_kbps)
        if self.w_max_bytes >= 1 << 32:   # the window registers are u32
            hi = ((1 << 32) * BITS_NS_PER_KBPS) // self.base_rtt_ns - 1
            check_int_range(m, "line_rate_kbps", self.line_rate_kbps, 1_000, hi)
        if self.w_min_bytes < 1:
            lo = -(-BITS_NS_PER_KBPS // self.base_rtt_ns)
            check_int_range(m, "min_rate_kbps", self.min_rate_kbps, lo, self.line_rate_kbps)

    @property
    def w_max_bytes(self) -> int:
        """One bandwidth-delay product: the initial and largest window."""
        return bytes_in_ns(self.line_rate_kbps, self.base_rtt_ns)

    @property
    def w_min_bytes(self) -> int:
        return bytes_in_ns(self.min_rate_kbps, self.base_rtt_ns)

    @property
    def w_ai_bytes(self) -> int:
        return bytes_in_ns(self.rate_ai_kbps, self.base_rtt_ns)

    def replace(self, **changes: int) -> HpccParams:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class HpccState:
    """A snapshot of one HPCC sender's registers: what an RTL scoreboard compares."""

    window_bytes: int
    wc_bytes: int
    u_q16: int
    inc_stage: int
    rate_kbps: int
    last_update_seq: int


def serial_delta(new: int, old: int, bits: int) -> int:
    """``new - old`` modulo 2^bits, or -1 when that is >= 2^(bits-1) (the counter went backwards)."""
    d = (new - old) & ((1 << bits) - 1)
    return d if d < 1 << (bits - 1) else -1


def hop_utilization_q16(new: IntHop, old: IntHop, base_rtt_ns: int, ts_bits: int = 64,
                        tx_bits: int = 32) -> tuple[int, int] | None:
    """One hop's (normalised load qlen/(B*T) + txRate/B in Q.16, saturating, dts in ns), or None without a
    new sample."""
    dts = serial_delta(new.ts_ns, old.ts_ns, ts_bits)
    if dts <= 0:
        return None
    dtx = max(0, serial_delta(new.tx_bytes, old.tx_bytes, tx_bits))
    q = min(new.qlen_bytes, old.qlen_bytes)
    b = new.link_kbps
    if b <= 0:
        return None
    u_queue = min(U_MAX, ((q * BITS_NS_PER_KBPS) << U_FRAC_BITS) // (b * base_rtt_ns))
    u_tx = min(U_MAX, ((dtx * BITS_NS_PER_KBPS) << U_FRAC_BITS) // (b * dts))
    return min(U_MAX, u_queue + u_tx), dts


class Hpcc(TimeOnlyEvents):
    """HPCC sender of one QP: a window (bytes in flight) and a pacing rate W/T, driven by INT in ACKs."""

    name = "hpcc"

    def __init__(self, params: HpccParams | None = None, now_ns: int = 0) -> None:
        self.params = p = params or HpccParams()
        self._time = ModelTime(now_ns)
        self.window = p.w_max_bytes
        self.wc_bytes = p.w_max_bytes
        self.u_q16 = 0
        self.inc_stage = 0
        self.last_update_seq = 0
        self._rate_kbps = p.line_rate_kbps
        self._prev_hops: tuple[IntHop, ...] | None = None
        self.updates = 0

    @property
    def rate_kbps(self) -> int:
        return self._rate_kbps

    @property
    def rate_bps(self) -> int:
        return self._rate_kbps * KBPS

    @property
    def window_bytes(self) -> int | None:
        return self.window

    def state(self) -> HpccState:
        return HpccState(self.window, self.wc_bytes, self.u_q16, self.inc_stage, self._rate_kbps,
                         self.last_update_seq)

    def on_ack(self, ack: AckInfo, now_ns: int) -> None:
        """Measure utilisation from the echoed INT, then update W (and Wc once per RTT) and the rate."""
        self._time.move_to(now_ns)
        hops = ack.hops
        if not hops:
            return
        prev, self._prev_hops = self._prev_hops, hops
        if prev is None or len(prev) != len(hops):
            return
        p = self.params
        t = p.base_rtt_ns
        u_max, tau = -1, 0
        for new, old in zip(hops, prev, strict=True):
            sample = hop_utilization_q16(new, old, t, p.int_ts_bits, p.int_tx_bits)
            if sample is not None and sample[0] > u_max:
                u_max, tau = sample
        if u_max < 0:
            return
        tau = min(tau, t)
        self.u_q16 = ((t - tau) * self.u_q16 + tau * u_max) // t
        update = ack.ack_seq > self.last_update_seq
        if update:
            self.last_update_seq = ack.snd_nxt
        if self.u_q16 >= p.eta_q16 or self.inc_stage >= p.max_stage:
            w = (self.wc_bytes * p.eta_q16) // max(self.u_q16, 1) + p.w_ai_bytes
            if update:
                self.inc_stage = 0
        else:
            w = self.wc_bytes + p.w_ai_bytes
            if update:
                self.inc_stage += 1
        w = max(p.w_min_bytes, min(p.w_max_bytes, w))
        if update:
            self.wc_bytes = w
        self.window = w
        rate = (w * BITS_NS_PER_KBPS) // t
        self._rate_kbps = max(p.min_rate_kbps, min(p.line_rate_kbps, rate))
        self.updates += 1
