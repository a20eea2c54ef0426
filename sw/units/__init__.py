"""Parsing and printing of rates, sizes and durations as users write them (100M, 1G, 8K, 10us).

A leaf like ``sw.clock``: every package and CLI may import it.  Its sub-modules are the other tools several layers
share, each written once: ``crc16`` (the CRC-16 of fabric.p4's ECMP hash: the P4 target and the simulator),
``cli_guard`` (every entry point's error guard), ``file_store`` (the rendezvous store) and ``jsonl_socket`` (the
control sockets' JSON-lines framing).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_SI = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_BIN = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_TIME_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9}

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:bps|b/s|bit/s|bit)?\s*$", re.IGNORECASE)
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$")


class UnitError(ValueError):
    """A rate, size or duration that cannot be parsed; the message names the value and the allowed form."""

    is_user_error = True


ETH_WIRE_OVERHEAD_BYTES = 24
"""What a frame occupies on an Ethernet wire beyond its bytes: preamble and start delimiter (8), FCS (4) and the
inter-frame gap (12).  Every pacer, link emulator and serialization time counts it."""
ROCE_DATA_FRAME_OVERHEAD_BYTES = 14 + 20 + 8 + 12 + 4
"""The headers around one path MTU of RoCEv2 payload: Ethernet, IPv4, UDP, BTH and the ICRC."""

MAX_LINK_RATE_BPS = 1_600_000_000_000
"""The fastest Ethernet port (1.6T): the upper bound of every link-rate flag."""
MAX_LINK_DELAY_NS = 10 * 10**9


def parse_rate_bps(text: str, *, what: str = "rate", max_bps: float | None = None) -> int:
    """'100M' -> 100_000_000 bit/s (SI prefixes, as link rates are written); at most ``max_bps`` if given."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise UnitError(f"{what} {text!r}: expected a rate like 100M, 1G or 400G (bit/s)")
    value = float(m.group(1)) * _SI[m.group(2).upper()]
    if value <= 0:
        raise UnitError(f"{what} {text!r}: must be greater than 0")
    if max_bps is not None and value > max_bps:
        raise UnitError(f"{what} {text!r}: at most {format_rate_bps(max_bps)}")
    return int(round(value))


def parse_size_bytes(text: str, *, what: str = "size") -> int:
    """'8K' -> 8192 bytes (binary prefixes, as nccl-tests and perftest read sizes)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UnitError(f"{what} {text!r}: expected a size like 64, 8K, 64M or 1G (bytes)")
    return int(m.group(1)) * _BIN[m.group(2).upper()]


def parse_duration_ns(text: str, *, what: str = "duration", default_unit: str = "ns",
                      max_ns: int | None = None) -> int:
    """'10us' -> 10_000 ns; a bare number is taken in ``default_unit``; at most ``max_ns`` if given."""
    m = _TIME_RE.match(str(text))
    if not m:
        raise UnitError(f"{what} {text!r}: expected a duration like 500ns, 10us, 2ms or 1s")
    unit = m.group(2) or default_unit
    value = int(round(float(m.group(1)) * _TIME_NS[unit]))
    if max_ns is not None and value > max_ns:
        raise UnitError(f"{what} {text!r}: at most {max_ns / 1e9:g} s")
    return value


def parse_number(text: str, *, what: str = "value", lo: float | None = None, hi: float | None = None,
                 integer: bool = False, lo_exclusive: bool = False, unit: str = "") -> Any:
    """A finite number (an int with ``integer``) within ``lo``..``hi`` (``lo_exclusive``: above ``lo``); nan, inf
    and values out of range raise ``UnitError`` naming the value and the allowed range."""
    allowed = _range_text(lo, hi, integer, lo_exclusive, unit)
    try:
        value: float = int(str(text).strip(), 10) if integer else float(text)
    except ValueError:
        raise UnitError(f"{what} {text!r}: expected {allowed}".strip()) from None
    if (not math.isfinite(value) or (lo is not None and (value <= lo if lo_exclusive else value < lo))
            or (hi is not None and value > hi)):
        raise UnitError(f"{what} {text!r}: must be {allowed}".strip())
    return value


def _range_text(lo: float | None, hi: float | None, integer: bool, lo_exclusive: bool, unit: str) -> str:
    def num(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else f"{v:g}"

    kind = "an integer" if integer else "a number"
    unit = f" ({unit})" if unit else ""
    if lo is not None and hi is not None and not lo_exclusive:
        return f"{kind} within {num(lo)}..{num(hi)}{unit}"
    bounds = [f"{'>' if lo_exclusive else '>='} {num(lo)}"] if lo is not None else []
    bounds += [f"<= {num(hi)}"] if hi is not None else []
    return f"{kind} {' and '.join(bounds)}{unit}" if bounds else f"a finite {kind[2:].lstrip()}{unit}"


def flag_type(parse: Callable[..., T], **limits: Any) -> Callable[[str], T]:
    """An argparse ``type=`` from one of this module's parsers: a bad value becomes argparse's own error, which
    names the flag (``argument --timeout: 'nan': must be a number > 0 ...``) and exits 2 before anything runs."""
    def convert(text: str) -> T:
        try:
            return parse(text, what="", **limits)
        except UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None

    convert.__name__ = parse.__name__
    return convert


def int_flag(lo: int | None = None, hi: int | None = None, unit: str = "") -> Callable[[str], int]:
    """``type=int_flag(1, 64)``: an integer flag within lo..hi."""
    return flag_type(parse_number, lo=lo, hi=hi, integer=True, unit=unit)


def float_flag(lo: float | None = None, hi: float | None = None, *, lo_exclusive: bool = False,
               unit: str = "") -> Callable[[str], float]:
    """``type=float_flag(0, 3600, lo_exclusive=True)``: a finite number flag within its range."""
    return flag_type(parse_number, lo=lo, hi=hi, lo_exclusive=lo_exclusive, unit=unit)


MAX_TIME_DILATION = 100_000.0
AUTO_DILATION_CEILING = 1000.0


@dataclass(frozen=True)
class AutoDilation:
    """``--time-dilation auto[:CEILING]``: calibrate the dilation on the fabric (from 1), never above ``ceiling``."""

    ceiling: float = AUTO_DILATION_CEILING

    def __str__(self) -> str:
        return f"auto:{self.ceiling:g}"


def parse_time_dilation(text: str, *, what: str = "--time-dilation") -> float | AutoDilation:
    """The one parser of ``--time-dilation``: a number > 0 (at most ``MAX_TIME_DILATION``), ``auto`` or
    ``auto:CEILING`` (a ceiling within 1..MAX_TIME_DILATION); anything else raises ``UnitError``."""
    raw = str(text).strip()
    word, sep, ceiling = raw.partition(":")
    if word.lower() == "auto":
        if not sep:
            return AutoDilation()
        try:
            return AutoDilation(parse_number(ceiling, what="", lo=1, hi=MAX_TIME_DILATION))
        except UnitError:
            raise UnitError(f"{what} {raw!r}: the auto ceiling must be a number within 1..{MAX_TIME_DILATION:g} "
                            f"(e.g. auto:{AUTO_DILATION_CEILING:g})".strip()) from None
    try:
        return parse_number(raw, what="", lo=0, hi=MAX_TIME_DILATION, lo_exclusive=True)
    except UnitError:
        raise UnitError(f"{what} {raw!r}: expected a number > 0 and <= {MAX_TIME_DILATION:g}, 'auto' or "
                        "'auto:CEILING'".strip()) from None


def time_dilation_flag(text: str) -> float | AutoDilation:
    """``type=time_dilation_flag``: ``parse_time_dilation`` as an argparse type (one-line error, exit 2)."""
    return flag_type(parse_time_dilation)(text)


def add_time_dilation_flag(group: Any, *, default: float | AutoDilation | None = None,
                           flags: tuple[str, ...] = ("--time-dilation",),
                           unset: str = "$STARPULSE_TIME_DILATION, else auto") -> None:
    """``--time-dilation K|auto[:CEILING]`` with its one parser and help, for every command that takes it
    (``unset``: what the command runs at without the flag)."""
    shown = unset if default is None else str(default)
    group.add_argument(*flags, dest="time_dilation", type=time_dilation_flag, default=default,
                       metavar="K|auto[:CEIL]",
                       help="network time runs K times slower than wall time (switches, NICs, links); auto: "
                            "calibrate on the fabric before the measured part, from 1 up to CEIL (default "
                            f"{AUTO_DILATION_CEILING:g}) until every component keeps up (default: {shown})")


def format_rate_bps(rate_bps: float) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if rate_bps >= scale:
            return f"{rate_bps / scale:.3g}{prefix}b/s"
    return f"{rate_bps:.3g}b/s"


def format_size_bytes(size_bytes: int) -> str:
    for prefix, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{prefix}"
    return str(size_bytes)
