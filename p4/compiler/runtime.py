"""Helpers the generated code calls at run time (header-stack indexing and shifting, sign), and what state is."""

from __future__ import annotations

import collections
import random as _random
from collections.abc import Callable

from p4.externs import Counter, Meter, Register
from p4.program import ParserError
from p4.tables import ActionProfile, Table, ValueSet

# Globals of the generated code that hold run-time state: copied for every pipeline (Program.instantiate).
STATE_TYPES = (Table, Register, Counter, Meter, ActionProfile, ValueSet, _random.Random, collections.deque)


def to_signed(v: int, w: int) -> int:
    return v - (1 << w) if v >> (w - 1) else v


def push_front(S: list, base: int, esize: int, count: int, k: int, valid: tuple[int, ...] = (0,)) -> None:
    """``hs.push_front(k)``: elements move k places up, the first k become invalid (``valid``: the offsets of an
    element's validity slots: one for a header, one per member for a header union)."""
    first = base + 1
    if k < count:
        S[first + k * esize: first + count * esize] = S[first: first + (count - k) * esize]
    for i in range(min(k, count)):
        for v in valid:
            S[first + i * esize + v] = False
    S[base] = min(count, S[base] + k)


def pop_front(S: list, base: int, esize: int, count: int, k: int, valid: tuple[int, ...] = (0,)) -> None:
    """``hs.pop_front(k)``: elements move k places down, the last k become invalid."""
    first = base + 1
    if k < count:
        S[first: first + (count - k) * esize] = S[first + k * esize: first + count * esize]
    for i in range(max(0, count - k), count):
        for v in valid:
            S[first + i * esize + v] = False
    S[base] = max(0, S[base] - k)


def make_stack_index(code: int, exc: type[ParserError] = ParserError) -> Callable[[int, int], int]:
    """``_sx`` (parsers) / ``_hx`` (controls, raising ``StackIndexOutOfRange``): a run-time stack index checked
    against the stack's size; ``code`` is error.StackOutOfBounds."""
    def sx(i: int, count: int) -> int:
        if not 0 <= i < count:
            raise exc(code)
        return i
    return sx
