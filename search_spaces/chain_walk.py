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
from .ir import Access, Binary, Const, Expr, Unary, accesses
from .footprint import strides
from .workload import Workload


def walks_strided(w: Workload, chain: Chain, name: str, common: str, layout_of,
                  at_least: int = 2) -> bool:
    """Whether op ``name`` reads a tensor from memory with a stride of ``at_least`` elements or
    more along the index the chain calls ``common`` (``layout_of(tensor) -> perm``)."""
    idx = [i for i, c in chain.common(name).items() if c == common]
    for a in w.op(name).reads():
        if not idx or idx[0] not in a.idx or a.tensor in chain.members:
            continue
        if strides(w.shapes[a.tensor], layout_of(a.tensor))[a.idx.index(idx[0])] >= at_least:
            return True
    return False


def walk_innermost(w: Workload, chain: Chain, name: str, common: str, layout_of) -> bool:
    """Whether op ``name``'s loop over a block of the walk goes inside its loop over
    ``common``: memory contiguous along the walk, strided along ``common``."""
    return (walks_strided(w, chain, name, common, layout_of)
            and not walks_strided(w, chain, name, WALKED, layout_of))


def shared_rows(w: Workload, chain: Chain) -> list[str]:
    """The chain's row dims (common names) that no walked operand reads: rows that differ only
    there read the same keys and values (attention's query rows i, not its heads h), so a tile
    can run several of them over one load of each block."""
    rows = [c for c in chain.common(chain.anchor).values() if c.startswith("r")]
    walked: set[str] = set()
    for name in chain.members:
        names = chain.common(name)
        for a in w.op(name).reads():
            if a.tensor in chain.members:
                continue
            used = {names[i] for i in a.idx}
            if WALKED in used:
                walked |= used
    return [c for c in rows if c not in walked]


# past this many accumulators a row, a step of 4 rows' vectors spill (row_step's measurements)
SPILL_ACC = 96


def row_step(w: Workload, chain: Chain, extents: dict[str, int], acc: int,
             vector_bytes: int = 64) -> tuple[str, int]:
    """(row dim, rows) a CPU chain tile advances at once: the shared row with most points in
    the tile (``extents``: common name -> the tile's extent), 8 rows while a row's accumulators
    (``acc`` values) fit two AVX-512 registers, 6 while they fit four (24 of the 32 registers
    then hold them), 4 beyond, none where no row is shared or the tile holds one.  Why 8:
    attention's chain (S=256, H=8, D=32, blocks of 64) as standalone C ran 0.27 ms at 4 rows
    and 0.23 ms at 8, 16 spilled (0.47 ms); one row at a time, the generated group ran 1.19 ms
    (2-core AVX-512 host, scratch prototype).  Why 6: grouped-query attention (D=64, 64
    accumulators a row), its chained plan at 2 / 4 / 6 / 8 rows: 5.07 / 4.81 / 3.83 / 4.30 ms
    (one process, 7 interleaved rounds; 8 rows hold 32 accumulator registers and spill).  With
    narrower vectors (``vector_bytes``: AVX2's 32, 16 registers) 4 rows at 64 accumulators:
    the same plan compiled for AVX2 ran 4.32 / 6.00 / 5.57 ms at 4 / 6 / 8 rows.  Past 64
    the accumulators spill, yet a step's local arrays beat a buffer (vector_update): kernel
    ridge regression's chain (rbf_krr) at 80 accumulators 6.60 / 4.16 / 3.22 / 2.88 ms at
    1 / 2 / 4 / 6 rows, at 128 9.05 / 6.33 / 5.18 / 5.74, at 256 15.1 / 15.4 / 9.41 / 10.2
    (5.03, 8.74, 13.0 ms buffered); so 6 rows to 96, 4 beyond.  (The cost model prices the
    wide machine's step; the step changes its price little.)"""
    rows = [c for c in shared_rows(w, chain) if extents.get(c, 1) > 1]
    if not rows:
        return "", 1
    dim = max(rows, key=lambda c: extents[c])
    wide = 6 if vector_bytes >= 64 else 4
    return dim, min(8 if acc <= 32 else wide if acc <= SPILL_ACC else 4, extents[dim])


def _along(e: Expr, names: dict[str, str], common: str) -> bool:
    return any(common in (names[i] for i in a.idx) for a in accesses(e))


def vectorisable(e: Expr, names: dict[str, str], common: str) -> bool:
    """Whether ``e`` (an op's expression, ``names`` its index -> common name) can run on
    vectors along ``common``: arithmetic over accesses and constants; a function or a where()
    of a value that varies along it cannot."""
    if isinstance(e, (Const, Access)):
        return True
    if isinstance(e, Unary):
        return vectorisable(e.x, names, common)
    if isinstance(e, Binary):
        return vectorisable(e.a, names, common) and vectorisable(e.b, names, common)
    return not _along(e, names, common)


def vector_score(w: Workload, chain: Chain, name: str, block: int, layout_of) -> bool:
    """Whether score op ``name`` sums over its own index into vector registers, a vector of
    the walk at a time (autotune.backends.chain_vectors.ChainVectors.vector_score): a
    reduction with the walk innermost, arithmetic only, blocks of whole vectors that divide the
    walk (a vector never reads past its end)."""
    op = w.op(name)
    if not op.reduction or block % 16 or chain.extent % block:
        return False
    names = chain.common(name)
    return (walk_innermost(w, chain, name, names[op.reduction[-1]], layout_of)
            and vectorisable(op.expr, names, WALKED))


VECTOR_ACC = 256


def vector_update(w: Workload, chain: Chain, free: list[str], acc: int, extent: int,
                  layout_of) -> bool:
    """Whether the contraction's accumulators (``free``: its free dims' common names, ``acc``
    per row of a tile, ``extent`` the free dim's) stay in vector registers over a block
    (ChainVectors.vector_update): one free dim, contiguous in memory, whole vectors in tiles
    that divide it, at most VECTOR_ACC values a row (past 64 they spill, still faster than a
    buffer: row_step's measurements)."""
    if not chain.contraction or len(free) != 1 or acc % 16 or acc > VECTOR_ACC or extent % acc:
        return False
    inner, _ = chain.contraction_parts(w.op(chain.contraction))
    return (vectorisable(inner, chain.common(chain.contraction), free[0])
            and not walks_strided(w, chain, chain.contraction, free[0], layout_of))


# A group of steps' running values (max, sum and accumulators of each row) stay in the first
# cache level while every block of the walk serves all of its steps: the keys and values are
# then read once per group, not once per step.  Attention at S=2048 (causal, H=8, D=32): a
# head's keys and values are 512 KB, read from the last-level cache once per 8 rows, and its
# chain ran 58 GFLOP/s one step at a time.
STATE_BYTES = 16 * 1024


def step_group(rows: int, acc: int, tile_rows: int, item: int) -> int:
    """Steps of ``rows`` rows a CPU chain tile walks each block for in turn: as many as the
    tile's ``tile_rows`` hold, their running values (``acc`` accumulators and two more a row,
    ``item`` bytes each) within STATE_BYTES."""
    fit = max(1, STATE_BYTES // (rows * (acc + 2) * item))
    return max(1, min(fit, -(-tile_rows // rows)))


def repacked(w: Workload, chain: Chain, layout_of, block: int) -> dict[str, tuple[int, ...]]:
    """Inputs of the program a CPU chain copies, once per call, into a layout with the walk
    innermost (tensor -> that storage order: its other dims in their own order, then the
    walked one): those read only by score ops, along the walk with a stride.  A key stored
    [j, g, d] (grouped-query attention's, or any model's keys as they come) makes each score
    a dot product over d, summed across the vector and stored one by one; the copy [g, d, j]
    lets the score run the walk in vector registers (vector_score), as an intermediate's
    layout chosen by the search does.  GQA (G=2, R=4, S=512, D=64), the chained plan: 5.5 ms
    one dot product at a time (2-core AVX-512 host).  Only where every score reading the copy
    then runs the walk in vectors at blocks of ``block`` (vector_score): a dot product over a
    copy strided along its own index is slower still (float64 attention, S=300, no block
    dividing the walk: 0.42 -> 0.61 ms)."""
    inputs = set(w.input_names)
    readers: dict[str, set[str]] = {}
    for name in chain.members:
        for a in w.op(name).reads():
            readers.setdefault(a.tensor, set()).add(name)
    out = {}
    for name in chain.scores:
        op = w.op(name)
        names = chain.common(name)
        for a in op.reads():
            if a.tensor not in inputs or not readers[a.tensor] <= set(chain.scores) \
                    or len(set(a.idx)) != len(a.idx):
                continue
            walk = [k for k, i in enumerate(a.idx) if names[i] == WALKED]
            perm = tuple(layout_of(a.tensor))
            if walk and strides(w.shapes[a.tensor], perm)[walk[0]] != 1:
                out[a.tensor] = tuple(d for d in perm if d != walk[0]) + (walk[0],)
    lay = _overlaid(layout_of, out)
    if not all(vector_score(w, chain, name, block, lay) for name in chain.scores
               if out.keys() & {a.tensor for a in w.op(name).reads()}):
        return {}
    return out


def _overlaid(layout_of, packed: dict[str, tuple[int, ...]]):
    return lambda t: packed[t] if t in packed else layout_of(t)


def repacked_layouts(w: Workload, chain: Chain, layout_of, block: int):
    """``layout_of`` with the :func:`repacked` inputs in their copies' order (what the chain's
    code reads, and what its price walks), and those inputs."""
    packed = repacked(w, chain, layout_of, block)
    return _overlaid(layout_of, packed), packed
