"""A control's local declarations: variables, extern instances, tables, action profiles, value sets."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4 import algorithms
from p4.compiler import lower
from p4.compiler.context import CompilerContext
from p4.compiler.ir import INFINT, ActionInfo, E, Emitter, Ref, Sym, TableInfo
from p4.compiler.limits import (
    MAX_EXTERN_ENTRIES,
)
from p4.compiler.syntax import annotations_of, name_of, nonnull, subtrees, token_of
from p4.externs import Counter, Meter, Register
from p4.tables import ActionProfile, ActionSpec, KeySpec, Table, ValueSet
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    ErrorT,
    StructLike,
)

# v1model's extern constructors this target instantiates: their parameter names, in order (register's second,
# initial_value, is optional)
EXTERN_CTOR_PARAMS: dict[str, tuple[str, ...]] = {
    "register": ("size", "initial_value"), "counter": ("size", "type"), "direct_counter": ("type",),
    "meter": ("size", "type"), "direct_meter": ("type",), "Checksum16": (), "action_profile": ("size",),
    "action_selector": ("algorithm", "size", "outputWidth")}


class ControlDeclarations(CompilerContext):
    """Locals of a control: instances, tables (keys, actions, const entries)."""

    # --- controls -----------------------------------------------------------------------------------------
    def control_locals(self, node: Tree, prefix: str, scope: dict[str, Sym]) -> list[tuple[Ref, Tree]]:
        """Declare a control's locals into ``scope``; returns the variables whose initialisers are not constants
        (the caller evaluates them, in order, each time the control is applied)."""
        self._every_scope.append(scope)
        deferred: list[tuple[Ref, Tree]] = []
        for d in node.children:
            if not isinstance(d, Tree):
                continue
            if d.data == "var_decl":
                self.scopes.append(scope)
                self.var_decl_into(d, scope, deferred)
                self.scopes.pop()
            elif d.data == "const_decl":
                self.scopes.append(scope)
                t = self.resolve_type(subtrees(d, "type_ref")[0])
                e = self.expr(subtrees(d)[-1], want=t)
                scope[name_of(subtrees(d, "name")[0])] = Sym("const", t, value=self.const_value(e, t, d))
                self.scopes.pop()
            elif d.data == "instantiation":
                self.scopes.append(scope)
                self.instantiate(d, prefix, scope)
                self.scopes.pop()
            elif d.data == "action_decl":
                aname = name_of(subtrees(d, "name")[0])
                full_name = f"{prefix}.{aname}" if prefix else aname
                anns = annotations_of(d)
                if anns.get("name"):
                    # @name("x") is relative to the control, @name(".x") global - as p4c names it for BMv2
                    given = str(anns["name"][0])
                    full_name = given[1:] if given.startswith(".") else (f"{prefix}.{given}" if prefix else given)
                info = ActionInfo(full_name, d, prefix)
                self.control_plane.annotations[full_name] = anns
                scope[aname] = Sym("action", value=info)
                self.scopes.append(scope)
                self.compile_action(info)
                self.scopes.pop()
            elif d.data == "table_decl":
                self.scopes.append(scope)
                self.table(d, prefix, scope)
                self.scopes.pop()
            elif d.data == "function_decl":
                fname = name_of(subtrees(d, "name")[0])
                info = ActionInfo(f"{prefix}.{fname}" if prefix else fname, d, prefix)
                scope[fname] = Sym("function", value=info)
                self.scopes.append(scope)
                self.compile_action(info, function=True)
                self.scopes.pop()
        return deferred

    def var_decl_into(self, d: Tree, scope: dict[str, Sym], deferred: list[tuple[Ref, Tree]]) -> None:
        """A control/parser-level variable: a constant initialiser goes into the initial state, any other
        initialiser into ``deferred`` (evaluated per packet when the block runs, as the spec orders)."""
        kids = [c for c in d.children if c is not None and not (isinstance(c, Tree) and c.data == "annotation")]
        t = self.storage_type(self.resolve_type(kids[0]))
        name = name_of(kids[1])
        ref = self.alloc(t, d)
        if len(kids) > 2:
            got = lower.capture(self, lambda: self.expr(kids[2], t))
            if got.e.const is not None and t.scalar and not got.lines:
                self.init[ref.base] = self.coerce(got.e, t).const
            else:
                deferred.append((ref, kids[2]))
        scope[name] = Sym("ref", t, ref=ref)

    def bind_extern_ctor(self, tname: str, args: list, node: Tree) -> list:
        """An extern instance's constructor arguments in parameter order; named ones (``register<..>(size =
        4)``) by v1model's parameter names."""
        named = [a for a in args if isinstance(a, Tree) and a.data == "named_arg"]
        if not named:
            return args
        names = EXTERN_CTOR_PARAMS.get(tname)
        if names is None:
            raise self.err(node, f"{tname}: named constructor arguments are not supported for this extern")
        if len(named) != len(args):
            raise self.err(node, f"{tname}: either all constructor arguments are named or none is")
        given = {str(a.children[0]): a.children[1] for a in named}
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise self.err(node, f"{tname} has no constructor parameter {', '.join(unknown)} (its parameters: "
                                 f"{', '.join(names) or 'none'})")
        missing = [n for n in names[:len(given)] if n not in given]
        if missing:
            raise self.err(node, f"{tname}: constructor argument '{missing[0]}' is missing")
        return [given[n] for n in names[:len(given)]]

    def instance_arg(self, arg: Any) -> Sym | None:
        """The instance a constructor argument names (a plain name bound to a control, parser or extern instance),
        else None."""
        if not (isinstance(arg, Tree) and arg.data == "name_ref"):
            return None
        name = name_of(arg)
        for sc in reversed(self.scopes):
            if name in sc:
                sym = sc[name]
                return sym if sym.kind in ("control", "parser", "extern") else None
        return None

    def ctor_scope(self, decl: Tree, args: list, node: Tree, what: str) -> dict[str, Sym]:
        """A parser's or control's constructor parameters bound to an instance's arguments (positional or named,
        defaults for the rest): compile-time constants in the instance's scope."""
        ctor = subtrees(decl, "ctor_params")
        params = subtrees(subtrees(ctor[0], "params")[0], "param") if ctor else []
        names = [name_of(subtrees(p, "name")[0]) for p in params]
        named = [a for a in args if isinstance(a, Tree) and a.data == "named_arg"]
        if named and len(named) != len(args):
            raise self.err(node, f"{what}: either all constructor arguments are named or none is")
        if len(args) > len(names):
            raise self.err(node, f"{what} takes {len(names)} constructor argument(s), got {len(args)}")
        given = {str(a.children[0]): a.children[1] for a in named} if named else dict(zip(names, args, strict=False))
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise self.err(node, f"{what} has no constructor parameter {', '.join(unknown)} (its parameters: "
                                 f"{', '.join(names) or 'none'})")
        scope: dict[str, Sym] = {}
        for p, pname in zip(params, names, strict=True):
            last = p.children[-1]
            default = last if isinstance(last, Tree) and last.data != "name" else None
            arg = given.get(pname, default)
            if arg is None:
                raise self.err(node, f"{what}: constructor argument '{pname}' is missing")
            inst = self.instance_arg(arg)
            if inst is not None:    # a control/parser/extern instance passed in (``C2(c1) c2;``): the same instance
                scope[pname] = inst
                continue
            t = self.resolve_type(subtrees(p, "type_ref")[0])
            scope[pname] = Sym("const", t, value=self.const_value(self.expr(arg, t), t, arg))
        return scope

    def run_deferred_inits(self, deferred: list[tuple[Ref, Tree]]) -> None:
        """Emit the non-constant initialisers of a block's variables, in declaration order."""
        for ref, init in deferred:
            self.assign_ref(ref, init, init)

    def instantiate(self, d: Tree, prefix: str, scope: dict[str, Sym]) -> None:
        tref = subtrees(d, "type_ref")[0]
        inner = subtrees(tref)[0]
        tname = str(inner.children[0])
        targs = []
        if inner.data == "spec_type":
            targs = [self.resolve_type(c) for c in subtrees(inner, "type_args")[0].children if isinstance(c, Tree)]
        name = name_of(subtrees(d, "name")[0])
        args = nonnull(subtrees(d, "args")[0].children)
        full = f"{prefix}.{name}" if prefix else name
        anns = annotations_of(d)
        if "name" in anns and anns["name"]:
            full = str(anns["name"][0]).lstrip(".")
        var = self.fresh("x_" + name)
        self.control_plane.annotations[full] = anns
        if tname in self.controls:
            node = self.controls[tname]
            scope[name] = Sym("control", value=(node, full, self.ctor_scope(node, args, d, f"control {tname}")))
            return
        if tname in self.parsers:
            if not self.in_parser:
                raise self.err(d, f"parser {tname} can only be instantiated inside a parser")
            node = self.parsers[tname]
            scope[name] = Sym("parser", value=(node, full, self.ctor_scope(node, args, d, f"parser {tname}")))
            return
        cargs = [self.expr(a) for a in self.bind_extern_ctor(tname, args, d)]

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
        names = EXTERN_CTOR_PARAMS.get(tname)
        want_args = None if names is None else (1, 2) if tname == "register" else (len(names),)
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
        tname = name_of(subtrees(d, "name")[0])
        full = f"{prefix}.{tname}" if prefix else tname
        anns = annotations_of(d)
        if "name" in anns and anns["name"]:
            given = str(anns["name"][0])
            full = given[1:] if given.startswith(".") else (f"{prefix}.{given}" if prefix else given)
        self.control_plane.annotations[full] = anns
        keys: list[KeySpec] = []
        key_srcs: list[str] = []
        actions: dict[str, ActionSpec] = {}
        action_infos: list[tuple[ActionInfo, dict, list]] = []
        size, default, const_default = 1024, None, False
        entries_node = None
        dc = dm = None
        sel_terms: list[tuple[str, int, str]] = []
        profile = None
        for p in d.children:
            if not isinstance(p, Tree):
                continue
            if p.data == "key_prop":
                for ke in subtrees(p, "key_elem"):
                    e = self.expr(ke.children[0])
                    mk = name_of(ke.children[1])
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
                    kanns = annotations_of(ke)
                    kname = str(kanns["name"][0]) if "name" in kanns else self.key_text(ke.children[0])
                    if isinstance(e.type, EnumT) and e.type.base is not None:     # P4Info type_name + type_info
                        self.control_plane.type_names[(full, kname)] = e.type.name
                        self.control_plane.ser_enums[e.type.name] = (e.type.base.width, list(e.type.members.items()))
                    keys.append(KeySpec(kname, mk, w))
                    key_srcs.append(src)
            elif p.data == "actions_prop":
                for item in subtrees(p, "action_ref_item"):
                    iann = annotations_of(item)
                    aref = subtrees(item, "action_ref")[0]
                    an = name_of(aref.children[0])
                    sym = self.lookup(an, aref)
                    if sym.kind != "action":
                        raise self.err(aref, f"'{an}' is not an action")
                    info: ActionInfo = sym.value
                    bound = nonnull(aref.children[1].children) if aref.children[1] is not None else []
                    dir_names = [pn for d, _, pn, _ in info.params if d != ""]
                    bound = self.bind_named(bound, [dir_names], aref, f"action {info.name}")
                    if len(bound) != len(dir_names):
                        raise self.err(aref, f"action {info.name} has {len(dir_names)} directional parameter(s)"
                                             f"{' (' + ', '.join(dir_names) + ')' if dir_names else ''}: the "
                                             f"actions list binds {len(bound)} argument(s)")
                    action_infos.append((info, iann, bound))
            elif p.data == "entries_prop":
                entries_node = p
            elif p.data == "simple_prop":
                pname = name_of(subtrees(p, "name")[0])
                is_const = token_of(p, "CONST") is not None
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
                    given = annotations_of(p).get("name")     # @name("ap") implementation = ...: as p4c
                    profile = self.table_profile(val, full, scope, str(given[0]).lstrip(".") if given else None)
                elif pname == "support_timeout":
                    if self.expr(val).const:
                        self.control_plane.timeout_tables.add(full)
                elif pname == "max_group_size":
                    pass
                else:
                    raise self.err(p, f"unknown table property '{pname}'")
        action_index: dict[str, int] = {}
        for i, (info, iann, bound) in enumerate(action_infos):
            self.control_plane.action_ref_annotations[(full, info.name)] = iann
            base = info.spec
            assert base is not None, info.name          # compile_action ran for every action a table lists
            decl_ann = annotations_of(info.node)
            spec = ActionSpec(base.name, None, base.params, i, "defaultonly" in iann or "defaultonly" in decl_ann,
                              "tableonly" in iann or "tableonly" in decl_ann,
                              self.table_bound_action(info, bound, d) if bound else None)
            self.bound_args[(full, info.name)] = len(bound)
            actions[info.name] = spec
            action_index[info.name] = i
        fn_name = self.fresh("t_" + full.replace(".", "_"))
        table = Table(full, keys, actions, size)
        if sel_terms and (profile is None or profile.algo is None):
            raise self.err(d, f"table {full} has selector keys but no action_selector implementation")
        table.profile = profile
        table.support_timeout = full in self.control_plane.timeout_tables
        if profile is not None:
            profile.tables.append(table)
        if dc is not None:
            table.direct_counter = dc.value["obj"]
        if dm is not None:
            table.direct_meter = dm.value["obj"]
        self.tables[full] = table
        tinfo = TableInfo(full, fn_name, table, action_index,
                          {name_of(subtrees(info.node, "name")[0]): i for i, (info, _, _) in enumerate(action_infos)})
        scope[tname] = Sym("table", value=tinfo)
        # default action
        if default is None:
            noact = self.find_action(actions, "NoAction")
            if noact is None:
                noact = self.global_action("NoAction").spec if "NoAction" in self.global_actions else None
                if noact is not None:
                    if noact.name not in actions:       # not in the table's list: absent from its P4Info
                        self.control_plane.implicit_actions[full] = noact.name
                    actions.setdefault(noact.name, ActionSpec(noact.name, None, [], len(actions)))
                    noact = actions[noact.name]
            table.default_action, table.default_data = noact, ()
        else:
            spec, data = self.action_call_const(default, actions, full)
            table.default_action, table.default_data = spec, data
        table.const_default = const_default
        table.initial_default = (table.default_action, table.default_data)
        if entries_node is not None:
            table.const_entries = token_of(entries_node, "CONST") is not None
            self.const_entries(entries_node, table, actions)
        # generate the apply function
        em = Emitter()
        em(f"def {fn_name}(S):")
        em.indent()
        for j, src in enumerate(key_srcs):
            if "_hx(" in src:                  # a key read out of a stack at a run-time index: 0 when out of
                em(f"try: k{j} = {src}")       # range (p4c moves such a key into a temporary first)
                em(f"except _HSX: k{j} = 0")
                key_srcs[j] = f"k{j}"
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
        if table.support_timeout:
            em("e.last_hit_us = _now_us(); e.idle_notified = False")
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

    def table_bound_action(self, info: ActionInfo, bound: list, node: Any) -> str:
        """``act(hdr.x)`` in a table's actions list: a function of the action data that copies the bound
        arguments in, runs the action and copies out/inout ones back (as a direct call would)."""
        fn = self.fresh("b_" + info.name.replace(".", "_"))
        scope: dict[str, Sym] = {}
        args: list = []
        data: list[str] = []
        given = iter(bound)
        for i, (direction, t, _pname, _sym) in enumerate(info.params):
            if direction:
                args.append(next(given))
                continue
            key = f"$data{i}"                   # not a P4 identifier: it cannot clash with a program's name
            scope[key] = Sym("py", t, value=f"d{i}")
            data.append(f"d{i}")
            args.append(Tree("name_ref", [key], getattr(node, "meta", None)))
        saved_out, saved_exits = self.out, self.may_exit
        self.out = Emitter()
        self.out(f"def {fn}(S{''.join(', ' + d for d in data)}):")
        self.out.indent()
        self.scopes.append(scope)
        try:
            self.direct_action_call(info, args, node)
        finally:
            self.scopes.pop()
        self.pending_functions.append(self.out.lines)
        self.out, self.may_exit = saved_out, saved_exits
        return fn

    def table_profile(self, val: Tree, table: str, scope: dict[str, Sym], name: str | None = None) -> ActionProfile:
        """``implementation = action_selector(...)`` (inline, named ``name`` or ``<table>_profile``) or the name
        of an action_profile/selector."""
        if val.data == "ctor_expr":
            kind = str(val.children[0])
            args = [self.expr(a) for a in nonnull(val.children[2].children)]
            return self.make_profile(kind, args, name or f"{table}_profile", val)
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
            return f"{self.key_text(n.children[0])}.{name_of(n.children[1])}"
        if n.data == "call_expr":
            return self.key_text(n.children[0]) + "()"
        if n.data in ("index_expr", "slice_expr"):     # p4c's key names: hdr.s[1].f, hdr.ipv4.dstAddr[31:16]
            bounds = [self.expr(c).const for c in n.children[1:]]
            if all(isinstance(b, int) for b in bounds):
                return f"{self.key_text(n.children[0])}[{':'.join(str(b) for b in bounds)}]"
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
            an, args = n.children[0], nonnull(n.children[1].children)
        elif n.data == "action_ref":
            an, args = n.children[0], nonnull(n.children[1].children) if n.children[1] is not None else []
        else:
            an, args = n, []
        aname = str(an.children[0]) if isinstance(an, Tree) else str(an)
        spec = self.find_action(actions, aname)
        if spec is None:
            raise self.err(n, f"action '{aname}' is not in the actions list of table {table}")
        n_bound = self.bound_args.get((table, spec.name), 0)
        if n_bound and len(args) == n_bound + len(spec.params):
            args = args[n_bound:]           # its directional arguments: the actions list's binding runs them
        if len(args) != len(spec.params):
            raise self.err(n, f"action {spec.name} takes {len(spec.params)} action-data arguments"
                              f"{f' (after its {n_bound} directional ones)' if n_bound else ''}, got {len(args)}")
        data = []
        for (_pname, w), a in zip(spec.params, args, strict=True):
            e = self.expr(a, BitT(w))
            data.append(self.const_value(e, BitT(w), a).const)
        return spec, tuple(data)

    def const_entries(self, p: Tree, table: Table, actions: dict[str, ActionSpec]) -> None:
        """``const entries``: in order, each one's priority its ``@priority(n)`` if annotated, else the previous
        entry's plus one (the first: 1); the smallest number wins an overlap, as on BMv2."""
        prio = 0
        for ent in subtrees(p, "entry"):
            given = annotations_of(ent).get("priority")
            if given is not None:
                if len(given) != 1 or not isinstance(given[0], int) or given[0] < 0:
                    raise self.err(ent, f"@priority of an entry of {table.name} takes one integer >= 0")
                prio = given[0]
            else:
                prio += 1
            ks = ent.children[0]
            aref = subtrees(ent, "action_ref")[0]
            items = subtrees(ks) if ks.data == "tuple_keyset" else [ks]
            if len(items) != len(table.keys):
                raise self.err(ks, f"entry has {len(items)} key values, table {table.name} has "
                                   f"{len(table.keys)} keys")
            match = []
            for item, key in zip(items, table.keys, strict=True):
                match.append(self.keyset_match(item, key.width, key.kind))
            spec, data = self.action_call_const(aref, actions, table.name)
            table.add(match, spec, data, prio, const=True)

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

    def value_set(self, d: Tree, scope: dict[str, Sym]) -> None:
        """``value_set<T>(size) name;``: select-case values the control plane fills (pvs_add ...)."""
        targs = [c for c in subtrees(d, "type_args")[0].children if isinstance(c, Tree)]
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
        name = name_of(subtrees(d, "name")[0])
        full = f"{self.parser_name}.{name}"
        vs = ValueSet(full, width, size)
        var = self.fresh("pvs_" + name)
        self.ns[var] = vs
        self.value_sets[full] = vs
        scope[name] = Sym("value_set", value={"var": var, "obj": vs})
