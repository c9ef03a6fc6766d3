"""The contraction-order rewrite: a workload with chosen product statements split into
pairwise contractions.  Pure: ``rewrite(w, orders)`` returns a new, ordinary Workload.

For ``r[a,d] += A[a,b] * B[b,c] * M[c,d]`` and the order ``((0,1),2)`` the statement becomes

    r__1[a,c] += A[a,b] * B[b,c]
    r[a,d]    += r__1[a,c] * M[c,d]

A leaf that is more than one access (``exp(A[a,b])``, ``A[a,b] * s[a,b]``) becomes an elementwise
op of its own first, so that every pairwise contraction reads two plain tensors (a library GEMM
can run it; fusion may still put the elementwise op back into its consumer's tiles); two
leaves that compute the same thing under other index names (``orders.leaf_key``) share one op.
New tensors are named ``<statement>__<k>`` (k counting up, skipping names already taken) in the
order they are computed; the last contraction keeps the statement's name and indices, so its
consumers and the program outputs are unchanged and no intermediate ever becomes an output.
"""
from __future__ import annotations

import functools
import json
from dataclasses import replace
from itertools import count

from .candidate import Candidate
from .ir import Access, Binary, Expr, Op, accesses, rename
from .inline import inline
from .orders import Product, leaf_key, product_of, times
from .trees import Tree, canonical, leaves_of
from .workload import Workload

Orders = tuple[tuple[str, Tree], ...]


def _canonical_op(name: str, out_idx: tuple[str, ...], expr: Expr, ext: dict[str, int],
                  line: int) -> Op:
    """An op over the original statement's index names, renamed as the loader names them:
    parallel indices ``d0..`` in output order, then reduction indices by first appearance."""
    used = list(dict.fromkeys(i for a in accesses(expr) for i in a.idx))
    red = tuple(i for i in used if i not in out_idx)
    domain = tuple(out_idx) + red
    canon = {i: f"d{k}" for k, i in enumerate(domain)}
    return Op(name, tuple(canon[i] for i in out_idx), tuple(canon[i] for i in red),
              tuple(ext[i] for i in domain), "sum" if red else "none", rename(expr, canon), line)


def split(p: Product, tree: Tree, taken: set[str]) -> list[Op]:
    """The ops that compute ``p``'s statement in ``tree``'s order (the last one is the
    statement itself)."""
    op = p.op
    ext = dict(zip(op.domain, op.extents))
    if sorted(leaves_of(tree)) != list(range(len(p.leaves))) or isinstance(tree, int):
        raise ValueError(f"order {tree!r} does not cover the {len(p.leaves)} factors of "
                         f"{op.out!r} once each")
    numbers = count(1)
    ops: list[Op] = []

    def fresh() -> str:
        while True:
            name = f"{op.out}__{next(numbers)}"
            if name not in taken:
                taken.add(name)
                return name

    def sets(t: Tree) -> set[str]:
        return {i for k in leaves_of(t) for i in p.leaves[k].indices}

    everything = leaves_of(tree)
    computed: dict[tuple, str] = {}     # leaf_key -> the elementwise op that computes it

    def build(t: Tree, root: bool) -> Access:
        if isinstance(t, int):
            leaf = p.leaves[t]
            if leaf.is_access:
                return leaf.expr
            key = leaf_key(leaf, ext)
            if key not in computed:
                computed[key] = fresh()
                ops.append(_canonical_op(computed[key], leaf.indices, leaf.expr, ext, op.line))
            return Access(computed[key], leaf.indices)
        a, b = build(t[0], False), build(t[1], False)
        expr: Expr = Binary("*", a, b)
        if root:
            for c in p.consts:
                expr = times(expr, c)
            out_idx = op.parallel
        else:
            inside = set(leaves_of(t))
            outside = {i for k in everything if k not in inside for i in p.leaves[k].indices}
            keep = sets(t) & (set(op.parallel) | outside)
            out_idx = tuple(i for i in dict.fromkeys(a.idx + b.idx) if i in keep)
        name = op.out if root else fresh()
        ops.append(_canonical_op(name, out_idx, expr, ext, op.line))
        return Access(name, out_idx)

    build(tree, True)
    return ops


def _space_json(space_json: str, family: dict[str, list[Op]]) -> str:
    """The ``[space]`` table with fusion edges into a split statement moved to the new ops
    that read the producer."""
    spec = json.loads(space_json)
    for key in ("forbid_fusion", "force_fusion"):
        if key not in spec:
            continue
        edges = []
        for e in spec[key]:
            p, c = e.split("->")
            if c in family:
                edges += [f"{p}->{o.out}" for o in family[c] if p in o.inputs()]
            else:
                edges.append(e)
        spec[key] = sorted(set(edges))
    return json.dumps(spec, sort_keys=True)


@functools.lru_cache(maxsize=64)
def rewrite(w: Workload, orders: Orders) -> Workload:
    """``w`` with each statement named in ``orders`` split in its order (a ValueError if the
    statement is no product of that many factors)."""
    if not orders:
        return w
    chosen = {stmt: canonical(t) for stmt, t in orders}
    taken = set(w.shapes)
    family: dict[str, list[Op]] = {}
    ops: list[Op] = []
    for op in w.ops:
        if op.out not in chosen:
            ops.append(op)
            continue
        p = product_of(op)
        if p is None:
            raise ValueError(f"statement {op.out!r} is not a product of three or more factors, "
                             f"nor of two with a compound one; it has no contraction order")
        family[op.out] = split(p, chosen.pop(op.out), taken)
        ops += family[op.out]
    if chosen:
        raise ValueError(f"no statement {', '.join(map(repr, sorted(chosen)))} to reorder")
    return replace(w, ops=tuple(ops), space_json=_space_json(w.space_json, family))


def rewritten(w: Workload, cand: Candidate) -> Workload:
    """The workload ``cand`` runs: ``w`` rewritten with the candidate's contraction orders, then
    its inlined intermediates substituted into their consumers (search_spaces.inline).
    Every consumer of a (workload, candidate) pair (cost model, code generators, executors,
    reports) starts here; the float64 reference stays the original workload's."""
    rw = rewrite(w, cand.orders) if cand.orders else w
    return inline(rw, cand.inlined) if cand.inlined else rw
