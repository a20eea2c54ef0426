"""Compile a v1model program by named passes; per packet only the generated straight-line Python runs.

The driver runs ``PASSES`` in order over one ``Compiler`` (the shared state of one compilation, ``context``):

- ``declare``  (``declare``): top-level names into symbol tables; type expressions and constants resolved.
- ``bind``     (``blocks``): ``main`` must be a V1Switch of six blocks; the H, M, standard_metadata roots laid out.
- ``codegen``  (``blocks`` with ``statements``, ``expressions``, ``calls``, ``extern_calls``, ``control_decls``,
  ``parser_states``): type-check each block and emit its Python; constants fold through ``fold``; operands whose
  code emits statements (calls) are put in P4's evaluation order by ``lower`` (short-circuit, one ``?:`` arm,
  left before right).
- ``link``     (``blocks``): one module of source, compiled once, and the ``Program`` around it.

Then the caller's check passes (e.g. ``p4.compat_bmv2``), then one ``Program.instantiate`` as a smoke test.
All packet state lives in one list ``S`` (see ``p4.types``): every field access compiles to ``S[<constant>]``,
every header extract to one ``int.from_bytes`` plus shifts and masks, every operator to Python arithmetic
with explicit wrap-around. Limits: ``p4.compiler.limits``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lark import Tree

from p4.compiler.blocks import Blocks
from p4.compiler.calls import Calls
from p4.compiler.control_decls import ControlDeclarations
from p4.compiler.declare import Declarations
from p4.compiler.expressions import Expressions
from p4.compiler.extern_calls import ExternCalls
from p4.compiler.parser_states import ParserStates
from p4.compiler.statements import Statements
from p4.errors import CompileError
from p4.parse import parse
from p4.preprocess import Preprocessed, preprocess
from p4.program import Program


class Compiler(Declarations, Blocks, Statements, Expressions, Calls, ExternCalls, ControlDeclarations, ParserStates):
    """One compilation of one program: the passes' shared state (``CompilerContext``) and their methods."""


class Pass(Protocol):
    """A named pass over one compilation: reads and extends the ``Compiler``; raises ``CompileError`` on a finding."""

    name: str

    def run(self, c: Compiler, tree: Tree) -> None: ...


@dataclass(frozen=True)
class MethodPass:
    """A pass that is one method of ``Compiler``."""

    name: str
    method: Callable[[Compiler, Tree], None]

    def run(self, c: Compiler, tree: Tree) -> None:
        self.method(c, tree)


PASSES: tuple[Pass, ...] = (
    MethodPass("declare", Compiler.collect),
    MethodPass("bind", Compiler.bind_main),
    MethodPass("codegen", Compiler.generate),
    MethodPass("link", Compiler.link),
)


def compile_file(path: str | Path, *, include_dirs: list[Path] | None = None,
                 defines: dict[str, str] | None = None, seed: int = 0,
                 checks: tuple[Pass, ...] = ()) -> Program:
    """Preprocess, parse, type-check and compile a v1model P4 program (raises ``CompileError``)."""
    pre = preprocess(path, include_dirs, defines)
    return compile_preprocessed(pre, Path(path).stem, seed, checks=checks)


def compile_source(text: str, name: str = "<string>", seed: int = 0,
                   checks: tuple[Pass, ...] = ()) -> Program:
    """Compile P4 source text (for tests); ``#include <v1model.p4>`` works as usual."""
    from p4.preprocess import Preprocessor

    pre = Preprocessor().run_text(text, name)
    return compile_preprocessed(pre, name, seed, checks=checks)


def run_passes(c: Compiler, tree: Tree, passes: tuple[Pass, ...] = PASSES) -> None:
    """Run ``passes`` in order; anything but a ``CompileError`` still points the user at the construct."""
    try:
        for p in passes:
            p.run(c, tree)
    except RecursionError:
        node = c.last_node
        raise CompileError("program nests too deeply for this compiler",
                           c.pos(node) if node is not None else c.end_pos()) from None
    except CompileError:
        raise
    except Exception as exc:  # a compiler bug must still point the user at the construct
        node = c.last_node
        raise CompileError(f"internal compiler error ({type(exc).__name__}: {exc}) while compiling this; "
                           "please report it", c.pos(node) if node is not None else None) from exc


def compile_preprocessed(pre: Preprocessed, name: str, seed: int = 0,
                         checks: tuple[Pass, ...] = (), tree: Tree | None = None) -> Program:
    """Run the passes and ``checks`` over ``pre`` (parsed here unless its parse ``tree`` is given)."""
    if tree is None:
        tree = parse(pre)
    c = Compiler(pre, name, seed)
    run_passes(c, tree)
    prog = c.program
    for check in checks:                   # after compiling: the program is well-formed and its names resolve
        check.run(c, tree)
    prog.warnings = c.warnings
    try:
        prog.instantiate()                 # every pipeline does this: a compiler bug must show here, not later
    except Exception as exc:  # as above
        raise CompileError(f"internal compiler error ({type(exc).__name__}: {exc}) while instantiating "
                           f"{name}; please report it") from exc
    return prog
