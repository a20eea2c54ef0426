"""A C-style preprocessor for P4 sources (#include, #define, #if...) that remembers where each line came from.

Written in Python rather than shelling out to ``cpp`` so that error positions map back to the original
file and line exactly and the result does not depend on the host's C toolchain.

Limits (each exceeded one is an error at file:line naming it, never a hang): includes nested
``MAX_INCLUDE_DEPTH`` deep and ``MAX_INCLUDES`` inclusions in all; macros nested ``MAX_MACRO_DEPTH`` deep,
``MAX_EXPANSIONS_PER_LINE`` expansions and ``MAX_LINE_CHARS`` characters of expanded text per source line; and
``MAX_OUTPUT_CHARS`` characters of preprocessed text in all. ``#if`` is C integer arithmetic (``p4.ppexpr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from p4.errors import CompileError, NotText, SourcePos, utf8_text
from p4.ppexpr import ExprError, evaluate

MAX_INCLUDE_DEPTH = 50
MAX_INCLUDES = 1000
MAX_MACRO_DEPTH = 200
MAX_EXPANSIONS_PER_LINE = 100_000
MAX_LINE_CHARS = 1 << 20
MAX_OUTPUT_CHARS = 16 << 20

INCLUDE_DIR = Path(__file__).with_name("include")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[A-Za-z_][A-Za-z0-9_]*|\d[\w]*|.', re.S)
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$", re.S)


@dataclass
class Macro:
    name: str
    body: str
    params: list[str] | None = None  # None: object-like


@dataclass
class Preprocessed:
    """Output text plus, for each output line (1-based index - 1), the original (file, line)."""

    text: str
    lines: list[tuple[str, int]]
    sources: dict[str, list[str]] = field(default_factory=dict)

    def pos(self, line: int, col: int) -> SourcePos:
        """Map an output (line, col) back to the original file position, with its source text."""
        if 1 <= line <= len(self.lines):
            file, orig = self.lines[line - 1]
            src = self.sources.get(file, [])
            text = src[orig - 1] if 1 <= orig <= len(src) else ""
            return SourcePos(file, orig, col, text)
        return SourcePos("<input>", line, col)


def read_source(path: Path, pos: SourcePos | None = None) -> str:
    """A P4 source file as text: UTF-8 without NUL bytes, else one error at the first bad byte's line:col."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"cannot read {path}: {exc.strerror or exc}", pos) from None
    try:
        return utf8_text(data)
    except NotText as exc:
        raise CompileError(f"{exc.what}: P4 source must be UTF-8 text", _byte_pos(path, data, exc.offset)) from None


def _byte_pos(path: Path, data: bytes, off: int) -> SourcePos:
    line_start = data.rfind(b"\n", 0, off) + 1
    line_end = data.find(b"\n", off)
    shown = data[line_start : line_end if line_end >= 0 else len(data)][:200]
    return SourcePos(str(path), data.count(b"\n", 0, off) + 1, off - line_start + 1,
                     shown.decode("utf-8", "replace").replace("\0", "?"))


def _strip_comments(text: str, name: str = "<input>") -> str:
    """Blank out // and /* */ comments, keeping newlines (so line numbers stay) and string literals."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                line = text.count("\n", 0, i) + 1
                start = text.rfind("\n", 0, i) + 1
                end = text.find("\n", i)
                raise CompileError("unterminated comment: this '/*' has no matching '*/'",
                                   SourcePos(name, line, i - start + 1, text[start : end if end >= 0 else n]))
            j += 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Preprocessor:
    """Expands one P4 file with its includes and macros; ``run(path)`` returns a ``Preprocessed``."""

    def __init__(self, include_dirs: list[Path] | None = None, defines: dict[str, str] | None = None) -> None:
        self.include_dirs = [INCLUDE_DIR, *(include_dirs or [])]
        self.macros: dict[str, Macro] = {"__STARPULSE__": Macro("__STARPULSE__", "1")}
        for k, v in (defines or {}).items():
            if not _IDENT.fullmatch(k) or not k.isascii():
                raise CompileError(f"-D {k}={v}: invalid macro name {k!r} (a letter or '_', then letters, digits "
                                   "or '_')")
            self.macros[k] = Macro(k, v)
        self.out_lines: list[str] = []
        self.out_map: list[tuple[str, int]] = []
        self.sources: dict[str, list[str]] = {}
        self._depth = 0
        self._includes = 0
        self._out_chars = 0
        self._budget = [0, 0]      # expansions and characters left for the source line being expanded

    def run(self, path: str | Path) -> Preprocessed:
        path = Path(path)
        self._file(str(path), read_source(path))
        return Preprocessed("\n".join(self.out_lines) + "\n", self.out_map, self.sources)

    def run_text(self, text: str, name: str = "<string>") -> Preprocessed:
        self._file(name, text)
        return Preprocessed("\n".join(self.out_lines) + "\n", self.out_map, self.sources)

    # --- files and directives -----------------------------------------------------------------------------
    def _file(self, name: str, text: str, pos: SourcePos | None = None) -> None:
        self._depth += 1
        if self._depth > MAX_INCLUDE_DEPTH:
            raise CompileError(f"#include nested more than {MAX_INCLUDE_DEPTH} levels deep (recursive include?)",
                               pos)
        raw_lines = text.split("\n")
        self.sources[name] = raw_lines
        lines = _strip_comments(text, name).split("\n")
        stack: list[list] = []  # [active, taken-already, position of the #if]
        i = 0
        while i < len(lines):
            lineno = i + 1
            line = lines[i]
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i]
                self._emit("", name, lineno)  # keep line count aligned
            i += 1
            active = all(s[0] for s in stack)
            m = _DIRECTIVE.match(line)
            if not m:
                self._emit(self._expand(line, name, lineno) if active else "", name, lineno)
                continue
            self._emit("", name, lineno)
            d, rest = m.group(1), m.group(2).strip()
            pos = SourcePos(name, lineno, 1, raw_lines[lineno - 1] if lineno <= len(raw_lines) else "")
            if d in ("ifdef", "ifndef"):
                defined = rest.split()[0] in self.macros if rest else False
                cond = defined if d == "ifdef" else not defined
                stack.append([cond, cond, pos])
            elif d == "if":
                cond = self._eval_if(rest, pos) if active else False
                stack.append([cond, cond, pos])
            elif d == "elif":
                if not stack:
                    raise CompileError("#elif without #if", pos)
                s = stack[-1]
                if s[1]:
                    s[0] = False
                else:
                    parent = all(x[0] for x in stack[:-1])
                    s[0] = self._eval_if(rest, pos) if parent else False
                    s[1] = s[0]
            elif d == "else":
                if not stack:
                    raise CompileError("#else without #if", pos)
                s = stack[-1]
                s[0] = not s[1]
                s[1] = True
            elif d == "endif":
                if not stack:
                    raise CompileError("#endif without #if", pos)
                stack.pop()
            elif not active:
                continue
            elif d == "include":
                self._include(rest, name, pos)
            elif d == "define":
                self._define(rest, pos)
            elif d == "undef":
                self.macros.pop(rest.split()[0] if rest else "", None)
            elif d == "error":
                raise CompileError(f"#error {rest}", pos)
            elif d in ("pragma", "line", "warning"):
                continue
            else:
                raise CompileError(f"unknown preprocessor directive #{d}", pos)
        if stack:
            raise CompileError(f"missing #endif: this conditional is still open at the end of {name}", stack[-1][2])
        self._depth -= 1

    def _emit(self, text: str, name: str, lineno: int) -> None:
        self._out_chars += len(text) + 1
        if self._out_chars > MAX_OUTPUT_CHARS:
            raise self._error_at(f"preprocessed program exceeds the limit of {MAX_OUTPUT_CHARS >> 20} MiB of text",
                                 name, lineno)
        self.out_lines.append(text)
        self.out_map.append((name, lineno))

    def _include(self, rest: str, current: str, pos: SourcePos) -> None:
        m = re.match(r'^(?:"([^"]+)"|<([^>]+)>)', rest)
        if not m:
            raise CompileError(f"#include expects \"FILE\" or <FILE>, got {rest!r}", pos)
        target = m.group(1) or m.group(2)
        dirs = ([Path(current).parent] if m.group(1) else []) + self.include_dirs + [Path(current).parent]
        for d in dirs:
            cand = d / target
            try:
                found = cand.is_file()
            except OSError:                           # a name the system cannot look up (too long, ...)
                found = False
            if found:
                self._includes += 1
                if self._includes > MAX_INCLUDES:
                    raise CompileError(f"more than {MAX_INCLUDES} #include inclusions in all (the limit; an "
                                       "include bomb?)", pos)
                self._file(str(cand), read_source(cand, pos), pos)
                return
        raise CompileError(f"include file {target!r} not found (searched {', '.join(map(str, dirs))})", pos)

    def _define(self, rest: str, pos: SourcePos) -> None:
        m = re.match(r"^([A-Za-z_]\w*)(\(([^)]*)\))?\s*(.*)$", rest, re.S)
        if not m:
            raise CompileError(f"bad #define {rest!r}", pos)
        name, params = m.group(1), m.group(3)
        plist = [p.strip() for p in params.split(",") if p.strip()] if m.group(2) else None
        self.macros[name] = Macro(name, m.group(4).strip(), plist)

    def _eval_if(self, expr: str, pos: SourcePos) -> bool:
        """C's rule: ``defined`` first, then macros, then every remaining identifier is 0."""
        expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                      lambda m: "1" if (m.group(1) or m.group(2)) in self.macros else "0", expr)
        expr = self._expand(expr, pos.file, pos.line)
        expr = re.sub(r"(?<![\w.])[A-Za-z_]\w*", "0", expr)     # not the suffix of a number such as 10UL
        try:
            return evaluate(expr) != 0
        except ExprError as exc:
            raise CompileError(f"cannot evaluate #if expression: {exc}", pos) from None

    # --- macro expansion ----------------------------------------------------------------------------------
    def _expand(self, line: str, name: str, lineno: int, hide: frozenset[str] = frozenset()) -> str:
        if not self.macros or not _IDENT.search(line):
            return line
        if not hide:
            self._budget = [MAX_EXPANSIONS_PER_LINE, MAX_LINE_CHARS]
        elif len(hide) > MAX_MACRO_DEPTH:
            raise self._error_at(f"macros nested more than {MAX_MACRO_DEPTH} levels deep (the limit)", name,
                                    lineno)
        toks = _TOKEN.findall(line)
        out: list[str] = []
        i = 0
        while i < len(toks):
            t = toks[i]
            mac = self.macros.get(t)
            if mac is None or t in hide:
                out.append(t)
                i += 1
                continue
            self._spend(len(mac.body), name, lineno)
            if mac.params is None:
                out.append(self._expand(mac.body, name, lineno, hide | {t}))
                i += 1
                continue
            j = i + 1
            while j < len(toks) and toks[j].isspace():
                j += 1
            if j >= len(toks) or toks[j] != "(":
                out.append(t)
                i += 1
                continue
            args, depth, cur, j = [], 0, [], j + 1
            while j < len(toks):
                a = toks[j]
                if a == "(":
                    depth += 1
                elif a == ")":
                    if depth == 0:
                        break
                    depth -= 1
                elif a == "," and depth == 0:
                    args.append("".join(cur).strip())
                    cur = []
                    j += 1
                    continue
                cur.append(a)
                j += 1
            args.append("".join(cur).strip())
            if args == [""] and not mac.params:
                args = []
            if len(args) != len(mac.params):
                raise CompileError(f"macro {t} expects {len(mac.params)} arguments, got {len(args)}",
                                   SourcePos(name, lineno, 1))
            body_toks = _TOKEN.findall(mac.body)
            sub = dict(zip(mac.params, args, strict=True))
            self._spend(sum(len(sub.get(b, b)) for b in body_toks), name, lineno)
            body = "".join(sub.get(b, b) for b in body_toks)
            out.append(self._expand(body, name, lineno, hide | {t}))
            i = j + 1
        return "".join(out)

    def _spend(self, chars: int, name: str, lineno: int) -> None:
        """One more macro expansion producing ``chars`` characters on this line, within the line's budget."""
        self._budget[0] -= 1
        self._budget[1] -= chars
        if self._budget[0] < 0:
            raise self._error_at(f"macro expansion of this line exceeds the limit of {MAX_EXPANSIONS_PER_LINE:,} "
                                    "expansions (a macro bomb?)", name, lineno)
        if self._budget[1] < 0:
            raise self._error_at(f"macro expansion of this line exceeds the limit of {MAX_LINE_CHARS >> 20} MiB "
                                    "of text (a macro bomb?)", name, lineno)

    def _error_at(self, msg: str, name: str, lineno: int) -> CompileError:
        """An error at the start of ``name``:``lineno`` (with that source line under it)."""
        src = self.sources.get(name, [])
        return CompileError(msg, SourcePos(name, lineno, 1, src[lineno - 1] if 0 < lineno <= len(src) else ""))


def preprocess(path: str | Path, include_dirs: list[Path] | None = None,
               defines: dict[str, str] | None = None) -> Preprocessed:
    """Preprocess ``path`` (our include dir first on the search path) and return text + line map."""
    return Preprocessor(include_dirs, defines).run(path)
