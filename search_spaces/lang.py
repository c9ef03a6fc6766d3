"""Tokenizer and recursive-descent parser for the `program` statements.

The text is data: it is tokenised and parsed here, never evaluated by Python.  Every syntax error
is raised as a :class:`WorkloadError` pointing at the offending token.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import Located, WorkloadError
from .conditions import COMPARISONS
from .ir import FUNCTIONS, Access, Binary, Call, Const, Expr, Pow, Select, Unary
from .where_syntax import SYNTAX as WHERE_SYNTAX, PWhere, lower_condition, parse_where

MAX_DEPTH = 100  # nesting bound: deeper input is rejected, never a RecursionError
MAX_OPERATORS = 200  # operators per statement: bounds the tree depth of long chains too

_TOKEN = re.compile(
    r"(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|\+=|<=|>=|==|!=|[-+*/=\[\](),<>])"
    r"|(?P<ws>[ \t\r]+)"
)


@dataclass(frozen=True)
class Tok:
    kind: str   # num | name | op | end
    text: str
    col: int    # 1-based


@dataclass(frozen=True)
class PAccess:
    """A parsed access with the position of its tensor name."""
    tensor: str
    idx: tuple[str, ...]
    col: int
    idx_cols: tuple[int, ...]


@dataclass(frozen=True)
class PName:
    """A bare name: a dim extent used as a constant."""
    name: str
    col: int


@dataclass(frozen=True)
class Statement:
    target: PAccess
    combiner: str
    expr: "PExpr"
    line: int


PExpr = object  # parse tree: Const | PAccess | PName | Unary | Binary | Pow | Call | PWhere


def tokenize(text: str, line: int, loc: Located) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise loc.error(f"unexpected character {text[pos]!r}", line, pos + 1)
        kind = m.lastgroup
        if kind != "ws":
            toks.append(Tok(kind, m.group(), pos + 1))
        pos = m.end()
    toks.append(Tok("end", "", len(text) + 1))
    return toks


class _Parser:
    def __init__(self, toks: list[Tok], line: int, loc: Located):
        self.toks, self.i, self.line, self.loc, self.depth = toks, 0, line, loc, 0
        self.operators = 0

    @property
    def cur(self) -> Tok:
        return self.toks[self.i]

    def err(self, msg: str, tok: Tok | None = None) -> WorkloadError:
        tok = tok or self.cur
        return self.loc.error(msg, self.line, tok.col)

    def describe(self, tok: Tok) -> str:
        return "end of line" if tok.kind == "end" else repr(tok.text)

    def expect(self, text: str) -> Tok:
        if self.cur.text != text or self.cur.kind not in ("op", "name"):
            raise self.err(f"expected {text!r}, found {self.describe(self.cur)}")
        tok = self.cur
        self.i += 1
        return tok

    def statement(self) -> Statement:
        if self.cur.kind != "name":
            raise self.err(f"expected a tensor name, found {self.describe(self.cur)}")
        target = self.access_after_name()
        if self.cur.text == "=":
            comb = "none"
            self.i += 1
        elif self.cur.text == "+=":
            comb = "sum"
            self.i += 1
        elif self.cur.text == "max" and self.toks[self.i + 1].text == "=":
            comb = "max"
            self.i += 2
        else:
            raise self.err(f"expected '=', '+=' or 'max=', found {self.describe(self.cur)}")
        expr = self.expr()
        if self.cur.kind != "end":
            raise self.err(f"unexpected {self.describe(self.cur)} after the expression")
        return Statement(target, comb, expr, self.line)

    def access_after_name(self) -> PAccess:
        name = self.cur
        self.i += 1
        self.expect("[")
        idx, cols = [], []
        if self.cur.text == "]":
            # a scalar (a loss summed to one number) has no index: say so, and what works
            raise self.err(f"{name.text}[] has no index: tensors of no dimension are not "
                           f"supported; give it one index of an input dim of extent 1 (in "
                           f"[dims]), e.g. {name.text}[o] with o indexing such an input")
        while True:
            if self.cur.kind != "name":
                raise self.err(f"expected an index name, found {self.describe(self.cur)}")
            idx.append(self.cur.text)
            cols.append(self.cur.col)
            self.i += 1
            if self.cur.text == ",":
                self.i += 1
                continue
            if self.cur.text == "]":
                self.i += 1
                break
            raise self.err(f"expected ',' or ']' in subscripts, found {self.describe(self.cur)}")
        return PAccess(name.text, tuple(idx), name.col, tuple(cols))

    def nest(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.err(f"expression nested deeper than {MAX_DEPTH} levels")

    def count_operator(self):
        self.operators += 1
        if self.operators > MAX_OPERATORS:
            raise self.err(f"more than {MAX_OPERATORS} operators in one statement; split it")
        self.i += 1

    def expr(self) -> PExpr:
        self.nest()
        node = self.term()
        while self.cur.text in ("+", "-") and self.cur.kind == "op":
            op = self.cur.text
            self.count_operator()
            node = Binary(op, node, self.term())
        if self.cur.text in COMPARISONS:
            raise self.err(f"a comparison ({self.cur.text}) is only allowed as the condition of "
                           f"{WHERE_SYNTAX}")
        self.depth -= 1
        return node

    def term(self) -> PExpr:
        node = self.unary()
        while self.cur.text in ("*", "/") and self.cur.kind == "op":
            op = self.cur.text
            self.count_operator()
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> PExpr:
        if self.cur.text == "-" and self.cur.kind == "op":
            self.i += 1
            self.nest()
            node = Unary("neg", self.unary())
            self.depth -= 1
            return node
        if self.cur.text == "+" and self.cur.kind == "op":
            self.i += 1
            self.nest()  # bounded like '-': a long run of '+' must not hit the recursion limit
            node = self.unary()
            self.depth -= 1
            return node
        return self.power()

    def power(self) -> PExpr:
        base = self.atom()
        if self.cur.text == "**":
            self.i += 1
            sign = 1
            if self.cur.text == "-":
                sign = -1
                self.i += 1
            tok = self.cur
            if tok.kind != "num" or not re.fullmatch(r"\d+", tok.text):
                raise self.err(f"'**' needs an integer exponent, found {self.describe(tok)}")
            if int(tok.text) > 64:
                raise self.err("exponent larger than 64")
            self.i += 1
            return Pow(base, sign * int(tok.text))
        return base

    def atom(self) -> PExpr:
        tok = self.cur
        if tok.kind == "num":
            self.i += 1
            value = float(tok.text)
            if not math.isfinite(value):
                raise self.err(f"number {tok.text} is out of range", tok)
            return Const(value)
        if tok.text == "(":
            self.i += 1
            node = self.expr()
            self.expect(")")
            return node
        if tok.kind == "name":
            nxt = self.toks[self.i + 1].text
            if nxt == "[":
                return self.access_after_name()
            if nxt == "(":
                return parse_where(self) if tok.text == "where" else self.call()
            self.i += 1
            return PName(tok.text, tok.col)
        raise self.err(f"expected a number, tensor, function or '(', found {self.describe(tok)}")

    def call(self) -> PExpr:
        tok = self.cur
        if tok.text not in FUNCTIONS:
            known = ", ".join(sorted([*FUNCTIONS, "where"]))
            raise self.err(f"unknown function {tok.text!r} (known: {known})", tok)
        self.i += 2
        args = [self.expr()]
        while self.cur.text == ",":
            self.i += 1
            args.append(self.expr())
        self.expect(")")
        if len(args) != FUNCTIONS[tok.text]:
            raise self.err(f"{tok.text}() takes {FUNCTIONS[tok.text]} argument(s), "
                           f"got {len(args)}", tok)
        return Call(tok.text, tuple(args))


def parse_program(text: str, loc: Located) -> list[Statement]:
    """Parse every statement of ``text`` (one per line, ``#`` comments, blank lines allowed)."""
    out = []
    for n, raw in enumerate(text.split("\n"), start=1):
        body = raw.split("#", 1)[0]
        if not body.strip():
            continue
        toks = tokenize(body, n, loc)
        out.append(_Parser(toks, n, loc).statement())
    return out


def walk(e: PExpr):
    """Yield every node of a parse tree."""
    yield e
    if isinstance(e, Unary):
        yield from walk(e.x)
    elif isinstance(e, Binary):
        yield from walk(e.a)
        yield from walk(e.b)
    elif isinstance(e, Pow):
        yield from walk(e.base)
    elif isinstance(e, Call):
        for a in e.args:
            yield from walk(a)
    elif isinstance(e, PWhere):   # its condition holds no expression nodes
        yield from walk(e.a)
        yield from walk(e.b)


def lower(e: PExpr, dims: dict[str, int]) -> Expr:
    """Parse tree -> IR expression: dim names become constants, accesses lose positions."""
    if isinstance(e, PAccess):
        return Access(e.tensor, e.idx)
    if isinstance(e, PName):
        return Const(float(dims[e.name]))
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return Unary(e.op, lower(e.x, dims))
    if isinstance(e, Binary):
        return Binary(e.op, lower(e.a, dims), lower(e.b, dims))
    if isinstance(e, Pow):
        return Pow(lower(e.base, dims), e.exponent)
    if isinstance(e, PWhere):
        return Select(lower_condition(e.cond), lower(e.a, dims), lower(e.b, dims))
    return Call(e.fn, tuple(lower(a, dims) for a in e.args))
