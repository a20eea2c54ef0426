"""P4_16 source -> lark parse tree (LALR), with type names told apart from other names by a post-lexer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from p4.errors import CompileError
from p4.preprocess import Preprocessed

_GRAMMAR = Path(__file__).with_name("p4.lark")
_TYPE_INTRO = {"header", "struct", "header_union", "enum", "extern", "parser", "control", "package"}
_BUILTIN_TYPES = {"packet_in", "packet_out"}
MAX_WIDTH_BITS = 2048          # the widest bit<W>/int<W>; also the largest integer literal, in bits
_BASES = {"0x": 16, "0b": 2, "0o": 8, "0d": 10}


class _BadToken(Exception):
    """A token the grammar accepts but this target cannot hold (raised in the post-lexer, reported with pos)."""

    def __init__(self, tok: Token, message: str) -> None:
        super().__init__(message)
        self.tok, self.message = tok, message


def check_integer_literal(tok: Token) -> None:
    """Reject literals wider than ``MAX_WIDTH_BITS`` (and width prefixes beyond it) before converting them."""
    text = str(tok).replace("_", "")
    width, sep, digits = text.partition("w") if "w" in text else text.partition("s")
    if not sep:
        width, digits = "", text
    if width:
        if len(width) > 5 or not 1 <= int(width) <= MAX_WIDTH_BITS:
            raise _BadToken(tok, f"integer literal width {width[:12]} out of range 1..{MAX_WIDTH_BITS}")
    base = _BASES.get(digits[:2].lower(), 10)
    body = (digits[2:] if base != 10 or digits[:2].lower() == "0d" else digits).lstrip("0")
    per_digit = {16: 4, 8: 3, 2: 1, 10: 3.33}[base]
    if len(body) * per_digit > MAX_WIDTH_BITS + 4 or int(body or "0", base).bit_length() > MAX_WIDTH_BITS:
        raise _BadToken(tok, f"integer literal too large ({len(body):,} digits): the limit is {MAX_WIDTH_BITS} "
                             "bits, the widest bit<W>")


class TypeNamePostLex:
    """Disambiguate tokens the way p4c's lexer does (the classic C 'lexer hack').

    * NAME tokens that name a declared type become TYPE_NAME (P4 declares types before use, so one
      left-to-right pass is enough);
    * ``<`` that opens type arguments/parameters becomes TLT and its matching ``>`` TGT, and a ``>>`` that
      closes two of them is split, so ``register<bit<32>>`` and ``a >> 1 > b`` both parse.
    """

    always_accept = ("NAME", "LT", "GT", "SHR")
    _STMT_START = {";", "{", "}", "extern", "package", "parser", "control", "void", ">", "("}

    def __init__(self) -> None:
        self.types: set[str] = set(_BUILTIN_TYPES)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        intro: str | None = None       # keyword waiting for the name it declares
        pending = ""
        in_typedef = False
        prev: Token | None = None
        prev2: Token | None = None
        depth = 0                      # brace depth: type declarations only count at depth 0
        angle = 0                      # open TLTs
        for_parens = 0                 # open parentheses of a for header: its ";" start no statement
        toks = _Peekable(stream)
        for tok in toks:
            val = tok.value
            if tok.type == "INTEGER":
                check_integer_literal(tok)
            if tok.type == "NAME" and val in self.types:
                tok = Token.new_borrow_pos("TYPE_NAME", val, tok)
            if val == "(" and prev is not None and (for_parens or prev.value == "for"):
                for_parens += 1
            elif val == ")" and for_parens:
                for_parens -= 1
            in_for_test = for_parens > 0 and prev2 is not None and prev2.value == ";"
            if tok.type == "LT" and prev is not None and not in_for_test and (
                    self._opens_type_args(prev, prev2, toks.peek())
                    or self._opens_method_type_args(prev, prev2, toks.peek())):
                tok = Token.new_borrow_pos("TLT", val, tok)
                angle += 1
            elif tok.type == "GT" and angle:
                tok = Token.new_borrow_pos("TGT", val, tok)
                angle -= 1
            elif tok.type == "SHR" and angle:
                first = Token("TGT", ">", tok.start_pos, tok.line, tok.column, tok.end_line, tok.column + 1,
                              tok.start_pos + 1)
                angle -= 1
                yield first
                if angle:
                    angle -= 1
                    tok = Token("TGT", ">", tok.start_pos + 1, tok.line, tok.column + 1, tok.end_line,
                                tok.end_column, tok.end_pos)
                else:
                    tok = Token("GT", ">", tok.start_pos + 1, tok.line, tok.column + 1, tok.end_line,
                                tok.end_column, tok.end_pos)
            if depth == 0:
                if tok.type != "NAME" and tok.type != "TYPE_NAME" and val in _TYPE_INTRO:
                    intro = val
                elif intro and tok.type in ("NAME", "TYPE_NAME"):
                    if intro == "extern":
                        intro = "extern?"      # decide on the next token: '{' or '<' means an object
                        pending = val
                    else:
                        self.types.add(val)
                        intro = None
                elif intro == "extern?":
                    if val in ("{", "<"):
                        self.types.add(pending)
                    intro = None
                elif intro == "extern":
                    intro = None                # extern void f(...) / extern bit<8> f(...): a function
                elif intro == "enum":
                    pass                        # enum bit<8> Name: keep waiting
                elif val in ("typedef", "type") and tok.type != "NAME":
                    in_typedef = True
                elif val == ";" and in_typedef and prev is not None:
                    self.types.add(prev.value)
                    in_typedef = False
            if val == "{":
                depth += 1
            elif val == "}":
                depth = max(0, depth - 1)
            prev2, prev = prev, tok
            yield tok

    def _opens_method_type_args(self, prev: Token, prev2: Token | None, nxt: Token | None) -> bool:
        """``obj.method<T>(...)``: a ``<`` after ``.name`` that is followed by a type (a comparison's right
        operand is never a type name or a type keyword)."""
        if prev.type != "NAME" or prev2 is None or prev2.value != "." or nxt is None:
            return False
        return nxt.type in ("BIT", "INT_KW", "VARBIT", "BOOL") or (nxt.type == "NAME" and nxt.value in self.types)

    def _opens_type_args(self, prev: Token, prev2: Token | None, nxt: Token | None) -> bool:
        """Whether a ``<`` after ``prev`` opens type arguments.  After ``(`` a plain name followed by ``<`` is a
        comparison (``if (i < n)``, ``(a < b ? a : b)``) unless a type follows (``(f<bit<8>>(x))``)."""
        if prev.type in ("TYPE_NAME", "BIT", "INT_KW", "VARBIT", "LOOKAHEAD") or prev.value in ("tuple", "value_set"):
            return True
        if prev.type == "NAME":
            if prev2 is not None and prev2.value == "(":
                return nxt is not None and (nxt.type in ("BIT", "INT_KW", "VARBIT", "BOOL") or nxt.value == "tuple"
                                            or (nxt.type == "NAME" and nxt.value in self.types))
            return prev2 is None or prev2.value in self._STMT_START or prev2.type in ("NAME", "TYPE_NAME", "TGT")
        return False


class _Peekable:
    """A token stream that can show its next token without consuming it."""

    def __init__(self, stream: Iterator[Token]) -> None:
        self._it = iter(stream)
        self._ahead: list[Token] = []

    def __iter__(self) -> _Peekable:
        return self

    def __next__(self) -> Token:
        return self._ahead.pop() if self._ahead else next(self._it)

    def peek(self) -> Token | None:
        if not self._ahead:
            try:
                self._ahead.append(next(self._it))
            except StopIteration:
                return None
        return self._ahead[0]


_LOCK = threading.Lock()
_POSTLEX = TypeNamePostLex()


@lru_cache(maxsize=1)
def _parser() -> Lark:
    """The LALR parser, built once per process (lark caches the analysed grammar on disk too)."""
    return Lark(_GRAMMAR.read_text(), parser="lalr", lexer="basic", postlex=_POSTLEX,
                propagate_positions=True, maybe_placeholders=True, cache=True)


def _terminal_text(parser: Lark, name: str) -> str:
    """'SEMICOLON' -> "';'", 'NAME' -> 'a name': what a user should have written."""
    friendly = {"NAME": "a name", "TYPE_NAME": "a type name", "INTEGER": "a number", "STRING": "a string",
                "TLT": "'<'", "TGT": "'>'"}
    if name in friendly:
        return friendly[name]
    try:
        pat = parser.get_terminal(name).pattern
    except KeyError:
        return name
    if pat.type == "str":
        return repr(pat.value)
    return name.lower()


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"{tok.value!r}"


def parse(pre: Preprocessed) -> Tree:
    """Parse preprocessed P4 text; syntax errors become ``CompileError`` with the original position."""
    with _LOCK:
        return _parse_locked(pre)


def _parse_locked(pre: Preprocessed) -> Tree:
    parser = _parser()
    _POSTLEX.types = set(_BUILTIN_TYPES)
    try:
        return parser.parse(pre.text)
    except _BadToken as exc:
        raise CompileError(exc.message, pre.pos(exc.tok.line or 0, exc.tok.column or 0)) from None
    except UnexpectedToken as exc:
        tok = exc.token
        expected = sorted({_terminal_text(parser, e) for e in exc.expected if not e.startswith("__")})[:10]
        line = getattr(tok, "line", None) or exc.line
        col = getattr(tok, "column", None) or exc.column
        hint = f" (expected one of: {', '.join(expected)})" if expected else ""
        raise CompileError(f"syntax error at {_describe(tok)}{hint}", pre.pos(line, col)) from None
    except UnexpectedCharacters as exc:
        raise CompileError(f"unexpected character {exc.char!r}", pre.pos(exc.line, exc.column)) from None
    except UnexpectedInput as exc:
        raise CompileError("syntax error", pre.pos(exc.line, exc.column)) from None
