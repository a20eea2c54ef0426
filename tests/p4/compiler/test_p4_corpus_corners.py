"""Constructs p4c's v1model packet-test corpus uses that the target lacked: each program runs packets and the
output bytes show BMv2's semantics (the programs here are written for these tests, not taken from the corpus)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4.errors import CompileError
from tests.p4.compiler.test_p4_frontend_corners import STACK_PROGRAM, program, run

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch

pytestmark = pytest.mark.unit

# h.a = n, h.b = sum of 1..n without the multiples of 3 and stopping past 7, h.c = n * n by a nested loop
LOOPS = program(cdecl="""
    action sums() {
        hdr.h.b = 0;
        for (bit<8> i = 1; i <= hdr.h.a; i = i + 1) {
            if (i > 7) { break; }
            if (i % 3 == 0) { continue; }
            hdr.h.b = hdr.h.b + i;
        }
    }
""", apply="""
    sums();
    hdr.h.c = 0;
    bit<8> j;
    for (bit<8> i = 0, j = 0; i < hdr.h.a; i = i + 1) {
        for (j = 0; j < hdr.h.a; j = j + 1) { hdr.h.c = hdr.h.c + 1; }
    }
""")


@pytest.mark.parametrize(("n", "total", "square"), [
    (0, 0, 0),                   # the condition fails first: no iteration
    (5, 1 + 2 + 4 + 5, 25),      # continue skips 3 and still runs the update
    (10, 1 + 2 + 4 + 5 + 7, 100),  # break at 8 leaves the loop
])
def test_for_loops_with_break_and_continue(source_switch: SourceSwitch, n: int, total: int, square: int) -> None:
    assert run(source_switch, LOOPS, bytes([n, 0xEE, 0xEE])) == bytes([n, total, square])


@pytest.mark.parametrize("stmt", ["break;", "continue;"])
def test_break_and_continue_outside_a_loop_are_errors(source_switch: SourceSwitch, stmt: str) -> None:
    with pytest.raises(CompileError, match="only allowed inside a for loop"):
        source_switch(program(apply=stmt))


# a plain local name before '<' after '(' is a comparison (it used to open type arguments)
COMPARE = program(apply="""
    bit<8> i = hdr.h.a;
    bit<8> k = hdr.h.b;
    if (i < k) { hdr.h.c = (i < 5 ? i : k); } else { hdr.h.c = (k < i ? 8w7 : 8w8); }
""")


@pytest.mark.parametrize(("a", "b", "c"), [(3, 9, 3), (6, 9, 9), (9, 3, 7)])
def test_a_local_name_compared_after_a_parenthesis(source_switch: SourceSwitch, a: int, b: int, c: int) -> None:
    assert run(source_switch, COMPARE, bytes([a, b, 0])) == bytes([a, b, c])


def test_deprecated_mark_to_drop_without_arguments_drops(source_switch: SourceSwitch) -> None:
    sw = source_switch(program(apply="if (hdr.h.a == 1) { mark_to_drop(); }"))
    assert sw.send(0, bytes([1, 2, 3])) == []
    assert sw.send(0, bytes([2, 2, 3])) == [(1, bytes([2, 2, 3]))]


# the cast's type does not type the arms: 2 takes the width of 3w1, so the negation wraps in 3 bits (7, 6)
NEG_MUX = program(apply="hdr.h.c = (bit<8>)-((hdr.h.a == 1) ? 2 : 3w1);")


@pytest.mark.parametrize(("a", "c"), [(0, 7), (1, 6)])
def test_conditional_arms_type_each_other_before_the_context(source_switch: SourceSwitch, a: int, c: int) -> None:
    assert run(source_switch, NEG_MUX, bytes([a, 0, 0])) == bytes([a, 0, c])


VARBIT_EQ = """
header v_t { bit<8> n; varbit<16> v; }
header r_t { bit<8> same; }
struct headers { v_t x; v_t y; r_t r; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.x, 16); pkt.extract(hdr.y, 16); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.r.setValid();
        hdr.r.same = hdr.x.v == hdr.y.v ? 8w1 : 8w0;
        if (hdr.x.v != hdr.y.v) { hdr.r.same = hdr.r.same | 2; }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("y", "same"), [(b"\x01\xab\xcd", 1), (b"\x01\xab\xce", 2)])
def test_varbit_equality_compares_the_bits_not_only_the_length(source_switch: SourceSwitch, y: bytes,
                                                                same: int) -> None:
    frame = b"\x00\xab\xcd" + y
    assert run(source_switch, VARBIT_EQ, frame) == frame + bytes([same])


# a loop in a parser state counts into metadata; a loop in a function returns from inside the loop
PARSER_LOOP = program(top="""
bit<8> first_over(in bit<8> lim) {
    for (bit<8> i = 0; i < 200; i = i + 1) { if (i * 3 > lim) { return i; } }
    return 255;
}""", parse="pkt.extract(hdr.h); meta.m = 0; for (bit<8> i = 0; i < hdr.h.a; i = i + 1) { meta.m = meta.m + 2; }",
    apply="hdr.h.c = meta.m + first_over(hdr.h.a);")


@pytest.mark.parametrize(("a", "c"), [(0, 0 + 1), (4, 8 + 2), (10, 20 + 4)])
def test_for_loops_in_a_parser_and_a_function(source_switch: SourceSwitch, a: int, c: int) -> None:
    assert run(source_switch, PARSER_LOOP, bytes([a, 0, 0])) == bytes([a, 0, c])


# for-in: b = sum of a .. a+3 but skipping 2 and stopping at 9; c = how many of {1, 5, a} are odd
FOR_IN = program(apply="""
    hdr.h.b = 0;
    bit<8> hi = hdr.h.a + 3;
    for (bit<8> i in hdr.h.a .. hi) {
        hi = 0;
        if (i == 2) { continue; }
        if (i == 9) { break; }
        hdr.h.b = hdr.h.b + i;
    }
    hdr.h.c = 0;
    for (bit<8> v in {8w1, 8w5, hdr.h.a}) {
        if (v[0:0] == 1) { hdr.h.c = hdr.h.c + 1; }
    }
""")


@pytest.mark.parametrize(("a", "b", "c"), [
    (1, 1 + 3 + 4, 3),          # 2 is skipped; the bounds were read once (hi = 0 inside does not stop it)
    (7, 7 + 8, 3),              # break at 9
    (250, 250 + 251 + 252 + 253, 2),   # hi = 253: no wrap past 255
])
def test_for_in_range_and_list(source_switch: SourceSwitch, a: int, b: int, c: int) -> None:
    assert run(source_switch, FOR_IN, bytes([a, 0xEE, 0xEE])) == bytes([a, b & 0xFF, c])


def test_for_in_empty_range_runs_no_iteration(source_switch: SourceSwitch) -> None:
    text = program(apply="hdr.h.c = 7; for (bit<8> i in hdr.h.a .. hdr.h.b) { hdr.h.c = i; }")
    assert run(source_switch, text, bytes([5, 4, 0])) == bytes([5, 4, 7])


def test_for_in_header_stack_gives_copies_of_every_element(source_switch: SourceSwitch) -> None:
    # c = s[0].v + s[1].v; writing the loop variable leaves the stack as it was
    text = STACK_PROGRAM.replace("@@APPLY@@", "hdr.h.c = 0; for (e_t e in hdr.s) { hdr.h.c = hdr.h.c + e.v; "
                                              "e.v = 0; }")
    assert run(source_switch, text, bytes([0, 0, 0, 0x11, 0x22])) == bytes([0, 0, 0x33, 0x11, 0x22])


def test_for_in_range_bound_of_another_type_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match="range bound is bit<4>, the loop variable bit<8>"):
        source_switch(program(apply="for (bit<8> i in 8w0 .. 4w3) { hdr.h.c = i; }"))


# a local declared in a parser state is in scope in that state's select (acyclic: inlined states)
STATE_LOCAL = program(parse="""pkt.extract(hdr.h); transition check; }
    state check { bit<8> d = hdr.h.a + 1; transition select(d) { 2: one; default: accept; } }
    state one { hdr.h.c = 0x11;""")
# the same in a loop of states (the state machine's loop): b counts down to 255, c counts the passes
STATE_LOCAL_LOOP = program(parse="""pkt.extract(hdr.h); transition check; }
    state check {
        bit<8> d = hdr.h.b;
        hdr.h.b = hdr.h.b - 1;
        hdr.h.c = hdr.h.c + 1;
        transition select(d) { 0: accept; default: check; }
    }
    state unused {""")


@pytest.mark.parametrize(("a", "c"), [(1, 0x11), (3, 0)])
def test_parser_state_local_is_seen_by_its_select(source_switch: SourceSwitch, a: int, c: int) -> None:
    assert run(source_switch, STATE_LOCAL, bytes([a, 0, 0])) == bytes([a, 0, c])


def test_parser_state_local_in_a_state_loop(source_switch: SourceSwitch) -> None:
    assert run(source_switch, STATE_LOCAL_LOOP, bytes([9, 2, 0])) == bytes([9, 255, 3])


# lookahead as a statement (its value dropped): consumes nothing, and a packet too short is a parser error
LOOKAHEAD_STMT = program(parse="pkt.lookahead<bit<32>>(); pkt.lookahead<h_t>(); pkt.extract(hdr.h);",
                         apply="if (sm.parser_error != error.NoError) { mark_to_drop(sm); }")


def test_lookahead_statement_reads_without_consuming(source_switch: SourceSwitch) -> None:
    sw = source_switch(LOOKAHEAD_STMT)
    assert sw.send(0, bytes([1, 2, 3, 4])) == [(1, bytes([1, 2, 3, 4]))]
    assert sw.send(0, bytes([1, 2, 3])) == []      # 3 bytes: lookahead<bit<32>> fails, ingress drops it


# tuple variables (a control's and a local), read by constant index; list items evaluated left to right:
# in {a, bump(a)} the first item is a's value before bump writes it
TUPLES = program(top="bit<8> bump(inout bit<8> x) { x = x + 1; return 8w9; }", cdecl="""
    tuple<bit<8>, bit<8>> ct = { hdr.h.a, bump(hdr.h.a) };
""", apply="""
    tuple<bit<8>, bit<8>> lt = ct;
    hdr.h.b = lt[0];
    hdr.h.c = lt[1] + ct[0];
""")


def test_tuple_variables_and_left_to_right_list_items(source_switch: SourceSwitch) -> None:
    # ct = {5, 9} and a becomes 6; b = ct[0] = 5, c = 9 + 5
    assert run(source_switch, TUPLES, bytes([5, 0, 0])) == bytes([6, 5, 14])


def test_tuple_index_must_be_a_constant_in_range(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match=r"tuple<bit<8>, bit<8>> is indexed by a constant 0\.\.1"):
        source_switch(program(apply="tuple<bit<8>, bit<8>> t = {1, 2}; hdr.h.c = t[2];"))


def test_extract_into_dont_care_skips_a_header(source_switch: SourceSwitch) -> None:
    # extract<h_t>(_) parses a whole h_t and keeps nothing: h is the second three bytes
    text = program(parse="pkt.extract<h_t>(_); pkt.extract(hdr.h);")
    assert run(source_switch, text, bytes([1, 2, 3, 4, 5, 6, 7])) == bytes([4, 5, 6, 7])
    sw = source_switch(program(parse="pkt.extract<h_t>(_); pkt.extract(hdr.h);",
                               apply="if (sm.parser_error != error.NoError) { mark_to_drop(sm); }"))
    assert sw.send(0, bytes([1, 2, 3, 4, 5])) == []        # too short for both: PacketTooShort, dropped


# A control-level varbit variable takes a header's varbit field and gives it back (swap of two 1- or 2-byte fields)
VARBIT_SWAP = """
header l_t { bit<8> len; }
header v_t { varbit<16> v; }
struct headers { l_t l; v_t a; v_t b; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.l);
        pkt.extract(hdr.a, (bit<32>)hdr.l.len);
        pkt.extract(hdr.b, (bit<32>)hdr.l.len);
        transition accept;
    }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    varbit<16> s;
    apply { sm.egress_spec = 1; s = hdr.a.v; hdr.a.v = hdr.b.v; hdr.b.v = s; }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("frame", "expected"), [
    (bytes([8, 0x11, 0x22, 0xEE]), bytes([8, 0x22, 0x11, 0xEE])),
    (bytes([16, 0x11, 0x22, 0x33, 0x44]), bytes([16, 0x33, 0x44, 0x11, 0x22])),
])
def test_varbit_variable_assigned_from_and_to_header_fields(source_switch: SourceSwitch, frame: bytes,
                                                           expected: bytes) -> None:
    assert run(source_switch, VARBIT_SWAP, frame) == expected


# Direct type invocation (C.apply(..) / P.apply(..) without an instance) and a control instance passed as a
# constructor argument: h.a + 1 twice from Add.apply, h.b + 2 through Twice(add), h.c extracted by Sub.apply
DIRECT = program(top="""
control AddT(inout bit<8> x);
control Add(inout bit<8> x) { apply { x = x + 1; } }
control Twice(inout bit<8> x)(AddT c) { apply { c.apply(x); c.apply(x); } }
parser Sub(packet_in p, out h_t h) { state start { p.extract(h); transition accept; } }
""", parse="Sub.apply(pkt, hdr.h);", cdecl="Add() add; Twice(add) twice;", apply="""
    Add.apply(hdr.h.a);
    Add.apply(hdr.h.a);
    twice.apply(hdr.h.b);
""")


def test_direct_type_invocation_and_control_constructor_argument(source_switch: SourceSwitch) -> None:
    assert run(source_switch, DIRECT, bytes([0x10, 0x20, 0x30, 0xEE])) == bytes([0x12, 0x22, 0x30, 0xEE])


def test_direct_type_invocation_of_a_non_block_type_is_an_error(source_switch: SourceSwitch) -> None:
    with pytest.raises(CompileError, match="'h_t' is not a control or parser type"):
        source_switch(program(apply="h_t.apply(hdr.h.a);"))
