"""The records the MLIR importer's stages hand on: what the reader found in the function
(values, generics, reshapes: a :class:`ReadFunction`) and the statements written from it (a
:class:`Program`)."""
from __future__ import annotations

from dataclasses import dataclass

from search_spaces.ir import Const, Expr


@dataclass(frozen=True)
class Value:
    """What an SSA value is: a tensor (``vid``), a splat constant, an empty tensor, a scalar,
    or a symbolic integer / i1 tensor (an index expression or condition over its positions,
    :mod:`autotune.frontends.mlir.indices`)."""
    kind: str                   # "tensor" | "const" | "empty" | "scalar" | "int" | "symbolic"
    shape: tuple[int, ...] = ()
    value: float = 0.0
    vid: int = -1               # tensors: numbered in the order they are defined
    sym: object = None          # symbolic: an IndexExpr or a Condition


@dataclass(frozen=True)
class Generic:
    """One ``linalg.generic`` (or ``linalg.map``) with one result: its iteration domain, its
    operands with their indexing maps, and its body as an expression."""
    line: int
    col: int
    name: str
    sizes: tuple[int, ...]                    # per iteration dim
    reduction: tuple[bool, ...]
    operands: tuple[tuple[Value, tuple], ...]  # ins then outs: (value, map results)
    n_in: int
    expr: Expr                                # with %in/%out slots; constants substituted
    combiner: str                             # none | sum | max
    init: Expr | None                         # what the reduction starts from, if not neutral
    result: Value | None = None
    is_copy: bool = False                     # a transpose/broadcast copy of one tensor
    known_line: bool = True                   # False: the passes lost its location (inlined)

    def constant_value(self) -> float | None:
        """The number every element of the result is, for a body that folded to a constant
        (and a constant or neutral init); None when the body is not a constant."""
        e = self.expr
        if not isinstance(e, Const):
            return None
        v = e.value
        red = 1
        for s, r in zip(self.sizes, self.reduction):
            red *= s if r else 1
        if self.combiner == "sum":
            v = v * red + (self.init.value if self.init is not None else 0.0)
        elif self.combiner == "max":
            v = max(v, self.init.value) if self.init is not None else v
        return v


@dataclass(frozen=True)
class Reshape:
    """A ``tensor.expand_shape`` / ``collapse_shape`` between two tensors: per dim of the coarse
    one, the dims of the fine one it groups."""
    coarse: int                               # vid
    fine: int                                 # vid
    groups: tuple[tuple[int, ...], ...]
    line: int


@dataclass(frozen=True)
class ReadFunction:
    """One function as read, after the passes: what the statements are written from."""
    name: str
    line: int                                 # of the func.func, before the passes
    dtype: str | None                         # float64 if any tensor is f64; None: no tensor
    shapes: tuple[tuple[int, ...], ...]       # per vid
    args: tuple[Value, ...]
    arg_names: tuple[str, ...]
    generics: tuple[Generic, ...]             # in definition order
    reshapes: tuple[Reshape, ...]
    results: tuple[Value, ...]
    result_line: int


@dataclass(frozen=True)
class Statement:
    """One statement of the workload, over numbered tensors ("bases")."""
    out: int                                  # base id
    lhs: tuple[str, ...]
    combiner: str
    expr: Expr                                # accesses name bases as "#<id>"
    line: int
    origin: str                               # the comment: where in the MLIR it comes from


@dataclass(frozen=True)
class Program:
    """The statements written from a :class:`ReadFunction`, over its tensors ("bases"): the
    function's arguments and the statements' results."""
    base_shapes: tuple[tuple[int, ...], ...]
    base_inputs: tuple[int | None, ...]       # per base: the argument it is, or None
    statements: tuple[Statement, ...]         # only those the outputs need, in order
    outputs: tuple[tuple[str, int], ...]      # (output name, base)
