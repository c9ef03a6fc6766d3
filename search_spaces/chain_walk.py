"""Which loop of a chain group's small contractions goes innermost (search_spaces.chain).

Per row and block, a chain evaluates its score ops (a reduction over their own index, e.g. the
head dim) and its contraction's update of the accumulators (over the tile's free points), each
for every point of the block of the walked index.  The walk goes innermost when memory is
contiguous along it and strided along the op's own innermost index; otherwise the op's index
does.  Measured on the 2-core development machine, attention at S=256 as standalone C: v stored
[h][d][j] made the accumulator update over d gather at a stride of S, 89 ms for the chain
group where j innermost runs 6 ms; q and k stored [h][d][i|j]: 23 -> 8 ms.  The code generator
(autotune.backends.chain_loops) and the cost model (costmodel.chain_cost) both ask here.
"""
from __future__ import annotations

from .chain import WALKED, Chain
from .footprint import strides
from .workload import Workload


def walks_strided(w: Workload, chain: Chain, name: str, common: str, layout_of) -> bool:
    """Whether op ``name`` reads a tensor from memory with a stride along the index the chain
    calls ``common`` (``layout_of(tensor) -> perm``)."""
    idx = [i for i, c in chain.common(name).items() if c == common]
    for a in w.op(name).reads():
        if not idx or idx[0] not in a.idx or a.tensor in chain.members:
            continue
        if strides(w.shapes[a.tensor], layout_of(a.tensor))[a.idx.index(idx[0])] != 1:
            return True
    return False


def walk_innermost(w: Workload, chain: Chain, name: str, common: str, layout_of) -> bool:
    """Whether op ``name``'s loop over a block of the walk goes inside its loop over
    ``common``: memory contiguous along the walk, strided along ``common``."""
    return (walks_strided(w, chain, name, common, layout_of)
            and not walks_strided(w, chain, name, WALKED, layout_of))
