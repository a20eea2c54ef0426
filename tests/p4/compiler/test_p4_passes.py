"""Each compiler pass on its own: the pass list, what each pass leaves behind, the folder, the runtime helpers."""

from __future__ import annotations

import pytest
from lark import Tree

from p4.compiler import PASSES, Compiler, compile_source, fold
from p4.compiler.runtime import make_stack_index, pop_front, push_front, to_signed
from p4.compiler.syntax import parse_int
from p4.errors import CompileError
from p4.parse import parse
from p4.preprocess import Preprocessor
from p4.program import ParserError
from p4.types import BitT, BoolT, InfIntT, StructLike
from tests.p4.compiler.conftest import V1_PRELUDE

pytestmark = pytest.mark.unit

PROGRAM = """
const bit<8> WRAPPED = 8w200 + 8w100;
const bool LESS = 8w1 < 8w2;
const bit<4> NARROW = (bit<4>)(8w0x1f);
header h_t { bit<8> a; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers h, inout metadata m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.h); transition accept; }
}
control VC(inout headers h, inout metadata m) { apply { } }
control I(inout headers h, inout metadata m, inout standard_metadata_t sm) {
    apply { h.h.a = h.h.a + WRAPPED; sm.egress_spec = 1; }
}
control Eg(inout headers h, inout metadata m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers h, inout metadata m) { apply { } }
control D(packet_out pkt, in headers h) { apply { pkt.emit(h.h); } }
V1Switch(P(), VC(), I(), Eg(), CC(), D()) main;
"""


def _run(text: str, upto: str) -> Compiler:
    """Run the pass list up to and including the pass named ``upto``; return the compilation's state."""
    pre = Preprocessor().run_text(V1_PRELUDE + text, "t.p4")
    tree = parse(pre)
    c = Compiler(pre, "t")
    for p in PASSES:
        p.run(c, tree)
        if p.name == upto:
            return c
    raise AssertionError(f"no pass {upto}")


def test_the_pass_list_runs_declare_bind_codegen_link_in_order() -> None:
    assert [p.name for p in PASSES] == ["declare", "bind", "codegen", "link"]


def test_declare_resolves_types_and_folds_constants_without_generating_code() -> None:
    c = _run(PROGRAM, "declare")
    assert isinstance(c.types["h_t"], StructLike) and c.types["h_t"].is_header
    assert (c.consts["WRAPPED"].const, c.consts["LESS"].const, c.consts["NARROW"].const) == (44, True, 15)
    assert set(c.controls) == {"VC", "I", "Eg", "CC", "D"} and set(c.parsers) == {"P"}
    assert c.main is not None and c.out.lines == [] and len(c.init) == len(Compiler(c.pre, "x").init)


def test_bind_lays_out_the_roots_and_names_the_blocks() -> None:
    c = _run(PROGRAM, "bind")
    assert [c.blocks[r] is c.controls[n] for r, n in (("ingress", "I"), ("deparser", "D"))] == [True, True]
    assert c.hdr_ref.type is c.types["headers"] and c.headers_range == (c.hdr_ref.base, c.meta_ref.base)
    assert "StackOutOfBounds" in c.errors and c.out.lines == []


def test_bind_without_main_points_at_the_end_of_the_program() -> None:
    text = PROGRAM.replace("V1Switch(P(), VC(), I(), Eg(), CC(), D()) main;", "")
    with pytest.raises(CompileError, match="no 'main' package instantiation") as exc:
        _run(text, "bind")
    assert exc.value.pos is not None and exc.value.pos.file == "t.p4"


def test_codegen_emits_one_function_per_block_and_link_builds_the_program() -> None:
    c = _run(PROGRAM, "codegen")
    fns = [line for line in c.out.lines if line.startswith("def ")]
    assert fns == ["def _parser(S, pkt):", "def _verify(S):", "def _ingress(S):", "def _egress(S):",
                   "def _compute(S):", "def _deparser(S):"]
    assert not hasattr(c, "program")
    PASSES[-1].run(c, Tree("start", []))
    assert "def _ingress(S):" in c.program.source and c.program.code is not None


def test_fold_computes_what_the_generated_code_computes() -> None:
    b8, s8 = BitT(8), BitT(8, True)
    assert fold.binary("+", 200, 100, b8) == 44 and fold.binary("-", 0, 1, b8) == 255
    assert fold.binary("+", 127, 1, s8) == -128 and fold.binary("|+|", 100, 100, s8) == 127
    assert fold.binary("|-|", 1, 2, b8) == 0 and fold.binary("/", 7, 0, b8) == 0
    assert fold.binary("<<", 1, 8, b8) == 0 and fold.binary("<<", 0x81, 1, b8) == 2
    assert fold.binary(">>", -128, 7, s8) == -1 and fold.binary("<", 1, 2, b8) is True
    assert fold.binary("/", -7, 2, InfIntT()) == -4 and fold.binary("||", False, True, BoolT()) is True
    assert fold.concat(0xA, BitT(4), 0x5, BitT(4)) == 0xA5 and fold.concat(-1, BitT(4, True), 0, BitT(4)) == -16
    assert fold.unary("~", 0x0F, b8) == 0xF0 and fold.unary("~", 0, s8) == -1 and fold.unary("-", 1, b8) == 255
    assert fold.cast(-1, s8, b8) == 255 and fold.cast(True, BoolT(), b8) == 1 and fold.cast(1, BitT(1), BoolT())
    with pytest.raises(ZeroDivisionError):
        fold.binary("%", 1, 0, InfIntT())
    with pytest.raises(OverflowError):
        fold.binary("<<", 1, 1 << 20, InfIntT())


@pytest.mark.parametrize(("decl", "value"), [
    ("const bit<8> X = (8w3 |+| 8w255) ^ 8w1;", 254),
    ("const int<8> X = -(8s127 + 8s1);", -128),
    ("const bit<16> X = 8w0xAB ++ 8w0xCD;", 0xABCD),
    ("const bit<8> X = (8w1 < 8w2) ? 8w7 : 8w9;", 7),
    ("const bit<4> X = (8w0xF0 >> 4)[3:0];", 15),
    ("const bool X = !(8w1 == 8w2) && true;", True),
])
def test_constant_declarations_fold_bit_typed_expressions(decl: str, value: int) -> None:
    c = _run(decl + PROGRAM, "declare")
    assert c.consts["X"].const == value


def test_a_run_time_value_is_not_a_constant() -> None:
    text = PROGRAM.replace("sm.egress_spec = 1;", "bit<8> k = h.h.a; h.h.a = h.h.a[k:0];")
    with pytest.raises(CompileError, match="expected a compile-time constant here"):
        compile_source(V1_PRELUDE + text, "t.p4")


def test_runtime_helpers_shift_and_index_header_stacks() -> None:
    S = [2, True, 1, True, 2, False, 0]          # a 3-element stack of (valid, field) headers, 2 valid
    push_front(S, 0, 2, 3, 1)
    assert S == [3, False, 1, True, 1, True, 2]
    pop_front(S, 0, 2, 3, 2)
    assert S == [1, True, 2, False, 1, False, 2]
    stack_index = make_stack_index(7)
    assert stack_index(2, 3) == 2 and to_signed(0xFF, 8) == -1
    with pytest.raises(ParserError) as exc:
        stack_index(3, 3)
    assert exc.value.code == 7
    assert parse_int("8w0x1_F") == (31, BitT(8)) and parse_int("4s15")[0] == -1


class _CountTables:
    """A check pass of our own: sees the finished compilation after the built-in passes."""

    name = "count-tables"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def run(self, c: Compiler, tree: Tree) -> None:
        self.seen.append(f"{c.program.name}: {len(c.tables)} tables")
        if "I" not in c.controls:
            raise CompileError("no control I", c.end_pos())


def test_a_check_pass_runs_after_link_and_its_error_stops_the_compile() -> None:
    check = _CountTables()
    compile_source(V1_PRELUDE + PROGRAM, "t.p4", checks=(check,))
    assert check.seen == ["t.p4: 0 tables"]
    renamed = PROGRAM.replace("control I(", "control J(").replace("I(), Eg()", "J(), Eg()")
    with pytest.raises(CompileError, match="no control I"):
        compile_source(V1_PRELUDE + renamed, "t.p4", checks=(_CountTables(),))
