"""Passes ``bind``, ``codegen`` and ``link``: the V1Switch blocks, their code, and the finished ``Program``."""

from __future__ import annotations

from lark import Tree

from p4.compiler.context import CompilerContext
from p4.compiler.ir import ActionInfo, Sym
from p4.compiler.runtime import STATE_TYPES, make_stack_index, pop_front, push_front, to_signed
from p4.compiler.syntax import name_of, nonnull, subtrees
from p4.errors import CompileError
from p4.program import (
    Program,
    ProgramState,
    StackIndexOutOfRange,
)
from p4.types import (
    StructLike,
)

V1_BLOCKS = ("parser", "verify", "ingress", "egress", "compute", "deparser")


class Blocks(CompilerContext):
    """The whole-program passes over the six V1Switch blocks."""

    # --- whole program ------------------------------------------------------------------------------------
    def control_fn(self, fn: str, node: Tree, bindings: dict[str, Sym]) -> None:
        cname = name_of(subtrees(node, "name")[0])
        scope = dict(bindings)
        self.scopes = [scope]
        deferred = self.control_locals(node, cname, scope)
        body = subtrees(node, "block")[-1]
        out = self.out
        out(f"def {fn}(S):")
        out.indent()
        if fn == "_deparser":
            out("out = []")
        out("try:")
        out.indent()
        self.run_deferred_inits(deferred)
        self.stmts(body.children)
        out.dedent()
        out("except (_Exit, _Ret):")
        out("    pass")
        if fn == "_deparser":
            out("return out")
        out.dedent()

    def bind_main(self, tree: Tree) -> None:
        """Pass ``bind``: ``main`` must be a V1Switch of six blocks; lay out the H, M and standard_metadata roots."""
        if self.main is None:
            raise CompileError("no 'main' package instantiation (V1Switch(...) main;) in this program",
                               self.end_pos())
        mtype = str(subtrees(subtrees(self.main, "type_ref")[0])[0].children[0])
        if mtype != "V1Switch":
            raise self.err(self.main, f"only the v1model V1Switch package is supported, not {mtype}")
        margs = nonnull(subtrees(self.main, "args")[0].children)
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
        self.control_plane.block_order = [str(a.children[0]) for a in margs]
        pparams = subtrees(subtrees(blocks["parser"], "params")[0], "param")
        if len(pparams) != 4:
            raise self.err(blocks["parser"], "a v1model parser has 4 parameters (packet_in, out H, inout M, "
                                             "inout standard_metadata_t)")
        htype = self.resolve_type(subtrees(pparams[1], "type_ref")[0])
        mtype_ = self.resolve_type(subtrees(pparams[2], "type_ref")[0])
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
        self.headers_range, self.meta_range = (h0, h1), (h1, m1)
        for need in ("NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds"):
            if need not in self.errors:
                self.errors.append(need)

    def block_scope(self, node: Tree, roles: list[str]) -> dict[str, Sym]:
        """A block's parameters bound to the roots (``H``, ``M``, ``SM``) or to the packet (``packet_in``/``_out``)."""
        roots = {"H": self.hdr_ref, "M": self.meta_ref, "SM": self.sm_ref}
        params = subtrees(subtrees(node, "params")[0], "param")
        if len(params) != len(roles):
            raise self.err(node, f"this v1model block must have {len(roles)} parameters, has {len(params)}")
        out: dict[str, Sym] = {}
        for p, role in zip(params, roles, strict=True):
            pname = name_of(subtrees(p, "name")[0])
            ptype = self.resolve_type(subtrees(p, "type_ref")[0])
            if role in ("packet_in", "packet_out"):
                out[pname] = Sym(role)
                continue
            r = roots[role]
            if ptype is not r.type:
                raise self.err(p, f"parameter '{pname}' has type {ptype}, expected {r.type}")
            out[pname] = Sym("ref", r.type, ref=r)
        return out

    def generate(self, tree: Tree) -> None:
        """Pass ``codegen``: type-check each block and emit its Python function (a block's parameters bind first)."""
        blocks = self.blocks
        self.scopes = []
        for d in self.top_instantiations:    # top-level instances are named without a block prefix, as p4c does
            self.instantiate(d, "", self.global_scope)
        self.compile_parser(blocks["parser"], self.block_scope(blocks["parser"], ["packet_in", "H", "M", "SM"]))
        self.control_fn("_verify", blocks["verify"], self.block_scope(blocks["verify"], ["H", "M"]))
        self.control_fn("_ingress", blocks["ingress"], self.block_scope(blocks["ingress"], ["H", "M", "SM"]))
        self.control_fn("_egress", blocks["egress"], self.block_scope(blocks["egress"], ["H", "M", "SM"]))
        self.control_fn("_compute", blocks["compute"], self.block_scope(blocks["compute"], ["H", "M"]))
        self.control_fn("_deparser", blocks["deparser"], self.block_scope(blocks["deparser"], ["packet_out", "H"]))

    def link(self, tree: Tree) -> None:
        """Pass ``link``: one Python module from the generated functions, compiled once, and the ``Program``."""
        src_lines = []
        for fn in self.pending_functions:
            src_lines.extend(fn)
            src_lines.append("")
        src_lines.extend(self.out.lines)
        source = "\n".join(src_lines) + "\n"
        ns = self.ns
        oob = self.errors.index("StackOutOfBounds")
        ns.update({"_INIT": self.init, "_sx": make_stack_index(oob), "_HSX": StackIndexOutOfRange,
                   "_hx": make_stack_index(oob, StackIndexOutOfRange),
                   "_sgn": to_signed, "_push_front": push_front, "_pop_front": pop_front})
        code = compile(source, f"<p4:{self.prog_name}>", "exec")
        for t in self.tables.values():       # entries and defaults use the table's own action specs
            for e in t.entries.values():
                if e.action is not None:
                    e.action = t.actions[e.action.name]
            if t.default_action is not None:
                t.default_action = t.actions.get(t.default_action.name, t.default_action)
                t.initial_default = (t.default_action, t.default_data)
        objects = {k: v for k, v in ns.items() if isinstance(v, STATE_TYPES)}
        helpers = {k: v for k, v in ns.items() if k not in objects}
        action_fns = {info.name: info.fn_name for info in self._all_action_infos()}
        template = ProgramState(self.tables, self.actions, self.registers, self.counters, self.meters,
                                self.profiles, self.value_sets, objects)
        self.program = Program(
            name=self.prog_name, source=source, code=code, helpers=helpers, template=template,
            action_fns=action_fns, init_state=self.init, sm=self.sm_slots, errors=self.errors,
            field_lists=self.field_lists, digest_layouts=self.digest_layouts,
            meta_range=self.meta_range, headers_range=self.headers_range, control_plane=self.control_plane)

    def _all_action_infos(self) -> list[ActionInfo]:
        infos = list(self.global_action_infos.values())
        seen = {id(i) for i in infos}

        def walk(sc: dict[str, Sym]) -> None:
            for s in sc.values():
                if s.kind == "action" and id(s.value) not in seen:
                    seen.add(id(s.value))
                    infos.append(s.value)
        for sc in self._every_scope:
            walk(sc)
        return infos
