"""Lag accounting on the one clock: how late a component serviced the events it was due to service.

A ``LagStats`` is a cheap, mergeable lateness histogram in network ns (16 sub-buckets per power of two, so a
percentile is within 1/16 of its value) plus the exact count of events later than a bound (default: one MTU's
serialization time at the component's link rate, ``mtu_serialization_ns``).  ``to_dict``/``from_dict`` make a
small JSON-able dict, so switches, NIC pacers, link emulators and throttles can report it and a collector can
merge it into one ``fidelity`` verdict (``fidelity``).  ``record_rx_batch`` turns a received batch's kernel
timestamps into receive lateness (the switch's ingress, the NIC's receive path).  Processes ``register`` their
components; at exit (or on ``write_lag_file``) they land in $STARPULSE_LAG_DIR as ``<pid>.json``, which
``read_lag_dir`` collects.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sw.clock import Clock
from sw.units import ETH_WIRE_OVERHEAD_BYTES

DEFAULT_RATE_BPS = 10_000_000_000  # a link of unknown rate: a veth's 10 Gb/s
ENV_LINK_MTU = "STARPULSE_LINK_MTU"
"""The fabric's IP MTU in bytes, which a fabric sets for the processes it starts (switches, link emulators, ranks):
the lateness bound is one frame of that MTU at the component's rate.  Unset: ``DEFAULT_LINK_MTU``."""
DEFAULT_LINK_MTU = 1500
LINK_MTU_RANGE = (576, 9216)        # the fabric's --mtu range
OK_SHARE = 0.001                    # a component is within its bound when at most this share of events was late
FIDELITY_KEYS = ("time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns", "worst_component", "ok")
_SUB_BITS = 4                       # 2**4 sub-buckets per power of two
_LINEAR = 2 << _SUB_BITS            # values below this have a bucket each
_BUCKETS = (64 - _SUB_BITS) << _SUB_BITS   # up to 2**63 ns


def link_mtu() -> int:
    """The IP MTU of this process's links: $STARPULSE_LINK_MTU (set by the fabric), else ``DEFAULT_LINK_MTU``."""
    raw = os.environ.get(ENV_LINK_MTU, "").strip()
    if not raw:
        return DEFAULT_LINK_MTU
    lo, hi = LINK_MTU_RANGE
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ValueError(f"${ENV_LINK_MTU}={raw!r}: expected an integer MTU in bytes, {lo}..{hi}")
    return int(raw)


def mtu_wire_bytes(ip_mtu: int) -> int:
    """What a frame of IP MTU ``ip_mtu`` occupies on the wire: Ethernet header and overhead added."""
    return ip_mtu + 14 + ETH_WIRE_OVERHEAD_BYTES


def mtu_serialization_ns(rate_bps: float, wire_bytes: int | None = None) -> int:
    """Network ns one MTU-sized frame (``wire_bytes``, else one of ``link_mtu()``) takes on a link of ``rate_bps``:
    the default lateness bound (a frame served later than this is behind a whole frame time of its own link)."""
    if not rate_bps > 0:
        raise ValueError(f"link rate {rate_bps!r} bit/s: must be > 0")
    if wire_bytes is None:
        wire_bytes = mtu_wire_bytes(link_mtu())
    return max(1, int(wire_bytes * 8 * 1_000_000_000 / rate_bps))


def _bucket_high_ns(index: int) -> int:
    """Largest value that falls into bucket ``index`` (percentiles report it: never an underestimate)."""
    if index < _LINEAR:
        return index
    shift, mant = divmod(index, 1 << _SUB_BITS)
    shift -= 1
    return ((mant + (1 << _SUB_BITS) + 1) << shift) - 1


def quantile_index(hist: list[int], total: int, q: float) -> int:
    """The first non-empty bucket of ``hist`` (counts or weights, ``total`` their sum) where the running sum
    reaches ``q`` (0..1) of the total: the one percentile rule of lag histograms and the switch's queue depths
    (0 when empty)."""
    if total <= 0:
        return 0
    rank = q * total
    seen = 0
    for b, n in enumerate(hist):
        seen += n
        if n and seen >= rank:
            return b
    return len(hist) - 1


class LagStats:
    """Lateness of one component's events in network ns: ``record(late_ns, n)`` per event (or n alike)."""

    __slots__ = ("bound_ns", "events", "late", "max_ns", "_hist")

    def __init__(self, bound_ns: int) -> None:
        if bound_ns < 1:
            raise ValueError(f"lateness bound {bound_ns} ns: must be >= 1")
        self.bound_ns = int(bound_ns)
        self.events = 0
        self.late = 0
        self.max_ns = 0
        self._hist = [0] * _BUCKETS

    def record(self, late_ns: int, n: int = 1) -> None:
        """``n`` events serviced ``late_ns`` (an int) after they were due (early or on time: 0)."""
        self.events += n
        if late_ns <= 0:
            self._hist[0] += n
            return
        if late_ns > self.max_ns:
            self.max_ns = late_ns
        if late_ns > self.bound_ns:
            self.late += n
        if late_ns < _LINEAR:
            self._hist[late_ns] += n
        else:
            shift = late_ns.bit_length() - _SUB_BITS - 1
            self._hist[(shift << _SUB_BITS) + (late_ns >> shift)] += n

    def reset(self) -> None:
        self.events = self.late = self.max_ns = 0
        self._hist = [0] * _BUCKETS

    @property
    def late_share(self) -> float:
        return self.late / self.events if self.events else 0.0

    def percentile_ns(self, q: float) -> int:
        """The ``q`` quantile (0..1) of lateness, rounded up to its bucket's top (0 without events)."""
        if not self.events:
            return 0
        return min(_bucket_high_ns(quantile_index(self._hist, self.events, q)), self.max_ns)

    @property
    def ok(self) -> bool:
        return self.late <= OK_SHARE * self.events

    def merge(self, other: LagStats) -> LagStats:
        """Add ``other``'s events (its late count was judged against its own bound)."""
        self.events += other.events
        self.late += other.late
        self.max_ns = max(self.max_ns, other.max_ns)
        self._hist = [a + b for a, b in zip(self._hist, other._hist, strict=True)]
        return self

    def summary(self) -> dict[str, Any]:
        """Figures for people and verdicts: events, late count and share, p50/p99/max, bound, ok."""
        return {"events": self.events, "late": self.late, "late_share": round(self.late_share, 6),
                "lag_p50_ns": self.percentile_ns(0.5), "lag_p99_ns": self.percentile_ns(0.99),
                "lag_max_ns": self.max_ns, "bound_ns": self.bound_ns, "ok": self.ok}

    def to_dict(self) -> dict[str, Any]:
        """A small JSON-able form (sparse histogram) that ``from_dict`` reads back exactly."""
        return {"bound_ns": self.bound_ns, "events": self.events, "late": self.late, "max_ns": self.max_ns,
                "hist": {str(b): n for b, n in enumerate(self._hist) if n}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LagStats:
        try:
            s = cls(int(data["bound_ns"]))
            s.events, s.late, s.max_ns = int(data["events"]), int(data["late"]), int(data["max_ns"])
            for b, n in data["hist"].items():
                s._hist[int(b)] += int(n)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ValueError(f"not a lag-stats dict ({type(exc).__name__}: {exc})") from None
        return s


def record_rx_batch(lag: LagStats, clock: Clock, n: int, first_ts_ns: int, last_ts_ns: int) -> None:
    """Receive lateness of a batch of ``n`` frames serviced now, from the kernel's receive times (CLOCK_REALTIME
    ns) of its first (the oldest, the latest serviced) and last frame: half the batch counted at each age (one
    clock read: the last is younger by the kernel's gap between the two; no per-frame cost)."""
    first_age_ns = clock.net_age_ns(first_ts_ns)
    if n > 1:
        lag.record(first_age_ns, n - (n >> 1))
        lag.record(first_age_ns - int(clock.net_duration_ns(last_ts_ns - first_ts_ns)), n >> 1)
    else:
        lag.record(first_age_ns)


def component_summaries(components: dict[str, LagStats]) -> dict[str, dict[str, Any]]:
    """Every component that had events, by name: its ``summary()`` (the figures behind a ``fidelity`` verdict)."""
    return {name: components[name].summary() for name in sorted(components) if components[name].events}


def fidelity(components: dict[str, LagStats], time_dilation: float) -> dict[str, Any]:
    """The ``fidelity`` verdict of a run over its components' lag: ok when every one stayed within its bound
    for >= 99.9 % of its events; the worst component is the one with the largest late share (then p99/bound)."""
    worst_name, worst = None, None
    for name in sorted(components):
        s = components[name]
        if not s.events:
            continue
        key = (s.late_share, s.percentile_ns(0.99) / s.bound_ns)
        if worst is None or key > (worst.late_share, worst.percentile_ns(0.99) / worst.bound_ns):
            worst_name, worst = name, s
    counted = [s for s in components.values() if s.events]
    return {
        "time_dilation": time_dilation,
        "bound_ns": worst.bound_ns if worst else None,
        "late_share": round(worst.late_share, 6) if worst else 0.0,
        "lag_p99_ns": max((s.percentile_ns(0.99) for s in counted), default=0),
        "lag_max_ns": max((s.max_ns for s in counted), default=0),
        "worst_component": worst_name,
        "ok": all(s.ok for s in counted),
    }


def combine_fidelity(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """One verdict over several runs' (a bench of several runs): ok when all are; the worst run's late share,
    bound and component; the largest lags."""
    if not verdicts:
        raise ValueError("no fidelity verdicts to combine")
    worst = max(verdicts, key=lambda f: (not f["ok"], f["late_share"]))
    return {**worst, "lag_p99_ns": max(f["lag_p99_ns"] for f in verdicts),
            "lag_max_ns": max(f["lag_max_ns"] for f in verdicts), "ok": all(f["ok"] for f in verdicts)}


def fidelity_warning(fid: dict[str, Any]) -> str | None:
    """One line for text output when the verdict is not ok (None when it is)."""
    if fid.get("ok", True):
        return None
    return (f"warning: fidelity: {fid['worst_component']} serviced {fid['late_share'] * 100:.2f} % of its events "
            f"later than {fid['bound_ns']} ns (lag over all components: p99 {fid['lag_p99_ns']} ns, max "
            f"{fid['lag_max_ns']} ns of network time) at time dilation {fid['time_dilation']}: these figures are "
            "bent by CPU load; use a higher --time-dilation")


# --- --time-dilation auto: the search (the probe is the caller's: a fabric's, a selftest's) ----------------
MIN_STEP = 2.0               # each failed attempt raises the dilation at least this much ...
MAX_STEP = 4.0               # ... and at most this much (an overloaded component's lag says nothing about scale)
HEADROOM = 1.5               # the dilation the lag asks for, times this (the load moves)
MARGINAL_SHARE = 10 * OK_SHARE   # a late share up to this is a marginal miss: a HEADROOM step is enough


class CalibrationError(RuntimeError):
    """``--time-dilation auto:CEILING``: not even the ceiling kept the fabric within its bounds."""

    is_user_error = True


def next_dilation(k: float, fid: dict[str, Any], ceiling: float) -> float:
    """The next dilation to try after ``fid`` was not ok at ``k``: wall lag stays, network lag shrinks by k.

    A marginal miss (the worst component's late share at most ``MARGINAL_SHARE``) means its 99.9th percentile sits
    just above its bound: ``HEADROOM`` times k is enough, where a larger step would cost a measured rerun that
    much more wall time (issue 16: 0.11 % late at 256 asked for 604).  Otherwise the lag asks: the largest p99
    over all components (the verdict's ``lag_p99_ns``, at least the worst component's own) over the worst's
    bound, times ``HEADROOM``, kept within ``MIN_STEP``..``MAX_STEP`` times k."""
    if fid.get("late_share", 1.0) <= MARGINAL_SHARE:
        return float(min(ceiling, max(round(k * HEADROOM), k + 1)))
    bound, p99 = fid.get("bound_ns") or 1, max(fid.get("lag_p99_ns") or 0, 1)
    wanted = k * p99 / bound * HEADROOM
    return float(min(ceiling, round(min(max(k * MIN_STEP, wanted), k * MAX_STEP))))


def late_summary(fid: dict[str, Any]) -> str:
    """Why a fidelity verdict is not ok, in the words of the ``auto`` lines: ``p0l0 tm 1.77 % of events later
    than 123040 ns (0.1 % allowed), lag p99 188415 ns`` (the share decides: p99 may be within the bound)."""
    return (f"{fid['worst_component']} {fid['late_share'] * 100:.2f} % of events later than {fid['bound_ns']} ns "
            f"({OK_SHARE * 100:g} % allowed), lag p99 {fid['lag_p99_ns']} ns")


def search_dilation(attempt: Callable[[float], dict[str, Any]], ceiling: float, flag: str,
                    echo: Callable[[str], None] | None = None) -> tuple[float, dict[str, Any]]:
    """From dilation 1 up: ``attempt(k)`` runs the probe at k and returns its fidelity; the first k that is ok
    (raised by ``next_dilation`` after each one that is not), or ``CalibrationError`` beyond the ceiling."""
    k = 1.0
    while True:
        fid = attempt(k)
        if fid["ok"]:
            if echo:
                echo(f"time dilation auto: {k:g} (probe at line rate: {fid['late_share'] * 100:.2f} % of events "
                     f"late at worst, lag p99 {fid['lag_p99_ns']} ns)")
            return k, fid
        if k >= ceiling:
            raise CalibrationError(
                f"--time-dilation {flag}: not ok even at the ceiling {ceiling:g} ({late_summary(fid)}): raise the "
                "ceiling or free the CPU")
        nxt = next_dilation(k, fid, ceiling)
        if echo:
            echo(f"time dilation auto: {k:g} not ok ({late_summary(fid)}): trying {nxt:g}")
        k = nxt


STRICT_FIDELITY_EXIT = 3


def add_strict_fidelity_flag(parser: argparse.ArgumentParser) -> None:
    """``--strict-fidelity``: the one spelling every command that reports ``fidelity`` accepts."""
    parser.add_argument("--strict-fidelity", action="store_true",
                        help=f"exit {STRICT_FIDELITY_EXIT} when the run's fidelity is not ok (some component "
                             "serviced more than 0.1 %% of its events later than its bound)")


def fidelity_exit(fid: dict[str, Any] | None, strict: bool) -> int:
    """Print the warning line (stderr) when ``fid`` is not ok; the exit code ``--strict-fidelity`` asks for
    (``STRICT_FIDELITY_EXIT``, else 0)."""
    line = fidelity_warning(fid) if fid else None
    if line is None:
        return 0
    print(line, file=sys.stderr, flush=True)
    return STRICT_FIDELITY_EXIT if strict else 0


# --- reporting: a process's components, dumped where the run's collector reads them -------------------------
ENV_LAG_DIR = "STARPULSE_LAG_DIR"
_registry: dict[str, LagStats] = {}
_registry_pid = os.getpid()   # whose components _registry holds: a forked child inherits its parent's


def _own_registry() -> dict[str, LagStats]:
    """This process's components: what a fork inherited from the parent is the parent's to report, not ours."""
    global _registry_pid
    if _registry_pid != os.getpid():
        _registry.clear()
        _registry_pid = os.getpid()
    return _registry


def register(name: str, stats: LagStats) -> LagStats:
    """Report ``stats`` as component ``name`` of this process (``write_lag_file``, at exit); returns it."""
    if not _own_registry():
        atexit.register(write_lag_file)
    base, k = name, 2
    while name in _registry and _registry[name] is not stats:     # another one of that name: keep both
        name, k = f"{base} #{k}", k + 1
    _registry[name] = stats
    return stats


def write_lag_file(directory: str | None = None) -> Path | None:
    """This process's registered components as ``<dir>/<pid>.json`` ({name: to_dict()}), written atomically;
    ``dir`` defaults to $STARPULSE_LAG_DIR (nothing written when neither is set or nothing is registered)."""
    directory = directory or os.environ.get(ENV_LAG_DIR)
    if not directory or not _own_registry():
        return None
    path = Path(directory) / f"{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps({name: s.to_dict() for name, s in _registry.items()}))
        tmp.replace(path)
    except OSError:
        return None             # a run's directory removed under us: nothing to report to
    return path


def read_lag_dir(directory: str | Path) -> dict[str, LagStats]:
    """Every component the processes of a run reported into ``directory`` (one ``LagStats`` per name, merged
    when several processes used the same name)."""
    out: dict[str, LagStats] = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            items = [(name, LagStats.from_dict(d)) for name, d in data.items()]
        except (OSError, ValueError, AttributeError):
            continue            # a file being replaced or not ours
        for name, s in items:
            if name in out:
                out[name].merge(s)
            else:
                out[name] = s
    return out
