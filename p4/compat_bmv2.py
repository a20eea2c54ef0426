"""``p4 check --target-compat bmv2``: what p4c's BMv2 (simple_switch) back end rejects, found on our own front end.

A pass over what ``p4.compiler`` built (its parse tree, its declarations and types), run after a program compiled.
Every check follows one restriction of the p4c sources named in its docstring (p4lang/p4c, ``backends/bmv2/...``,
``midend/...``, ``p4include/v1model.p4``); the wording of the messages is ours. p4c itself is not installed here,
so these checks are how a program that BMv2 would refuse fails our tests.

Not restrictions, so not checked: a table's hit/miss inside a larger condition (p4c first evaluates it into a
temporary: midend/tableHit.h), a switch on a plain value (midend/eliminateSwitch.h makes it a table).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lark import Token, Tree

from p4.compiler import Compiler
from p4.compiler.syntax import name_of, nonnull, subtrees
from p4.errors import CompileError
from p4.types import BitT, EnumT, StackT, StructLike

TARGETS = ("bmv2",)


class TargetCompatError(CompileError):
    """One or more constructs the target's compiler rejects; ``message``/``pos`` are the first, ``render()`` all."""

    def __init__(self, findings: list[CompileError]) -> None:
        self.findings = findings
        super().__init__(findings[0].message, findings[0].pos)

    def render(self) -> str:
        return "\n".join(CompileError.render(f) for f in self.findings)


# --------------------------------------------------------------------------------------------------------------
# the pieces of a control this pass needs, by the names declared in it
@dataclass
class _Scope:
    """A control instance: its control-plane prefix and what its body can name."""

    prefix: str
    decl: Tree
    tables: dict[str, Tree] = field(default_factory=dict)
    actions: dict[str, Tree] = field(default_factory=dict)
    functions: dict[str, Tree] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)   # local name -> extern or control type name
    packet_out: str = ""

    @classmethod
    def of(cls, decl: Tree, prefix: str) -> _Scope:
        s = cls(prefix, decl)
        for d in decl.children:
            if not isinstance(d, Tree):
                continue
            if d.data == "table_decl":
                s.tables[name_of(subtrees(d, "name")[0])] = d
            elif d.data == "action_decl":
                s.actions[name_of(subtrees(d, "name")[0])] = d
            elif d.data == "function_decl":
                s.functions[name_of(subtrees(d, "name")[0])] = d
            elif d.data == "instantiation":
                s.instances[name_of(subtrees(d, "name")[0])] = str(subtrees(subtrees(d, "type_ref")[0])[0].children[0])
        for p in subtrees(subtrees(decl, "params")[0], "param"):
            if _type_text(subtrees(p, "type_ref")[0]) == "packet_out":
                s.packet_out = name_of(subtrees(p, "name")[0])
        return s

    @property
    def body(self) -> Tree:
        return subtrees(self.decl, "block")[-1]


def _type_text(t: Tree) -> str:
    """The name a ``type_ref`` spells (``packet_in``, a struct name, ...), '' for built-in types."""
    inner = subtrees(t)[0] if subtrees(t) else t
    return str(inner.children[0]) if inner.children and isinstance(inner.children[0], Token) else ""


def _callee(s: Tree) -> tuple[str, str]:
    """(object, method) of ``obj.method(...)`` or ("", name) of ``name(...)`` for a call statement or expression."""
    head = s.children[0]
    if s.data == "generic_call_stmt":
        return "", str(head.children[0])
    if head.data in ("lv_member", "member_expr") and head.children[0].data in ("lv_name", "name_ref"):
        return str(head.children[0].children[0]), name_of(head.children[1])
    if head.data in ("lv_name", "name_ref"):
        return "", str(head.children[0])
    return "?", ""


def _args(s: Tree) -> list[Any]:
    """The argument expressions of a call (statement, expression or action reference)."""
    a = subtrees(s, "args")
    return nonnull(a[0].children) if a else []


def _statements(body: Tree) -> Iterator[Tree]:
    """Every statement of a body, nested blocks and branches included."""
    for t in body.iter_subtrees_topdown():
        if t.data in ("call_stmt", "generic_call_stmt", "assign", "if_stmt", "switch_stmt", "exit_stmt",
                      "return_stmt", "var_decl"):
            yield t


def _empty(s: Any) -> bool:
    """A statement that runs nothing (an empty block, or blocks of them)."""
    return isinstance(s, Tree) and s.data in ("block", "annotated_block") and \
        all(_empty(c) for c in s.children if isinstance(c, Tree) and c.data != "annotation")


def _is_literal_bool(e: Any) -> bool | None:
    """True/False for a ``true``/``false`` literal (p4c folds such ifs away), None for anything else."""
    if isinstance(e, Tree) and e.data in ("true_lit", "false_lit"):
        return e.data == "true_lit"
    return None


# --------------------------------------------------------------------------------------------------------------
# the control-flow graph of a pipeline control, as p4c's BMv2 back end builds it
@dataclass(eq=False)
class _Node:
    """One node of the graph; nodes compare by identity, two applies of one table by ``table``."""

    kind: str                       # table | cond | stmt | exit
    at: Any                         # tree node (position of the apply / statement)
    table: str = ""                 # control-plane name of an applied table
    succ: list[tuple[object, _Node]] = field(default_factory=list)


Live = list[tuple[_Node, object]]     # edges waiting for the next node: (from, label)


class _Cfg:
    """One node per table apply, per condition and per plain statement (p4c moves those into synthesized tables,
    backends/bmv2/simple_switch/simpleSwitch.cpp: SynthesizeActions, MoveActionsToTables; such a node is never
    shared, so one per statement or per run of statements decides the same), edges as p4c's CFGBuilder draws them
    (backends/bmv2/common/controlFlowGraph.cpp)."""

    def __init__(self, top: _Scope, c: Compiler) -> None:
        self.c = c
        self.nodes: list[_Node] = []
        self.exit = _Node("exit", None)
        self.returns: list[Live] = []
        live = self.block(top.body, [(_Node("entry", None), None)], top)
        self.link(live, self.exit)

    def link(self, live: Live, node: _Node) -> None:
        seen: set[tuple[int, object]] = set()
        for src, label in live:
            if (id(src), label) not in seen:
                seen.add((id(src), label))
                src.succ.append((label, node))

    def add(self, kind: str, at: Any, live: Live, table: str = "") -> _Node:
        n = _Node(kind, at, table)
        self.nodes.append(n)
        self.link(live, n)
        return n

    def block(self, body: Tree, live: Live, sc: _Scope) -> Live:
        for s in body.children:
            if isinstance(s, Tree):
                live = self.stmt(s, live, sc)
        return live

    def table_of(self, call: Any, sc: _Scope) -> str:
        """The applied table's name if ``call`` is ``t.apply()`` of a table of ``sc``."""
        if not (isinstance(call, Tree) and call.data in ("call_expr", "call_stmt")):
            return ""
        obj, method = _callee(call)
        return f"{sc.prefix}.{obj}" if method == "apply" and obj in sc.tables else ""

    def hidden_applies(self, e: Any, live: Live, sc: _Scope) -> Live:
        """Tables applied inside an expression: p4c evaluates each into a temporary (its own next step)."""
        if not isinstance(e, Tree):
            return live
        for t in e.iter_subtrees_topdown():
            name = self.table_of(t, sc)
            if name:
                n = self.add("table", t, live, name)
                live = [(self.add("stmt", t, [(n, None)]), None)]
        return live

    def hit_test(self, cond: Any, sc: _Scope) -> tuple[str, bool]:
        """('table', True) for ``t.apply().hit`` (False for ``.miss`` or a negation); ('', _) otherwise."""
        positive = True
        while isinstance(cond, Tree) and cond.data == "lnot":
            cond, positive = cond.children[0], not positive
        if isinstance(cond, Tree) and cond.data == "member_expr" and name_of(cond.children[1]) in ("hit", "miss"):
            name = self.table_of(cond.children[0], sc)
            if name:
                return name, positive == (name_of(cond.children[1]) == "hit")
        return "", True

    def stmt(self, s: Tree, live: Live, sc: _Scope) -> Live:  # one dispatch over statement kinds
        d = s.data
        if d == "block":
            return self.block(s, live, sc)
        if d == "annotated_block":
            return self.block(subtrees(s, "block")[0], live, sc)
        if d == "if_stmt":
            kids = (list(s.children) + [None, None])[:3]
            cond, then, other = kids
            const = _is_literal_bool(cond)
            if const is not None:
                branch = then if const else other
                return self.stmt(branch, live, sc) if branch is not None else live
            table, positive = self.hit_test(cond, sc)
            if not table and _empty(then) and (other is None or _empty(other)):
                return self.hidden_applies(cond, live, sc)      # p4c drops an if that does nothing
            if table:
                n = self.add("table", cond, live, table)
            else:
                n = self.add("cond", s, self.hidden_applies(cond, live, sc))
            out = self.stmt(then, [(n, positive)], sc)
            return out + (self.stmt(other, [(n, not positive)], sc) if other is not None else [(n, not positive)])
        if d == "switch_stmt":
            subject = s.children[0]
            table = ""
            if isinstance(subject, Tree) and subject.data == "member_expr" and \
                    name_of(subject.children[1]) == "action_run":
                table = self.table_of(subject.children[0], sc)
            n = self.add("table", subject, live, table) if table else \
                self.add("cond", s, self.hidden_applies(subject, live, sc))
            result: Live = [(n, None)]                        # no label matched
            labels: Live = []
            for case in subtrees(s, "switch_case"):
                lab = case.children[0].children[0]
                labels.append((n, "default" if isinstance(lab, Token) else name_of(lab.children[0])
                               if isinstance(lab, Tree) and lab.children else "?"))
                if case.children[1] is not None:
                    result += self.stmt(case.children[1], labels, sc)
                    labels = []
            return result
        if d == "exit_stmt":
            self.link(live, self.exit)
            return []
        if d == "return_stmt":
            if self.returns:
                self.returns[-1].extend(live)
            else:
                self.link(live, self.exit)
            return []
        if d == "call_stmt":
            table = self.table_of(s, sc)
            if table:
                return [(self.add("table", s, live, table), None)]
            obj, method = _callee(s)
            ctype = sc.instances.get(obj, "")
            if method == "apply" and ctype in self.c.controls:   # p4c inlines the control it applies
                inner = _Scope.of(self.c.controls[ctype], f"{sc.prefix}.{obj}")
                self.returns.append([])
                live = self.block(inner.body, self.hidden_applies(s, live, sc), inner)
                return live + self.returns.pop()
        if d == "var_decl" and len(nonnull([c for c in s.children if isinstance(c, Tree)
                                             and c.data != "annotation"])) < 3:
            return live                                           # a declaration alone runs nothing
        if d == "const_decl":
            return live
        return [(self.add("stmt", s, self.hidden_applies(s, live, sc)), None)]


def _same_successors(a: _Node, b: _Node) -> bool:
    """p4c's test (CFG::EdgeSet::checkSame): as many edges, each destination found in the other set, two applies of
    one table counting as the same destination."""
    def found(n: _Node, edges: list[tuple[object, _Node]]) -> bool:
        return any(m is n or (m.table and m.table == n.table) for _, m in edges)
    return len(a.succ) == len(b.succ) and all(found(n, b.succ) for _, n in a.succ) and \
        all(found(n, a.succ) for _, n in b.succ)


# --------------------------------------------------------------------------------------------------------------
class Bmv2Compat:
    """The checks, each one function over the compiled program; findings sorted by position, raised together."""

    name = "bmv2-compat"

    def run(self, c: Compiler, tree: Tree) -> None:
        self.c, self.tree = c, tree
        self.findings: list[CompileError] = []
        blocks = c.blocks
        self.scopes = {role: _Scope.of(blocks[role], name_of(subtrees(blocks[role], "name")[0]))
                       for role in ("verify", "ingress", "egress", "compute", "deparser")}
        for check in (self.tables_applied_once, self.deparser_only_emits, self.checksum_controls,
                      self.conditionals_in_actions, self.clone_and_resubmit_blocks, self.action_data_types,
                      self.headers_struct, self.table_properties, self.direct_counters_and_meters,
                      self.parser_statements):
            try:
                check()
            except RecursionError:
                raise CompileError(f"{c.prog_name}: program nests too deeply for the {self.name} check") from None
        if self.findings:
            seen: set[str] = set()
            unique = []
            for f in sorted(self.findings, key=lambda f: (f.pos.line, f.pos.col) if f.pos else (0, 0)):
                if f.render() not in seen:
                    seen.add(f.render())
                    unique.append(f)
            raise TargetCompatError(unique)

    def flag(self, node: Any, msg: str) -> None:
        self.findings.append(CompileError(f"{msg} [--target-compat bmv2]", self.c.pos(node)))

    # --- control flow ---------------------------------------------------------------------------------------
    def tables_applied_once(self) -> None:
        """p4c backends/bmv2/common/controlFlowGraph.cpp (CFG::checkImplementable): BMv2's JSON pipeline is a graph
        in which a table has one set of next tables. So no path may apply a table twice (a path from the table back
        to itself), and a table applied in several places must be followed by the same next step in each."""
        for role in ("ingress", "egress"):
            sc = self.scopes[role]
            cfg = _Cfg(sc, self.c)
            if self._table_cycles(cfg, sc):
                continue
            first: dict[str, _Node] = {}
            for n in cfg.nodes:
                if n.kind != "table":
                    continue
                if n.table not in first:
                    first[n.table] = n
                elif not _same_successors(first[n.table], n):
                    line = self.c.pos(first[n.table].at)
                    self.flag(n.at, f"table {n.table} is applied again here (first at line "
                                    f"{line.line if line else '?'}) with a different next step after it; BMv2 "
                                    f"gives each table one set of successors, so apply it in one place (e.g. "
                                    f"decide in each branch, apply once after them)")

    def _table_cycles(self, cfg: _Cfg, sc: _Scope) -> bool:
        """Depth-first from every node, the tables on the current path kept (as p4c's CFG::dfs)."""
        visited: set[int] = set()

        def dfs(n: _Node, stack: set[str]) -> bool:
            if n.kind == "table" and n.table in stack:
                self.flag(n.at, f"table {n.table} is applied twice on one path through {sc.prefix}; BMv2 applies "
                                f"a table at most once per pass through a control")
                return False
            if id(n) in visited:
                return True
            pushed = n.kind == "table"
            if pushed:
                stack.add(n.table)
            for _, m in n.succ:
                if not dfs(m, stack):
                    return False
            if pushed:
                stack.discard(n.table)
            visited.add(id(n))
            return True
        return not all(dfs(n, set()) for n in cfg.nodes)

    # --- blocks with few legal statements -------------------------------------------------------------------
    def deparser_only_emits(self) -> None:
        """p4c backends/bmv2/common/deparser.cpp (DeparserConverter) and p4include/v1model.p4 (Deparser): a BMv2
        deparser is a list of headers to emit; statements other than emit() and extern function calls, such as
        an if around an emit, are refused (an invalid header is not emitted anyway)."""
        sc = self.scopes["deparser"]
        self._deparser_block(sc.body, sc)

    def _deparser_block(self, body: Tree, sc: _Scope) -> None:
        for s in body.children:
            if not isinstance(s, Tree):
                continue
            if s.data in ("block", "annotated_block"):
                self._deparser_block(s if s.data == "block" else subtrees(s, "block")[0], sc)
                continue
            if s.data in ("exit_stmt", "return_stmt"):
                return
            if s.data == "var_decl" and len([c for c in s.children if isinstance(c, Tree)
                                             and c.data != "annotation"]) < 3:
                continue
            if s.data == "call_stmt":
                obj, method = _callee(s)
                if (obj == sc.packet_out and method == "emit") or (not obj and method in self.c.extern_funcs):
                    continue
            what = {"if_stmt": "an if", "switch_stmt": "a switch", "assign": "an assignment"}.get(s.data,
                                                                                                 "this statement")
            self.flag(s, f"{what} in the deparser: BMv2 deparsers only emit headers (an invalid header is "
                         f"skipped by emit itself); move the logic into egress")

    def checksum_controls(self) -> None:
        """p4c backends/bmv2/simple_switch/simpleSwitch.cpp (convertChecksum, EnsureExpressionIsSimple) and
        p4include/v1model.p4: the verify control may only call verify_checksum[_with_payload], the compute control
        only update_checksum[_with_payload], and their field lists hold fields and constants, no computations."""
        for role, allowed in (("verify", ("verify_checksum", "verify_checksum_with_payload")),
                              ("compute", ("update_checksum", "update_checksum_with_payload"))):
            self._checksum_block(self.scopes[role].body, role, allowed)

    def _checksum_block(self, body: Tree, role: str, allowed: tuple[str, str]) -> None:
        for s in body.children:
            if not isinstance(s, Tree):
                continue
            if s.data in ("block", "annotated_block"):
                self._checksum_block(s if s.data == "block" else subtrees(s, "block")[0], role, allowed)
                continue
            if s.data == "return_stmt":
                continue
            if s.data in ("call_stmt", "generic_call_stmt") and _callee(s)[0] == "" and _callee(s)[1] in allowed:
                args = _args(s)
                if len(args) > 1:
                    self._simple_field_list(args[1], _callee(s)[1])
                continue
            self.flag(s, f"only {allowed[0]}() and {allowed[1]}() calls may appear in the {role} checksum control "
                         f"on BMv2 (no ifs or other statements: put the condition in the call's first argument)")

    def _simple_field_list(self, e: Any, fn: str) -> bool:
        """Flags the first computation in a checksum's field list (a cast of a literal folds to a constant)."""
        if not isinstance(e, Tree):
            return True
        if e.data == "cast" and isinstance(e.children[-1], Tree) and e.children[-1].data == "int_lit":
            return True
        if e.data not in ("list_expr", "struct_expr", "kv_pair", "name", "name_ref", "member_expr", "member",
                          "index_expr", "int_lit", "type_member", "error_member"):
            self.flag(e, f"a computed value in the field list of {fn}(): BMv2 checksums take only fields and "
                         f"constants (compute it into a metadata field in ingress or egress)")
            return False
        return all(self._simple_field_list(c, fn) for c in e.children)

    # --- actions --------------------------------------------------------------------------------------------
    def _all_scopes(self, roles: tuple[str, ...] = ("ingress", "egress")) -> list[_Scope]:
        """Every control instance of these pipeline controls, nested ones included (p4c inlines them)."""
        out, todo = [], [self.scopes[r] for r in roles]
        while todo:
            sc = todo.pop()
            out.append(sc)
            for name, ctype in sc.instances.items():
                if ctype in self.c.controls:
                    todo.append(_Scope.of(self.c.controls[ctype], f"{sc.prefix}.{name}"))
        return out

    def _used_names(self) -> set[str]:
        """Names used as actions (table action lists, defaults, entries) or called anywhere: unused actions are
        dropped by p4c before the back end sees them."""
        used = {name_of(subtrees(r, "name")[0]) for r in self.tree.iter_subtrees() if r.data == "action_ref"}
        for t in self.tree.iter_subtrees():
            if t.data in ("call_stmt", "call_expr"):
                used.add(_callee(t)[1] if _callee(t)[0] == "" else "")
            elif t.data == "simple_prop" and isinstance(t.children[-1], Tree) and t.children[-1].data == "name_ref":
                used.add(str(t.children[-1].children[0]))         # default_action = name;
        return used

    def conditionals_in_actions(self) -> None:
        """p4c midend/predication.h (Predication, in the BMv2 mid end): BMv2 actions are straight-line primitives,
        so p4c turns an if in an action into conditional assignments, and refuses one that guards a call (an extern,
        a header method, an action holding one), a return or an exit."""
        used = self._used_names()
        decls = [(n, d, sc) for sc in self._all_scopes() for n, d in sc.actions.items()]
        decls += [(n, d, None) for n, d in self.c.global_actions.items()]
        for name, decl, sc in decls:
            if name in used:
                self._action_body(subtrees(decl, "block")[0], sc, 0, set())

    def _callee_body(self, s: Tree, sc: _Scope | None) -> Tree | None:
        obj, method = _callee(s)
        if obj:
            return None
        for table in ((sc.actions, sc.functions) if sc is not None else ()) + \
                     (self.c.global_actions, self.c.global_functions):
            if method in table:
                return subtrees(table[method], "block")[0]
        return None

    def _guarded_call(self, body: Tree, sc: _Scope | None, seen: set[int]) -> bool:
        """Whether a body (nested action/function bodies included) holds a call, return or exit."""
        for s in _statements(body):
            if s.data in ("exit_stmt", "return_stmt"):
                return True
            if s.data in ("call_stmt", "generic_call_stmt"):
                inner = self._callee_body(s, sc)
                if inner is None or (id(inner) not in seen and self._guarded_call(inner, sc, seen | {id(inner)})):
                    return True
        return False

    def _action_body(self, body: Tree, sc: _Scope | None, depth: int, seen: set[int]) -> None:
        for s in body.children:
            if not isinstance(s, Tree):
                continue
            if s.data in ("block", "annotated_block"):
                self._action_body(s if s.data == "block" else subtrees(s, "block")[0], sc, depth, seen)
            elif s.data == "if_stmt":
                kids = (list(s.children) + [None, None])[:3]
                const = _is_literal_bool(kids[0])
                for branch, taken in ((kids[1], const is not False), (kids[2], const is not True)):
                    if branch is not None and taken:
                        self._action_body(Tree("block", [branch]), sc, depth + (const is None), seen)
            elif depth and s.data in ("exit_stmt", "return_stmt"):
                self.flag(s, f"{'exit' if s.data == 'exit_stmt' else 'return'} under an if inside an action: "
                             f"BMv2 actions cannot branch (p4c only makes assignments conditional); move the if "
                             f"into the control's apply block")
            elif depth and s.data in ("call_stmt", "generic_call_stmt"):
                inner = self._callee_body(s, sc)
                if inner is None or self._guarded_call(inner, sc, seen | {id(inner)}):
                    self.flag(s, "a call under an if inside an action: BMv2 actions cannot branch (p4c only "
                                 "makes assignments conditional); move the if into the control's apply block or "
                                 "split the action")

    def clone_and_resubmit_blocks(self) -> None:
        """p4c backends/bmv2/simple_switch/simpleSwitch.cpp (ExternConverter_clone, ..._resubmit_preserving_field_list,
        ..._recirculate_preserving_field_list): clone I2E only in ingress, clone E2E only in egress, resubmit only in
        ingress, recirculate only in egress (actions count where they are declared)."""
        for role, wrong, rule in (
                ("ingress", ("E2E", "recirculate_preserving_field_list"), "clone(E2E) and recirculate only in egress"),
                ("egress", ("I2E", "resubmit_preserving_field_list"), "clone(I2E) and resubmit only in ingress")):
            for sc in self._all_scopes((role,)):
                for s in _statements(sc.decl):
                    if s.data != "call_stmt" or _callee(s)[0]:
                        continue
                    fn, args = _callee(s)[1], _args(s)
                    kind = ""
                    if fn in ("clone", "clone_preserving_field_list", "clone3") and args and \
                            isinstance(args[0], Tree) and args[0].data == "type_member":
                        kind = name_of(args[0].children[1])
                    if kind in wrong or fn in wrong:
                        self.flag(s, f"{fn}({kind + ', ...' if kind else '...'}) in {role}: BMv2 accepts {rule}")

    def action_data_types(self) -> None:
        """p4c backends/bmv2/common/action.cpp (convertActionParams): an action's directionless parameters (its
        action data) must be bit<N> or int<N> (or an enum) on BMv2; bool, structs or headers are refused."""
        used = self._used_names()
        for sc in self._all_scopes():
            for aname, decl in sc.actions.items():
                if aname not in used:
                    continue
                for p in subtrees(subtrees(decl, "params")[0], "param"):
                    dirn = p.children[len(subtrees(p, "annotation"))]
                    if dirn is not None:
                        continue
                    try:
                        t = self.c.resolve_type(subtrees(p, "type_ref")[0])
                    except CompileError:
                        continue
                    if not isinstance(t, (BitT, EnumT)):
                        self.flag(p, f"action data '{name_of(subtrees(p, 'name')[0])}' of {aname} is {t}: BMv2 takes "
                                     f"only bit<N> or int<N> action data (use bit<1> for a flag)")

    def headers_struct(self) -> None:
        """p4c backends/bmv2/simple_switch/simpleSwitch.cpp (convert) and p4include/v1model.p4 (Parser): the
        parser's headers argument must be a struct of headers, header stacks or header unions only."""
        htype = self.c.hdr_ref.type
        if not isinstance(htype, StructLike):
            return
        decl = next((d for d in self.tree.children if isinstance(d, Tree) and d.data == "struct_decl"
                     and name_of(subtrees(d, "name")[0]) == htype.name), None)
        for fname, ft in htype.fields:
            ok = isinstance(ft, StackT) or (isinstance(ft, StructLike) and (ft.is_header or ft.kind == "header_union"))
            if not ok:
                at = next((f for f in subtrees(decl, "field") if name_of(subtrees(f, "name")[0]) == fname), decl) \
                    if decl is not None else None
                self.flag(at, f"field '{fname}' of the headers struct {htype.name} is {ft}: BMv2 takes only "
                              f"headers, header stacks and header unions there (put other values in metadata)")

    def table_properties(self) -> None:
        """p4c backends/bmv2/common/control.h (ControlConverter::convertTable): at most one lpm key per table, and
        no arguments bound in a table's action list; midend/validateProperties.h as the BMv2 mid end configures it
        (backends/bmv2/common/midend.cpp): v1model tables take no properties beyond key, actions, default_action,
        entries, implementation, size, counters, meters and support_timeout."""
        legal = {"key", "actions", "default_action", "entries", "implementation", "size", "counters", "meters",
                 "support_timeout"}
        for sc in self._all_scopes():
            for tname, decl in sc.tables.items():
                for prop in subtrees(decl, "simple_prop"):
                    pname = name_of(subtrees(prop, "name")[0])
                    if pname not in legal:
                        self.flag(prop, f"table property '{pname}' of {sc.prefix}.{tname}: p4c's BMv2 back end "
                                        f"knows only {', '.join(sorted(legal))}")
                lpm = [k for p in subtrees(decl, "key_prop") for k in subtrees(p, "key_elem")
                       if name_of(subtrees(k, "name")[0]) == "lpm"]
                if len(lpm) > 1:
                    self.flag(lpm[1], f"table {sc.prefix}.{tname} has {len(lpm)} lpm keys: BMv2 tables take at "
                                      f"most one (make the others ternary)")
                for p in subtrees(decl, "actions_prop"):
                    for item in subtrees(p, "action_ref_item"):
                        ref = subtrees(item, "action_ref")[0]
                        if _args(ref):
                            self.flag(ref, f"action {name_of(subtrees(ref, 'name')[0])} is listed with arguments in "
                                           f"table {sc.prefix}.{tname}: BMv2 takes only action names there")


    def direct_counters_and_meters(self) -> None:
        """p4c backends/bmv2/common/control.h (convertTable: 'counters') and simple_switch/simpleSwitch.cpp
        (ExternConverter_direct_meter): a direct counter belongs to one table only, and a direct meter that an action
        reads must be attached to a table by its 'meters' property."""
        for sc in self._all_scopes():
            owner: dict[str, tuple[str, str]] = {}
            for tname, decl in sc.tables.items():
                for prop in subtrees(decl, "simple_prop"):
                    pname, value = name_of(subtrees(prop, "name")[0]), prop.children[-1]
                    if not (isinstance(value, Tree) and value.data == "name_ref"):
                        continue
                    ref = str(value.children[0])
                    if pname == "counters" and sc.instances.get(ref) == "direct_counter":
                        if ref in owner and owner[ref][0] == "counters":
                            self.flag(prop, f"direct counter {ref} is already the counters of table "
                                            f"{sc.prefix}.{owner[ref][1]}: on BMv2 a direct counter belongs to one "
                                            f"table (declare one per table)")
                        owner.setdefault(ref, (pname, tname))
                    elif pname == "meters":
                        owner.setdefault(ref, (pname, tname))
            for d in subtrees(sc.decl, "instantiation"):
                name = name_of(subtrees(d, "name")[0])
                if sc.instances.get(name) != "direct_meter" or name in owner:
                    continue
                if any(_callee(s) == (name, "read") for s in _statements(sc.decl) if s.data == "call_stmt"):
                    self.flag(d, f"direct meter {name} is read but no table has it as 'meters': BMv2 needs the "
                                 f"table it meters (add 'meters = {name};' to that table)")

    def parser_statements(self) -> None:
        """p4c backends/bmv2/common/parser.cpp (convertParserStatement): a BMv2 parser state runs assignments,
        extract/lookahead/advance, verify/assert/assume/log_msg and header validity or stack operations; any
        other extern call (hash, random, counters, registers, mark_to_drop, ...) is refused there."""
        decl = self.c.blocks["parser"]
        pkt = ""
        for prm in subtrees(subtrees(decl, "params")[0], "param"):
            if _type_text(subtrees(prm, "type_ref")[0]) == "packet_in":
                pkt = name_of(subtrees(prm, "name")[0])
        for state in subtrees(decl, "parser_state"):
            for s in _statements(state):
                if s.data not in ("call_stmt", "generic_call_stmt"):
                    continue
                head = s.children[0]
                method = name_of(head.children[1]) if head.data == "lv_member" else _callee(s)[1]
                obj = _callee(s)[0]
                if (obj == pkt and method in ("extract", "lookahead", "advance")) or \
                        (head.data == "lv_member" and obj != pkt and
                         method in ("setValid", "setInvalid", "push_front", "pop_front")) or \
                        (not obj and method in ("verify", "assert", "assume", "log_msg")) or \
                        (not obj and method in self.c.global_functions):
                    continue
                self.flag(s, f"{method}() in a parser state: BMv2 parsers only extract, assign, verify and set "
                             f"headers valid; call it in ingress instead")


def check_pass(target: str) -> Bmv2Compat:
    """The compatibility pass for ``--target-compat TARGET`` (only 'bmv2' today)."""
    if target not in TARGETS:
        raise CompileError(f"--target-compat {target}: allowed {', '.join(TARGETS)}")
    return Bmv2Compat()
