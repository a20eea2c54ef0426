"""Parser states: inline acyclic state graphs, or a state loop bounded by ``MAX_PARSER_STEPS``."""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from p4.compiler.context import CompilerContext
from p4.compiler.ir import E, Emitter, Ref, Sym
from p4.compiler.limits import (
    MAX_PARSER_STEPS,
)
from p4.compiler.syntax import name_of, subtrees
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    ErrorT,
    ExternT,
    default_value,
)


class _TooBig(Exception):
    """Inlining the parser states would generate too much code: use the state loop instead."""


class ParserStates(CompilerContext):
    """Code generation of a parser's states and transitions."""

    # --- parser -------------------------------------------------------------------------------------------
    def compile_parser(self, node: Tree, scope: dict[str, Sym]) -> None:
        self.in_parser = True
        self.parser_name = name_of(subtrees(node, "name")[0])
        states = {name_of(subtrees(s, "name")[0]): s for s in subtrees(node, "parser_state")}
        if "start" not in states:
            raise self.err(node, "parser has no 'start' state")
        ids = {name: i for i, name in enumerate(states)}
        self.scopes = [scope]
        deferred = self.parser_locals(node, scope)
        self.parser_states = states
        if self._acyclic(states):
            saved = self.out
            self.out = Emitter()
            self.out.level = 2
            self.inline_budget = 4000
            try:
                self.run_deferred_inits(deferred)
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
        out = self.out
        out("def _parser(S, pkt):")
        out.indent()
        out("o = 0; n = len(pkt)")
        self.state_loop(states, ids, deferred)
        out("except _PE as exc:")
        out("    return o, exc.code")
        out.dedent()
        self.in_parser = False

    def parser_locals(self, node: Tree, scope: dict[str, Sym]) -> list[tuple[Ref, Tree]]:
        """Declare a parser's locals into ``scope``; returns the variables with non-constant initialisers."""
        deferred: list[tuple[Ref, Tree]] = []
        for d in node.children:
            if isinstance(d, Tree) and d.data == "value_set_decl":
                self.value_set(d, scope)
                continue
            if isinstance(d, Tree) and d.data in ("var_decl", "const_decl", "instantiation"):
                if d.data == "instantiation":
                    self.instantiate(d, "", scope)
                elif d.data == "var_decl":
                    self.var_decl_into(d, scope, deferred)
                else:
                    t = self.resolve_type(subtrees(d, "type_ref")[0])
                    e = self.expr(subtrees(d)[-1], want=t)
                    scope[name_of(subtrees(d, "name")[0])] = Sym("const", t, value=self.const_value(e, t, d))
        return deferred

    def state_loop(self, states: dict[str, Tree], ids: dict[str, int], deferred: list[tuple[Ref, Tree]]) -> None:
        """Emit ``try:`` and the bounded loop over ``states`` (accept returns ``o, 0``); the caller emits the
        ``except _PE`` handler."""
        if "ParserTimeout" not in self.errors:
            self.errors.append("ParserTimeout")
        out = self.out
        out("st = 0; steps = 0")
        out("try:")
        out.indent()
        self.run_deferred_inits(deferred)
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
            self.scopes.append({})          # the state's locals are in scope in its select expression too
            self.state_stmts(stmts)
            trans = [c for c in s.children if isinstance(c, Tree) and c.data in ("trans_direct", "trans_select")]
            if not trans:
                out(f"raise _PE({self.errors.index('NoError')})  # no transition: reject")
            else:
                self.transition(trans[0], ids)
            self.scopes.pop()
            out.dedent()
        out.dedent()
        out.dedent()

    def subparser_call(self, value: tuple[Tree, str], args: list, node: Any) -> None:
        """``sub.apply(pkt, ...)`` of a parser instance: its states run as their own function from ``o``;
        in/inout arguments are copied in, out/inout ones copied back when it accepts; its reject (or any parser
        error) is the caller's."""
        pnode, full, ctor = value
        params = subtrees(subtrees(pnode, "params")[0], "param")
        if len(params) != len(args):
            raise self.err(node, f"parser {full} apply takes {len(params)} arguments, got {len(args)}")
        fn, slots = self.subparser_fn(pnode, full, ctor)
        copy_back: list[tuple[Ref, Ref]] = []
        for p, a in zip(params, args, strict=True):
            dirn = p.children[len(subtrees(p, "annotation"))]
            direction = str(dirn.children[0]) if dirn is not None else ""
            pname = name_of(subtrees(p, "name")[0])
            slot = slots[pname]
            if slot is None:
                e = self.expr(a)
                if not (isinstance(e.const, Sym) and e.const.kind == "packet_in"):
                    raise self.err(a, f"argument for '{pname}' must be the parser's packet_in")
                continue
            if direction == "out":
                if slot.type.scalar:
                    self.out(f"{slot.src} = {default_value(slot.type)!r}")
                else:
                    self.out(f"S[{slot.base}:{slot.base + slot.type.size}] = "
                             f"_INIT[{slot.base}:{slot.base + slot.type.size}]")
            else:
                self.assign_ref(slot, a, a)
            if direction in ("out", "inout"):
                tgt = self.expr(a)
                if tgt.ref is None or tgt.type != slot.type:
                    raise self.err(a, f"argument for {direction} parameter '{pname}' must be a writable "
                                      f"{slot.type}")
                copy_back.append((tgt.ref, slot))
        self.out("try:")
        self.out(f"    o, _ = {fn}(S, pkt, o, n)")
        self.out("except _PE as exc:")
        self.out("    o = exc.o")
        self.out("    raise")
        self.copy_out(copy_back)

    def subparser_fn(self, pnode: Tree, full: str, ctor: dict[str, Sym]) -> tuple[str, dict[str, Ref | None]]:
        """The function of one parser instance (compiled on its first apply): ``fn(S, pkt, o, n) -> (o, 0)``,
        its parameters' slots (None for packet_in); ``ctor``: its constructor arguments (constants)."""
        if full in self.subparsers:
            return self.subparsers[full]
        fn = self.fresh("p_" + full.replace(".", "_"))
        scope: dict[str, Sym] = dict(ctor)
        slots: dict[str, Ref | None] = {}
        for p in subtrees(subtrees(pnode, "params")[0], "param"):
            pname = name_of(subtrees(p, "name")[0])
            t = self.resolve_type(subtrees(p, "type_ref")[0])
            if isinstance(t, ExternT) and t.name == "packet_in":
                scope[pname], slots[pname] = Sym("packet_in"), None
            elif isinstance(t, ExternT):
                raise self.err(p, f"sub-parser parameter '{pname}' of type {t} is not supported")
            else:
                slots[pname] = self.alloc(t, p)
                scope[pname] = Sym("ref", t, ref=slots[pname])
        self.subparsers[full] = (fn, slots)
        states = {name_of(subtrees(s, "name")[0]): s for s in subtrees(pnode, "parser_state")}
        if "start" not in states:
            raise self.err(pnode, "parser has no 'start' state")
        ids = {name: i for i, name in enumerate(states)}
        saved = (self.out, self.scopes, self.parser_states, self.parser_name)
        self.parser_name = f"{self.parser_name}.{full}"   # its value sets are named inside the instance
        self.out = Emitter()
        self.scopes = [scope]
        first = len(self.init)
        deferred = self.parser_locals(pnode, scope)
        self.out(f"def {fn}(S, pkt, o, n):")
        self.out.indent()
        if len(self.init) > first:                     # its locals start afresh on every apply
            self.out(f"S[{first}:{len(self.init)}] = _INIT[{first}:{len(self.init)}]")
        self.state_loop(states, ids, deferred)
        self.out("except _PE as exc:")
        self.out("    exc.o = o")
        self.out("    raise")
        self.pending_functions.append(self.out.lines)
        self.out, self.scopes, self.parser_states, self.parser_name = saved
        return fn, slots

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
            pos = self.pos(subtrees(states[start], "name")[0])
            self.warnings.append(f"{pos}: warning: parser state '{start}' can loop ({path}) without extracting or "
                                 f"advancing; a packet that keeps looping stops after {MAX_PARSER_STEPS} states "
                                 "with error.ParserTimeout")

    @staticmethod
    def _successors(st: Tree) -> set[str]:
        out = set()
        for t in st.iter_subtrees():
            if t.data in ("trans_direct", "select_case"):
                out.add(name_of(t.children[-1] if t.data == "select_case" else t.children[0]))
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
        succ = {name: ParserStates._successors(st) & set(states) for name, st in states.items()}
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
        self.scopes.append({})
        self.state_stmts(stmts)
        trans = [c for c in s.children if isinstance(c, Tree) and c.data in ("trans_direct", "trans_select")]
        if len(self.out.lines) > self.inline_budget:
            raise _TooBig()
        if not trans:
            self.out(f"raise _PE({self.errors.index('NoError')})  # no transition: reject")
        else:
            self.transition(trans[0], ids, inline=True)
        self.scopes.pop()

    def state_stmts(self, stmts: list[Any]) -> None:
        """A state's statements in the scope the caller opened, so that its transition's select expression
        sees the locals they declare (``bit<8> left = ...; transition select(left)``)."""
        start = len(self.out.lines)
        for st in stmts:
            self.stmt(st)
        if len(self.out.lines) == start:
            self.out("pass")

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
            g = self.goto(name_of(t.children[0]), ids, t, inline)
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
        for case in subtrees(sel, "select_case"):
            ks, target = case.children[0], name_of(case.children[1])
            items = subtrees(ks) if ks.data == "tuple_keyset" else [ks]
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
