"""Inlining: an elementwise intermediate recomputed inside each of its consumers instead of
stored once and read back.  Pure: ``inline(w, names)`` returns a new, ordinary Workload.

Fusion puts a producer into one consumer's loop nest; a tensor read by several consumers is
materialized for the others (a group has one sink, search_spaces.partition).  For a cheap
elementwise tensor that costs a write and as many reads of it as it has consumers, where
recomputing it in each consumer costs only its inputs' reads again.  Measured on the 2-core
AVX-512 host (the same block written both ways, searched with 30 trials each, cached plans
interleaved over 11 rounds): ``y[i,j] = (x[i,j] + x[j,i]) / 2 - u[i] u[j]`` read by a column
max and a row sum, 1.53 -> 0.84 ms; LayerNorm's input gradient (the centred input and the
gained gradient each read by two row sums and the result) 322 -> 237 us; GroupNorm's centred
input (read by the variance and the normalisation) 278 -> 237 us.

(Not search_spaces.inlining: that evaluates a fused member inside its one reader within a
group; this rewrites the workload, so the consumers may sit in different groups.)

Only a tensor whose every read covers its consumer's whole domain is offered: each consumer
then computes each element once per read, never once per element of a dim the tensor lacks
(the recomputation through a non-permutation map that made a fused triangle update 200x
slower).  The cost model prices what is recomputed like any fused producer's work.
"""
from __future__ import annotations

import functools
from dataclasses import replace

from .ir import Expr, Op, rebuild, rename
from .workload import Workload


def inlinable(w: Workload) -> tuple[str, ...]:
    """The ops of ``w`` that may be inlined, in program order: elementwise, not an output,
    read by two or more ops, each read covering its consumer's domain, and named in no
    fusion edge of the workload's ``[space]`` table."""
    pinned = {t for key in ("forbid_fusion", "force_fusion") for e in w.space.get(key, [])
              for t in e.split("->")}
    out = []
    for op in w.ops:
        if op.combiner != "none" or op.out in w.outputs or op.out in pinned:
            continue
        consumers = w.consumers[op.out]
        if len(consumers) < 2:
            continue
        if all(set(a.idx) == set(w.op(c).domain)
               for c in consumers for a in w.op(c).reads() if a.tensor == op.out):
            out.append(op.out)
    return tuple(out)


def substitute(e: Expr, producer: Op) -> Expr:
    """``e`` with every read of ``producer``'s tensor replaced by its body, renamed to the
    read's indices."""
    return rebuild(e, lambda a: a if a.tensor != producer.out
                   else rename(producer.expr, dict(zip(producer.parallel, a.idx))))


@functools.lru_cache(maxsize=64)
def inline(w: Workload, names: tuple[str, ...]) -> Workload:
    """``w`` with each op in ``names`` substituted into its consumers and dropped (a
    ValueError for a name :func:`inlinable` does not offer)."""
    if not names:
        return w
    offered = inlinable(w)
    bad = sorted(set(names) - set(offered))
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))} cannot be inlined (inlinable here: "
                         f"{', '.join(offered) or 'none'})")
    ops = list(w.ops)
    for name in (n for n in offered if n in names):          # program order
        producer = next(op for op in ops if op.out == name)
        ops = [op if op.out == name or name not in op.inputs()
               else replace(op, expr=substitute(op.expr, producer))
               for op in ops if op.out != name]
    return replace(w, ops=tuple(ops))
