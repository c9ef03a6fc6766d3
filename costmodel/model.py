"""The analytic cost model: (workload, candidate, device) -> CostEstimate.  Pure, no I/O.

Each group is a roofline: time = max(compute, memory) + launch.  Compute counts every body
evaluation of every member (so recomputation inside fused tiles is paid for), with
transcendentals weighted; memory counts the bytes each tile moves from DRAM, strided and
transposing access weighted by their measured cost.  The device rates of each term are applied
in ``rates.py``; docs/costmodel.md gives the reasons for each term.
"""
from __future__ import annotations

import functools
import math

from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, Candidate
from search_spaces.chain import detect
from search_spaces.precision import default_precision, kernel_precision, stack_precision
from search_spaces.cache_walk import conflicting, lines_between, revisited_far
from search_spaces.footprint import (footprint_shape, footprints, item_bytes, nest_extents,
                                     plan_group, strides, tile_dealing, write_strides,
                                     writes_in_place)
from search_spaces.gemm import (as_matrix_view, broadcast_form, gemm_form, group_size,
                                 operand_groups)
from search_spaces.inlining import inlined_members
from search_spaces.partition import Group, groups, materialized
from search_spaces.rewrite import rewritten
from search_spaces.workload import Workload

from .chain_cost import chain_buffer_elems, chain_group, cpu_rows
from .cuda_limits import limit_penalty_s
from .devices import DeviceSpec
from .estimate import CostEstimate, FusedProducer, GroupCost
from .kernel_cost import kernel_copy_bytes, kernel_group
from .memo import GroupMemo
from .mma_cost import gpu_kernel_group
from .rates import (LINE_ELEMS, RUN_FLOPS, contiguous_run, far_regions, lane_use,
                    library_launch_s, line_waste, loop_launch_s, loop_occupancy, precision_rate,
                    read_waste, regions_waste, run_waste, split_extras, staged_copy_bytes,
                    tile_overhead_s, transcendental_weight, write_waste)
from .stack_cost import stack_copy_bytes, stacked_group

# a workload's chains, found once: the model asks for them for every candidate that walks one
_chains = functools.lru_cache(maxsize=64)(detect)


# The loop rate's share an update (+=, max=) reaches when its innermost loop gathers an operand
# (into a target whose lines stay in the first-level cache): GCC's scalar code, unrolled over
# the independent targets (codegen's _Emitter.gathers), not the one-lane rate (1 /
# vector_width) of a strided vector loop.  Measured (2 cores, AVX-512, GCC 12): 11 such groups
# of the attention family (q, k, v projections with the head dim tiled by 1 or 2) ran 0.16 to
# 0.56 of the loop rate, median 0.43; trimul's at N=702 (projections over 63 MB operands)
# 0.08-0.1.  Chosen by the model-check rank figures of the seven built-ins re-measured after
# the change: 0.125 / 0.2 / 0.25 / 0.3 / 0.4 gave mean Spearman rho 0.759 / 0.753 / 0.753 /
# 0.749 / 0.744, and a corrected top-1 regret over 10 % (attention's) at 0.125 and 0.2 only.
GATHERED_UPDATE_VEC = 0.25

# What one element of a strided walk costs an elementwise statement on a CPU, in flop-equivalents
# at the one-lane rate (loop_flops / vector_width), whatever the statement computes: each
# element is a load or store of its own (a gather or scatter of GCC's vector code), which a
# statement of one or two flops does not hide.  Measured (2 cores, AVX-512, GCC 12): the bias
# adds out = po + b of five built-ins with the channel loop outside (tiles of 1 or 2 on it)
# ran 0.9-1.1 ns an element over two strided accesses, 2.2x (median) their flop-priced
# prediction, 5.8x at the 90th percentile; the model-check data of the 11 built-ins re-scored
# with 1.5 / 2 / 2.5 / 3 / 4 / 5: mean Spearman rho 0.834 / 0.836 / 0.839 / 0.840 / 0.841 /
# 0.841 (0.831 without), and outer_product_mean's top-1 regret 22.7 % -> 4.9 % from 1.5 on.
# Updates (+=, max=) keep their own rates (GATHERED_UPDATE_VEC, and the scatters' below): with
# them too, the projections that gather (attention's q, k, v) were overpriced 2-6x.
STRIDED_ACCESS_FLOPS = 3.0

# loop, kernel and chain groups' prices, reused by candidates that price them alike
_MEMO = GroupMemo()


def estimate(w: Workload, cand: Candidate, dev: DeviceSpec) -> CostEstimate:
    """Predicted time of ``cand`` on ``dev`` with a per-group breakdown.  A candidate that
    splits product statements is priced on the rewritten workload: its intermediates are
    ordinary tensors (materialized or fused like any other)."""
    w = rewritten(w, cand)
    fused = cand.fused_pairs
    mats = materialized(w, fused)
    item = item_bytes(w)
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    out = []
    chains = _chains(w) if any(s.chain_block for s in cand.schedules) else {}
    for g in groups(w, fused):
        sched = cand.schedule(g.anchor)
        stack = cand.stack(g.anchor)
        if stack:
            # one GEMM for the whole stack, priced with its first member (which runs it)
            if stack[0] == g.anchor:
                prec = stack_precision(w, [cand.schedule(m).precision for m in stack])
                out.append(stacked_group(w, stack, layout_of, dev, item, prec))
        elif sched.impl == IMPL_LIBRARY:
            out.append(_library_group(w, g, layout_of, dev, item,
                                      sched.precision or default_precision(w)))
        elif sched.impl == IMPL_KERNEL and dev.kind != "cpu":
            prec = kernel_precision(w, sched.precision)
            out.append(_MEMO.price(
                ("mma", w.hash, dev, item, g, frozenset(fused), sched.kernel, prec), layout_of,
                frozenset(), lambda lay, _, g=g, k=sched.kernel, prec=prec: gpu_kernel_group(
                    w, g, fused, k, lay, dev, item, prec)))
        elif sched.impl == IMPL_KERNEL:
            out.append(_MEMO.price(
                ("kernel", w.hash, dev, item, g, frozenset(fused), sched.kernel), layout_of,
                frozenset(), lambda lay, _, g=g, k=sched.kernel: kernel_group(
                    w, g, fused, k, lay, dev, item)))
        elif sched.chain_block:
            ch = chains[g.anchor]
            out.append(_MEMO.price(
                ("chain", w.hash, dev, item, ch, sched.chain_block, tuple(sched.tiles)),
                layout_of, mats, lambda lay, ms, ch=ch, b=sched.chain_block, t=sched.tiles:
                chain_group(w, ch, b, t, lay, ms, dev, item)))
        else:
            out.append(_MEMO.price(
                ("loop", w.hash, dev, item, g, tuple(sched.tiles)), layout_of, mats,
                lambda lay, ms, g=g, tiles=sched.tiles: _loop_group(w, g, tiles, lay, ms, dev,
                                                                   item)))
    # a CUDA candidate whose tile buffers exceed shared memory cannot launch at all
    total = sum(c.predicted_s for c in out) + limit_penalty_s(w, cand, dev)
    return CostEstimate(w.name, dict(w.dims), dev.name, cand.name or cand.key, total, tuple(out))


def _roofline(flops_eq: float, rate: float, bytes_: float, dev: DeviceSpec, launches: int):
    compute = flops_eq / rate
    memory = bytes_ / dev.bandwidth
    bound = "compute" if compute >= memory else "memory"
    return max(compute, memory) + launches * library_launch_s(dev), bound


def _library_group(w, g: Group, layout_of, dev: DeviceSpec, item: int,
                   precision: str = "fp32") -> GroupCost:
    op = w.op(g.anchor)
    form = gemm_form(op)
    # the CPU executor batches over the output's outer indices, the other operand broadcast,
    # where only that writes the result in place (search_spaces.gemm.broadcast_form)
    split = broadcast_form(form, op, w.shapes, layout_of) if dev.kind == "cpu" else None
    bcast = None
    if split is not None:
        form, bcast = split
    b_, m, n, k = (group_size(op, g) for g in (form.batch, form.m, form.n, form.k))
    flops = 2.0 * b_ * m * n * k
    bytes_ = copy_bytes = 0.0
    ga, gb, go = operand_groups(form, bcast)
    for tensor, idx, grp in ((form.a.tensor, form.a.idx, ga), (form.b.tensor, form.b.idx, gb),
                             (op.out, op.parallel, go)):
        nbytes = math.prod(w.shapes[tensor]) * item
        bytes_ += nbytes
        # NumPy/CuPy first copy an operand no view expresses into a BLAS-able layout (or the
        # result out of one): a separate pass, not overlapped with the GEMM, which walks one
        # side with a stride and so moves whole lines for runs shorter than a line
        copy_bytes += staged_copy_bytes(idx, w.shapes[tensor], layout_of(tensor), grp, nbytes,
                                        dev)
    if form.scale != 1.0:
        # the executor applies a contraction's scale in a pass over the smallest of A, B, C
        copy_bytes += 2 * item * min(b_ * m * k, b_ * k * n, b_ * m * n)
    rate, products = precision_rate(dev, precision, b_, m, n, k)
    more, passes, extra_launches = split_extras(item, b_, m, n, k, products)
    bytes_ += more
    copy_bytes += passes
    launches = 1 + extra_launches
    t, bound = _roofline(flops * products, rate, bytes_, dev, launches)
    t += copy_bytes / dev.bandwidth
    return GroupCost(ops=(op.out,), anchor=op.out, impl=IMPL_LIBRARY, tiles=(),
                     predicted_s=t, flops=flops, recomputed_flops=0.0, transcendentals=0.0,
                     bytes=bytes_ + copy_bytes, unique_bytes=bytes_, launches=launches,
                     bound=bound, fused=())


def _per_element_calls(op, inner: str, inner_ext: int, dev: DeviceSpec) -> float:
    """Flop-equivalents of ``op``'s transcendental calls per execution.  On a CPU the calls
    whose arguments do not vary along the innermost loop run once before it, not once an
    element (autotune.backends.cpu.hoist): se_block's y[b,c,p] = x * sigmoid(u[b,c]), its
    sigmoid priced per element, was predicted 775 us where it ran 367 us on the AVX2 EPYC."""
    every = transcendental_weight(op.expr, dev)
    if dev.kind != "cpu" or not every:
        return every
    varying = transcendental_weight(op.expr, dev, frozenset((inner,)))
    return varying + (every - varying) / max(inner_ext, 1)


def _loop_group(w, g: Group, tiles, layout_of, mats, dev: DeviceSpec, item: int) -> GroupCost:
    anchor = w.op(g.anchor)
    members = set(g.members)
    plans = plan_group(w, g, tiles, layout_of)
    fps = footprints(w, g, tiles)
    eff_tiles = [min(max(t, 1), e) for t, e in zip(tiles, anchor.out_shape)]
    n_tiles = math.prod(math.ceil(e / t) for e, t in zip(anchor.out_shape, eff_tiles))
    flops = recomputed = trans = 0.0
    moved = unique = 0.0
    compute_s = 0.0          # at the full loop rate, before occupancy
    strided = chained = 0.0  # flops in a strided innermost walk; with a reduction innermost
    runs = 0.0               # contiguous runs the tiles cut tensors of memory into (RUN_FLOPS)
    seen: set[str] = set()
    fused = []
    for mp in plans:
        op = w.op(mp.op)
        f, t = op.flops_per_iteration()
        flops += mp.executions * f
        trans += mp.executions * t
        recomputed += (mp.executions - op.iterations) * f
        if mp.op != g.anchor:
            fused.append(FusedProducer(mp.op, mp.recompute))
        shp = footprint_shape(op, fps[mp.op], anchor, tiles)
        inner = mp.order[-1]
        inner_ext = shp[op.parallel.index(inner)] if inner in op.parallel else op.extent(inner)
        # SIMD lanes: an innermost loop shorter than the vector width runs partly scalar, and
        # so does the last tile's remainder where the tile does not divide the extent
        walk = fps[mp.op][op.parallel.index(inner)] if inner in op.parallel else None
        full = anchor.out_shape[walk[1]] if walk and walk[0] == "tile" else inner_ext
        vec = lane_use(inner_ext, full, dev.vector_width)
        if inner not in op.parallel:
            chained += mp.executions * f       # accumulated in one register chain
        # a strided walk in the innermost loop (any operand, tile buffers included) turns
        # vector loads into gathers: count the loop as scalar
        walks_strided = gathers = scatters = False
        n_strided = 0        # accesses per iteration that walk the innermost loop with a stride
        for acc in op.reads():
            if inner not in acc.idx:
                continue
            if acc.tensor in members:
                src = w.op(acc.tensor)
                st = strides(footprint_shape(src, fps[acc.tensor], anchor, tiles),
                             tuple(range(len(src.parallel))))
            else:
                st = strides(w.shapes[acc.tensor], layout_of(acc.tensor))
            if st[acc.idx.index(inner)] != 1:
                vec = min(vec, 1.0 / dev.vector_width)
                walks_strided = gathers = True
                n_strided += 1
        # so does a write (or a sum's read-modify-write) walked with a stride whose lines
        # come back late; one whose lines stay in L1 only stores element by element (the
        # heuristic trimul's layer norm into channel-first tn: 0.06-0.09 s, predicted 0.03 s
        # as a vector loop, 0.17 s as a scalar one)
        # (or an output written in place whose lines crowd into a few cache sets: evicted
        # before they come back, each store a miss, priced as moving a line below; a tile
        # buffer's conflicts cost less: a 64 KB one is all in L2, outer_product_mean's
        # o += a b at 4 KiB steps through its accumulator ran 5.7 GFLOP/s)
        write_conflict = False
        if inner in op.parallel:
            wst = write_strides(w, g, op, mp.footprint, anchor, tiles, layout_of, inner)
            if wst[inner] != 1:
                nest = nest_extents(op, shp)
                write_conflict = writes_in_place(g, op, layout_of, inner) and conflicting(
                    wst, mp.order, nest, item)
                far = write_conflict or revisited_far(wst, mp.order, nest)
                vec = min(vec, 1.0 / dev.vector_width if far else 0.5)
                walks_strided, scatters = True, far
                n_strided += 1
        if gathers and not scatters and op.reduction and inner in op.parallel \
                and dev.kind == "cpu":
            # an update that gathers (into a target whose lines stay near) is left to GCC's
            # own code (codegen's _Emitter.gathers): scalar, unrolled over independent targets
            vec = GATHERED_UPDATE_VEC
        if walks_strided:
            strided += mp.executions * f
        op_s = mp.executions * (f + _per_element_calls(op, inner, inner_ext, dev)) \
            / (dev.loop_flops * vec)
        if n_strided and not op.reduction and dev.kind == "cpu":
            op_s = max(op_s, mp.executions * n_strided * STRIDED_ACCESS_FLOPS
                       / (dev.loop_flops / dev.vector_width))
        compute_s += op_s
        for acc in op.reads():
            if acc.tensor in members:
                continue
            tensor_bytes = math.prod(w.shapes[acc.tensor]) * item
            first_read = acc.tensor not in seen
            seen.add(acc.tensor)
            ext = []
            for i in acc.idx:
                pos = op.domain.index(i)
                ext.append(shp[pos] if pos < len(op.parallel) else op.extent(i))
            box = math.prod(ext)
            run = contiguous_run(w.shapes[acc.tensor], layout_of(acc.tensor), ext)
            spread = run_waste(run)
            st = dict(zip(acc.idx, strides(w.shapes[acc.tensor], layout_of(acc.tensor))))
            if st.get(inner) == 1:   # streamed by the innermost loop (strided: priced above)
                runs += box / run * n_tiles
            # a strided innermost walk re-uses each line only if the lines it touches stay in
            # the core's private cache until the neighbouring elements are visited: those of
            # the loops inside the unit-stride index's loop, not the whole box (trimul's
            # channel-first t read by tc = t - mu2, tiles (128, 8, 8), the channel innermost:
            # 128 lines per i, reused by the next i from L1; priced by its 512 KB box as a
            # line per element, 9.6 s predicted, 0.53 s measured)
            if st.get(inner, 1) != 1 and lines_between(st, mp.order, dict(zip(
                    acc.idx, ext))) * LINE_ELEMS * item > dev.tile_cache_bytes:
                spread = max(spread, float(min(st[inner], LINE_ELEMS)))
            waste = read_waste(spread, dev) * regions_waste(
                far_regions(w.shapes[acc.tensor], layout_of(acc.tensor), ext, item), dev)
            per_run = box * item * n_tiles * waste
            # tensors that fit in cache are read from DRAM once, however often tiles touch them
            if tensor_bytes <= dev.cache_bytes / 2:
                moved += tensor_bytes if first_read else 0.0
            else:
                moved += max(per_run, tensor_bytes)
            unique += tensor_bytes if first_read else 0.0
        if mp.op in mats:
            wbytes = math.prod(shp) * item * n_tiles if mp.op != g.anchor else op.out_size * item
            if inner in op.parallel and strides(op.out_shape, layout_of(mp.op))[
                    op.parallel.index(inner)] == 1:
                runs += math.prod(shp) / contiguous_run(op.out_shape, layout_of(mp.op), shp) \
                    * n_tiles
            if write_conflict:
                # every store misses, whatever the output's size, and first reads its line
                # back (read for ownership): a strided read's line per element, the measured
                # rate (gelu_mlp's bias add into 4 KiB rows, 64 to 256 rows a tile: 6.7-9.0
                # ns an element on two cores; the strided read 4.2 ns; the strided write,
                # whose lines the prefetcher brings, 1.9 ns)
                wbytes *= read_waste(float(min(wst[mp.order[-1]], LINE_ELEMS)), dev)
            elif op.out_size * item > dev.cache_bytes:
                spread = line_waste(op.out_shape, layout_of(mp.op), shp)
                ost = strides(op.out_shape, layout_of(mp.op))
                inner_par = [i for i in mp.order if i in op.parallel]
                # a tile buffer (a fused member's, or a sum's accumulator) is stored by a loop
                # in the output's own layout order: only an anchor computed in place walks
                # its output in the compute loop's order
                in_place = writes_in_place(g, op, layout_of, mp.order[-1])
                if in_place and inner_par and math.prod(shp) * item > dev.tile_cache_bytes:
                    s_in = ost[op.parallel.index(inner_par[-1])]
                    if s_in != 1:
                        spread = max(spread, float(min(s_in, LINE_ELEMS)))
                wbytes *= write_waste(spread, dev)
            moved += wbytes
            unique += op.out_size * item
    # Tile buffers of the fused members live in the core's private cache only while they fit:
    # beyond it each buffer is written to and read back from DRAM once per tile.
    # (on a CPU, a member read once by a reader that visits each element once has none: it is
    # evaluated inside its reader, search_spaces.inlining)
    inlined = (inlined_members(w, g, plans, mats, layout_of) if dev.kind == "cpu"
               else frozenset())
    buffers = sum(math.prod(footprint_shape(w.op(m.op), fps[m.op], anchor, tiles))
                  for m in plans if m.op != g.anchor and m.op not in inlined) * item
    spill = 2 * buffers * n_tiles if buffers > dev.tile_cache_bytes else 0.0
    _, chunk = tile_dealing(anchor.out_shape, tuple(eff_tiles), tuple(layout_of(g.anchor)),
                            item)
    occupancy, serial = loop_occupancy(w, g.members, n_tiles, dev, chunk)
    if dev.kind == "cpu":
        compute_s += runs * RUN_FLOPS / dev.loop_flops
    compute_s /= occupancy
    # the dealing of tiles (per chunk) and each member's set-up per tile: what sinks
    # per-element fusion
    overhead_s = tile_overhead_s(dev, n_tiles, chunk, len(plans))
    # one core alone draws its share of the bandwidth, not all of it: idle cores leave theirs
    # unused (outer_product_mean's row mean over 2 MB in one tile: 0.24 ms, 0.08 predicted
    # at the full bandwidth)
    memory_s = moved / (dev.bandwidth * occupancy)
    bound = "compute" if compute_s + overhead_s >= memory_s else "memory"
    # spilled buffers stall the arithmetic that uses them: paid on top, not overlapped
    t = max(compute_s + overhead_s, memory_s) + spill / dev.bandwidth + loop_launch_s(dev, serial)
    moved += spill
    return GroupCost(ops=tuple(m.op for m in plans), anchor=g.anchor, impl="loop",
                     tiles=tuple(eff_tiles), predicted_s=t, flops=flops,
                     recomputed_flops=recomputed, transcendentals=trans, bytes=moved,
                     unique_bytes=unique, launches=1, bound=bound, fused=tuple(fused),
                     strided_flops=strided, chained_flops=chained)


def memory_bytes(w: Workload, cand: Candidate, threads: int) -> int:
    """Bytes ``cand`` holds at its peak while it runs: every input, output and materialized
    intermediate (whole tensors, allocated once per plan), plus the largest extra of one
    group (groups run one after another): for a loop group, the tile buffers of its fused
    members, one set per thread; for a library GEMM, the layout copies NumPy/CuPy make of
    operands (or the result) it cannot view as matrices (for the generated kernel, and the
    tensors its epilogue reads, see kernel_cost).  ``threads``: CPU threads, each with
    its own tile buffers (0 on a GPU, whose tile buffers live in shared memory).
    """
    w = rewritten(w, cand)
    item = item_bytes(w)
    fused = cand.fused_pairs
    whole = {n for n, _ in w.inputs} | set(w.outputs) | materialized(w, fused)
    total = sum(math.prod(w.shapes[t]) for t in whole) * item
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    extra = 0
    chains = _chains(w) if any(s.chain_block for s in cand.schedules) else {}
    for g in groups(w, fused):
        sched = cand.schedule(g.anchor)
        if sched.impl == IMPL_KERNEL:
            extra = max(extra, kernel_copy_bytes(w, fused, g.anchor, layout_of, item))
        elif sched.chain_block:
            ch, anchor = chains[g.anchor], w.op(g.anchor)
            rows = cpu_rows(w, ch, anchor, sched.tiles) if threads else 1
            per_thread = chain_buffer_elems(ch, sched.chain_block, anchor, sched.tiles,
                                            rows) * item
            extra = max(extra, per_thread * max(threads, 0))
        elif cand.stack(g.anchor):
            extra = max(extra, stack_copy_bytes(w, cand.stack(g.anchor), item))
        elif sched.impl == IMPL_LIBRARY:
            op = w.op(g.anchor)
            form = gemm_form(op)
            ga, gb, go = operand_groups(form)
            copies = sum(math.prod(w.shapes[t]) for t, idx, grp in (
                (form.a.tensor, form.a.idx, ga), (form.b.tensor, form.b.idx, gb),
                (op.out, op.parallel, go))
                if not as_matrix_view(idx, w.shapes[t], layout_of(t), grp)) * item
            extra = max(extra, copies)
        else:
            anchor = w.op(g.anchor)
            fps = footprints(w, g, sched.tiles)
            per_thread = sum(math.prod(footprint_shape(w.op(m), fps[m], anchor, sched.tiles))
                             for m in g.members if m != g.anchor) * item
            extra = max(extra, per_thread * max(threads, 0))
    return int(total + extra)
