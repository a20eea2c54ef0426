"""Calls: methods of headers/stacks/tables/controls, direct calls of actions and functions."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4.compiler import lower
from p4.compiler.context import CompilerContext
from p4.compiler.ir import BOOL, INFINT, VOID, ActionInfo, E, Emitter, Ref, Sym, TableInfo
from p4.compiler.syntax import annotations_of, name_of, nonnull, param_names, subtrees
from p4.tables import ActionSpec
from p4.types import (
    BitT,
    EnumT,
    P4Type,
    StackT,
    StructLike,
    VarbitT,
    VoidT,
)


class Calls(CompilerContext):
    """Calls of methods, actions and functions (actions and functions compile on first use)."""

    # --- calls --------------------------------------------------------------------------------------------
    def bind_named(self, args: list, overloads: list[list[str]], node: Any, what: str) -> list:
        """Arguments in parameter order: named arguments (``f(x = 1)``) matched to the parameter names of one
        of the callee's ``overloads``; positional arguments as they are (P4 allows one style per call)."""
        named = [a for a in args if isinstance(a, Tree) and a.data == "named_arg"]
        if not named:
            return args
        if len(named) != len(args):
            raise self.err(node, f"call of {what}: either all arguments are named or none is")
        given = [str(a.children[0]) for a in named]
        for i, g in enumerate(given):
            if g in given[:i]:
                raise self.err(named[i], f"argument '{g}' given twice")
        for names in overloads:
            if sorted(names) == sorted(given):
                by_name = {str(a.children[0]): a.children[1] for a in named}
                return [by_name[n] for n in names]
        expected = " or ".join("(" + ", ".join(names) + ")" for names in overloads) or "()"
        raise self.err(node, f"call of {what}: arguments named ({', '.join(given)}), its parameters are "
                             f"{expected}")

    def generic_method(self, n: Tree, *, as_stmt: bool) -> E:
        """``obj.method<T, ...>(args)``: the method call with its explicit type arguments."""
        obj_n, member, targs_n, args_n = n.children
        targs = [self.resolve_type(c) for c in targs_n.children if isinstance(c, Tree)]
        callee = Tree("member_expr", [obj_n, member], n.meta)
        return self.call(callee, nonnull(args_n.children), as_stmt=as_stmt, targs=targs)

    def call(self, callee: Tree, args: list, *, as_stmt: bool, targs: list[P4Type] | None = None) -> E:
        if callee.data in ("member_expr", "lv_member"):
            method = name_of(callee.children[1])
            objn = callee.children[0]
            # table.apply().hit / .miss handled by member access on call results below
            obj = self.expr(objn)
            return self.method_call(obj, method, args, callee, as_stmt, targs or [])
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
                args = self.bind_named(args, self.param_names.get(fname, []), callee, fname)
                return self.extern_func(fname, args, callee)
            raise self.err(callee, f"unknown function or action '{fname}'")
        # t.apply().hit style: callee is a call
        raise self.err(callee, "unsupported call")

    def method_call(self, obj: E, method: str, args: list, node: Any, as_stmt: bool,
                    targs: list[P4Type] | None = None) -> E:
        t = obj.type
        if targs and not (isinstance(obj.const, Sym) and obj.const.kind in ("packet_in", "packet_out", "extern")):
            raise self.err(node, f"'{method}' takes no type arguments")
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
                valid = (0,) if t.elem.is_header else tuple(t.elem.offsets[f] for f, _ in t.elem.fields)
                self.out(f"_{method}(S, {obj.ref.base}, {t.elem.size}, {t.count}, {k}, {valid!r})")
                return E("None", VOID)
            raise self.err(node, f"header stack has no method '{method}'")
        sym = obj.const
        if isinstance(sym, tuple) and len(sym) == 2 and isinstance(sym[0], Sym):
            # t.apply().hit comes here as member of a call; not expected
            raise self.err(node, f"unsupported method call '{method}'")
        if not isinstance(sym, Sym):
            raise self.err(node, f"'{method}': {t} has no methods")
        if sym.kind in ("packet_in", "packet_out", "extern"):
            ext = sym.value["kind"] if sym.kind == "extern" else sym.kind
            args = self.bind_named(args, self.param_names.get(f"{ext}.{method}", []), node, f"{ext}.{method}")
        if sym.kind == "packet_in":
            return self.packet_in_call(method, args, node, targs or [])
        if sym.kind == "packet_out":
            if method != "emit":
                raise self.err(node, f"packet_out has no method '{method}'")
            if len(args) != 1:
                raise self.err(node, f"emit takes 1 argument, got {len(args)}")
            h = self.expr(args[0])
            self.check_type_args(targs or [], h.type, node)
            self.emit(h, args[0])
            return E("None", VOID)
        if sym.kind == "table":
            if method != "apply":
                raise self.err(node, f"table has no method '{method}'")
            tinfo: TableInfo = sym.value
            return E(f"{tinfo.fn_name}(S)", VOID, const=("apply", tinfo))
        if sym.kind == "extern":
            return self.extern_method(sym, method, args, node)
        if sym.kind == "parser":
            if method != "apply":
                raise self.err(node, "parsers only have apply()")
            if not self.in_parser:
                raise self.err(node, "a parser can only be applied from a parser state")
            args = self.bind_named(args, [param_names(sym.value[0])], node, f"{sym.value[1]}.apply")
            self.subparser_call(sym.value, args, node)
            return E("None", VOID)
        if sym.kind == "control":
            if method != "apply":
                raise self.err(node, "controls only have apply()")
            args = self.bind_named(args, [param_names(sym.value[0])], node, f"{sym.value[1]}.apply")
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

    def check_type_args(self, targs: list[P4Type], t: P4Type, node: Any) -> None:
        """Explicit type arguments of extract/emit must name the argument's type."""
        if targs and (len(targs) != 1 or targs[0] is not t):
            raise self.err(node, f"type argument <{', '.join(map(str, targs))}> does not match the argument's "
                                 f"type {t}")

    def packet_in_call(self, method: str, args: list, node: Any, targs: list[P4Type]) -> E:
        if method == "extract":
            if len(args) not in (1, 2):
                raise self.err(node, f"extract takes 1 or 2 arguments, got {len(args)}")
            h = self.expr(args[0])
            if h.const == "_" and len(targs) == 1 and isinstance(targs[0], StructLike) and targs[0].is_header:
                h = E("None", targs[0], ref=self.alloc(targs[0], node))   # extract<H>(_): parse H, keep nothing
            if not (isinstance(h.type, StructLike) and h.type.is_header) or h.ref is None:
                raise self.err(args[0], f"extract needs a header, not {h.type}")
            self.check_type_args(targs, h.type, node)
            vb = [ft for _, ft in h.type.fields if isinstance(ft, VarbitT)]
            if bool(vb) != (len(args) == 2):
                raise self.err(node, "extract(hdr, bits) is for headers with a varbit field, extract(hdr) for "
                                     "fixed-size headers")
            var_len = self.expr(args[1], BitT(32)).src if vb else None
            self.extract(h.ref, args[0], var_len)
            self.invalidate_siblings(h)
            an = args[0]
            if an.data in ("member_expr", "lv_member") and name_of(an.children[1]) != "next" and \
                    an.children[0].data in ("member_expr", "lv_member"):
                an = an.children[0]            # hs.next.member of a stack of header unions
            if an.data in ("member_expr", "lv_member") and name_of(an.children[1]) == "next":
                stack = self.expr(an.children[0])
                if isinstance(stack.type, StackT):
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

    def global_action(self, name: str) -> ActionInfo:
        key = f"@global.{name}"
        info = self.global_action_infos.get(key)
        if info is None:
            info = ActionInfo(name, self.global_actions[name], None)
            self.global_action_infos[key] = info
            self.control_plane.annotations[name] = annotations_of(info.node)
            self.compile_action(info)
        return info

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
            if isinstance(ret_t, (StructLike, StackT)):
                info.ret_ref = self.alloc(ret_t, node)   # one function has one activation at a time (no recursion)
            elif not (ret_t.scalar or isinstance(ret_t, VoidT)):
                raise self.err(node, f"functions returning {ret_t} are not supported (return a bit/int/bool, "
                                     "header, struct or header stack)")
        info.ret_type = ret_t
        params = []
        scope: dict[str, Sym] = {}
        pynames = []
        for p in subtrees(subtrees(node, "params")[0], "param"):
            dirn = p.children[len(subtrees(p, "annotation"))]
            direction = str(dirn.children[0]) if dirn is not None else ""
            t = self.resolve_type(subtrees(p, "type_ref")[0])
            pname = name_of(subtrees(p, "name")[0])
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
        saved_out, saved_in_action, saved_ret, saved_exits = self.out, self.in_action, self.fn_ret, self.may_exit
        saved_ret_ref, self.fn_ret_ref = self.fn_ret_ref, info.ret_ref
        self.may_exit = False
        self.out = Emitter()
        self.in_action = True
        self.fn_ret = ret_t
        self.out(f"def {info.fn_name}(S{''.join(', ' + p for p in pynames)}):")
        self.out.indent()
        self.scopes.append(scope)
        body = subtrees(node, "block")[0]
        self.stmts(body.children)
        self.scopes.pop()
        self.pending_functions.append(self.out.lines)
        info.may_exit = self.may_exit
        self.out, self.in_action, self.fn_ret, self.may_exit = saved_out, saved_in_action, saved_ret, saved_exits
        self.fn_ret_ref = saved_ret_ref
        if function:
            return
        data_params = [(n, t.width if isinstance(t, BitT) else t.base.width
                        if isinstance(t, EnumT) and t.base is not None else 1) for d, t, n, _ in params if d == ""]
        for d, t, n, _ in params:
            if d == "" and isinstance(t, EnumT) and t.base is not None:
                self.control_plane.type_names[(info.name, n)] = t.name
                self.control_plane.ser_enums[t.name] = (t.base.width, list(t.members.items()))
        spec = ActionSpec(info.name, None, data_params, 0)  # fn bound after exec
        self.actions[info.name] = spec
        info.spec = spec

    def global_function(self, name: str) -> ActionInfo:
        cache = self.global_function_infos
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
        args = self.bind_named(args, [[pname for _, _, pname, _ in info.params]], node, f"{kind} {info.name}")
        if len(args) != len(info.params):
            raise self.err(node, f"{kind} {info.name} takes {len(info.params)} arguments, got {len(args)}")
        pyargs: list[E] = []
        copy_out: list[tuple[Ref | tuple[Ref, int, int], Ref]] = []
        for (direction, t, pname, sym), a in zip(info.params, args, strict=True):
            if sym.kind == "py":
                got = lower.capture(self, lambda a=a, t=t: self.coerce(self.expr(a, t), t))
                if got.lines:                  # arguments are evaluated left to right: read the earlier ones first
                    pyargs = [lower.spill(self, e) for e in pyargs]
                    lower.replay(self.out, got.lines)
                pyargs.append(got.e)
            else:
                if direction in ("in", "inout", ""):
                    self.assign_ref(sym.ref, a, node)
                if direction in ("out", "inout") and a.data in ("slice_expr", "lv_slice"):
                    copy_out.append((self.slice_target(a), sym.ref))   # a slice is written back bit-exact
                elif direction in ("out", "inout"):
                    tgt = self.expr(a)
                    if tgt.ref is None:
                        raise self.err(a, f"argument for {direction} parameter '{pname}' must be writable")
                    copy_out.append((tgt.ref, sym.ref))
        for dst, _ in copy_out:                # an out-of-range stack index among the targets: check before the
            ref = dst[0] if isinstance(dst, tuple) else dst       # call, so the guard skips all of it (p4c)
            if isinstance(ref.base, str) and "_hx(" in ref.base:
                self.out(ref.base)
        call = f"{info.fn_name}(S{''.join(', ' + p.src for p in pyargs)})"
        ret_t = info.ret_type
        result = E("None", VOID)
        if function and info.ret_ref is not None:
            pass                               # a header/struct result: copied out of the return slots below
        elif function and ret_t is not None and not isinstance(ret_t, VoidT):
            tmp = self.fresh("r")
            call = f"{tmp} = {call}"
            result = E(tmp, ret_t)
        if info.may_exit:
            self.may_exit = True               # the caller can exit through this call too
        if info.may_exit and copy_out:         # exit still copies out/inout arguments back (P4-16 exit statement)
            self.out("try:")
            self.out(f"    {call}")
            self.out("except _Exit:")
            self.out.indent()
            self.copy_out(copy_out)
            self.out("raise")
            self.out.dedent()
        else:
            self.out(call)
        self.copy_out(copy_out)
        if function and info.ret_ref is not None and ret_t is not None:
            tmp_ref = self.alloc(ret_t, node)   # this call's own copy: two calls in one expression stay apart
            self.copy(tmp_ref, info.ret_ref)
            result = E("None", ret_t, ref=tmp_ref)
        return result

    def copy_out(self, pairs: list[tuple[Ref | tuple[Ref, int, int], Ref]]) -> None:
        """Copy each (argument, parameter slot) back after a call, in parameter order; an argument that is a
        slice is given as (storage, low bit, width)."""
        for dst, src in pairs:
            if isinstance(dst, tuple):
                self.write_bits(*dst, src.src)
            elif dst.type.scalar:
                self.out(f"{dst.src} = {src.src}")
            else:
                self.copy(dst, src)

    def inline_control(self, value: tuple, args: list, node: Any) -> None:
        cnode, full, ctor = value
        params = subtrees(subtrees(cnode, "params")[0], "param")
        if len(params) != len(args):
            raise self.err(node, f"control apply takes {len(params)} arguments, got {len(args)}")
        scope: dict[str, Sym] = dict(ctor)
        for p, a in zip(params, args, strict=True):
            pname = name_of(subtrees(p, "name")[0])
            t = self.resolve_type(subtrees(p, "type_ref")[0])
            e = self.expr(a, t)
            if e.ref is not None:
                scope[pname] = Sym("ref", e.ref.type, ref=e.ref)
            else:
                r = self.alloc(t)
                self.out(f"{r.src} = {self.coerce(e, t).src}")
                scope[pname] = Sym("ref", t, ref=r)
        key = ("inlined", full)
        cache = self.inlined_controls
        saved = self.scopes
        self.scopes = [scope]
        if key not in cache:
            self.inlined_inits[key] = self.control_locals(cnode, full, scope)
            cache[key] = dict(scope)
        else:
            scope.update({k: v for k, v in cache[key].items() if k not in scope})
        body = subtrees(cnode, "block")[-1]
        self.out("try:")
        self.out.indent()
        self.run_deferred_inits(self.inlined_inits[key])
        self.stmts(body.children)
        self.out.dedent()
        self.out("except _Ret:")
        self.out("    pass")
        self.scopes = saved
