"""The search space of a workload, derived automatically and narrowed by its ``[space]`` table.

Choices are asked through a ``choose(name, options)`` callback, so Optuna's
``trial.suggest_categorical`` or a random generator can drive the same code.  Illegal fusion
choices are repaired (edges dropped in order until the partition is legal), so every set of
answers yields a legal candidate.

The first questions are the contraction orders (``order:STMT``, one per product of three or more
factors, or of two with a compound one, that some order makes cheaper), then whether to inline
each elementwise intermediate search_spaces.inline offers (``inline:OP``): each answer rewrites
the workload (search_spaces.rewrite), and every later question (fusion, impls, layouts, tiles)
is asked of the rewritten workload's space, a *variant* of this one, whose new intermediates
are ordinary tensors.  A variant's question whose options mean something else than the same
question's here is asked under a name qualified by the orders and inlined ops
(``impl:r@r=((0,1),2)``): Optuna requires one set of options per parameter name in a study.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from itertools import permutations
from typing import Callable, Sequence

from .candidate import (IMPL_KERNEL, IMPL_LIBRARY, IMPL_LOOP, STANDALONE_IMPLS, Candidate,
                        GroupSchedule, make_candidate)
from .chain import Chain, offered
from .gemm import gemm_form
from .inline import inlinable, inline
from .kernel import KernelBounds
from .kernel_space import ask_kernel_fusions, kernel_params, kernel_question_options
from .orders import OrderChoices, order_choices
from .partition import groups, materialized, repair
from .precision import TENSOR_PRECISIONS, precision_options
from .rewrite import Orders, rewrite
from .siblings import sibling_sets, stack_layout, stackable
from .space_spec import edges_of
from .trees import parse_tree, tree_text
from .workload import Workload

# Version of the candidate encoding (parameters, their meaning, Candidate JSON).  It is part of
# every plan key (db.keys.PlanKey.for_env reads it): bump it whenever the encoding changes.
# 2: contraction orders (the order:STMT parameters, Candidate.orders).
# 3: the ``kernel`` contraction impl (GroupSchedule.kernel), its kernel:<contraction>:* parameters
#    and its fusions (fuse:p->c into a kernel contraction's group, search_spaces.kernel_fusion).
# 4: online-softmax chains (chain:ANCHOR, chain_block:ANCHOR, GroupSchedule.chain_block).
# 5: siblings stacked into one library GEMM (stack:ANCHOR, Candidate.stacks, siblings).
# 6: a stack of some of the stackable siblings (the stack:ANCHOR:MEMBER parameters).
# 7: pairs in the kernel (pair:p2->c, a second contraction into a kernel epilogue,
#    kernel_fusion.pair_of).
# 8: no KC slices under 64 (the kernel:ANCHOR:kc choices of few-row products, search_spaces.kernel).
# 9: a library contraction's arithmetic on a backend with tensor cores (the precision:ANCHOR
#    parameters, GroupSchedule.precision, search_spaces.precision).
# 10: a product of two factors, one of them compound (``(x[t,c] - mu[c]) * (x[t,d] - mu[d])``),
#    has an order too (order:STMT, search_spaces.orders.product_of); a compound factor repeated
#    under other index names is computed once (search_spaces.rewrite.split).
# 11: elementwise intermediates inlined into their consumers (the inline:OP parameters,
#    Candidate.inlined, search_spaces.inline).
# 12: the CUDA backend's tensor-core ``kernel`` impl (KernelBounds.gpu), its arithmetic asked as
#    kernel:CONTRACTION:precision among the tensor-core precisions the tolerance admits.
# 13: stacked siblings on the CUDA backend too (its spaces ask stack:ANCHOR), a stack running in
#    its members' most accurate precision (search_spaces.precision.stack_precision).
# 14: plain chains (search_spaces.chain: walks without a softmax; chain:ANCHOR on more workloads).
# 15: a chain's walk in one block of a power of two at or over its extent (up to 256).
# 16: kernel:ANCHOR:split "n" (the kernel's threads on chunks of columns).
SPACE_VERSION = "16"
UNSPLIT = "none"          # the order:STMT answer that leaves the statement as written
Choose = Callable[[str, Sequence], object]


@dataclass(frozen=True)
class TileBounds:
    """Tile sizes a backend accepts: powers of two in [lo, hi]; ``kernel``: what the machine
    allows the generated contraction kernel, for a backend that has one (None: no ``kernel``
    impl in the space); ``chains``: whether its code generator runs online-softmax chains
    (search_spaces.chain), so that its spaces offer them; ``stacks``: whether its executor
    runs sibling contractions stacked as one library GEMM (search_spaces.siblings);
    ``precisions``: the arithmetics its library contractions may run in beyond the workload's
    default (search_spaces.precision), each offered where the workload's tolerance admits it."""
    lo: int = 1
    hi: int = 256
    kernel: KernelBounds | None = None
    chains: bool = True
    stacks: bool = False
    precisions: tuple[str, ...] = ()


class SearchSpace:
    """Every candidate for one workload on one backend.

    ``choices``: the statements offered contraction orders (by default every product
    that some order makes cheaper; a variant, built for a rewritten workload, offers none, nor
    inlining)."""

    def __init__(self, w: Workload, bounds: TileBounds = TileBounds(),
                 choices: dict[str, OrderChoices] | None = None):
        self.w, self.bounds = w, bounds
        self.order_choices = order_choices(w) if choices is None else choices
        self.rewrites = choices is None         # asks order:* and inline:* questions
        self._variants: dict[tuple, SearchSpace] = {}
        spec = w.space
        self.edges = edges_of(w.ops)
        self.forbid = {tuple(e.split("->")) for e in spec.get("forbid_fusion", [])}
        self.force = [tuple(e.split("->")) for e in spec.get("force_fusion", [])]
        allowed_tiles = spec.get("tiles")
        self.kernel_bounds = bounds.kernel
        impls = [IMPL_LIBRARY, IMPL_LOOP] + ([IMPL_KERNEL] if bounds.kernel else [])
        self.impls = tuple(i for i in spec.get("contraction_impls", impls)
                           if i != IMPL_KERNEL or bounds.kernel is not None)
        self.layout_mode = spec.get("layouts", "auto")
        self.identity_layouts = self.layout_mode == "identity"
        self.tile_options: dict[str, list[list[int]]] = {}
        for op in w.ops:
            per_dim = []
            for e in op.out_shape:
                # powers of two below the extent, then the whole extent (no tiling)
                opts = []
                t = bounds.lo
                while t < e and t <= bounds.hi:
                    if allowed_tiles is None or t in allowed_tiles:
                        opts.append(t)
                    t *= 2
                per_dim.append(opts + [e])
            self.tile_options[op.out] = per_dim
        self.library_ok = {op.out for op in w.ops if gemm_form(op) is not None}
        self.auto_layouts = self._auto_layouts()
        self.chains = offered(w, self.forbid, IMPL_LOOP in self.impls) if bounds.chains and \
            spec.get("chains", True) else {}       # `chains = false` in [space]: none
        # `stacks = false` in [space] likewise turns sibling stacking off
        self.siblings = sibling_sets(w) if bounds.stacks and spec.get("stacks", True) else ()
        # the default first; a question only where there is a choice
        self.precisions = precision_options(w, bounds.precisions)
        # a GPU's kernel runs on tensor cores only: offered where the tolerance admits one
        self.kernel_precisions = [p for p in self.precisions if p in TENSOR_PRECISIONS]
        if bounds.kernel is not None and bounds.kernel.gpu and not self.kernel_precisions:
            self.impls = tuple(i for i in self.impls if i != IMPL_KERNEL)

    # ---- contraction orders --------------------------------------------------------------
    def variant(self, orders: Orders, inlined: tuple[str, ...] = ()) -> "SearchSpace":
        """The space of the workload rewritten with ``orders``, then with ``inlined`` inlined
        (this space if there are neither)."""
        if not orders and not inlined:
            return self
        key = (tuple(sorted(orders)), tuple(sorted(inlined)))
        if key not in self._variants:
            w = inline(rewrite(self.w, key[0]), key[1])
            self._variants[key] = SearchSpace(w, self.bounds, {})
        return self._variants[key]

    def order_options(self, stmt: str) -> list[str]:
        """Values of ``order:STMT``: the offered orders, best first, then UNSPLIT."""
        return [tree_text(o.tree) for o in self.order_choices[stmt].orders] + [UNSPLIT]

    def best_orders(self) -> Orders:
        """Each product statement in its order of fewest flops (what the named plans use)."""
        return tuple((stmt, ch.orders[0].tree) for stmt, ch in sorted(self.order_choices.items()))

    def ask_orders(self, choose: Choose) -> Orders:
        out = []
        for stmt in sorted(self.order_choices):
            pick = choose(f"order:{stmt}", self.order_options(stmt))
            if pick != UNSPLIT:
                out.append((stmt, parse_tree(pick)))
        return tuple(out)

    # ---- inlining ------------------------------------------------------------------------
    @cached_property
    def inline_options(self) -> tuple[str, ...]:
        """The ops an ``inline:OP`` question is asked for (of this space's workload): not an
        online-softmax chain's members (inlined, the softmax is no chain any more, and the
        chain already keeps them out of memory)."""
        if not self.w.space.get("inline", True):
            return ()       # `inline = false` in [space]
        inchain = {m for ch in self.chains.values() for m in ch.members}
        return tuple(t for t in inlinable(self.w) if t not in inchain)

    def ask_inlines(self, choose: Choose, orders: Orders) -> tuple[str, ...]:
        """The ops inlined, asked of the workload after ``orders`` (whose ops they are)."""
        return tuple(t for t in self.variant(orders).inline_options
                     if choose(f"inline:{t}", [0, 1]))

    def meaning(self, question: str):
        """What the options of ``question`` stand for in this space (None: never asked)."""
        kind, _, rest = question.partition(":")
        if kind == "impl" and rest in self.w.producer and self.w.op(rest).is_contraction:
            return self.impl_options(rest)
        if kind == "kernel":
            anchor, what = rest.rsplit(":", 1)
            if self.kernel_bounds is None or anchor not in self.library_ok:
                return None
            if what == "precision":
                return self.kernel_precisions if self.kernel_bounds.gpu else None
            return kernel_question_options(self.kernel_bounds, self.w, anchor).get(what)
        if kind == "chain":
            return [0, 1] if rest in self.chains else None
        if kind == "inline":
            return [0, 1]
        if kind == "chain_block":
            return self.chain_blocks(rest) if rest in self.chains else None
        if kind in ("fuse", "pair"):
            return [0, 1] if tuple(rest.split("->")) in self.edges else None
        if kind == "stack":
            return [0, 1] if any(s.anchor == rest for s in self.siblings) else None
        if kind == "precision":
            return self.precisions if rest in self.library_ok else None
        if kind == "layout":
            return self.layout_options(rest) if rest in self.w.shapes else None
        if kind == "tile":
            anchor, k = rest.rsplit(":", 1)
            opts = self.tile_options.get(anchor, [])
            return opts[int(k)] if int(k) < len(opts) else None
        return None

    def _qualified(self, choose: Choose, sub: "SearchSpace", orders: Orders,
                   inlined: tuple[str, ...] = ()) -> Choose:
        """``choose`` for a variant's questions: a question whose options mean something else
        there than here (impl:r once r is a pairwise contraction, the layouts and tiles of the
        new intermediates, the fusions of an inlined op's inputs) is asked as
        ``question@r=((0,1),2)`` (``question@r=((0,1),2);inline=y,z``), so that a parameter
        name always has one set of options (Optuna requires it of a study)."""
        tag = ";".join([f"{stmt}={tree_text(t)}" for stmt, t in orders]
                       + ([f"inline={','.join(inlined)}"] if inlined else []))

        def ask(question: str, opts):
            if sub.meaning(question) != self.meaning(question):
                question = f"{question}@{tag}"
            return choose(question, opts)
        return ask

    # ---- online-softmax chains -----------------------------------------------------------
    def chain_blocks(self, anchor: str) -> list[int]:
        """Values of ``chain_block:ANCHOR``: powers of two below the walked extent, and one block
        over it all up to 256 (49 window tokens: 1.72 ms against 1.99 in blocks of 32)."""
        ext, pows = self.chains[anchor].extent, (16, 32, 64, 128, 256)
        return [b for b in pows if b < ext] + [b for b in pows if b >= ext >= 16][:1] or [ext]

    def ask_chains(self, choose: Choose) -> dict[str, Chain]:
        return {a: ch for a, ch in sorted(self.chains.items()) if choose(f"chain:{a}", [0, 1])}

    # ---- layouts -------------------------------------------------------------------------
    def layout_options(self, tensor: str) -> list[tuple[int, ...]]:
        rank = len(self.w.shapes[tensor])
        if self.identity_layouts or tensor in self.w.outputs or tensor in self.w.input_names \
                or rank < 2:
            return [tuple(range(rank))]
        ident = tuple(range(rank))
        if self.layout_mode == "all":
            if rank <= 4:
                return list(permutations(range(rank)))
            return [ident] + [tuple([d] + [x for x in ident if x != d]) for d in range(1, rank)]
        return self.auto_layouts.get(tensor, [ident])

    def _auto_layouts(self) -> dict[str, list[tuple[int, ...]]]:
        """Per tensor: the identity and the orders in which each contraction touching it sees
        a dense matrix stack (batch outermost; rows then cols, or cols then rows).  Arbitrary
        permutations mostly buy strided, cache-hostile walks; `layouts = "all"` allows them."""
        from .gemm import operand_groups
        out: dict[str, list[tuple[int, ...]]] = {}
        for op in self.w.ops:
            form = gemm_form(op)
            if form is None:
                continue
            ga, gb, go = operand_groups(form)
            for tensor, idx, grp in ((form.a.tensor, form.a.idx, ga),
                                     (form.b.tensor, form.b.idx, gb), (op.out, op.parallel, go)):
                opts = out.setdefault(tensor, [tuple(range(len(idx)))])
                orders = [(grp[0], grp[1], grp[2]), (grp[0], grp[2], grp[1])]
                if self._reduced_along(tensor, [idx.index(i) for i in grp[0]]):
                    # the batch between rows and cols: a reduction over the batch index then
                    # reads each row's batch items from one region, not one region per item
                    # (trimul's t[i,j,c] = sum_k a[i,k,c] b[j,k,c] normed over c: stored
                    # (c, i, j), the norm reads 128 regions a tile, 0.10-0.12 s; (i, c, j),
                    # 8 regions, 0.05-0.06 s; the kernel writes either at one speed)
                    orders += [(grp[1], grp[0], grp[2]), (grp[2], grp[0], grp[1])]
                for order in orders:
                    perm = tuple(idx.index(i) for g in order for i in g)
                    if perm not in opts:
                        opts.append(perm)
        # elementwise neighbours of a contraction operand may follow its layout
        changed = True
        while changed:
            changed = False
            for op in self.w.ops:
                if op.reduction:
                    continue
                same = [a.tensor for a in op.reads() if a.idx == op.parallel] + [op.out]
                union = [p for t in same for p in out.get(t, [])]
                for t in same:
                    for p in union:
                        if p not in out.setdefault(t, [tuple(range(len(op.parallel)))]):
                            out[t].append(p)
                            changed = True
        return out

    def _reduced_along(self, tensor: str, dims: list[int]) -> bool:
        """Whether an op that reads ``tensor`` reduces over the index it reads at one of the
        positions ``dims``."""
        for c in self.w.consumers.get(tensor, ()):
            op = self.w.op(c)
            for acc in op.reads():
                if acc.tensor == tensor and any(acc.idx[d] in op.reduction for d in dims):
                    return True
        return False

    # ---- building a candidate ------------------------------------------------------------
    def build(self, choose: Choose, name: str = "") -> Candidate:
        """Ask every decision through ``choose``; returns a legal candidate."""
        orders = self.ask_orders(choose)
        inlined = tuple(sorted(self.ask_inlines(choose, orders))) if self.rewrites else ()
        if orders or inlined:
            sub = self.variant(orders, inlined)
            return replace(sub.build(self._qualified(choose, sub, orders, inlined), name),
                           orders=orders, inlined=inlined)
        w = self.w
        chains = self.ask_chains(choose)
        # a chained group is exactly its chain: its members run as generated loops, and no
        # other edge touches them (the chain's own edges are forced below)
        inchain = {m for ch in chains.values() for m in ch.members}
        impl = {op.out: choose(f"impl:{op.out}", self.impl_options(op.out))
                for op in w.ops if op.is_contraction and op.out not in inchain}
        # a kernel contraction's epilogue and prologues next: its group is those, nothing else
        free = [e for e in self.edges if not set(e) & inchain]
        kernel_fused = ask_kernel_fusions(w, free, self.forbid, self.force, impl, choose)
        taken = {x for e in kernel_fused for x in e}
        outside = lambda e: impl.get(e[0]) not in STANDALONE_IMPLS and \
            impl.get(e[1]) not in STANDALONE_IMPLS and not taken & set(e) and \
            not inchain & set(e)
        wanted = []
        for p, c in self.edges:
            if (p, c) in self.forbid:
                continue
            if not outside((p, c)):
                continue  # a library GEMM, the kernel or a chain runs alone: no other fusion
            if (p, c) in self.force or choose(f"fuse:{p}->{c}", [0, 1]):
                wanted.append((p, c))
        forced = [e for ch in chains.values() for e in ch.edges] + [
            e for e in self.force if outside(e)]
        fused = repair(w, wanted, kernel_fused + forced)
        return self.finish(fused, impl, choose, name, tuple(chains))

    def impl_options(self, contraction: str) -> list[str]:
        """Values of ``impl:<contraction>``: a library GEMM and the kernel only where the
        contraction is GEMM-shaped."""
        return [i for i in self.impls
                if i not in STANDALONE_IMPLS or contraction in self.library_ok] or [IMPL_LOOP]

    def finish(self, fused: set, impl: dict, choose: Choose, name: str = "",
               chains: tuple[str, ...] = ()) -> Candidate:
        """Layouts and schedules for a fixed partition; ``chains``: the anchors of the groups
        that run as online-softmax chains (each group exactly its chain's members)."""
        w = self.w
        mats = materialized(w, fused)
        # stacks first: a stack fixes its members' layouts, so one answer turns it on
        stacks, layouts = [], {}
        for sib in self.siblings:
            members = stackable(w, sib, impl, self.layout_options)
            if members and choose(f"stack:{sib.anchor}", [0, 1]):
                if len(members) > 2:
                    # which of them join (all, by default): a stack of all five trimul
                    # projections is priced 5 % over four of them with the output gate alone
                    members = tuple(m for m in members
                                    if choose(f"stack:{sib.anchor}:{m}", [1, 0]))
                if len(members) >= 2:
                    stacks.append(members)
                    layouts.update((m, stack_layout(w, sib, m)) for m in members)
        for t in sorted(mats - set(layouts)):
            opts = self.layout_options(t)
            layouts[t] = opts[0] if len(opts) == 1 else tuple(
                opts[int(choose(f"layout:{t}", list(range(len(opts)))))])
        scheds = []
        for g in groups(w, fused):
            lone = len(g.members) == 1 and impl.get(g.anchor) in STANDALONE_IMPLS
            kern = [m for m in g.members if impl.get(m) == IMPL_KERNEL]
            if kern:        # alone, or with its epilogue (the group's anchor)
                params = kernel_params(self.kernel_bounds, w, kern[0], choose)
                prec = ""
                if self.kernel_bounds.gpu:
                    opts = self.kernel_precisions
                    prec = str(choose(f"kernel:{kern[0]}:precision", opts) if len(opts) > 1
                               else opts[0])
                scheds.append(GroupSchedule(g.anchor, tuple(w.op(g.anchor).out_shape),
                                            IMPL_KERNEL, params, precision=prec))
                continue
            if lone:
                pick = choose(f"precision:{g.anchor}", self.precisions) \
                    if len(self.precisions) > 1 else self.precisions[0]
                scheds.append(GroupSchedule(g.anchor, tuple(w.op(g.anchor).out_shape),
                                            IMPL_LIBRARY, precision="" if pick ==
                                            self.precisions[0] else str(pick)))
                continue
            tiles = tuple(int(choose(f"tile:{g.anchor}:{k}", opts))
                          for k, opts in enumerate(self.tile_options[g.anchor]))
            block = int(choose(f"chain_block:{g.anchor}", self.chain_blocks(g.anchor))) \
                if g.anchor in chains else 0
            scheds.append(GroupSchedule(g.anchor, tiles, IMPL_LOOP, chain_block=block))
        return make_candidate([f"{p}->{c}" for p, c in fused], layouts, scheds, name,
                              stacks=stacks)

    def random(self, rng) -> Candidate:
        """A uniformly drawn candidate (``rng``: numpy Generator)."""
        return self.build(lambda _n, opts: opts[int(rng.integers(len(opts)))])
