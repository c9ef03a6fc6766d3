"""Sibling contractions, and when a candidate may run them stacked as one library GEMM.

Siblings are GEMM-shaped contractions that read one operand the same way (the *shared* one)
and differ only in the other, an input of the program (a weight): trimul's five projections of
``xn`` (pa, ga, pb, gb, go), attention's q, k and v, a gated MLP's gate and up.  Stacked, they
run as one GEMM over the differing operands side by side.  Why it pays (2 cores, OpenBLAS, one
process, interleaved): five M=65536, K=128, N=128 projections took 81.8 ms one by one and 65.7 ms
as one N=640 GEMM, BLAS packing the shared operand once instead of five times; at gated_mlp's
512x256 by two 256x1024 the stacked (transposed) form ran 2.94 ms against 3.07 ms, and its plain
form 3.24 ms: a choice for the search, not a rule.

A stack is copy-free on its results: each member stores its result with the free dims of its own
(differing) operand outermost (D) and the shared operand's inside (S), so it is a contiguous
(D, S) matrix, and the members' matrices one after the other in one buffer are the (sum D, S)
result of X (sum D, K) @ Y (K, S): X the differing operands stacked (copied on each call: they
are weights, small beside the shared operand), Y the shared operand as it is stored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .candidate import IMPL_LIBRARY
from .gemm import GemmForm, gemm_form, group_size
from .workload import Workload


@dataclass(frozen=True)
class Siblings:
    """Contractions (``members``, in program order) sharing the gemm form's operand ``shared``
    ("a" or "b")."""
    members: tuple[str, ...]
    shared: str

    @property
    def anchor(self) -> str:
        """The member that names the stack's question (``stack:ANCHOR``) and runs the GEMM."""
        return self.members[0]


def sibling_sets(w: Workload) -> tuple[Siblings, ...]:
    """Every set of two or more siblings of ``w``; a contraction belongs to one set at most
    (the first it is found in).  Outputs of the program are never members (they are fresh
    arrays of their own), nor batched contractions."""
    inputs = set(w.input_names)
    found: dict[tuple, list[str]] = {}
    for op in w.ops:
        form = gemm_form(op)
        if form is None or form.batch or op.out in w.outputs:
            continue
        for side in ("a", "b"):
            shared, other = (form.a, form.b) if side == "a" else (form.b, form.a)
            if other.tensor not in inputs or other.tensor == shared.tensor:
                continue
            key = (side, shared.tensor, shared.idx, other.idx, op.parallel, op.reduction,
                   op.extents, form.m, form.n, form.k, form.scale)
            found.setdefault(key, []).append(op.out)
    taken: set[str] = set()
    out = []
    for key, members in found.items():
        free = [m for m in members if m not in taken]
        if len(free) >= 2:
            out.append(Siblings(tuple(free), key[0]))
            taken.update(free)
    return tuple(out)


def free_groups(form: GemmForm, shared: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(D, S): the result's dims that come from the differing operand, then the shared one's."""
    return (form.n, form.m) if shared == "a" else (form.m, form.n)


def stack_extents(w: Workload, sib: Siblings, member: str) -> tuple[int, int, int]:
    """(D, S, K): the sizes of one member's result rows, result columns and contraction, as
    the stacked GEMM ``(n D, K) @ (K, S)`` sees them."""
    op = w.op(member)
    form = gemm_form(op)
    d, s = free_groups(form, sib.shared)
    return tuple(group_size(op, g) for g in (d, s, form.k))  # type: ignore[return-value]


def stack_layout(w: Workload, sib: Siblings, member: str) -> tuple[int, ...]:
    """The storage order a member's result needs in a stack: D's dims, then S's, each in the
    result's own order."""
    op = w.op(member)
    d, s = free_groups(gemm_form(op), sib.shared)
    return tuple(op.parallel.index(i) for i in d + s)


def stackable(w: Workload, sib: Siblings, impl: dict[str, str],
              offered: Callable[[str], list[tuple[int, ...]]]) -> tuple[str, ...]:
    """The members of ``sib`` a candidate with these impls can stack: the library GEMMs whose
    :func:`stack_layout` is among the layouts ``offered`` for them (empty when fewer than two
    are).  Stacking them stores each in that layout."""
    ok = tuple(m for m in sib.members
               if impl.get(m) == IMPL_LIBRARY and stack_layout(w, sib, m) in offered(m))
    return ok if len(ok) >= 2 else ()


def stack_of(w: Workload, members: tuple[str, ...]) -> Siblings:
    """The sibling set a candidate's stack ``members`` came from (ValueError if none: a plan
    stacking contractions that are not siblings is not one this version builds)."""
    for sib in sibling_sets(w):
        if set(members) <= set(sib.members) and len(members) >= 2:
            return sib
    raise ValueError(f"{', '.join(members)} are not sibling contractions of {w.name!r}")


def checked_stack(w: Workload, members: tuple[str, ...], impl: dict[str, str],
                  layout_of: Callable[[str], tuple[int, ...]]) -> Siblings:
    """:func:`stack_of`, after checking that the candidate can run the stack as it says:
    in program order, each member a library GEMM stored in :func:`stack_layout` (ValueError
    naming the member otherwise: a hand-edited plan, not one a space builds)."""
    sib = stack_of(w, members)
    if tuple(m for m in sib.members if m in members) != tuple(members):
        raise ValueError(f"stack {', '.join(members)}: members out of program order")
    for m in members:
        if impl.get(m) != IMPL_LIBRARY:
            raise ValueError(f"stack {', '.join(members)}: {m!r} is not a library GEMM")
        if layout_of(m) != stack_layout(w, sib, m):
            raise ValueError(f"stack {', '.join(members)}: {m!r} is stored in "
                             f"{list(layout_of(m))}, the stack needs "
                             f"{list(stack_layout(w, sib, m))}")
    return sib


def member_offsets(w: Workload, members: tuple[str, ...]) -> dict[str, int]:
    """Each member's first element in its stack's one buffer (the members one after the other,
    in stack order)."""
    out, at = {}, 0
    for m in members:
        out[m] = at
        at += math.prod(w.shapes[m])
    return out
