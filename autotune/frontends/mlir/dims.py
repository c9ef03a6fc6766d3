"""Reshape folding: the dims of every tensor and every generic's iteration domain, connected
into classes of one extent, each refined into the finest factors any reshape needs.

The workload language has no reshape, so a dim that some reshape splits is split everywhere it
is connected to (through the generics' iteration dims); every tensor is then stored with the
finest dims and a reshape is just a regrouping of them."""
from __future__ import annotations

from dataclasses import dataclass

from search_spaces.ir import Access, accesses

from autotune.frontends.mlir.expressions import slot_of
from autotune.frontends.mlir.records import ReadFunction
from autotune.frontends.mlir.source import MlirSource


@dataclass(frozen=True)
class Dims:
    """The classes of connected dims and their factors.

    A node is ``("v", vid, k)``, dim k of the tensor numbered vid, or ``("g", gi, d)``,
    iteration dim d of the gi-th generic."""
    root: dict                # node -> the representative of its class
    factor_lists: dict        # representative -> the class's factors (no 1s), outer first

    def factors(self, node) -> list[int]:
        """The factors of the node's class (its fine dims, outer first)."""
        return self.factor_lists[self.root[node]]


def fold_reshapes(fn: ReadFunction, source: MlirSource) -> Dims:
    """Connect the dims of ``fn`` and refine them until every reshape is a regrouping."""
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
    for vid, shape in enumerate(fn.shapes):
        for k, s in enumerate(shape):
            size[("v", vid, k)] = s
            find(("v", vid, k))
    for gi, g in enumerate(fn.generics):
        for d, s in enumerate(g.sizes):
            size[("g", gi, d)] = s
            find(("g", gi, d))
        used = {slot_of(a) for a in accesses(g.expr)}
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
            raise source.error(f"inconsistent extents {size[a]} and {size[find(a)]}", fn.line)
    factors = {r: ([size[r]] if size[r] > 1 else []) for r in {find(x) for x in parent}}

    def refine(key, other: list[int], line: int) -> bool:
        """Merge ``other`` into the factor list of ``key``; True if that changed it."""
        merged = _merge(factors[key], other)
        if merged is None:
            raise source.error("unsupported reshape: its dims are not a regrouping of the dims "
                               "it is connected to", line)
        if merged == factors[key]:
            return False
        factors[key] = merged
        return True

    changed = True
    while changed:
        changed = False
        for r in fn.reshapes:
            for i, grp in enumerate(r.groups):
                c = find(("v", r.coarse, i))
                fs = [find(("v", r.fine, j)) for j in grp]
                changed |= refine(c, [x for f in fs for x in factors[f]], r.line)
                parts = _split(factors[c], [size[("v", r.fine, j)] for j in grp])
                for f, part in zip(fs, parts):
                    changed |= refine(f, part, r.line)
    return Dims({x: find(x) for x in list(parent)}, factors)


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
