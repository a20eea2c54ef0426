"""Byte-rate throttle on ``sw.clock`` (network time): keeps an emulated link class at its configured bandwidth."""

from __future__ import annotations

import os

from sw.clock import Clock, get_clock
from sw.clock.lag import LagStats, mtu_serialization_ns, register

JITTER_WALL_NS = 4_000_000
"""Scheduling jitter the default burst absorbs: a process descheduled this long on a busy machine does not
lose link capacity (the long-run rate stays exact; a burst only lets a late sender catch up)."""
IDLE_BURST_BYTES = 64 * 1024
"""Most a sender may bank while it has nothing queued: a link at rest does not store capacity (with the jitter
burst, a message sent after a pause would leave at memcpy speed instead of the configured rate)."""
WAKE_BYTES = 16 * 1024
"""What a sender held back waits for: the transports wake when this much (or what they want) is granted again."""


class Throttle:
    """Token bucket of ``rate_bps`` (network time) holding at most ``burst_bytes``; ``grant`` never blocks.

    The default burst is the larger of 64 KiB and ``JITTER_WALL_NS`` of wall time at the rate; it only fills while
    the sender is ``backlogged`` (set by its transport after each progress round); tokens gathered while it
    was not stop at ``idle_burst_bytes`` (default: ``IDLE_BURST_BYTES`` or the burst if smaller)."""

    def __init__(self, rate_bps: float, burst_bytes: int | None = None, clock: Clock | None = None,
                 idle_burst_bytes: int | None = None) -> None:
        if not rate_bps > 0:
            raise ValueError(f"rate_bps must be > 0, not {rate_bps!r}")
        self.clock = clock or get_clock()
        self.rate_bps = float(rate_bps)
        if burst_bytes is None:
            jitter_net_ns = self.clock.net_duration_ns(JITTER_WALL_NS)
            burst_bytes = max(64 * 1024, int(self.rate_bps * jitter_net_ns / 8e9))
        self.burst_bytes = int(burst_bytes)
        self.idle_burst_bytes = min(self.burst_bytes, IDLE_BURST_BYTES if idle_burst_bytes is None
                                    else int(idle_burst_bytes))
        self.backlogged = False
        self._tokens = float(self.idle_burst_bytes)
        self._last_ns = self.clock.now_ns()
        # lateness: a sender held back is due again when WAKE_BYTES (or what it wanted) are back in the bucket
        self.lag = register(f"throttle pid {os.getpid()}", LagStats(mtu_serialization_ns(self.rate_bps)))
        self._due_ns: float | None = None

    def grant(self, want_bytes: int) -> int:
        """How many of ``want_bytes`` may go now (0..want); the granted bytes are spent."""
        now = self.clock.now_ns()
        cap = self.burst_bytes if self.backlogged else self.idle_burst_bytes
        self._tokens = min(cap, self._tokens + (now - self._last_ns) * self.rate_bps / 8e9)
        self._last_ns = now
        n = max(min(want_bytes, int(self._tokens)), 0)
        self._tokens -= n
        if n and self._due_ns is not None:
            self.lag.record(int(now - self._due_ns))
            self._due_ns = None
        if n < want_bytes and self._due_ns is None:
            self._due_ns = now + self.ready_in_ns(min(want_bytes - n, WAKE_BYTES))
        return n

    def ready_in_ns(self, nbytes: int) -> float:
        """Network ns until ``nbytes`` of tokens will be there (0 if they are now)."""
        missing = min(nbytes, self.burst_bytes) - self._tokens
        return max(0.0, missing * 8e9 / self.rate_bps)

    def refund(self, nbytes: int) -> None:
        """Return granted bytes that could not be sent after all."""
        self._tokens = min(self.burst_bytes, self._tokens + nbytes)
