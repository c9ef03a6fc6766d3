"""Contraction orders of a statement whose body is a product of several factors.

``r[a,d] += A[a,b] * B[b,c] * M[c,d]`` is one op over every index (a, d, b, c) unless the space
splits it into pairwise contractions: ``r__1[a,c] += A[a,b] * B[b,c]`` then
``r[a,d] += r__1[a,c] * M[c,d]``.  An order is a binary tree over the statement's *leaves*: its
factors grouped by index set (factors over the same indices multiply elementwise, so they form
one leaf).  Each tree node is one pairwise contraction that keeps exactly the indices the output
or a factor outside the node still needs, and sums the rest.  Node costs depend only on the set of
leaves below the node, so the k best trees by flops come from a dynamic programme over subsets
(exact, like opt_einsum's 'optimal') up to OPTIMAL_MAX_LEAVES leaves; beyond, greedy pairings.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .ir import (Access, Binary, Call, Const, Expr, Op, Pow, Unary, accesses, count_flops, rename,
                 to_text)
from .trees import Tree, canonical, tree_text
from .workload import Workload

OPTIMAL_MAX_LEAVES = 5    # exhaustive DP up to here; greedy pairings beyond
ORDER_CHOICES = 3         # orders offered per statement (besides leaving it unsplit)
_KNOWN = (Const, Access, Unary, Binary, Pow, Call)


@dataclass(frozen=True)
class Leaf:
    """One operand of the pairwise contractions: the product of the statement's factors over
    exactly ``indices`` (names of the statement's domain, in order of first appearance)."""
    expr: Expr
    indices: tuple[str, ...]

    @property
    def is_access(self) -> bool:
        return isinstance(self.expr, Access)


@dataclass(frozen=True)
class Product:
    """A splittable statement: ``op.out[op.parallel] += consts * leaf_0 * leaf_1 * ...``."""
    op: Op
    leaves: tuple[Leaf, ...]
    consts: tuple[Expr, ...]


@dataclass(frozen=True)
class Order:
    """One contraction order of a statement, with the flops of the ops it becomes and the
    bytes of the intermediates it writes."""
    tree: Tree
    flops: int
    bytes: int


@dataclass(frozen=True)
class OrderChoices:
    """The orders the space offers for one statement (best first), and its unsplit flops."""
    stmt: str
    product: Product
    unsplit_flops: int
    orders: tuple[Order, ...]

    def rank(self, tree: Tree) -> int | None:
        """1-based position of ``tree`` among the offered orders (None if not offered)."""
        for k, o in enumerate(self.orders, start=1):
            if o.tree == tree:
                return k
        return None


def times(acc: Expr | None, f: Expr) -> Expr:
    """``acc * f``, a reciprocal factor (``x ** -1``, from a division) written back as ``/``."""
    if isinstance(f, Pow) and f.exponent == -1:
        return Binary("/", acc if acc is not None else Const(1.0), f.base)
    return f if acc is None else Binary("*", acc, f)


def split_factors(op: Op, taken) -> tuple[Expr | None, Expr | None]:
    """``op``'s body as (the product of the factors ``taken(position, factor)`` leaves, the
    product of those it takes), each None where there are none (Op.factors: ``x / y`` counts as
    ``x * y**-1``, written back as a division)."""
    kept = out = None
    for k, f in enumerate(op.factors()):
        if taken(k, f):
            out = times(out, f)
        else:
            kept = times(kept, f)
    return kept, out


def scale_flops(consts) -> int:
    """Flops of multiplying one value by the constant factors ``consts`` (a division counts
    as one, as written)."""
    scaled: Expr = Access("_", ())
    for k in consts:
        scaled = times(scaled, k)
    return count_flops(scaled)[0]


def _known(e) -> bool:
    """Only expression kinds whose indices are all in their accesses (a node kind added later,
    an index condition say, keeps its statement unsplit until this learns about it)."""
    if not isinstance(e, _KNOWN):
        return False
    if isinstance(e, Unary):
        return _known(e.x)
    if isinstance(e, Binary):
        return _known(e.a) and _known(e.b)
    if isinstance(e, Pow):
        return _known(e.base)
    if isinstance(e, Call):
        return all(_known(a) for a in e.args)
    return True


def product_of(op: Op) -> Product | None:
    """The statement as a product of three or more leaves, or of two where one is more than
    one access (``(x[t,c] - mu[c]) * (x[t,d] - mu[d])``: split, each compound leaf is computed
    once over its own indices and the contraction reads plain tensors, a GEMM), or None."""
    if op.combiner != "sum" or not op.reduction or not _known(op.expr):
        return None
    groups: dict[frozenset, list[Expr]] = {}
    consts = []
    for f in op.factors():
        accs = accesses(f)
        if not accs:
            consts.append(f)
            continue
        groups.setdefault(frozenset(i for a in accs for i in a.idx), []).append(f)
    if len(groups) < 2:
        return None
    leaves = []
    for facs in groups.values():
        expr = None
        for f in facs:
            expr = times(expr, f)
        idx = tuple(dict.fromkeys(i for a in accesses(expr) for i in a.idx))
        leaves.append(Leaf(expr, idx))
    if len(leaves) == 2 and all(leaf.is_access for leaf in leaves):
        return None     # already a pairwise contraction of plain tensors
    return Product(op, tuple(leaves), tuple(consts))


def leaf_key(leaf: Leaf, ext: dict[str, int]) -> tuple[str, tuple[int, ...]]:
    """What a compound leaf computes, whatever its indices are called: its text over
    positional index names, and their extents.  Two leaves with one key are one tensor read
    through different indices (a centred ``x`` read as ``[t,c]`` and as ``[t,d]``), computed
    once."""
    pos = {i: f"_{k}" for k, i in enumerate(leaf.indices)}
    return to_text(rename(leaf.expr, pos)), tuple(ext[i] for i in leaf.indices)


# ---- printing ---------------------------------------------------------------------------------

def label(p: Product, t: Tree, top: bool = True) -> str:
    """``(A·B)·M``: the tree over the leaves' tensor names (a compound leaf in brackets)."""
    if isinstance(t, int):
        leaf = p.leaves[t]
        if leaf.is_access:
            return leaf.expr.tensor
        return "[" + re.sub(r"\[[^\]]*\]", "", to_text(leaf.expr)) + "]"
    inner = f"{label(p, t[0], False)}·{label(p, t[1], False)}"
    return inner if top else f"({inner})"


def _sci(x: float) -> str:
    return f"{x:.1e}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def describe(ch: OrderChoices, tree: Tree | None, dtype: str = "float32") -> str:
    """``r = (A·B)·M  [order 1 of 2, 1.8e9 flops vs 1.0e12 unsplit]`` (``tree`` None: the
    statement left as written)."""
    p = ch.product
    if tree is None:
        flat = "·".join(label(p, k) for k in range(len(p.leaves)))
        n = len(ch.orders)
        return (f"{ch.stmt} = {flat}  [unsplit, {_sci(ch.unsplit_flops)} flops; {n} order"
                f"{'s' if n != 1 else ''} offered, the best {_sci(ch.orders[0].flops)} flops]")
    rank = ch.rank(tree)
    flops = order_flops(p, tree, dtype)
    where = f"order {rank} of {len(ch.orders)}" if rank else "an order not offered"
    return f"{ch.stmt} = {label(p, tree)}  [{where}, {_sci(flops)} flops vs " \
           f"{_sci(ch.unsplit_flops)} unsplit]"


# ---- costs -------------------------------------------------------------------------------------

class _Costs:
    """Per set of leaves (a bitmask): the indices its result keeps, and one node's flops."""

    def __init__(self, p: Product, item: int):
        self.p, self.item = p, item
        self.n = len(p.leaves)
        self.full = (1 << self.n) - 1
        self.ext = dict(zip(p.op.domain, p.op.extents))
        self.sets = [frozenset(leaf.indices) for leaf in p.leaves]
        self.out = frozenset(p.op.parallel)
        self.const_flops = scale_flops(p.consts)    # what the root's constant factors add

    def idx(self, mask: int) -> frozenset:
        return frozenset().union(*(s for k, s in enumerate(self.sets) if mask >> k & 1))

    def kept(self, mask: int) -> frozenset:
        if mask == self.full:
            return self.out
        return self.idx(mask) & (self.out | self.idx(self.full & ~mask))

    def operand(self, mask: int) -> frozenset:
        return self.sets[mask.bit_length() - 1] if mask & (mask - 1) == 0 else self.kept(mask)

    def node(self, m1: int, m2: int) -> int:
        dom = self.operand(m1) | self.operand(m2)
        iters = math.prod(self.ext[i] for i in dom)
        reduces = bool(dom - self.kept(m1 | m2))
        per = 1 + int(reduces) + (self.const_flops if m1 | m2 == self.full else 0)
        return iters * per

    def size(self, mask: int) -> int:
        """Bytes of the intermediate a node writes (the root writes the statement's output)."""
        if mask == self.full:
            return 0
        return math.prod(self.ext[i] for i in self.kept(mask)) * self.item

    def leaf_flops(self) -> int:
        """Flops of the elementwise ops that compound leaves become (the same for every order)."""
        total, seen = 0, set()
        for leaf in self.p.leaves:
            if not leaf.is_access and leaf_key(leaf, self.ext) not in seen:
                seen.add(leaf_key(leaf, self.ext))
                total += math.prod(self.ext[i] for i in leaf.indices) * count_flops(leaf.expr)[0]
        return total

    def tree(self, t: Tree) -> tuple[int, int, int]:
        """(mask, flops, bytes) of a tree's nodes."""
        if isinstance(t, int):
            return 1 << t, 0, 0
        m1, f1, b1 = self.tree(t[0])
        m2, f2, b2 = self.tree(t[1])
        m = m1 | m2
        return m, f1 + f2 + self.node(m1, m2), b1 + b2 + self.size(m)


def _best_trees(c: _Costs, k: int) -> list[tuple[int, int, Tree]]:
    """The ``k`` cheapest trees by (flops, bytes): exact, since a node's cost depends only on
    the leaves below it, so the k best of a set combine the k best of its two parts."""
    best: dict[int, list[tuple[int, int, Tree]]] = {1 << j: [(0, 0, j)] for j in range(c.n)}
    for mask in sorted(range(1, c.full + 1), key=lambda m: bin(m).count("1")):
        if mask in best:
            continue
        low = mask & -mask
        found = []
        sub = (mask - 1) & mask
        while sub:
            if sub & low:
                rest = mask ^ sub
                node, size = c.node(sub, rest), c.size(mask)
                for f1, b1, t1 in best[sub]:
                    for f2, b2, t2 in best[rest]:
                        found.append((f1 + f2 + node, b1 + b2 + size, canonical((t1, t2))))
            sub = (sub - 1) & mask
        found.sort(key=lambda x: (x[0], x[1], tree_text(x[2])))
        best[mask] = found[:k]
    return best[c.full]


def _greedy(c: _Costs, score) -> Tree:
    """Pair the two parts that ``score(m1, m2)`` ranks lowest until one part is left."""
    parts: list[tuple[int, Tree]] = [(1 << j, j) for j in range(c.n)]
    while len(parts) > 1:
        x, y = min(((x, y) for x in range(len(parts)) for y in range(x + 1, len(parts))),
                   key=lambda xy: score(parts[xy[0]][0], parts[xy[1]][0]) + xy)
        (m1, t1), (m2, t2) = parts[x], parts[y]
        parts = [p for k, p in enumerate(parts) if k not in (x, y)] + [(m1 | m2,
                                                                        canonical((t1, t2)))]
    return parts[0][1]


def _greedy_trees(c: _Costs) -> list[tuple[int, int, Tree]]:
    """A few greedy orders: cheapest node first; smallest result first; and opt_einsum's
    greedy rule (the result's size minus its operands' sizes)."""
    size = lambda m: math.prod(c.ext[i] for i in c.operand(m))
    result = lambda m: math.prod(c.ext[i] for i in c.kept(m))
    scores = [lambda a, b: (c.node(a, b), result(a | b)),
              lambda a, b: (result(a | b), c.node(a, b)),
              lambda a, b: (result(a | b) - size(a) - size(b), c.node(a, b))]
    out = {}
    for s in scores:
        t = _greedy(c, s)
        _, f, b = c.tree(t)
        out[t] = (f, b, t)
    return sorted(out.values(), key=lambda x: (x[0], x[1], tree_text(x[2])))


def order_flops(p: Product, tree: Tree, dtype: str = "float32") -> int:
    """Flops of the ops ``p``'s statement becomes in ``tree``'s order."""
    c = _Costs(p, 4 if dtype == "float32" else 8)
    return c.tree(tree)[1] + c.leaf_flops()


def choices_for(op: Op, dtype: str = "float32", k: int = ORDER_CHOICES) -> OrderChoices | None:
    """The ``k`` best orders of ``op`` that need fewer flops than the op unsplit (None if the
    op is no product :func:`product_of` splits, or no order beats it)."""
    p = product_of(op)
    if p is None:
        return None
    c = _Costs(p, 4 if dtype == "float32" else 8)
    trees = _best_trees(c, k) if c.n <= OPTIMAL_MAX_LEAVES else _greedy_trees(c)
    unsplit = op.iterations * op.flops_per_iteration()[0]
    extra = c.leaf_flops()
    orders = tuple(Order(t, f + extra, b) for f, b, t in trees if f + extra < unsplit)[:k]
    return OrderChoices(op.out, p, unsplit, orders) if orders else None


def order_choices(w: Workload) -> dict[str, OrderChoices]:
    """Per statement of ``w`` that splitting makes cheaper: the orders the space offers."""
    out = {}
    for op in w.ops:
        ch = choices_for(op, w.dtype)
        if ch is not None:
            out[op.out] = ch
    return out
