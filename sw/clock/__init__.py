"""The one clock of the data path, with a time-dilation factor.

Network time runs k times slower than wall time when dilation k > 1: a 100 Mb/s emulated link behaves as a
100 Gb/s link in slow motion.  Rates handed to the OS divide by k, durations multiply by k, and every figure
read back is converted to network time.  This module is a leaf: every package (p4 and hw included) may import
it, and nothing in the data path calls ``time.time()`` or ``time.sleep()`` directly.  ``sw.clock.lag`` measures
how late each component serviced its events on this clock (the ``fidelity`` of a run's figures).
"""

from __future__ import annotations

import os
import threading
import time

ENV_DILATION = "STARPULSE_TIME_DILATION"


def _check_dilation(dilation: float) -> float:
    if not dilation > 0:
        raise ValueError(f"time dilation must be > 0, not {dilation!r}")
    return float(dilation)


class Clock:
    """Monotonic network-time clock: ``now_ns()`` is wall time since creation divided by ``dilation``."""

    def __init__(self, dilation: float = 1.0) -> None:
        self.dilation = _check_dilation(dilation)
        self._wall_origin_ns = time.monotonic_ns()

    # --- reading and waiting, in network time ------------------------------------------------------------
    def now_ns(self) -> int:
        """Network time in ns since this clock started."""
        return int((time.monotonic_ns() - self._wall_origin_ns) / self.dilation)

    def now_s(self) -> float:
        return self.now_ns() / 1e9

    def sleep_ns(self, delay_ns: int | float) -> None:
        """Sleep for ``delay_ns`` of network time (``delay_ns * dilation`` of wall time)."""
        if delay_ns > 0:
            time.sleep(delay_ns * self.dilation / 1e9)

    def sleep_until_ns(self, deadline_ns: int | float) -> None:
        self.sleep_ns(deadline_ns - self.now_ns())

    # --- conversions between network and wall (OS) quantities --------------------------------------------
    def wall_rate_bps(self, rate_bps: float) -> float:
        """The OS-level rate (e.g. for tc) that emulates ``rate_bps`` of network rate."""
        return rate_bps / self.dilation

    def net_rate_bps(self, wall_rate_bps: float) -> float:
        return wall_rate_bps * self.dilation

    def wall_duration_ns(self, duration_ns: float) -> float:
        """The OS-level duration (e.g. a tc delay) that emulates ``duration_ns`` of network time."""
        return duration_ns * self.dilation

    def net_duration_ns(self, wall_duration_ns: float) -> float:
        return wall_duration_ns / self.dilation

    def box_ns(self, net_ns: int | None = None) -> int:
        """A reading of this clock (now, or ``net_ns``) in network ns since the box's CLOCK_MONOTONIC origin,
        which every process and namespace shares: records of several processes (ranks, switches) line up."""
        net = self.now_ns() if net_ns is None else net_ns
        return int(self._wall_origin_ns / self.dilation) + int(net)

    def net_age_ns(self, realtime_ns: int) -> int:
        """Network ns since ``realtime_ns``, a CLOCK_REALTIME stamp taken elsewhere (a kernel receive
        timestamp): how long a frame waited before this process serviced it (lag accounting, ``lag``)."""
        return int((time.time_ns() - realtime_ns) / self.dilation)


class ManualClock(Clock):
    """A clock that only moves when told to: deterministic time for models, simulators and tests."""

    def __init__(self, start_ns: int = 0, dilation: float = 1.0) -> None:
        self.dilation = _check_dilation(dilation)
        self._now_ns = int(start_ns)
        self._cond = threading.Condition()

    def now_ns(self) -> int:
        return self._now_ns

    def box_ns(self, net_ns: int | None = None) -> int:
        """A manual clock's own time is its only time base."""
        return self._now_ns if net_ns is None else int(net_ns)

    def advance_ns(self, delta_ns: int) -> int:
        if delta_ns < 0:
            raise ValueError(f"a clock cannot go backwards (delta_ns={delta_ns})")
        with self._cond:
            self._now_ns += int(delta_ns)
            self._cond.notify_all()
        return self._now_ns

    def sleep_ns(self, delay_ns: int | float) -> None:
        """Block until another thread advances the clock past now + delay (returns at once if delay <= 0)."""
        self.sleep_until_ns(self._now_ns + delay_ns)

    def sleep_until_ns(self, deadline_ns: int | float) -> None:
        with self._cond:
            while self._now_ns < deadline_ns:
                self._cond.wait()


_default: Clock | None = None
_default_lock = threading.Lock()


def get_clock() -> Clock:
    """The process-wide clock; its dilation comes from $STARPULSE_TIME_DILATION (default 1)."""
    global _default
    with _default_lock:
        if _default is None:
            raw = os.environ.get(ENV_DILATION, "1")
            try:
                dilation = float(raw)
            except ValueError:
                raise ValueError(f"${ENV_DILATION}={raw!r}: expected a number > 0") from None
            _default = Clock(dilation)
        return _default


def set_clock(clock: Clock) -> Clock:
    """Install ``clock`` as the process-wide clock (tests and emulators); returns it."""
    global _default
    with _default_lock:
        _default = clock
    return clock
