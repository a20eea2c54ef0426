"""Statements: type-check and emit assignments, conditionals, switches, returns and exits."""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from p4.compiler import lower
from p4.compiler.context import CompilerContext
from p4.compiler.ir import BOOL, INFINT, VOID, E, Ref, Sym, TableInfo
from p4.compiler.syntax import name_of, nonnull, param_names, subtrees
from p4.types import (
    BitT,
    EnumT,
    ErrorT,
    ExternT,
    InfIntT,
    ListT,
    StackT,
    StructLike,
    VarbitT,
    VoidT,
    default_value,
)

GUARDED_STATEMENTS = frozenset({"assign", "var_decl", "call_stmt", "generic_method_stmt", "generic_call_stmt",
                                "type_apply_stmt", "switch_stmt"})


class Statements(CompilerContext):
    """Statement code generation inside a parser state, action or apply block."""

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

    def stmt(self, s: Tree) -> None:
        """One statement; in a control, one that uses a run-time header stack index runs inside a guard that
        takes p4c's out-of-range branch for BMv2 (its HSIndex lowering): a read on the right of ``=`` assigns
        the left side an unset value of its type (0, invalid), a write or a call does nothing, a switch is
        skipped; an ``if`` condition takes the else branch (``if_stmt``)."""
        if self.in_parser or s.data not in GUARDED_STATEMENTS:
            self.stmt_kind(s)
            return
        before = self.dyn_indexes
        got = lower.capture(self, lambda: (self.stmt_kind(s), E("None", VOID))[1])
        if self.dyn_indexes == before:
            lower.replay(self.out, got.lines)
            return
        self.out("try:")
        self.out.indent()
        lower.replay(self.out, got.lines)
        self.out.dedent()
        self.out("except _HSX:")
        self.out.indent()
        self.out_of_range_branch(s)
        self.out.dedent()

    def out_of_range_branch(self, s: Tree) -> None:
        """What a statement does when its stack index is out of range (see ``stmt``)."""
        lhs = None
        if s.data == "assign":
            lhs = s.children[0]
        elif s.data == "var_decl":
            kids = [c for c in s.children if c is not None and not (isinstance(c, Tree) and c.data == "annotation")]
            lhs = Tree("lv_name", [name_of(kids[1])], s.meta)
        if lhs is None:
            self.out("pass")
            return
        before = self.dyn_indexes
        target = lower.capture(self, lambda: self.expr(lhs))
        if self.dyn_indexes != before:      # the write itself is out of range: nothing happens
            self.out("pass")
            return
        if lhs.data == "lv_slice":
            ref, lo, w = self.slice_target(lhs)
            self.write_bits(ref, lo, w, "0")
            return
        tgt = target.e
        if tgt.ref is None:
            self.out("pass")
        elif tgt.type.scalar:
            self.out(f"{tgt.ref.src} = {default_value(tgt.type)!r}")
        else:
            self.copy(tgt.ref, self.unset_value(tgt.type))

    def unset_value(self, t: Any) -> Ref:
        """Storage of type ``t`` that nothing writes: its initial value (0, invalid headers) in every packet."""
        key = str(t)
        if key not in self.unset_refs:
            self.unset_refs[key] = self.alloc(t)
        return self.unset_refs[key]

    def stmt_kind(self, s: Tree) -> None:  # one dispatch over statement kinds
        d = s.data
        self.last_node = s
        if d == "block":
            self.stmts(s.children)
        elif d == "annotated_block":   # @atomic { ... }: one packet at a time already, so just the block
            self.stmts(subtrees(s, "block")[0].children)
        elif d == "var_decl":
            self.var_decl(s)
        elif d == "const_decl":
            t = self.resolve_type(subtrees(s, "type_ref")[0])
            e = self.expr(subtrees(s)[-1], want=t)
            self.scopes[-1][name_of(subtrees(s, "name")[0])] = Sym("const", t, value=self.const_value(e, t, s))
        elif d == "assign":
            self.assign(s.children[0], s.children[1], s)
        elif d == "call_stmt":
            e = self.call(s.children[0], nonnull(s.children[1].children), as_stmt=True)
            if e.src != "None":
                self.out(e.src)
        elif d == "type_apply_stmt":
            self.type_apply(s)
        elif d == "lookahead_stmt":     # the value is dropped; a packet too short still fails the parser
            self.expr(Tree("lookahead_expr", s.children, s.meta))
        elif d == "generic_method_stmt":
            e = self.generic_method(s, as_stmt=True)
            if e.src != "None":
                self.out(e.src)
        elif d == "generic_call_stmt":
            head = s.children[0]
            self.call_type_args = [self.resolve_type(c) for c in subtrees(head, "type_args")[0].children
                                   if isinstance(c, Tree)]
            try:
                self.call(Tree("lv_name", [head.children[0]], head.meta), nonnull(s.children[1].children),
                          as_stmt=True)
            finally:
                self.call_type_args = []
        elif d == "if_stmt":
            s = Tree("if_stmt", (list(s.children) + [None, None])[:3], s.meta)
            c = self.if_condition(s.children[0])
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
        elif d == "for_stmt":
            self.for_stmt(s)
        elif d == "for_in_stmt":
            self.for_in_stmt(s)
        elif d in ("break_stmt", "continue_stmt"):
            if not self.loop_updates:
                raise self.err(s, f"{d.split('_')[0]} is only allowed inside a for loop")
            if d == "continue_stmt":
                self.for_clauses(self.loop_updates[-1])
            self.out(d.split("_")[0])
        elif d == "exit_stmt":
            self.may_exit = True
            self.out("raise _Exit()")
        elif d == "return_stmt":
            if self.in_parser:
                raise self.err(s, "return is not allowed in a parser")
            value = s.children[0] if s.children else None
            ret_t = self.fn_ret
            if value is not None:
                if ret_t is None or isinstance(ret_t, VoidT):
                    raise self.err(s, "return with a value is only allowed in functions that return one")
                v = self.expr(value, ret_t)
                if self.fn_ret_ref is not None:      # a header/struct: into the function's return slots
                    self.store(self.fn_ret_ref, v, value)
                    self.out("return")
                    return
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

    def for_stmt(self, s: Tree) -> None:
        """``for (init; cond; update) body`` as a Python ``while`` loop; ``continue`` runs the update first."""
        inits, cond, updates, body = s.children
        self.scopes.append({})
        self.for_clauses(inits)
        self.out("while True:")
        self.out.indent()
        if cond is not None:
            c = self.if_condition(cond)
            if c.const is None:
                self.out(f"if not ({c.src}): break")
            elif not c.const:
                self.out("break")
        self.loop_updates.append(updates)
        self.stmts([body])
        self.loop_updates.pop()
        self.for_clauses(updates)
        self.out.dedent()
        self.scopes.pop()

    def for_in_stmt(self, s: Tree) -> None:
        """``for (T x in lo .. hi)``, ``for (T x in stack)``, ``for (T x in {a, b})`` as a Python ``for``: the
        collection is evaluated once before the first iteration; ``x`` is a copy (the range is inclusive, empty
        when ``hi < lo``; a stack gives each of its elements in index order, valid or not)."""
        kids = [c for c in s.children if not (isinstance(c, Tree) and c.data == "annotation")]
        tnode, name_n, coll, body = kids
        t = self.resolve_type(tnode)
        self.scopes.append({})
        ref = self.alloc(t, s)
        self.scopes[-1][name_of(name_n)] = Sym("ref", t, ref=ref)
        k = self.fresh("k")
        if coll.data == "for_range":
            if not isinstance(t, BitT):
                raise self.err(tnode, f"a range loop's variable must be bit<N>/int<N>, not {t}")
            lo, hi = (self.coerce(self.expr(c, t), t) for c in coll.children)
            for c, v in zip(coll.children, (lo, hi), strict=True):
                if v.type != t:
                    raise self.err(c, f"range bound is {v.type}, the loop variable {t}")
            a, b = self.fresh("lo"), self.fresh("hi")
            self.out(f"{a} = {lo.src}; {b} = {hi.src}")
            self.out(f"for {k} in range({a}, {b} + 1):")
            self.out.indent()
            self.store(ref, E(k, t), coll)
        else:
            c = self.expr(coll.children[0])
            if isinstance(c.type, StackT) and c.ref is not None:
                if c.type.elem is not t:
                    raise self.err(tnode, f"the loop variable is {t}, the stack's elements {c.type.elem}")
                self.out(f"for {k} in range({c.type.count}):")
                self.out.indent()
                elem = c.type.elem
                self.store(ref, E("None", elem, ref=Ref(f"{c.ref.off(1)}+{k}*{elem.size}", elem)), coll)
            elif isinstance(c.type, ListT) and isinstance(c.const, (list, tuple)):
                items = [self.coerce(i, t) for i in c.const]
                if not t.scalar or any(i.type != t for i in items):
                    raise self.err(coll, f"every element of the list must be {t}")
                self.out(f"for {k} in ({''.join(i.src + ', ' for i in items)}):")
                self.out.indent()
                self.store(ref, E(k, t), coll)
            else:
                raise self.err(coll, f"for-in needs a range lo .. hi, a header stack or a list, not {c.type}")
        self.loop_updates.append(None)
        self.stmts([body])
        self.loop_updates.pop()
        self.out("pass")
        self.out.dedent()
        self.scopes.pop()

    def for_clauses(self, clauses: Tree | None) -> None:
        """The init or update part of a ``for``: declarations, assignments and calls, in order."""
        kinds = {"for_var": "var_decl", "for_assign": "assign", "for_call": "call_stmt"}
        for c in clauses.children if clauses is not None else []:
            self.stmt(Tree(kinds[c.data], c.children, c.meta))

    def if_condition(self, n: Tree) -> E:
        """An ``if`` condition; one that uses a run-time stack index out of range is false (p4c ands each
        in-range case with the index test, so the else branch runs)."""
        before = self.dyn_indexes
        got = lower.capture(self, lambda: self.expect_bool(n))
        if self.dyn_indexes == before or self.in_parser:
            lower.replay(self.out, got.lines)
            return got.e
        v = self.fresh("hc")
        self.out("try:")
        self.out.indent()
        lower.replay(self.out, got.lines)
        self.out(f"{v} = {got.e.src}")
        self.out.dedent()
        self.out(f"except _HSX: {v} = False")
        return E(v, BOOL)

    def var_decl(self, s: Tree) -> None:
        kids = [c for c in s.children if c is not None and not (isinstance(c, Tree) and c.data == "annotation")]
        tnode, name_n = kids[0], kids[1]
        init = kids[2] if len(kids) > 2 else None
        t = self.storage_type(self.resolve_type(tnode)) if tnode.data not in ("name",) else None
        name = name_of(name_n)
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
            ref, lo, w = self.slice_target(lhs)
            v = self.expr(rhs, BitT(w))
            if not isinstance(v.type, BitT) or v.type.width != w:
                raise self.err(rhs, f"cannot assign {v.type} to a {w}-bit slice")
            self.write_bits(ref, lo, w, v.src)
            return
        target = self.expr(lhs)
        if target.ref is None:
            raise self.err(lhs, "left side of = is not assignable")
        self.assign_ref(target.ref, rhs, node)

    def slice_target(self, n: Tree) -> tuple[Ref, int, int]:
        """The bits a slice lvalue (``x[h:l]``, also a slice of a slice) denotes: (storage, low bit, width)."""
        inner = n.children[0]
        if inner.data in ("lv_slice", "slice_expr"):
            ref, base_lo, base_w = self.slice_target(inner)
        else:
            b = self.expr(inner)
            if b.ref is None or not isinstance(b.type, BitT):
                raise self.err(n, f"only a bit<N>/int<N> variable or field can be sliced on the left of =, "
                                  f"not {b.type}")
            ref, base_lo, base_w = b.ref, 0, b.type.width
        hi = self.const_value(self.expr(n.children[1]), INFINT, n).const
        lo = self.const_value(self.expr(n.children[2]), INFINT, n).const
        if not 0 <= lo <= hi < base_w:
            raise self.err(n, f"slice [{hi}:{lo}] out of range for a {base_w}-bit value (0..{base_w - 1})")
        return ref, base_lo + lo, hi - lo + 1

    def type_apply(self, s: Tree) -> None:
        """``C.apply(args)`` / ``P.apply(args)`` on a control or parser type (the spec's direct type invocation):
        an instance without constructor arguments, one per call site, named after the type as p4c names it."""
        tname = str(s.children[0])
        args = nonnull(s.children[2].children)
        n = self.direct_invocations.get(tname, 0)
        self.direct_invocations[tname] = n + 1
        full = tname if n == 0 else f"{tname}_{n}"
        if tname in self.controls:
            if self.in_parser:
                raise self.err(s, f"control {tname} cannot be applied from a parser state")
            node = self.controls[tname]
            value = (node, full, self.ctor_scope(node, [], s, f"control {tname}"))
            args = self.bind_named(args, [param_names(node)], s, f"{tname}.apply")
            self.inline_control(value, args, s)
            return
        if tname in self.parsers:
            if not self.in_parser:
                raise self.err(s, f"parser {tname} can only be applied from a parser state")
            node = self.parsers[tname]
            value = (node, full, self.ctor_scope(node, [], s, f"parser {tname}"))
            args = self.bind_named(args, [param_names(node)], s, f"{tname}.apply")
            self.subparser_call(value, args, s)
            return
        raise self.err(s, f"'{tname}' is not a control or parser type; only those can be applied directly")

    def write_bits(self, ref: Ref, lo: int, w: int, src: str) -> None:
        """Store ``src`` (a w-bit value) into bits [lo+w-1:lo] of ``ref``, leaving its other bits as they are."""
        t = ref.type
        assert isinstance(t, BitT)
        m = ((1 << w) - 1) << lo
        keep = t.mask ^ m
        bits = f"({ref.src} & {keep}) | ((({src}) << {lo}) & {m})"
        self.out(f"{ref.src} = {self.wrap(bits, t) if t.signed else bits}")

    def assign_ref(self, ref: Ref, rhs: Any, node: Any) -> None:
        self.store(ref, self.expr(rhs, ref.type), rhs)

    def store(self, ref: Ref, v: E, rhs: Any) -> None:
        """Write the compiled value ``v`` to ``ref``: a scalar, a stored value of the same type, or a list /
        struct initialiser (nested ones field by field; a header it initialises becomes valid)."""
        t = ref.type
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
                if ft.scalar:
                    item = self.coerce(item, ft)
                    if item.type != ft and not (isinstance(ft, EnumT) and item.type is ft):
                        raise self.err(kv, f"field '{fname}' is {ft}, not {item.type}")
                self.store(ref.field(fname), item, kv)
            if t.is_header:
                self.out(f"S[{ref.off(0)}] = True")
            return
        if isinstance(v.type, ListT) and isinstance(t, StructLike):
            items = v.const
            if len(items) != len(t.fields):
                raise self.err(rhs, f"{t.name} has {len(t.fields)} fields, the list has {len(items)}")
            for (fname, _), item in zip(t.fields, items, strict=True):
                self.store(ref.field(fname), item, rhs)
            if t.is_header:
                self.out(f"S[{ref.off(0)}] = True")
            return
        same = v.type is t or (isinstance(t, VarbitT) and v.type == t)  # varbit<N> types are values, not named
        if v.ref is None or not same:
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
        cases = subtrees(s, "switch_case")
        # switch (t.apply().action_run)
        if subject.data == "member_expr" and name_of(subject.children[1]) == "action_run":
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
                    an = name_of(lab)
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
        if callee.data != "member_expr" or name_of(callee.children[1]) != "apply":
            return None
        obj = self.expr(callee.children[0])
        if isinstance(obj.const, Sym) and obj.const.kind == "table":
            return obj.const.value
        return None
