"""Evaluation-order lowering: operands whose code emits statements (calls) are sequenced in P4's order.

Code generation compiles an expression to Python source, and a call inside it to statements emitted *before*
that source. That is right for a lone operand but wrong when P4 fixes an order around it: the right operand of
``&&``/``||`` and the untaken arm of ``?:`` must not run, and in ``v + f(v)`` the left ``v`` is read before
``f`` runs. This pass captures the statements an operand emits and, only when there are some, re-emits them
under the condition that guards them, or after spilling the operands already read into temporaries. Operands
without statements compile exactly as before (the shipped programs' generated code does not change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from p4.compiler.ir import BOOL, E, Emitter


class _HasOut(Protocol):
    """What the lowering needs of a compilation: its current emitter and fresh temporary names."""

    out: Emitter

    def fresh(self, prefix: str = "t") -> str: ...


@dataclass
class Captured:
    """One operand compiled on the side: its expression and the statements its code emitted (relative indent)."""

    e: E
    lines: list[str]


def capture(c: _HasOut, compile_operand: Callable[[], E]) -> Captured:
    """Run ``compile_operand`` with ``c.out`` redirected; return what it built and the statements it emitted."""
    saved = c.out
    side = Emitter()
    c.out = side
    try:
        e = compile_operand()
    finally:
        c.out = saved
    return Captured(e, side.lines)


def replay(out: Emitter, lines: list[str]) -> None:
    """Emit captured statements at ``out``'s current indentation."""
    for line in lines:
        out(line)


def spill(c: _HasOut, e: E) -> E:
    """``e``'s value read now into a temporary, so statements emitted after it cannot change what it denotes.

    Constants need no temporary; an aggregate (no scalar value) stays as it is.
    """
    if e.const is not None or not e.type.scalar:
        return e
    tmp = c.fresh("ev")
    c.out(f"{tmp} = {e.src}")
    return E(tmp, e.type, value=e.value)


def short_circuit(c: _HasOut, op: str, a: E, b: Captured) -> E | None:
    """``a && b`` / ``a || b`` when ``b`` emits statements: they run only if ``a`` does not decide the result.

    Returns None when ``b`` emitted nothing (the caller builds the plain Python ``and``/``or``).
    """
    if not b.lines:
        return None
    decided = False if op == "&&" else True          # the value of ``a`` that makes ``b`` irrelevant
    if a.const is not None:
        if bool(a.const) == decided:
            return E(repr(decided), BOOL, const=decided)
        replay(c.out, b.lines)
        return b.e
    tmp = c.fresh("sc")
    c.out(f"{tmp} = {a.src}")
    c.out(f"if {'not ' if op == '||' else ''}{tmp}:")
    c.out.indent()
    replay(c.out, b.lines)
    c.out(f"{tmp} = {b.e.src}")
    c.out.dedent()
    return E(tmp, BOOL)


def conditional(c: _HasOut, cond: E, a: Captured, b: Captured, coerce: Callable[[E], E]) -> E | None:
    """``cond ? a : b`` when an arm emits statements: only the taken arm's statements run.

    ``coerce`` converts an arm to the unified type. Returns None when neither arm emitted anything, or when the
    arms are aggregates (which have no single value to select; their statements then run as before).
    """
    if not (a.lines or b.lines):
        return None
    if cond.const is not None:
        taken = a if cond.const else b
        replay(c.out, taken.lines)
        return coerce(taken.e)
    ea, eb = coerce(a.e), coerce(b.e)
    if not ea.type.scalar:
        replay(c.out, a.lines)
        replay(c.out, b.lines)
        return None
    tmp = c.fresh("cv")
    c.out(f"if {cond.src}:")
    c.out.indent()
    replay(c.out, a.lines)
    c.out(f"{tmp} = {ea.src}")
    c.out.dedent()
    c.out("else:")
    c.out.indent()
    replay(c.out, b.lines)
    c.out(f"{tmp} = {eb.src}")
    c.out.dedent()
    return E(tmp, ea.type)


def left_to_right(c: _HasOut, a: E, b: Captured) -> E:
    """Before the right operand's statements run, the left operand is read (spilled): P4 evaluates left first.

    Returns the left operand to use (itself when the right one emitted nothing).
    """
    if not b.lines:
        return a
    a = spill(c, a)
    replay(c.out, b.lines)
    return a
