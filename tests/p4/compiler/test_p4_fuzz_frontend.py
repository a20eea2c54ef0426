"""Property-based fuzzing of the P4 front end: generated programs and mutations of the shipped programs either
compile (and then forward random frames without an exception) or end in one P4 diagnostic naming file:line;
never another exception, never a hang. Bounded: a fixed number of examples, each under a deadline."""

from __future__ import annotations

import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p4.compiler import compile_file
from p4.errors import CompileError
from p4.pipeline import Pipeline
from p4.program import Program
from sw.clock import ManualClock

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

PROGRAMS = sorted((Path(__file__).resolve().parents[3] / "p4" / "programs").glob("*.p4"))
SOURCES = {p.name: p.read_bytes() for p in PROGRAMS}
FUZZ = settings(max_examples=100, deadline=5000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TRIED = {"programs": 0, "compiled": 0, "frames": 0}

# Snippets that have broken (or could break) a preprocessor, lexer, parser or compiler.
NASTY = [
    b"/*", b"*/", b"//", b'"', b"#if 1/0\n", b"#if 9**9**9\n", b"#endif\n", b"#else\n", b"#define X X X\n",
    b"#define F(a) F(a) a a\n", b'#include "nothere.p4"\n', b"#include <v1model.p4>\n", b"#error boom\n", b"}",
    b"{", b";", b"(", b")", b"<", b">", b">>", b"<<", b"bit<0>", b"bit<4096>", b"int<1>", b"varbit<7>",
    b"9" * 5000, b"0x" + b"f" * 700, b"32w0", b"/ 0", b"% 0", b" << 100000", b"[100000000]", b"[0]", b"\x00",
    b"\xff\xfe", b"\xc3", b"\t", b"\r", b"transition start;", b"transition reject;", b"select(", b"default",
    b"header h_t { bit<8> x; }\n", b"struct s { }\n", b"extern", b"register<bit<32>>(4000000000) r;",
    b"apply", b"exit;", b"return;", b"typedef", b"@name(\"x\")", b"_", b"-1", b"1 ? 2 : 3", b".next", b".last",
    b"\xe2\x80\xae", b"const bit<8> C = 300;", b"error", b"packet.lookahead<bit<8>>()", b"#ifdef X\n",
    b"#if 0\n", b"#include <" + b"v" * 300 + b".p4>\n", b"#define", b"#undef",
]


def _compile_bytes(data: bytes, name: str) -> Program | CompileError:
    """Compile source bytes from a file (as `p4 check` does); returns the Program or the CompileError."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            return compile_file(path)
        except CompileError as exc:
            _assert_diagnostic(exc, str(path))
            return exc


def _assert_diagnostic(exc: CompileError, path: str) -> None:
    text = exc.render()
    assert "internal compiler error" not in exc.message, text
    assert exc.pos is not None, f"no file:line in {text!r}"
    assert exc.pos.line >= 1 and (exc.pos.file == path or exc.pos.file.endswith(".p4")), text
    assert text.startswith(f"{exc.pos.file}:{exc.pos.line}:"), text


def _run_frames(prog: Program, frames: list[bytes]) -> None:
    pipe = Pipeline(prog, clock=ManualClock())
    for i, frame in enumerate(frames):
        pipe.process(1 + i % 4, frame)
    TRIED["frames"] += len(frames)


@st.composite
def _mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(SOURCES)))
    data = bytearray(SOURCES[name])
    toks = re.findall(rb"\w+|[^\w\s]|\s+", bytes(data))
    for _ in range(draw(st.integers(0, 3))):          # token edits: near-valid programs reach the type checker
        j, k = draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))
        edit = draw(st.sampled_from(["delete", "copy", "swap"]))
        if edit == "delete":
            del toks[j]
        elif edit == "copy":
            toks.insert(j, toks[k])
        else:
            toks[j], toks[k] = toks[k], toks[j]
    data = bytearray(b"".join(toks))
    for _ in range(draw(st.integers(0 if toks else 1, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "flip"]))
        if kind == "insert":
            data[at:at] = draw(st.sampled_from(NASTY))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 200))]
        elif kind == "replace":
            data[at : at + draw(st.integers(1, 20))] = draw(st.sampled_from(NASTY))
        elif kind == "duplicate":
            n = draw(st.integers(1, 400))
            data[at:at] = data[at : at + n]
        elif at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
    return name, bytes(data)


@FUZZ
@given(_mutations(), st.lists(st.binary(min_size=0, max_size=300), max_size=6))
def test_mutated_programs_compile_or_fail_with_one_diagnostic(case: tuple[str, bytes], frames: list[bytes]) -> None:
    name, data = case
    TRIED["programs"] += 1
    result = _compile_bytes(data, name)
    if not isinstance(result, CompileError):
        TRIED["compiled"] += 1
        _run_frames(result, frames)


# --- generated programs ----------------------------------------------------------------------------------------
_OPS = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "|+|", "|-|"]
_CMP = ["==", "!=", "<", ">", "<=", ">="]


class _Gen:
    """A random v1model program over a few headers: parser states (loops included), arithmetic, tables."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.headers: dict[str, list[tuple[str, int]]] = {}
        for i in range(rng.randint(1, 3)):
            fields = [(f"f{j}", rng.choice([1, 3, 8, 8, 16, 16, 32, 48, 64])) for j in range(rng.randint(1, 4))]
            pad = -sum(w for _, w in fields) % 8
            if pad and rng.random() < 0.9:            # mostly whole bytes, as headers must be
                fields.append(("pad", pad))
            self.headers[f"h{i}"] = fields

    def const(self) -> str:
        r = self.r
        return r.choice(["0", "1", "7", "255", "0xFFFF", "32w0", "8w255", "16w0x800", str(r.randint(0, 1 << 40)),
                         "(bit<8>)3", "4w15"])

    def field(self) -> str:
        h = self.r.choice(sorted(self.headers))
        return f"hdr.{h}.{self.r.choice(self.headers[h])[0]}"

    def typed(self, text: str, width: int = 32) -> str:
        """Mostly cast to bit<width>, so operands unify; sometimes not, to reach the type errors too."""
        return text if self.r.random() < 0.1 else f"(bit<{width}>)({text})"

    def expr(self, depth: int = 0) -> str:
        r = self.r
        if depth > 2 or r.random() < 0.3:
            return self.typed(r.choice([self.field(), self.const(), "meta.m0", "meta.m1", "sm.ingress_port",
                                        "sm.packet_length"]))
        if r.random() < 0.1:
            return f"(bit<32>)({self.expr(depth + 1)})"
        return f"({self.expr(depth + 1)} {r.choice(_OPS)} {self.expr(depth + 1)})"

    def cond(self) -> str:
        r = self.r
        if r.random() < 0.3:
            return f"hdr.{r.choice(sorted(self.headers))}.isValid()"
        return f"{self.expr(1)} {r.choice(_CMP)} {self.expr(1)}"

    def stmt(self, depth: int = 0) -> str:
        r = self.r
        k = r.randint(0, 7)
        if k == 0 and depth < 2:
            return f"if ({self.cond()}) {{ {self.stmt(depth + 1)} }} else {{ {self.stmt(depth + 1)} }}"
        if k == 1:
            return f"sm.egress_spec = (bit<9>)({self.expr()});"
        if k == 2:
            return f"meta.m{r.randint(0, 1)} = (bit<32>)({self.expr()});"
        if k == 3:
            h = r.choice(sorted(self.headers))
            f, w = r.choice(self.headers[h])
            return f"hdr.{h}.{f} = {self.typed(self.expr(), w)};"
        if k == 4:
            return f"hdr.{r.choice(sorted(self.headers))}.{r.choice(['setValid', 'setInvalid'])}();"
        if k == 5:
            return f"regs.write((bit<32>)({self.expr()}) % 16, (bit<32>)({self.expr()}));"
        if k == 6:
            return "t.apply();"
        return "mark_to_drop(sm);"

    def parser(self) -> str:
        r = self.r
        n = r.randint(1, 4)
        states = []
        for i in range(n):
            name = "start" if i == 0 else f"s{i}"
            body = f"pkt.extract(hdr.{r.choice(sorted(self.headers))});" if r.random() < 0.7 else ""
            targets = ["accept", "reject", "start"] + [f"s{j}" for j in range(1, n)]
            if r.random() < 0.5:
                trans = f"transition {r.choice(targets)};"
            else:
                cases = " ".join(f"{self.const()}: {r.choice(targets)};" for _ in range(r.randint(1, 3)))
                trans = f"transition select({self.field()}) {{ {cases} default: {r.choice(targets)}; }}"
            states.append(f"    state {name} {{ {body} {trans} }}")
        return "\n".join(states)

    def program(self) -> str:
        hdrs = "\n".join(f"header {h}_t {{ {' '.join(f'bit<{w}> {f};' for f, w in fs)} }}"
                         for h, fs in self.headers.items())
        members = " ".join(f"{h}_t {h};" for h in self.headers)
        stmts = "\n        ".join(self.stmt() for _ in range(self.r.randint(1, 8)))
        emits = " ".join(f"pkt.emit(hdr.{h});" for h in self.headers)
        key = self.field()
        return f"""#include <core.p4>
#include <v1model.p4>
{hdrs}
struct headers {{ {members} }}
struct meta_t {{ bit<32> m0; bit<32> m1; }}
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {{
{self.parser()}
}}
control VC(inout headers hdr, inout meta_t meta) {{ apply {{ }} }}
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {{
    register<bit<32>>(16) regs;
    action set(bit<9> port) {{ sm.egress_spec = port; }}
    table t {{ key = {{ {key}: exact; }} actions = {{ set; NoAction; }} default_action = NoAction(); }}
    apply {{
        {stmts}
    }}
}}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control CC(inout headers hdr, inout meta_t meta) {{ apply {{ }} }}
control D(packet_out pkt, in headers hdr) {{ apply {{ {emits} }} }}
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@FUZZ
@given(st.randoms(use_true_random=False), st.lists(st.binary(min_size=0, max_size=200), min_size=1, max_size=8))
def test_generated_programs_compile_and_forward_or_fail_with_one_diagnostic(rng: random.Random,
                                                                            frames: list[bytes]) -> None:
    text = _Gen(rng).program()
    TRIED["programs"] += 1
    result = _compile_bytes(text.encode(), "gen.p4")
    if not isinstance(result, CompileError):
        TRIED["compiled"] += 1
        _run_frames(result, frames)


def test_fuzz_counts() -> None:
    """Runs last in this module: the fuzzers above tried what they claim (printed with -s for the record)."""
    print(f"\nP4 front-end fuzz: {TRIED['programs']} programs ({TRIED['compiled']} compiled), "
          f"{TRIED['frames']} frames through the compiled ones")
    if TRIED["programs"]:                    # only meaningful when the whole module ran
        assert TRIED["compiled"] > 0 and TRIED["programs"] >= 2 * FUZZ.max_examples
