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


def push_front(S: list, base: int, esize: int, count: int, k: int) -> None:
    first = base + 1
    if k >= count:
        for i in range(count):
            S[first + i * esize] = False
    else:
        S[first + k * esize: first + count * esize] = S[first: first + (count - k) * esize]
        for i in range(k):
            S[first + i * esize] = False
    S[base] = min(count, S[base] + k)


def pop_front(S: list, base: int, esize: int, count: int, k: int) -> None:
    first = base + 1
    if k >= count:
        for i in range(count):
            S[first + i * esize] = False
    else:
        S[first: first + (count - k) * esize] = S[first + k * esize: first + count * esize]
        for i in range(count - k, count):
            S[first + i * esize] = False
    S[base] = max(0, S[base] - k)



def make_stack_index(code: int, exc: type[ParserError] = ParserError) -> Callable[[int, int], int]:
    """``_sx`` (parsers) / ``_hx`` (controls, raising ``StackIndexOutOfRange``): a run-time stack index checked
    against the stack's size; ``code`` is error.StackOutOfBounds."""
    def sx(i: int, count: int) -> int:
        if not 0 <= i < count:
            raise exc(code)
        return i
    return sx
