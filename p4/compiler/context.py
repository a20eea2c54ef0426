"""The state one compilation shares between its passes: symbol tables, the packet-state layout, scopes, errors."""

from __future__ import annotations

import collections
import random as _random
from typing import Any

from lark import Token, Tree

from p4 import algorithms
from p4.compiler.ir import ActionInfo, E, Emitter, Ref, Sym
from p4.compiler.limits import (
    MAX_STATE_SLOTS,
)
from p4.errors import CompileError, SourcePos
from p4.externs import Counter, Meter, Register
from p4.preprocess import Preprocessed
from p4.program import (
    N_HIDDEN,
    NO_FIELD_LIST,
    AssertFailed,
    ControlPlaneFacts,
    DigestLayout,
    ExitControl,
    ParserError,
    Program,
    ReturnControl,
)
from p4.tables import ActionProfile, ActionSpec, Table, ValueSet
from p4.types import (
    ExternT,
    ListT,
    P4Type,
    StackT,
    StructLike,
    TypeVarT,
    VarbitT,
    default_value,
)


class CompilerContext:
    """State and helpers every pass uses: positions and errors, slot allocation, name lookup.

    Set by pass ``bind``: ``blocks`` (role -> declaration), the roots ``hdr_ref``/``meta_ref``/``sm_ref``, their
    slot ranges and ``sm_slots``; while ``codegen`` is in a parser: ``parser_name``, ``parser_states``,
    ``inline_budget``; by pass ``link``: ``program``.
    """

    blocks: dict[str, Tree]
    hdr_ref: Ref
    meta_ref: Ref
    sm_ref: Ref
    sm_slots: dict[str, int]
    headers_range: tuple[int, int]
    meta_range: tuple[int, int]
    parser_name: str
    parser_states: dict[str, Tree]
    inline_budget: int
    program: Program

    def __init__(self, pre: Preprocessed, name: str, seed: int = 0) -> None:
        self.pre = pre
        self.prog_name = name
        self.types: dict[str, P4Type] = {}
        self.consts: dict[str, E] = {}
        self.errors: list[str] = []
        self.match_kinds: set[str] = set()
        self.externs: dict[str, ExternT] = {}
        self.extern_funcs: set[str] = set()
        self.param_names: dict[str, list[list[str]]] = {}   # extern function / "Extern.method" -> each overload's
        self.parsers: dict[str, Tree] = {}
        self.controls: dict[str, Tree] = {}
        self.global_actions: dict[str, Tree] = {}
        self.global_functions: dict[str, Tree] = {}
        self.main: Tree | None = None
        self.top_instantiations: list[Tree] = []             # top-level extern instances (``register<..>(4) r;``)
        self.global_scope: dict[str, Sym] = {}               # their symbols, looked up after every local scope
        self.direct_invocations: dict[str, int] = {}         # ``C.apply(..)`` call sites per type, to name them
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
        self.bound_args: dict[tuple[str, str], int] = {}    # (table, action): directional args bound in its list
        self.registers: dict[str, Register] = {}
        self.counters: dict[str, Counter] = {}
        self.meters: dict[str, Meter] = {}
        self.profiles: dict[str, ActionProfile] = {}
        self.value_sets: dict[str, ValueSet] = {}
        self.field_lists: dict[int, list[int]] = {}
        self.digest_layouts: list[DigestLayout] = []
        self.control_plane = ControlPlaneFacts()               # P4Info facts (annotations, controller headers)
        self.in_parser = False
        self.dyn_indexes = 0                                 # run-time stack indices compiled in controls so far
        self.stack_types: dict[tuple[str, int], StackT] = {}    # (element, size): the one StackT of each
        self.unset_refs: dict[str, Ref] = {}                 # per type: storage never written (see Statements)
        self.in_action = False
        self.may_exit = False                                # the body being compiled can execute ``exit``
        self.tuple_structs: dict[str, StructLike] = {}     # tuple type -> the struct its variables are stored as
        self.loop_updates: list[Tree | None] = []          # the update clauses of the enclosing for loops
        self.pending_functions: list[list[str]] = []
        self.decl_pos: dict[str, SourcePos | None] = {}     # declared type/parser/control name -> where
        self.warnings: list[str] = []                        # rendered "file:line:col: warning: ..."
        self.last_node: Any = None                           # the construct being compiled (for internal errors)
        self.fn_ret: P4Type | None = None                    # return type of the function being compiled
        self.fn_ret_ref: Ref | None = None                   # its return slots when it returns a header/struct
        self.call_type_args: list[P4Type] = []               # explicit type arguments of the call being compiled
        self.global_action_infos: dict[str, ActionInfo] = {}     # top-level actions, compiled on first use
        self.global_function_infos: dict[str, ActionInfo] = {}   # top-level functions, compiled on first use
        self.inlined_controls: dict[tuple[str, str], dict[str, Sym]] = {}   # locals of controls applied inside one
        self.subparsers: dict[str, tuple[str, dict[str, Ref | None]]] = {}   # parser instance -> its function
        self.inlined_inits: dict[tuple[str, str], list[tuple[Ref, Tree]]] = {}   # and their non-constant initialisers

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

    # --- layout -------------------------------------------------------------------------------------------
    def storage_type(self, t: P4Type) -> P4Type:
        """The type a variable of type ``t`` is stored as: a tuple as a struct of fields ``0``, ``1``, ... (one
        struct per tuple type, so tuples of one type assign to each other; ``t[i]`` reads field ``i``)."""
        if not isinstance(t, ListT):
            return t
        key = str(t)
        got = self.tuple_structs.get(key)
        if got is None:
            got = self.tuple_structs[key] = StructLike(key, [(str(i), self.storage_type(e))
                                                             for i, e in enumerate(t.elems)])
        return got

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
        if name in self.global_scope:
            return self.global_scope[name]
        if name in self.consts:
            c = self.consts[name]
            return Sym("const", c.type, value=c)
        if name in self.global_actions:
            return Sym("action", value=self.global_action(name))
        raise self.err(node, f"unknown name '{name}'")
