"""Expressions: type-check one expression and build its Python source (``E``), folding constants."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4.compiler import fold, lower
from p4.compiler.context import CompilerContext
from p4.compiler.ir import BOOL, ERROR, INFINT, STRING, VOID, E, Ref, Sym
from p4.compiler.limits import (
    MAX_CONST_BITS,
)
from p4.compiler.syntax import name_of, nonnull, parse_int, subtrees, wrap_const
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    InfIntT,
    ListT,
    P4Type,
    StackT,
    StructLike,
    VarbitT,
)


def known(e: E) -> int | bool | None:
    """The compile-time value of ``e``: its constant, else what the folder computed; None if only known at run time."""
    v = e.const if e.const is not None else e.value
    return v if isinstance(v, int) else None


def fold_known(op: str, a: E, b: E, t: P4Type) -> int | bool | None:
    """``a op b`` folded when both operands are known (None for int division by zero: the caller decides)."""
    ka, kb = known(a), known(b)
    if ka is None or kb is None:
        return None
    try:
        return fold.binary(op, ka, kb, t)
    except (ZeroDivisionError, OverflowError):
        return None


def fold_known_cast(a: E, source: P4Type, target: P4Type) -> int | bool | None:
    ka = known(a)
    return None if ka is None else fold.cast(ka, source, target)


def fold_known_unary(op: str, a: E) -> int | bool | None:
    ka = known(a)
    return None if ka is None else fold.unary(op, ka, a.type)


class Expressions(CompilerContext):
    """Typed expressions: operators, casts, names, members, indices, slices, lookahead."""

    # --- expressions --------------------------------------------------------------------------------------
    def expr(self, n: Any, want: P4Type | None = None) -> E:
        e = self._expr(n, want)
        if want is not None and isinstance(e.type, InfIntT) and isinstance(want, BitT):
            if e.const is not None:
                v = wrap_const(e.const, want)
                return E(repr(v), want, const=v)
            return E(self.wrap(e.src, want), want, value=fold_known_cast(e, INFINT, want))
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
            m = name_of(n.children[1])
            if m not in self.errors:
                raise self.err(n, f"unknown error '{m}' (declared: {', '.join(self.errors)})")
            return E(repr(self.errors.index(m)), ERROR, const=self.errors.index(m))
        if d == "type_member":
            tname, m = str(n.children[0]), name_of(n.children[1])
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
            ca = lower.capture(self, lambda: self.expr(n.children[1], want))
            a = ca.e
            cb = lower.capture(self, lambda: self.expr(n.children[2], want if want else a.type))
            b = cb.e
            if want is not None and a.type != b.type:   # the context only types arms that have no type of their own
                ca = lower.capture(self, lambda: self.expr(n.children[1]))
                cb = lower.capture(self, lambda: self.expr(n.children[2], ca.e.type))
                a, b = ca.e, cb.e
            t = self.unify(a, b, n, "?:")
            lowered = lower.conditional(self, c, ca, cb, lambda e: self.coerce(e, t))
            if lowered is not None:
                return lowered
            a, b = self.coerce(a, t), self.coerce(b, t)
            if c.const is not None:
                return a if c.const else b
            kc = known(c)
            return E(f"({a.src} if {c.src} else {b.src})", t, value=None if kc is None else known(a if kc else b))
        if d in ("lor", "land"):
            a = self.expect_bool(n.children[0])
            cb = lower.capture(self, lambda: self.expect_bool(n.children[1]))
            b = cb.e
            lowered = lower.short_circuit(self, "||" if d == "lor" else "&&", a, cb)
            if lowered is not None:
                return lowered
            op = "or" if d == "lor" else "and"
            return E(f"({a.src} {op} {b.src})", BOOL, value=fold_known("||" if d == "lor" else "&&", a, b, BOOL))
        if d == "lnot":
            a = self.expect_bool(n.children[0])
            return E(f"(not {a.src})", BOOL, value=fold_known_unary("!", a))
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
                    return E(f"(~{a.src})", a.type, value=fold_known_unary("~", a))
                return E(f"({a.src} ^ {a.type.mask})", a.type, value=fold_known_unary("~", a))
            raise self.err(n, f"~ needs bit<N> or int<N>, not {a.type}")
        if d == "neg":
            a = self.expr(n.children[0], want)
            if isinstance(a.type, InfIntT):
                return E(f"(-{a.src})", INFINT, const=-a.const if a.const is not None else None,
                         value=fold_known_unary("-", a))
            if isinstance(a.type, BitT):
                return E(self.wrap(f"(-{a.src})", a.type), a.type, value=fold_known_unary("-", a))
            raise self.err(n, f"unary - needs a number, not {a.type}")
        if d == "cast":
            return self.cast(n)
        if d == "uplus":
            return self.expr(n.children[1], want)
        if d == "struct_expr":
            kvs = subtrees(n, "kv_pair")
            pairs = {}
            for kv, e in zip(kvs, self.left_to_right_items([kv.children[1] for kv in kvs]), strict=True):
                fname = name_of(kv.children[0])
                if fname in pairs:
                    raise self.err(kv, f"field '{fname}' given twice")
                pairs[fname] = (kv, e)
            return E("None", ListT([e.type for _, e in pairs.values()]), const=("fields", pairs))
        if d == "list_expr":
            items = self.left_to_right_items(nonnull(n.children))
            return E("(" + "".join(i.src + ", " for i in items) + ")", ListT([i.type for i in items]),
                     const=items)
        if d in ("call_expr",):
            return self.call(n.children[0], nonnull(n.children[1].children), as_stmt=False)
        if d == "generic_method_expr":
            return self.generic_method(n, as_stmt=False)
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

    def left_to_right_items(self, nodes: list[Any]) -> list[E]:
        """A list or struct initialiser's items, evaluated left to right: when an item's evaluation emits
        statements (a call with side effects), the items before it are read first (``{a, f(a)}`` keeps the old
        ``a``)."""
        items: list[E] = []
        for node in nodes:
            got = lower.capture(self, lambda node=node: self.expr(node))
            if got.lines:
                items = [lower.spill(self, i) for i in items]
                lower.replay(self.out, got.lines)
            items.append(got.e)
        return items

    def coerce(self, e: E, t: P4Type) -> E:
        if isinstance(e.type, InfIntT) and isinstance(t, BitT):
            if e.const is not None:
                v = wrap_const(e.const, t)
                return E(repr(v), t, const=v)
            return E(self.wrap(e.src, t), t, value=fold_known_cast(e, INFINT, t))
        return e

    def arith(self, op: str, an: Any, bn: Any, node: Any, want: P4Type | None) -> E:
        a = self.expr(an)
        cb = lower.capture(self, lambda: self.expr(bn))
        b = cb.e
        a = lower.left_to_right(self, a, cb)

        def out(src: str, t: P4Type) -> E:   # a and b as finally coerced: the folded value rides along
            return E(src, t, value=fold_known(op, a, b, t))

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
                return out(f"({a.src} {op} {b.src})", INFINT)
            if not isinstance(t, BitT):
                raise self.err(an, f"cannot shift a {t}")
            if op == ">>":
                return out(f"({a.src} >> {b.src})", t)
            if b.const is not None:
                return out("0" if b.const >= t.width else self.wrap(f"{a.src} << {b.const}", t), t)
            return out(f"({self.wrap(f'{a.src} << {b.src}', t)} if {b.src} < {t.width} else 0)", t)
        if op == "++":
            if not (isinstance(a.type, BitT) and isinstance(b.type, BitT)):
                raise self.err(node, f"'++' needs bit<N>/int<N> operands with known widths, not {a.type} and "
                                     f"{b.type}")
            t = BitT(a.type.width + b.type.width, a.type.signed)
            bs = f"({b.src} & {b.type.mask})" if b.type.signed else b.src
            as_ = f"({a.src} & {a.type.mask})" if a.type.signed else a.src
            ka, kb = known(a), known(b)
            return E(self.wrap(f"({as_} << {b.type.width}) | {bs}", t) if t.signed else
                     f"(({as_} << {b.type.width}) | {bs})", t,
                     value=None if ka is None or kb is None else fold.concat(ka, a.type, kb, b.type))
        if isinstance(a.type, InfIntT) and want is not None and isinstance(want, BitT) and \
                isinstance(b.type, InfIntT) and op not in ("==", "!=", "<", ">", "<=", ">="):
            pass
        t = self.unify(a, b, node, op)
        a, b = self.coerce(a, t), self.coerce(b, t)
        if op in ("==", "!="):
            if isinstance(t, StructLike) and a.ref is not None and b.ref is not None:
                return E(self.struct_equal(a.ref, b.ref, op == "!="), BOOL)
            if isinstance(t, StackT) and a.ref is not None and b.ref is not None:
                eq = self.stack_equal(a.ref, b.ref)
                return E(f"(not {eq})" if op == "!=" else eq, BOOL)
            if isinstance(t, VarbitT) and a.ref is not None and b.ref is not None:   # its length and its bits
                eq = f"(S[{a.ref.base}:{a.ref.base}+2] == S[{b.ref.base}:{b.ref.base}+2])"
                return E(f"(not {eq})" if op == "!=" else eq, BOOL)
            if isinstance(t, StructLike):
                raise self.err(node, "== on headers/structs needs two stored values (not list expressions)")
            if isinstance(a.const, int) and isinstance(b.const, int):
                v = (a.const == b.const) == (op == "==")
                return E(repr(v), BOOL, const=v)
            return E(f"({a.src} {op} {b.src})", BOOL, value=fold_known(op, a, b, t))
        if op in ("<", ">", "<=", ">="):
            if not isinstance(t, (BitT, InfIntT)):
                raise self.err(node, f"'{op}' needs numbers, not {t}")
            return E(f"({a.src} {op} {b.src})", BOOL, value=fold_known(op, a, b, t))
        if isinstance(t, BoolT) and op in ("&", "|", "^"):
            raise self.err(node, f"'{op}' on bool: use && / ||")
        if not isinstance(t, (BitT, InfIntT)):
            raise self.err(node, f"'{op}' needs bit<N>/int<N> operands, not {t}")
        if isinstance(t, InfIntT):
            pyop = {"/": "//", "|+|": "+", "|-|": "-"}.get(op, op)
            if isinstance(a.const, int) and isinstance(b.const, int):
                try:
                    v = fold.binary(op, a.const, b.const, INFINT)
                except ZeroDivisionError:
                    raise self.err(node, "division by zero") from None
                return E(repr(v), INFINT, const=v)
            return out(f"({a.src} {pyop} {b.src})", INFINT)
        if op in ("&", "|", "^"):
            return out(f"({a.src} {op} {b.src})", t)
        if op in ("+", "-", "*"):
            return out(self.wrap(f"{a.src} {op} {b.src}", t), t)
        if op in ("/", "%"):
            if t.signed:
                raise self.err(node, f"'{op}' is not defined for signed int<N> in P4")
            if b.const == 0:
                raise self.err(node, f"division by zero ('{op}' by the constant 0)")
            pyop = "//" if op == "/" else "%"
            return out(f"({a.src} {pyop} {b.src} if {b.src} else 0)", t)
        if op == "|+|":
            if t.signed:
                h = 1 << (t.width - 1)
                return out(f"max(-{h}, min({h - 1}, {a.src} + {b.src}))", t)
            return out(f"min({t.mask}, {a.src} + {b.src})", t)
        if op == "|-|":
            if t.signed:
                h = 1 << (t.width - 1)
                return out(f"max(-{h}, min({h - 1}, {a.src} - {b.src}))", t)
            return out(f"max(0, {a.src} - {b.src})", t)
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
                parts.append(self.stack_equal(fa, fb))
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

    def stack_equal(self, a: Ref, b: Ref) -> str:
        """P4 == on header stacks: element by element as headers (p4c compares the elements, not nextIndex)."""
        t = a.type
        assert isinstance(t, StackT)
        size = t.elem.size
        return "(" + " and ".join(self.struct_equal(Ref(a.off(1 + i * size), t.elem), Ref(b.off(1 + i * size), t.elem),
                                                    False) for i in range(t.count)) + ")"

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
                return E(f"(1 if {a.src} else 0)", t, value=fold_known_cast(a, s, t2))
            if isinstance(s, InfIntT):
                if a.const is not None:
                    v = wrap_const(a.const, t2)
                    return E(repr(v), t, const=v)
                return E(self.wrap(a.src, t2), t, value=fold_known_cast(a, s, t2))
            if isinstance(s, BitT):
                value = fold_known_cast(a, s, t2)
                if s == t2:
                    return E(a.src, t, const=a.const, value=value)
                if not t2.signed:
                    if not s.signed and s.width <= t2.width:
                        return E(a.src, t, const=a.const, value=value)
                    return E(f"({a.src} & {t2.mask})", t, value=value)
                return E(self.wrap(a.src, t2), t, value=value)
        if isinstance(t2, BoolT) and isinstance(s, BitT) and s.width == 1:
            return E(f"({a.src} == 1)", BOOL, value=fold_known_cast(a, s, t2))
        if isinstance(t2, BoolT) and isinstance(s, BoolT):
            return a
        if isinstance(t2, InfIntT):
            return E(a.src, INFINT, const=a.const, value=a.value)
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
        base_n, m = n.children[0], name_of(n.children[1])
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
        """A run-time index checked against the stack's size: in a parser error.StackOutOfBounds; in a control
        the enclosing statement's out-of-range branch (counted: ``stmt`` guards the statements that use one)."""
        if self.in_parser:
            return f"_sx({idx_src}, {count})"
        self.dyn_indexes += 1
        return f"_hx({idx_src}, {count})"

    def index_expr(self, n: Tree) -> E:
        b = self.expr(n.children[0])
        i = self.expr(n.children[1])
        t = b.type
        if isinstance(t, StructLike) and t.name.startswith("tuple<") and b.ref is not None:   # a tuple variable
            if i.const is None or str(i.const) not in t.offsets:
                raise self.err(n.children[1], f"a {t} is indexed by a constant 0..{len(t.fields) - 1}")
            r = b.ref.field(str(i.const))
            return E(r.src if r.type.scalar else "None", r.type, ref=r)
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
        kb = known(b)
        return E(src, BitT(w), value=None if kb is None else (kb >> lo) & ((1 << w) - 1))

    def lookahead(self, n: Tree) -> E:
        obj = self.expr(n.children[0])
        targs = [c for c in subtrees(n, "type_args")[0].children if isinstance(c, Tree)]
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
