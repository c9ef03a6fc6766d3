"""The cost of an online-softmax chain group (search_spaces.chain): one pass over blocks of the
walked index per row, nothing but the group's inputs and final values in memory.

Compared with the same ops fused as an ordinary group, the scores and exponentials never reach
a buffer the size of a row (nor memory, unfused): what the walk saves is their bytes.  What it
adds is the rescale: per row and block one exponential, a compare and a multiply per running
value and accumulator.  The row part (scores, max, exponentials, sum) is recomputed once per
tile of the contraction's free dims, like any producer fused under a tiled consumer.
"""
from __future__ import annotations

import math

from search_spaces.chain import WALKED, Chain
from search_spaces.chain_walk import (SPILL_ACC, repacked_layouts, row_step, vector_score,
                                     vector_update, walk_innermost, walks_strided)
from search_spaces.footprint import tile_dealing, tile_sizes
from search_spaces.tile_work import dealt_share, masked_chain_work

from .devices import DeviceSpec
from .kernel_cost import peak_flops
from .estimate import FusedProducer, GroupCost
from .rates import (LINE_ELEMS, copy_waste, far_regions, line_waste, loop_launch_s,
                    loop_occupancy, read_waste, reduction_gain, regions_waste, tile_overhead_s,
                    transcendental_weight)


def _row_acc(chain: Chain, anchor, tiles) -> tuple[dict[str, int], int]:
    """(the tile's extent per common name, the accumulators of one row of the tile)."""
    common = chain.common(anchor.out)
    eff = tile_sizes(anchor, tiles)
    box = {common[i]: e for i, e in zip(anchor.parallel, eff)}
    return box, math.prod(e for c, e in box.items() if c.startswith("x"))


def cpu_rows(w, chain: Chain, anchor, tiles) -> int:
    """Rows a CPU chain tile advances at once (search_spaces.chain_walk.row_step)."""
    box, acc = _row_acc(chain, anchor, tiles)
    return row_step(w, chain, box, acc)[1]


def chain_buffer_elems(chain: Chain, block: int, anchor, tiles, rows: int = 1) -> int:
    """Elements of one thread's buffers: per row of a step (``rows``), a block per score op,
    the block's scores and exponentials, and the row's accumulators."""
    return rows * (block * (len(chain.scores) + 2) + _row_acc(chain, anchor, tiles)[1])


def _lanes(w, chain: Chain, name: str, block: int, box: dict, layout_of,
           dev: DeviceSpec) -> float:
    """The share of the vector lanes op ``name``'s innermost loop fills: a score's reduction or
    the accumulators' update runs the walk's block or its own index innermost
    (search_spaces.chain_walk); an index shorter than the vector width fills part of it, a
    strided walk runs scalar (as in an ordinary loop group).  Other members walk the block's
    buffers."""
    op = w.op(name)
    if name == chain.contraction:
        cm = chain.common(chain.anchor)     # the tile's free dims, as the loops nest them
        free = [cm[i] for i in w.op(chain.anchor).parallel if cm[i].startswith("x")]
        if not free:
            return 1.0
        inner, ext = free[-1], box[free[-1]]
    elif name in chain.scores and op.reduction:
        inner = chain.common(name)[op.reduction[-1]]
        ext = op.extent(op.reduction[-1])
    else:
        return 1.0
    if walk_innermost(w, chain, name, inner, layout_of):
        return min(1.0, block / dev.vector_width)
    vec = min(1.0, ext / dev.vector_width)
    strided = walks_strided(w, chain, name, inner, layout_of)
    if strided:
        vec = min(vec, 1.0 / dev.vector_width)
    # a score summing over its own index innermost: a register's running sum, as in a loop
    return vec * reduction_gain(dev, strided) if name != chain.contraction else vec


# The share of the FMA peak a chain's products reach with their sums in vector registers and
# four or more rows a step: attention's chain (S=256, H=8, D=32, blocks of 64 and 128, 8 rows,
# both products in registers; 67 MFLOP and 0.5 M exponentials) ran 0.28-0.32 ms in its plan
# (2-core AVX-512 host, 474 GFLOP/s peak), of which the model gives the softmax's part
# 0.11 ms: the products' 0.18-0.20 ms are 0.7-0.8 of the peak.
VECTOR_EFFICIENCY = 0.7


# Seconds of one CPU thread per row, block of the walk and member: the member's short loop over the
# block started and finished (its bounds, the vector remainder, a max's or a sum's horizontal
# reduction), which the rates of its points leave out.  Fitted on the model-check databases of
# the attention family (cpu-s37-9b7e75f; 2-core AVX-512 host): msa_row_attention's chains at
# blocks of 16 had been priced 1.6x too cheap (mean log error +0.50, three tiles) and at 128
# 1.8x too dear (-0.58, four tiles).  The analytic rank correlation (corrected) of the five
# re-scored, at 0 / 2 / 3 / 4 / 6 ns: attention 0.836 (0.881) / 0.833 (0.886) / 0.832 (0.893)
# / 0.833 (0.888) / 0.831 (0.897); causal_attention 0.806 (0.849) / 0.808 (0.859) / 0.819
# (0.865) / 0.815 (0.866) / 0.811 (0.856); msa_row_attention 0.710 (0.672) / 0.747 (0.783) /
# 0.741 (0.790) / 0.746 (0.783) / 0.745 (0.795); triangle_attention_starting 0.689 (0.731) /
# 0.694 (0.749) / 0.699 (0.747) / 0.707 (0.736) / 0.721 (0.687); triangle_attention_ending
# 0.815 (0.773) / 0.834 (0.786) / 0.836 (0.790) / 0.835 (0.790) / 0.838 (0.791).  The
# corrected top-1 regret at 3 ns: attention 15.2 % -> 0 %, msa_row_attention 0 % -> 12.1 %.
BLOCK_LOOP_S = 3e-9


# The share of the FMA peak a CPU chain's update of its accumulators reaches where they stay in
# a buffer, not a step's vectors (not whole vectors a row: search_spaces.chain_walk.
# vector_update), vectorised along a contiguous free dim: a load and a store of the buffer per
# multiply-add, all in the first cache level.  Kernel ridge regression's chain (rbf_krr, N=2048,
# M=1024, D=32) updating a buffer of C = 80 / 128 / 256 accumulators a row: 68 / 84 / 84 GFLOP/s
# beyond the scores' time (2-core AVX-512 host, 234 GFLOP/s peak), where the loop rate priced
# it at 31 and the whole plan 2.1-2.6x too dear (those C now run in vectors, 1.4-1.7x faster).
BUFFER_UPDATE_EFFICIENCY = 0.33


# Past SPILL_ACC accumulators a row (4 rows a step: search_spaces.chain_walk.row_step) a
# step's vectors spill: rbf_krr's update at 128 and 256 a row ran 0.55 of the peak, at 64 and
# 80 0.74 (plain/rows_scan.txt of bench/results/unseen14-d70e631), against VECTOR_EFFICIENCY's
# 0.7.
SPILLED_SHARE = 0.78


def vector_rate(dev: DeviceSpec, item: int, step: int) -> float:
    """Flop rate of a chain product held in vector registers, ``step`` rows at a time (fewer
    than 4 rows reload the walked operand's vectors for every one or two multiply-adds)."""
    return peak_flops(dev, item) * VECTOR_EFFICIENCY * min(1.0, step / 4)


def _vector_members(w, chain: Chain, block: int, box, ext, acc: int, layout_of,
                    dev: DeviceSpec) -> tuple[set[str], int]:
    """(the members whose products run in vector registers, rows a step) on a CPU
    (autotune.backends.chain_loops); none on a GPU, whose chain runs a row a thread."""
    if dev.kind != "cpu":
        return set(), 1
    step = row_step(w, chain, box, acc)[1]
    vec = {n for n in chain.scores if vector_score(w, chain, n, block, layout_of)}
    free = [c for c in chain.common(chain.anchor).values() if c.startswith("x")]
    if vector_update(w, chain, free, acc, ext.get(free[0], 0) if free else 0, layout_of):
        vec.add(chain.contraction)
    return vec, step


def _row_slice(names: dict, op, a, box: dict[str, int]) -> tuple[int, ...]:
    """Extents of the read ``a`` of member ``op`` (``names``: its indices' common names) that
    one row of a tile reads: 1 along the rows, the tile's extent (or the op's whole extent: the
    walk, its own reduction) along the rest."""
    return tuple(1 if names[i].startswith("r") else box.get(names[i], op.extent(i))
                 for i in a.idx)


def row_refetch(w, chain: Chain, box: dict[str, int], item: int, cap: float) -> dict[str, float]:
    """Per tensor the chain reads (an input of a member): how many times a tile reads each of
    the elements it reads.  The tile runs its rows in the anchor's order (chain_loops'
    ``rows_open``) and each row reads its slice of every input (the whole walk, the tile's
    extent along the input's other dims); a row loop's next iteration finds the slices of the
    previous one still in the private cache (``cap`` bytes) only where everything the rows
    inside it read in between fits there.  Triangle attention around the ending node reads
    its keys kh[h,k,j,d] per (h, j), 32 KiB a row, and a slice of its values: a tile of 8 x 64
    x 2 rows (i, j, h) reads over 4 MiB of them before its next i comes back to the first, so
    it reads them once per i; its chain ran 3.2 s where 1.3 s was predicted without these
    reads (the 2-core AVX-512 host, model-check cpu-s37-9b7e75f)."""
    common = chain.common(chain.anchor)
    rows = [common[i] for i in w.op(chain.anchor).parallel if common[i].startswith("r")]
    reads: dict[str, tuple[set[str], float]] = {}
    for name in chain.members:
        names, op = chain.common(name), w.op(name)
        for a in op.reads():
            if a.tensor in chain.members or a.tensor in reads:
                continue
            reads[a.tensor] = ({names[i] for i in a.idx},
                               math.prod(_row_slice(names, op, a, box)) * item)
    out = {}
    for t, (dims, _) in reads.items():
        times = 1.0
        for lvl, r in enumerate(rows):
            if r in dims:
                continue
            between = sum(b * math.prod(box.get(q, 1) for q in rows[lvl + 1:] if q in d)
                          for d, b in reads.values())
            if between > cap:
                times *= box.get(r, 1)
        out[t] = times
    return out


def _read_waste(shape, perm, box, item: int, dev: DeviceSpec) -> float:
    """Time factor of reading ``box`` of a tensor stored in ``perm`` order: runs shorter than
    a line and far-apart regions, priced as in a loop group."""
    return read_waste(line_waste(shape, perm, box), dev) \
        * regions_waste(far_regions(shape, perm, box, item), dev)


def chain_group(w, chain: Chain, block: int, tiles, layout_of, mats, dev: DeviceSpec,
                item: int) -> GroupCost:
    anchor = w.op(chain.anchor)
    common = chain.common(chain.anchor)
    packed: dict = {}
    if dev.kind == "cpu":
        # the CPU code reads these inputs from a copy with the walk innermost, made by a
        # transposing pass of its own before the walk
        layout_of, packed = repacked_layouts(w, chain, layout_of, block)
    pack_s = sum(2 * math.prod(w.shapes[t]) * item * copy_waste(1, dev)
                 for t in packed) / dev.bandwidth
    eff = tile_sizes(anchor, tiles)
    ext = {common[i]: e for i, e in zip(anchor.parallel, anchor.out_shape)}
    box = {common[i]: t for i, t in zip(anchor.parallel, eff)}
    box[WALKED] = ext[WALKED] = chain.extent
    n_tiles = math.prod(math.ceil(e / t) for e, t in zip(anchor.out_shape, eff))
    free_tiles = math.prod(math.ceil(e / t) for i, e, t in zip(anchor.parallel, anchor.out_shape,
                                                               eff) if common[i].startswith("x"))
    row_part = set(chain.scores) | {chain.max_op, chain.exp_op, chain.sum_op} - {None}
    rows = math.prod(e for c, e in ext.items() if c.startswith("r"))
    blocks = math.ceil(chain.extent / block)
    acc = chain_buffer_elems(chain, block, anchor, tiles) - block * (len(chain.scores) + 2)
    # blocks a where() mask covers are skipped and their covered ends trimmed
    # (search_spaces.chain_mask): the walk's work shrinks by the points' share, its rescales by
    # the blocks', the rest (epilogue, writes) does not
    vec, step = _vector_members(w, chain, block, box, ext, acc, layout_of, dev)
    rdim = row_step(w, chain, box, acc)[0] if dev.kind == "cpu" else ""
    masked = masked_chain_work(w, chain, tuple(eff), block, rdim, step)
    kept, kept_blocks = masked[1:] if masked else (1.0, 1.0)
    flops = recomputed = trans = compute_s = strided = 0.0
    moved = unique = 0.0
    seen: set[str] = set()
    # a CPU tile runs its rows in a loop (a GPU's chain runs a row a thread)
    refetch = row_refetch(w, chain, box, item, dev.tile_cache_bytes) if dev.kind == "cpu" \
        else {}
    for name in chain.members:
        if name == chain.norm_op:
            continue                  # folded into one division per accumulator at the end
        op = w.op(name)
        f, t = op.flops_per_iteration()
        runs = op.iterations * (free_tiles if name in row_part else 1) \
            * (kept if name in row_part or name == chain.contraction else 1.0)
        flops += runs * f
        trans += runs * t
        recomputed += (runs - op.iterations) * f
        lanes = _lanes(w, chain, name, block, box, layout_of, dev)
        if name in vec:
            # one multiply-add per point: the factors constant along the vector (attention's
            # 1/sqrt(D) on q) are hoisted out of the walk by the compiler
            spill = SPILLED_SHARE if name == chain.contraction and acc > SPILL_ACC else 1.0
            compute_s += runs * 2 / (vector_rate(dev, item, step) * spill)
        elif name == chain.contraction and dev.kind == "cpu" and lanes * dev.vector_width > 1:
            compute_s += runs * f / (peak_flops(dev, item) * BUFFER_UPDATE_EFFICIENCY * lanes)
        else:
            compute_s += runs * (f + transcendental_weight(op.expr, dev)) \
                / (dev.loop_flops * lanes)
        names = chain.common(name)
        if walks_strided(w, chain, name, WALKED, layout_of, at_least=LINE_ELEMS):
            # a line (or a page) a step of the walk: what the learned correction sees as a
            # strided walk (GroupCost.strided_flops), as in a loop group
            strided += runs * f
        for a in op.reads():
            if a.tensor in chain.members:
                continue
            nbytes = math.prod(w.shapes[a.tensor]) * item
            run_box = tuple(box.get(names[i], op.extent(i)) for i in a.idx)
            per_run = math.prod(run_box) * item
            if a.tensor not in seen and nbytes <= dev.cache_bytes / 2:
                moved += nbytes
            elif nbytes > dev.cache_bytes / 2:
                # runs shorter than a line and rows pages apart, priced as in a loop group
                # (triangle attention's keys kh[h,k,j,d] walked along k with k stored
                # outermost: 256 rows 32 KiB apart a tile)
                shape, perm = w.shapes[a.tensor], layout_of(a.tensor)
                moved += max(per_run * n_tiles * _read_waste(shape, perm, run_box, item, dev),
                             nbytes)
                if refetch.get(a.tensor, 1.0) > 1 and a.tensor not in seen:
                    # read again by later rows (row_refetch), a row's slice at a time
                    moved += per_run * n_tiles * (refetch[a.tensor] - 1) \
                        * _read_waste(shape, perm, _row_slice(names, op, a, box), item, dev)
            unique += nbytes if a.tensor not in seen else 0.0
            seen.add(a.tensor)
        if name in mats or name == chain.anchor:
            moved += op.out_size * item
            unique += op.out_size * item
    # the rescale: per row, block and free tile one exponential, the max and the multiplies
    rescale = rows * blocks * free_tiles * kept_blocks
    if chain.softmax:
        flops += rescale * (3 + acc)
        trans += rescale
        compute_s += rescale * (3 + acc + dev.functions.weight("exp", dev.transcendental_flops)) \
            / dev.loop_flops
    if dev.kind == "cpu":
        # and per row, block and member the set-up of that member's loop over the block
        compute_s += rescale * len(chain.members) * BLOCK_LOOP_S / max(dev.parallel_units, 1)
    order, chunk = tile_dealing(anchor.out_shape, tuple(eff), tuple(layout_of(chain.anchor)),
                                item)
    occupancy, serial = loop_occupancy(w, chain.members, n_tiles, dev, chunk)
    if masked and dev.kind == "cpu" and not serial:
        # masked tiles are unequal: the slowest thread's share, dealt as the code does
        compute_s *= dealt_share(masked[0], order, chunk, dev.parallel_units)
    else:
        compute_s /= occupancy
    overhead_s = tile_overhead_s(dev, n_tiles, chunk, len(chain.members))
    memory_s = moved / (dev.bandwidth * (occupancy if serial else 1.0))
    bound = "compute" if compute_s + overhead_s >= memory_s else "memory"
    t = max(compute_s + overhead_s, memory_s) + loop_launch_s(dev, serial) + pack_s
    moved += pack_s * dev.bandwidth
    return GroupCost(ops=chain.members, anchor=chain.anchor, impl="loop", tiles=tuple(eff),
                     predicted_s=t, flops=flops, recomputed_flops=recomputed,
                     transcendentals=trans, bytes=moved, unique_bytes=unique, launches=1,
                     bound=bound, fused=tuple(FusedProducer(m, float(free_tiles if m in row_part
                                                                     else 1))
                                              for m in chain.members if m != chain.anchor),
                     chain=f"{chain.text()}, blocks of {block}", strided_flops=strided)
