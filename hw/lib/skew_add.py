"""Wide adds in two parts over two clocks, the high part one clock after the low part (400 MHz timing).

A *skewed* value is a pair ``(lo, hi)`` of ``width`` bits in total whose low ``lo_bits`` are valid one clock
before its high bits.  ``skew_add`` adds two skewed values: it registers the low part's sum and carry, adds the
high parts with that carry one clock later, so a chain of adds keeps one short carry chain per clock and the
result is again skewed, one clock later than its operands.  Results are modulo ``2 ** width`` (two's
complement: the sign is ``hi[-1]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Signal


@dataclass(frozen=True)
class Skewed:
    """``lo`` valid at some clock, ``hi`` one clock later; ``Cat(lo, hi)`` is the value."""

    lo: object
    hi: object


def delay(m: Module, value, clocks: int, name: str = "dly"):
    """``value`` registered ``clocks`` times."""
    for k in range(clocks):
        reg = Signal(len(value), name=f"{name}_{k}")
        m.d.sync += reg.eq(value)
        value = reg
    return value


def split(m: Module, value, lo_bits: int, width: int, name: str) -> Skewed:
    """A value valid in full this clock as a skewed one (its high part delayed), sign- or zero-extended as its
    shape says."""
    full = Signal(width, name=f"{name}_w")
    m.d.comb += full.eq(value)
    return Skewed(full[:lo_bits], delay(m, full[lo_bits:], 1, f"{name}_hi"))


def skew_add(m: Module, a: Skewed, b: Skewed, lo_bits: int, width: int, name: str, carry_in: int = 0) -> Skewed:
    """``a + b + carry_in`` modulo ``2 ** width``, one clock later than the operands (module docstring)."""
    s_lo = Signal(lo_bits + 1, name=f"{name}_slo")
    m.d.comb += s_lo.eq(a.lo + b.lo + carry_in)
    lo = Signal(lo_bits, name=f"{name}_lo")
    carry = Signal(name=f"{name}_c")
    m.d.sync += [lo.eq(s_lo[:lo_bits]), carry.eq(s_lo[lo_bits])]
    hi = Signal(width - lo_bits, name=f"{name}_hi")
    m.d.sync += hi.eq(a.hi + b.hi + carry)
    return Skewed(lo, hi)


def invert(m: Module, a: Skewed, name: str) -> Skewed:
    """``~a`` (so ``skew_add(x, invert(a), carry_in=1)`` is ``x - a``)."""
    lo, hi = Signal(len(a.lo), name=f"{name}_nlo"), Signal(len(a.hi), name=f"{name}_nhi")
    m.d.comb += [lo.eq(~a.lo), hi.eq(~a.hi)]
    return Skewed(lo, hi)


def align(m: Module, a: Skewed, clocks: int, name: str) -> Skewed:
    """``a`` delayed by ``clocks`` (both parts)."""
    return Skewed(delay(m, a.lo, clocks, f"{name}_lo"), delay(m, a.hi, clocks, f"{name}_hi"))


def flat(m: Module, a: Skewed, name: str):
    """The whole value, valid in the clock its high part is: the low part registered once more."""
    return Cat(delay(m, a.lo, 1, f"{name}_flo"), a.hi)


def const_skewed(value: int, lo_bits: int, width: int) -> Skewed:
    """A constant as a skewed value (two's complement modulo ``2 ** width``)."""
    value %= 1 << width
    return Skewed(Const(value & ((1 << lo_bits) - 1), lo_bits), Const(value >> lo_bits, width - lo_bits))


def skew_add3(m: Module, a: Skewed, b: Skewed, c: Skewed, lo_bits: int, width: int, name: str) -> Skewed:
    """``a + b + c`` modulo ``2 ** width`` like :func:`skew_add`: a carry-save layer (one LUT) before each part's
    carry chain."""
    def csa(x, y, z):
        return x ^ y ^ z, (x & y) | (x & z) | (y & z)
    x_lo, y_lo = csa(a.lo, b.lo, c.lo)
    s_lo = Signal(lo_bits + 1, name=f"{name}_slo")
    m.d.comb += s_lo.eq(x_lo + Cat(Const(0, 1), y_lo[:lo_bits - 1]))
    lo = Signal(lo_bits, name=f"{name}_lo")
    carry, y_top = Signal(name=f"{name}_c"), Signal(name=f"{name}_yt")
    m.d.sync += [lo.eq(s_lo[:lo_bits]), carry.eq(s_lo[lo_bits]), y_top.eq(y_lo[lo_bits - 1])]
    x_hi, y_hi = csa(a.hi, b.hi, c.hi)
    hi = Signal(width - lo_bits, name=f"{name}_hi")
    m.d.sync += hi.eq(x_hi + Cat(y_top, y_hi[:width - lo_bits - 1]) + carry)
    return Skewed(lo, hi)
