"""Language features beyond tables: preprocessor, functions, sub-controls, enums, typedefs, copies, errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from p4.compiler import compile_file, compile_source
from p4.errors import CompileError
from p4.preprocess import preprocess

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch, Switch

pytestmark = pytest.mark.unit
OUR_PROGRAMS = [Path(__file__).resolve().parents[3] / "p4" / "programs" / f"{name}.p4" for name in (
    "basic", "ecn", "ecmp", "multicast", "tunnel", "calc", "source_routing", "mri", "firewall", "qos",
    "flow_cache", "link_monitor")]

PROGRAM = """
#define WIDTH 8
#define TWICE(x) ((x) + (x))
#ifdef NOT_DEFINED
#error this must not be seen
#else
const bit<WIDTH> SEVEN = 7;
#endif
typedef bit<WIDTH> byte_t;
type bit<16> Id_t;
enum bit<8> Op { ADD = 1, SUB = 2, ZERO = 3 }
enum Color { RED, GREEN }
header h_t { byte_t op; byte_t a; byte_t b; byte_t r; int<8> s; bit<8> color; }
header copy_t { byte_t x; byte_t y; }
struct inner_t { byte_t v; }
struct metadata { inner_t in1; inner_t in2; Color c; }
struct headers { h_t h; copy_t c1; copy_t c2; }

bit<8> add3(in bit<8> x, in bit<8> y) {
    return x + y + 3;
}

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.c1); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }

control Sub(inout h_t h, in bit<8> k) {
    bit<8> twice(in bit<8> v) { return TWICE(v); }
    apply {
        if (k == 0) { return; }
        h.r = twice(h.r) + k;
    }
}

control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    Sub() sub;
    action fill(out bit<8> dst, inout bit<8> acc) {
        dst = SEVEN;
        acc = acc + 1;
    }
    apply {
        sm.egress_spec = 1;
        switch ((Op) hdr.h.op) {
            Op.ADD: { hdr.h.r = add3(hdr.h.a, hdr.h.b); }
            Op.SUB: { hdr.h.r = hdr.h.a - hdr.h.b; }
            default: { hdr.h.r = 0; }
        }
        sub.apply(hdr.h, hdr.h.a);
        meta.in1.v = 5;
        meta.in2 = meta.in1;
        meta.c = Color.GREEN;
        if (meta.c == Color.GREEN) { hdr.h.color = meta.in2.v; }
        hdr.c2 = hdr.c1;
        hdr.c1 = { 0xAA, 0xBB };
        fill(hdr.h.s, hdr.h.b);
        if (hdr.h.op == 9) { exit; }
        hdr.h.op = 0x42;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.c2); pkt.emit(hdr.c1); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.fixture(scope="module")
def sw(source_switch: SourceSwitch) -> Switch:
    return source_switch(PROGRAM, name="lang.p4")


def run(sw: Switch, op: int, a: int, b: int) -> bytes:
    (port, out), = sw.send(0, bytes([op, a, b, 0, 0, 0, 0x11, 0x22]) + b"pay")
    assert port == 1
    return out


def test_functions_enums_subcontrol_and_copies(sw: Switch) -> None:
    out = run(sw, 1, 10, 20)
    # add3 -> 33; Sub: 2*33 + 10 = 76; out/inout action params: s = 7, b = 21; enum color = 5
    assert out[:6] == bytes([0x42, 10, 21, 76, 7, 5])
    assert out[6:] == bytes([0x11, 0x22, 0xAA, 0xBB]) + b"pay"   # c2 = old c1, c1 = list assignment
    assert run(sw, 2, 5, 7)[3] == (2 * ((5 - 7) & 0xFF) + 5) & 0xFF
    out = run(sw, 3, 0, 1)
    assert out[3] == 0                        # Sub returned early (k == 0); default switch branch
    assert run(sw, 9, 1, 1)[0] == 9           # exit skipped the rest of ingress


def test_preprocessor_maps_positions_through_includes(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "defs.p4").write_text("// header\n\nconst bit<8> A = 1;\nconst bit<8> B = nope;\n")
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include "inc/defs.p4"\n')
    with pytest.raises(CompileError) as exc:
        compile_file(main)
    assert exc.value.pos is not None
    assert (Path(exc.value.pos.file).name, exc.value.pos.line, exc.value.pos.col) == ("defs.p4", 4, 18)
    assert "unknown name 'nope'" in str(exc.value)
    pre = preprocess(main)
    assert "const bit<8> A = 1;" in pre.text



def test_includes_define_p4c_guards_and_version(tmp_path: Path) -> None:
    """Programs guard on p4c's include guards (``_CORE_P4_``, ``_V1_MODEL_P4_``) and test ``V1MODEL_VERSION``;
    including a file twice is harmless."""
    main = tmp_path / "guards.p4"
    main.write_text("#include <core.p4>\n#ifndef _CORE_P4_\n#error no core guard\n#endif\n"
                    "#include <v1model.p4>\n#include <core.p4>\n#ifndef _V1_MODEL_P4_\n#error no v1model guard\n"
                    "#endif\n#if V1MODEL_VERSION >= 20180101\nconst bit<8> NEW_V1MODEL = 1;\n#endif\n")
    assert "const bit<8> NEW_V1MODEL = 1;" in preprocess(main).text
    main.write_text(main.read_text().replace("_CORE_P4_\n#error", "_NO_SUCH_GUARD_\n#error"))
    with pytest.raises(CompileError, match="no core guard"):
        preprocess(main)

@pytest.mark.parametrize("src, message", [
    ("struct s_t { varbit<32> v; }", "varbit fields are only supported in headers"),
    ("header h_t { varbit<32> v; bit<8> after; }", "a varbit field must be the last field"),
    ("extern Foo { Foo(); } control C() { Foo() f; apply { } }\nV1Switch(C(), C(), C(), C(), C(), C()) main;",
     "unknown parser 'C'"),
    ("header h_t { bit<7> v; }", "headers must be a whole number of bytes"),
    ("const bit<8> X = 1 +;", "syntax error at ';'"),
    ("const bit<8> X = Y;", "unknown name 'Y'"),
    ("struct s { bit<8> a; bit<8> a; }", "duplicate field 'a'"),
    ("#if FOO(\n#endif", "cannot evaluate #if expression"),
    ("#ifdef X\n", "missing #endif"),
])
def test_unsupported_or_wrong_programs_give_positions(src: str, message: str) -> None:
    with pytest.raises(CompileError, match=message.replace("(", r"\(")) as exc:
        compile_source("#include <core.p4>\n#include <v1model.p4>\n" + src, "t.p4")
    assert "t.p4" in str(exc.value)


def test_mutated_programs_never_crash_the_compiler() -> None:
    """Randomly damaged real programs either compile or fail with a CompileError (never another exception)."""
    import random
    import re

    programs = OUR_PROGRAMS
    rng = random.Random(11)
    errors = 0
    for _ in range(50):
        toks = re.findall(r"\w+|[^\w\s]|\s+", rng.choice(programs).read_text())
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(len(toks))
            op = rng.random()
            if op < 0.4:
                del toks[j]
            elif op < 0.7:
                toks.insert(j, rng.choice(toks))
            else:
                k = (j + 7) % len(toks)
                toks[j], toks[k] = toks[k], toks[j]
        try:
            compile_source("".join(toks), "m.p4")
        except CompileError as exc:
            errors += 1
            assert exc.pos is None or exc.pos.line >= 1
    assert errors > 12   # most mutations are caught as errors, all of them cleanly


def test_atomic_blocks_header_equality_and_size_methods(source_switch: SourceSwitch) -> None:
    sw = source_switch("""
header p_t { bit<8> a; bit<16> b; }
struct headers { p_t x; p_t y; p_t z; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.x); pkt.extract(hdr.y); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        @atomic {
            sm.egress_spec = (hdr.x == hdr.y) ? 9w1 : 9w2;
        }
        if (hdr.z != hdr.z) { sm.egress_spec = 3; }
        hdr.x.a = (bit<8>) hdr.x.minSizeInBytes();
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.x); pkt.emit(hdr.y); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
""")
    assert sw.send(0, b"\x01\x00\x02" * 2) == [(1, b"\x03\x00\x02\x01\x00\x02")]
    assert sw.send(0, b"\x01\x00\x02\x01\x00\x03")[0][0] == 2


def test_wrong_argument_counts_are_errors_not_crashes() -> None:
    """Every call in real programs with an argument dropped or added fails cleanly (or still compiles)."""
    import random
    import re

    programs = OUR_PROGRAMS
    rng = random.Random(5)
    for _ in range(40):
        src = rng.choice(programs).read_text()
        m = rng.choice(list(re.finditer(r"\(([^()]*)\)", src)))
        args = m.group(1).split(",")
        if rng.random() < 0.5 and args:
            args.pop(rng.randrange(len(args)))
        else:
            args.append(rng.choice(args) if args[0] else " 1")
        try:
            compile_source(src[: m.start(1)] + ",".join(args) + src[m.end(1):], "m.p4")
        except CompileError as exc:
            assert "internal compiler error" not in str(exc), str(exc)


def test_structure_valued_expressions(source_switch: SourceSwitch) -> None:
    sw = source_switch("""
header p_t { bit<8> a; bit<16> b; }
struct headers { p_t x; p_t y; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.x); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; hdr.y = { b = hdr.x.b + 1, a = 8w7 }; }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.x); pkt.emit(hdr.y); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
""")
    assert sw.send(0, b"\x01\x00\x02") == [(1, b"\x01\x00\x02\x07\x00\x03")]
    with pytest.raises(CompileError, match="missing field"):
        compile_source("#include <v1model.p4>\nheader p_t { bit<8> a; bit<8> b; }\nstruct s { p_t h; }\n"
                       "control C(inout s v) { apply { v.h = { a = 1 }; } }\n"
                       "parser P(packet_in p, out s h, inout s m, inout standard_metadata_t sm) {"
                       " state start { transition accept; } }\n"
                       "control N(inout s h, inout s m) { apply { } }\n"
                       "control G(inout s h, inout s m, inout standard_metadata_t sm) {"
                       " C() c; apply { c.apply(h); } }\n"
                       "control D(packet_out p, in s h) { apply { } }\n"
                       "V1Switch(P(), N(), G(), G(), N(), D()) main;", "t.p4")
