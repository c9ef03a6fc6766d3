"""C that copies a group's input into another storage order before the group runs: a CPU
chain's keys strided along its walk, copied with the walk innermost
(search_spaces.chain_walk.repacked) so that its scores run the walk in vector registers."""
from __future__ import annotations

import math

from search_spaces.footprint import strides

from autotune.backends.buffers import ALIGN


def repack_code(shapes: dict, repack: dict[str, tuple[int, ...]], layout_of,
                ctype: str) -> list[str]:
    """Lines of a group function's prologue: each ``repack`` input (tensor -> new storage
    order) copied from its argument ``A_t`` (stored in ``layout_of(t)``) into ``P_t``, by all
    threads, written contiguously; the group then reads it as ``G_t`` (and frees ``P_t`` at
    its end).  A parallel loop nest of its own, before the group's parallel region."""
    out = []
    for t, perm in repack.items():
        shape = shapes[t]
        old, new = strides(shape, layout_of(t)), strides(shape, perm)
        n = math.prod(shape)
        out.append(f"  {ctype} *restrict P_{t} = ({ctype} *)aligned_alloc({ALIGN}, "
                   f"(sizeof({ctype}) * {n}L + {ALIGN - 1}) / {ALIGN} * {ALIGN});")
        if len(perm) > 1:
            par = f" collapse({min(2, len(perm) - 1)})" if len(perm) > 2 else ""
            out.append(f"  #pragma omp parallel for{par}")
        for k, d in enumerate(perm):
            out.append(f"  {'  ' * k}for (long p{d} = 0; p{d} < {shape[d]}L; p{d}++)")
        src = " + ".join(f"p{d}*{old[d]}L" for d in range(len(shape)))
        dst = " + ".join(f"p{d}*{new[d]}L" for d in range(len(shape)))
        out.append(f"  {'  ' * len(perm)}P_{t}[{dst}] = A_{t}[{src}];")
        out.append(f"  const {ctype} *restrict G_{t} = P_{t};")
    return out
