"""Whether a generated statement's innermost loop walks a stride: the CPU code generator
(:mod:`.codegen`) leaves ``omp simd`` off an update (``+=``, ``max=``) that does."""
from __future__ import annotations

from typing import Callable

from search_spaces.ir import Op, accesses


def walks_a_stride(op: Op, inner: str, stride_of: Callable[[str, int], int],
                   inlined: frozenset[str], op_of: Callable[[str], Op]) -> bool:
    """Whether ``op``'s statement, its target and every access (those of the members in
    ``inlined`` included, evaluated inside it), walks a stride along ``inner``, its innermost
    loop.  ``stride_of(tensor, dim)``: the element stride of ``tensor``'s dim in the buffer the
    statement reads or writes (a tile buffer's or the layout's in memory); ``op_of(name)``: the
    op that makes an inlined member.

    Why it matters: an update whose innermost loop gathers is left to GCC's own judgement,
    without ``omp simd``: forced to vectorise, GCC 12 assembled each vector from strided
    scalars and stalled on it.  attention's q[h,s,d] += x[s,c] * w_q[c,h,d] walked s innermost
    (x gathered, 1 KiB apart): 83 ms a call with the pragma, 2.5 ms without (GCC's scalar
    code, unrolled); triangle_attention_starting's qh 1.50 s and 0.16 s.  Over the groups of
    the built-ins' model-check candidates this changes, eight ran 3.7-33x faster and the rest
    within noise (2 cores, AVX-512; bench/results/cpu-s37-9b7e75f).  Left alone elsewhere:
    assignments that gather ran up to 2.6x slower without the pragma (pair_transition's layer
    norm), and a private row's update (codegen's _private_reduction) went either way (0.7x
    and 1.3x)."""
    def walk(e, names: dict[str, str]) -> bool:
        for acc in accesses(e):
            idx = tuple(names.get(i, i) for i in acc.idx)
            if acc.tensor in inlined:
                src = op_of(acc.tensor)
                if walk(src.expr, dict(zip(src.parallel, idx))):
                    return True
            elif inner in idx and stride_of(acc.tensor, idx.index(inner)) not in (0, 1):
                return True
        return False
    own = inner in op.parallel and stride_of(op.out, op.parallel.index(inner)) not in (0, 1)
    return own or walk(op.expr, {})
