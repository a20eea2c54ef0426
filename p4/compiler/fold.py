"""Constant folding: P4 operators on compile-time values, computed exactly as the generated code computes them.

No ``eval``: every operator is one explicit function. Values are Python ``int`` (``bit<N>``/``int<N>`` already
in range, ``int`` unbounded) and ``bool``; each function returns the folded value or raises
``ZeroDivisionError`` for ``int`` division by zero and ``OverflowError`` past ``MAX_CONST_BITS`` (the caller
reports them at the operator).
"""

from __future__ import annotations

from collections.abc import Callable

from p4.compiler.limits import MAX_CONST_BITS
from p4.compiler.syntax import wrap_const
from p4.types import BitT, BoolT, InfIntT, P4Type

Value = int | bool


def _div(a: int, b: int, t: P4Type) -> int:
    if isinstance(t, BitT):
        return a // b if b else 0      # the generated code's guard: x / 0 is 0 on this target
    return a // b


def _mod(a: int, b: int, t: P4Type) -> int:
    if isinstance(t, BitT):
        return a % b if b else 0
    return a % b


def _shl(a: int, b: int, t: P4Type) -> int:
    if isinstance(t, BitT):
        return 0 if b >= t.width else wrap_const(a << b, t)
    if a and a.bit_length() + b > MAX_CONST_BITS:
        raise OverflowError(f"{a} << {b} exceeds {MAX_CONST_BITS} bits")
    return a << b


def _sat_add(a: int, b: int, t: P4Type) -> int:
    return _saturate(a + b, t)


def _sat_sub(a: int, b: int, t: P4Type) -> int:
    return _saturate(a - b, t)


def _saturate(v: int, t: P4Type) -> int:
    if not isinstance(t, BitT):
        return v
    if t.signed:
        h = 1 << (t.width - 1)
        return max(-h, min(h - 1, v))
    return max(0, min(t.mask, v))


_ARITH: dict[str, Callable[[int, int, P4Type], int]] = {
    "+": lambda a, b, t: wrap_const(a + b, t),
    "-": lambda a, b, t: wrap_const(a - b, t),
    "*": lambda a, b, t: wrap_const(a * b, t),
    "&": lambda a, b, t: a & b,
    "|": lambda a, b, t: a | b,
    "^": lambda a, b, t: a ^ b,
    "/": _div,
    "%": _mod,
    "<<": _shl,
    ">>": lambda a, b, t: a >> b,
    "|+|": _sat_add,
    "|-|": _sat_sub,
}

_COMPARE: dict[str, Callable[[Value, Value], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def binary(op: str, a: Value, b: Value, t: P4Type) -> Value:
    """``a op b`` for operands of (unified) type ``t``: arithmetic wraps to ``t``, comparisons give a bool."""
    if op in _COMPARE:
        return _COMPARE[op](a, b)
    if op == "&&":
        return bool(a) and bool(b)
    if op == "||":
        return bool(a) or bool(b)
    return _ARITH[op](int(a), int(b), t)


def concat(a: int, ta: BitT, b: int, tb: BitT) -> int:
    """``a ++ b``: the bits of ``a`` above those of ``b``; signed if ``a`` is."""
    t = BitT(ta.width + tb.width, ta.signed)
    return wrap_const(((a & ta.mask) << tb.width) | (b & tb.mask), t)


def unary(op: str, a: Value, t: P4Type) -> Value:
    """``!a`` (bool), ``~a`` and ``-a`` (numbers of type ``t``)."""
    if op == "!":
        return not a
    if op == "~":
        assert isinstance(t, BitT)
        return ~a if t.signed else a ^ t.mask
    if op == "-":
        return wrap_const(-a, t) if isinstance(t, BitT) else -a
    raise ValueError(f"not a unary operator: {op}")


def cast(a: Value, source: P4Type, target: P4Type) -> Value | None:
    """``(target) a`` for the casts the type checker allows between bool, bit/int and int; None otherwise."""
    if isinstance(target, BitT):
        if isinstance(source, BoolT):
            return 1 if a else 0
        return wrap_const(int(a), target)
    if isinstance(target, BoolT):
        return a == 1 if isinstance(source, BitT) else bool(a)
    if isinstance(target, InfIntT):
        return int(a)
    return None
