"""What the passes pass around: storage locations, typed expressions, symbols, action/table records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lark import Tree

from p4.tables import ActionSpec, Table
from p4.types import BoolT, ErrorT, InfIntT, P4Type, StringT, StructLike, VoidT

BOOL, INFINT, ERROR, STRING, VOID = BoolT(), InfIntT(), ErrorT(), StringT(), VoidT()


@dataclass
class Ref:
    """A storage location: slot ``base`` (an int, or Python source for a run-time index) of type ``type``."""

    base: int | str
    type: P4Type

    def off(self, k: int) -> int | str:
        if isinstance(self.base, int):
            return self.base + k
        return f"{self.base}+{k}" if k else self.base

    def field(self, name: str) -> Ref:
        t = self.type
        assert isinstance(t, StructLike)
        return Ref(self.off(t.offsets[name]), t.types[name])

    @property
    def src(self) -> str:
        return f"S[{self.base}]"


@dataclass
class E:
    """A compiled expression: Python source and P4 type; ``ref`` if it denotes storage, ``const`` if known.

    ``const`` lets code generation specialise (the source is the literal); ``value`` is what ``fold`` computed for
    an expression whose code still computes at run time, for the places that need a compile-time constant.
    """

    src: str
    type: P4Type
    ref: Ref | None = None
    const: Any = None
    union: Ref | None = None   # set when this is a member of a header_union (for sibling invalidation)
    value: int | bool | None = None   # folded compile-time value when ``const`` is not set (code stays run-time)


@dataclass
class Sym:
    """A name in scope: kind in ref | py | const | extern | table | action | packet | control | value_set."""

    kind: str
    type: P4Type | None = None
    ref: Ref | None = None
    value: Any = None


@dataclass
class ActionInfo:
    name: str           # full name (Control.action)
    node: Tree
    control: str | None
    fn_name: str = ""
    params: list = field(default_factory=list)  # (dir, type, name)
    ret_type: P4Type | None = None      # functions: the return type (VOID for none)
    ret_ref: Ref | None = None          # functions returning a header/struct: where ``return`` stores it
    spec: ActionSpec | None = None      # actions: the control-plane half, once compiled
    may_exit: bool = False              # its body (or an action/function it calls) can execute ``exit``


@dataclass
class TableInfo:
    name: str
    fn_name: str
    table: Table
    action_index: dict[str, int]
    local_index: dict[str, int] = field(default_factory=dict)   # by the name declared in the program


class Emitter:
    """Indented Python source builder."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def indent(self) -> None:
        self.level += 1

    def dedent(self) -> None:
        self.level -= 1
