"""The second half of the MLIR importer: from the generics collected by
:class:`autotune.frontends.mlir.importer._Importer` to the workload TOML (dims named per extent, reshapes
folded into the finest dims, one statement per generic)."""
from __future__ import annotations

import re
from pathlib import Path

from search_spaces.ir import Access, Binary, Call, Const, Expr, accesses

from autotune.frontends.mlir.helpers import (_LETTERS, _Generic, _Stmt, _Val, _fold, _merge, _q, _slot_of, _split,
                           _strip, _subst, _to_text)


class _Emitter:
    """Mixin of :class:`autotune.frontends.mlir.importer._Importer`: its dims, statements and program."""

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

        def refine(key, other: list[int], line: int) -> bool:
            """Merge ``other`` into the factor list of ``key``; True if that changed it."""
            merged = _merge(factors[key], other)
            if merged is None:
                raise self.err("unsupported reshape: its dims are not a regrouping of the dims "
                               "it is connected to", line)
            if merged == factors[key]:
                return False
            factors[key] = merged
            return True

        changed = True
        while changed:
            changed = False
            for coarse, fine, groups, line in self.reshapes:
                for i, grp in enumerate(groups):
                    c = find(("v", coarse, i))
                    fs = [find(("v", fine, j)) for j in grp]
                    changed |= refine(c, [x for f in fs for x in factors[f]], line)
                    parts = _split(factors[c], [size[("v", fine, j)] for j in grp])
                    for f, part in zip(fs, parts):
                        changed |= refine(f, part, line)
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
