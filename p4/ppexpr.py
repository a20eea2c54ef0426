"""The C preprocessor's ``#if`` arithmetic: integer constant expressions in intmax_t/uintmax_t (64 bits).

Our own small evaluator (never Python ``eval``): integer literals (decimal, 0x hex, 0 octal, 0b binary, u/l
suffixes), unary ``+ - ~ !``, binary operators with C precedence, ``?:``, parentheses. ``/`` and ``%`` truncate
toward zero and a zero divisor is an error; an operand that is not evaluated (``0 && 1/0``) is not checked,
as in GCC. Callers replace ``defined`` and identifiers (0) first, as C says.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BITS = 64
MASK = (1 << BITS) - 1
MAX_NESTING = 256            # parentheses, unary operators and ?: nested deeper are an error

_TOKEN = re.compile(r"\s*(?:(\d[\w]*)|(<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>&|^~!?:()])|(\S))")
_BINARY: dict[str, int] = {          # precedence, higher binds tighter (C11 6.5)
    "*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, ">": 7, "<=": 7, ">=": 7,
    "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1,
}


class ExprError(ValueError):
    """The expression is malformed or cannot be evaluated (message says why)."""


# A value is (int, unsigned): ints are kept in range, signed ones as Python negatives.
Value = tuple[int, bool]


def _norm(v: int, unsigned: bool) -> Value:
    v &= MASK
    if not unsigned and v >> (BITS - 1):
        v -= 1 << BITS
    return v, unsigned


def parse_literal(text: str) -> Value:
    """A pp-number as an integer constant: ``0x1F``, ``017``, ``0b101``, ``10UL`` (unsigned with a u)."""
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)([uUlL]*)", text)
    if not m or len(m.group(2)) > 3 or m.group(2).lower().count("u") > 1:
        raise ExprError(f"invalid integer constant {text!r}")
    digits = m.group(1)
    low = digits.lower()
    if low.startswith("0x"):
        v = int(low[2:], 16) if len(low) <= 2 + BITS // 4 else 1 << BITS
    elif low.startswith("0b"):
        v = int(low[2:], 2) if len(low) <= 2 + BITS else 1 << BITS
    elif len(digits) > 1 and digits[0] == "0":
        if set(digits) - set("01234567"):
            raise ExprError(f"invalid digit in octal constant {text!r}")
        v = int(digits, 8) if len(digits) <= 23 else 1 << BITS
    else:
        v = int(digits) if len(digits) <= 20 else 1 << BITS
    if v > MASK:
        raise ExprError(f"integer constant {text!r} is too large for {BITS} bits")
    return _norm(v, "u" in m.group(2).lower() or v >> (BITS - 1) == 1)


class _Parser:
    """Precedence climbing over the tokens; builds thunks so that && || ?: evaluate lazily."""

    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str]] = []
        for m in _TOKEN.finditer(text):
            if m.group(1):
                self.toks.append(("num", m.group(1)))
            elif m.group(2):
                self.toks.append(("op", m.group(2)))
            elif m.group(3):
                raise ExprError(f"unexpected {m.group(3)!r}")
        self.i = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ExprError("unexpected end of expression")
        self.i += 1
        return self.toks[self.i - 1]

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExprError(f"nested more than {MAX_NESTING} levels deep")

    def expr(self) -> Callable[[], Value]:
        self.nest()
        cond = self.binary(1)
        if self.peek() == "?":
            self.take()
            yes = self.expr()
            if self.peek() != ":":
                raise ExprError("expected ':'")
            self.take()
            no = self.expr()
            self.depth -= 1
            u = _unsigned(yes) or _unsigned(no)        # C: the arms' common type, whichever is evaluated
            return _typed(lambda: _norm((yes() if cond()[0] else no())[0], u), u)
        self.depth -= 1
        return cond

    def binary(self, min_prec: int) -> Callable[[], Value]:
        left = self.unary()
        while True:
            op = self.peek()
            prec = _BINARY.get(op) if op is not None else None
            if op is None or prec is None or prec < min_prec:
                return left
            self.take()
            right = self.binary(prec + 1)
            left = _binop(op, left, right)

    def unary(self) -> Callable[[], Value]:
        kind, tok = self.take()
        if kind == "num":
            v = parse_literal(tok)
            return _typed(lambda: v, v[1])
        if tok == "(":
            inner = self.expr()
            if self.peek() != ")":
                raise ExprError("expected ')'")
            self.take()
            return inner
        if tok in ("+", "-", "~", "!"):
            self.nest()
            operand = self.unary()
            self.depth -= 1
            return _unop(tok, operand)
        raise ExprError(f"unexpected {tok!r}")


class _Typed:
    """A thunk marked with its static type (unsigned or not), known before anything is evaluated."""

    __slots__ = ("run", "unsigned")

    def __init__(self, run: Callable[[], Value], unsigned: bool) -> None:
        self.run, self.unsigned = run, unsigned

    def __call__(self) -> Value:
        return self.run()


def _typed(f: Callable[[], Value], unsigned: bool) -> Callable[[], Value]:
    return _Typed(f, unsigned)


def _unsigned(f: Callable[[], Value]) -> bool:
    return bool(getattr(f, "unsigned", False))


def _unop(op: str, f: Callable[[], Value]) -> Callable[[], Value]:
    def run() -> Value:
        v, u = f()
        if op == "!":
            return int(v == 0), False
        if op == "-":
            return _norm(-v, u)
        if op == "~":
            return _norm(~v, u)
        return v, u
    return _typed(run, op != "!" and _unsigned(f))


def _binop(op: str, f: Callable[[], Value], g: Callable[[], Value]) -> Callable[[], Value]:
    if op == "&&":
        return _typed(lambda: (int(bool(f()[0]) and bool(g()[0])), False), False)
    if op == "||":
        return _typed(lambda: (int(bool(f()[0]) or bool(g()[0])), False), False)

    def run() -> Value:
        (a, ua), (b, ub) = f(), g()
        if op in ("<<", ">>"):                         # the result has the left operand's type
            left = (op == "<<") == (b >= 0)             # a negative count shifts the other way, as GCC does
            n = abs(b)
            if left:
                return _norm(a << n, ua) if n < BITS else (0, ua)
            return _norm(a >> n, ua) if n < BITS else (-1 if a < 0 else 0, ua)
        u = ua or ub                                    # usual arithmetic conversions
        a, b = _norm(a, u)[0], _norm(b, u)[0]
        if op in ("<", ">", "<=", ">=", "==", "!="):
            return int({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b, "==": a == b, "!=": a != b}[op]), False
        if op in ("/", "%"):
            if b == 0:
                raise ExprError(f"division by zero ('{op}')")
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)   # C truncates toward zero
            return _norm(q if op == "/" else a - q * b, u)
        v = {"*": a * b, "+": a + b, "-": a - b, "&": a & b, "^": a ^ b, "|": a | b}[op]
        return _norm(v, u)
    if op in ("<", ">", "<=", ">=", "==", "!="):
        return _typed(run, False)
    return _typed(run, _unsigned(f) or (op not in ("<<", ">>") and _unsigned(g)))


def evaluate(text: str) -> int:
    """Value of a preprocessed ``#if`` expression (identifiers already replaced); raises ``ExprError``."""
    p = _Parser(text)
    if not p.toks:
        raise ExprError("no expression")
    f = p.expr()
    if p.i != len(p.toks):
        raise ExprError(f"unexpected {p.toks[p.i][1]!r}")
    return f()[0]
