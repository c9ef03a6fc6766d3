"""Reading one function (after the passes) op by op: its arguments, constants, empty tensors,
reshapes, generics and results, into a :class:`~autotune.frontends.mlir.records.ReadFunction`."""
from __future__ import annotations

import math
import re
from dataclasses import replace

from search_spaces.conditions import Condition, IndexExpr
from search_spaces.ir import Access, Const, Expr, accesses, conditions

from autotune.frontends.mlir.attributes import arg_name, float_attr, isa, short, str_attr
from autotune.frontends.mlir.body import BodyReader, split_accumulator
from autotune.frontends.mlir.expressions import slot, slot_of, substitute
from autotune.frontends.mlir.indices import as_index, at_dims, at_positions, reshaped
from autotune.frontends.mlir.records import Generic, ReadFunction, Reshape, Value
from autotune.frontends.mlir.source import MlirSource


def is_integer_type(element_type: str) -> bool:
    """An MLIR integer (i1, i32, ...) or index element type."""
    return bool(re.fullmatch(r"[su]?i\d+|index", element_type))


class FunctionReader:
    """Reads one ``func.func`` of linalg on tensors; ``ir`` is the bindings' ``ir`` module,
    ``line`` the function's line in the file (its location before the passes)."""

    def __init__(self, ir, source: MlirSource, line: int):
        self._ir, self._source, self._line = ir, source, line
        self._values: dict = {}                # mlir Value -> Value
        self._shapes: list[tuple[int, ...]] = []   # per vid
        self._generics: list[Generic] = []
        self._reshapes: list[Reshape] = []
        self._args: list[Value] = []
        self._arg_names: list[str] = []
        self._results: list[Value] = []
        self._result_line = 1
        self._dtype: str | None = None
        self._body = BodyReader(ir, source, self._values)

    def read(self, func) -> ReadFunction:
        """Read ``func``; refuse (MlirImportError) what the workload language cannot say."""
        f = func.operation
        name = str_attr(f.attributes["sym_name"])
        blocks = f.regions[0].blocks
        if len(blocks) != 1:
            raise self._source.op_error(func, "functions with several blocks are not supported")
        block = blocks[0]
        arg_attrs = None
        if "arg_attrs" in f.attributes:
            try:
                arg_attrs = list(self._ir.ArrayAttr(f.attributes["arg_attrs"]))
            except Exception:
                arg_attrs = None
        for n, arg in enumerate(block.arguments):
            val = self._new_tensor(self._tensor_shape(arg.type, func, f"argument {n}"))
            self._values[arg] = val
            self._args.append(val)
            self._arg_names.append(arg_name(arg_attrs[n] if arg_attrs and n < len(arg_attrs)
                                           else None, n))
        for op in block.operations:
            self._op(op)
        return ReadFunction(name, self._line, self._dtype, tuple(self._shapes), tuple(self._args),
                            tuple(self._arg_names), tuple(self._generics), tuple(self._reshapes),
                            tuple(self._results), self._result_line)

    def _tensor_shape(self, t, op, what: str, symbolic_ok: bool = False) -> tuple[int, ...]:
        """The static shape of a ranked f32/f64 tensor type (``what`` names it in errors);
        notes its element type for the workload's dtype.  ``symbolic_ok``: an integer or i1
        tensor is fine too (a mask built from indices; no dtype of its own)."""
        ir = self._ir
        if not isa(t, ir.RankedTensorType):
            raise self._source.op_error(op, f"{what} has type {t}; only ranked tensors of "
                                           f"f32/f64 are supported")
        rt = ir.RankedTensorType(t)
        if not rt.has_static_shape:
            raise self._source.op_error(op, f"{what} has a dynamic shape ({t}); only static "
                                           f"shapes are supported")
        et = str(rt.element_type)
        if symbolic_ok and is_integer_type(et):
            return tuple(int(s) for s in rt.shape)
        if et not in ("f32", "f64"):
            raise self._source.op_error(op, f"{what} has element type {et}; only f32 and f64 "
                                           f"are supported")
        dtype = "float32" if et == "f32" else "float64"
        if self._dtype is None:
            self._dtype = dtype
        elif self._dtype != dtype:
            self._dtype = "float64"
        return tuple(int(s) for s in rt.shape)

    def _new_tensor(self, shape) -> Value:
        self._shapes.append(tuple(shape))
        return Value("tensor", tuple(shape), vid=len(self._shapes) - 1)

    def _get(self, v, op) -> Value:
        try:
            return self._values[v]
        except KeyError:
            raise self._source.op_error(op, f"'{op.operation.name}' uses a value defined outside "
                                           f"the function body") from None

    def _op(self, op) -> None:
        o = op.operation
        name = o.name
        if name == "arith.constant":
            self._values[o.results[0]] = self._constant(op)
        elif name == "tensor.empty":
            if len(o.operands):
                raise self._source.op_error(op, "tensor.empty with dynamic sizes is not supported")
            shape = self._tensor_shape(o.results[0].type, op, "the result", symbolic_ok=True)
            self._values[o.results[0]] = Value("empty", shape)
        elif name in ("tensor.expand_shape", "tensor.collapse_shape"):
            self._reshape(op)
        elif name == "tensor.cast":
            src = self._get(o.operands[0], op)
            shape = self._tensor_shape(o.results[0].type, op, "the result", symbolic_ok=True)
            if shape != src.shape:
                raise self._source.op_error(op, "tensor.cast changing the shape is not supported")
            self._values[o.results[0]] = src
        elif name in ("linalg.generic", "linalg.map"):
            self._generic(op)
        elif name in ("func.return", "util.return"):
            self._result_line = self._source.where(op)[0]
            for n, v in enumerate(o.operands):
                self._tensor_shape(v.type, op, f"result {n}")
                self._results.append(self._get(v, op))
        else:
            raise self._source.unsupported(op)

    def _constant(self, op) -> Value:
        ir = self._ir
        o = op.operation
        attr = o.attributes["value"]
        t = o.results[0].type
        if isa(t, ir.RankedTensorType):
            shape = self._tensor_shape(t, op, "the constant", symbolic_ok=True)
            if not isa(attr, ir.DenseElementsAttr):
                raise self._source.op_error(op, f"unsupported constant {short(attr)}")
            dense = ir.DenseElementsAttr(attr)
            if not dense.is_splat:
                raise self._source.op_error(op, "non-splat constant tensors are not supported "
                                               "(pass the values as a function argument)")
            return Value("const", shape, value=float_attr(ir, dense.get_splat_value()))
        if isa(attr, ir.FloatAttr):
            return Value("scalar", value=ir.FloatAttr(attr).value)
        if isa(attr, ir.IntegerAttr):
            return Value("int", value=float(ir.IntegerAttr(attr).value))
        raise self._source.op_error(op, f"unsupported constant {short(attr)}")

    def _reshape(self, op) -> None:
        ir = self._ir
        o = op.operation
        src = self._get(o.operands[0], op)
        shape = self._tensor_shape(o.results[0].type, op, "the result", symbolic_ok=True)
        if src.kind in ("const", "empty"):
            self._values[o.results[0]] = Value(src.kind, shape, value=src.value)
            return
        groups = tuple(tuple(int(ir.IntegerAttr(x).value) for x in ir.ArrayAttr(g))
                       for g in ir.ArrayAttr(o.attributes["reassociation"]))
        if src.kind == "symbolic":
            expand = o.name == "tensor.expand_shape"
            sym = reshaped(src.sym, groups, shape if expand else src.shape, expand)
            if sym is None:
                raise self._source.op_error(op, "a reshape that splits or merges the dims of an "
                                               "index tensor is not supported")
            self._values[o.results[0]] = Value("symbolic", shape, sym=sym)
            return
        new = self._new_tensor(shape)
        self._values[o.results[0]] = new
        line = self._source.where(op)[0]
        if o.name == "tensor.expand_shape":
            self._reshapes.append(Reshape(src.vid, new.vid, groups, line))
        else:
            self._reshapes.append(Reshape(new.vid, src.vid, groups, line))

    def _generic(self, op) -> None:
        ir = self._ir
        o = op.operation
        err = self._source.op_error
        line, col = self._source.where(op)
        known_line = bool(re.search(r":\d+:\d+", str(op.location)))
        is_map = o.name == "linalg.map"   # elementwise, its body sees the inputs only
        if is_map:
            ins, outs = list(o.operands)[:-1], list(o.operands)[-1:]
        else:
            gv = op.opview if hasattr(op, "opview") else op
            ins, outs = list(gv.inputs), list(gv.outputs)
        if len(outs) != 1 or len(o.results) != 1:
            raise err(op, f"'{o.name}' with {len(outs)} outputs is not supported "
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
            raise err(op, f"unsupported iterator types {iters}")
        n = len(iters)
        sizes: list[int | None] = [None] * n
        operands = []
        for k, (v, amap) in enumerate(zip(ins + outs, maps)):
            val = self._get(v, op)
            res = []
            for p, ex in enumerate(amap if is_map else amap.results):
                if is_map or isa(ex, ir.AffineDimExpr):
                    d = ex if is_map else ir.AffineDimExpr(ex).position
                    res.append(d)
                    if val.kind not in ("scalar", "int") and sizes[d] is None:
                        sizes[d] = val.shape[p]
                elif isa(ex, ir.AffineConstantExpr) and ir.AffineConstantExpr(ex).value == 0 \
                        and val.shape[p] == 1:
                    res.append(None)
                else:
                    raise err(op, f"indexing map {amap} is not a projected permutation "
                                  f"(windows, strides and offsets are not supported)")
            if val.kind in ("scalar", "int") and res:
                raise err(op, "a scalar operand with an indexed map")
            operands.append((val, tuple(res)))
        if any(s is None for s in sizes):
            raise err(op, "an iteration dim that indexes no operand")
        out_val, out_map = operands[-1]
        if None in out_map or sorted(out_map) != sorted(d for d in range(n) if not reduction[d]):
            raise err(op, "the output map must use each parallel dim once and no reduction dim")
        result_shape = self._tensor_shape(o.results[0].type, op, "the result", symbolic_ok=True)
        symbolic = is_integer_type(str(ir.RankedTensorType(o.results[0].type).element_type))
        symbols = {k: at_dims(val.sym, res) for k, (val, res) in enumerate(operands[:len(ins)])
                   if val.kind == "symbolic"}
        expr = self._body.expression(op, len(ins), is_map, symbols, symbolic)
        if symbolic:     # an index tensor or a mask: a symbol over the result's positions
            sym = as_index(expr) or expr
            sym = at_positions(sym, out_map) if not any(reduction) and \
                isinstance(sym, (IndexExpr, Condition)) else None
            if sym is None:
                raise err(op, "an integer or i1 result that is not index arithmetic or an index "
                              "comparison over its own dims is not supported")
            self._values[o.results[0]] = Value("symbolic", result_shape, sym=sym)
            return

        def consts(a: Access) -> Expr:
            kind, k = slot_of(a)
            if kind == "out":
                return a
            val = operands[k][0]
            if val.kind in ("const", "scalar", "int"):
                return Const(val.value)
            if val.kind == "empty":
                raise err(op, "the body reads a tensor.empty (uninitialised) input")
            return a
        expr = substitute(expr, consts)
        out_slot = slot("out", 0)
        init = None
        combiner = "none"
        if any(reduction):
            combiner, expr = split_accumulator(self._source, op, expr, out_slot)
            if out_val.kind == "empty":
                raise err(op, "a reduction into a tensor.empty (uninitialised) output")
            if out_val.kind == "const":
                neutral = 0.0 if combiner == "sum" else -math.inf
                if out_val.value != neutral:
                    init = Const(out_val.value)
            else:
                init = out_slot
        elif out_slot in accesses(expr):
            if out_val.kind == "empty":
                raise err(op, "the body reads its tensor.empty (uninitialised) output")
            if out_val.kind == "const":
                expr = substitute(expr, lambda a: Const(out_val.value) if a == out_slot else a)
        g = Generic(line, col, o.name, tuple(sizes), tuple(reduction), tuple(operands), len(ins),
                    expr, combiner, init, known_line=known_line)
        reads = [a for a in accesses(expr)]
        if not reads and (init is None or isinstance(init, Const)):
            if conditions(expr):    # numbers selected by index: symbolic, for its readers
                sym = at_positions(expr, out_map) if combiner == "none" else None
                if sym is None:
                    raise err(op, "a reduction of numbers selected by index comparisons (no "
                                  "tensor read) is not supported")
                self._values[o.results[0]] = Value("symbolic", result_shape, sym=sym)
                return
            value = g.constant_value()
            if value is None:
                raise err(op, "cannot fold this constant computation")
            self._values[o.results[0]] = Value("const", result_shape, value=value)
            return
        is_copy = combiner == "none" and isinstance(expr, Access) and slot_of(expr)[0] == "in"
        g = replace(g, result=self._new_tensor(result_shape), is_copy=is_copy)
        self._values[o.results[0]] = g.result
        self._generics.append(g)
