"""The search space's questions about the generated contraction kernel (the ``kernel`` impl).

A contraction run by the kernel is asked ``kernel:<contraction>:<name>`` for each of its
:class:`~search_spaces.kernel.KernelParams` (the register tile as an index into the machine's
tiles, the cache blocks, packing, the thread split, the loop order, streaming stores), among the
legal values :func:`~search_spaces.kernel.kernel_options` gives for this machine.  Block sizes are
listed for the default register tile; :func:`~search_spaces.kernel.legalize` rounds them to the
tile chosen, so :func:`kernel_answer` maps a value back onto the option that rounds to it.
A kernel contraction may also take an elementwise consumer as its epilogue and the elementwise
producers of its operands as prologues (:mod:`search_spaces.kernel_fusion`):
:func:`ask_kernel_fusions` asks those fusions.  Pure: no I/O.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .candidate import IMPL_KERNEL, Candidate, GroupSchedule
from .kernel_fusion import epilogue_of, pair_of, prologue_of
from .gemm import gemm_form, group_size
from .kernel import (KernelBounds, KernelParams, chosen_params, kernel_options,
                     question_options)
from .workload import Workload

Choose = Callable[[str, Sequence], object]


def _itemsize(w: Workload) -> int:
    return 4 if w.dtype == "float32" else 8


def _options(bounds: KernelBounds, w: Workload, contraction: str):
    op = w.op(contraction)
    form = gemm_form(op)
    return kernel_options(bounds, _itemsize(w), group_size(op, form.batch))


def kernel_question_options(bounds: KernelBounds, w: Workload, contraction: str
                            ) -> dict[str, list]:
    """The options of every ``kernel:<contraction>:<name>`` question, by name, in the order
    :func:`kernel_params` asks them."""
    return question_options(_options(bounds, w, contraction))


def kernel_params(bounds: KernelBounds, w: Workload, contraction: str,
                  choose: Choose) -> KernelParams:
    """The kernel's parameters for ``contraction``, each asked through ``choose``."""
    return chosen_params(_options(bounds, w, contraction),
                         lambda name, vals: choose(f"kernel:{contraction}:{name}", vals),
                         _itemsize(w))


def kernel_answer(k: KernelParams | None, what: str, bounds: KernelBounds, w: Workload,
                  opts: Sequence):
    """The option of question ``kernel:<contraction>:<what>`` that yields ``k``'s value (the
    first option for a schedule without parameters)."""
    if k is None:
        return opts[0]
    if what == "tile":
        tiles = kernel_options(bounds, _itemsize(w), 1).tiles
        return tiles.index((k.mr, k.nr)) if (k.mr, k.nr) in tiles else opts[0]
    if what in ("mc", "nc"):
        unit, want = (k.mr, k.mc) if what == "mc" else (k.nr, k.nc)
        return next((o for o in opts if max(unit, o // unit * unit) == want), opts[0])
    if what in ("pack_a", "pack_b", "stream"):
        return int(getattr(k, what))
    return getattr(k, what)


def ask_kernel_fusions(w: Workload, edges, forbid, force, impl: dict[str, str],
                       choose: Choose) -> list[tuple[str, str]]:
    """The fused edges of kernel groups (:mod:`search_spaces.kernel_fusion`): ``fuse:p->c``
    asked (or forced) for every kernel contraction ``p`` and consumer ``c`` that may be its
    epilogue, and with it ``pair:p2->c`` for every other kernel contraction ``p2`` that may
    join ``p`` as a pair (:func:`~search_spaces.kernel_fusion.pair_of`: a question of its own,
    so that turning the epilogue on opens it, and a search that judges a change with the
    questions it opens sees the pair); then ``fuse:q->p`` for
    every producer ``q`` that may be the prologue of a contraction in no pair.  An op joins
    one kernel group at most (the first edge in edge order that says yes), and none where a
    forced edge outside the group touches it (the loop fusion it asks for wins)."""
    out: list[tuple[str, str]] = []
    taken: set[str] = set()
    paired: set[str] = set()
    outside_force = lambda x, e: any(x in f and f != e for f in force)
    for epilogue in (True, False):
        for p, c in edges:
            kern, other = (p, c) if epilogue else (c, p)
            if impl.get(kern) != IMPL_KERNEL or (p, c) in forbid or other in taken \
                    or kern in paired or outside_force(other, (p, c)):
                continue
            if (epilogue_of(w, p, c) if epilogue else prologue_of(w, p, c)) is None:
                continue
            if (p, c) in force or choose(f"fuse:{p}->{c}", [0, 1]):
                out.append((p, c))
                taken.add(other)
                if epilogue:
                    pair = _ask_pair(w, p, c, edges, forbid, force, impl, taken,
                                     outside_force, choose)
                    if pair:
                        out.append((pair, c))
                        taken.add(pair)
                        paired.update((p, pair))
    return out


def _ask_pair(w, p, c, edges, forbid, force, impl, taken, outside_force, choose) -> str:
    """The second contraction of a pair with ``p`` under epilogue ``c`` ("" for none): each
    legal one asked ``pair:p2->c`` in edge order until one says yes (a forced ``p2->c``
    needs no asking)."""
    for p2, c2 in edges:
        if c2 != c or p2 in taken or impl.get(p2) != IMPL_KERNEL or (p2, c) in forbid \
                or outside_force(p2, (p2, c)) \
                or pair_of(w, *_in_read_order(w, p, p2, c), c) is None:   # (None for p2 = p)
            continue
        if (p2, c) in force or choose(f"pair:{p2}->{c}", [0, 1]):
            return p2
    return ""


def _in_read_order(w, p, p2, c) -> tuple[str, str]:
    """``p`` and ``p2`` in the order ``c`` first reads them (the order kernel_parts pairs)."""
    order = w.op(c).inputs()
    return (p, p2) if order.index(p) < order.index(p2) else (p2, p)


def kernel_schedule(cand: Candidate, contraction: str) -> GroupSchedule | None:
    """The schedule of the group that runs ``contraction``: its own (alone or with prologues),
    or that of the consumer fused into it as an epilogue (None where it is fused deeper,
    into a loop group)."""
    for s in cand.schedules:
        if s.anchor == contraction or f"{contraction}->{s.anchor}" in cand.fused:
            return s
    return None
