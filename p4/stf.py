"""STF packet tests (p4c's "simple test framework" files) run on the embedded target, the way p4c's BMv2 runner
(``backends/bmv2/bmv2stf.py``) runs them on simple_switch.

An STF file is line-oriented (``#`` starts a comment): ``add``/``setdefault`` program tables, ``packet PORT HEX``
sends a frame, ``expect PORT HEX`` (``*`` = any nibble, a trailing ``$`` = exact length, no data = any packets)
states what each port must emit, in order.  Table commands become simple_switch_CLI commands (as p4c's runner
writes them) run by ``p4.runtime_cli.RuntimeCLI``, so match values are parsed in one place.  As on BMv2, only
the ports an STF names exist: frames sent elsewhere are not checked (counted in ``StfResult.unchecked``).

``parse_stf(text, name)`` -> [StfLine] (bad syntax, unsupported commands: ``StfError`` naming file:line);
``StfRunner(pipeline, name).run(lines)`` -> ``StfResult``; ``run_test(prog, stf)`` compiles and runs one test
and classifies the outcome (``StfReport``); ``corpus_tests(dir)`` lists the ``X.p4`` that have an ``X.stf``.
"""

from __future__ import annotations

import re
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from p4.errors import CommandError, P4Error
from p4.pipeline import Pipeline
from p4.program import DROP_PORT
from p4.runtime_cli import RuntimeCLI, command_lines
from p4.tables import KeySpec, Table
from sw.clock import ManualClock

# STF commands and what they do here; the passed-through ones are simple_switch_CLI commands (bmv2stf.py
# hands them to the CLI unchanged).
PASS_THROUGH = ("mirroring_add", "mc_mgrp_create", "mc_node_create", "mc_node_associate",
                "counter_read", "counter_write", "register_read", "register_write", "register_reset")
STF_COMMANDS = ("add", "setdefault", "packet", "expect", "wait", "check_counter", "remove") + PASS_THROUGH

PRIORITY_BASE = 10000     # bmv2stf.py: BMv2 priority = 10000 - STF priority (STF: larger wins; BMv2: smaller)

# result reasons (the corpus summary counts them)
PASS, COMPILE_ERROR, MISMATCH, UNSUPPORTED, STF_ERROR, CRASH = (
    "pass", "compile error", "mismatch", "unsupported command", "stf error", "crash")
REASONS = (COMPILE_ERROR, MISMATCH, UNSUPPORTED, STF_ERROR, CRASH)


class StfError(P4Error):
    """Bad STF input (syntax, unknown table/field/action, a value out of range): ``file:line: what``."""


class StfUnsupported(StfError):
    """An STF command this runner does not implement (``file:line: unsupported STF command X``)."""


@dataclass(frozen=True)
class StfLine:
    """One command of an STF file: its line number, command word (lower case) and the rest of the line."""

    lineno: int
    cmd: str
    args: str


@dataclass(frozen=True)
class Expectation:
    """An ``expect PORT DATA`` line: hex nibbles (upper case) or ``*``, and whether the length must be exact."""

    lineno: int
    pattern: str
    exact_length: bool


@dataclass
class PortCheck:
    """The verdict for one port: expected patterns against the frames it emitted, in order."""

    port: int
    expected: list[Expectation]
    got: list[bytes]
    any_count: bool = False          # ``expect PORT`` without data: any number of frames is fine
    problem: str = ""                # empty when the port matched

    @property
    def ok(self) -> bool:
        return not self.problem


@dataclass
class StfResult:
    """The outcome of running one STF file: per-port checks, failed ``check_counter`` lines, packets in/out."""

    ports: list[PortCheck] = field(default_factory=list)
    counter_failures: list[str] = field(default_factory=list)
    packets_in: int = 0
    packets_out: int = 0
    unchecked: dict[int, int] = field(default_factory=dict)   # port the STF never names -> frames sent there

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.ports) and not self.counter_failures

    def diff(self) -> list[str]:
        """Human-readable lines for every failed port: the expected and received frames and the first difference."""
        lines = list(self.counter_failures)
        for p in self.ports:
            if p.ok:
                continue
            lines.append(f"port {p.port}: {p.problem}")
            for i in range(max(len(p.expected), len(p.got))):
                if i < len(p.expected):
                    e = p.expected[i]
                    lines.append(f"  expected #{i + 1} (line {e.lineno}): {e.pattern}{'$' if e.exact_length else ''}")
                if i < len(p.got):
                    lines.append(f"  got      #{i + 1}:           {p.got[i].hex().upper()}")
        return lines

    def summary(self) -> dict[str, object]:
        """JSON-ready per-port figures (expected/got hex, problem)."""
        return {
            "packets_in": self.packets_in, "packets_out": self.packets_out,
            "unchecked_ports": {str(k): v for k, v in sorted(self.unchecked.items())},
            "counter_failures": self.counter_failures,
            "ports": [{"port": p.port, "ok": p.ok, "problem": p.problem,
                       "expected": [e.pattern + ("$" if e.exact_length else "") for e in p.expected],
                       "got": [g.hex().upper() for g in p.got]} for p in self.ports],
        }


# --- parsing ----------------------------------------------------------------------------------------------------
_HEX = re.compile(r"[0-9a-fA-F]*")
_PATTERN = re.compile(r"[0-9a-fA-F*]*")


def parse_stf(text: str, name: str) -> list[StfLine]:
    """The commands of an STF text; syntax errors and unsupported commands raise ``StfError`` at ``name:line``."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word, *more = line.split(None, 1)
        cmd, rest = word.lower(), (more[0].strip() if more else "")
        where = f"{name}:{lineno}"
        if cmd not in STF_COMMANDS:
            raise StfUnsupported(f"{where}: unsupported STF command {word!r} (supported: {', '.join(STF_COMMANDS)})")
        if cmd in ("packet", "expect"):
            _port_and_data(cmd, rest, where)           # checked now: a bad line fails before anything runs
        elif cmd in ("add", "setdefault", "check_counter") and not rest:
            raise StfError(f"{where}: {cmd} needs arguments")
        elif cmd == "remove" and not rest:
            raise StfError(f"{where}: remove needs 'all' or TABLE KEY:VALUE ...")
        out.append(StfLine(lineno, cmd, rest))
    return out


def _port_and_data(cmd: str, rest: str, where: str) -> tuple[int, str]:
    """``PORT DATA`` of a packet/expect line: the port (0..510) and the data without white space."""
    port_s, *more = rest.split(None, 1) or [""]
    data = more[0] if more else ""
    try:
        port = int(port_s)
    except ValueError:
        raise StfError(f"{where}: {cmd}: port {port_s!r} is not a decimal number") from None
    if not 0 <= port < DROP_PORT:
        raise StfError(f"{where}: {cmd}: port {port} out of range 0..{DROP_PORT - 1}")
    data = "".join(data.split())
    if cmd == "packet":
        if not _HEX.fullmatch(data):
            raise StfError(f"{where}: packet: data must be hex digits (spaces allowed), got {data[:40]!r}")
    else:
        body = data[:-1] if data.endswith("$") else data
        if not _PATTERN.fullmatch(body):
            raise StfError(f"{where}: expect: data must be hex digits or '*' (a trailing '$' = exact length), "
                           f"got {data[:40]!r}")
    return port, data


def packet_bytes(digits: str) -> bytes:
    """The frame of a ``packet`` line's hex digits, as bmv2stf.py reads them: two digits a byte, and an odd last
    digit a byte of its own (``20 0`` is 0x20 0x00; no digits is an empty frame)."""
    if len(digits) % 2:
        digits = digits[:-1] + "0" + digits[-1]
    return bytes.fromhex(digits)


def compare_frame(exp: Expectation, frame: bytes) -> str:
    """'' when ``frame`` matches the expectation (nibble wildcards, exact length with ``$``), else what differs."""
    got = frame.hex().upper()
    if len(got) < len(exp.pattern):
        return f"too short: {len(frame)} bytes, expected {len(exp.pattern) / 2:g}"
    for i, (e, g) in enumerate(zip(exp.pattern, got, strict=False)):
        if e != "*" and e != g:
            return f"differs at byte {i // 2} (nibble {i}): expected {e}, got {g}"
    if exp.exact_length and len(got) > len(exp.pattern):
        return f"too long: {len(frame)} bytes, expected exactly {len(exp.pattern) / 2:g} ('$')"
    return ""


# --- values: STF match words -> simple_switch_CLI match words ----------------------------------------------------
_DIGIT_BITS = {"0x": 4, "0b": 1, "0o": 3}
_DIGIT_FULL = {"0x": "F", "0b": "1", "0o": "7"}


def cli_match_word(value: str, key: KeySpec) -> str:
    """An STF key value as the CLI's match word for ``key``'s match kind, as bmv2stf.py converts it: a ternary
    ``0x**01`` is ``0x0001&&&0x00FF`` (the mask covers the digits written), an LPM value without ``/`` has the
    prefix of its non-``*`` digits; ``V&&&M``, ``V/L`` and ``LO->HI`` pass through."""
    v = value.strip()
    prefix = v[:2].lower()
    if key.kind == "ternary":
        if "&&&" in v:
            return v
        if prefix in _DIGIT_BITS:
            digits = v[2:]
            mask = "".join("0" if c == "*" else _DIGIT_FULL[prefix] for c in digits)
            return f"{prefix}{digits.replace('*', '0')}&&&{prefix}{mask}"
        return f"{v}&&&{(1 << key.width) - 1}"                  # a decimal value: all bits (bmv2stf rejects it)
    if key.kind == "lpm":
        if "/" in v:
            return v
        if prefix in _DIGIT_BITS:
            digits = v[2:]
            return f"{prefix}{digits.replace('*', '0')}/{(len(digits) - digits.count('*')) * _DIGIT_BITS[prefix]}"
        return f"{v}/{key.width}"
    if key.kind == "range":
        return v if "->" in v else f"{v}->{v}"
    if key.kind == "optional":
        return "*" if v in ("*", "_") else v
    return v


def default_match_word(key: KeySpec) -> str:
    """The value of a key an ``add`` leaves out (bmv2stf.py: ternary and LPM match anything, exact is 0)."""
    defaults = {"ternary": "0&&&0", "lpm": "0/0", "range": f"0->{(1 << key.width) - 1}", "optional": "*"}
    return defaults.get(key.kind, "0")


T = TypeVar("T")


def resolve(kind: str, name: str, objs: dict[str, T], aliases: Callable[[str], list[str]] = lambda n: [n]) -> str:
    """The full name in ``objs`` an STF name means, as p4c's runner looks names up: the name itself, else the one
    ending in ``.NAME``, else the one ending in ``NAME``; an ambiguous or unknown name is a CommandError."""
    for test in (lambda full: name == full, lambda full: full.endswith("." + name), lambda full: full.endswith(name)):
        hits = sorted({full for full in objs if any(test(a) for a in aliases(full))})
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise CommandError(f"{kind} name {name!r} is ambiguous ({', '.join(hits)})")
    raise CommandError(f"unknown {kind} {name!r} (known: {', '.join(sorted(objs)) or 'none'})")


def key_aliases(key_name: str) -> list[str]:
    """The names p4c's JSON and STF files use for a key: ``hdr.h.isValid()`` is also ``hdr.h.$valid$``."""
    if key_name.endswith(".isValid()"):
        base = key_name[: -len(".isValid()")]
        return [key_name, f"{base}.$valid$", f"{base}.valid", f"{base}$valid$"]
    return [key_name]


def _stf_key_name(name: str) -> str:
    """An STF key name in p4c's spelling: ``hs$0.f`` is ``hs[0].f``; a trailing ``$`` is dropped."""
    name = re.sub(r"\$(\d+)", r"[\1]", name)
    return name if name.endswith("$valid$") else name.rstrip("$")


_ADD_ID = re.compile(r"^(.*\))\s*=\s*([A-Za-z_$][\w$]*)\s*$", re.S)
_CHECK_COUNTER = re.compile(r"^([\w.$\[\]]+)\s*\(\s*([^)]*?)\s*\)\s*(?:(packets|bytes)\s*(==|!=|<=|>=|<|>)\s*(\S+))?$",
                            re.I)
_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
}


# --- running ------------------------------------------------------------------------------------------------------
class StfRunner:
    """Runs STF commands against one pipeline in file order; packets go through the whole pipeline at once."""

    def __init__(self, pipeline: Pipeline, name: str) -> None:
        self.pipeline = pipeline
        self.cli = RuntimeCLI(pipeline)
        self.name = name
        self.handles: dict[str, tuple[Table, int]] = {}          # ``add ... = ID`` -> (table, entry handle)
        self.added: dict[tuple[str, tuple[str, ...]], list[int]] = {}   # (table, CLI match words) -> handles

    def run(self, lines: list[StfLine]) -> StfResult:
        res = StfResult()
        expected: dict[int, list[Expectation]] = defaultdict(list)
        any_count: set[int] = set()
        outputs: dict[int, list[bytes]] = defaultdict(list)
        named: set[int] = set()
        for ln in lines:
            where = f"{self.name}:{ln.lineno}"
            try:
                if ln.cmd in ("packet", "expect"):
                    port, data = _port_and_data(ln.cmd, ln.args, where)
                    named.add(port)
                    if ln.cmd == "packet":
                        res.packets_in += 1
                        out, _ = self.pipeline.process(port, packet_bytes(data))
                        for p, frame in out:
                            outputs[p].append(frame)
                    elif data:
                        exact = data.endswith("$")
                        expected[port].append(Expectation(ln.lineno, data.rstrip("$").upper(), exact))
                    else:
                        any_count.add(port)
                elif ln.cmd == "add":
                    self._add(ln.args)
                elif ln.cmd == "setdefault":
                    self._setdefault(ln.args)
                elif ln.cmd == "check_counter":
                    problem = self._check_counter(ln.args)
                    if problem:
                        res.counter_failures.append(f"line {ln.lineno}: check_counter {ln.args}: {problem}")
                elif ln.cmd == "remove" and ln.args.lower() == "all":
                    for t in self.pipeline.state.tables.values():
                        if not t.const_entries:
                            t.clear()
                    self.added.clear()
                elif ln.cmd == "remove":
                    self._remove(ln.args)
                elif ln.cmd in PASS_THROUGH:
                    self.cli.execute(f"{ln.cmd} {ln.args}")
                # ``wait``: packets are processed when sent, there is nothing to wait for
            except CommandError as exc:
                raise StfError(f"{where}: {exc.message}") from None
        res.packets_out = sum(len(v) for v in outputs.values())
        for port in sorted(named):
            check = PortCheck(port, expected.get(port, []), outputs.get(port, []), any_count=port in any_count)
            if not check.any_count:
                check.problem = _port_problem(check.expected, check.got)
            res.ports.append(check)
        res.unchecked = {p: len(v) for p, v in outputs.items() if p not in named}
        return res

    # --- table commands -----------------------------------------------------------------------------------------
    def _table(self, name: str) -> Table:
        return self.pipeline.state.tables[resolve("table", name, self.pipeline.state.tables)]

    def _action(self, table: Table, call: str) -> tuple[str, list[str]]:
        """``ACTION(p:v, ...)`` (or a bare ``ACTION``, as bmv2stf.py takes it) -> (full action name, data words in
        the action's parameter order)."""
        aname, paren, rest = call.partition("(")
        if paren and not rest.rstrip().endswith(")"):
            raise CommandError(f"expected ACTION(PARAM:VALUE, ...), got {call.strip()!r}")
        if not aname.strip():
            raise CommandError(f"expected ACTION(PARAM:VALUE, ...), got {call.strip()!r}")
        rest = rest if paren else ")"
        full = resolve(f"action of table {table.name}", aname.strip(), table.actions)
        action = table.actions[full]
        given: dict[str, str] = {}
        for item in filter(None, (s.strip() for s in rest.rstrip()[:-1].split(","))):
            k, colon, v = item.partition(":")
            if not colon:
                raise CommandError(f"action argument {item!r}: expected NAME:VALUE")
            given[k.strip()] = v.strip()
        params = [n for n, _ in action.params]
        unknown = sorted(set(given) - set(params))
        missing = [n for n in params if n not in given]
        if unknown or missing:
            raise CommandError(f"action {full} takes ({', '.join(params) or 'no parameters'})"
                               + (f"; unknown {', '.join(unknown)}" if unknown else "")
                               + (f"; missing {', '.join(missing)}" if missing else ""))
        return full, [given[n] for n in params]

    def _add(self, args: str) -> None:
        """``add TABLE [PRIORITY] KEY:VALUE ... ACTION(PARAM:VALUE, ...) [= ID]`` -> ``table_add``."""
        m = _ADD_ID.match(args)
        entry_id = m.group(2) if m else None
        body = m.group(1) if m else args
        head, paren, tail = body.partition("(")
        words = head.split()
        if not paren or len(words) < 2:
            raise CommandError("add: expected add TABLE [PRIORITY] KEY:VALUE ... ACTION(PARAM:VALUE, ...)")
        table = self._table(words[0])
        prio: int | None = None
        keys_words = words[1:-1]
        if keys_words and keys_words[0].isdigit():
            prio = int(keys_words.pop(0))
        action, data = self._action(table, words[-1] + paren + tail)
        match = self._match_words(table, keys_words)
        cmd = ["table_add", table.name, action, *match, "=>", *data]
        if any(k.kind in ("ternary", "range", "optional") for k in table.keys):
            cmd.append(str(PRIORITY_BASE - (prio or 0)))
        out = self.cli.execute(" ".join(cmd))
        handle = int(out.rsplit(" ", 1)[-1])
        self.added.setdefault((table.name, tuple(match)), []).append(handle)
        if entry_id is not None:
            self.handles[entry_id] = (table, handle)

    def _match_words(self, table: Table, keys_words: list[str]) -> list[str]:
        """The CLI match words of ``KEY:VALUE ...`` (a key left out matches anything)."""
        given: dict[int, str] = {}
        for kw in keys_words:
            kname, colon, value = kw.partition(":")
            if not colon or not value:
                raise CommandError(f"match {kw!r}: expected FIELD:VALUE")
            i = self._key_index(table, kname)
            given[i] = cli_match_word(value, table.keys[i])
        return [given.get(i, default_match_word(k)) for i, k in enumerate(table.keys)]

    def _remove(self, args: str) -> None:
        """``remove TABLE KEY:VALUE ...``: delete the entry an earlier ``add`` made with that match (the oldest
        one when several were) -> ``table_delete``."""
        words = args.split()
        table = self._table(words[0])
        key = (table.name, tuple(self._match_words(table, words[1:])))
        if not self.added.get(key):
            raise CommandError(f"remove: no entry added to {table.name} matches {' '.join(words[1:]) or '(all keys)'}")
        self.cli.execute(f"table_delete {table.name} {self.added[key].pop(0)}")

    def _key_index(self, table: Table, name: str) -> int:
        by_name = {k.name: i for i, k in enumerate(table.keys)}
        return by_name[resolve(f"key field of table {table.name}", _stf_key_name(name), by_name, key_aliases)]

    def _setdefault(self, args: str) -> None:
        """``setdefault TABLE ACTION(PARAM:VALUE, ...)`` -> ``table_set_default``."""
        tname, _, call = args.partition(" ")
        table = self._table(tname)
        action, data = self._action(table, call)
        self.cli.execute(" ".join(["table_set_default", table.name, action, *data]))

    def _check_counter(self, args: str) -> str:
        """``check_counter NAME(INDEX|$ID) [packets|bytes OP N]``: '' when it holds, else what was found."""
        m = _CHECK_COUNTER.match(args.strip())
        if not m:
            raise CommandError("check_counter: expected NAME(INDEX) [packets|bytes ==|!=|<|<=|>|>= NUMBER]")
        cname, index, what, op, number = m.groups()
        counters = self.pipeline.state.counters
        c = counters[resolve("counter", cname, counters)]
        if index.startswith("$") or not index.isdigit():
            ref = index.lstrip("$")
            if ref not in self.handles:
                raise CommandError(f"check_counter: no entry was added with '= {ref}'")
            table, h = self.handles[ref]
            if table.direct_counter is not c:
                raise CommandError(f"check_counter: {c.name} is not the direct counter of table {table.name}")
            e = table.entries[h]
            packets, nbytes = e.packets, e.bytes
        else:
            i = int(index)
            if c.direct:
                raise CommandError(f"check_counter: {c.name} is a direct counter: name an entry (add ... = ID)")
            if not 0 <= i < c.size:
                raise CommandError(f"check_counter: index {i} out of range for {c.name} (size {c.size})")
            packets, nbytes = c.packets[i], c.bytes[i]
        if what is None:
            return ""
        try:
            want = int(number, 0)
        except ValueError:
            raise CommandError(f"check_counter: {number!r} is not a number") from None
        have = packets if what.lower() == "packets" else nbytes
        return "" if _COMPARE[op](have, want) else f"{what.lower()} is {have}"


def _port_problem(expected: list[Expectation], got: list[bytes]) -> str:
    """'' when the frames match the expectations one by one, else the first problem."""
    if len(expected) != len(got):
        return f"expected {len(expected)} packet(s), got {len(got)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        problem = compare_frame(e, g)
        if problem:
            return f"packet #{i + 1} (expect at line {e.lineno}) {problem}"
    return ""


# --- one test, a corpus ---------------------------------------------------------------------------------------------
@dataclass
class StfReport:
    """One test's verdict: ``result`` pass/fail, ``reason`` one of REASONS when failed, ``detail`` lines."""

    name: str
    result: str
    reason: str | None = None
    detail: list[str] = field(default_factory=list)
    run: StfResult | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "result": self.result, "reason": self.reason,
                                  "detail": self.detail}
        if self.run is not None:
            out.update(self.run.summary())
        return out


def read_stf(path: Path) -> list[StfLine]:
    """Read and parse an STF file (UTF-8 text); errors name ``file:line``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StfError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = "\n".join(command_lines(data, str(path)))
    except CommandError as exc:
        raise StfError(exc.message) from None
    return parse_stf(text, str(path))


def run_test(program: Path, stf: Path, *, include_dirs: list[Path] | None = None,
             defines: dict[str, str] | None = None, bad_input_raises: bool = False) -> StfReport:
    """Compile ``program``, run ``stf`` on a fresh pipeline and classify the outcome.  With ``bad_input_raises``
    a compile error or a bad/unsupported STF line raises (the one-test CLI exits 2 on them)."""
    from p4.compiler import compile_file

    name = stf.stem
    try:
        lines = read_stf(stf)
    except StfUnsupported as exc:
        if bad_input_raises:
            raise
        return StfReport(name, "fail", UNSUPPORTED, [exc.message])
    except StfError as exc:
        if bad_input_raises:
            raise
        return StfReport(name, "fail", STF_ERROR, [exc.message])
    try:
        prog = compile_file(program, include_dirs=include_dirs or [], defines=defines or {})
    except P4Error as exc:
        if bad_input_raises:
            raise
        return StfReport(name, "fail", COMPILE_ERROR, exc.render().splitlines()[:1])
    except Exception as exc:           # the compiler raised: a bug of ours (not a diagnostic)
        return StfReport(name, "fail", CRASH, [f"compiler: {_where(exc)}"])
    try:
        res = StfRunner(Pipeline(prog, clock=ManualClock()), str(stf)).run(lines)
    except StfError as exc:
        if bad_input_raises:
            raise
        return StfReport(name, "fail", STF_ERROR, [exc.message])
    except P4Error as exc:
        return StfReport(name, "fail", STF_ERROR, [exc.render()])
    except Exception as exc:           # the target raised on a packet: a bug of ours, reported, never a traceback
        return StfReport(name, "fail", CRASH, [_where(exc)])
    if res.ok:
        return StfReport(name, PASS, None, [], res)
    return StfReport(name, "fail", MISMATCH, res.diff(), res)


def _where(exc: BaseException) -> str:
    """``Type: message (at file:line)`` of an unexpected exception: the innermost frame, for the report line."""
    tb = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{at}"


def corpus_tests(directory: Path) -> list[tuple[Path, Path]]:
    """Every ``X.p4`` of ``directory`` that has an ``X.stf`` beside it, by name."""
    if not directory.is_dir():
        raise P4Error(f"--corpus {directory}: not a directory")
    return [(p, p.with_suffix(".stf")) for p in sorted(directory.glob("*.p4")) if p.with_suffix(".stf").is_file()]
