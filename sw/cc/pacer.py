"""Token-bucket pacer model: byte-accurate, integer, deterministic; the host stack's pacer and the RTL rate
limiter are both checked against it.

Credit is kept in units of 1e-9 bit so that refilling is exact: ``credit += rate_bps * elapsed_ns``. A
packet of ``n`` bytes costs ``n * 8_000_000_000`` units. Rules (the RTL limiter's :class:`CycleTokenBucket`
follows them, except that it starts empty and needs credit > 0, so a QP at rate 0 never sends):

* the bucket holds at most ``burst_bytes`` of credit (refill saturates there);
* a packet is *eligible* when credit >= 0 (a sign test); sending it subtracts its full size, so credit may go
  negative (a deficit) and a packet larger than the burst is still sent - the long-run rate stays exact;
* ``set_rate`` first refills at the old rate up to ``now``, then switches.

Because refills telescope (credit(t) = credit(t0) + rate * (t - t0) while below the cap) the result does not
depend on how often ``refill`` is called - e.g. once per RTL clock cycle or once per packet.
"""

from __future__ import annotations

from dataclasses import dataclass

from sw.cc.base import AckInfo, CongestionControl, ModelTime
from sw.cc.errors import check_int_range
from sw.cc.fixedpoint import KBPS

UNITS_PER_BYTE = 8 * 1_000_000_000
"""Credit units (1e-9 bit) per byte."""


class TokenBucket:
    """Paces one QP at ``rate_bps`` with a bucket of ``burst_bytes``; starts full unless ``start_full=False``."""

    def __init__(self, rate_bps: int, burst_bytes: int, now_ns: int = 0, start_full: bool = True) -> None:
        if burst_bytes < 0:
            raise ValueError(f"burst_bytes must be >= 0, not {burst_bytes}")
        self._check_rate(rate_bps)
        self.rate_bps = int(rate_bps)
        self.burst_bytes = int(burst_bytes)
        self.credit_max = self.burst_bytes * UNITS_PER_BYTE
        self.credit = self.credit_max if start_full else 0
        self._time = ModelTime(now_ns)
        self.bytes_sent = 0
        self.packets_sent = 0

    @staticmethod
    def _check_rate(rate_bps: int) -> None:
        if isinstance(rate_bps, bool) or not isinstance(rate_bps, int) or rate_bps <= 0:
            raise ValueError(f"rate_bps must be a positive integer, not {rate_bps!r}")

    @property
    def credit_bytes(self) -> int:
        """Current credit in whole bytes (floor; negative while in deficit)."""
        return self.credit // UNITS_PER_BYTE

    def refill(self, now_ns: int) -> None:
        """Add ``rate_bps * (now - last)`` credit, saturating at the burst."""
        elapsed = now_ns - self._time.now_ns
        self._time.move_to(now_ns)
        if self.credit < self.credit_max:
            self.credit = min(self.credit_max, self.credit + self.rate_bps * elapsed)

    def set_rate(self, rate_bps: int, now_ns: int) -> None:
        """Change the rate at ``now_ns`` (credit earned so far is kept at the old rate)."""
        self._check_rate(rate_bps)
        self.refill(now_ns)
        self.rate_bps = int(rate_bps)

    def eligible(self, now_ns: int) -> bool:
        """May a packet start now? (credit >= 0)"""
        self.refill(now_ns)
        return self.credit >= 0

    def try_send(self, nbytes: int, now_ns: int) -> bool:
        """Send ``nbytes`` now if eligible (charging its full size); returns whether it was sent."""
        if nbytes <= 0:
            raise ValueError(f"nbytes must be > 0, not {nbytes}")
        if not self.eligible(now_ns):
            return False
        self.credit -= nbytes * UNITS_PER_BYTE
        self.bytes_sent += nbytes
        self.packets_sent += 1
        return True

    def next_eligible_ns(self, now_ns: int) -> int:
        """Earliest time >= now at which a packet becomes eligible at the current rate (ceil)."""
        self.refill(now_ns)
        if self.credit >= 0:
            return now_ns
        return now_ns + (-self.credit + self.rate_bps - 1) // self.rate_bps


class CcPacer:
    """One QP's pacer: a :class:`TokenBucket` whose rate follows a congestion-control model, plus the model's
    window (if any) as an in-flight limit. The host stack and the simulator pace through this."""

    def __init__(self, cc: CongestionControl, burst_bytes: int, now_ns: int = 0) -> None:
        self.cc = cc
        self._rate_kbps = cc.rate_kbps
        self.bucket = TokenBucket(self._rate_kbps * KBPS, burst_bytes, now_ns=now_ns)

    def _sync(self, now_ns: int) -> None:
        self.cc.advance(now_ns)
        rate = self.cc.rate_kbps
        if rate != self._rate_kbps:
            self.bucket.set_rate(rate * KBPS, now_ns)
            self._rate_kbps = rate

    def window_open(self, inflight_bytes: int) -> bool:
        """May another packet go out with ``inflight_bytes`` unacknowledged? (in-flight < W, as HPCC sends)"""
        w = self.cc.window_bytes
        return w is None or inflight_bytes < w

    def next_send_ns(self, now_ns: int, inflight_bytes: int = 0) -> int | None:
        """Earliest time >= now a packet may start at the current rate; None while the window is closed."""
        self._sync(now_ns)
        if not self.window_open(inflight_bytes):
            return None
        return self.bucket.next_eligible_ns(now_ns)

    def try_send(self, nbytes: int, now_ns: int, inflight_bytes: int = 0) -> bool:
        """Send ``nbytes`` now if window and bucket allow; tells the model about the bytes."""
        self._sync(now_ns)
        if not self.window_open(inflight_bytes) or not self.bucket.try_send(nbytes, now_ns):
            return False
        self.cc.on_bytes_sent(nbytes, now_ns)
        return True

    def on_cnp(self, now_ns: int) -> None:
        self.cc.on_cnp(now_ns)
        self._sync(now_ns)

    def on_ack(self, ack: AckInfo, now_ns: int) -> None:
        self.cc.on_ack(ack, now_ns)
        self._sync(now_ns)


@dataclass(frozen=True)
class RateToIncrement:
    """Hardware conversion of a CC rate (kb/s) into a per-clock-cycle credit increment.

    The RTL limiter counts credit in units of 2^-frac_bits byte and adds ``increment`` per clock cycle.
    ``increment(rate) = (rate_kbps * mult) >> mult_shift`` with the constant
    ``mult = (1000 << (frac_bits + mult_shift)) // (8 * clk_hz)`` - one constant multiply and a shift, no
    divider. Defaults (400 MHz, 24 fractional bits, 16-bit multiplier shift) give a 19-bit ``mult`` and a
    32-bit increment up to 256 B/cycle (819 Gb/s); 1 Mb/s is paced to within 0.02 %.
    """

    clk_hz: int = 400_000_000
    frac_bits: int = 24
    mult_shift: int = 16

    def __post_init__(self) -> None:
        check_int_range("limiter", "clk_hz", self.clk_hz, 1_000_000, 10_000_000_000)
        check_int_range("limiter", "frac_bits", self.frac_bits, 8, 40)
        check_int_range("limiter", "mult_shift", self.mult_shift, 0, 32)

    @property
    def mult(self) -> int:
        return (1000 << (self.frac_bits + self.mult_shift)) // (8 * self.clk_hz)

    def increment(self, rate_kbps: int) -> int:
        """Credit (2^-frac_bits byte) added per clock cycle for ``rate_kbps``."""
        return (rate_kbps * self.mult) >> self.mult_shift

    def paced_rate_bps(self, rate_kbps: int) -> float:
        """The rate a limiter with this increment really sends at (for error reports, not for state)."""
        return self.increment(rate_kbps) * 8 * self.clk_hz / (1 << self.frac_bits)


class CycleTokenBucket:
    """The token bucket as the RTL keeps it: credit in 2^-frac_bits byte, refilled per clock cycle.

    Rules of :class:`TokenBucket` with cycles for ns: ``advance(cycles)`` adds ``increment * cycles``
    saturating at ``burst_bytes << frac_bits`` (a lazily refilled BRAM entry gives the same result as a
    per-cycle refill, since the cap is idempotent); a packet is eligible when credit > 0 and ``send`` then
    charges ``nbytes << frac_bits`` (credit may go negative).  Unlike the host bucket it starts empty and
    tests > 0, as the RTL does: a QP's memory word is zeroed at reset and a rate of 0 must mean "paused",
    which a >= 0 test would break by letting a fresh or exactly drained QP send once at rate 0.
    """

    def __init__(self, increment: int, burst_bytes: int, frac_bits: int = 24, start_full: bool = False) -> None:
        if increment < 0 or burst_bytes < 0:
            raise ValueError(f"increment and burst_bytes must be >= 0, not {increment}, {burst_bytes}")
        self.increment = increment
        self.frac_bits = frac_bits
        self.credit_max = burst_bytes << frac_bits
        self.credit = self.credit_max if start_full else 0
        self.cycle = 0

    def advance(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, not {cycles}")
        self.cycle += cycles
        if self.credit < self.credit_max:
            self.credit = min(self.credit_max, self.credit + self.increment * cycles)

    def eligible(self) -> bool:
        return self.credit > 0

    def send(self, nbytes: int) -> bool:
        """Charge ``nbytes`` if eligible; returns whether the packet went."""
        if self.credit <= 0:
            return False
        self.credit -= nbytes << self.frac_bits
        return True

    def cycles_until_eligible(self) -> int:
        """Clock cycles until credit > 0 at the current increment (0 if eligible now)."""
        if self.credit > 0:
            return 0
        if self.increment == 0:
            raise ValueError("increment is 0: the bucket never refills")
        return -self.credit // self.increment + 1
