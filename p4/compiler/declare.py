"""Pass ``declare``: resolve the program's top-level names (types, constants, errors, externs, blocks)."""

from __future__ import annotations

from lark import Token, Tree

from p4.compiler.context import CompilerContext
from p4.compiler.expressions import known
from p4.compiler.ir import BOOL, ERROR, INFINT, STRING, E
from p4.compiler.limits import (
    MAX_STACK_SIZE,
)
from p4.compiler.syntax import annotations_of, name_of, param_names, parse_int, subtrees, wrap_const
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    ExternT,
    ListT,
    P4Type,
    StackT,
    StructLike,
    TypeVarT,
    VarbitT,
    bit_width,
)


class Declarations(CompilerContext):
    """Top-level declarations into the symbol tables, and type expressions into ``P4Type``."""

    # --- pass 1: declarations -----------------------------------------------------------------------------
    def declare_once(self, d: Tree) -> None:
        """A second declaration of a type, parser or control name is an error at the second one."""
        node = subtrees(d, "name")[0]
        name = name_of(node)
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
                t = self.resolve_type(subtrees(d, "type_ref")[0])
                name = name_of(subtrees(d, "name")[0])
                e = self.expr(subtrees(d)[-1], want=t)
                self.consts[name] = self.const_value(e, t, d)
            elif kind == "typedef_decl":
                self.types[name_of(subtrees(d, "name")[0])] = self.resolve_type(subtrees(d, "type_ref")[0])
            elif kind in ("header_decl", "struct_decl", "union_decl"):
                self.declare_struct(d, {"header_decl": "header", "struct_decl": "struct",
                                        "union_decl": "header_union"}[kind])
            elif kind == "enum_decl":
                self.declare_enum(d)
            elif kind == "error_decl":
                for n in subtrees(d, "name"):
                    if name_of(n) not in self.errors:
                        self.errors.append(name_of(n))
            elif kind == "match_kind_decl":
                self.match_kinds.update(name_of(n) for n in subtrees(d, "name"))
            elif kind == "extern_obj":
                name = name_of(subtrees(d, "name")[0])
                tp = subtrees(d, "type_params")
                params = [name_of(n) for n in subtrees(tp[0], "name")] if tp else []
                self.externs[name] = ExternT(name, params, {})
                self.types[name] = self.externs[name]
                for m in subtrees(d, "method_proto"):
                    self.param_names.setdefault(f"{name}.{name_of(subtrees(m, 'name')[0])}", []).append(
                        param_names(m))
            elif kind == "extern_func":
                self.extern_funcs.add(name_of(subtrees(d, "name")[0]))
                self.param_names.setdefault(name_of(subtrees(d, "name")[0]), []).append(param_names(d))
            elif kind == "parser_decl":
                self.parsers[name_of(subtrees(d, "name")[0])] = d
            elif kind == "control_decl":
                self.controls[name_of(subtrees(d, "name")[0])] = d
            elif kind == "action_decl":
                self.global_actions[name_of(subtrees(d, "name")[0])] = d
            elif kind == "instantiation":
                if name_of(subtrees(d, "name")[0]) == "main":
                    self.main = d
                else:
                    self.top_instantiations.append(d)   # instantiated in codegen, visible in every block
            elif kind in ("parser_type_decl", "control_type_decl", "package_decl"):
                self.types.setdefault(name_of(subtrees(d, "name")[0]), ExternT(name_of(subtrees(d, "name")[0]), [], {}))
            elif kind == "function_decl":
                self.global_functions[name_of(subtrees(d, "name")[0])] = d

    def const_value(self, e: E, t: P4Type, node: Tree) -> E:
        v = e.const if isinstance(e.const, (int, str)) else known(e)
        if v is None:
            raise self.err(node, "expected a compile-time constant here")
        if isinstance(t, BitT):
            v = wrap_const(v, t)
        return E(repr(v), t, const=v)

    def declare_struct(self, d: Tree, kind: str) -> None:
        name = name_of(subtrees(d, "name")[0])
        fields, anns = [], {}
        seen = set()
        for f in subtrees(d, "field"):
            fname = name_of(subtrees(f, "name")[0])
            if fname in seen:
                raise self.err(f, f"duplicate field '{fname}' in {kind} {name}")
            seen.add(fname)
            ft = self.resolve_type(subtrees(f, "type_ref")[0])
            if kind == "header" and not isinstance(ft, (BitT, BoolT, VarbitT)) and not (
                    isinstance(ft, EnumT) and ft.base is not None) and not self.fixed_width_struct(ft):
                raise self.err(f, f"header field '{fname}' must be bit<N>, int<N>, bool, varbit<N>, a "
                                  f"serializable enum or a struct of those (no varbit), not {ft}")
            if kind != "header" and isinstance(ft, VarbitT):
                raise self.err(f, "varbit fields are only supported in headers")
            if isinstance(ft, VarbitT) and any(True for _ in subtrees(d, "field")[len(fields) + 1:]):
                raise self.err(f, "a varbit field must be the last field of its header on this target")
            if kind == "header_union" and not (isinstance(ft, StructLike) and ft.is_header):
                raise self.err(f, f"header_union field '{fname}' must be a header")
            fields.append((fname, ft))
            anns[fname] = annotations_of(f)
        st = StructLike(name, fields, kind, anns)
        if kind == "header" and st.width_bits % 8:
            raise self.err(d, f"header {name} is {st.width_bits} bits wide; headers must be a whole number "
                              "of bytes")
        self.types[name] = st
        ch = annotations_of(d).get("controller_header")
        if kind == "header" and ch is not None:
            self.control_plane.controller_headers[name] = (str(ch[0]) if ch else name,
                                                           [(f, bit_width(t)) for f, t in fields])

    def declare_enum(self, d: Tree) -> None:
        name = name_of(subtrees(d, "name")[0])
        base = None
        for c in subtrees(d):
            if c.data.startswith("t_"):
                bt = self.resolve_base(c)
                if not isinstance(bt, BitT):
                    raise self.err(c, "an enum's underlying type must be bit<N> or int<N>")
                base = bt
        members: dict[str, int] = {}
        for i, m in enumerate(subtrees(d, "enum_member")):
            mname = name_of(subtrees(m, "name")[0])
            val = i
            rest = [c for c in m.children[1:] if c is not None]
            if rest:
                if base is None:
                    raise self.err(m, "only enums with an underlying type (enum bit<N> E) can have values")
                val = self.const_value(self.expr(rest[0], want=base), base, m).const
            members[mname] = val
        self.types[name] = EnumT(name, members, base)

    # --- types --------------------------------------------------------------------------------------------
    @staticmethod
    def fixed_width_struct(t: P4Type) -> bool:
        """A struct a header may hold: bit<N>/int<N>/bool/serializable-enum fields, or structs of them."""
        return isinstance(t, StructLike) and t.kind == "struct" and all(
            isinstance(ft, (BitT, BoolT)) or (isinstance(ft, EnumT) and ft.base is not None)
            or Declarations.fixed_width_struct(ft) for _, ft in t.fields)

    def resolve_type(self, t: Tree) -> P4Type:
        d = t.data
        if d in ("type_ref", "cast_type"):
            return self.resolve_type(subtrees(t)[0])
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
            if not (isinstance(elem, StructLike) and (elem.is_header or elem.kind == "header_union")):
                raise self.err(t, f"header stacks must contain headers or header unions, not {elem}")
            n = self.const_value(self.expr(kids[-1]), INFINT, t).const
            if not 1 <= int(n) <= MAX_STACK_SIZE:
                raise self.err(t, f"header stack size {n} out of range 1..{MAX_STACK_SIZE} (this target's limit)")
            key = (elem.name, int(n))            # one type per element and size: stacks of it compare equal
            if key not in self.stack_types or self.stack_types[key].elem is not elem:
                self.stack_types[key] = StackT(elem, int(n))
            return self.stack_types[key]
        if d == "tuple_type":
            args = [c for c in subtrees(t, "type_args")[0].children if isinstance(c, Tree)]
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
