"""P4 types as the compiler sees them, and their layout in the flat per-packet state list.

Every value of a packet's life (headers, metadata, locals) lives in one Python list ``S``; a type's
``size`` is how many consecutive slots it occupies, so any nested field is ``base + constant offset``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class P4Type:
    """Base of all types; ``size`` is the number of state slots a value of the type occupies."""

    scalar = True

    @property
    def size(self) -> int:
        return 1

    def __str__(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, eq=True)
class BitT(P4Type):
    width: int
    signed: bool = False

    def __str__(self) -> str:
        return f"{'int' if self.signed else 'bit'}<{self.width}>"

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


@dataclass(frozen=True, eq=True)
class VarbitT(P4Type):
    """varbit<max>: two slots, the value and its current length in bits (0 on the wire when unset)."""

    max_width: int
    scalar = False

    @property
    def size(self) -> int:
        return 2

    def __str__(self) -> str:
        return f"varbit<{self.max_width}>"


@dataclass(frozen=True, eq=True)
class BoolT(P4Type):
    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True, eq=True)
class InfIntT(P4Type):
    def __str__(self) -> str:
        return "int"


@dataclass(frozen=True, eq=True)
class ErrorT(P4Type):
    def __str__(self) -> str:
        return "error"


@dataclass(frozen=True, eq=True)
class StringT(P4Type):
    def __str__(self) -> str:
        return "string"


@dataclass(frozen=True, eq=True)
class VoidT(P4Type):
    def __str__(self) -> str:
        return "void"


@dataclass(eq=False)
class EnumT(P4Type):
    name: str
    members: dict[str, int]
    base: BitT | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class StructLike(P4Type):
    """Struct, header or header_union: named fields laid out one after another (headers: valid slot first)."""

    name: str
    fields: list[tuple[str, P4Type]] = field(default_factory=list)
    kind: str = "struct"  # struct | header | header_union
    annotations: dict[str, list] = field(default_factory=dict)  # field name -> [(ann name, args)]

    scalar = False

    def __post_init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.types: dict[str, P4Type] = {}
        off = 1 if self.kind == "header" else 0
        for name, t in self.fields:
            self.offsets[name] = off
            self.types[name] = t
            off += t.size
        self._size = off

    @property
    def size(self) -> int:
        return self._size

    @property
    def is_header(self) -> bool:
        return self.kind == "header"

    @property
    def width_bits(self) -> int:
        return sum(bit_width(t) for _, t in self.fields)

    def __str__(self) -> str:
        return self.name

    def wire_leaves(self) -> list[tuple[int, P4Type]]:
        """The fields in wire order as (slot offset in this type, type), a struct field's fields in its place
        (a header may hold a struct of fixed-width fields); the valid slot is not among them."""
        out: list[tuple[int, P4Type]] = []
        for name, t in self.fields:
            if isinstance(t, StructLike) and t.kind == "struct":
                out.extend((self.offsets[name] + off, lt) for off, lt in t.wire_leaves())
            else:
                out.append((self.offsets[name], t))
        return out


@dataclass(eq=False)
class StackT(P4Type):
    """Header stack: slot 0 is nextIndex, then ``count`` elements of ``elem.size`` slots each."""

    elem: StructLike
    count: int
    scalar = False

    @property
    def size(self) -> int:
        return 1 + self.count * self.elem.size

    def __str__(self) -> str:
        return f"{self.elem.name}[{self.count}]"


@dataclass(eq=False)
class ListT(P4Type):
    """The type of ``{a, b, c}`` list expressions and tuples."""

    elems: list[P4Type]
    scalar = False

    def __str__(self) -> str:
        return "tuple<" + ", ".join(map(str, self.elems)) + ">"


@dataclass(eq=False)
class ExternT(P4Type):
    name: str
    type_params: list[str]
    methods: dict[str, list]  # name -> list of (ret type node, params nodes)
    scalar = False

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class TypeVarT(P4Type):
    name: str

    def __str__(self) -> str:
        return self.name


def bit_width(t: P4Type) -> int:
    """Width in bits of a value of type ``t`` on the wire (headers, hash/checksum inputs); varbit counts 0."""
    if isinstance(t, VarbitT):
        return 0
    if isinstance(t, BitT):
        return t.width
    if isinstance(t, BoolT):
        return 1
    if isinstance(t, EnumT) and t.base is not None:
        return t.base.width
    if isinstance(t, StructLike):
        return t.width_bits
    if isinstance(t, StackT):
        return t.count * t.elem.width_bits
    raise TypeError(f"{t} has no fixed bit width")


def default_value(t: P4Type) -> object:
    if isinstance(t, BoolT):
        return False
    return 0
