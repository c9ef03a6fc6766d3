"""The body of a ``linalg.generic`` (arith / math ops on its block arguments) as one
expression over slots, and a reduction's body split into its combiner and operand.

``arith.select`` on an ``arith.cmpi`` of index values (``linalg.index`` and integer adds of
it, :mod:`autotune.frontends.mlir.indices`) is a ``where(COND, A, B)``."""
from __future__ import annotations

from search_spaces.conditions import Condition, IndexExpr
from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Select, Unary, accesses

from autotune.frontends.mlir.attributes import isa, short
from autotune.frontends.mlir.expressions import fold, slot
from autotune.frontends.mlir.indices import (ARITHMETIC, CASTS, arithmetic, as_index, compare,
                                             dim_name)
from autotune.frontends.mlir.source import MlirSource

_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/"}
_CALLS = {"math.exp": "exp", "math.log": "log", "math.sqrt": "sqrt", "math.rsqrt": "rsqrt",
          "math.tanh": "tanh", "math.absf": "abs"}
_MINMAX = {"arith.maximumf": "max", "arith.maxnumf": "max", "arith.minimumf": "min",
           "arith.minnumf": "min"}
_IDENTITY = ("arith.extf", "arith.truncf")


class BodyReader:
    """Translates generic bodies of one function.

    ``ir`` is the bindings' ``ir`` module; ``outer`` maps the function's MLIR values to what
    they are (:class:`~autotune.frontends.mlir.records.Value`), for the scalar constants a body
    captures."""

    def __init__(self, ir, source: MlirSource, outer):
        self._ir, self._source, self._outer = ir, source, outer

    def expression(self, op, n_ins: int, is_map: bool, symbols=None, symbolic: bool = False):
        """What the body of ``op`` (with ``n_ins`` inputs) yields, over ``%in``/``%out`` slots.

        ``symbols``: input number -> the index expression or condition a symbolic input holds
        (over ``linalg.index`` placeholders); ``symbolic``: the result is an integer or i1
        tensor, so the body yields an index expression or condition, not an Expr."""
        o = op.operation
        block = o.regions[0].blocks[0]
        env = {}
        for k, arg in enumerate(block.arguments):
            env[arg] = slot("in", k) if k < n_ins else slot("out", k - n_ins)
            if symbols and k in symbols:
                env[arg] = symbols[k]
        if len(block.arguments) not in ((n_ins, n_ins + 1) if is_map else (n_ins + 1,)):
            raise self._source.op_error(op, f"'{o.name}' with an unexpected number of block "
                                           f"arguments")
        yielded = None
        for bop in block.operations:
            yielded = self._op(bop, env)
        if yielded is None or len(yielded) != 1:
            raise self._source.op_error(op, "linalg.generic must yield one value")
        if not symbolic and isinstance(yielded[0], (IndexExpr, Condition)):
            raise self._source.op_error(op, "linalg.generic yields an index or a comparison into "
                                           "a float tensor")
        return yielded[0]

    def _op(self, bop, env):
        """Bind the result of one body op in ``env``; the yielded values for ``linalg.yield``."""
        ir = self._ir
        o = bop.operation
        name = o.name

        def arg(k):
            v = o.operands[k]
            if v in env:
                return env[v]
            outer = self._outer.get(v)   # a scalar constant captured from the function body
            if outer is not None and outer.kind in ("scalar", "int"):
                return Const(outer.value)
            raise self._source.op_error(bop, f"'{name}' uses a value from outside the "
                                            f"linalg.generic body that is not a scalar constant")

        def num(k):
            v = arg(k)
            if isinstance(v, (IndexExpr, Condition)):
                what = "an index" if isinstance(v, IndexExpr) else "a comparison"
                raise self._source.op_error(bop, f"'{name}' uses {what} as a number (only "
                                                f"arith.select can use an index comparison)")
            return v

        def index(k):
            v = as_index(arg(k))
            if v is None:
                raise self._source.op_error(bop, f"'{name}' on a value that is neither "
                                                f"linalg.index arithmetic nor an integer constant")
            return v

        def put(e):
            env[o.results[0]] = fold(e)
        if name == "linalg.yield":
            return [arg(k) for k in range(len(o.operands))]
        if self._index_op(bop, env, index, num):
            return None
        if name in _BINARY:
            put(Binary(_BINARY[name], num(0), num(1)))
        elif name == "arith.negf":
            put(Unary("neg", num(0)))
        elif name in _MINMAX:
            put(Call(_MINMAX[name], (num(0), num(1))))
        elif name in _CALLS:
            put(Call(_CALLS[name], (num(0),)))
        elif name in _IDENTITY:
            put(num(0))
        elif name == "math.log1p":
            put(Call("log", (Binary("+", Const(1.0), num(0)),)))
        elif name == "math.expm1":
            put(Binary("-", Call("exp", (num(0),)), Const(1.0)))
        elif name in ("math.powf", "math.fpowi"):
            ex = num(1)
            if not (isinstance(ex, Const) and float(ex.value).is_integer()
                    and abs(ex.value) <= 64):
                raise self._source.op_error(bop, f"'{name}' with a non-constant or non-integer "
                                                f"exponent is not supported")
            put(Pow(num(0), int(ex.value)))
        elif name == "arith.constant":
            attr = o.attributes["value"]
            if isa(attr, ir.FloatAttr):
                env[o.results[0]] = Const(ir.FloatAttr(attr).value)
            elif isa(attr, ir.IntegerAttr):
                env[o.results[0]] = Const(float(ir.IntegerAttr(attr).value))
            else:
                raise self._source.op_error(bop, f"unsupported constant {short(attr)}")
        else:
            raise self._source.unsupported(bop)
        return None

    def _index_op(self, bop, env, index, num) -> bool:
        """Bind an index op's result (linalg.index, an integer add or cast, arith.cmpi,
        arith.select of a comparison); False if ``bop`` is no such op."""
        o = bop.operation
        name, ir = o.name, self._ir
        if name == "linalg.index":
            d = int(ir.IntegerAttr(o.attributes["dim"]).value)
            env[o.results[0]] = IndexExpr(((dim_name(d), 1),))
        elif name in CASTS:
            env[o.results[0]] = index(0)
        elif name in ARITHMETIC:
            value = arithmetic(name, index(0), index(1))
            if value is None:
                raise self._source.op_error(bop, "a product of two indices is not supported")
            env[o.results[0]] = value
        elif name == "arith.cmpi":
            cond = compare(int(ir.IntegerAttr(o.attributes["predicate"]).value), index(0),
                           index(1))
            if cond is None:
                raise self._source.op_error(bop, "an unsigned 'arith.cmpi' of an index "
                                                "difference (which may be negative) is not "
                                                "supported")
            env[o.results[0]] = cond
        elif name == "arith.select":
            cond = env.get(o.operands[0])
            if not isinstance(cond, Condition):
                raise self._source.op_error(bop, "'arith.select' is supported on an "
                                                "'arith.cmpi' of linalg.index values only")
            env[o.results[0]] = fold(Select(cond, num(1), num(2)))
        else:
            return False
        return True


def split_accumulator(source: MlirSource, op, expr: Expr, out: Access) -> tuple[str, Expr]:
    """The body of a reduction, ``out + e`` or ``max(out, e)``: (combiner, e)."""
    def no_out(e):
        return out not in accesses(e)
    if isinstance(expr, Binary) and expr.op == "+":
        if expr.a == out and no_out(expr.b):
            return "sum", expr.b
        if expr.b == out and no_out(expr.a):
            return "sum", expr.a
    if isinstance(expr, Call) and expr.fn == "max":
        a, b = expr.args
        if a == out and no_out(b):
            return "max", b
        if b == out and no_out(a):
            return "max", a
    raise source.op_error(op, "unsupported reduction body (only `out + expr` sums and "
                              "`maximumf(out, expr)` maxima are supported)")
