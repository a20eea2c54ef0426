"""A C-style preprocessor for P4 sources (#include, #define, #if...) that remembers where each line came from.

Written in Python rather than shelling out to ``cpp`` so that error positions map back to the original
file and line exactly and the result does not depend on the host's C toolchain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from p4.errors import CompileError, SourcePos

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


def _strip_comments(text: str) -> str:
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
            j = n if j < 0 else j + 2
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
            self.macros[k] = Macro(k, v)
        self.out_lines: list[str] = []
        self.out_map: list[tuple[str, int]] = []
        self.sources: dict[str, list[str]] = {}
        self._depth = 0

    def run(self, path: str | Path) -> Preprocessed:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise CompileError(f"cannot read {path}: {exc.strerror}") from None
        self._file(str(path), text)
        return Preprocessed("\n".join(self.out_lines) + "\n", self.out_map, self.sources)

    def run_text(self, text: str, name: str = "<string>") -> Preprocessed:
        self._file(name, text)
        return Preprocessed("\n".join(self.out_lines) + "\n", self.out_map, self.sources)

    # --- files and directives -----------------------------------------------------------------------------
    def _file(self, name: str, text: str) -> None:
        self._depth += 1
        if self._depth > 50:
            raise CompileError(f"{name}: #include nested too deeply (recursive include?)")
        raw_lines = text.split("\n")
        self.sources[name] = raw_lines
        lines = _strip_comments(text).split("\n")
        stack: list[list[bool]] = []  # [active, taken-already, parent-active]
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
                stack.append([cond, cond])
            elif d == "if":
                cond = self._eval_if(rest, pos) if active else False
                stack.append([cond, cond])
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
            raise CompileError(f"{name}: missing #endif at end of file")
        self._depth -= 1

    def _emit(self, text: str, name: str, lineno: int) -> None:
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
            if cand.is_file():
                self._file(str(cand), cand.read_text())
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
        expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                      lambda m: "1" if (m.group(1) or m.group(2)) in self.macros else "0", expr)
        expr = self._expand(expr, pos.file, pos.line)
        expr = _IDENT.sub("0", expr)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr)
        try:
            return bool(eval(expr, {"__builtins__": {}}, {}))  # noqa: S307 - digits/operators only
        except Exception:
            raise CompileError(f"cannot evaluate #if expression {expr.strip()!r}", pos) from None

    # --- macro expansion ----------------------------------------------------------------------------------
    def _expand(self, line: str, name: str, lineno: int, hide: frozenset[str] = frozenset()) -> str:
        if not self.macros or not _IDENT.search(line):
            return line
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
            body = "".join(sub.get(b, b) for b in body_toks)
            out.append(self._expand(body, name, lineno, hide | {t}))
            i = j + 1
        return "".join(out)


def preprocess(path: str | Path, include_dirs: list[Path] | None = None,
               defines: dict[str, str] | None = None) -> Preprocessed:
    """Preprocess ``path`` (our include dir first on the search path) and return text + line map."""
    return Preprocessor(include_dirs, defines).run(path)
