"""Reduction chains that an online softmax can walk in one pass (FlashAttention's rescale).

A chain over a reduced index ``j`` is found from the algebra of the ops, never their names:

* ``m[R] max= X[R,j]``: a max over ``j`` alone of some expression ``X``;
* ``p[R,j] = exp(X[R,j] - m[R])`` with the same ``X``: so that, with ``m`` replaced by a running
  max, ``exp(X - m_old) = exp(X - m_new) * exp(m_new - m_old)`` and every sum linear in ``p``
  can be rescaled as the max grows;
* ``l[R] += p[R,j] * g``: a sum over ``j`` alone, linear in ``p`` (``g`` reads no chain tensor);
* optionally ``a[R,j] = p[R,j] / l[R]`` (the normalised weights; their sums divide by the final
  ``l``) and one contraction ``o[R,D] += p[R,j] * v[...]`` (or of ``a``), again linear; a factor
  of it that reads the final ``l`` or ``m`` at its rows and nothing that varies with ``j``
  (``o += p * v / l``) is the same for every ``j``: it is taken out of the sum and applied to
  the result after the walk (``Chain.outer``);
* optionally one elementwise epilogue reading only the final ``m``, ``l``, ``o`` and inputs
  (``out = o / l``, a log-sum-exp ``m + log(l)``);
* the score ops that only feed ``X`` over exactly ``(R, j)`` (the scores and their mask).

Anything else that reads ``p``, ``a`` or a score op, a second use of ``p`` in one product, or a
max over more than one index, is not a chain: it does not commute with the rescale.  Each op is
mapped onto common index names (``r<k>`` rows, ``jj`` the walked index, ``x<k>`` the
contraction's free dims, ``y<n>_<k>`` a score op's own reductions) so that code generators and
the cost model can evaluate every member with one set of loop variables.

A plain chain (no max, no sum: ``max_op`` and ``sum_op`` None) is the same walk without the
rescale: ``o[R,X] += p[R,j] * v[...]`` where ``p`` is elementwise over exactly ``(R, j)`` of
score ops over ``(R, j)`` (a kernel matrix ``exp(-|x_i - z_j|^2)`` times coefficients, an MLP's
activation times its second weight), so the scores never reach memory.  It is offered only
where a row's accumulators are few (``PLAIN_MAX_ACC``): the walk keeps them for its whole length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .ir import Access, Binary, Call, Expr, Op, Pow, accesses, rename, to_text
from .orders import split_factors
from .partition import check_partition, groups
from .space_spec import edges_of
from .workload import Workload

WALKED = "jj"
# a plain chain's row keeps the contraction's free points as accumulators through the walk:
# past this many a step's vectors spill far (chain_walk.VECTOR_ACC) and the unchained GEMMs win
PLAIN_MAX_ACC = 256


@dataclass(frozen=True)
class Chain:
    """One online-softmax chain; ``anchor`` is its group's sink (epilogue, contraction or sum)."""
    anchor: str
    members: tuple[str, ...]         # program order
    scores: tuple[str, ...]          # score ops evaluated per block of j (program order)
    max_op: str | None               # None: a plain chain (no softmax, see the module doc)
    exp_op: str                      # the weights the contraction sums (exp(X - m), or p)
    sum_op: str | None
    norm_op: str | None
    contraction: str | None
    epilogue: str | None
    extent: int                      # of the walked index
    names: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]   # op -> (its index -> common)
    edges: tuple[tuple[str, str], ...]     # producer->consumer edges between members
    # positions in the contraction's factors (Op.factors) of those taken out of its sum: they
    # read the final max or sum at the contraction's rows and nothing walked
    outer: tuple[int, ...] = ()

    @property
    def softmax(self) -> bool:
        """An online softmax (a running max and sum rescale the walk), not a plain chain."""
        return self.max_op is not None

    def common(self, op: str) -> dict[str, str]:
        """``op``'s domain index names -> the chain's common names."""
        return dict(dict(self.names)[op])

    def contraction_parts(self, op: Op) -> tuple[Expr, Expr | None]:
        """The contraction ``op``'s body without its outer factors (what the walk sums), and
        the product of those (applied to the sum after the walk), or None."""
        if not self.outer:
            return op.expr, None
        return split_factors(op, lambda k, f: k in self.outer)

    def text(self) -> str:
        """One line for ``explain``: the members and their roles."""
        roles = [f"scores {','.join(self.scores)}"] if self.scores else []
        if self.softmax:
            roles += [f"max {self.max_op}", f"exp {self.exp_op}", f"sum {self.sum_op}"]
            roles += [f"normalise {self.norm_op}"] if self.norm_op else []
        else:
            roles.append(f"weights {self.exp_op}")
        roles += [f"{k} {v}" for k, v in (("contraction", self.contraction),
                                          ("epilogue", self.epilogue)) if v]
        kind = "online softmax" if self.softmax else "fused walk"
        return f"{kind} over an index of extent {self.extent}: " + ", ".join(roles)


def _match_map(acc: Access, producer: Op, known: dict[str, str]) -> dict[str, str] | None:
    """``op``'s indices in ``acc`` named after ``producer``'s common names (``known``)."""
    out: dict[str, str] = {}
    if len(set(acc.idx)) != len(acc.idx):
        return None                    # a diagonal read: not a plain row/column walk
    for i, p in zip(acc.idx, producer.parallel):
        out[i] = known[p]
    return out


def _is_norm(op: Op, p: str, l: str, mp: dict[str, str], rows) -> bool:
    """``op`` is ``p / l`` (or ``p * (1 / l)``) with ``l`` read at the same rows."""
    facs = [f for f in op.factors() if to_text(f) != "1.0"]
    pa = [f for f in facs if isinstance(f, Access) and f.tensor == p]
    inv = [f for f in facs if isinstance(f, Pow) and f.exponent == -1
           and isinstance(f.base, Access) and f.base.tensor == l]
    return len(facs) == 2 and len(pa) == 1 and len(inv) == 1 \
        and [mp.get(i) for i in inv[0].base.idx] == list(rows)


def _common_text(e, names: dict[str, str]) -> str | None:
    try:
        return to_text(rename(e, names))
    except KeyError:
        return None


def _linear_in(op: Op, tensors: set[str], forbidden: set[str],
               skip: tuple[int, ...] = ()) -> Access | None:
    """The one factor of ``op``'s product that reads one of ``tensors``, if the other factors
    (but those at positions ``skip``) read nothing in ``forbidden`` (so the sum is linear in
    it), else None."""
    hits, rest = [], []
    for k, f in enumerate(op.factors()):
        if k in skip:
            continue
        (hits if isinstance(f, Access) and f.tensor in tensors else rest).append(f)
    if len(hits) != 1 or any(a.tensor in forbidden for f in rest for a in accesses(f)):
        return None
    return hits[0]


def _outer_factors(w: Workload, op: Op, mp: dict[str, str], stats: set[str],
                   rows: tuple[str, ...]) -> tuple[int, ...]:
    """Positions of ``op``'s factors that read one of ``stats`` (the max and sum, final values)
    each at ``op``'s rows, and otherwise only tensors outside the chain, with no index the
    walk varies: the same for every walked ``j``, so they can leave the sum."""
    out = []
    for k, f in enumerate(op.factors()):
        accs = accesses(f)
        if not any(a.tensor in stats for a in accs):
            continue
        if any(mp.get(i) == WALKED for a in accs for i in a.idx):
            continue
        if all(a.tensor not in stats or [mp.get(i) for i in a.idx] == list(rows)
               for a in accs):
            out.append(k)
    return tuple(out)


def detect(w: Workload) -> dict[str, Chain]:
    """Every chain of ``w``, keyed by its anchor."""
    out = {}
    for op in w.ops:
        ch = _chain_from(w, op)
        if ch is not None:
            out[ch.anchor] = ch
    taken = {m for ch in out.values() for m in ch.members}
    for op in w.ops:
        if op.out in taken:
            continue
        ch = _plain_from(w, op)
        if ch is not None and not taken & set(ch.members):
            out[ch.anchor] = ch
            taken |= set(ch.members)
    return out


def offered(w: Workload, forbid: set[tuple[str, str]], loops: bool) -> dict[str, Chain]:
    """:func:`detect`'s chains but those that fuse a ``forbid``-den edge or, where contractions
    may not run as loops (``loops`` False: a ``contraction_impls`` table), walk one."""
    return {a: ch for a, ch in detect(w).items() if not forbid & set(ch.edges)
            and (loops or not any(w.op(m).is_contraction for m in ch.members))}


def _chain_from(w: Workload, mop: Op) -> Chain | None:
    if mop.combiner != "max" or len(mop.reduction) != 1:
        return None
    rows = tuple(f"r{k}" for k in range(len(mop.parallel)))
    names = {mop.out: {**dict(zip(mop.parallel, rows)), mop.reduction[0]: WALKED}}
    x_text = _common_text(mop.expr, names[mop.out])
    m = mop.out
    # the exponential: exp(X - m) with the same X
    pop = None
    for c in w.consumers[m]:
        cop = w.op(c)
        e = cop.expr
        if cop.combiner == "none" and isinstance(e, Call) and e.fn == "exp" \
                and isinstance(e.args[0], Binary) and e.args[0].op == "-" \
                and isinstance(e.args[0].b, Access) and e.args[0].b.tensor == m:
            mp = _match_map(e.args[0].b, mop, names[m])
            free = [i for i in cop.parallel if i not in (mp or {})]
            if mp is None or len(free) != 1 or cop.reduction:
                continue
            mp[free[0]] = WALKED
            if _common_text(e.args[0].a, mp) == x_text and m not in {
                    a.tensor for a in accesses(e.args[0].a)}:
                pop, names[c] = cop, mp
                break
    if pop is None:
        return None
    p = pop.out
    chain_t = {m, p}
    lop = aop = oop = None
    outer: tuple[int, ...] = ()
    stats = lambda: {m} | ({lop.out} if lop is not None else set())
    for c in sorted(w.consumers[p], key=lambda c: w.op(c).combiner != "sum"):
        cop = w.op(c)
        acc = [a for a in cop.reads() if a.tensor == p]
        mp = _match_map(acc[0], pop, names[p]) if len(acc) == 1 else None
        if mp is None:
            return None
        if cop.combiner == "sum" and set(cop.reduction) == {i for i, n in mp.items()
                                                            if n == WALKED} \
                and len(cop.reduction) == 1:
            if set(cop.parallel) <= set(mp) and lop is None:
                lop, skip = cop, ()
            elif oop is None and set(mp) < set(cop.domain):
                oop = cop
                skip = outer = _outer_factors(w, cop, mp, stats(), rows)
            else:
                return None
            if _linear_in(cop, {p}, chain_t | {p}, skip) is None:
                return None
        elif cop.combiner == "none" and lop is not None and not cop.reduction \
                and set(cop.parallel) == set(mp) and _is_norm(cop, p, lop.out, mp, rows):
            aop = cop
        else:
            return None
        names[c] = {**mp, **{i: f"x{k}" for k, i in enumerate(
            i for i in cop.parallel if i not in mp)}}
        chain_t.add(c)
    if lop is None or [names[lop.out][i] for i in lop.parallel] != list(rows):
        return None
    if aop is not None:
        for c in w.consumers[aop.out]:
            cop = w.op(c)
            acc = [a for a in cop.reads() if a.tensor == aop.out]
            mp = _match_map(acc[0], aop, names[aop.out]) if len(acc) == 1 else None
            if oop is not None or mp is None or cop.combiner != "sum" or len(cop.reduction) != 1 \
                    or mp.get(cop.reduction[0]) != WALKED:
                return None
            outer = _outer_factors(w, cop, mp, stats(), rows)
            if _linear_in(cop, {aop.out}, chain_t | {aop.out}, outer) is None:
                return None
            oop = cop
            names[c] = {**mp, **{i: f"x{k}" for k, i in enumerate(
                i for i in cop.parallel if i not in mp)}}
            chain_t.add(c)
    if oop is not None and not set(rows) <= set(names[oop.out].values()):
        return None
    # with every chain tensor known: the sums read nothing of the chain but their one weight
    weight = {aop.out} if aop is not None else {p}
    if _linear_in(lop, {p}, chain_t) is None or (
            oop is not None and _linear_in(oop, {p} | weight, chain_t, outer) is None):
        return None
    eop = _epilogue(w, names, chain_t, m, lop, oop)
    scores = _scores(w, mop, pop, names, chain_t)
    members = [o.out for o in w.ops if o.out in chain_t | set(scores) |
               ({eop.out} if eop else set())]
    # p, a and the scores live only inside the walk: nothing else may read them
    private = {p} | ({aop.out} if aop else set()) | set(scores)
    if any(t in w.outputs for t in private):
        return None
    return _assemble(w, members, eop, names, dict(
        scores=tuple(scores), max_op=m, exp_op=p, sum_op=lop.out,
        norm_op=aop.out if aop else None, contraction=oop.out if oop else None,
        extent=mop.extent(mop.reduction[0]), outer=outer))


def edges_in(w: Workload, mem) -> tuple[tuple[str, str], ...]:
    """The producer->consumer edges between the ops ``mem``."""
    return tuple((a, b) for a, b in edges_of(w.ops) if a in mem and b in mem)


def _assemble(w: Workload, members: list[str], eop: Op | None, names, roles) -> Chain | None:
    """The chain of ``members`` (``roles``: its other fields), with the epilogue ``eop`` where
    they form one legal group with it, else without; None when neither does."""
    for anchor_op in ([eop] if eop else []) + [None]:
        mem = members if anchor_op else [x for x in members if eop is None or x != eop.out]
        edges = edges_in(w, mem)
        if check_partition(w, set(edges)) is not None:
            continue
        gs = [g for g in groups(w, set(edges)) if len(g.members) > 1]
        if len(gs) != 1 or set(gs[0].members) != set(mem):
            continue
        return Chain(anchor=gs[0].anchor, members=tuple(mem),
                     epilogue=anchor_op.out if anchor_op else None,
                     names=tuple((k, tuple(v.items())) for k, v in names.items() if k in mem),
                     edges=edges, **roles)
    return None


def _plain_from(w: Workload, oop: Op) -> Chain | None:
    """A plain chain summed by the contraction ``oop`` (see the module doc), or None."""
    if oop.combiner != "sum" or len(oop.reduction) != 1:
        return None
    j = oop.reduction[0]
    for acc in oop.reads():
        pop = w.producer.get(acc.tensor)
        if pop is None or pop.combiner != "none" or pop.reduction or acc.tensor in w.outputs \
                or list(w.consumers[acc.tensor]) != [oop.out] or j not in acc.idx \
                or len(set(acc.idx)) != len(acc.idx):
            continue
        p = pop.out
        rows_of = [i for i in acc.idx if i != j]
        common = {i: f"r{k}" for k, i in enumerate(rows_of)} | {j: WALKED}
        names: dict[str, dict[str, str]] = {p: {q: common[i] for q, i in
                                                zip(pop.parallel, acc.idx)}}
        mp = {i: common[i] for i in acc.idx}
        free = [i for i in oop.parallel if i not in mp]
        if not rows_of or not set(rows_of) <= set(oop.parallel) or \
                math.prod(oop.extent(i) for i in free) > PLAIN_MAX_ACC:
            continue
        names[oop.out] = {**mp, **{i: f"x{k}" for k, i in enumerate(free)}}
        chain_t = {p, oop.out}
        if _linear_in(oop, {p}, chain_t) is None:
            continue
        scores = _scores(w, pop, pop, names, chain_t)
        if not any(w.op(t).reduction for t in scores):
            continue                   # nothing reduced per point: a prologue, not a walk
        if any(t in w.outputs for t in scores):
            continue
        eop = _epilogue(w, names, chain_t, None, None, oop)
        members = [o.out for o in w.ops if o.out in chain_t | set(scores) |
                   ({eop.out} if eop else set())]
        ch = _assemble(w, members, eop, names, dict(
            scores=tuple(scores), max_op=None, exp_op=p, sum_op=None, norm_op=None,
            contraction=oop.out, extent=oop.extent(j)))
        if ch is not None:
            return ch
    return None


def _epilogue(w: Workload, names, chain_t: set[str], m: str | None, lop: Op | None,
              oop: Op | None):
    """The elementwise op after the walk (``o / l``, ``m + log(l)``), if there is one."""
    last = oop if oop is not None else lop
    cons = w.consumers[last.out]
    if len(cons) != 1:
        return None
    eop = w.op(cons[0])
    if eop.combiner != "none" or eop.reduction:
        return None
    mp: dict[str, str] = {}
    finals = {t for t in (m, lop.out if lop else None, last.out) if t}
    for acc in eop.reads():
        if acc.tensor in chain_t - finals:
            return None                # reads p or a: needs the final max, not a walk
        if acc.tensor in finals:
            got = _match_map(acc, w.op(acc.tensor), names[acc.tensor])
            if got is None or any(mp.get(i, n) != n for i, n in got.items()):
                return None
            mp.update(got)
    if set(eop.parallel) != set(mp) or set(mp.values()) != set(names[last.out].values()) - {WALKED}:
        return None
    names[eop.out] = mp
    return eop


def _scores(w: Workload, mop: Op, pop: Op, names, chain_t: set[str]) -> list[str]:
    """The score ops over exactly (rows, j) that only the chain reads, walking up from X."""
    inside = set(chain_t)
    want = set(names[mop.out].values())
    found: list[str] = []
    queue = [(mop.out, a) for a in mop.reads()] + [(pop.out, a) for a in pop.reads()]
    n = 0
    while queue:
        reader, acc = queue.pop(0)
        t = acc.tensor
        if t in inside or t not in w.producer:
            continue
        top = w.op(t)
        if not all(c in inside for c in w.consumers[t]) or top.combiner == "max" \
                or t in w.outputs:
            continue
        mp = {q: names[reader].get(i, "?") for q, i in zip(top.parallel, acc.idx)}
        if len(set(acc.idx)) != len(acc.idx) or set(mp.values()) != want:
            continue
        n += 1
        mp.update({r: f"y{n}_{k}" for k, r in enumerate(top.reduction)})
        names[t] = mp
        inside.add(t)
        found.append(t)
        queue += [(t, a) for a in top.reads()]
    order = [o.out for o in w.ops]
    return sorted(found, key=order.index)
