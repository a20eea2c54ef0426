"""Evaluation order and side effects (issue 21 Part A): one P4 program per item, run through the pipeline, and
the lowering pass (``p4.compiler.lower``) on its own."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from p4.compiler import Compiler, lower
from p4.compiler.ir import BOOL, E, Emitter
from p4.preprocess import Preprocessor
from p4.types import BitT
from tests.p4.compiler.conftest import V1_PRELUDE

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import ProgramSwitch, SourceSwitch

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parent / "data" / "evalorder"


def _forward(program_switch: ProgramSwitch, name: str, frame: bytes) -> bytes:
    """Send ``frame`` into port 0 of the program ``name``; the one packet out of port 1."""
    out = program_switch(DATA / f"{name}.p4").send(0, frame)
    assert [port for port, _ in out] == [1]
    return out[0][1]


@pytest.mark.parametrize(("a", "expect"), [
    # a, n_or, n_and, n_then, n_else, n_if, r, flags
    (1, [1, 0, 1, 1, 0, 0, 7, 0b011]),    # || decided by a: bump skipped; && and the then-arm run
    (0, [0, 1, 0, 0, 1, 1, 9, 0b101]),    # && decided by a: bump skipped; || , the else-arm and the if run
])
def test_short_circuit_and_conditional_evaluate_only_what_the_value_needs(
        program_switch: ProgramSwitch, a: int, expect: list[int]) -> None:
    assert list(_forward(program_switch, "short_circuit", bytes([a] + [0] * 7))) == expect


def test_left_operand_and_earlier_arguments_are_read_before_a_call_that_modifies_them(
        program_switch: ProgramSwitch) -> None:
    v, w, local, u = 3, 5, 4, 7
    out = _forward(program_switch, "left_to_right", bytes([v, 0, w, 0, local, u, 0]))
    assert list(out) == [v + 10,                     # the call's inout copy-out
                         v + (v + 10),               # left v read first: 3 + 13, not 13 + 13
                         w + 10, 1,                  # w == add10(w) compared the old w
                         local + (local + 10),
                         u + 10, u]                  # first(u, add10(u)): the first argument read first


@pytest.mark.parametrize(("sel", "o", "io"), [
    (0, 0x11, 5 + 1),          # an action exits: its out and inout arguments are still copied back
    (1, 0x11, 5 + 1 + 1),      # an action exits inside another: both copy out, the outer's rest does not run
    (2, 0x33, 5 + 3),          # a control exits: its arguments are copied back too
])
def test_exit_still_copies_out_and_inout_arguments_back(program_switch: ProgramSwitch, sel: int, o: int,
                                                         io: int) -> None:
    out = _forward(program_switch, "exit_copy_out", bytes([sel, 0, 5, 0]))
    assert list(out) == [sel, o, io, 0]          # ``after`` stays 0: the apply block ended at the exit


NESTED = """
header h_t { bit<8> a; bit<8> b; bit<8> n; bit<8> r; }
struct headers { h_t h; }
struct metadata { }
bool bump(inout bit<8> n) { n = n + 1; return true; }
bit<8> cnt(inout bit<8> n) { n = n + 1; return n; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (hdr.h.a == 1 || (hdr.h.b == 1 && bump(hdr.h.n))) {
            hdr.h.r = hdr.h.a == 2 ? cnt(hdr.h.n) : (hdr.h.b == 2 ? 8w50 : cnt(hdr.h.n) + cnt(hdr.h.n));
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("a", "b", "n", "r"), [
    (1, 0, 2, 1 + 2),    # || decided: no bump; cnt + cnt reads 1 then 2
    (0, 1, 3, 2 + 3),    # bump runs (n = 1), then cnt + cnt reads 2 then 3
    (0, 0, 0, 0),        # && decided by b: nothing runs
    (1, 2, 0, 50),       # the inner ?: takes the constant arm: no cnt at all
])
def test_nested_short_circuits_and_conditionals_keep_the_order(source_switch: SourceSwitch, a: int, b: int,
                                                               n: int, r: int) -> None:
    out = source_switch(NESTED).send(0, bytes([a, b, 0, 0]))
    assert out == [(1, bytes([a, b, n, r]))]


# --- the lowering pass alone, on fragments ---------------------------------------------------------------

def _compiler() -> Compiler:
    """A real compilation state (after preprocessing only): the lowering needs its emitter and temp names."""
    c = Compiler(Preprocessor().run_text(V1_PRELUDE, "t.p4"), "t")
    c.out = Emitter()
    return c


def _call_operand(c: Compiler, result: str) -> lower.Captured:
    """An operand whose code emits a statement (like a call): it appends to ``calls`` and yields ``result``."""
    def build() -> E:
        c.out("calls.append(1)")
        return E(result, BOOL)
    return lower.capture(c, build)


def _run(c: Compiler, result: E, **env: Any) -> tuple[Any, int]:
    """Execute the emitted lines and ``result``: its value and how many times the captured statement ran."""
    scope: dict[str, Any] = {"calls": [], **env}
    exec("\n".join(c.out.lines) + f"\n_result = {result.src}", scope)  # noqa: S102 - the generated code, as the pipeline runs it
    return scope["_result"], len(scope["calls"])


def test_capture_takes_the_emitted_statements_off_the_current_emitter() -> None:
    c = _compiler()
    got = _call_operand(c, "True")
    assert got.lines == ["calls.append(1)"] and got.e.src == "True" and c.out.lines == []


@pytest.mark.parametrize(("op", "a", "value", "calls"), [
    ("||", True, True, 0), ("||", False, False, 1), ("&&", False, False, 0), ("&&", True, False, 1)])
def test_short_circuit_guards_the_right_operand(op: str, a: bool, value: bool, calls: int) -> None:
    c = _compiler()
    res = lower.short_circuit(c, op, E("a", BOOL), _call_operand(c, "False"))
    assert res is not None and _run(c, res, a=a) == (value, calls)


def test_short_circuit_with_a_constant_left_operand_drops_or_keeps_the_statements() -> None:
    c = _compiler()
    res = lower.short_circuit(c, "||", E("True", BOOL, const=True), _call_operand(c, "False"))
    assert res is not None and res.const is True and c.out.lines == []
    res = lower.short_circuit(c, "&&", E("True", BOOL, const=True), _call_operand(c, "False"))
    assert res is not None and _run(c, res) == (False, 1)


def test_an_operand_without_statements_is_left_to_the_plain_code() -> None:
    c = _compiler()
    plain = lower.capture(c, lambda: E("b", BOOL))
    assert lower.short_circuit(c, "||", E("a", BOOL), plain) is None
    assert lower.conditional(c, E("k", BOOL), plain, plain, lambda e: e) is None
    assert lower.left_to_right(c, E("S[3]", BitT(8)), plain).src == "S[3]" and c.out.lines == []


@pytest.mark.parametrize(("k", "value"), [(True, 1), (False, 2)])
def test_conditional_runs_only_the_taken_arm(k: bool, value: int) -> None:
    c = _compiler()
    t = BitT(8)
    arms = [lower.capture(c, lambda v=v: (c.out(f"calls.append({v})"), E(repr(v), t))[1]) for v in (1, 2)]
    res = lower.conditional(c, E("k", BOOL), arms[0], arms[1], lambda e: e)
    assert res is not None
    scope: dict[str, Any] = {"calls": [], "k": k}
    exec("\n".join(c.out.lines) + f"\n_result = {res.src}", scope)  # noqa: S102 - as above
    assert scope["_result"] == value and scope["calls"] == [value]


def test_left_to_right_reads_the_left_operand_before_the_right_ones_statements() -> None:
    c = _compiler()
    right = lower.capture(c, lambda: (c.out("S[0] = S[0] + 10"), E("S[0]", BitT(8)))[1])
    left = lower.left_to_right(c, E("S[0]", BitT(8)), right)
    scope: dict[str, Any] = {"S": [3]}
    exec("\n".join(c.out.lines) + f"\n_result = {left.src} + {right.e.src}", scope)  # noqa: S102 - as above
    assert scope["_result"] == 3 + 13


def test_left_to_right_does_not_spill_constants() -> None:
    c = _compiler()
    right = _call_operand(c, "1")
    assert lower.left_to_right(c, E("7", BitT(8), const=7), right).src == "7"
    assert c.out.lines == ["calls.append(1)"]
