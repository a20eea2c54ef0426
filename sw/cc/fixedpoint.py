"""Number formats shared by the golden models and the RTL: units, widths, rounding, in one place.

Every state update in ``sw.cc`` uses Python ints only; each operation below is a plain unsigned integer
operation of stated width, so an Amaranth implementation reproduces the models bit for bit.

* Rates: unsigned integer **kb/s** (1 unit = 1000 bit/s), 32-bit registers (max 4.29 Tb/s; 400 Gb/s =
  400_000_000). 1 kb/s is 0.1 % of the 1 Mb/s minimum a limiter must support.
* Times: unsigned integer **ns**, passed in by the caller (no clock is read inside a model). Timer deadlines
  are ``reset_time + k * period``; the RTL keeps 64-bit ns deadlines or an equivalent tick counter.
* DCQCN alpha: unsigned **Q1.16** (17 bits): ``ALPHA_ONE = 65536`` is 1.0.
* HPCC utilisation U and target eta: unsigned **Q8.16** (24 bits, saturating at ``U_MAX``): 65536 is 1.0.
* Windows and queue lengths: unsigned integer bytes, 32 bits.
* Division: always floor division of non-negative integers (``//``), i.e. truncation, as an unsigned
  RTL divider produces.  Shifts right are logical (floor).  Products are formed at full width before
  shifting or dividing (no intermediate truncation).
"""

from __future__ import annotations

KBPS = 1000
"""bit/s per rate unit: rates are integers in kb/s."""

RATE_BITS = 32
RATE_MAX_KBPS = (1 << RATE_BITS) - 1

ALPHA_FRAC_BITS = 16
ALPHA_ONE = 1 << ALPHA_FRAC_BITS
"""DCQCN alpha = 1.0 in Q1.16."""

U_FRAC_BITS = 16
U_ONE = 1 << U_FRAC_BITS
U_BITS = 24
U_MAX = (1 << U_BITS) - 1
"""HPCC utilisation saturates at just under 256.0 (Q8.16 in 24 bits)."""

BITS_NS_PER_KBPS = 8 * 1_000_000
"""bytes over ns -> kb/s: ``rate_kbps = bytes * 8_000_000 // duration_ns`` (1 bit/ns = 1e6 kb/s)."""


def kbps_from_bps(rate_bps: int | float) -> int:
    """bit/s -> integer kb/s, floor (the only float->int boundary: configuration, not state updates)."""
    return int(rate_bps) // KBPS


def bytes_in_ns(rate_kbps: int, duration_ns: int) -> int:
    """Bytes a rate moves in ``duration_ns`` (floor): ``rate_kbps * duration_ns // 8_000_000``."""
    return rate_kbps * duration_ns // BITS_NS_PER_KBPS
