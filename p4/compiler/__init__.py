"""Type-check a parsed v1model program and generate straight-line Python for each pipeline stage.

Compilation happens once; per packet only the generated functions run.  All packet state lives in one
list ``S`` (see ``p4.types``): every field access compiles to ``S[<constant>]``, every header extract to
one ``int.from_bytes`` plus shifts and masks, every operator to Python arithmetic with explicit wrap-around.

Limits (an error naming the limit at the construct, never a crash or a runaway allocation): bit widths and
integer literals ``MAX_WIDTH_BITS`` (2048); compile-time integer values ``MAX_CONST_BITS``; register, counter and
meter arrays ``MAX_EXTERN_ENTRIES``; header stacks ``MAX_STACK_SIZE`` elements; ``MAX_STATE_SLOTS`` state slots
per packet. A parser whose states loop runs at most ``MAX_PARSER_STEPS`` state transitions per packet, then
stops with ``error.ParserTimeout`` (the packet goes on to ingress with ``parser_error`` set, as after any parser
error in v1model); a loop through states that neither extract nor advance is warned about at compile time.
"""

from __future__ import annotations

import collections
import random as _random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lark import Token, Tree

from p4 import algorithms
from p4.errors import CompileError, SourcePos
from p4.externs import Counter, Meter, Register
from p4.parse import parse
from p4.preprocess import Preprocessed, preprocess
from p4.program import (
    CLONE_FL,
    CLONE_SESSION,
    DIGESTS,
    DROP_PORT,
    N_HIDDEN,
    NO_FIELD_LIST,
    PAYLOAD,
    RECIRC_FL,
    RESUBMIT_FL,
    TRUNCATE,
    AssertFailed,
    DigestLayout,
    ExitControl,
    ParserError,
    Program,
    ProgramState,
    ReturnControl,
)
from p4.tables import ActionProfile, ActionSpec, KeySpec, Table, ValueSet
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    ErrorT,
    ExternT,
    InfIntT,
    ListT,
    P4Type,
    StackT,
    StringT,
    StructLike,
    TypeVarT,
    VarbitT,
    VoidT,
    bit_width,
    default_value,
)

BOOL, INFINT, ERROR, STRING, VOID = BoolT(), InfIntT(), ErrorT(), StringT(), VoidT()
MAX_CONST_BITS = 4096
MAX_EXTERN_ENTRIES = 1 << 22
MAX_STACK_SIZE = 4096
MAX_STATE_SLOTS = 1 << 20
MAX_PARSER_STEPS = 16384
V1_BLOCKS = ("parser", "verify", "ingress", "egress", "compute", "deparser")


# ---------------------------------------------------------------------------------------------------------
# small tree helpers
def _trees(t: Tree, data: str | None = None) -> list[Tree]:
    return [c for c in t.children if isinstance(c, Tree) and (data is None or c.data == data)]


def _tok(t: Tree, typ: str) -> Token | None:
    for c in t.children:
        if isinstance(c, Token) and c.type == typ:
            return c
    return None


def _name(t: Tree) -> str:
    """Text of a ``name``/``member`` tree or token."""
    if isinstance(t, Token):
        return str(t)
    return str(t.children[0])


def _nonnull(children: list) -> list:
    return [c for c in children if c is not None]


def _annotations(t: Tree) -> dict[str, list]:
    out: dict[str, list] = {}
    for a in _trees(t, "annotation"):
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
    return _wrap_const(v, typ), typ


def _wrap_const(v: int, t: P4Type) -> int:
    if isinstance(t, BitT):
        v &= t.mask
        if t.signed and v >> (t.width - 1):
            v -= 1 << t.width
    return v


# ---------------------------------------------------------------------------------------------------------
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
    """A compiled expression: Python source and P4 type; ``ref`` if it denotes storage, ``const`` if known."""

    src: str
    type: P4Type
    ref: Ref | None = None
    const: Any = None
    union: Ref | None = None   # set when this is a member of a header_union (for sibling invalidation)


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
    spec: ActionSpec | None = None      # actions: the control-plane half, once compiled


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


class Compiler:
    """One compilation of one program (see ``compile_file``)."""

    def __init__(self, pre: Preprocessed, name: str, seed: int = 0) -> None:
        self.pre = pre
        self.prog_name = name
        self.types: dict[str, P4Type] = {}
        self.consts: dict[str, E] = {}
        self.errors: list[str] = []
        self.match_kinds: set[str] = set()
        self.externs: dict[str, ExternT] = {}
        self.extern_funcs: set[str] = set()
        self.parsers: dict[str, Tree] = {}
        self.controls: dict[str, Tree] = {}
        self.global_actions: dict[str, Tree] = {}
        self.global_functions: dict[str, Tree] = {}
        self.main: Tree | None = None
        self.init: list[Any] = [None, None, -1, NO_FIELD_LIST, NO_FIELD_LIST, NO_FIELD_LIST, 0, None]
        assert len(self.init) == N_HIDDEN
        self.ns: dict[str, Any] = {
            "_PE": ParserError, "_Exit": ExitControl, "_Ret": ReturnControl, "_AssertFailed": AssertFailed,
            "_alg": algorithms,
            "_rng": _random.Random(seed), "_csum16": algorithms.csum16_int, "_now_us": lambda: 0,
            "_log": collections.deque(maxlen=4096),
        }
        self.out = Emitter()
        self.uid = 0
        self.scopes: list[dict[str, Sym]] = []
        self._every_scope: list[dict[str, Sym]] = []     # every control's local scope (to find all actions)
        self.actions: dict[str, ActionSpec] = {}
        self.tables: dict[str, Table] = {}
        self.registers: dict[str, Register] = {}
        self.counters: dict[str, Counter] = {}
        self.meters: dict[str, Meter] = {}
        self.profiles: dict[str, ActionProfile] = {}
        self.value_sets: dict[str, ValueSet] = {}
        self.field_lists: dict[int, list[int]] = {}
        self.digest_layouts: list[DigestLayout] = []
        self.in_parser = False
        self.in_action = False
        self.pending_functions: list[list[str]] = []
        self.decl_pos: dict[str, SourcePos | None] = {}     # declared type/parser/control name -> where
        self.warnings: list[str] = []                        # rendered "file:line:col: warning: ..."

    # --- errors and positions -----------------------------------------------------------------------------
    def pos(self, node: Any) -> SourcePos | None:
        if isinstance(node, Token):
            return self.pre.pos(node.line or 0, node.column or 0)
        if isinstance(node, Tree) and not node.meta.empty:
            return self.pre.pos(node.meta.line, node.meta.column)
        return None

    def end_pos(self) -> SourcePos:
        """The last non-blank line of the main source file (for what is missing from the whole program)."""
        name = next(iter(self.pre.sources), self.prog_name)
        lines = self.pre.sources.get(name, [])
        n = max((i for i, text in enumerate(lines, 1) if text.strip()), default=1)
        return SourcePos(name, n, 1, lines[n - 1] if lines else "")

    def err(self, node: Any, msg: str) -> CompileError:
        return CompileError(msg, self.pos(node))

    def fresh(self, prefix: str = "t") -> str:
        self.uid += 1
        return f"_{prefix}{self.uid}"

    # --- pass 1: declarations -----------------------------------------------------------------------------
    def declare_once(self, d: Tree) -> None:
        """A second declaration of a type, parser or control name is an error at the second one."""
        node = _trees(d, "name")[0]
        name = _name(node)
        if name in self.decl_pos:
            first = self.decl_pos[name]
            raise self.err(node, f"duplicate declaration of '{name}'" + (f" (first declared at {first})" if first
                                                                           else ""))
        self.decl_pos[name] = self.pos(node)

    def collect(self, tree: Tree) -> None:
        for d in tree.children:
            if not isinstance(d, Tree):
                continue
            kind = d.data
            if kind in ("typedef_decl", "header_decl", "struct_decl", "union_decl", "enum_decl", "parser_decl",
                        "control_decl"):
                self.declare_once(d)
            if kind == "const_decl":
                t = self.resolve_type(_trees(d, "type_ref")[0])
                name = _name(_trees(d, "name")[0])
                e = self.expr(_trees(d)[-1], want=t)
                self.consts[name] = self.const_value(e, t, d)
            elif kind == "typedef_decl":
                self.types[_name(_trees(d, "name")[0])] = self.resolve_type(_trees(d, "type_ref")[0])
            elif kind in ("header_decl", "struct_decl", "union_decl"):
                self.declare_struct(d, {"header_decl": "header", "struct_decl": "struct",
                                        "union_decl": "header_union"}[kind])
            elif kind == "enum_decl":
                self.declare_enum(d)
            elif kind == "error_decl":
                for n in _trees(d, "name"):
                    if _name(n) not in self.errors:
                        self.errors.append(_name(n))
            elif kind == "match_kind_decl":
                self.match_kinds.update(_name(n) for n in _trees(d, "name"))
            elif kind == "extern_obj":
                name = _name(_trees(d, "name")[0])
                tp = _trees(d, "type_params")
                params = [_name(n) for n in _trees(tp[0], "name")] if tp else []
                self.externs[name] = ExternT(name, params, {})
                self.types[name] = self.externs[name]
            elif kind == "extern_func":
                self.extern_funcs.add(_name(_trees(d, "name")[0]))
            elif kind == "parser_decl":
                self.parsers[_name(_trees(d, "name")[0])] = d
            elif kind == "control_decl":
                self.controls[_name(_trees(d, "name")[0])] = d
            elif kind == "action_decl":
                self.global_actions[_name(_trees(d, "name")[0])] = d
            elif kind == "instantiation":
                if _name(_trees(d, "name")[0]) == "main":
                    self.main = d
            elif kind in ("parser_type_decl", "control_type_decl", "package_decl"):
                self.types.setdefault(_name(_trees(d, "name")[0]), ExternT(_name(_trees(d, "name")[0]), [], {}))
            elif kind == "function_decl":
                self.global_functions[_name(_trees(d, "name")[0])] = d

    def const_value(self, e: E, t: P4Type, node: Tree) -> E:
        if isinstance(e.const, (int, str)):
            v = e.const
        else:
            try:
                v = eval(e.src, dict(self.ns)) if "S[" not in e.src else None  # our own code
            except Exception:
                v = None
            if not isinstance(v, int):
                raise self.err(node, "expected a compile-time constant here")
        if isinstance(t, BitT):
            v = _wrap_const(v, t)
        return E(repr(v), t, const=v)

    def declare_struct(self, d: Tree, kind: str) -> None:
        name = _name(_trees(d, "name")[0])
        fields, anns = [], {}
        seen = set()
        for f in _trees(d, "field"):
            fname = _name(_trees(f, "name")[0])
            if fname in seen:
                raise self.err(f, f"duplicate field '{fname}' in {kind} {name}")
            seen.add(fname)
            ft = self.resolve_type(_trees(f, "type_ref")[0])
            if kind == "header" and not isinstance(ft, (BitT, BoolT, VarbitT)) and not (
                    isinstance(ft, EnumT) and ft.base is not None):
                raise self.err(f, f"header field '{fname}' must be bit<N>, int<N>, bool, varbit<N> or a "
                                  f"serializable enum, not {ft}")
            if kind != "header" and isinstance(ft, VarbitT):
                raise self.err(f, "varbit fields are only supported in headers")
            if isinstance(ft, VarbitT) and any(True for _ in _trees(d, "field")[len(fields) + 1:]):
                raise self.err(f, "a varbit field must be the last field of its header on this target")
            if kind == "header_union" and not (isinstance(ft, StructLike) and ft.is_header):
                raise self.err(f, f"header_union field '{fname}' must be a header")
            fields.append((fname, ft))
            anns[fname] = _annotations(f)
        st = StructLike(name, fields, kind, anns)
        if kind == "header" and st.width_bits % 8:
            raise self.err(d, f"header {name} is {st.width_bits} bits wide; headers must be a whole number "
                              "of bytes")
        self.types[name] = st

    def declare_enum(self, d: Tree) -> None:
        name = _name(_trees(d, "name")[0])
        base = None
        for c in _trees(d):
            if c.data.startswith("t_"):
                bt = self.resolve_base(c)
                if not isinstance(bt, BitT):
                    raise self.err(c, "an enum's underlying type must be bit<N> or int<N>")
                base = bt
        members: dict[str, int] = {}
        for i, m in enumerate(_trees(d, "enum_member")):
            mname = _name(_trees(m, "name")[0])
            val = i
            rest = [c for c in m.children[1:] if c is not None]
            if rest:
                if base is None:
                    raise self.err(m, "only enums with an underlying type (enum bit<N> E) can have values")
                val = self.const_value(self.expr(rest[0], want=base), base, m).const
            members[mname] = val
        self.types[name] = EnumT(name, members, base)

    # --- types --------------------------------------------------------------------------------------------
    def resolve_type(self, t: Tree) -> P4Type:
        d = t.data
        if d in ("type_ref", "cast_type"):
            return self.resolve_type(_trees(t)[0])
        if d.startswith("t_"):
            return self.resolve_base(t)
        if d == "named_type":
            name = str(t.children[0])
            if name in self.types:
                return self.types[name]
            if name == "packet_in" or name == "packet_out":
                return ExternT(name, [], {})
            if len(name) <= 2 and name[0].isupper():
                return TypeVarT(name)
            raise self.err(t, f"unknown type '{name}'")
        if d in ("spec_type", "generic_head"):
            name = str(t.children[0])
            base = self.types.get(name)
            if base is None:
                raise self.err(t, f"unknown type '{name}'")
            return base
        if d in ("stack_type", "stack_type_local"):
            kids = [c for c in t.children if c is not None]
            elem = self.resolve_type(kids[0]) if isinstance(kids[0], Tree) else self.types.get(str(kids[0]))
            if not (isinstance(elem, StructLike) and elem.is_header):
                raise self.err(t, f"header stacks must contain headers, not {elem}")
            n = self.const_value(self.expr(kids[-1]), INFINT, t).const
            if not 1 <= int(n) <= MAX_STACK_SIZE:
                raise self.err(t, f"header stack size {n} out of range 1..{MAX_STACK_SIZE} (this target's limit)")
            return StackT(elem, int(n))
        if d == "tuple_type":
            args = [c for c in _trees(t, "type_args")[0].children if isinstance(c, Tree)]
            return ListT([self.resolve_type(a) for a in args])
        raise self.err(t, f"unsupported type syntax ({d})")

    def resolve_base(self, t: Tree) -> P4Type:
        d = t.data
        if d == "t_bool":
            return BOOL
        if d == "t_error":
            return ERROR
        if d == "t_string":
            return STRING
        if d == "t_infint":
            return INFINT
        if d == "t_bit1":
            return BitT(1)
        if d in ("t_bit", "t_int"):
            w = [c for c in t.children if not (isinstance(c, Token) and c.type in ("BIT", "INT_KW", "TLT", "TGT"))][0]
            width = parse_int(str(w))[0] if isinstance(w, Token) else self.const_value(self.expr(w), INFINT, t).const
            if width <= 0 or width > 2048:
                raise self.err(t, f"bit width {width} out of range 1..2048")
            return BitT(width, d == "t_int")
        if d == "t_varbit":
            w = [c for c in t.children if not (isinstance(c, Token) and c.type in ("VARBIT", "TLT", "TGT"))][0]
            width = parse_int(str(w))[0] if isinstance(w, Token) else self.const_value(self.expr(w), INFINT, t).const
            if width <= 0 or width % 8:
                raise self.err(t, f"varbit<{width}>: the maximum width must be a positive multiple of 8")
            return VarbitT(width)
        raise self.err(t, f"unsupported type {d}")

    # --- layout -------------------------------------------------------------------------------------------
    def alloc(self, t: P4Type, node: Any = None) -> Ref:
        """Reserve slots for a value of type ``t`` and fill the initial state."""
        base = len(self.init)
        if base + t.size > MAX_STATE_SLOTS:
            raise self.err(node, f"the program's packet state would exceed {MAX_STATE_SLOTS:,} slots (this "
                                 f"target's limit; a value of type {t} takes {t.size:,})")
        try:
            self.init.extend(self._initial(t))
        except CompileError as exc:
            if exc.pos is None and node is not None:
                raise self.err(node, exc.message) from None
            raise
        return Ref(base, t)

    def _initial(self, t: P4Type) -> list[Any]:
        if isinstance(t, StructLike):
            out: list[Any] = [False] if t.is_header else []
            for _, ft in t.fields:
                out.extend(self._initial(ft))
            return out
        if isinstance(t, StackT):
            return [0] + self._initial(t.elem) * t.count
        if isinstance(t, VarbitT):
            return [0, 0]
        if isinstance(t, (ExternT, TypeVarT, ListT)):
            raise CompileError(f"cannot declare a variable of type {t}")
        return [default_value(t)]

    # --- scopes -------------------------------------------------------------------------------------------
    def lookup(self, name: str, node: Any) -> Sym:
        for sc in reversed(self.scopes):
            if name in sc:
                return sc[name]
        if name in self.consts:
            c = self.consts[name]
            return Sym("const", c.type, value=c)
        if name in self.global_actions:
            return Sym("action", value=self.global_action(name))
        raise self.err(node, f"unknown name '{name}'")

    def global_action(self, name: str) -> ActionInfo:
        key = f"@global.{name}"
        info = self.__dict__.setdefault("_global_infos", {}).get(key)
        if info is None:
            info = ActionInfo(name, self.global_actions[name], None)
            self.__dict__["_global_infos"][key] = info
            self.compile_action(info)
        return info

    # --- expressions --------------------------------------------------------------------------------------
    def expr(self, n: Any, want: P4Type | None = None) -> E:
        e = self._expr(n, want)
        if want is not None and isinstance(e.type, InfIntT) and isinstance(want, BitT):
            if e.const is not None:
                v = _wrap_const(e.const, want)
                return E(repr(v), want, const=v)
            return E(self.wrap(e.src, want), want)
        return e

    def _expr(self, n: Any, want: P4Type | None) -> E:  # one dispatch over the grammar
        d = n.data
        self.last_node = n
        if d == "int_lit":
            v, t = parse_int(str(n.children[0]))
            return E(repr(v), t, const=v)
        if d == "true_lit":
            return E("True", BOOL, const=True)
        if d == "false_lit":
            return E("False", BOOL, const=False)
        if d == "str_lit":
            return E(str(n.children[0]), STRING, const=str(n.children[0])[1:-1])
        if d in ("name_ref", "lv_name"):
            return self.name_expr(str(n.children[0]), n)
        if d in ("member_expr", "lv_member"):
            return self.member_expr(n)
        if d in ("index_expr", "lv_index"):
            return self.index_expr(n)
        if d in ("slice_expr", "lv_slice"):
            return self.slice_expr(n)
        if d == "error_member":
            m = _name(n.children[1])
            if m not in self.errors:
                raise self.err(n, f"unknown error '{m}' (declared: {', '.join(self.errors)})")
            return E(repr(self.errors.index(m)), ERROR, const=self.errors.index(m))
        if d == "type_member":
            tname, m = str(n.children[0]), _name(n.children[1])
            t = self.types.get(tname)
            if isinstance(t, EnumT):
                if m not in t.members:
                    raise self.err(n.children[1], f"enum {tname} has no member '{m}' "
                                                  f"(members: {', '.join(t.members)})")
                v = t.members[m]
                return E(repr(v), t, const=v)
            raise self.err(n, f"'{tname}.{m}': {tname} is not an enum")
        if d == "cond":
            c = self.expect_bool(n.children[0])
            a = self.expr(n.children[1], want)
            b = self.expr(n.children[2], want if want else a.type)
            t = self.unify(a, b, n, "?:")
            a, b = self.coerce(a, t), self.coerce(b, t)
            if c.const is not None:
                return a if c.const else b
            return E(f"({a.src} if {c.src} else {b.src})", t)
        if d in ("lor", "land"):
            a, b = self.expect_bool(n.children[0]), self.expect_bool(n.children[1])
            op = "or" if d == "lor" else "and"
            return E(f"({a.src} {op} {b.src})", BOOL)
        if d == "lnot":
            a = self.expect_bool(n.children[0])
            return E(f"(not {a.src})", BOOL)
        if d in ("bor", "bxor", "band"):
            return self.arith({"bor": "|", "bxor": "^", "band": "&"}[d], n.children[0], n.children[1], n, want)
        if d == "sub":
            return self.arith("-", n.children[0], n.children[1], n, want)
        if d == "binop":
            return self.arith(str(n.children[1]), n.children[0], n.children[2], n, want)
        if d == "bnot":
            a = self.expr(n.children[0], want)
            if isinstance(a.type, BitT):
                if a.type.signed:
                    return E(f"(~{a.src})", a.type)
                return E(f"({a.src} ^ {a.type.mask})", a.type)
            raise self.err(n, f"~ needs bit<N> or int<N>, not {a.type}")
        if d == "neg":
            a = self.expr(n.children[0], want)
            if isinstance(a.type, InfIntT):
                return E(f"(-{a.src})", INFINT, const=-a.const if a.const is not None else None)
            if isinstance(a.type, BitT):
                return E(self.wrap(f"(-{a.src})", a.type), a.type)
            raise self.err(n, f"unary - needs a number, not {a.type}")
        if d == "cast":
            return self.cast(n)
        if d == "uplus":
            return self.expr(n.children[1], want)
        if d == "struct_expr":
            pairs = {}
            for kv in _trees(n, "kv_pair"):
                fname = _name(kv.children[0])
                if fname in pairs:
                    raise self.err(kv, f"field '{fname}' given twice")
                pairs[fname] = (kv, self.expr(kv.children[1]))
            return E("None", ListT([e.type for _, e in pairs.values()]), const=("fields", pairs))
        if d == "list_expr":
            items = [self.expr(c) for c in _nonnull(n.children)]
            return E("(" + "".join(i.src + ", " for i in items) + ")", ListT([i.type for i in items]),
                     const=items)
        if d in ("call_expr",):
            return self.call(n.children[0], _nonnull(n.children[1].children), as_stmt=False)
        if d == "lookahead_expr":
            return self.lookahead(n)
        if d == "ctor_expr":
            return E("None", VOID, const=("ctor", str(n.children[0])))
        if d == "dontcare":
            return E("None", VOID, const="_")
        raise self.err(n, f"unsupported expression ({d})")

    def expect_bool(self, n: Any) -> E:
        e = self.expr(n, BOOL)
        if not isinstance(e.type, BoolT):
            raise self.err(n, f"expected a bool expression, got {e.type}")
        return e

    def wrap(self, src: str, t: BitT) -> str:
        """Wrap-around of a Python int to the range of ``t``."""
        if t.signed:
            h = 1 << (t.width - 1)
            return f"((({src}) + {h} & {t.mask}) - {h})"
        return f"(({src}) & {t.mask})"

    def unify(self, a: E, b: E, node: Any, op: str) -> P4Type:
        ta, tb = a.type, b.type
        if isinstance(ta, InfIntT):
            return tb
        if isinstance(tb, InfIntT):
            return ta
        if ta == tb or (isinstance(ta, EnumT) and ta is tb):
            return ta
        if isinstance(ta, StructLike) and ta is tb:
            return ta
        raise self.err(node, f"operands of '{op}' have different types: {ta} and {tb} (add a cast)")

    def coerce(self, e: E, t: P4Type) -> E:
        if isinstance(e.type, InfIntT) and isinstance(t, BitT):
            if e.const is not None:
                v = _wrap_const(e.const, t)
                return E(repr(v), t, const=v)
            return E(self.wrap(e.src, t), t)
        return e

    def arith(self, op: str, an: Any, bn: Any, node: Any, want: P4Type | None) -> E:
        a = self.expr(an)
        b = self.expr(bn)
        if op in ("<<", ">>"):
            if isinstance(a.type, InfIntT) and want is not None and isinstance(want, BitT):
                a = self.coerce(a, want)
            if not isinstance(b.type, (BitT, InfIntT)) or (isinstance(b.type, BitT) and b.type.signed):
                raise self.err(bn, f"shift amount must be unsigned, not {b.type}")
            t = a.type
            if isinstance(t, InfIntT):
                if a.const is not None and b.const is not None:
                    if op == "<<" and a.const and a.const.bit_length() + b.const > MAX_CONST_BITS:
                        raise self.err(node, f"constant {a.const} << {b.const} exceeds {MAX_CONST_BITS} bits (this "
                                             "target's limit for compile-time integers)")
                    v = a.const << b.const if op == "<<" else a.const >> b.const
                    return E(repr(v), INFINT, const=v)
                return E(f"({a.src} {op} {b.src})", INFINT)
            if not isinstance(t, BitT):
                raise self.err(an, f"cannot shift a {t}")
            if op == ">>":
                return E(f"({a.src} >> {b.src})", t)
            if b.const is not None:
                return E("0" if b.const >= t.width else self.wrap(f"{a.src} << {b.const}", t), t)
            return E(f"({self.wrap(f'{a.src} << {b.src}', t)} if {b.src} < {t.width} else 0)", t)
        if op == "++":
            if not (isinstance(a.type, BitT) and isinstance(b.type, BitT)):
                raise self.err(node, f"'++' needs bit<N>/int<N> operands with known widths, not {a.type} and "
                                     f"{b.type}")
            t = BitT(a.type.width + b.type.width, a.type.signed)
            bs = f"({b.src} & {b.type.mask})" if b.type.signed else b.src
            as_ = f"({a.src} & {a.type.mask})" if a.type.signed else a.src
            return E(self.wrap(f"({as_} << {b.type.width}) | {bs}", t) if t.signed else
                     f"(({as_} << {b.type.width}) | {bs})", t)
        if isinstance(a.type, InfIntT) and want is not None and isinstance(want, BitT) and \
                isinstance(b.type, InfIntT) and op not in ("==", "!=", "<", ">", "<=", ">="):
            pass
        t = self.unify(a, b, node, op)
        a, b = self.coerce(a, t), self.coerce(b, t)
        if op in ("==", "!="):
            if isinstance(t, StructLike) and a.ref is not None and b.ref is not None:
                return E(self.struct_equal(a.ref, b.ref, op == "!="), BOOL)
            if isinstance(t, StructLike):
                raise self.err(node, "== on headers/structs needs two stored values (not list expressions)")
            if isinstance(a.const, int) and isinstance(b.const, int):
                v = (a.const == b.const) == (op == "==")
                return E(repr(v), BOOL, const=v)
            return E(f"({a.src} {op} {b.src})", BOOL)
        if op in ("<", ">", "<=", ">="):
            if not isinstance(t, (BitT, InfIntT)):
                raise self.err(node, f"'{op}' needs numbers, not {t}")
            return E(f"({a.src} {op} {b.src})", BOOL)
        if isinstance(t, BoolT) and op in ("&", "|", "^"):
            raise self.err(node, f"'{op}' on bool: use && / ||")
        if not isinstance(t, (BitT, InfIntT)):
            raise self.err(node, f"'{op}' needs bit<N>/int<N> operands, not {t}")
        if isinstance(t, InfIntT):
            pyop = {"/": "//", "|+|": "+", "|-|": "-"}.get(op, op)
            if isinstance(a.const, int) and isinstance(b.const, int):
                try:
                    v = eval(f"{a.const} {pyop} {b.const}")  # two ints and an operator
                except ZeroDivisionError:
                    raise self.err(node, "division by zero") from None
                return E(repr(v), INFINT, const=v)
            return E(f"({a.src} {pyop} {b.src})", INFINT)
        if op in ("&", "|", "^"):
            return E(f"({a.src} {op} {b.src})", t)
        if op in ("+", "-", "*"):
            return E(self.wrap(f"{a.src} {op} {b.src}", t), t)
        if op in ("/", "%"):
            if t.signed:
                raise self.err(node, f"'{op}' is not defined for signed int<N> in P4")
            if b.const == 0:
                raise self.err(node, f"division by zero ('{op}' by the constant 0)")
            pyop = "//" if op == "/" else "%"
            return E(f"({a.src} {pyop} {b.src} if {b.src} else 0)", t)
        if op == "|+|":
            if t.signed:
                h = 1 << (t.width - 1)
                return E(f"max(-{h}, min({h - 1}, {a.src} + {b.src}))", t)
            return E(f"min({t.mask}, {a.src} + {b.src})", t)
        if op == "|-|":
            if t.signed:
                h = 1 << (t.width - 1)
                return E(f"max(-{h}, min({h - 1}, {a.src} - {b.src}))", t)
            return E(f"max(0, {a.src} - {b.src})", t)
        raise self.err(node, f"unsupported operator {op}")

    def struct_equal(self, a: Ref, b: Ref, negate: bool) -> str:
        """P4 == on headers (both invalid, or both valid with equal fields) and structs (all fields)."""
        t = a.type
        assert isinstance(t, StructLike)
        parts = []
        for fname, ft in t.fields:
            fa, fb = a.field(fname), b.field(fname)
            if isinstance(ft, StructLike):
                parts.append(self.struct_equal(fa, fb, False))
            elif isinstance(ft, StackT):
                n = ft.size
                parts.append(f"S[{fa.base}:{fa.base}+{n}] == S[{fb.base}:{fb.base}+{n}]")
            else:
                k = ft.size
                parts.append(f"S[{fa.base}:{fa.base}+{k}] == S[{fb.base}:{fb.base}+{k}]" if k > 1 else
                             f"{fa.src} == {fb.src}")
        fields = " and ".join(parts) or "True"
        if t.is_header:
            va, vb = f"S[{a.off(0)}]", f"S[{b.off(0)}]"
            expr = f"(({va} == {vb}) and (not {va} or ({fields})))"
        else:
            expr = f"({fields})"
        return f"(not {expr})" if negate else expr

    def cast(self, n: Tree) -> E:
        t = self.resolve_type(n.children[0])
        a = self.expr(n.children[1], t if isinstance(t, BitT) else None)
        s = a.type
        if isinstance(t, EnumT) and t.base is not None:
            t2 = t.base
        else:
            t2 = t
        if isinstance(s, EnumT) and s.base is not None:
            s = s.base
        if isinstance(t2, BitT):
            if isinstance(s, BoolT):
                return E(f"(1 if {a.src} else 0)", t)
            if isinstance(s, InfIntT):
                if a.const is not None:
                    v = _wrap_const(a.const, t2)
                    return E(repr(v), t, const=v)
                return E(self.wrap(a.src, t2), t)
            if isinstance(s, BitT):
                if s == t2:
                    return E(a.src, t, const=a.const)
                if not t2.signed:
                    if not s.signed and s.width <= t2.width:
                        return E(a.src, t, const=a.const)
                    return E(f"({a.src} & {t2.mask})", t)
                return E(self.wrap(a.src, t2), t)
        if isinstance(t2, BoolT) and isinstance(s, BitT) and s.width == 1:
            return E(f"({a.src} == 1)", BOOL)
        if isinstance(t2, BoolT) and isinstance(s, BoolT):
            return a
        if isinstance(t2, InfIntT):
            return E(a.src, INFINT, const=a.const)
        raise self.err(n, f"cannot cast {a.type} to {t}")

    def name_expr(self, name: str, n: Any) -> E:
        sym = self.lookup(name, n)
        if sym.kind == "ref":
            r = sym.ref
            assert r is not None
            return E(r.src if r.type.scalar else "None", r.type, ref=r)
        if sym.kind == "py":
            assert sym.type is not None
            return E(str(sym.value), sym.type)
        if sym.kind == "const":
            return sym.value
        return E("None", VOID, const=sym)

    def member_expr(self, n: Tree) -> E:
        base_n, m = n.children[0], _name(n.children[1])
        # enum / error member through a plain name
        if base_n.data in ("name_ref", "lv_name"):
            bname = str(base_n.children[0])
            t = self.types.get(bname)
            if isinstance(t, EnumT) and not any(bname in sc for sc in self.scopes):
                if m not in t.members:
                    raise self.err(n.children[1], f"enum {bname} has no member '{m}'")
                return E(repr(t.members[m]), t, const=t.members[m])
        b = self.expr(base_n)
        t = b.type
        if isinstance(b.const, tuple) and b.const and b.const[0] == "apply":
            return self.apply_result(b, m, n)
        if isinstance(t, StructLike) and b.ref is not None:
            if m not in t.offsets:
                kind = {"header": "header", "struct": "struct", "header_union": "header_union"}[t.kind]
                raise self.err(n.children[1], f"unknown field '{m}' in {kind} {t.name} "
                                              f"(fields: {', '.join(t.offsets)})")
            r = b.ref.field(m)
            return E(r.src if r.type.scalar else "None", r.type, ref=r,
                     union=b.ref if t.kind == "header_union" else None)
        if isinstance(t, StackT) and b.ref is not None:
            r0 = b.ref
            if m == "size":
                return E(repr(t.count), BitT(32), const=t.count)
            if m == "lastIndex":
                return E(f"(S[{r0.base}] - 1 & 0xffffffff)", BitT(32))
            if m == "next":
                idx = f"S[{r0.base}]"
                chk = self.stack_check(idx, t.count)
                return E("None", t.elem, ref=Ref(f"{r0.off(1)}+{chk}*{t.elem.size}", t.elem))
            if m == "last":
                chk = self.stack_check(f"(S[{r0.base}]-1)", t.count)
                return E("None", t.elem, ref=Ref(f"{r0.off(1)}+{chk}*{t.elem.size}", t.elem))
            raise self.err(n.children[1], f"header stack has no member '{m}' (size, next, last, lastIndex, "
                                          "push_front, pop_front)")
        if b.const is not None and isinstance(b.const, Sym):
            return E("None", VOID, const=(b.const, m))
        raise self.err(n.children[1], f"'{m}': {t} has no members")

    def invalidate_siblings(self, member: E) -> None:
        """A header_union holds at most one valid member: validating one invalidates the others."""
        u = member.union
        if u is None or member.ref is None:
            return
        ut = u.type
        assert isinstance(ut, StructLike)
        for fname, _ in ut.fields:
            other = u.field(fname)
            if other.base != member.ref.base:
                self.out(f"S[{other.off(0)}] = False")

    def err_code(self, name: str) -> int:
        if name not in self.errors:
            self.errors.append(name)
        return self.errors.index(name)

    def stack_check(self, idx_src: str, count: int) -> str:
        return f"_sx({idx_src}, {count})"

    def index_expr(self, n: Tree) -> E:
        b = self.expr(n.children[0])
        i = self.expr(n.children[1])
        t = b.type
        if not isinstance(t, StackT) or b.ref is None:
            raise self.err(n, f"indexing needs a header stack, not {t}")
        if not isinstance(i.type, (BitT, InfIntT)):
            raise self.err(n.children[1], f"stack index must be a number, not {i.type}")
        if i.const is not None:
            if not 0 <= i.const < t.count:
                raise self.err(n.children[1], f"index {i.const} out of bounds for {t} (0..{t.count - 1})")
            return E("None", t.elem, ref=Ref(b.ref.off(1 + i.const * t.elem.size), t.elem))
        chk = self.stack_check(i.src, t.count)
        return E("None", t.elem, ref=Ref(f"{b.ref.off(1)}+{chk}*{t.elem.size}", t.elem))

    def slice_expr(self, n: Tree) -> E:
        b = self.expr(n.children[0])
        hi = self.const_value(self.expr(n.children[1]), INFINT, n).const
        lo = self.const_value(self.expr(n.children[2]), INFINT, n).const
        if not isinstance(b.type, BitT):
            raise self.err(n, f"slices need bit<N>/int<N>, not {b.type}")
        if not (0 <= lo <= hi < b.type.width):
            raise self.err(n, f"slice [{hi}:{lo}] out of range for {b.type}")
        w = hi - lo + 1
        src = f"(({b.src} >> {lo}) & {(1 << w) - 1})" if lo else f"({b.src} & {(1 << w) - 1})"
        if isinstance(b.const, int):
            v = (b.const >> lo) & ((1 << w) - 1)
            return E(repr(v), BitT(w), const=v)
        return E(src, BitT(w))

    def lookahead(self, n: Tree) -> E:
        obj = self.expr(n.children[0])
        targs = [c for c in _trees(n, "type_args")[0].children if isinstance(c, Tree)]
        t = self.resolve_type(targs[0])
        if not isinstance(obj.const, Sym) or obj.const.kind != "packet_in":
            raise self.err(n, "lookahead is a method of packet_in")
        if isinstance(t, StructLike) and t.kind in ("header", "struct") and all(
                isinstance(ft, (BitT, BoolT)) for _, ft in t.fields) and t.width_bits % 8 == 0:
            ref = self.alloc(t)
            self.extract(ref, n)
            self.out(f"o -= {t.width_bits // 8}  # lookahead does not consume")
            return E("None", t, ref=ref)
        if not isinstance(t, BitT):
            raise self.err(n, f"lookahead<{t}> is not supported (use bit<N>, or a header/struct of bit fields)")
        nb = (t.width + 7) // 8
        pad = nb * 8 - t.width
        v = self.fresh("la")
        self.out(f"if o + {nb} > n: raise _PE({self.errors.index('PacketTooShort')})")
        self.out(f"{v} = int.from_bytes(pkt[o:o+{nb}], 'big') >> {pad}")
        return E(v, t)

    # --- statements ---------------------------------------------------------------------------------------
    def stmts(self, nodes: list[Any]) -> None:
        self.scopes.append({})
        start = len(self.out.lines)
        for s in nodes:
            if s is not None:
                self.stmt(s)
        if len(self.out.lines) == start:
            self.out("pass")
        self.scopes.pop()

    def stmt(self, s: Tree) -> None:  # one dispatch over statement kinds
        d = s.data
        self.last_node = s
        if d == "block":
            self.stmts(s.children)
        elif d == "annotated_block":   # @atomic { ... }: one packet at a time already, so just the block
            self.stmts(_trees(s, "block")[0].children)
        elif d == "var_decl":
            self.var_decl(s)
        elif d == "const_decl":
            t = self.resolve_type(_trees(s, "type_ref")[0])
            e = self.expr(_trees(s)[-1], want=t)
            self.scopes[-1][_name(_trees(s, "name")[0])] = Sym("const", t, value=self.const_value(e, t, s))
        elif d == "assign":
            self.assign(s.children[0], s.children[1], s)
        elif d == "call_stmt":
            e = self.call(s.children[0], _nonnull(s.children[1].children), as_stmt=True)
            if e.src != "None":
                self.out(e.src)
        elif d == "generic_call_stmt":
            head = s.children[0]
            self.call_type_args = [self.resolve_type(c) for c in _trees(head, "type_args")[0].children
                                   if isinstance(c, Tree)]
            try:
                self.call(Tree("lv_name", [head.children[0]], head.meta), _nonnull(s.children[1].children),
                          as_stmt=True)
            finally:
                self.call_type_args = []
        elif d == "if_stmt":
            s = Tree("if_stmt", (list(s.children) + [None, None])[:3], s.meta)
            c = self.expect_bool(s.children[0])
            if c.const is not None:
                branch = s.children[1] if c.const else s.children[2]
                if branch is not None:
                    self.stmts([branch])
                return
            self.out(f"if {c.src}:")
            self.out.indent()
            self.stmts([s.children[1]])
            self.out.dedent()
            if s.children[2] is not None:
                self.out("else:")
                self.out.indent()
                self.stmts([s.children[2]])
                self.out.dedent()
        elif d == "switch_stmt":
            self.switch(s)
        elif d == "exit_stmt":
            self.out("raise _Exit()")
        elif d == "return_stmt":
            if self.in_parser:
                raise self.err(s, "return is not allowed in a parser")
            value = s.children[0] if s.children else None
            ret_t = getattr(self, "fn_ret", None)
            if value is not None:
                if ret_t is None or isinstance(ret_t, VoidT):
                    raise self.err(s, "return with a value is only allowed in functions that return one")
                v = self.expr(value, ret_t)
                if v.type != ret_t and not isinstance(v.type, InfIntT):
                    raise self.err(value, f"function returns {ret_t}, not {v.type}")
                self.out(f"return {self.coerce(v, ret_t).src}")
            elif ret_t is not None and not isinstance(ret_t, VoidT):
                raise self.err(s, f"this function must return a value of type {ret_t}")
            elif self.in_action:
                self.out("return")
            else:
                self.out("raise _Ret()")  # leave this control's apply block
        else:
            raise self.err(s, f"unsupported statement ({d})")

    def var_decl(self, s: Tree) -> None:
        kids = [c for c in s.children if c is not None and not (isinstance(c, Tree) and c.data == "annotation")]
        tnode, name_n = kids[0], kids[1]
        init = kids[2] if len(kids) > 2 else None
        t = self.resolve_type(tnode) if tnode.data not in ("name",) else None
        name = _name(name_n)
        if isinstance(t, ExternT):
            raise self.err(s, f"'{name}': instantiate externs with {t.name}(...) {name};")
        ref = self.alloc(t, s)
        self.scopes[-1][name] = Sym("ref", t, ref=ref)
        if init is not None:
            self.assign_ref(ref, init, s)
        elif self.scopes and not isinstance(ref.base, str) and len(self.scopes) > 1:
            # locals are re-initialised each time the declaration executes (BMv2 leaves them at 0)
            if t.scalar:
                self.out(f"S[{ref.base}] = {default_value(t)!r}")
            elif isinstance(t, StructLike) or isinstance(t, StackT):
                self.out(f"S[{ref.base}:{ref.base + t.size}] = _INIT[{ref.base}:{ref.base + t.size}]")

    def assign(self, lhs: Tree, rhs: Tree, node: Tree) -> None:
        if lhs.data == "lv_slice":
            b = self.expr(lhs.children[0])
            hi = self.const_value(self.expr(lhs.children[1]), INFINT, lhs).const
            lo = self.const_value(self.expr(lhs.children[2]), INFINT, lhs).const
            if b.ref is None or not isinstance(b.type, BitT) or not (0 <= lo <= hi < b.type.width):
                raise self.err(lhs, "invalid slice assignment")
            w = hi - lo + 1
            v = self.expr(rhs, BitT(w))
            if not isinstance(v.type, BitT) or v.type.width != w:
                raise self.err(rhs, f"cannot assign {v.type} to a {w}-bit slice")
            m = ((1 << w) - 1) << lo
            keep = b.type.mask ^ m
            self.out(f"{b.ref.src} = ({b.ref.src} & {keep}) | (({v.src} << {lo}) & {m})")
            return
        target = self.expr(lhs)
        if target.ref is None:
            raise self.err(lhs, "left side of = is not assignable")
        self.assign_ref(target.ref, rhs, node)

    def assign_ref(self, ref: Ref, rhs: Any, node: Any) -> None:
        t = ref.type
        v = self.expr(rhs, t)
        if t.scalar:
            vt = v.type
            ok = vt == t or (isinstance(t, EnumT) and vt is t) or (isinstance(vt, InfIntT) and isinstance(t, BitT))
            if isinstance(t, EnumT) and t.base is not None and vt == t.base:
                ok = True
            if not ok:
                raise self.err(rhs, f"cannot assign a value of type {vt} to {t}")
            v = self.coerce(v, t)
            self.out(f"{ref.src} = {v.src}")
            return
        if isinstance(v.const, tuple) and v.const and v.const[0] == "fields" and isinstance(t, StructLike):
            pairs = v.const[1]
            missing = [f for f, _ in t.fields if f not in pairs]
            extra = [f for f in pairs if f not in t.offsets]
            if extra:
                raise self.err(pairs[extra[0]][0], f"{t.name} has no field '{extra[0]}'")
            if missing:
                raise self.err(rhs, f"missing field(s) {', '.join(missing)} for {t.name}")
            for fname, ft in t.fields:
                kv, item = pairs[fname]
                if not ft.scalar:
                    raise self.err(kv, "nested structure initialisers are not supported yet")
                item = self.coerce(item, ft)
                if item.type != ft and not (isinstance(ft, EnumT) and item.type is ft):
                    raise self.err(kv, f"field '{fname}' is {ft}, not {item.type}")
                self.out(f"{ref.field(fname).src} = {item.src}")
            if t.is_header:
                self.out(f"S[{ref.base}] = True")
            return
        if isinstance(v.type, ListT) and isinstance(t, StructLike):
            items = v.const
            if len(items) != len(t.fields):
                raise self.err(rhs, f"{t.name} has {len(t.fields)} fields, the list has {len(items)}")
            for (fname, ft), item in zip(t.fields, items, strict=True):
                if not ft.scalar:
                    raise self.err(rhs, "nested list initialisers are not supported yet")
                item = self.coerce(item, ft)
                self.out(f"{ref.field(fname).src} = {item.src}")
            if t.is_header:
                self.out(f"S[{ref.base}] = True")
            return
        if v.ref is None or v.type is not t:
            raise self.err(rhs, f"cannot assign a value of type {v.type} to {t}")
        self.copy(ref, v.ref)

    def copy(self, dst: Ref, src: Ref) -> None:
        n = dst.type.size
        if isinstance(dst.base, int) and isinstance(src.base, int):
            self.out(f"S[{dst.base}:{dst.base + n}] = S[{src.base}:{src.base + n}]")
        else:
            a, b = self.fresh("d"), self.fresh("s")
            self.out(f"{a} = {dst.base}; {b} = {src.base}")
            self.out(f"S[{a}:{a}+{n}] = S[{b}:{b}+{n}]")

    def switch(self, s: Tree) -> None:
        subject = s.children[0]
        cases = _trees(s, "switch_case")
        # switch (t.apply().action_run)
        if subject.data == "member_expr" and _name(subject.children[1]) == "action_run":
            call = subject.children[0]
            tinfo = self.table_of_apply(call)
            if tinfo is None:
                raise self.err(subject, "action_run needs table.apply()")
            r = self.fresh("ar")
            self.out(f"{r} = {tinfo.fn_name}(S)[1]")
            first = True
            pending: list[int] = []
            for c in cases:
                label = c.children[0]
                lab = label.children[0]
                block = c.children[1]
                if isinstance(lab, Token) and lab.type == "DEFAULT":
                    cond = None
                else:
                    if not (isinstance(lab, Tree) and lab.data == "name_ref"):
                        raise self.err(lab, "action_run labels must be action names")
                    an = _name(lab)
                    idx = self.find_table_action(tinfo, an, lab)
                    pending.append(idx)
                    if block is None:
                        continue
                    cond = f"{r} in {tuple(pending)!r}" if len(pending) > 1 else f"{r} == {pending[0]}"
                    pending = []
                if cond is None:
                    self.out("else:" if not first else "if True:")
                else:
                    self.out(("if " if first else "elif ") + cond + ":")
                first = False
                self.out.indent()
                self.stmts([block] if block is not None else [])
                self.out.dedent()
            return
        e = self.expr(subject)
        if not isinstance(e.type, (BitT, EnumT, ErrorT)):
            raise self.err(subject, f"switch needs table.apply().action_run or a bit/enum value, not {e.type}")
        r = self.fresh("sw")
        self.out(f"{r} = {e.src}")
        first, pending = True, []
        for c in cases:
            lab = c.children[0].children[0]
            block = c.children[1]
            if isinstance(lab, Token) and lab.type == "DEFAULT":
                cond = None
            else:
                lv = self.expr(lab, e.type if isinstance(e.type, BitT) else None)
                if not isinstance(lv.const, int):
                    raise self.err(lab, "switch labels must be compile-time constants")
                if isinstance(e.type, EnumT) and lv.type is not e.type:
                    raise self.err(lab, f"label of type {lv.type} in a switch on {e.type}")
                pending.append(lv.const)
                if block is None:
                    continue
                cond, pending = f"{r} in {tuple(pending)!r}", []
            self.out("else:" if cond is None and not first else ("if True:" if cond is None else
                     ("if " if first else "elif ") + cond + ":"))
            first = False
            self.out.indent()
            self.stmts([block] if block is not None else [])
            self.out.dedent()

    def find_table_action(self, tinfo: TableInfo, an: str, node: Any) -> int:
        if an in tinfo.local_index:
            return tinfo.local_index[an]
        for full, idx in tinfo.action_index.items():
            if full == an or full.split(".")[-1] == an:
                return idx
        raise self.err(node, f"table {tinfo.name} has no action '{an}'")

    def table_of_apply(self, call: Tree) -> TableInfo | None:
        if call.data != "call_expr":
            return None
        callee = call.children[0]
        if callee.data != "member_expr" or _name(callee.children[1]) != "apply":
            return None
        obj = self.expr(callee.children[0])
        if isinstance(obj.const, Sym) and obj.const.kind == "table":
            return obj.const.value
        return None

    # --- calls --------------------------------------------------------------------------------------------
    def call(self, callee: Tree, args: list, *, as_stmt: bool) -> E:
        if callee.data in ("member_expr", "lv_member"):
            method = _name(callee.children[1])
            objn = callee.children[0]
            # table.apply().hit / .miss handled by member access on call results below
            obj = self.expr(objn)
            return self.method_call(obj, method, args, callee, as_stmt)
        if callee.data in ("name_ref", "lv_name"):
            fname = str(callee.children[0])
            sym = None
            for sc in reversed(self.scopes):
                if fname in sc:
                    sym = sc[fname]
                    break
            if sym is None and fname in self.global_actions:
                sym = Sym("action", value=self.global_action(fname))
            if sym is None and fname in self.global_functions:
                sym = Sym("function", value=self.global_function(fname))
            if sym is not None and sym.kind == "action":
                return self.direct_action_call(sym.value, args, callee)
            if sym is not None and sym.kind == "function":
                return self.direct_action_call(sym.value, args, callee, function=True)
            if fname in self.extern_funcs or fname == "verify":
                return self.extern_func(fname, args, callee)
            raise self.err(callee, f"unknown function or action '{fname}'")
        # t.apply().hit style: callee is a call
        raise self.err(callee, "unsupported call")

    def method_call(self, obj: E, method: str, args: list, node: Any, as_stmt: bool) -> E:
        t = obj.type
        if isinstance(t, StructLike) and t.is_header and obj.ref is not None:
            v = obj.ref.off(0)
            if args:
                raise self.err(node, f"{method}() takes no arguments")
            if method == "isValid":
                return E(f"S[{v}]", BOOL)
            if method == "setValid":
                self.out(f"S[{v}] = True")
                self.invalidate_siblings(obj)
                return E("None", VOID)
            if method == "setInvalid":
                self.out(f"S[{v}] = False")
                return E("None", VOID)
            if method in ("minSizeInBits", "maxSizeInBits"):
                return E(repr(t.width_bits), INFINT, const=t.width_bits)
            if method in ("minSizeInBytes", "maxSizeInBytes"):
                return E(repr(t.width_bits // 8), INFINT, const=t.width_bits // 8)
            raise self.err(node, f"header {t.name} has no method '{method}' (isValid, setValid, setInvalid, "
                                 "minSizeInBits, minSizeInBytes)")
        if isinstance(t, StructLike) and t.kind == "header_union" and obj.ref is not None and method == "isValid":
            return E("(" + " or ".join(f"S[{obj.ref.field(f).off(0)}]" for f, _ in t.fields) + ")", BOOL)
        if isinstance(t, StackT) and obj.ref is not None:
            if method in ("push_front", "pop_front"):
                if len(args) != 1:
                    raise self.err(node, f"{method} takes 1 argument (a constant count), got {len(args)}")
                k = self.const_value(self.expr(args[0]), INFINT, node).const
                self.out(f"_{method}(S, {obj.ref.base}, {t.elem.size}, {t.count}, {k})")
                return E("None", VOID)
            raise self.err(node, f"header stack has no method '{method}'")
        sym = obj.const
        if isinstance(sym, tuple) and len(sym) == 2 and isinstance(sym[0], Sym):
            # t.apply().hit comes here as member of a call; not expected
            raise self.err(node, f"unsupported method call '{method}'")
        if not isinstance(sym, Sym):
            raise self.err(node, f"'{method}': {t} has no methods")
        if sym.kind == "packet_in":
            return self.packet_in_call(method, args, node)
        if sym.kind == "packet_out":
            if method != "emit":
                raise self.err(node, f"packet_out has no method '{method}'")
            if len(args) != 1:
                raise self.err(node, f"emit takes 1 argument, got {len(args)}")
            self.emit(self.expr(args[0]), args[0])
            return E("None", VOID)
        if sym.kind == "table":
            if method != "apply":
                raise self.err(node, f"table has no method '{method}'")
            tinfo: TableInfo = sym.value
            return E(f"{tinfo.fn_name}(S)", VOID, const=("apply", tinfo))
        if sym.kind == "extern":
            return self.extern_method(sym, method, args, node)
        if sym.kind == "control":
            if method != "apply":
                raise self.err(node, "controls only have apply()")
            self.inline_control(sym.value, args, node)
            return E("None", VOID)
        raise self.err(node, f"'{method}' cannot be called on this")

    # member access on apply() result
    def apply_result(self, e: E, member: str, node: Any) -> E:
        tinfo = e.const[1]
        if member == "hit":
            return E(f"{tinfo.fn_name}(S)[0]", BOOL)
        if member == "miss":
            return E(f"(not {tinfo.fn_name}(S)[0])", BOOL)
        raise self.err(node, f"apply() result has no member '{member}' (hit, miss, action_run)")

    def packet_in_call(self, method: str, args: list, node: Any) -> E:
        if method == "extract":
            if len(args) not in (1, 2):
                raise self.err(node, f"extract takes 1 or 2 arguments, got {len(args)}")
            h = self.expr(args[0])
            if not (isinstance(h.type, StructLike) and h.type.is_header) or h.ref is None:
                raise self.err(args[0], f"extract needs a header, not {h.type}")
            vb = [ft for _, ft in h.type.fields if isinstance(ft, VarbitT)]
            if bool(vb) != (len(args) == 2):
                raise self.err(node, "extract(hdr, bits) is for headers with a varbit field, extract(hdr) for "
                                     "fixed-size headers")
            var_len = self.expr(args[1], BitT(32)).src if vb else None
            self.extract(h.ref, args[0], var_len)
            self.invalidate_siblings(h)
            an = args[0]
            if an.data in ("member_expr", "lv_member") and _name(an.children[1]) == "next":
                stack = self.expr(an.children[0])
                self.out(f"S[{stack.ref.base}] += 1")
            return E("None", VOID)
        if method == "advance":
            if len(args) != 1:
                raise self.err(node, f"advance takes 1 argument, got {len(args)}")
            a = self.expr(args[0], BitT(32))
            self.out(f"if o + ({a.src} >> 3) > n: raise _PE({self.errors.index('PacketTooShort')})")
            self.out(f"o += {a.src} >> 3")
            return E("None", VOID)
        if method == "length":
            return E("(n << 3)", BitT(32))
        raise self.err(node, f"packet_in has no method '{method}'")

    def extract(self, ref: Ref, node: Any, var_len: str | None = None) -> None:
        t = ref.type
        assert isinstance(t, StructLike)
        nb = t.width_bits // 8
        base = ref.base
        if isinstance(base, str):
            b = self.fresh("h")
            self.out(f"{b} = {base}")
            base = b
        if var_len is not None:
            vname, vt = t.fields[-1]
            vl = self.fresh("vl")
            self.out(f"{vl} = {var_len}")
            self.out(f"if {vl} > {vt.max_width}: raise _PE({self.err_code('HeaderTooShort')})")
            self.out(f"if {vl} % 8: raise _PE({self.err_code('ParserInvalidArgument')})")
            self.out(f"if o + {nb} + ({vl} >> 3) > n: raise _PE({self.errors.index('PacketTooShort')})")
            vslot = self.slot(base, t.offsets[vname])
            self.out(f"S[{vslot}] = int.from_bytes(pkt[o+{nb}:o+{nb}+({vl} >> 3)], 'big'); "
                     f"S[{vslot}+1] = {vl}")
        self.out(f"if o + {nb} > n: raise _PE({self.errors.index('PacketTooShort')})")
        v = self.fresh("v")
        self.out(f"{v} = int.from_bytes(pkt[o:o+{nb}], 'big')")
        shift = t.width_bits
        parts = [f"S[{self.slot(base, 0)}] = True"] if t.is_header else []
        for fname, ft in t.fields:
            if isinstance(ft, VarbitT):
                continue
            w = bit_width(ft)
            shift -= w
            src = f"{v} >> {shift}" if shift else v
            if shift + w < t.width_bits:
                src = f"({src}) & {(1 << w) - 1}"
            if isinstance(ft, BitT) and ft.signed:
                src = f"_sgn({src}, {w})"
            elif isinstance(ft, BoolT):
                src = f"bool({src})"
            parts.append(f"S[{self.slot(base, t.offsets[fname])}] = {src}")
        for p in parts:
            self.out(p)
        self.out(f"o += {nb}" + (f" + ({vl} >> 3)" if var_len is not None else ""))

    @staticmethod
    def slot(base: int | str, k: int) -> str:
        if isinstance(base, int):
            return str(base + k)
        return f"{base}+{k}" if k else str(base)

    def emit(self, e: E, node: Any) -> None:
        t = e.type
        if e.ref is None:
            raise self.err(node, f"emit needs a header, stack or struct of headers, not {t}")
        if isinstance(t, StructLike) and t.is_header:
            base = e.ref.base
            nb = t.width_bits // 8
            terms, shift = [], t.width_bits
            tail = ""
            for fname, ft in t.fields:
                if isinstance(ft, VarbitT):
                    vs = self.slot(base, t.offsets[fname])
                    tail = f" + S[{vs}].to_bytes(S[{vs}+1] >> 3, 'big')"
                    continue
                w = bit_width(ft)
                shift -= w
                s = f"S[{self.slot(base, t.offsets[fname])}]"
                if (isinstance(ft, BitT) and ft.signed) or isinstance(ft, BoolT):
                    s = f"({s} & {(1 << w) - 1})" if not isinstance(ft, BoolT) else f"int({s})"
                terms.append(f"({s} << {shift})" if shift else s)
            fixed = f"({' | '.join(terms)}).to_bytes({nb}, 'big')" if terms else "b''"
            self.out(f"if S[{self.slot(base, 0)}]: out.append({fixed}{tail})")
        elif isinstance(t, StructLike):
            for fname, _ in t.fields:
                r = e.ref.field(fname)
                self.emit(E("None", r.type, ref=r), node)
        elif isinstance(t, StackT):
            for i in range(t.count):
                r = Ref(e.ref.off(1 + i * t.elem.size), t.elem)
                self.emit(E("None", t.elem, ref=r), node)
        else:
            raise self.err(node, f"emit needs a header, stack or struct of headers, not {t}")

    # --- data lists (hash, checksum, digest) --------------------------------------------------------------
    def flatten(self, e: E, node: Any) -> list[tuple[str, int, str]]:
        """Scalar (source, width, name) terms of a field list / struct / header, in order."""
        if isinstance(e.type, ListT):
            out = []
            for item in e.const:
                out.extend(self.flatten(item, node))
            return out
        if isinstance(e.type, StructLike) and e.ref is not None:
            out = []
            for fname, ft in e.type.fields:
                r = e.ref.field(fname)
                sub = self.flatten(E(r.src if ft.scalar else "None", ft, ref=r), node)
                out.extend((s, w, fname if len(sub) == 1 else f"{fname}.{n}") for s, w, n in sub)
            return out
        if isinstance(e.type, BitT):
            s = f"({e.src} & {e.type.mask})" if e.type.signed else e.src
            return [(s, e.type.width, "")]
        if isinstance(e.type, BoolT):
            return [(f"int({e.src})", 1, "")]
        if isinstance(e.type, EnumT) and e.type.base is not None:
            return [(e.src, e.type.base.width, "")]
        if isinstance(e.type, InfIntT):
            raise self.err(node, "an untyped integer in a field list has no width; cast it, e.g. (bit<8>)1")
        raise self.err(node, f"{e.type} cannot be part of a field list")

    def pack(self, terms: list[tuple[str, int, str]]) -> tuple[str, int]:
        total = sum(w for _, w, _ in terms)
        parts, shift = [], total
        for s, w, _ in terms:
            shift -= w
            parts.append(f"({s} << {shift})" if shift else s)
        return ("(" + " | ".join(parts) + ")") if parts else "0", total

    # --- extern functions and methods ---------------------------------------------------------------------
    def algo_name(self, n: Any) -> str:
        e = self.expr(n)
        if isinstance(e.type, EnumT) and e.type.name == "HashAlgorithm":
            return next(k for k, v in e.type.members.items() if v == e.const)
        raise self.err(n, f"expected a HashAlgorithm, got {e.type}")

    def out_ref(self, n: Any, what: str) -> Ref:
        e = self.expr(n)
        if e.ref is None or not e.type.scalar:
            raise self.err(n, f"{what} must be a writable bit<N> field or variable")
        return e.ref

    def extern_func(self, fname: str, args: list, node: Any) -> E:
        sm = self.sm_slots
        nargs = len(args)

        def need(k: int | tuple[int, ...]) -> None:
            ks = (k,) if isinstance(k, int) else k
            if nargs not in ks:
                raise self.err(node, f"{fname} takes {' or '.join(map(str, ks))} arguments, got {nargs}")

        if fname == "mark_to_drop":
            need(1)
            self.out(f"S[{sm['egress_spec']}] = {DROP_PORT}; S[{sm['mcast_grp']}] = 0")
        elif fname == "verify":
            need(2)
            c = self.expect_bool(args[0])
            err = self.expr(args[1])
            if not isinstance(err.type, ErrorT):
                raise self.err(args[1], f"verify's second argument must be an error, not {err.type}")
            self.out(f"if not {c.src}: raise _PE({err.src})")
        elif fname == "hash":
            need(5)
            dst = self.out_ref(args[0], "hash result")
            algo = self.algo_name(args[1])
            if algo not in algorithms.HASHES:
                raise self.err(args[1], f"hash algorithm {algo} is not supported (use one of "
                                        f"{', '.join(algorithms.HASHES)})")
            base = self.expr(args[2], dst.type)
            data = self.flatten(self.expr(args[3]), args[3])
            mx = self.expr(args[4], dst.type)
            val, nbits = self.pack(data)
            h = f"_alg.{algo}(_alg.to_bytes({val}, {nbits}))"
            mask = dst.type.mask if isinstance(dst.type, BitT) else (1 << 64) - 1
            self.out(f"_m = {mx.src}")
            self.out(f"{dst.src} = ({base.src} + ({h} % _m if _m else 0)) & {mask}")
        elif fname == "random":
            need(3)
            dst = self.out_ref(args[0], "random result")
            lo, hi = self.expr(args[1], dst.type), self.expr(args[2], dst.type)
            self.out(f"{dst.src} = _rng.randint(min({lo.src}, {hi.src}), max({lo.src}, {hi.src}))")
        elif fname in ("update_checksum", "update_checksum_with_payload", "verify_checksum",
                       "verify_checksum_with_payload"):
            need(4)
            c = self.expect_bool(args[0])
            data = self.flatten(self.expr(args[1]), args[1])
            ck = self.expr(args[2])
            algo = self.algo_name(args[3])
            val, nbits = self.pack(data)
            payload = fname.endswith("_with_payload")
            if algo == "csum16" and not payload:
                if nbits % 16:
                    val = f"({val} << {16 - nbits % 16})"
                # RFC 1071 sum of 16-bit words == value mod 0xFFFF (2**16 = 1 mod 0xFFFF), inlined
                comp = f"(65535 - _r if (_r := (_v := {val}) % 65535) else (0 if _v else 65535))"
            else:
                if algo not in algorithms.HASHES:
                    raise self.err(args[3], f"checksum algorithm {algo} is not supported")
                data_b = f"_alg.to_bytes({val}, {nbits})" + (f" + S[{PAYLOAD}]" if payload else "")
                comp = f"_alg.{algo}({data_b})"
            if not isinstance(ck.type, BitT) or ck.ref is None:
                raise self.err(args[2], "checksum field must be a bit<N> field")
            comp = f"({comp} & {ck.type.mask})"
            if fname.startswith("update"):
                self.out(f"if {c.src}: {ck.ref.src} = {comp}")
            else:
                self.out(f"if {c.src} and {ck.src} != {comp}: S[{sm['checksum_error']}] = 1")
        elif fname == "digest":
            need(2)
            recv = self.expr(args[0], BitT(32))
            data = self.expr(args[1])
            terms = self.flatten(data, args[1])
            targs = getattr(self, "call_type_args", None) or []
            self.call_type_args = []
            names = [n or f"f{i}" for i, (_, _, n) in enumerate(terms)]
            tname = str(data.type)
            if targs and isinstance(targs[0], StructLike):
                st_ = targs[0]
                tname = st_.name
                if isinstance(data.type, ListT):
                    if len(st_.fields) != len(terms):
                        raise self.err(args[1], f"digest data has {len(terms)} values, {st_.name} has "
                                                f"{len(st_.fields)} fields")
                    names = [f for f, _ in st_.fields]
                    terms = [(f"({s_} & {bit_width(ft) and (1 << bit_width(ft)) - 1})", bit_width(ft), f)
                             for (s_, _, _), (f, ft) in zip(terms, st_.fields, strict=True)]
            lay = DigestLayout(tname, [(nm, w) for nm, (_, w, _) in zip(names, terms, strict=True)])
            self.digest_layouts.append(lay)
            k = len(self.digest_layouts) - 1
            vals = "(" + "".join(s + ", " for s, _, _ in terms) + ")"
            self.out(f"if S[{DIGESTS}] is None: S[{DIGESTS}] = []")
            self.out(f"S[{DIGESTS}].append(({recv.src}, {k}, {vals}))")
        elif fname in ("clone", "clone3", "clone_preserving_field_list"):
            need({"clone": 2, "clone3": 3, "clone_preserving_field_list": 3}[fname])
            self.expr(args[0])
            sess = self.expr(args[1], BitT(32))
            fl = NO_FIELD_LIST
            if fname == "clone_preserving_field_list":
                fl = self.const_value(self.expr(args[2]), INFINT, node).const
                self.field_list(fl, node)
            elif fname == "clone3":
                fl = self.legacy_field_list(args[2])
            self.out(f"S[{CLONE_SESSION}] = {sess.src}; S[{CLONE_FL}] = {fl}")
        elif fname in ("resubmit", "recirculate", "resubmit_preserving_field_list",
                       "recirculate_preserving_field_list"):
            need(1)
            slot = RESUBMIT_FL if fname.startswith("resubmit") else RECIRC_FL
            if fname.endswith("field_list"):
                fl = self.const_value(self.expr(args[0]), INFINT, node).const
                self.field_list(fl, node)
            else:
                fl = self.legacy_field_list(args[0])
            self.out(f"S[{slot}] = {fl}")
        elif fname == "truncate":
            need(1)
            ln = self.expr(args[0], BitT(32))
            self.out(f"S[{TRUNCATE}] = {ln.src}")
        elif fname in ("assert", "assume"):
            need(1)
            c = self.expect_bool(args[0])
            self.out(f"if not {c.src}: raise _AssertFailed({str(self.pos(node))!r})")
        elif fname == "log_msg":
            need((1, 2))
            msg = self.expr(args[0])
            if not isinstance(msg.type, StringT):
                raise self.err(args[0], "log_msg needs a string literal")
            vals = "()"
            if nargs == 2:
                terms = self.flatten(self.expr(args[1]), args[1])
                vals = "(" + "".join(s + ", " for s, _, _ in terms) + ")"
            self.out(f"_log.append(({msg.src}, {vals}))")
        else:
            raise self.err(node, f"extern function '{fname}' is not supported by this target")
        return E("None", VOID)

    def field_list(self, idx: int, node: Any) -> list[int]:
        if idx not in self.field_lists:
            slots: list[int] = []
            meta_t = self.meta_ref.type
            self._collect_fl(self.meta_ref, meta_t, idx, slots)
            self.field_lists[idx] = slots
        return self.field_lists[idx]

    def _collect_fl(self, ref: Ref, t: P4Type, idx: int, out: list[int]) -> None:
        if not isinstance(t, StructLike):
            return
        for fname, ft in t.fields:
            anns = t.annotations.get(fname, {})
            r = ref.field(fname)
            if "field_list" in anns and idx in anns["field_list"]:
                out.extend(range(int(r.base), int(r.base) + ft.size))
            elif isinstance(ft, StructLike):
                self._collect_fl(r, ft, idx, out)

    def legacy_field_list(self, n: Any) -> int:
        e = self.expr(n)
        slots: list[int] = []

        def walk(x: E) -> None:
            if isinstance(x.type, ListT):
                for it in x.const:
                    walk(it)
            elif x.ref is not None and isinstance(x.ref.base, int):
                slots.extend(range(x.ref.base, x.ref.base + x.type.size))
            else:
                raise self.err(n, "field list entries must be fields or structs")
        walk(e)
        idx = 1000 + len(self.field_lists)
        self.field_lists[idx] = slots
        return idx

    def extern_method(self, sym: Sym, method: str, args: list, node: Any) -> E:
        inst = sym.value
        kind, obj, var = inst["kind"], inst["obj"], inst["var"]
        plen = f"S[{self.sm_slots['packet_length']}]"
        direct = getattr(obj, "direct", False)
        arity = {("register", "read"): (1, 2), ("register", "write"): (2,),
                 ("counter", "count"): (0,) if direct else (1,), ("meter", "execute_meter"): (2,),
                 ("meter", "read"): (1,), ("Checksum16", "get"): (1,)}.get((kind, method))
        if arity is not None and len(args) not in arity:
            raise self.err(node, f"{kind}.{method} takes {' or '.join(map(str, arity))} arguments, "
                                 f"got {len(args)}")
        if kind == "register":
            if method == "read":
                if len(args) == 2:
                    dst = self.out_ref(args[0], "register read result")
                    i = self.expr(args[1], BitT(32))
                    self.out(f"{dst.src} = {var}.values[{i.src}] if {i.src} < {obj.size} else 0")
                    return E("None", VOID)
                i = self.expr(args[0], BitT(32))
                return E(f"({var}.values[{i.src}] if {i.src} < {obj.size} else 0)", inst["elem"])
            if method == "write":
                i = self.expr(args[0], BitT(32))
                v = self.coerce(self.expr(args[1], inst["elem"]), inst["elem"])
                self.out(f"if {i.src} < {obj.size}: {var}.values[{i.src}] = {v.src}")
                return E("None", VOID)
        elif kind == "counter":
            if method == "count":
                if obj.direct:
                    return E("None", VOID)  # direct counters count in the table apply
                i = self.expr(args[0], BitT(32))
                self.out(f"{var}.count({i.src}, {plen})")
                return E("None", VOID)
        elif kind == "meter":
            if method == "execute_meter" and not obj.direct:
                i = self.expr(args[0], BitT(32))
                dst = self.out_ref(args[1], "meter result")
                self.out(f"{dst.src} = {var}.execute({i.src}, {plen}, _now_us())")
                return E("None", VOID)
            if method == "read" and obj.direct:
                dst = self.out_ref(args[0], "meter result")
                self.out(f"{dst.src} = S[{inst['slot']}]")
                return E("None", VOID)
        elif kind == "Checksum16" and method == "get":
            terms = self.flatten(self.expr(args[0]), args[0])
            val, nbits = self.pack(terms)
            if nbits % 16:
                val = f"({val} << {16 - nbits % 16})"
            return E(f"_csum16({val})", BitT(16))
        raise self.err(node, f"{kind} has no method '{method}' here")

    # --- actions ------------------------------------------------------------------------------------------
    def compile_action(self, info: ActionInfo, function: bool = False) -> None:
        """Generate ``def <fn>(S, <action data...>)``; directional params get slots (copy-in/out).

        Functions compile the same way and also ``return`` their value.
        """
        node = info.node
        info.fn_name = self.fresh(("f_" if function else "a_") + info.name.replace(".", "_"))
        ret_t: P4Type | None = None
        if function:
            rnode = [c for c in node.children if isinstance(c, Tree) and c.data == "type_ref"]
            ret_t = self.resolve_type(rnode[0]) if rnode else VOID
            if not (ret_t.scalar or isinstance(ret_t, VoidT)):
                raise self.err(node, f"functions returning {ret_t} are not supported yet (return bit/int/bool)")
        info.ret_type = ret_t
        params = []
        scope: dict[str, Sym] = {}
        pynames = []
        for p in _trees(_trees(node, "params")[0], "param"):
            dirn = p.children[len(_trees(p, "annotation"))]
            direction = str(dirn.children[0]) if dirn is not None else ""
            t = self.resolve_type(_trees(p, "type_ref")[0])
            pname = _name(_trees(p, "name")[0])
            if pname in scope:
                raise self.err(p, f"duplicate parameter '{pname}'")
            if direction in ("", "in") and t.scalar:
                py = f"p_{pname}"
                scope[pname] = Sym("py", t, value=py)
                pynames.append(py)
            else:
                ref = self.alloc(t, p)
                scope[pname] = Sym("ref", t, ref=ref)
            params.append((direction, t, pname, scope[pname]))
        info.params = params
        saved_out, saved_in_action, saved_ret = self.out, self.in_action, getattr(self, "fn_ret", None)
        self.out = Emitter()
        self.in_action = True
        self.fn_ret = ret_t
        self.out(f"def {info.fn_name}(S{''.join(', ' + p for p in pynames)}):")
        self.out.indent()
        self.scopes.append(scope)
        body = _trees(node, "block")[0]
        self.stmts(body.children)
        self.scopes.pop()
        self.pending_functions.append(self.out.lines)
        self.out, self.in_action, self.fn_ret = saved_out, saved_in_action, saved_ret
        if function:
            return
        data_params = [(n, t.width if isinstance(t, BitT) else 1) for d, t, n, _ in params if d == ""]
        spec = ActionSpec(info.name, None, data_params, 0)  # fn bound after exec
        self.actions[info.name] = spec
        info.spec = spec

    def global_function(self, name: str) -> ActionInfo:
        cache = self.__dict__.setdefault("_global_fns", {})
        if name not in cache:
            info = ActionInfo(name, self.global_functions[name], None)
            cache[name] = info
            saved = self.scopes
            self.scopes = []
            self.compile_action(info, function=True)
            self.scopes = saved
        return cache[name]

    def direct_action_call(self, info: ActionInfo, args: list, node: Any, function: bool = False) -> E:
        kind = "function" if function else "action"
        if len(args) != len(info.params):
            raise self.err(node, f"{kind} {info.name} takes {len(info.params)} arguments, got {len(args)}")
        pyargs = []
        copy_out = []
        for (direction, t, pname, sym), a in zip(info.params, args, strict=True):
            if sym.kind == "py":
                v = self.coerce(self.expr(a, t), t)
                pyargs.append(v.src)
            else:
                if direction in ("in", "inout", ""):
                    self.assign_ref(sym.ref, a, node)
                if direction in ("out", "inout"):
                    tgt = self.expr(a)
                    if tgt.ref is None:
                        raise self.err(a, f"argument for {direction} parameter '{pname}' must be writable")
                    copy_out.append((tgt.ref, sym.ref))
        call = f"{info.fn_name}(S{''.join(', ' + p for p in pyargs)})"
        ret_t = info.ret_type
        result = E("None", VOID)
        if function and ret_t is not None and not isinstance(ret_t, VoidT):
            tmp = self.fresh("r")
            self.out(f"{tmp} = {call}")
            result = E(tmp, ret_t)
        else:
            self.out(call)
        for dst, src in copy_out:
            if dst.type.scalar:
                self.out(f"{dst.src} = {src.src}")
            else:
                self.copy(dst, src)
        return result

    # --- controls -----------------------------------------------------------------------------------------
    def control_locals(self, node: Tree, prefix: str, scope: dict[str, Sym]) -> None:
        self._every_scope.append(scope)
        for d in node.children:
            if not isinstance(d, Tree):
                continue
            if d.data == "var_decl":
                self.scopes.append(scope)
                self.var_decl_into(d, scope)
                self.scopes.pop()
            elif d.data == "const_decl":
                self.scopes.append(scope)
                t = self.resolve_type(_trees(d, "type_ref")[0])
                e = self.expr(_trees(d)[-1], want=t)
                scope[_name(_trees(d, "name")[0])] = Sym("const", t, value=self.const_value(e, t, d))
                self.scopes.pop()
            elif d.data == "instantiation":
                self.scopes.append(scope)
                self.instantiate(d, prefix, scope)
                self.scopes.pop()
            elif d.data == "action_decl":
                aname = _name(_trees(d, "name")[0])
                full_name = f"{prefix}.{aname}" if prefix else aname
                anns = _annotations(d)
                if anns.get("name"):
                    # @name("x") is relative to the control, @name(".x") global - as p4c names it for BMv2
                    given = str(anns["name"][0])
                    full_name = given[1:] if given.startswith(".") else (f"{prefix}.{given}" if prefix else given)
                info = ActionInfo(full_name, d, prefix)
                scope[aname] = Sym("action", value=info)
                self.scopes.append(scope)
                self.compile_action(info)
                self.scopes.pop()
            elif d.data == "table_decl":
                self.scopes.append(scope)
                self.table(d, prefix, scope)
                self.scopes.pop()
            elif d.data == "function_decl":
                fname = _name(_trees(d, "name")[0])
                info = ActionInfo(f"{prefix}.{fname}" if prefix else fname, d, prefix)
                scope[fname] = Sym("function", value=info)
                self.scopes.append(scope)
                self.compile_action(info, function=True)
                self.scopes.pop()

    def var_decl_into(self, d: Tree, scope: dict[str, Sym]) -> None:
        kids = [c for c in d.children if c is not None and not (isinstance(c, Tree) and c.data == "annotation")]
        t = self.resolve_type(kids[0])
        name = _name(kids[1])
        ref = self.alloc(t, d)
        scope[name] = Sym("ref", t, ref=ref)
        if len(kids) > 2:
            e = self.expr(kids[2], t)
            if e.const is None or not t.scalar:
                raise self.err(kids[2], "control-level variable initialisers must be constants here")
            self.init[ref.base] = self.coerce(e, t).const

    def instantiate(self, d: Tree, prefix: str, scope: dict[str, Sym]) -> None:
        tref = _trees(d, "type_ref")[0]
        inner = _trees(tref)[0]
        tname = str(inner.children[0])
        targs = []
        if inner.data == "spec_type":
            targs = [self.resolve_type(c) for c in _trees(inner, "type_args")[0].children if isinstance(c, Tree)]
        name = _name(_trees(d, "name")[0])
        args = _nonnull(_trees(d, "args")[0].children)
        full = f"{prefix}.{name}" if prefix else name
        anns = _annotations(d)
        if "name" in anns and anns["name"]:
            full = str(anns["name"][0]).lstrip(".")
        var = self.fresh("x_" + name)
        if tname in self.controls:
            scope[name] = Sym("control", value=(self.controls[tname], full))
            return
        cargs = [self.expr(a) for a in args]

        def cint(i: int) -> int:
            if i >= len(cargs) or cargs[i].const is None:
                raise self.err(d, f"{tname} argument {i + 1} must be a compile-time constant")
            return int(cargs[i].const)

        def entries(i: int) -> int:
            n = cint(i)
            if not 0 <= n <= MAX_EXTERN_ENTRIES:
                raise self.err(d, f"{tname} size {n} out of range 0..{MAX_EXTERN_ENTRIES:,} (this target's limit)")
            return n

        def enum_member(i: int) -> str:
            e = cargs[i]
            if not isinstance(e.type, EnumT):
                raise self.err(d, f"{tname}(...) argument {i + 1}: expected an enum member, got {e.type}")
            return next(k for k, v in e.type.members.items() if v == e.const)

        inst: dict[str, Any] = {"kind": tname, "var": var, "name": full}
        want_args = {"register": (1, 2), "counter": (2,), "direct_counter": (1,), "meter": (2,),
                     "direct_meter": (1,), "Checksum16": (0,), "action_profile": (1,),
                     "action_selector": (3,)}.get(tname)
        if want_args is not None and len(cargs) not in want_args:
            raise self.err(d, f"{tname}(...) takes {' or '.join(map(str, want_args))} constructor arguments, "
                              f"got {len(cargs)}")
        if tname == "register":
            elem = targs[0] if targs else BitT(32)
            if not isinstance(elem, BitT):
                raise self.err(d, f"register element type must be bit<N>/int<N>, not {elem}")
            obj: Any = Register(full, entries(0), elem.width, elem.signed)
            inst["elem"] = elem
            self.registers[full] = obj
        elif tname == "counter":
            obj = Counter(full, entries(0), enum_member(1))
            self.counters[full] = obj
        elif tname == "direct_counter":
            obj = Counter(full, 0, enum_member(0), direct=True)
            inst["kind"] = "counter"
            self.counters[full] = obj
        elif tname == "meter":
            obj = Meter(full, entries(0), enum_member(1))
            self.meters[full] = obj
        elif tname == "direct_meter":
            obj = Meter(full, 0, enum_member(0), direct=True)
            inst["kind"] = "meter"
            inst["slot"] = self.alloc(BitT(32)).base
            self.meters[full] = obj
        elif tname == "Checksum16":
            obj = None
        elif tname in ("action_profile", "action_selector"):
            obj = self.make_profile(tname, cargs, full, d)
        else:
            raise self.err(tref, f"extern {tname} is not supported by this target")
        inst["obj"] = obj
        self.ns[var] = obj
        scope[name] = Sym("extern", value=inst)

    def table(self, d: Tree, prefix: str, scope: dict[str, Sym]) -> None:
        tname = _name(_trees(d, "name")[0])
        full = f"{prefix}.{tname}" if prefix else tname
        anns = _annotations(d)
        if "name" in anns and anns["name"]:
            given = str(anns["name"][0])
            full = given[1:] if given.startswith(".") else (f"{prefix}.{given}" if prefix else given)
        keys: list[KeySpec] = []
        key_srcs: list[str] = []
        actions: dict[str, ActionSpec] = {}
        action_infos: list[tuple[ActionInfo, dict]] = []
        size, default, const_default = 1024, None, False
        entries_node = None
        dc = dm = None
        sel_terms: list[tuple[str, int, str]] = []
        profile = None
        for p in d.children:
            if not isinstance(p, Tree):
                continue
            if p.data == "key_prop":
                for ke in _trees(p, "key_elem"):
                    e = self.expr(ke.children[0])
                    mk = _name(ke.children[1])
                    if mk not in self.match_kinds:
                        raise self.err(ke.children[1], f"unsupported match kind '{mk}' (exact, lpm, ternary, "
                                                       "range, optional, selector)")
                    if isinstance(e.type, BoolT):
                        src, w = f"int({e.src})", 1
                    elif isinstance(e.type, BitT):
                        src, w = (f"({e.src} & {e.type.mask})" if e.type.signed else e.src), e.type.width
                    elif isinstance(e.type, EnumT) and e.type.base is not None:
                        src, w = e.src, e.type.base.width
                    elif isinstance(e.type, (ErrorT, EnumT)):
                        src, w = e.src, 32
                    else:
                        raise self.err(ke.children[0], f"table key must be bit<N>/int<N>/bool, not {e.type}")
                    if mk == "selector":
                        sel_terms.append((src, w, ""))
                        continue
                    kanns = _annotations(ke)
                    kname = str(kanns["name"][0]) if "name" in kanns else self.key_text(ke.children[0])
                    keys.append(KeySpec(kname, mk, w))
                    key_srcs.append(src)
            elif p.data == "actions_prop":
                for item in _trees(p, "action_ref_item"):
                    iann = _annotations(item)
                    aref = _trees(item, "action_ref")[0]
                    an = _name(aref.children[0])
                    sym = self.lookup(an, aref)
                    if sym.kind != "action":
                        raise self.err(aref, f"'{an}' is not an action")
                    info: ActionInfo = sym.value
                    action_infos.append((info, iann))
            elif p.data == "entries_prop":
                entries_node = p
            elif p.data == "simple_prop":
                pname = _name(_trees(p, "name")[0])
                is_const = _tok(p, "CONST") is not None
                val = [c for c in p.children if isinstance(c, Tree) and c.data not in ("annotation", "name")][0]
                if pname == "size":
                    size = int(self.const_value(self.expr(val), INFINT, val).const)
                elif pname == "default_action":
                    default = val
                    const_default = is_const
                elif pname == "counters":
                    dc = self.expr(val).const
                elif pname == "meters":
                    dm = self.expr(val).const
                elif pname == "implementation":
                    profile = self.table_profile(val, full, scope)
                elif pname in ("support_timeout", "max_group_size"):
                    pass
                else:
                    raise self.err(p, f"unknown table property '{pname}'")
        action_index: dict[str, int] = {}
        for i, (info, iann) in enumerate(action_infos):
            base = info.spec
            assert base is not None, info.name          # compile_action ran for every action a table lists
            decl_ann = _annotations(info.node)
            spec = ActionSpec(base.name, None, base.params, i, "defaultonly" in iann or "defaultonly" in decl_ann,
                              "tableonly" in iann or "tableonly" in decl_ann)
            actions[info.name] = spec
            action_index[info.name] = i
        fn_name = self.fresh("t_" + full.replace(".", "_"))
        table = Table(full, keys, actions, size)
        if sel_terms and (profile is None or profile.algo is None):
            raise self.err(d, f"table {full} has selector keys but no action_selector implementation")
        table.profile = profile
        if profile is not None:
            profile.tables.append(table)
        if dc is not None:
            table.direct_counter = dc.value["obj"]
        if dm is not None:
            table.direct_meter = dm.value["obj"]
        self.tables[full] = table
        tinfo = TableInfo(full, fn_name, table, action_index,
                          {_name(_trees(info.node, "name")[0]): i for i, (info, _) in enumerate(action_infos)})
        scope[tname] = Sym("table", value=tinfo)
        # default action
        if default is None:
            noact = self.find_action(actions, "NoAction")
            if noact is None:
                noact = self.global_action("NoAction").spec if "NoAction" in self.global_actions else None
                if noact is not None:
                    actions.setdefault(noact.name, ActionSpec(noact.name, None, [], len(actions)))
                    noact = actions[noact.name]
            table.default_action, table.default_data = noact, ()
        else:
            spec, data = self.action_call_const(default, actions, full)
            table.default_action, table.default_data = spec, data
        table.const_default = const_default
        table.initial_default = (table.default_action, table.default_data)
        if entries_node is not None:
            table.const_entries = _tok(entries_node, "CONST") is not None
            self.const_entries(entries_node, table, actions)
        # generate the apply function
        em = Emitter()
        em(f"def {fn_name}(S):")
        em.indent()
        if key_srcs:
            key = key_srcs[0] if len(key_srcs) == 1 else "(" + ", ".join(key_srcs) + ")"
            em(f"e = {fn_name}_T.lookup({key})")
        else:
            em("e = None")
        em("if e is None:")
        em(f"    a = {fn_name}_T.default_action")
        em(f"    a.fn(S, *{fn_name}_T.default_data)")
        em("    return False, a.index")
        plen = f"S[{self.sm_slots['packet_length']}]"
        if table.direct_counter is not None:
            em(f"e.packets += 1; e.bytes += {plen}")
        if table.direct_meter is not None:
            em(f"S[{dm.value['slot']}] = {fn_name}_T.meter_exec(e, {plen}, _now_us())")
        if profile is not None:
            # indirect table: the entry names a member, or a group whose member the selector hash picks
            em(f"P = {fn_name}_T.profile")
            em("if e.group is not None:")
            em("    g = P.groups.get(e.group)")
            em("    if not g:")
            em("        return False, -1")
            if sel_terms:
                val, nbits = self.pack(sel_terms)
                em(f"    h = _alg.{profile.algo}(_alg.to_bytes({val}, {nbits})) & {(1 << profile.width) - 1}")
            else:
                em("    h = 0")
            em("    m = P.members[g[h % len(g)]]")
            em("else:")
            em("    m = P.members[e.member]")
            em("m.action.fn(S, *m.data)")
            em("return True, m.action.index")
        else:
            em("e.fn(S, *e.data)")
            em("return True, e.action.index")
        self.pending_functions.append(em.lines)
        self.ns[f"{fn_name}_T"] = table

    def table_profile(self, val: Tree, table: str, scope: dict[str, Sym]) -> ActionProfile:
        """``implementation = action_selector(...)`` (inline) or the name of an action_profile/selector."""
        if val.data == "ctor_expr":
            kind = str(val.children[0])
            args = [self.expr(a) for a in _nonnull(val.children[2].children)]
            return self.make_profile(kind, args, f"{table}_profile", val)
        e = self.expr(val)
        sym = e.const
        if isinstance(sym, Sym) and sym.kind == "extern" and isinstance(sym.value["obj"], ActionProfile):
            return sym.value["obj"]
        raise self.err(val, "implementation must be action_profile(size) or action_selector(algo, size, width)")

    def make_profile(self, kind: str, args: list[E], name: str, node: Any) -> ActionProfile:
        if kind == "action_profile" and len(args) == 1:
            prof = ActionProfile(name, int(self.const_value(args[0], INFINT, node).const))
        elif kind == "action_selector" and len(args) == 3:
            a = args[0]
            algo = next((k for k, v in a.type.members.items() if v == a.const), "") \
                if isinstance(a.type, EnumT) else ""
            if algo not in algorithms.HASHES:
                raise self.err(node, f"action_selector algorithm must be one of {', '.join(algorithms.HASHES)}")
            prof = ActionProfile(name, int(self.const_value(args[1], INFINT, node).const), algo,
                                 int(self.const_value(args[2], INFINT, node).const))
        else:
            raise self.err(node, "expected action_profile(size) or action_selector(algo, size, outputWidth)")
        self.profiles[name] = prof
        return prof

    def key_text(self, n: Tree) -> str:
        if n.data in ("name_ref",):
            return str(n.children[0])
        if n.data == "member_expr":
            return f"{self.key_text(n.children[0])}.{_name(n.children[1])}"
        if n.data == "call_expr":
            return self.key_text(n.children[0]) + "()"
        if n.data == "index_expr":
            return f"{self.key_text(n.children[0])}[...]"
        return "key"

    @staticmethod
    def find_action(actions: dict[str, ActionSpec], name: str) -> ActionSpec | None:
        if name in actions:
            return actions[name]
        hits = [a for full, a in actions.items() if full.split(".")[-1] == name]
        return hits[0] if len(hits) == 1 else None

    def action_call_const(self, n: Tree, actions: dict[str, ActionSpec], table: str) -> tuple[ActionSpec, tuple]:
        if n.data == "call_expr":
            an, args = n.children[0], _nonnull(n.children[1].children)
        elif n.data == "action_ref":
            an, args = n.children[0], _nonnull(n.children[1].children) if n.children[1] is not None else []
        else:
            an, args = n, []
        aname = str(an.children[0]) if isinstance(an, Tree) else str(an)
        spec = self.find_action(actions, aname)
        if spec is None:
            raise self.err(n, f"action '{aname}' is not in the actions list of table {table}")
        if len(args) != len(spec.params):
            raise self.err(n, f"action {spec.name} takes {len(spec.params)} action-data arguments, "
                              f"got {len(args)}")
        data = []
        for (_pname, w), a in zip(spec.params, args, strict=True):
            e = self.expr(a, BitT(w))
            data.append(self.const_value(e, BitT(w), a).const)
        return spec, tuple(data)

    def const_entries(self, p: Tree, table: Table, actions: dict[str, ActionSpec]) -> None:
        for prio, ent in enumerate(_trees(p, "entry")):
            ks = ent.children[0]
            aref = _trees(ent, "action_ref")[0]
            items = _trees(ks) if ks.data == "tuple_keyset" else [ks]
            if len(items) != len(table.keys):
                raise self.err(ks, f"entry has {len(items)} key values, table {table.name} has "
                                   f"{len(table.keys)} keys")
            match = []
            for item, key in zip(items, table.keys, strict=True):
                match.append(self.keyset_match(item, key.width, key.kind))
            spec, data = self.action_call_const(aref, actions, table.name)
            table.add(match, spec, data, prio + 1, const=True)

    def keyset_match(self, item: Tree, width: int, kind: str) -> tuple[int, int]:
        full = (1 << width) - 1
        t = BitT(width)
        if item.data == "ks_default":
            return (0, full) if kind == "range" else (0, 0)
        if item.data == "ks_mask":
            v = self.const_value(self.expr(item.children[0], t), t, item).const
            m = self.const_value(self.expr(item.children[1], t), t, item).const
            return (v & m, m)
        if item.data == "ks_range":
            lo = self.const_value(self.expr(item.children[0], t), t, item).const
            hi = self.const_value(self.expr(item.children[1], t), t, item).const
            return (lo, hi)
        v = self.const_value(self.expr(item, t), t, item).const
        return (v, v) if kind == "range" else (v & full, full)

    def inline_control(self, value: tuple, args: list, node: Any) -> None:
        cnode, full = value
        params = _trees(_trees(cnode, "params")[0], "param")
        if len(params) != len(args):
            raise self.err(node, f"control apply takes {len(params)} arguments, got {len(args)}")
        scope: dict[str, Sym] = {}
        for p, a in zip(params, args, strict=True):
            pname = _name(_trees(p, "name")[0])
            t = self.resolve_type(_trees(p, "type_ref")[0])
            e = self.expr(a, t)
            if e.ref is not None:
                scope[pname] = Sym("ref", e.ref.type, ref=e.ref)
            else:
                r = self.alloc(t)
                self.out(f"{r.src} = {self.coerce(e, t).src}")
                scope[pname] = Sym("ref", t, ref=r)
        key = ("inlined", full)
        cache = self.__dict__.setdefault("_inlined", {})
        saved = self.scopes
        self.scopes = [scope]
        if key not in cache:
            self.control_locals(cnode, full, scope)
            cache[key] = dict(scope)
        else:
            scope.update({k: v for k, v in cache[key].items() if k not in scope})
        body = _trees(cnode, "block")[-1]
        self.out("try:")
        self.out.indent()
        self.stmts(body.children)
        self.out.dedent()
        self.out("except _Ret:")
        self.out("    pass")
        self.scopes = saved

    # --- parser -------------------------------------------------------------------------------------------
    def compile_parser(self, node: Tree, scope: dict[str, Sym]) -> None:
        self.in_parser = True
        self.parser_name = _name(_trees(node, "name")[0])
        states = {_name(_trees(s, "name")[0]): s for s in _trees(node, "parser_state")}
        if "start" not in states:
            raise self.err(node, "parser has no 'start' state")
        ids = {name: i for i, name in enumerate(states)}
        self.scopes = [scope]
        for d in node.children:
            if isinstance(d, Tree) and d.data == "value_set_decl":
                self.value_set(d, scope)
                continue
            if isinstance(d, Tree) and d.data in ("var_decl", "const_decl", "instantiation"):
                if d.data == "instantiation":
                    self.instantiate(d, "", scope)
                elif d.data == "var_decl":
                    self.var_decl_into(d, scope)
                else:
                    t = self.resolve_type(_trees(d, "type_ref")[0])
                    e = self.expr(_trees(d)[-1], want=t)
                    scope[_name(_trees(d, "name")[0])] = Sym("const", t, value=self.const_value(e, t, d))
        self.parser_states = states
        if self._acyclic(states):
            saved = self.out
            self.out = Emitter()
            self.out.level = 2
            self.inline_budget = 4000
            try:
                self.inline_state("start", ids, set())
                inlined = self.out.lines
            except _TooBig:
                inlined = None
            self.out = saved
            if inlined is not None:
                saved("def _parser(S, pkt):")
                saved("    o = 0; n = len(pkt)")
                saved("    try:")
                saved.lines.extend(inlined)
                saved("    except _PE as exc:")
                saved("        return o, exc.code")
                self.in_parser = False
                return
        self.warn_parser_loops(states)
        if "ParserTimeout" not in self.errors:
            self.errors.append("ParserTimeout")
        out = self.out
        out("def _parser(S, pkt):")
        out.indent()
        out("o = 0; n = len(pkt); st = 0; steps = 0")
        out("try:")
        out.indent()
        out("while True:")
        out.indent()
        out("steps += 1")
        out(f"if steps > {MAX_PARSER_STEPS}:")
        out(f"    raise _PE({self.errors.index('ParserTimeout')})  # error.ParserTimeout")
        for i, (name, s) in enumerate(states.items()):
            out(("if" if i == 0 else "elif") + f" st == {ids[name]}:  # state {name}")
            out.indent()
            stmts = [c for c in s.children if isinstance(c, Tree) and c.data not in (
                "annotation", "name", "trans_direct", "trans_select")]
            self.stmts(stmts)
            trans = [c for c in s.children if isinstance(c, Tree) and c.data in ("trans_direct", "trans_select")]
            if not trans:
                out(f"raise _PE({self.errors.index('NoError')})  # no transition: reject")
            else:
                self.transition(trans[0], ids)
            out.dedent()
        out.dedent()
        out.dedent()
        out("except _PE as exc:")
        out("    return o, exc.code")
        out.dedent()
        self.in_parser = False

    def value_set(self, d: Tree, scope: dict[str, Sym]) -> None:
        """``value_set<T>(size) name;``: select-case values the control plane fills (pvs_add ...)."""
        targs = [c for c in _trees(d, "type_args")[0].children if isinstance(c, Tree)]
        t = self.resolve_type(targs[0])
        if isinstance(t, StructLike):
            width = t.width_bits
        elif isinstance(t, BitT):
            width = t.width
        else:
            raise self.err(d, f"value_set element type must be bit<N> or a struct of bit fields, not {t}")
        size = int(self.const_value(self.expr([c for c in d.children if isinstance(c, Tree)
                                               and c.data not in ("annotation", "type_args", "name")][0]),
                                    INFINT, d).const)
        name = _name(_trees(d, "name")[0])
        full = f"{self.parser_name}.{name}"
        vs = ValueSet(full, width, size)
        var = self.fresh("pvs_" + name)
        self.ns[var] = vs
        self.value_sets[full] = vs
        scope[name] = Sym("value_set", value={"var": var, "obj": vs})

    def warn_parser_loops(self, states: dict[str, Tree]) -> None:
        """Warn about each cycle of states none of which extracts, advances or calls a sub-parser: a packet that
        enters it can only leave by a select, and if it loops it ends in error.ParserTimeout."""
        consuming = {"extract", "advance", "apply"}
        idle = {n for n, st in states.items() if not any(str(v) in consuming for v in st.scan_values(
            lambda v: isinstance(v, Token)))}
        succ = {n: self._successors(states[n]) & idle for n in idle}
        seen: set[str] = set()
        for start in states:                       # declaration order, so warnings come in source order
            if start not in idle or start in seen:
                continue
            cycle = self._cycle_from(start, succ)
            if cycle is None:
                continue
            seen.update(cycle)
            path = " -> ".join([*cycle, cycle[0]])
            pos = self.pos(_trees(states[start], "name")[0])
            self.warnings.append(f"{pos}: warning: parser state '{start}' can loop ({path}) without extracting or "
                                 f"advancing; a packet that keeps looping stops after {MAX_PARSER_STEPS} states "
                                 "with error.ParserTimeout")

    @staticmethod
    def _successors(st: Tree) -> set[str]:
        out = set()
        for t in st.iter_subtrees():
            if t.data in ("trans_direct", "select_case"):
                out.add(_name(t.children[-1] if t.data == "select_case" else t.children[0]))
        return out

    @staticmethod
    def _cycle_from(start: str, succ: dict[str, set[str]]) -> list[str] | None:
        """A shortest cycle through ``start`` in ``succ`` (breadth-first), or None."""
        prev: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for n in frontier:
                for m in sorted(succ.get(n, ())):
                    if m == start:
                        path = [n]
                        while path[-1] != start:
                            path.append(prev[path[-1]])
                        return path[::-1]
                    if m not in prev:
                        prev[m] = n
                        nxt.append(m)
            frontier = nxt
        return None

    @staticmethod
    def _acyclic(states: dict[str, Tree]) -> bool:
        """True if no state can reach itself (then states are inlined into straight-line code)."""
        succ = {name: Compiler._successors(st) & set(states) for name, st in states.items()}
        color: dict[str, int] = {}

        def visit(n: str) -> bool:
            color[n] = 1
            for m in succ[n]:
                if color.get(m) == 1 or (m not in color and not visit(m)):
                    return False
            color[n] = 2
            return True
        return all(visit(n) for n in states if n not in color)

    def inline_state(self, name: str, ids: dict[str, int], path: set[str]) -> None:
        s = self.parser_states[name]
        self.out(f"# state {name}")
        stmts = [c for c in s.children if isinstance(c, Tree) and c.data not in (
            "annotation", "name", "trans_direct", "trans_select")]
        self.stmts(stmts)
        trans = [c for c in s.children if isinstance(c, Tree) and c.data in ("trans_direct", "trans_select")]
        if len(self.out.lines) > self.inline_budget:
            raise _TooBig()
        if not trans:
            self.out(f"raise _PE({self.errors.index('NoError')})  # no transition: reject")
        else:
            self.transition(trans[0], ids, inline=True)

    def goto(self, target: str, ids: dict[str, int], node: Any, inline: bool = False) -> str | None:
        if inline and target not in ("accept", "reject"):
            if target not in ids:
                raise self.err(node, f"unknown parser state '{target}' (states: {', '.join(ids)}, accept, reject)")
            self.inline_state(target, ids, set())
            return None
        if target == "accept":
            return "return o, 0"
        if target == "reject":
            return f"raise _PE({self.errors.index('NoError')})"
        if target not in ids:
            raise self.err(node, f"unknown parser state '{target}' (states: {', '.join(ids)}, accept, reject)")
        return f"st = {ids[target]}; continue"

    def transition(self, t: Tree, ids: dict[str, int], inline: bool = False) -> None:
        if t.data == "trans_direct":
            g = self.goto(_name(t.children[0]), ids, t, inline)
            if g is not None:
                self.out(g)
            return
        sel = t.children[0]
        exprs = [c for c in sel.children if isinstance(c, Tree) and c.data != "select_case"]
        keys = [self.expr(e) for e in exprs]
        kv = []
        for k, e in zip(keys, exprs, strict=True):
            if isinstance(k.type, BoolT):
                k = E(f"int({k.src})", BitT(1))
            if not isinstance(k.type, (BitT, EnumT, ErrorT)):
                raise self.err(e, f"select key must be bit<N>/int<N>/bool/enum, not {k.type}")
            v = self.fresh("k")
            self.out(f"{v} = {k.src}")
            kv.append((v, k.type))
        first = True
        for case in _trees(sel, "select_case"):
            ks, target = case.children[0], _name(case.children[1])
            items = _trees(ks) if ks.data == "tuple_keyset" else [ks]
            if len(items) == 1 and len(kv) > 1 and items[0].data == "ks_default":
                items = items * len(kv)
            if len(items) != len(kv):
                raise self.err(ks, f"select has {len(kv)} keys but this case has {len(items)} values")
            conds = []
            for item, (v, kt) in zip(items, kv, strict=True):
                bt = kt if isinstance(kt, BitT) else (kt.base if isinstance(kt, EnumT) and kt.base else None)
                if item.data == "ks_default":
                    continue
                if item.data == "ks_mask":
                    a = self.expr(item.children[0], bt)
                    m = self.expr(item.children[1], bt)
                    conds.append(f"({v} & {m.src}) == ({a.src} & {m.src})")
                elif item.data == "ks_range":
                    lo, hi = self.expr(item.children[0], bt), self.expr(item.children[1], bt)
                    conds.append(f"{lo.src} <= {v} <= {hi.src}")
                else:
                    a = self.expr(item, bt)
                    if isinstance(a.const, Sym) and a.const.kind == "value_set":
                        conds.append(f"{a.const.value['var']}.match({v})")
                        continue
                    if isinstance(a.const, Sym):
                        raise self.err(item, "a select case must be a value, mask, range, value_set or default")
                    conds.append(f"{v} == {a.src}")
            if not conds:
                self.out("else:" if not first else "if True:")
            else:
                self.out(("if " if first else "elif ") + " and ".join(conds) + ":")
            self.out.indent()
            g = self.goto(target, ids, case, inline)
            if g is not None:
                self.out(g)
            self.out.dedent()
            first = False
        self.out(f"raise _PE({self.errors.index('NoMatch')})")

    # --- whole program ------------------------------------------------------------------------------------
    def control_fn(self, fn: str, node: Tree, bindings: dict[str, Sym]) -> None:
        cname = _name(_trees(node, "name")[0])
        scope = dict(bindings)
        self.scopes = [scope]
        self.control_locals(node, cname, scope)
        body = _trees(node, "block")[-1]
        out = self.out
        out(f"def {fn}(S):")
        out.indent()
        if fn == "_deparser":
            out("out = []")
        out("try:")
        out.indent()
        self.stmts(body.children)
        out.dedent()
        out("except (_Exit, _Ret):")
        out("    pass")
        if fn == "_deparser":
            out("return out")
        out.dedent()

    def compile(self, tree: Tree) -> Program:
        self.collect(tree)
        if self.main is None:
            raise CompileError("no 'main' package instantiation (V1Switch(...) main;) in this program",
                               self.end_pos())
        mtype = str(_trees(_trees(self.main, "type_ref")[0])[0].children[0])
        if mtype != "V1Switch":
            raise self.err(self.main, f"only the v1model V1Switch package is supported, not {mtype}")
        margs = _nonnull(_trees(self.main, "args")[0].children)
        if len(margs) != 6:
            raise self.err(self.main, f"V1Switch takes 6 blocks (parser, verifyChecksum, ingress, egress, "
                                      f"computeChecksum, deparser), got {len(margs)}")
        blocks = {}
        for role, a in zip(V1_BLOCKS, margs, strict=True):
            if a.data != "ctor_expr":
                raise self.err(a, f"V1Switch {role} argument must be an instantiation like MyIngress()")
            bname = str(a.children[0])
            table = self.parsers if role == "parser" else self.controls
            if bname not in table:
                raise self.err(a, f"unknown {'parser' if role == 'parser' else 'control'} '{bname}'")
            blocks[role] = table[bname]
        self.blocks = blocks                  # role -> parser/control declaration (read by later passes)
        pparams = _trees(_trees(blocks["parser"], "params")[0], "param")
        if len(pparams) != 4:
            raise self.err(blocks["parser"], "a v1model parser has 4 parameters (packet_in, out H, inout M, "
                                             "inout standard_metadata_t)")
        htype = self.resolve_type(_trees(pparams[1], "type_ref")[0])
        mtype_ = self.resolve_type(_trees(pparams[2], "type_ref")[0])
        smtype = self.types.get("standard_metadata_t")
        if not isinstance(smtype, StructLike):
            raise self.err(blocks["parser"], "standard_metadata_t is not declared (did you #include <v1model.p4>?)")
        h0 = len(self.init)
        self.hdr_ref = self.alloc(htype)
        h1 = len(self.init)
        self.meta_ref = self.alloc(mtype_)
        m1 = len(self.init)
        self.sm_ref = self.alloc(smtype)
        self.sm_slots = {f: int(self.sm_ref.field(f).base) for f, _ in smtype.fields}
        for need in ("NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds"):
            if need not in self.errors:
                self.errors.append(need)
        roots = [self.hdr_ref, self.meta_ref, self.sm_ref]

        def bind(node: Tree, roles: list[str]) -> dict[str, Sym]:
            params = _trees(_trees(node, "params")[0], "param")
            if len(params) != len(roles):
                raise self.err(node, f"this v1model block must have {len(roles)} parameters, has {len(params)}")
            out: dict[str, Sym] = {}
            for p, role in zip(params, roles, strict=True):
                pname = _name(_trees(p, "name")[0])
                ptype = self.resolve_type(_trees(p, "type_ref")[0])
                if role in ("packet_in", "packet_out"):
                    out[pname] = Sym(role)
                    continue
                r = {"H": roots[0], "M": roots[1], "SM": roots[2]}[role]
                if ptype is not r.type:
                    raise self.err(p, f"parameter '{pname}' has type {ptype}, expected {r.type}")
                out[pname] = Sym("ref", r.type, ref=r)
            return out

        pscope = bind(blocks["parser"], ["packet_in", "H", "M", "SM"])
        self.compile_parser(blocks["parser"], pscope)
        self.control_fn("_verify", blocks["verify"], bind(blocks["verify"], ["H", "M"]))
        self.control_fn("_ingress", blocks["ingress"], bind(blocks["ingress"], ["H", "M", "SM"]))
        self.control_fn("_egress", blocks["egress"], bind(blocks["egress"], ["H", "M", "SM"]))
        self.control_fn("_compute", blocks["compute"], bind(blocks["compute"], ["H", "M"]))
        self.control_fn("_deparser", blocks["deparser"], bind(blocks["deparser"], ["packet_out", "H"]))
        src_lines = []
        for fn in self.pending_functions:
            src_lines.extend(fn)
            src_lines.append("")
        src_lines.extend(self.out.lines)
        source = "\n".join(src_lines) + "\n"
        ns = self.ns
        ns.update({"_INIT": self.init, "_sx": _stack_index, "_sgn": _signed, "_push_front": _push_front,
                   "_pop_front": _pop_front})
        code = compile(source, f"<p4:{self.prog_name}>", "exec")
        for t in self.tables.values():       # entries and defaults use the table's own action specs
            for e in t.entries.values():
                if e.action is not None:
                    e.action = t.actions[e.action.name]
            if t.default_action is not None:
                t.default_action = t.actions.get(t.default_action.name, t.default_action)
                t.initial_default = (t.default_action, t.default_data)
        objects = {k: v for k, v in ns.items() if isinstance(v, _STATE_TYPES)}
        helpers = {k: v for k, v in ns.items() if k not in objects}
        action_fns = {info.name: info.fn_name for info in self._all_action_infos()}
        template = ProgramState(self.tables, self.actions, self.registers, self.counters, self.meters,
                                self.profiles, self.value_sets, objects)
        return Program(
            name=self.prog_name, source=source, code=code, helpers=helpers, template=template,
            action_fns=action_fns, init_state=self.init, sm=self.sm_slots, errors=self.errors,
            field_lists=self.field_lists, digest_layouts=self.digest_layouts,
            meta_range=(h1, m1), headers_range=(h0, h1))

    def _all_action_infos(self) -> list[ActionInfo]:
        infos = list(self.__dict__.get("_global_infos", {}).values())
        seen = {id(i) for i in infos}

        def walk(sc: dict[str, Sym]) -> None:
            for s in sc.values():
                if s.kind == "action" and id(s.value) not in seen:
                    seen.add(id(s.value))
                    infos.append(s.value)
        for sc in self._every_scope:
            walk(sc)
        return infos



# Globals of the generated code that hold run-time state: copied for every pipeline (Program.instantiate).
_STATE_TYPES = (Table, Register, Counter, Meter, ActionProfile, ValueSet, _random.Random, collections.deque)


class _TooBig(Exception):
    """Inlining the parser states would generate too much code: use the state loop instead."""


def _stack_index(i: int, count: int) -> int:
    if not 0 <= i < count:
        raise ParserError(3)  # error.StackOutOfBounds (index fixed by _fix_error_codes)
    return i


def _signed(v: int, w: int) -> int:
    return v - (1 << w) if v >> (w - 1) else v


def _push_front(S: list, base: int, esize: int, count: int, k: int) -> None:
    first = base + 1
    if k >= count:
        for i in range(count):
            S[first + i * esize] = False
    else:
        S[first + k * esize: first + count * esize] = S[first: first + (count - k) * esize]
        for i in range(k):
            S[first + i * esize] = False
    S[base] = min(count, S[base] + k)


def _pop_front(S: list, base: int, esize: int, count: int, k: int) -> None:
    first = base + 1
    if k >= count:
        for i in range(count):
            S[first + i * esize] = False
    else:
        S[first: first + (count - k) * esize] = S[first + k * esize: first + count * esize]
        for i in range(count - k, count):
            S[first + i * esize] = False
    S[base] = max(0, S[base] - k)


def compile_file(path: str | Path, *, include_dirs: list[Path] | None = None,
                 defines: dict[str, str] | None = None, seed: int = 0,
                 checks: tuple[CheckPass, ...] = ()) -> Program:
    """Preprocess, parse, type-check and compile a v1model P4 program (raises ``CompileError``)."""
    pre = preprocess(path, include_dirs, defines)
    return compile_preprocessed(pre, Path(path).stem, seed, checks=checks)


def compile_source(text: str, name: str = "<string>", seed: int = 0,
                   checks: tuple[CheckPass, ...] = ()) -> Program:
    """Compile P4 source text (for tests); ``#include <v1model.p4>`` works as usual."""
    from p4.preprocess import Preprocessor

    pre = Preprocessor().run_text(text, name)
    return compile_preprocessed(pre, name, seed, checks=checks)


class CheckPass(Protocol):
    """An extra pass over a compiled program (e.g. ``p4.compat_bmv2``): raises ``CompileError`` on a finding."""

    name: str

    def run(self, c: Compiler, tree: Tree) -> None: ...


def compile_preprocessed(pre: Preprocessed, name: str, seed: int = 0,
                         checks: tuple[CheckPass, ...] = ()) -> Program:
    tree = parse(pre)
    c = Compiler(pre, name, seed)
    try:
        prog = c.compile(tree)
    except RecursionError:
        node = getattr(c, "last_node", None)
        raise CompileError("program nests too deeply for this compiler",
                           c.pos(node) if node is not None else c.end_pos()) from None
    except CompileError:
        raise
    except Exception as exc:  # a compiler bug must still point the user at the construct
        node = getattr(c, "last_node", None)
        raise CompileError(f"internal compiler error ({type(exc).__name__}: {exc}) while compiling this; "
                           "please report it", c.pos(node) if node is not None else None) from exc
    for check in checks:                   # after compiling: the program is well-formed and its names resolve
        check.run(c, tree)
    prog.warnings = c.warnings
    err = prog.errors.index("StackOutOfBounds")
    prog.helpers["_sx"] = _make_stack_index(err)
    try:
        prog.instantiate()                 # every pipeline does this: a compiler bug must show here, not later
    except Exception as exc:  # as above
        raise CompileError(f"internal compiler error ({type(exc).__name__}: {exc}) while instantiating "
                           f"{name}; please report it") from exc
    return prog


def _make_stack_index(code: int) -> Callable[[int, int], int]:
    def sx(i: int, count: int) -> int:
        if not 0 <= i < count:
            raise ParserError(code)
        return i
    return sx
