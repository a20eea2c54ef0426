"""Front-end corners of issue 21 Part A: each program runs one packet and the output bytes show BMv2's semantics."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4.errors import CompileError

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch

pytestmark = pytest.mark.unit

TEMPLATE = """
header h_t { bit<8> a; bit<8> b; bit<8> c; }
struct headers { h_t h; }
struct metadata { bit<8> m; }
@@TOP@@
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    @@PDECL@@
    state start { @@PARSE@@ transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    @@CDECL@@
    apply { sm.egress_spec = 1; @@APPLY@@ }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def program(top: str = "", pdecl: str = "", parse: str = "pkt.extract(hdr.h);", cdecl: str = "",
            apply: str = "") -> str:
    """The three-byte-header test program with the given pieces filled in."""
    return (TEMPLATE.replace("@@TOP@@", top).replace("@@PDECL@@", pdecl).replace("@@PARSE@@", parse)
            .replace("@@CDECL@@", cdecl).replace("@@APPLY@@", apply))


def run(source_switch: SourceSwitch, text: str, frame: bytes) -> bytes:
    """Send ``frame`` on port 0 through ``text`` compiled; the one packet that leaves on port 1."""
    sw = source_switch(text)
    out = sw.send(0, frame)
    assert [port for port, _ in out] == [1]
    return out[0][1]


def test_slice_of_slice_lvalue_writes_only_its_bits(source_switch: SourceSwitch) -> None:
    # c[7:4][1:0] is c[5:4] (0x81 -> 0xB1), b[6:1][5:2] is b[6:3] (0xFF -> 0x87); all other bits stay
    text = program(apply="hdr.h.c[7:4][1:0] = 2w3; hdr.h.b[6:1][5:2] = 4w0;")
    assert run(source_switch, text, bytes([0x11, 0xFF, 0x81, 0xEE])) == bytes([0x11, 0x87, 0xB1, 0xEE])


def test_slice_of_slice_out_of_range_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match=r"slice \[4:0\] out of range for a 4-bit value"):
        source_switch(program(apply="hdr.h.c[7:4][4:0] = 5w3;"))


def test_slice_as_inout_argument_copies_back_into_the_slice(source_switch: SourceSwitch) -> None:
    # inc(c[3:0]) with c = 0x2F: the low nibble wraps 0xF -> 0x0 and the high nibble is untouched (no carry)
    text = program(cdecl="action inc(inout bit<4> v) { v = v + 1; }\n"
                         "action set_out(out bit<2> v) { v = 2w1; }",
                   apply="inc(hdr.h.c[3:0]); inc(hdr.h.a[7:4]); set_out(hdr.h.b[7:4][3:2]);")
    assert run(source_switch, text, bytes([0x15, 0x00, 0x2F])) == bytes([0x25, 0x40, 0x20])


def test_top_level_register_and_counter_are_shared_by_the_blocks(source_switch: SourceSwitch) -> None:
    # ingress stores a in top_r[1] and hands the previous packet's value out in c; the CLI sees the same instances
    text = program(top="register<bit<8>>(4) top_r;\ncounter(2, CounterType.packets) top_c;",
                   apply="top_r.read(hdr.h.c, 1); top_r.write(1, hdr.h.a); top_c.count(1);")
    sw = source_switch(text)
    assert sw.send(0, bytes([0x42, 0, 0]))[0][1] == bytes([0x42, 0, 0])
    assert sw.send(0, bytes([0x07, 0, 0]))[0][1] == bytes([0x07, 0, 0x42])
    assert sw.cmd("register_read top_r 1") == ["top_r[1]= 7"]
    assert "packets=2" in sw.cmd("counter_read top_c 1")[0]


def test_block_variable_initialisers_run_per_packet_when_the_block_starts(source_switch: SourceSwitch) -> None:
    # x is read from a when ingress starts (before apply writes a); the parser's first is the packet's first
    # byte, read before extract; a second packet gets its own values, not the first packet's
    text = program(pdecl="bit<8> first = pkt.lookahead<bit<8>>();",
                   parse="pkt.extract(hdr.h); hdr.h.b = first + 1;",
                   cdecl="bit<8> x = hdr.h.a; bit<8> y = x + hdr.h.b;",
                   apply="hdr.h.a = 5; hdr.h.c = x ^ y;")
    sw = source_switch(text)
    assert sw.send(0, bytes([0x30, 0, 0]))[0][1] == bytes([5, 0x31, 0x30 ^ 0x61])
    assert sw.send(0, bytes([0x02, 9, 9]))[0][1] == bytes([5, 0x03, 0x02 ^ 0x05])


def test_explicit_type_arguments_on_extract_and_emit(source_switch: SourceSwitch) -> None:
    text = program(parse="pkt.extract<h_t>(hdr.h);", apply="hdr.h.c = hdr.h.a < hdr.h.b ? 8w1 : 8w2;")
    text = text.replace("pkt.emit(hdr.h);", "pkt.emit<h_t>(hdr.h);")
    assert run(source_switch, text, bytes([1, 2, 0, 0xAB])) == bytes([1, 2, 1, 0xAB])


def test_type_argument_that_does_not_match_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match=r"type argument <bit<8>> does not match the argument's type h_t"):
        source_switch(program(parse="pkt.extract<bit<8>>(hdr.h);"))


def test_named_arguments_bind_by_name_not_position(source_switch: SourceSwitch) -> None:
    # arguments given in the other order than the parameters: each lands in its own parameter
    text = program(top="bit<8> sub(in bit<8> x, in bit<8> y) { return x - y; }\n"
                       "register<bit<8>>(2) r;",
                   parse="pkt.extract(hdr = hdr.h);",
                   cdecl="action seta(bit<8> hi, bit<8> lo) { hdr.h.a = (hi << 4) | lo; }\n"
                         "action mv(out bit<8> dst, in bit<8> src) { dst = src + 1; }",
                   apply="seta(lo = 8w0x05, hi = 8w0x0A); mv(src = hdr.h.b, dst = hdr.h.c);"
                         "r.write(value = sub(y = 8w1, x = 8w10), index = 1); r.read(index = 1, result = meta.m);"
                         "hdr.h.b = hdr.h.b + meta.m;")
    assert run(source_switch, text, bytes([0xFF, 0x10, 0x20])) == bytes([0xA5, 0x19, 0x11])


def test_named_arguments_must_match_the_parameters(source_switch: SourceSwitch) -> None:
    cdecl = "action setc(bit<8> v) { hdr.h.c = v; }"
    with pytest.raises(CompileError, match=r"arguments named \(w\), its parameters are \(v\)"):
        source_switch(program(cdecl=cdecl, apply="setc(w = 8w1);"))
    with pytest.raises(CompileError, match="either all arguments are named or none is"):
        source_switch(program(top="register<bit<8>>(2) r;", apply="r.write(0, value = 8w1);"))


def test_nested_list_and_struct_initialisers(source_switch: SourceSwitch) -> None:
    # each inner list fills its own member; a header filled by a list becomes valid (so hdr.h = w.h is emitted)
    text = program(top="struct pair_t { bit<8> x; bit<8> y; }\nstruct two_t { pair_t p; pair_t q; }\n"
                       "struct wrap_t { h_t h; bit<8> k; }",
                   apply="two_t t = { { 1, 2 }, { 3, 4 } };"
                         "two_t u = { p = { x = 10, y = 20 }, q = { 30, 40 } };"
                         "wrap_t w = { { 7, 8, 9 }, 5 };"
                         "hdr.h.setInvalid(); hdr.h = w.h;"
                         "hdr.h.a = t.q.x + u.q.y; hdr.h.b = t.p.y + u.p.x; hdr.h.c = w.h.c + w.k;")
    assert run(source_switch, text, bytes([0, 0, 0, 0xEE])) == bytes([43, 12, 14, 0xEE])


def test_nested_list_initialiser_of_the_wrong_shape_is_an_error(source_switch: SourceSwitch) -> None:
    top = "struct pair_t { bit<8> x; bit<8> y; }\nstruct two_t { pair_t p; pair_t q; }"
    with pytest.raises(CompileError, match="pair_t has 2 fields, the list has 3"):
        source_switch(program(top=top, apply="two_t t = { { 1, 2 }, { 3, 4, 5 } };"))


FUNCTIONS = """
struct pair_t { bit<8> x; bit<8> y; }
h_t mk(in bit<8> v) { h_t x; x.setValid(); x.a = v; x.b = v; x.c = v; return x; }
h_t none() { h_t x; return x; }
pair_t mkp(in bit<8> v) { return { v, v + 1 }; }
"""


def test_functions_return_headers_and_structs(source_switch: SourceSwitch) -> None:
    # two calls in one expression keep their own results (mk(1) != mk(2)); the header result is valid
    text = program(top=FUNCTIONS,
                   apply="hdr.h = mk(hdr.h.a + 1); if (mk(1) == mk(2)) { hdr.h.b = 0xFF; }"
                         "pair_t p = mkp(hdr.h.c); hdr.h.c = p.x + p.y;")
    assert run(source_switch, text, bytes([0x10, 0, 0, 0xEE])) == bytes([0x11, 0x11, 0x23, 0xEE])


def test_function_returning_an_invalid_header_invalidates_the_target(source_switch: SourceSwitch) -> None:
    text = program(top=FUNCTIONS, apply="hdr.h = none();")
    assert run(source_switch, text, bytes([0x10, 0, 0, 0xEE])) == bytes([0xEE])


SUBPARSER = """
header h_t { bit<8> a; bit<8> b; bit<8> c; }
header t_t { bit<8> v; }
struct headers { h_t h; t_t t; }
struct metadata { bit<8> m; }
parser Sub(packet_in pkt, out h_t h, inout bit<8> seen) {
    bit<8> local = 3;
    state start {
        pkt.extract(h); seen = seen + local; local = 100;
        transition select(h.a) { 0xFF: reject; default: accept; }
    }
}
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    Sub() sub;
    state start { meta.m = 10; sub.apply(pkt, hdr.h, meta.m); transition next; }
    state next { pkt.extract(hdr.t); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (sm.parser_error != error.NoError) { sm.egress_spec = 2; }
        hdr.h.b = meta.m;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.t); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_subparser_runs_its_states_and_the_caller_continues_after_it(source_switch: SourceSwitch) -> None:
    # Sub extracts h and adds its local (3, fresh on each packet) to meta.m (inout, 10); P then extracts t from
    # where Sub stopped
    sw = source_switch(SUBPARSER)
    assert sw.send(0, bytes([0x01, 0, 0x22, 0x77, 0xEE])) == [(1, bytes([0x01, 13, 0x22, 0x77, 0xEE]))]
    assert sw.send(0, bytes([0x02, 0, 0x33, 0x66])) == [(1, bytes([0x02, 13, 0x33, 0x66]))]


def test_subparser_reject_is_the_callers_reject(source_switch: SourceSwitch) -> None:
    # as p4c inlines it: Sub's reject ends P's parsing where Sub stopped (after h), out/inout arguments are not
    # copied back (h stays invalid, so only the payload leaves), and P's next state does not run
    sw = source_switch(SUBPARSER)
    assert sw.send(0, bytes([0xFF, 0, 0, 0x77])) == [(1, bytes([0x77]))]
    # an error inside Sub (packet too short) is the parser's error
    assert sw.send(0, bytes([0x01, 0])) == [(2, bytes([0x01, 0]))]


def test_subparser_apply_outside_a_parser_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match="parser Sub can only be instantiated inside a parser"):
        source_switch(SUBPARSER.replace("control VC(inout headers hdr, inout metadata meta) { apply { } }",
                                        "control VC(inout headers hdr, inout metadata meta) { Sub() s; apply { } }"))


BOUND_ACTIONS = """
action setb(out bit<8> v) { v = 8w7; }
action inc(inout bit<8> v, bit<8> d) { v = v + d; }
action addto(in bit<8> x, bit<8> d) { hdr.h.c = x + d; }
action set_then_exit(out bit<8> v) { v = 8w9; exit; }
"""


def test_table_bound_out_and_inout_arguments_are_written_back(source_switch: SourceSwitch) -> None:
    # the actions list binds each directional parameter; the default binds the same plus its data (p4c's form)
    text = program(cdecl=BOUND_ACTIONS + """
table t { key = { hdr.h.a: exact; } actions = { setb(hdr.h.b); inc(hdr.h.c); addto(hdr.h.a); NoAction; }
          default_action = inc(hdr.h.c, 3); }""", apply="t.apply();")
    sw = source_switch(text)
    assert run_switch(sw, bytes([1, 0, 0x10])) == bytes([1, 0, 0x13])          # default: c += 3
    sw.cmd("table_add t setb 1 =>", "table_add t inc 2 => 5", "table_add t addto 4 => 0x20")
    assert run_switch(sw, bytes([1, 0, 0x10])) == bytes([1, 7, 0x10])          # out: b = 7, c untouched
    assert run_switch(sw, bytes([2, 1, 0xFE])) == bytes([2, 1, 0x03])          # inout wraps: 0xFE + 5
    assert run_switch(sw, bytes([4, 0, 0])) == bytes([4, 0, 0x24])             # in: c = a + 0x20


def test_const_entries_and_named_bindings_of_directional_arguments(source_switch: SourceSwitch) -> None:
    # entries may give the action data alone or with the bound directional arguments first; names bind too
    text = program(cdecl=BOUND_ACTIONS + """
table t { key = { hdr.h.a: exact; } actions = { setb(v = hdr.h.b); inc(hdr.h.c); }
          const entries = { 1 : inc(2); 2 : inc(hdr.h.c, 4); 3 : setb(hdr.h.b); }
          default_action = setb(); }""", apply="t.apply();")
    sw = source_switch(text)
    assert [run_switch(sw, bytes([a, 0, 0x10])) for a in (1, 2, 3, 9)] == [
        bytes([1, 0, 0x12]), bytes([2, 0, 0x14]), bytes([3, 7, 0x10]), bytes([9, 7, 0x10])]


def test_exit_in_a_table_bound_action_still_copies_out(source_switch: SourceSwitch) -> None:
    # exit copies out/inout arguments back (P4-16 exit statement); the statement after apply() never runs
    text = program(cdecl=BOUND_ACTIONS + "table t { actions = { set_then_exit(hdr.h.b); } "
                                         "default_action = set_then_exit(hdr.h.b); }",
                   apply="t.apply(); hdr.h.c = 8w1;")
    assert run(source_switch, text, bytes([0, 0, 0])) == bytes([0, 9, 0])


def test_an_unbound_directional_parameter_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match=r"action I.setb has 1 directional parameter\(s\) \(v\): the actions "
                                           r"list binds 0 argument\(s\)"):
        source_switch(program(cdecl=BOUND_ACTIONS + "table t { actions = { setb; } }", apply="t.apply();"))


def run_switch(sw, frame: bytes) -> bytes:
    """One frame through an already built switch: the packet that leaves on port 1."""
    out = sw.send(0, frame)
    assert [port for port, _ in out] == [1]
    return out[0][1]


STACK_PROGRAM = """
header h_t { bit<8> a; bit<8> b; bit<8> c; }
header e_t { bit<8> v; }
struct headers { h_t h; e_t[2] s; }
struct metadata { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.s[0]); pkt.extract(hdr.s[1]); transition accept; } }
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action setv(out bit<8> x) { x = 3; hdr.h.b = 0x44; }
    table t { key = { hdr.s[hdr.h.a].v : exact; } actions = { setv(hdr.h.c); NoAction; } default_action = NoAction; }
    apply { sm.egress_spec = 1; @@APPLY@@ } }
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.s); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("apply", "in_range", "out_of_range"), [
    # a read on the right of = gives the left side an unset value (0), not just the element
    ("hdr.h.c = hdr.s[hdr.h.a].v + 5;", "0100271122", "0500001122"),
    ("bit<8> x = hdr.s[hdr.h.a].v; hdr.h.c = x + 1;", "0100231122", "0500011122"),
    ("hdr.h.c[3:0] = hdr.s[hdr.h.a].v[3:0];", "0100e21122", "0500e01122"),
    # a write, a method call, an action call with an out target there: nothing happens, the packet goes on
    ("hdr.s[hdr.h.a].v = 8w7; hdr.h.c = 1;", "0100011107", "0500011122"),
    ("hdr.s[hdr.h.a].setInvalid(); hdr.h.c = 2;", "01000211", "0500021122"),
    ("setv(hdr.s[hdr.h.a].v);", "0144ee1103", "0500ee1122"),
    # an if condition: the else branch
    ("if (hdr.s[hdr.h.a].isValid()) { hdr.h.c = 5; } else { hdr.h.c = 6; }", "0100051122", "0500061122"),
])
def test_a_run_time_stack_index_out_of_range_in_a_control_is_p4c_bmv2s(
        source_switch: SourceSwitch, apply: str, in_range: str, out_of_range: str) -> None:
    # p4c lowers each statement with a run-time index into one case per index (BMv2 then never sees the index):
    # an index past the stack takes the statement's out-of-range branch; the packet is not dropped
    sw = source_switch(STACK_PROGRAM.replace("@@APPLY@@", apply))
    assert run_switch(sw, bytes.fromhex("0100ee1122")).hex() == in_range       # a = 1: s[1]
    assert run_switch(sw, bytes.fromhex("0500ee1122")).hex() == out_of_range   # a = 5: past s[1]


def test_a_table_key_out_of_a_stack_out_of_range_is_zero(source_switch: SourceSwitch) -> None:
    sw = source_switch(STACK_PROGRAM.replace("@@APPLY@@", "t.apply();"))
    sw.cmd("table_add t setv 0 =>")
    assert run_switch(sw, bytes.fromhex("0500ee1122")).hex() == "0544031122"   # key 0 matches: setv
    assert run_switch(sw, bytes.fromhex("0100ee1122")).hex() == "0100ee1122"   # key s[1].v = 0x22: a miss


@pytest.mark.parametrize(("apply", "out"), [
    ("hdr.s2 = hdr.s; if (hdr.s2 == hdr.s) { hdr.h.c = 1; } else { hdr.h.c = 2; }", "050001112211223344"),
    # s2[0] invalid against a valid s[0]: not equal though s2[1] == s[1]
    ("hdr.s2[1] = hdr.s[1]; if (hdr.s2 == hdr.s) { hdr.h.c = 1; } else { hdr.h.c = 2; }", "0500021122223344"),
    ("if (hdr.s2 != hdr.s) { hdr.h.c = 3; }", "05000311223344"),
    ("if (hdr.s2 == hdr.s2) { hdr.h.c = 4; }", "05000411223344"),        # all invalid on both sides
])
def test_whole_header_stack_assignment_and_equality(source_switch: SourceSwitch, apply: str, out: str) -> None:
    # == on stacks compares element by element as headers (both invalid, or both valid with equal fields)
    text = STACK_PROGRAM.replace("e_t[2] s; }", "e_t[2] s; e_t[2] s2; }")
    text = text.replace("pkt.emit(hdr.s); }", "pkt.emit(hdr.s); pkt.emit(hdr.s2); }").replace("@@APPLY@@", apply)
    assert run_switch(source_switch(text), bytes.fromhex("0500ee11223344")).hex() == out


SUB_CONTROL = "control Sub(inout h_t h)(bit<8> k, bit<8> j = 8w1) { apply { h.c = k + j; } }"
SUB_PARSER = "parser SubP(packet_in pkt, inout h_t h)(bit<8> k) { state start { h.c = k; transition accept; } }"


@pytest.mark.parametrize(("top", "pdecl", "parse", "cdecl", "apply", "c"), [
    (SUB_CONTROL, "", "pkt.extract(hdr.h);", "Sub(8w7) sub;", "sub.apply(hdr.h);", 8),      # j's default
    (SUB_CONTROL, "", "pkt.extract(hdr.h);", "Sub(j = 8w2, k = 8w6) sub;", "sub.apply(hdr.h);", 8),
    (SUB_CONTROL, "", "pkt.extract(hdr.h);", "Sub(8w1, 8w1) s1; Sub(8w5) s2;", "s1.apply(hdr.h); "
     "hdr.h.b = hdr.h.c; s2.apply(hdr.h);", 6),                                              # per instance
    (SUB_PARSER, "SubP(8w9) sub;", "pkt.extract(hdr.h); sub.apply(pkt, hdr.h);", "", "", 9),
    ("", "", "pkt.extract(hdr.h);", "register<bit<8>>(size = 4) r;", "r.write(3, 8w4); r.read(hdr.h.c, 3);", 4),
])
def test_constructor_parameters_of_controls_parsers_and_externs(
        source_switch: SourceSwitch, top: str, pdecl: str, parse: str, cdecl: str, apply: str, c: int) -> None:
    text = program(top=top, pdecl=pdecl, parse=parse, cdecl=cdecl, apply=apply)
    assert run(source_switch, text, bytes([5, 0, 0xEE]))[2] == c


@pytest.mark.parametrize(("cdecl", "error"), [
    ("Sub() sub;", r"control Sub: constructor argument 'k' is missing"),
    ("Sub(q = 8w1) sub;", r"control Sub has no constructor parameter q \(its parameters: k, j\)"),
    ("Sub(8w1, 8w2, 8w3) sub;", r"control Sub takes 2 constructor argument\(s\), got 3"),
    ("register<bit<8>>(sz = 4) r;", r"register has no constructor parameter sz \(its parameters: size, "
                                    r"initial_value\)"),
])
def test_bad_constructor_arguments_are_errors(source_switch: SourceSwitch, cdecl: str, error: str) -> None:
    with pytest.raises(CompileError, match=error):
        source_switch(program(top=SUB_CONTROL, cdecl=cdecl, apply="sub.apply(hdr.h);" if "Sub" in cdecl else ""))


VARBIT_PROGRAM = """
header h_t { bit<8> a; bit<8> b; bit<16> ck; }
header v_t { bit<8> len; varbit<32> opt; }
struct headers { h_t h; v_t v; v_t w; }
struct metadata { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.v, (bit<32>)hdr.h.a * 8); transition accept; } }
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; @@APPLY@@ } }
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply {
    update_checksum(true, { hdr.h.a, hdr.h.b, hdr.v.len, hdr.v.opt }, hdr.h.ck, HashAlgorithm.csum16); } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.v); pkt.emit(hdr.w); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("frame", "apply", "out"), [
    # the checksum covers the varbit at its current length: 02 01 07 aa bb padded to 16-bit words -> 0x3b54
    ("0201000007aabbcc", "", "02013b5407aabbcc"),
    ("0101000007aabbcc", "", "0101f75407aabbcc"),            # one byte of varbit: 01 01 07 aa -> 0xf754
    ("0201000007aabbcc", "hdr.w = hdr.v;", "02013b5407aabb07aabbcc"),          # the header with its varbit
    ("0201000007aabbcc", "hdr.w.setValid(); hdr.w.len = 1; hdr.w.opt = hdr.v.opt;", "02013b5407aabb01aabbcc"),
])
def test_varbit_in_a_checksum_field_list_and_varbit_assignment(
        source_switch: SourceSwitch, frame: str, apply: str, out: str) -> None:
    sw = source_switch(VARBIT_PROGRAM.replace("@@APPLY@@", apply))
    assert run_switch(sw, bytes.fromhex(frame)).hex() == out


UNION_STACK_PROGRAM = """
header h_t { bit<8> a; bit<8> b; bit<8> c; }
header e_t { bit<8> v; }
header f_t { bit<16> w; }
header_union u_t { e_t e; f_t f; }
struct headers { h_t h; u_t[3] us; }
struct metadata { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition select(hdr.h.a) { 1: one; 2: two; default: accept; } }
    state one { pkt.extract(hdr.us.next.e); transition select(hdr.h.b) { 0: accept; default: two; } }
    state two { pkt.extract(hdr.us.next.f); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; hdr.h.c = (bit<8>)hdr.us.lastIndex; @@APPLY@@ } }
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.us); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("frame", "apply", "out"), [
    ("0101001122334455", "", "0101011122334455"),          # us[0].e = 11, us[1].f = 2233: lastIndex 1
    ("0100001122334455", "", "0100001122334455"),          # us[0].e only: lastIndex 0
    ("0101001122334455", "hdr.us.push_front(1); hdr.us[0].e.setValid(); hdr.us[0].e.v = 0x99;",
     "010101991122334455"),                                # both members of us[0] invalid after the push
    ("0101001122334455", "hdr.us.pop_front(1);", "01010122334455"),
    ("0101001122334455", "if (hdr.us[1].isValid() && hdr.us[1].f.isValid() && !hdr.us[1].e.isValid()) "
                         "{ hdr.h.b = 7; }", "0107011122334455"),
    ("0101001122334455", "hdr.us[0].f.setValid(); hdr.us[0].f.w = 0xabcd;", "010101abcd22334455"),  # e goes
])
def test_header_unions_in_a_header_stack(source_switch: SourceSwitch, frame: str, apply: str, out: str) -> None:
    # extract into hs.next.member advances nextIndex; push/pop move whole unions; a union emits its valid member
    sw = source_switch(UNION_STACK_PROGRAM.replace("@@APPLY@@", apply))
    assert run_switch(sw, bytes.fromhex(frame)).hex() == out


def test_a_struct_of_fixed_width_fields_inside_a_header(source_switch: SourceSwitch) -> None:
    # the struct's fields sit on the wire in its place (nested structs too); they read and write as fields
    top = "struct pair_t { bit<4> hi; bit<4> lo; }\nstruct inner_t { pair_t p; bit<8> x; }\n" \
          "header s_t { bit<8> a; inner_t s; bit<8> c; }"
    text = program(top=top, pdecl="s_t sh;", parse="pkt.extract(hdr.h); pkt.extract(sh); hdr.h.c = sh.s.p.lo ++ "
                   "sh.s.p.hi; hdr.h.b = sh.s.x; hdr.h.a = sh.c;")
    assert run(source_switch, text, bytes.fromhex("000000" "01abcdef")) == bytes.fromhex("efcdba")   # sh consumed
    with pytest.raises(CompileError, match=r"header field 'v' must be bit<N>, int<N>, bool, varbit<N>, a "
                                           r"serializable enum or a struct of those \(no varbit\), not m_t"):
        source_switch(program(top="struct m_t { bit<8> x; h_t h; }\nheader bad_t { m_t v; }"))
