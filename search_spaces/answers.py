"""The answers to a space's questions that rebuild a given candidate: how a named or
model-picked plan is handed to a sampler as an ordinary trial."""
from __future__ import annotations

from .candidate import IMPL_LOOP, Candidate
from .kernel_space import kernel_answer, kernel_schedule
from .space import UNSPLIT, SearchSpace
from .trees import tree_text


def params_of(space: SearchSpace, cand: Candidate) -> dict[str, object] | None:
    """The answers to ``space.build``'s questions that rebuild ``cand`` (None if none do):
    how a named or model-picked plan is handed to a sampler as an ordinary trial."""
    trees = dict(cand.orders)
    if any(stmt not in space.order_choices or tree_text(t) not in space.order_options(stmt)
           for stmt, t in trees.items()):
        return None                     # an order this space does not offer
    if any(t not in space.variant(cand.orders).inline_options for t in cand.inlined):
        return None                     # an inlining this space does not offer
    # the questions after the orders and the inlining
    top, space = space, space.variant(cand.orders, cand.inlined)
    w = space.w
    fused = cand.fused_pairs
    params: dict[str, object] = {}

    def answer(name: str, opts):
        kind, _, rest = name.split("@", 1)[0].partition(":")
        if kind == "order":
            val = tree_text(trees[rest]) if rest in trees else UNSPLIT
        elif kind == "inline":
            val = int(rest in cand.inlined)
        elif kind in ("chain", "chain_block"):
            block = next((s.chain_block for s in cand.schedules if s.anchor == rest), 0)
            val = int(block > 0) if kind == "chain" else block
        elif kind == "impl":
            sched = kernel_schedule(cand, rest)
            val = sched.impl if sched is not None else IMPL_LOOP
        elif kind == "stack":
            anchor, _, member = rest.partition(":")
            if member:              # does it join the stack
                val = int(bool(cand.stack(member)))
            else:                   # is any of its sibling set stacked
                sib = next(s for s in space.siblings if s.anchor == anchor)
                val = int(any(set(st) <= set(sib.members) for st in cand.stacks))
        elif kind == "precision":
            sched = next((s for s in cand.schedules if s.anchor == rest), None)
            val = (sched.precision if sched is not None else "") or opts[0]
        elif kind in ("fuse", "pair"):
            p, c = rest.split("->")
            val = int((p, c) in fused)
        elif kind == "layout":
            perm = cand.layout(rest, len(w.shapes[rest]))
            perms = space.layout_options(rest)
            val = perms.index(perm) if perm in perms else 0
        elif kind == "kernel":
            anchor, what = rest.rsplit(":", 1)
            sched = kernel_schedule(cand, anchor)
            val = opts[-1] if sched is None else sched.precision if what == "precision" \
                else kernel_answer(sched.kernel, what,
                                                               space.kernel_bounds, space.w, opts)
        else:
            anchor, k = rest.rsplit(":", 1)
            tiles = cand.schedule(anchor).tiles
            val = tiles[int(k)] if int(k) < len(tiles) else opts[-1]
        if val not in opts:
            val = opts[-1]
        params[name] = val
        return val

    built = top.build(answer)
    return params if built.key == cand.key else None

