"""From a read function to the workload's statements: one per generic over its tensors with
the finest dims (reshapes and copies become views, size-1 dims vanish), plus a copy for each
output that is not a tensor of its own."""
from __future__ import annotations

from search_spaces.conditions import IndexExpr
from search_spaces.ir import Access, Binary, Call, Const, Expr, accesses, conditions

from autotune.frontends.mlir.dims import Dims, fold_reshapes
from autotune.frontends.mlir.expressions import fold, slot_of, substitute
from autotune.frontends.mlir.indices import rename_dims
from autotune.frontends.mlir.records import Generic, Program, ReadFunction, Statement, Value
from autotune.frontends.mlir.source import MlirSource

_LETTERS = "ijklmnopqrstuvwxyzabcdefgh"


def write_statements(fn: ReadFunction, source: MlirSource) -> Program:
    """The statements of ``fn``, those its outputs need; errors name lines of ``source``."""
    if not fn.results:
        raise source.error("the function returns nothing", fn.result_line)
    return StatementWriter(fn, fold_reshapes(fn, source), source).write()


class StatementWriter:
    """Writes the statements of one function over "bases": numbered tensors with the finest
    dims, each an argument or a statement's result.

    A value is seen as a view of a base: the base's id and, per dim of the value, the base
    positions its fine dims are (None for a broadcast dim)."""

    def __init__(self, fn: ReadFunction, dims: Dims, source: MlirSource):
        self._fn, self._dims, self._source = fn, dims, source
        self._base_shape: list[list[int]] = []
        self._base_input: list[int | None] = []
        self._stmts: list[Statement] = []

    def write(self) -> Program:
        """All statements, then those the outputs need (in order) as a :class:`Program`."""
        outs = self._outputs(self._views())
        # keep only what the outputs need
        producer = {s.out: s for s in self._stmts}
        needed, todo = set(), [b for _, b in outs]
        while todo:
            b = todo.pop()
            if b in needed:
                continue
            needed.add(b)
            if b in producer:
                todo += [int(a.tensor[1:]) for a in accesses(producer[b].expr)]
        return Program(tuple(tuple(s) for s in self._base_shape), tuple(self._base_input),
                       tuple(s for s in self._stmts if s.out in needed), tuple(outs))

    def _views(self) -> dict[int, tuple[int, list[list]]]:
        """Every value as a view (base id, per logical dim a list of base positions or None)."""
        fn, dims = self._fn, self._dims
        view: dict[int, tuple[int, list[list]]] = {}
        for n, val in enumerate(fn.args):
            b = self._new_base([])
            self._base_input[b] = n
            items = []
            for k, s in enumerate(val.shape):
                fl = dims.factors(("v", val.vid, k))
                if s == 1:
                    items.append([])
                    self._base_shape[b].append(1)
                    continue
                if len(fl) != 1:
                    cls = dims.root[("v", val.vid, k)]
                    line = next((r.line for r in fn.reshapes for i in range(len(r.groups))
                                 if dims.root[("v", r.coarse, i)] == cls), fn.line)
                    raise self._source.error(
                        f"argument {n} ({fn.arg_names[n]}): a reshape splits its dim "
                        f"{k} ({s}) into {'x'.join(map(str, fl))}; the workload "
                        f"language has no reshape", line)
                items.append([len(self._base_shape[b])])
                self._base_shape[b].append(s)
            view[val.vid] = (b, items)
        pending = {g.result.vid: g for g in fn.generics}
        reshape_of = {}
        for r in fn.reshapes:
            reshape_of.setdefault(r.coarse, []).append(("coarse", r.fine, r.groups))
            reshape_of.setdefault(r.fine, []).append(("fine", r.coarse, r.groups))
        # values in definition order: vids are numbered in the order they were defined
        for vid in range(len(fn.shapes)):
            if vid in view:
                continue
            if vid in pending:
                view[vid] = self._statement(pending[vid], view)
                continue
            # a reshape result: its source was defined before it
            for role, other, groups in reshape_of.get(vid, []):
                if other in view and other < vid:
                    view[vid] = self._reshaped(vid, role, groups, view[other])
                    break
            else:  # pragma: no cover - every vid is an argument, generic or reshape
                raise self._source.error("internal error: a value with no definition")
        return view

    def _new_base(self, shape) -> int:
        self._base_shape.append(list(shape))
        self._base_input.append(None)
        return len(self._base_shape) - 1

    def _reshaped(self, vid, role, groups, other_view):
        """The view of ``vid``, a reshape of a value seen as ``other_view``."""
        b, items = other_view
        if role == "fine":   # vid is the fine side (expand): split each coarse dim's items
            new = [None] * len(self._fn.shapes[vid])
            for i, grp in enumerate(groups):
                it = list(items[i])
                for j in grp:
                    m = len(self._dims.factors(("v", vid, j)))
                    new[j], it = it[:m], it[m:]
            return b, new
        # vid is the coarse side (collapse): concatenate
        return b, [[x for j in grp for x in items[j]] for grp in groups]

    def _statement(self, g: Generic, view):
        """The statement(s) of a generic (none for a copy); the view of its result."""
        gi = next(n for n, x in enumerate(self._fn.generics) if x is g)
        fac = self._dims.factors
        subs = []      # (iteration dim, position) in domain order
        for d in range(len(g.sizes)):
            for p in range(len(fac(("g", gi, d)))):
                subs.append((d, p))
        out_map = g.operands[-1][1]
        lhs = [(d, p) for d in out_map for p in range(len(fac(("g", gi, d))))]
        red = [s for s in subs if g.reduction[s[0]]]
        names = {}
        for s in lhs + red:
            k = len(names)
            names[s] = _LETTERS[k % 26] + (str(k // 26) if k >= 26 else "")
        extent = {s: fac(("g", gi, s[0]))[s[1]] for s in subs}
        units: list[str] = []

        def access(val: Value, res) -> Access:
            b, items = view[val.vid]
            idx = [None] * len(self._base_shape[b])
            for k, d in enumerate(res):
                if d is None:
                    continue
                for p, pos in enumerate(items[k]):
                    if pos is not None:
                        idx[pos] = names[(d, p)]
            for pos, x in enumerate(idx):
                if x is None:
                    if self._base_shape[b][pos] != 1:
                        raise self._source.error("internal error: an unindexed dim", g.line, g.col)
                    u = f"unit{sum(1 for y in idx[:pos] if y is None)}"
                    if u not in units:
                        units.append(u)
                    idx[pos] = u
            return Access(f"#{b}", tuple(idx))

        def resolve(a: Access) -> Expr:
            kind, k = slot_of(a)
            opnd = g.operands[k] if kind == "in" else g.operands[-1]
            return access(*opnd)

        if g.is_copy:
            # a transpose/broadcast: a view of its input, no statement
            k = slot_of(g.expr)[1]
            val, res = g.operands[k]
            b, items = view[val.vid]
            new = []
            for d in out_map:
                if d in res:
                    new.append(list(items[res.index(d)]))
                else:
                    new.append([None] * len(fac(("g", gi, d))))
            return b, new
        def dim_index(d: int) -> IndexExpr:       # linalg.index d: the statement's index
            if not fac(("g", gi, d)):
                return IndexExpr((), 0)            # a size-1 dim is always 0
            if len(fac(("g", gi, d))) > 1:
                raise self._source.error(f"linalg.index {d}: a reshape splits that iteration "
                                         f"dim; the workload language has no reshape",
                                         g.line, g.col)
            return IndexExpr(((names[(d, 0)], 1),))
        expr = rename_dims(substitute(g.expr, resolve), dim_index)
        used = {i for a in accesses(expr) for i in a.idx}
        if any(i not in used for c in conditions(expr) for i in c.indices):
            raise self._source.error("linalg.index of an iteration dim that no operand reads is "
                                     "not supported (an index is bound by a tensor read)",
                                     g.line, g.col)
        mult = 1
        for s in red:
            if names[s] not in used and g.combiner == "sum":
                mult *= extent[s]
        if mult != 1:
            expr = fold(Binary("*", expr, Const(float(mult))))
        red_used = [s for s in red if names[s] in used]
        combiner = g.combiner if red_used or units else "none"
        if combiner == "none" and units:
            combiner = "sum"     # a size-1 index of an input: summing over it is the identity
        lhs_used = [s for s in lhs if names[s] in used]
        if not lhs_used:
            raise self._source.error("a result that is a single number (0-d) or a pure broadcast "
                                    "is not supported", g.line, g.col)
        b = self._new_base([extent[s] for s in lhs_used])
        origin = f"line {g.line}" if g.known_line else ""
        if g.init is not None:   # reduce into a temporary, then combine with the init
            tmp = b
            self._stmts.append(Statement(tmp, tuple(names[s] for s in lhs_used), combiner, expr,
                                        g.line, origin))
            init = g.init if isinstance(g.init, Const) else resolve(g.init)
            part = Access(f"#{tmp}", tuple(names[s] for s in lhs_used))
            expr2 = Binary("+", part, init) if g.combiner == "sum" else Call("max", (part, init))
            used2 = {i for a in accesses(expr2) for i in a.idx}
            lhs_used = [s for s in lhs if names[s] in used2]
            if units and any(u in used2 for u in units):
                raise self._source.error("a size-1 dim in a reduction's init is not supported",
                                        g.line, g.col)
            b = self._new_base([extent[s] for s in lhs_used])
            self._stmts.append(Statement(b, tuple(names[s] for s in lhs_used), "none", expr2,
                                        g.line, origin and origin + " (init)"))
        else:
            self._stmts.append(Statement(b, tuple(names[s] for s in lhs_used), combiner, expr,
                                        g.line, origin))
        pos = {s: n for n, s in enumerate(lhs_used)}
        items = []
        for d in out_map:
            items.append([pos.get((d, p)) for p in range(len(fac(("g", gi, d))))])
        return b, items

    def _outputs(self, view) -> list[tuple[str, int]]:
        """(name, base) per result: its own base when it is a computed tensor of its own in
        order, else a copy statement's."""
        fn, line = self._fn, self._fn.result_line
        outs = []
        claimed = set()
        multi = len(fn.results) > 1
        for n, val in enumerate(fn.results):
            oname = f"out{n}" if multi else "out"
            if val.kind != "tensor":
                raise self._source.error(f"result {n} is a constant or an uninitialised tensor; "
                                        f"only computed tensors can be outputs", line)
            b, items = view[val.vid]
            shape = val.shape
            if any(s == 1 for s in shape):
                raise self._source.error(f"result {n} has a size-1 dim "
                                        f"({'x'.join(map(str, shape))}); outputs with size-1 "
                                        f"dims are not supported", line)
            for k, it in enumerate(items):
                if len(it) != 1:
                    raise self._source.error(f"result {n}: dim {k} ({shape[k]}) merges several "
                                            f"dims of the computation (a reshape); the workload "
                                            f"language has no reshape", line)
                if it[0] is None:
                    raise self._source.error(f"result {n} is a broadcast; broadcasts cannot be "
                                            f"outputs", line)
            positions = [it[0] for it in items]
            if self._base_input[b] is None and b not in claimed and \
                    positions == list(range(len(self._base_shape[b]))):
                claimed.add(b)
                outs.append((oname, b))
                continue
            new = self._new_base(list(shape))
            idx = [_LETTERS[k] for k in range(len(shape))]
            src = [None] * len(self._base_shape[b])
            for k, p in enumerate(positions):
                src[p] = idx[k]
            self._stmts.append(Statement(new, tuple(idx), "none", Access(f"#{b}", tuple(src)),
                                        line, f"line {line} (result {n})"))
            claimed.add(new)
            outs.append((oname, new))
        return outs
