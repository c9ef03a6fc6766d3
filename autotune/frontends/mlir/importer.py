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
from pathlib import Path


from search_spaces.errors import WorkloadError
from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Unary, accesses

from autotune.frontends.mlir.emit import _Emitter
from autotune.frontends.mlir.helpers import (_Generic, _Val, _arg_name, _float_attr, _fold, _isa, _line_col,
                           _one_line, _short, _slot, _slot_of,
                           _str_attr, _strip_locations, _subst)

INSTALL_HINT = ("install it with `pip install iree-base-compiler` "
                "(or `pip install 'autotune[mlir]'`)")
PIPELINE = "builtin.module(inline{default-pipeline=}, linalg-generalize-named-ops)"

_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/"}
_CALLS = {"math.exp": "exp", "math.log": "log", "math.sqrt": "sqrt", "math.rsqrt": "rsqrt",
          "math.tanh": "tanh", "math.absf": "abs"}
_MINMAX = {"arith.maximumf": "max", "arith.maxnumf": "max", "arith.minimumf": "min",
           "arith.minnumf": "min"}
_IDENTITY = ("arith.extf", "arith.truncf")


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


class _Importer(_Emitter):
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
