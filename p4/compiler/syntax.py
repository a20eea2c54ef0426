"""Helpers over lark parse trees (children by kind, names, annotations) and P4 integer literals."""

from __future__ import annotations

from lark import Token, Tree

from p4.compiler.ir import INFINT
from p4.types import BitT, P4Type


def subtrees(t: Tree, data: str | None = None) -> list[Tree]:
    return [c for c in t.children if isinstance(c, Tree) and (data is None or c.data == data)]


def token_of(t: Tree, typ: str) -> Token | None:
    for c in t.children:
        if isinstance(c, Token) and c.type == typ:
            return c
    return None


def name_of(t: Tree) -> str:
    """Text of a ``name``/``member`` tree or token."""
    if isinstance(t, Token):
        return str(t)
    return str(t.children[0])


def param_names(t: Tree) -> list[str]:
    """The parameter names of a declaration with a ``params`` child (action, function, prototype, control)."""
    return [name_of(subtrees(p, "name")[0]) for p in subtrees(subtrees(t, "params")[0], "param")]


def nonnull(children: list) -> list:
    return [c for c in children if c is not None]


def annotations_of(t: Tree) -> dict[str, list]:
    out: dict[str, list] = {}
    for a in subtrees(t, "annotation"):
        vals = [c for c in a.children if c is not None]
        key = str(vals[0])
        args = []
        for v in vals[1:]:
            s = str(v)
            if v.type == "STRING":
                args.append(s[1:-1])
            elif v.type == "INTEGER":
                args.append(parse_int(s)[0])
            else:
                args.append(s)
        out[key] = args
    return out


def parse_int(text: str) -> tuple[int, P4Type]:
    """P4 integer literal -> (value, type): ``8w255``, ``16s-1``... (sign handled by unary minus)."""
    t = text.replace("_", "")
    width, signed = None, False
    for i, ch in enumerate(t):
        if ch in "ws" and t[:i].isdigit() and i > 0:
            width, signed, t = int(t[:i]), ch == "s", t[i + 1 :]
            break
    low = t.lower()
    if low.startswith("0x"):
        v = int(low[2:], 16)
    elif low.startswith("0b"):
        v = int(low[2:], 2)
    elif low.startswith("0o"):
        v = int(low[2:], 8)
    elif low.startswith("0d"):
        v = int(low[2:], 10)
    else:
        v = int(low, 10)
    if width is None:
        return v, INFINT
    typ = BitT(width, signed)
    return wrap_const(v, typ), typ


def wrap_const(v: int, t: P4Type) -> int:
    if isinstance(t, BitT):
        v &= t.mask
        if t.signed and v >> (t.width - 1):
            v -= 1 << t.width
    return v
