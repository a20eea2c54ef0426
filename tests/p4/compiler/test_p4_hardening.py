"""Bad P4 input ends in one P4 diagnostic with file:line (never a hang, a traceback or a silent acceptance):
#if arithmetic, macro/include bombs, undecodable sources, limits, parser loops, misleading diagnostics."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from p4.compiler import compile_file, compile_source
from p4.errors import CompileError
from p4.ppexpr import ExprError, evaluate
from p4.preprocess import Preprocessor
from tests.p4.compiler.conftest import V1_PRELUDE, Switch

pytestmark = pytest.mark.unit

BODY = """
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { eth_t eth; }
struct meta { }
parser P(packet_in pkt, out headers h, inout meta m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); transition accept; }
}
control VC(inout headers h, inout meta m) { apply { } }
control I(inout headers h, inout meta m, inout standard_metadata_t sm) { apply { sm.egress_spec = 2; } }
control E(inout headers h, inout meta m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers h, inout meta m) { apply { } }
control D(packet_out pkt, in headers h) { apply { pkt.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
MINIMAL = V1_PRELUDE + BODY


def _if(expr: str) -> bool:
    """Evaluate ``#if expr`` through the preprocessor: True when the guarded line survives."""
    pre = Preprocessor().run_text(f"#if {expr}\nyes\n#endif\n", "t.p4")
    return "yes" in pre.text


def _error(text: str, name: str = "t.p4") -> CompileError:
    with pytest.raises(CompileError) as exc:
        compile_source(text, name)
    return exc.value


# --- item 2: #if is C integer arithmetic, evaluated by our own evaluator ------------------------------------
@pytest.mark.parametrize(("expr", "want"), [
    ("1/2", False), ("7/2 == 3", True), ("-7/2 == -3", True), ("-7%3 == -1", True), ("0x10 == 16", True),
    ("010 == 8", True), ("10UL == 10", True), ("1 ? 2 : 0", True), ("0 ? 1 : 0", False), ("!0 && 1", True),
    ("1 << 3 == 8", True), ("(1 | 2) ^ 3", False), ("~0 == -1", True), ("2 + 3 * 4 == 14", True),
    ("defined(__STARPULSE__)", True), ("defined NOPE", False), ("NOPE == 0", True), ("1 > 0 && 0 >= 0", True),
    ("0 && 1/0", False), ("1 || 1/0", True), ("-1 < 0u", False), ("1 << 100 == 0", True),
])
def test_if_is_c_integer_arithmetic(expr: str, want: bool) -> None:
    assert _if(expr) is want


def _random_expr(r: random.Random, depth: int = 0) -> str:
    if depth > 3 or r.random() < 0.3:
        return r.choice(["0", "1", "2", "7", "-1", "0x7fffffffffffffff", "0xffffffffffffffff", "3u", "10UL", "017",
                         "63", "64", "100"])
    k = r.random()
    if k < 0.15:
        return r.choice(["-", "~", "!", "+"]) + f"({_random_expr(r, depth + 1)})"
    if k < 0.25:
        return f"({_random_expr(r, depth + 1)} ? {_random_expr(r, depth + 1)} : {_random_expr(r, depth + 1)})"
    op = r.choice(["+", "-", "*", "/", "%", "<<", ">>", "<", ">", "<=", ">=", "==", "!=", "&", "^", "|", "&&", "||"])
    return f"({_random_expr(r, depth + 1)} {op} {_random_expr(r, depth + 1)})"


@pytest.mark.skipif(shutil.which("cpp") is None, reason="no C preprocessor to compare with")
def test_if_agrees_with_the_c_preprocessor_on_random_expressions() -> None:
    exprs = [_random_expr(random.Random(i)) for i in range(300)]
    src = "".join(f"#if {e}\nT{i}\n#else\nF{i}\n#endif\n" for i, e in enumerate(exprs))
    res = subprocess.run(["cpp", "-P"], input=src, capture_output=True, text=True, timeout=60)
    theirs = {int(m.group(2)): m.group(1) == "T" for m in re.finditer(r"\b([TF])(\d+)\b", res.stdout)}
    compared = 0
    for i, e in enumerate(exprs):
        try:
            mine = evaluate(e) != 0
        except ExprError:
            continue                                  # division by zero: cpp reports an error too
        if i in theirs:
            compared += 1
            assert mine == theirs[i], e
    assert compared > 250


@pytest.mark.timeout(60)                  # a hang guard for hostile input, not a speed target
@pytest.mark.parametrize(("expr", "what"), [
    ("9**9**9", "unexpected"), ("1/0", "division by zero"), ("5 % 0", "division by zero"), ("(1", "')'"),
    ("1 +", "end of"), ("'a'", "unexpected"), ("__import__", None), ("1 2", "unexpected"), ("", "no expression"),
    ("(" * 5000 + "1" + ")" * 5000, "nested"),
])
def test_bad_if_expression_is_one_error_quickly(expr: str, what: str | None) -> None:
    try:
        got = _if(expr)
    except CompileError as exc:
        assert exc.pos is not None and exc.pos.file == "t.p4" and exc.pos.line == 1
        if what:
            assert what in exc.message, exc.message
    else:
        assert what is None and got is False      # an unknown name is 0, as in C


@pytest.mark.timeout(60)                  # a hang guard for hostile input, not a speed target
def test_macro_bomb_is_an_error_with_file_line() -> None:
    defs = "#define X0 x\n" + "".join(f"#define X{i} X{i - 1} X{i - 1}\n" for i in range(1, 41))
    err = _error(defs + "X40\n", "bomb.p4")
    assert err.pos is not None and (err.pos.file, err.pos.line) == ("bomb.p4", 42)
    assert "macro expansion" in err.message and "limit" in err.message


def test_deeply_nested_macros_are_an_error() -> None:
    defs = "#define M0 0\n" + "".join(f"#define M{i} (M{i - 1})\n" for i in range(1, 2001))
    err = _error(defs + "M2000\n", "deep.p4")
    assert err.pos is not None and err.pos.line == 2002 and "nested" in err.message


@pytest.mark.timeout(60)                  # a hang guard for hostile input, not a speed target
def test_include_bomb_is_an_error_with_file_line(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"b{i}.p4").write_text(f'#include "b{i + 1}.p4"\n#include "b{i + 1}.p4"\n')
    (tmp_path / "b30.p4").write_text("x\n")
    with pytest.raises(CompileError) as exc:
        compile_file(tmp_path / "b0.p4")
    assert exc.value.pos is not None and exc.value.pos.file.endswith(".p4") and "limit" in exc.value.message


def test_recursive_include_names_the_include_line(tmp_path: Path) -> None:
    (tmp_path / "self.p4").write_text('// comment\n#include "self.p4"\n')
    with pytest.raises(CompileError) as exc:
        compile_file(tmp_path / "self.p4")
    assert exc.value.pos is not None and exc.value.pos.line == 2 and "nested" in exc.value.message


def test_include_of_a_name_too_long_for_the_system_is_not_found() -> None:
    err = _error("// x\n#include <" + "v" * 5000 + ".p4>\n", "long.p4")
    assert err.pos is not None and (err.pos.file, err.pos.line) == ("long.p4", 2) and "not found" in err.message


# --- item 3: undecodable sources ------------------------------------------------------------------------------
@pytest.mark.parametrize("junk", [b"\xff\xfe bad\n", b"ok\n\x00\x01\x02binary\n", b"caf\xe9\n"])
def test_non_utf8_or_binary_source_is_one_error(tmp_path: Path, junk: bytes) -> None:
    bad = tmp_path / "bad.p4"
    bad.write_bytes(junk + MINIMAL.encode())
    inc = tmp_path / "inc.p4"
    inc.write_text('\n#include "bad.p4"\n')
    for path in (bad, inc):
        with pytest.raises(CompileError) as exc:
            compile_file(path)
        assert exc.value.pos is not None and exc.value.pos.file == str(bad), exc.value.render()
        assert "UTF-8" in exc.value.message or "binary" in exc.value.message


# --- item 7: -D names -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["1abc", "a-b", "", "x y", "défine"])
def test_invalid_macro_name_in_define_is_rejected(name: str) -> None:
    with pytest.raises(CompileError, match="-D"):
        Preprocessor(defines={name: "2"})


# --- item 8: diagnostics point at the real cause ---------------------------------------------------------------
def test_unterminated_comment_points_at_its_start() -> None:
    text = MINIMAL.replace("struct meta { }", "struct meta { }\n  /* never closed")
    err = _error(text, "c.p4")
    line = text.splitlines().index("  /* never closed") + 1
    assert err.pos is not None and (err.pos.file, err.pos.line, err.pos.col) == ("c.p4", line, 3)
    assert "unterminated comment" in err.message


# --- item 2: a parser loop that extracts nothing -----------------------------------------------------------------
LOOP = MINIMAL.replace(
    "state start { pkt.extract(h.eth); transition accept; }",
    "state start { pkt.extract(h.eth); transition spin; }\n"
    "    state spin { transition select(h.eth.type) { 0x0800: spin; default: accept; } }")


@pytest.mark.timeout(60)                  # a hang guard for hostile input, not a speed target
def test_parser_loop_is_warned_and_times_out_per_packet_as_parser_timeout() -> None:
    prog = compile_source(LOOP, "loop.p4")
    warns = [w for w in prog.warnings if "loop.p4:" in w]
    assert len(warns) == 1 and "spin" in warns[0] and "ParserTimeout" in warns[0], prog.warnings
    sw = Switch(prog)
    frame = bytes(12) + b"\x08\x00" + bytes(50)
    out = sw.send(1, frame)
    assert out == [(2, frame)]                    # v1model: the packet goes on to ingress with parser_error set
    assert sw.pipe.parser_errors == {"ParserTimeout": 1}
    assert sw.send(1, bytes(12) + b"\x86\xdd" + bytes(50))        # the loop not taken: no error
    assert sw.pipe.parser_errors == {"ParserTimeout": 1}


def test_parser_loop_that_extracts_is_not_warned() -> None:
    text = MINIMAL.replace("struct headers { eth_t eth; }", "header tag_t { bit<16> type; }\n"
                           "struct headers { eth_t eth; tag_t[4] tags; }").replace(
        "state start { pkt.extract(h.eth); transition accept; }",
        "state start { pkt.extract(h.eth); transition select(h.eth.type) { 0x8100: tag; default: accept; } }\n"
        "    state tag { pkt.extract(h.tags.next); transition select(h.tags.last.type) { 0x8100: tag; "
        "default: accept; } }")
    prog = compile_source(text, "tags.p4")
    assert not [w for w in prog.warnings if "tags.p4:" in w]
    sw = Switch(prog)
    sw.send(1, bytes(12) + b"\x81\x00" * 40)
    assert sw.pipe.parser_errors == {"StackOutOfBounds": 1}


# --- item 4: limits and constant division by zero ------------------------------------------------------------------
@pytest.mark.timeout(60)                  # a hang guard for hostile input, not a speed target
@pytest.mark.parametrize(("old", "new", "what"), [
    ("struct meta { }", "const bit<32> BIG = " + "9" * 100_000 + ";\nstruct meta { }", "2048 bits"),
    ("struct meta { }", "const bit<32> BIG = 32w0x" + "f" * 600 + ";\nstruct meta { }", "2048 bits"),
    ("struct meta { }", "const bit<32> BIG = 5000w1;\nstruct meta { }", "1..2048"),
    ("struct meta { }", "const int BIG = 1 << 4000000000;\nstruct meta { }", "bits"),
    ("apply { sm.egress_spec = 2; }", "register<bit<32>>(4000000000) r;\n apply { sm.egress_spec = 2; }",
     "4,194,304"),
    ("apply { sm.egress_spec = 2; }", "counter(5000000, CounterType.packets) c;\n apply { sm.egress_spec = 2; }",
     "4,194,304"),
    ("struct headers { eth_t eth; }", "struct headers { eth_t eth; eth_t[100000000] st; }", "4096"),
    ("sm.egress_spec = 2;", "sm.egress_spec = (bit<9>)(16w0x800 / 16w0);", "division by zero"),
    ("sm.egress_spec = 2;", "sm.egress_spec = 9w7 % 0;", "division by zero"),
])
def test_limits_are_named_errors_at_the_construct(old: str, new: str, what: str) -> None:
    assert old in MINIMAL
    text = MINIMAL.replace(old, new)
    err = _error(text, "big.p4")
    assert err.pos is not None and err.pos.file == "big.p4" and err.pos.line > 2, err.render()[:300]
    assert what in err.message and "internal" not in err.message, err.message[:300]
    assert len(err.render()) < 1000                                  # the caret line is cut, not 100k digits


# --- item 8: a duplicate declaration is named as such ----------------------------------------------------------
def test_duplicate_header_declaration_points_at_the_second() -> None:
    text = MINIMAL.replace("struct headers", "header eth_t { bit<8> x; }\nstruct headers")
    err = _error(text, "dup.p4")
    line = text.splitlines().index("header eth_t { bit<8> x; }") + 1
    assert err.pos is not None and (err.pos.file, err.pos.line) == ("dup.p4", line)
    assert "duplicate declaration of 'eth_t'" in err.message and "dup.p4:4:" in err.message
