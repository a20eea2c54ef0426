"""Watchdog deadlines and polling back-off through ``sw.clock``: timeouts are wall seconds, waits never hang."""

from __future__ import annotations

from sw.clock import Clock, get_clock

from .errors import CollectiveTimeoutError


class Deadline:
    """A wall-time budget of ``timeout_s`` measured on the clock (network time is dilated, budgets are not)."""

    def __init__(self, timeout_s: float, clock: Clock | None = None) -> None:
        self.clock = clock or get_clock()
        self.timeout_s = timeout_s
        self._end_ns = self.clock.now_ns() + self.clock.net_duration_ns(timeout_s * 1e9)

    def expired(self) -> bool:
        return self.clock.now_ns() >= self._end_ns

    def remaining_s(self) -> float:
        """Wall seconds left (0 when expired)."""
        left_ns = self.clock.wall_duration_ns(self._end_ns - self.clock.now_ns())
        return max(0.0, left_ns / 1e9)

    def check(self, what: str) -> None:
        """Raise CollectiveTimeoutError naming ``what`` if the budget is spent."""
        if self.expired():
            raise CollectiveTimeoutError(f"timed out after {self.timeout_s:g} s waiting for {what}")


class Backoff:
    """Idle back-off for polling loops: a few free spins, then sleeps growing from 20 µs to 1 ms (wall)."""

    def __init__(self, clock: Clock | None = None, spins: int = 10) -> None:
        self.clock = clock or get_clock()
        self.spins = spins
        self._idle = 0

    def reset(self) -> None:
        self._idle = 0

    def idle(self, wake_in_ns: float | None = None) -> None:
        """One idle round; ``wake_in_ns`` (network time) caps the sleep when a throttle will refill by then."""
        self._idle += 1
        if self._idle <= self.spins and wake_in_ns is None:
            return
        rounds = max(0, self._idle - self.spins) // 20
        delay_ns = self.clock.net_duration_ns(min(1_000_000, 20_000 * (1 << min(6, rounds))))
        if wake_in_ns is not None:
            delay_ns = min(delay_ns, max(wake_in_ns, 0))
        self.clock.sleep_ns(delay_ns)
