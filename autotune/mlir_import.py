"""`autotune import-mlir`: linalg-on-tensors MLIR -> an equivalent workload TOML.

The MLIR is read by the real parser of iree-base-compiler's Python bindings (an optional extra,
imported lazily), callees are inlined and named linalg ops (matmul, batch_matmul, fill,
transpose, broadcast, reduce, elementwise ...) are turned into ``linalg.generic`` by MLIR's own
``linalg-generalize-named-ops`` pass; then every generic (or ``linalg.map``) becomes one
statement:

* its parallel iterators are the left-hand indices, its reduction iterators are summed (``+=``
  when the body yields ``out + expr`` onto a zero init, ``max=`` for ``maximumf`` onto ``-inf``);
  another init (a tensor, or another number) becomes a second statement adding (or max-ing) it;
* its indexing maps (projected permutations) become the subscripts;
* its body (arith / math ops on the block arguments) becomes the expression; a splat constant
  operand becomes a number; ``1/(1+exp(-x))`` within one body is recognised as ``sigmoid(x)``.

Copies (transposes, broadcasts), ``tensor.empty``, fills and splat constants produce no
statement: they become views of, or numbers in, the statements that read them.  The language has
no reshape, so ``tensor.expand_shape`` / ``collapse_shape`` are folded away: a dimension that some
reshape splits is split everywhere it is connected to (through the generics' iteration dims), so
every tensor is stored with the finest dims and a reshape is just a regrouping of them.  Size-1
dims vanish from intermediates.  Dims get one name per extent (``D0``, ``D1``, ...).  The
function's arguments, in order, are the inputs (named from a ``jax.arg_info`` attribute where
there is one, else ``arg0``, ``arg1``, ...); its results are the outputs (``out``, or ``out0``,
``out1``, ...).  ``loc(...)`` annotations are dropped before parsing, so messages name lines of
the file itself.

Anything else is refused with one line naming the op and its line::

    model.mlir:12:5: error: unsupported op 'scf.for'

    toml = import_mlir(text, "model.mlir")      # raises MlirImportError / MlirUnavailable
    write_workload(toml, "model.toml")
"""
from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search_spaces.errors import WorkloadError
from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Unary, accesses

INSTALL_HINT = ("install it with `pip install iree-base-compiler` "
                "(or `pip install 'autotune[mlir]'`)")
PIPELINE = "builtin.module(inline{default-pipeline=}, linalg-generalize-named-ops)"

_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/"}
_CALLS = {"math.exp": "exp", "math.log": "log", "math.sqrt": "sqrt", "math.rsqrt": "rsqrt",
          "math.tanh": "tanh", "math.absf": "abs"}
_MINMAX = {"arith.maximumf": "max", "arith.maxnumf": "max", "arith.minimumf": "min",
           "arith.minnumf": "min"}
_IDENTITY = ("arith.extf", "arith.truncf")
_LETTERS = "ijklmnopqrstuvwxyzabcdefgh"


class MlirUnavailable(Exception):
    """The MLIR Python bindings (iree-base-compiler) are not installed."""


class MlirImportError(WorkloadError):
    """MLIR that cannot be imported: one line, ``file:line:col: error: ...``."""


def _bindings():
    try:
        from iree.compiler import ir, passmanager
    except Exception as e:  # ImportError, or a broken install failing at import
        raise MlirUnavailable(f"import-mlir needs the MLIR Python bindings of iree-base-compiler "
                              f"({type(e).__name__}: {e}); {INSTALL_HINT}") from None
    return ir, passmanager


# ---- small helpers ------------------------------------------------------------------------------
def _line_col(loc) -> tuple[int, int]:
    m = re.search(r":(\d+):(\d+)", str(loc))
    return (int(m.group(1)), int(m.group(2))) if m else (1, 1)


def _fmt(value: float, dtype: str) -> str:
    """A constant as the shortest decimal that rounds to the same value of the IR's type."""
    if not math.isfinite(value):
        raise ValueError(value)
    if dtype == "float32" and float(np.float32(value)) == value:
        text = np.format_float_positional(np.float32(value), unique=True, trim="0")
        if "e" not in text and len(text) > 24:
            text = np.format_float_scientific(np.float32(value), unique=True, trim="0")
    else:
        text = repr(float(value))
    text = text.replace("e+", "e")
    if text.startswith("."):
        text = "0" + text
    if text.startswith("-."):
        text = "-0" + text[1:]
    if text.endswith("."):
        text += "0"
    return text


def _to_text(e: Expr, dtype: str) -> str:
    if isinstance(e, Const):
        return _fmt(e.value, dtype)
    if isinstance(e, Access):
        return f"{e.tensor}[{','.join(e.idx)}]"
    if isinstance(e, Unary):
        return f"(-{_to_text(e.x, dtype)})"
    if isinstance(e, Binary):
        return f"({_to_text(e.a, dtype)} {e.op} {_to_text(e.b, dtype)})"
    if isinstance(e, Pow):
        return f"({_to_text(e.base, dtype)} ** {e.exponent})"
    return f"{e.fn}({', '.join(_strip(_to_text(a, dtype)) for a in e.args)})"


def _strip(text: str) -> str:
    """Drop the outermost parentheses of a statement's right-hand side."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for n, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and n < len(text) - 1:
                return text
        return text[1:-1]
    return text


_FOLD = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
         "tanh": math.tanh, "abs": abs, "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
         "max": max, "min": min}


def _fold(e: Expr) -> Expr:
    """Fold operations on constants (in float64) and recognise sigmoid."""
    try:
        if isinstance(e, Unary) and isinstance(e.x, Const):
            return Const(-e.x.value)
        if isinstance(e, Binary) and isinstance(e.a, Const) and isinstance(e.b, Const):
            a, b = e.a.value, e.b.value
            return Const({"+": a + b, "-": a - b, "*": a * b, "/": a / b}[e.op])
        if isinstance(e, Pow) and isinstance(e.base, Const):
            return Const(float(e.base.value) ** e.exponent)
        if isinstance(e, Call) and all(isinstance(a, Const) for a in e.args):
            return Const(float(_FOLD[e.fn](*[a.value for a in e.args])))
    except (ArithmeticError, ValueError):
        return e
    x = _sigmoid_arg(e)
    return Call("sigmoid", (x,)) if x is not None else e


def _is_const(e, value) -> bool:
    return isinstance(e, Const) and e.value == value


def _sigmoid_arg(e: Expr):
    """x when ``e`` is 1/(1+exp(-x)) (either operand order of the sum), else None."""
    if not (isinstance(e, Binary) and e.op == "/" and _is_const(e.a, 1.0)):
        return None
    s = e.b
    if not (isinstance(s, Binary) and s.op == "+"):
        return None
    for one, ex in ((s.a, s.b), (s.b, s.a)):
        if _is_const(one, 1.0) and isinstance(ex, Call) and ex.fn == "exp":
            arg = ex.args[0]
            if isinstance(arg, Unary):
                return arg.x
            if isinstance(arg, Binary) and arg.op == "*":
                if _is_const(arg.a, -1.0):
                    return arg.b
                if _is_const(arg.b, -1.0):
                    return arg.a
            if isinstance(arg, Binary) and arg.op == "-" and _is_const(arg.a, 0.0):
                return arg.b
    return None


def _subst(e: Expr, fn) -> Expr:
    """``e`` with every access replaced by ``fn(access)`` (an Expr), folded bottom-up."""
    if isinstance(e, Access):
        return fn(e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return _fold(Unary(e.op, _subst(e.x, fn)))
    if isinstance(e, Binary):
        return _fold(Binary(e.op, _subst(e.a, fn), _subst(e.b, fn)))
    if isinstance(e, Pow):
        return _fold(Pow(_subst(e.base, fn), e.exponent))
    return _fold(Call(e.fn, tuple(_subst(a, fn) for a in e.args)))


def _slot(kind: str, n: int) -> Access:
    """A placeholder for the generic's n-th input ("in") or output ("out") block argument."""
    return Access(f"%{kind}{n}", ())


def _slot_of(a: Access) -> tuple[str, int]:
    m = re.fullmatch(r"%(in|out)(\d+)", a.tensor)
    return m.group(1), int(m.group(2))


# ---- values --------------------------------------------------------------------------------------
@dataclass
class _Val:
    """What an SSA value is: a tensor (``vid``), a splat constant, an empty tensor, a scalar."""
    kind: str                   # "tensor" | "const" | "empty" | "scalar" | "int"
    shape: tuple[int, ...] = ()
    value: float = 0.0
    vid: int = -1


@dataclass
class _Generic:
    line: int
    col: int
    name: str
    sizes: list[int]                         # per iteration dim
    reduction: list[bool]
    operands: list[tuple[_Val, list]]         # ins then outs: (value, map results)
    n_in: int
    expr: Expr                                # with %in/%out slots; constants substituted
    combiner: str                             # none | sum | max
    init: Expr | None                         # what the reduction starts from, if not neutral
    result: _Val | None = None
    is_copy: bool = False                     # a transpose/broadcast copy of one tensor
    known_line: bool = True                   # False: the passes lost its location (inlined)


@dataclass
class _Stmt:
    out: int                                  # base id
    lhs: list[str]
    combiner: str
    expr: Expr                                # accesses name bases as "#<id>"
    line: int
    origin: str


class _Importer:
    def __init__(self, text: str, path: str, function: str | None):
        self.text, self.path, self.function = text, path, function
        self.ir, self.pm = _bindings()
        self.vals: dict = {}                  # mlir Value -> _Val
        self.shapes: list[tuple[int, ...]] = []   # per vid
        self.generics: list[_Generic] = []
        # reshapes: (coarse vid, fine vid, fine dims per coarse dim, line)
        self.reshapes: list[tuple[int, int, list[list[int]], int]] = []
        self.args: list[_Val] = []
        self.arg_names: list[str] = []
        self.results: list[_Val] = []
        self.result_line = 1
        self.dtype = None
        self.func_name = ""
        self.func_line = 1

    # -- errors -------------------------------------------------------------------------------
    def err(self, msg: str, line: int = 1, col: int = 1) -> MlirImportError:
        return MlirImportError(msg, self.path, line, col)

    def op_err(self, op, msg: str) -> MlirImportError:
        return self.err(msg, *self._where(op))

    def _where(self, op) -> tuple[int, int]:
        """The op's line and column in this file; an op whose location the passes lost (one
        inlined from a callee) is found by its name in the text."""
        m = re.search(r":(\d+):(\d+)", str(op.location))
        if m:
            return int(m.group(1)), int(m.group(2))
        name = op.operation.name
        for n, text in enumerate(self.text.split("\n"), start=1):
            k = text.find(name)
            if k >= 0 and not text.lstrip().startswith("//"):
                return n, k + 1
        return 1, 1

    def unsupported(self, op) -> MlirImportError:
        name = op.operation.name
        hint = ""
        if name.split(".")[0] in ("stablehlo", "mhlo", "chlo", "tosa", "torch", "tf", "tfl"):
            hint = (" (lower the program to linalg on tensors first, e.g. with "
                    "`iree-compile --compile-to=input FILE`)")
        return self.op_err(op, f"unsupported op '{name}'{hint}")

    # -- parsing ------------------------------------------------------------------------------
    def run(self) -> str:
        ir = self.ir
        with ir.Context() as ctx, ir.Location.unknown():
            ctx.allow_unregistered_dialects = False
            try:
                module = ir.Module.parse(_strip_locations(self.text))
            except ir.MLIRError as e:
                raise self._diag_error("cannot parse the MLIR", e) from None
            except Exception as e:  # older bindings raise ValueError with the diagnostics
                raise self.err(f"cannot parse the MLIR: {_one_line(str(e))}") from None
            func = self._pick_function(module)
            self.func_line = _line_col(func.location)[0]
            try:
                self.pm.PassManager.parse(PIPELINE).run(module.operation)
            except Exception as e:
                if isinstance(e, ir.MLIRError):
                    raise self._diag_error("MLIR passes failed", e) from None
                raise self.err(f"MLIR passes failed: {_one_line(str(e))}") from None
            func = self._pick_function(module)
            self._function(func)
        return self._emit()

    def _diag_error(self, what: str, e) -> MlirImportError:
        diags = getattr(e, "error_diagnostics", None) or []
        if diags:
            d = diags[0]
            line, col = _line_col(d.location)
            return self.err(f"{what}: {_one_line(d.message)}", line, col)
        return self.err(f"{what}: {_one_line(str(e))}")

    def _pick_function(self, module):
        funcs = []
        for op in module.body.operations:
            name = op.operation.name
            if name in ("func.func", "util.func"):
                attrs = op.operation.attributes
                sym = _str_attr(attrs["sym_name"])
                private = ("sym_visibility" in attrs
                           and _str_attr(attrs["sym_visibility"]) == "private")
                has_body = len(op.operation.regions) and len(op.operation.regions[0].blocks)
                if has_body:
                    funcs.append((sym, private, op))
            elif name in ("util.global", "ml_program.global"):
                raise self.op_err(op, f"unsupported op '{name}' (globals)")
        if self.function is not None:
            for sym, _, op in funcs:
                if sym == self.function:
                    return op
            raise self.err(f"no function @{self.function} in the file "
                           f"(functions: {', '.join('@' + s for s, _, _ in funcs) or 'none'})")
        public = [f for f in funcs if not f[1]] or funcs
        if not public:
            raise self.err("no func.func with a body in the file")
        if len(public) > 1:
            mains = [f for f in public if f[0] == "main"]
            if len(mains) != 1:
                raise self.err(f"several public functions ({', '.join('@' + f[0] for f in public)}"
                               f"); choose one with --function")
            public = mains
        return public[0][2]

    # -- types ----------------------------------------------------------------------------------
    def _tensor_type(self, t, op, what: str) -> tuple[tuple[int, ...], str]:
        ir = self.ir
        if not _isa(t, ir.RankedTensorType):
            raise self.op_err(op, f"{what} has type {t}; only ranked tensors of f32/f64 are "
                                  f"supported")
        rt = ir.RankedTensorType(t)
        if not rt.has_static_shape:
            raise self.op_err(op, f"{what} has a dynamic shape ({t}); only static shapes are "
                                  f"supported")
        et = str(rt.element_type)
        if et not in ("f32", "f64"):
            raise self.op_err(op, f"{what} has element type {et}; only f32 and f64 are supported")
        dtype = "float32" if et == "f32" else "float64"
        if self.dtype is None:
            self.dtype = dtype
        elif self.dtype != dtype:
            self.dtype = "float64"
        return tuple(int(s) for s in rt.shape), dtype

    def _new_tensor(self, shape) -> _Val:
        self.shapes.append(tuple(shape))
        return _Val("tensor", tuple(shape), vid=len(self.shapes) - 1)

    def _get(self, v, op) -> _Val:
        try:
            return self.vals[v]
        except KeyError:
            raise self.op_err(op, f"'{op.operation.name}' uses a value defined outside the "
                                  f"function body") from None

    # -- the function ------------------------------------------------------------------------------
    def _function(self, func) -> None:
        f = func.operation
        self.func_name = _str_attr(f.attributes["sym_name"])
        blocks = f.regions[0].blocks
        if len(blocks) != 1:
            raise self.op_err(func, "functions with several blocks are not supported")
        block = blocks[0]
        arg_attrs = None
        if "arg_attrs" in f.attributes:
            try:
                arg_attrs = list(self.ir.ArrayAttr(f.attributes["arg_attrs"]))
            except Exception:
                arg_attrs = None
        for n, arg in enumerate(block.arguments):
            shape, _ = self._tensor_type(arg.type, func, f"argument {n}")
            val = self._new_tensor(shape)
            self.vals[arg] = val
            self.args.append(val)
            self.arg_names.append(_arg_name(arg_attrs[n] if arg_attrs and n < len(arg_attrs)
                                            else None, n))
        for op in block.operations:
            self._op(op)

    def _op(self, op) -> None:
        o = op.operation
        name = o.name
        if name == "arith.constant":
            self.vals[o.results[0]] = self._constant(op)
        elif name == "tensor.empty":
            if len(o.operands):
                raise self.op_err(op, "tensor.empty with dynamic sizes is not supported")
            shape, _ = self._tensor_type(o.results[0].type, op, "the result")
            self.vals[o.results[0]] = _Val("empty", shape)
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            self._reshape(op)
        elif name == "tensor.cast":
            src = self._get(o.operands[0], op)
            shape, _ = self._tensor_type(o.results[0].type, op, "the result")
            if shape != src.shape:
                raise self.op_err(op, "tensor.cast changing the shape is not supported")
            self.vals[o.results[0]] = src
        elif name in ("linalg.generic", "linalg.map"):
            self._generic(op)
        elif name in ("func.return", "util.return"):
            self.result_line = self._where(op)[0]
            for n, v in enumerate(o.operands):
                self._tensor_type(v.type, op, f"result {n}")
                self.results.append(self._get(v, op))
        else:
            raise self.unsupported(op)

    def _constant(self, op) -> _Val:
        ir = self.ir
        o = op.operation
        attr = o.attributes["value"]
        t = o.results[0].type
        if _isa(t, ir.RankedTensorType):
            shape, _ = self._tensor_type(t, op, "the constant")
            if not _isa(attr, ir.DenseElementsAttr):
                raise self.op_err(op, f"unsupported constant {_short(attr)}")
            dense = ir.DenseElementsAttr(attr)
            if not dense.is_splat:
                raise self.op_err(op, "non-splat constant tensors are not supported (pass the "
                                      "values as a function argument)")
            return _Val("const", shape, value=_float_attr(ir, dense.get_splat_value()))
        if _isa(attr, ir.FloatAttr):
            return _Val("scalar", value=ir.FloatAttr(attr).value)
        if _isa(attr, ir.IntegerAttr):
            return _Val("int", value=float(ir.IntegerAttr(attr).value))
        raise self.op_err(op, f"unsupported constant {_short(attr)}")

    def _reshape(self, op) -> None:
        ir = self.ir
        o = op.operation
        src = self._get(o.operands[0], op)
        shape, _ = self._tensor_type(o.results[0].type, op, "the result")
        if src.kind in ("const", "empty"):
            self.vals[o.results[0]] = _Val(src.kind, shape, value=src.value)
            return
        groups = [[int(ir.IntegerAttr(x).value) for x in ir.ArrayAttr(g)]
                  for g in ir.ArrayAttr(o.attributes["reassociation"])]
        new = self._new_tensor(shape)
        self.vals[o.results[0]] = new
        line = self._where(op)[0]
        if o.name == "tensor.expand_shape":
            self.reshapes.append((src.vid, new.vid, groups, line))
        else:
            self.reshapes.append((new.vid, src.vid, groups, line))

    # -- linalg.generic ----------------------------------------------------------------------------
    def _generic(self, op) -> None:
        ir = self.ir
        o = op.operation
        line, col = self._where(op)
        self.known_line = bool(re.search(r":\d+:\d+", str(op.location)))
        is_map = o.name == "linalg.map"   # elementwise, its body sees the inputs only
        if is_map:
            ins, outs = list(o.operands)[:-1], list(o.operands)[-1:]
        else:
            gv = op.opview if hasattr(op, "opview") else op
            ins, outs = list(gv.inputs), list(gv.outputs)
        if len(outs) != 1 or len(o.results) != 1:
            raise self.op_err(op, f"'{o.name}' with {len(outs)} outputs is not supported "
                                  f"(one result per generic)")
        if is_map:
            rank = len(self._get(outs[0], op).shape)
            maps = [list(range(rank)) for _ in ins + outs]
            iters = ["parallel"] * rank
        else:
            maps = [ir.AffineMapAttr(a).value
                    for a in ir.ArrayAttr(o.attributes["indexing_maps"])]
            iters = [str(a) for a in ir.ArrayAttr(o.attributes["iterator_types"])]
        reduction = ["reduction" in s for s in iters]
        if not all(("parallel" in s) or ("reduction" in s) for s in iters):
            raise self.op_err(op, f"unsupported iterator types {iters}")
        n = len(iters)
        sizes: list[int | None] = [None] * n
        operands = []
        for k, (v, amap) in enumerate(zip(ins + outs, maps)):
            val = self._get(v, op)
            res = []
            for p, ex in enumerate(amap if is_map else amap.results):
                if is_map or _isa(ex, ir.AffineDimExpr):
                    d = ex if is_map else ir.AffineDimExpr(ex).position
                    res.append(d)
                    if val.kind not in ("scalar", "int") and sizes[d] is None:
                        sizes[d] = val.shape[p]
                elif _isa(ex, ir.AffineConstantExpr) and ir.AffineConstantExpr(ex).value == 0 \
                        and val.shape[p] == 1:
                    res.append(None)
                else:
                    raise self.op_err(op, f"indexing map {amap} is not a projected permutation "
                                          f"(windows, strides and offsets are not supported)")
            if val.kind in ("scalar", "int") and res:
                raise self.op_err(op, "a scalar operand with an indexed map")
            operands.append((val, res))
        if any(s is None for s in sizes):
            raise self.op_err(op, "an iteration dim that indexes no operand")
        out_val, out_map = operands[-1]
        if None in out_map or sorted(out_map) != sorted(d for d in range(n) if not reduction[d]):
            raise self.op_err(op, "the output map must use each parallel dim once and no "
                                  "reduction dim")
        result_shape, _ = self._tensor_type(o.results[0].type, op, "the result")

        # the body
        block = o.regions[0].blocks[0]
        env = {}
        for k, arg in enumerate(block.arguments):
            env[arg] = _slot("in", k) if k < len(ins) else _slot("out", k - len(ins))
        if len(block.arguments) not in ((len(ins), len(ins) + 1) if is_map else (len(ins) + 1,)):
            raise self.op_err(op, f"'{o.name}' with an unexpected number of block arguments")
        yielded = None
        for bop in block.operations:
            yielded = self._body_op(bop, env)
        if yielded is None or len(yielded) != 1:
            raise self.op_err(op, "linalg.generic must yield one value")
        expr = yielded[0]

        def consts(a: Access) -> Expr:
            kind, k = _slot_of(a)
            if kind == "out":
                return a
            val = operands[k][0]
            if val.kind in ("const", "scalar", "int"):
                return Const(val.value)
            if val.kind == "empty":
                raise self.op_err(op, "the body reads a tensor.empty (uninitialised) input")
            return a
        expr = _subst(expr, consts)
        out_slot = _slot("out", 0)
        init = None
        combiner = "none"
        if any(reduction):
            combiner, expr = self._accumulator(op, expr, out_slot)
            if out_val.kind == "empty":
                raise self.op_err(op, "a reduction into a tensor.empty (uninitialised) output")
            if out_val.kind == "const":
                neutral = 0.0 if combiner == "sum" else -math.inf
                if out_val.value != neutral:
                    init = Const(out_val.value)
            else:
                init = out_slot
        elif out_slot in accesses(expr):
            if out_val.kind == "empty":
                raise self.op_err(op, "the body reads its tensor.empty (uninitialised) output")
            if out_val.kind == "const":
                expr = _subst(expr, lambda a: Const(out_val.value) if a == out_slot else a)
        g = _Generic(line, col, o.name, sizes, reduction, operands, len(ins), expr, combiner, init,
                     known_line=self.known_line)
        reads = [a for a in accesses(expr)]
        if not reads and (init is None or isinstance(init, Const)):
            value = self._constant_result(g)
            if value is None:
                raise self.op_err(op, "cannot fold this constant computation")
            self.vals[o.results[0]] = _Val("const", result_shape, value=value)
            return
        if combiner == "none" and isinstance(expr, Access) and _slot_of(expr)[0] == "in":
            g.is_copy = True
        g.result = self._new_tensor(result_shape)
        self.vals[o.results[0]] = g.result
        self.generics.append(g)

    def _constant_result(self, g: _Generic):
        e = g.expr
        if not isinstance(e, Const):
            return None
        v = e.value
        red = 1
        for s, r in zip(g.sizes, g.reduction):
            red *= s if r else 1
        if g.combiner == "sum":
            v = v * red + (g.init.value if g.init is not None else 0.0)
        elif g.combiner == "max":
            v = max(v, g.init.value) if g.init is not None else v
        return v

    def _accumulator(self, op, expr: Expr, out: Access) -> tuple[str, Expr]:
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
        raise self.op_err(op, "unsupported reduction body (only `out + expr` sums and "
                              "`maximumf(out, expr)` maxima are supported)")

    def _body_op(self, bop, env):
        ir = self.ir
        o = bop.operation
        name = o.name

        def arg(k):
            v = o.operands[k]
            if v in env:
                return env[v]
            outer = self.vals.get(v)   # a scalar constant captured from the function body
            if outer is not None and outer.kind in ("scalar", "int"):
                return Const(outer.value)
            raise self.op_err(bop, f"'{name}' uses a value from outside the linalg.generic "
                                   f"body that is not a scalar constant")

        def put(e):
            env[o.results[0]] = _fold(e)
        if name == "linalg.yield":
            return [arg(k) for k in range(len(o.operands))]
        if name in _BINARY:
            put(Binary(_BINARY[name], arg(0), arg(1)))
        elif name == "arith.negf":
            put(Unary("neg", arg(0)))
        elif name in _MINMAX:
            put(Call(_MINMAX[name], (arg(0), arg(1))))
        elif name in _CALLS:
            put(Call(_CALLS[name], (arg(0),)))
        elif name in _IDENTITY:
            put(arg(0))
        elif name == "math.log1p":
            put(Call("log", (Binary("+", Const(1.0), arg(0)),)))
        elif name == "math.expm1":
            put(Binary("-", Call("exp", (arg(0),)), Const(1.0)))
        elif name in ("math.powf", "math.fpowi"):
            ex = arg(1)
            if not (isinstance(ex, Const) and float(ex.value).is_integer()
                    and abs(ex.value) <= 64):
                raise self.op_err(bop, f"'{name}' with a non-constant or non-integer exponent is "
                                       f"not supported")
            put(Pow(arg(0), int(ex.value)))
        elif name == "arith.constant":
            attr = o.attributes["value"]
            if _isa(attr, ir.FloatAttr):
                env[o.results[0]] = Const(ir.FloatAttr(attr).value)
            elif _isa(attr, ir.IntegerAttr):
                env[o.results[0]] = Const(float(ir.IntegerAttr(attr).value))
            else:
                raise self.op_err(bop, f"unsupported constant {_short(attr)}")
        else:
            raise self.unsupported(bop)
        return None

    # -- dims: connect, refine, name ----------------------------------------------------------
    def _dims(self) -> None:
        """Factor lists per (value, dim) and (generic, iteration dim), and a name per sub-dim."""
        parent: dict = {}

        def find(x):
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a, b):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[ra] = rb
        size: dict = {}
        for vid, shape in enumerate(self.shapes):
            for k, s in enumerate(shape):
                size[("v", vid, k)] = s
                find(("v", vid, k))
        for gi, g in enumerate(self.generics):
            for d, s in enumerate(g.sizes):
                size[("g", gi, d)] = s
                find(("g", gi, d))
            used = {_slot_of(a) for a in accesses(g.expr)}
            if g.init is not None and isinstance(g.init, Access):
                used.add(("out", 0))
            for k, (val, res) in enumerate(g.operands):
                slot = ("in", k) if k < g.n_in else ("out", k - g.n_in)
                if slot not in used or val.kind != "tensor":
                    continue
                for p, d in enumerate(res):
                    if d is not None:
                        union(("v", val.vid, p), ("g", gi, d))
            for p, d in enumerate(g.operands[-1][1]):
                union(("v", g.result.vid, p), ("g", gi, d))
        for a, b in list(parent.items()):
            if size[find(a)] != size[a]:
                raise self.err(f"inconsistent extents {size[a]} and {size[find(a)]}",
                               self.func_line)
        factors = {r: ([size[r]] if size[r] > 1 else []) for r in {find(x) for x in parent}}

        changed = True
        while changed:
            changed = False
            for coarse, fine, groups, line in self.reshapes:
                for i, grp in enumerate(groups):
                    c = find(("v", coarse, i))
                    fs = [find(("v", fine, j)) for j in grp]
                    flat = [x for f in fs for x in factors[f]]
                    merged = _merge(factors[c], flat)
                    if merged is None:
                        raise self.err("unsupported reshape: its dims are not a regrouping of "
                                       "the dims it is connected to", line)
                    if merged != factors[c]:
                        factors[c], changed = merged, True
                    for f, part in zip(fs, _split(merged, [size[("v", fine, j)] for j in grp])):
                        m2 = _merge(factors[f], part)
                        if m2 is None:
                            raise self.err("unsupported reshape: its dims are not a regrouping "
                                           "of the dims it is connected to", line)
                        if m2 != factors[f]:
                            factors[f], changed = m2, True
        self.find, self.factors = find, factors


    def fac(self, node) -> list[int]:
        return self.factors[self.find(node)]

    # -- statements --------------------------------------------------------------------------------
    def _emit(self) -> str:
        if not self.results:
            raise self.err("the function returns nothing", self.result_line)
        self._dims()
        # every tensor: (base id, per logical dim a list of base positions or None)
        self.base_shape: list[list[int]] = []
        self.base_input: list[int | None] = []
        self.stmts: list[_Stmt] = []
        view: dict[int, tuple[int, list[list]]] = {}
        for n, val in enumerate(self.args):
            b = self._new_base([])
            self.base_input[b] = n
            items = []
            for k, s in enumerate(val.shape):
                fl = self.fac(("v", val.vid, k))
                if s == 1:
                    items.append([])
                    self.base_shape[b].append(1)
                    continue
                if len(fl) != 1:
                    cls = self.find(("v", val.vid, k))
                    line = next((ln for coarse, _, groups, ln in self.reshapes
                                 for i in range(len(groups))
                                 if self.find(("v", coarse, i)) == cls), self.func_line)
                    raise self.err(f"argument {n} ({self.arg_names[n]}): a reshape splits its dim "
                                   f"{k} ({s}) into {'x'.join(map(str, fl))}; the workload "
                                   f"language has no reshape", line)
                items.append([len(self.base_shape[b])])
                self.base_shape[b].append(s)
            view[val.vid] = (b, items)
        pending = {g.result.vid: g for g in self.generics}
        reshape_of = {}
        for coarse, fine, groups, line in self.reshapes:
            reshape_of.setdefault(coarse, []).append(("coarse", fine, groups))
            reshape_of.setdefault(fine, []).append(("fine", coarse, groups))
        # values in definition order: vids are numbered in the order they were defined
        for vid in range(len(self.shapes)):
            if vid in view:
                continue
            if vid in pending:
                view[vid] = self._statement(pending[vid], view)
                continue
            # a reshape result: its source was defined before it
            for role, other, groups in reshape_of.get(vid, []):
                if other in view and other < vid:
                    view[vid] = self._reshaped(vid, role, other, groups, view)
                    break
            else:  # pragma: no cover - every vid is an argument, generic or reshape
                raise self.err("internal error: a value with no definition")
        return self._program(view)

    def _new_base(self, shape) -> int:
        self.base_shape.append(list(shape))
        self.base_input.append(None)
        return len(self.base_shape) - 1

    def _reshaped(self, vid, role, other, groups, view):
        b, items = view[other]
        if role == "fine":   # vid is the fine side (expand): split each coarse dim's items
            new = [None] * len(self.shapes[vid])
            for i, grp in enumerate(groups):
                it = list(items[i])
                for j in grp:
                    m = len(self.fac(("v", vid, j)))
                    new[j], it = it[:m], it[m:]
            return b, new
        # vid is the coarse side (collapse): concatenate
        return b, [[x for j in grp for x in items[j]] for grp in groups]

    def _statement(self, g: _Generic, view):
        gi = next(n for n, x in enumerate(self.generics) if x is g)
        subs = []      # (iteration dim, position) in domain order
        for d in range(len(g.sizes)):
            for p in range(len(self.fac(("g", gi, d)))):
                subs.append((d, p))
        out_map = g.operands[-1][1]
        lhs = [(d, p) for d in out_map for p in range(len(self.fac(("g", gi, d))))]
        red = [s for s in subs if g.reduction[s[0]]]
        names = {}
        for s in lhs + red:
            k = len(names)
            names[s] = _LETTERS[k % 26] + (str(k // 26) if k >= 26 else "")
        extent = {s: self.fac(("g", gi, s[0]))[s[1]] for s in subs}
        units: list[str] = []

        def access(val: _Val, res) -> Access:
            b, items = view[val.vid]
            idx = [None] * len(self.base_shape[b])
            for k, d in enumerate(res):
                if d is None:
                    continue
                for p, pos in enumerate(items[k]):
                    if pos is not None:
                        idx[pos] = names[(d, p)]
            for pos, x in enumerate(idx):
                if x is None:
                    if self.base_shape[b][pos] != 1:
                        raise self.err("internal error: an unindexed dim", g.line, g.col)
                    u = f"unit{sum(1 for y in idx[:pos] if y is None)}"
                    if u not in units:
                        units.append(u)
                    idx[pos] = u
            return Access(f"#{b}", tuple(idx))

        def resolve(a: Access) -> Expr:
            kind, k = _slot_of(a)
            opnd = g.operands[k] if kind == "in" else g.operands[-1]
            return access(*opnd)

        if g.is_copy:
            # a transpose/broadcast: a view of its input, no statement
            k = _slot_of(g.expr)[1]
            val, res = g.operands[k]
            b, items = view[val.vid]
            new = []
            for d in out_map:
                if d in res:
                    new.append(list(items[res.index(d)]))
                else:
                    new.append([None] * len(self.fac(("g", gi, d))))
            return b, new
        expr = _subst(g.expr, resolve)
        used = {i for a in accesses(expr) for i in a.idx}
        mult = 1
        for s in red:
            if names[s] not in used and g.combiner == "sum":
                mult *= extent[s]
        if mult != 1:
            expr = _fold(Binary("*", expr, Const(float(mult))))
        red_used = [s for s in red if names[s] in used]
        combiner = g.combiner if red_used or units else "none"
        if combiner == "none" and units:
            combiner = "sum"     # a size-1 index of an input: summing over it is the identity
        lhs_used = [s for s in lhs if names[s] in used]
        if not lhs_used:
            raise self.err("a result that is a single number (0-d) or a pure broadcast is not "
                           "supported", g.line, g.col)
        b = self._new_base([extent[s] for s in lhs_used])
        origin = f"line {g.line}" if g.known_line else ""
        if g.init is not None:   # reduce into a temporary, then combine with the init
            tmp = b
            self.stmts.append(_Stmt(tmp, [names[s] for s in lhs_used], combiner, expr, g.line,
                                    origin))
            init = g.init if isinstance(g.init, Const) else resolve(g.init)
            part = Access(f"#{tmp}", tuple(names[s] for s in lhs_used))
            expr2 = Binary("+", part, init) if g.combiner == "sum" else Call("max", (part, init))
            used2 = {i for a in accesses(expr2) for i in a.idx}
            lhs_used = [s for s in lhs if names[s] in used2]
            if units and any(u in used2 for u in units):
                raise self.err("a size-1 dim in a reduction's init is not supported",
                               g.line, g.col)
            b = self._new_base([extent[s] for s in lhs_used])
            self.stmts.append(_Stmt(b, [names[s] for s in lhs_used], "none", expr2, g.line,
                                    origin and origin + " (init)"))
        else:
            self.stmts.append(_Stmt(b, [names[s] for s in lhs_used], combiner, expr, g.line,
                                    origin))
        pos = {s: n for n, s in enumerate(lhs_used)}
        items = []
        for d in out_map:
            items.append([pos.get((d, p)) for p in range(len(self.fac(("g", gi, d))))])
        return b, items

    # -- the TOML --------------------------------------------------------------------------------
    def _program(self, view) -> str:
        names: dict[int, str] = {}
        taken = set()

        def unique(stem):
            name, n = stem, 1
            while name in taken:
                name, n = f"{stem}_{n}", n + 1
            taken.add(name)
            return name
        for b, inp in enumerate(self.base_input):
            if inp is not None:
                names[b] = unique(self.arg_names[inp])
        outs = []
        claimed = set()
        multi = len(self.results) > 1
        for n, val in enumerate(self.results):
            oname = f"out{n}" if multi else "out"
            if val.kind != "tensor":
                raise self.err(f"result {n} is a constant or an uninitialised tensor; only "
                               f"computed tensors can be outputs", self.result_line)
            b, items = view[val.vid]
            shape = val.shape
            if any(s == 1 for s in shape):
                raise self.err(f"result {n} has a size-1 dim ({'x'.join(map(str, shape))}); "
                               f"outputs with size-1 dims are not supported", self.result_line)
            for k, it in enumerate(items):
                if len(it) != 1:
                    raise self.err(f"result {n}: dim {k} ({shape[k]}) merges several dims of "
                                   f"the computation (a reshape); the workload language has no "
                                   f"reshape", self.result_line)
                if it[0] is None:
                    raise self.err(f"result {n} is a broadcast; broadcasts cannot be outputs",
                                   self.result_line)
            positions = [it[0] for it in items]
            if self.base_input[b] is None and b not in claimed and \
                    positions == list(range(len(self.base_shape[b]))):
                claimed.add(b)
                outs.append((oname, b))
                continue
            new = self._new_base(list(shape))
            idx = [_LETTERS[k] for k in range(len(shape))]
            src = [None] * len(self.base_shape[b])
            for k, p in enumerate(positions):
                src[p] = idx[k]
            self.stmts.append(_Stmt(new, idx, "none", Access(f"#{b}", tuple(src)),
                                    self.result_line, f"line {self.result_line} (result {n})"))
            claimed.add(new)
            outs.append((oname, new))
        for oname, b in outs:
            names[b] = unique(oname)
        # keep only what the outputs need
        producer = {s.out: s for s in self.stmts}
        needed, todo = set(), [b for _, b in outs]
        while todo:
            b = todo.pop()
            if b in needed:
                continue
            needed.add(b)
            if b in producer:
                todo += [int(a.tensor[1:]) for a in accesses(producer[b].expr)]
        stmts = [s for s in self.stmts if s.out in needed]
        n_tmp = 0
        for s in stmts:
            if s.out not in names:
                names[s.out] = unique(f"t{n_tmp}")
                n_tmp += 1

        # dim names: one per distinct extent (D0, D1, ... in order of first use by an input);
        # every index of a statement binds dims of one extent, so any --dims override of a name
        # keeps the program consistent
        dim_names: dict[int, str] = {}
        inputs = []
        for b, inp in enumerate(self.base_input):
            if inp is None:
                continue
            shp: list = []
            for s in self.base_shape[b]:
                if s == 1:
                    shp.append(1)
                    continue
                dim_names.setdefault(s, f"D{len(dim_names)}")
                shp.append(dim_names[s])
            inputs.append((names[b], shp))

        def rename(a: Access) -> Expr:
            return Access(names[int(a.tensor[1:])], a.idx)
        width = 0
        lines = []
        sym = {"none": "=", "sum": "+=", "max": "max="}
        for s in stmts:
            rhs = _strip(_to_text(_subst(s.expr, rename), self.dtype or "float32"))
            lhs = f"{names[s.out]}[{','.join(s.lhs)}]"
            lines.append((f"{lhs} {sym[s.combiner]} {rhs}", s.origin))
            width = max(width, len(lines[-1][0]))
        program = "\n".join(f"{t.ljust(width)}  # {o}" if o else t for t, o in lines)
        stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", Path(self.path).stem) or "imported"
        if not re.match(r"[A-Za-z_]", stem):
            stem = "m_" + stem
        out = [f"# imported by `autotune import-mlir` from {Path(self.path).name}, "
               f"function @{self.func_name}",
               f"name = {_q(stem)}",
               f"summary = {_q(f'imported from {Path(self.path).name} (@{self.func_name})')}",
               f"dtype = {_q(self.dtype or 'float32')}",
               f"outputs = [{', '.join(_q(o) for o, _ in outs)}]",
               'program = """', program, '"""', "", "[dims]"]
        out += [f"{k} = {v}" for v, k in dim_names.items()]
        out += ["", "[inputs]"]
        out += [f"{n} = [{', '.join(_q(d) if isinstance(d, str) else str(d) for d in shp)}]"
                for n, shp in inputs]
        return "\n".join(out) + "\n"


# ---- source locations ----------------------------------------------------------------------------
def _strip_locations(text: str) -> str:
    """``text`` without its ``loc(...)`` annotations and ``#loc`` aliases, lines kept in place.

    IR printed with debug info (as iree-compile prints it) carries the locations of the program
    it came from; without them the parser gives every op its line in this file, which is what
    an error message should name."""
    if "loc" not in text:
        return text
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if ch == '"':                       # a string literal: copied as is
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i, line_start = j + 1, False
            continue
        if line_start and text.startswith("#loc", i):   # an alias definition: a whole line
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("loc(", i) and (i == 0 or not (text[i - 1].isalnum()
                                                         or text[i - 1] in "_.$")):
            depth, j = 0, i + 3
            while j < n:
                c = text[j]
                if c == '"':
                    j += 1
                    while j < n and text[j] != '"':
                        j += 2 if text[j] == "\\" else 1
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            while out and out[-1] in (" ", "\t"):
                out.pop()
            out.append("\n" * text.count("\n", i, j + 1))
            i = j + 1
            continue
        out.append(ch)
        line_start = ch == "\n" or (line_start and ch in " \t")
        i += 1
    return "".join(out)


# ---- factor lists ----------------------------------------------------------------------------
def _prefix(fl: list[int]) -> list[int]:
    out, p = [], 1
    for f in fl:
        p *= f
        out.append(p)
    return out


def _merge(a: list[int], b: list[int]):
    """The common refinement of two factorisations of one extent, or None if there is none."""
    pts = sorted(set(_prefix(a)) | set(_prefix(b)))
    out, prev = [], 1
    for p in pts:
        if p % prev:
            return None
        if p != prev:
            out.append(p // prev)
        prev = p
    return out


def _split(fl: list[int], sizes: list[int]) -> list[list[int]]:
    """Cut a factor list into consecutive parts whose products are ``sizes``."""
    parts, k = [], 0
    for s in sizes:
        part, p = [], 1
        while p < s and k < len(fl):
            part.append(fl[k])
            p *= fl[k]
            k += 1
        parts.append(part)
    return parts


# ---- attribute helpers ------------------------------------------------------------------------
def _isa(obj, cls) -> bool:
    """isinstance for MLIR types/attributes/affine exprs, with old and new Python bindings."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    if check is not None:
        return bool(check(obj))
    try:
        cls(obj)
    except Exception:
        return False
    return True


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def _short(attr) -> str:
    s = _one_line(str(attr))
    return s if len(s) <= 60 else s[:57] + "..."


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _str_attr(attr) -> str:
    v = getattr(attr, "value", None)
    if isinstance(v, str):
        return v
    return str(attr).strip('"')


def _float_attr(ir, attr) -> float:
    if _isa(attr, ir.FloatAttr):
        return float(ir.FloatAttr(attr).value)
    if _isa(attr, ir.IntegerAttr):
        return float(ir.IntegerAttr(attr).value)
    raise ValueError(f"unsupported splat value {attr}")


def _arg_name(attrs, n: int) -> str:
    """A name for argument n: from a ``jax.arg_info`` / ``name`` string attribute, else argN."""
    if attrs is not None:
        text = str(attrs)
        for key in ("jax.arg_info", "iree.abi.name", "name"):
            m = re.search(re.escape(key) + r'\s*=\s*"([^"]*)"', text)
            if m:
                info = m.group(1)
                names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", info)
                if names and not re.search(r"\[\s*\d+\s*\]\s*$", info):
                    return names[-1]
    return f"arg{n}"


# ---- the API -------------------------------------------------------------------------------------
def import_mlir(text: str, path: str = "<mlir>", function: str | None = None) -> str:
    """Linalg-on-tensors MLIR text -> workload TOML text (validated by the workload loader).

    Raises :class:`MlirUnavailable` without iree-base-compiler, :class:`MlirImportError`
    (a WorkloadError: ``path:line:col: error: ...``) for what cannot be imported."""
    toml = _Importer(text, path, function).run()
    from search_spaces.loader import parse_workload
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # an unused argument is reported when it is loaded
        try:
            parse_workload(toml, path)
        except WorkloadError as e:  # pragma: no cover - a bug in the importer
            raise MlirImportError(f"internal error: the imported workload does not validate "
                                  f"({e.message})", path, 1, 1) from None
    return toml


def import_mlir_file(path: str | Path, function: str | None = None) -> str:
    """:func:`import_mlir` of a file."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MlirImportError(f"cannot read the file: {e}", str(path), 1, 1) from None
    return import_mlir(text, str(path), function)


def write_workload(toml: str, out: str | Path) -> Path:
    """Write workload TOML text to ``out`` atomically (through a temporary in its folder)."""
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(toml)
    os.replace(tmp, out)
    return out
