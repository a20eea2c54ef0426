"""The one small interface every congestion-control model offers, so pacers and RTL tests drive any of them.

A model is a per-QP object fed with events stamped with explicit integer ns times (never read from a clock).
Its output is ``rate_kbps`` (and, for window-based schemes, ``window_bytes``) which the pacer applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sw.cc.fixedpoint import KBPS


@dataclass(frozen=True, slots=True)
class IntHop:
    """One hop's in-band telemetry as a switch stamps it at egress (HPCC's per-hop record).

    ``ts_ns``: egress timestamp; ``tx_bytes``: cumulative bytes sent on the egress port; ``qlen_bytes``:
    egress queue length; ``link_kbps``: egress link bandwidth.
    """

    ts_ns: int
    tx_bytes: int
    qlen_bytes: int
    link_kbps: int


@dataclass(frozen=True, slots=True)
class AckInfo:
    """What an ACK tells the sender: cumulative ``ack_seq`` (bytes), the sender's ``snd_nxt`` when the ACK
    arrived, and the INT hops echoed by the receiver (empty when the path has no INT)."""

    ack_seq: int
    snd_nxt: int
    hops: tuple[IntHop, ...] = ()


@runtime_checkable
class CongestionControl(Protocol):
    """Events in, rate (and optional window) out; all times are integer ns supplied by the caller."""

    name: str

    @property
    def rate_kbps(self) -> int: ...

    @property
    def window_bytes(self) -> int | None: ...

    def advance(self, now_ns: int) -> None:
        """Process every timer expiry up to and including ``now_ns``."""

    def on_bytes_sent(self, nbytes: int, now_ns: int) -> None:
        """The QP put ``nbytes`` on the wire at ``now_ns``."""

    def on_cnp(self, now_ns: int) -> None:
        """A congestion notification packet for this QP arrived at ``now_ns``."""

    def on_ack(self, ack: AckInfo, now_ns: int) -> None:
        """An ACK (possibly carrying INT) for this QP arrived at ``now_ns``."""


class ModelTime:
    """Monotonic 'now' bookkeeping shared by the models: time passed in must never go backwards."""

    __slots__ = ("now_ns",)

    def __init__(self, start_ns: int) -> None:
        if start_ns < 0:
            raise ValueError(f"start time must be >= 0 ns, not {start_ns}")
        self.now_ns = int(start_ns)

    def move_to(self, now_ns: int) -> None:
        if now_ns < self.now_ns:
            raise ValueError(f"time went backwards: {now_ns} ns < {self.now_ns} ns")
        self.now_ns = now_ns


class TimeOnlyEvents:
    """Events a model ignores except that its time moves: all of them for 'none', timers, sends and CNPs for
    HPCC (no timers, ECN-free), which overrides ``on_ack``."""

    _time: ModelTime

    def advance(self, now_ns: int) -> None:
        self._time.move_to(now_ns)

    def on_bytes_sent(self, nbytes: int, now_ns: int) -> None:
        self._time.move_to(now_ns)

    def on_cnp(self, now_ns: int) -> None:
        self._time.move_to(now_ns)

    def on_ack(self, ack: AckInfo, now_ns: int) -> None:
        self._time.move_to(now_ns)


class NoCc(TimeOnlyEvents):
    """Baseline 'none': a fixed rate (the line rate), no window, every event ignored except time."""

    name = "none"

    def __init__(self, line_rate_kbps: int, now_ns: int = 0) -> None:
        if line_rate_kbps <= 0:
            raise ValueError(f"line_rate_kbps must be > 0, not {line_rate_kbps}")
        self._rate_kbps = int(line_rate_kbps)
        self._time = ModelTime(now_ns)

    @property
    def rate_kbps(self) -> int:
        return self._rate_kbps

    @property
    def rate_bps(self) -> int:
        return self._rate_kbps * KBPS

    @property
    def window_bytes(self) -> int | None:
        return None

