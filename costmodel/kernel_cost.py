"""The cost of a group run by the generated contraction kernel (impl ``kernel``, CPU).  Pure.

A roofline at the kernel's rate, less the share of partial register tiles, over the traffic its
blocking implies: A read once per NC block of columns, B once, C written once per KC slice (and
read back on each later one; there is no zeroing pass).  Packing absorbs any strides, so only an
operand that is no strided matrix at all is copied first (as for a library GEMM).  An epilogue
(search_spaces.epilogue) adds its arithmetic at the loop rate and one read of each tensor it
reads; C is then the epilogue's result, and the contraction's own result is never stored or
loaded again: that saving is the difference from the unfused plan.  docs/costmodel.md gives the
reasons.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_KERNEL
from search_spaces.epilogue import Epilogue, group_strides, kernel_parts
from search_spaces.gemm import as_matrix_view, gemm_form, operand_groups
from search_spaces.ir import accesses
from search_spaces.kernel import KernelParams
from search_spaces.partition import Group

from .devices import DeviceSpec
from .estimate import FusedProducer, GroupCost
from .rates import GEMM_FLOOR, SMALL_GEMM, loop_launch_s, transcendental_weight


def tile_use(extent: int, tile: int) -> float:
    """The share of the register tiles' lanes that hold real elements along one dim."""
    return extent / (math.ceil(extent / tile) * tile) if extent else 1.0


def kernel_operands(w, fused, anchor: str, layout_of, item: int):
    """(tensor, bytes, role, copied) for everything the kernel group anchored at ``anchor``
    touches: A, B, C (``role`` "a", "b", "c") and the epilogue's other tensors ("e");
    ``copied``: bytes the executor copies first (an operand no strided view expresses)."""
    p, epi = kernel_parts(w, fused, anchor)
    op = w.op(p)
    form = gemm_form(op)
    ext = dict(zip(op.domain, op.extents))
    ga, gb, go = operand_groups(form)
    out, out_idx = (p, op.parallel) if epi is None else (
        epi.consumer, _in_contraction(w, epi, w.op(epi.consumer).parallel))
    rows = []
    for tensor, idx, grp, role in ((form.a.tensor, form.a.idx, ga, "a"),
                                   (form.b.tensor, form.b.idx, gb, "b"), (out, out_idx, go, "c")):
        nbytes = math.prod(w.shapes[tensor]) * item
        viewable = as_matrix_view(idx, w.shapes[tensor], layout_of(tensor), grp)
        rows.append((tensor, nbytes, role, 0.0 if viewable else nbytes))
    if epi is not None:
        whole = math.prod(op.out_shape) * item
        for t, idx in dict.fromkeys((a.tensor, a.idx) for a in accesses(w.op(epi.consumer).expr)
                                    if a.tensor != p):
            sub = _in_contraction(w, epi, idx)
            flat = group_strides(sub, w.shapes[t], layout_of(t), go, ext)
            rows.append((t, math.prod(w.shapes[t]) * item, "e", 0.0 if flat else whole))
    return p, epi, rows


def _in_contraction(w, epi: Epilogue, idx) -> tuple[str, ...]:
    to_p = epi.to_contraction(w)
    return tuple(to_p[i] for i in idx)


def kernel_group(w, g: Group, fused, k: KernelParams | None, layout_of, dev: DeviceSpec,
                 item: int) -> GroupCost:
    """The group ``g`` (a contraction, with its epilogue or alone) run by the kernel with
    parameters ``k`` (None: a hand-written candidate that left them out, priced as one block
    without padding)."""
    p, epi, rows = kernel_operands(w, fused, g.anchor, layout_of, item)
    op = w.op(p)
    form = gemm_form(op)
    ext = dict(zip(op.domain, op.extents))
    size = lambda idx: math.prod(ext[i] for i in idx)
    b_, m, n, kk = size(form.batch), size(form.m), size(form.n), size(form.k)
    flops = 2.0 * b_ * m * n * kk
    mr, nr, nc, kc = (k.mr, k.nr, k.nc, k.kc) if k is not None else (1, 1, max(n, 1), max(kk, 1))
    eff = tile_use(m, mr) * tile_use(n, nr) * min(1.0, kk / SMALL_GEMM) ** 0.5
    passes = {"a": math.ceil(n / nc), "b": 1, "c": 2 * max(1, math.ceil(kk / kc)) - 1, "e": 1}
    bytes_ = sum(nbytes * passes[role] for _, nbytes, role, _ in rows)
    unique = sum(nbytes for _, nbytes, _, _ in rows)
    # a copy reads and writes each byte with one side strided
    copy_bytes = sum(2 * copied * dev.access.transpose_copy for *_, copied in rows)
    compute = flops / ((dev.kernel_flops or dev.gemm_flops) * max(eff, GEMM_FLOOR))
    epi_flops = trans = 0.0
    if epi is not None:
        c = w.op(epi.consumer)
        f, t = c.flops_per_iteration()
        epi_flops, trans = float(f * c.out_size), float(t * c.out_size)
        compute += c.out_size * (f + transcendental_weight(c.expr, dev)) / dev.loop_flops
    memory = bytes_ / dev.bandwidth
    total = max(compute, memory) + loop_launch_s(dev) + copy_bytes / dev.bandwidth
    return GroupCost(ops=tuple(g.members), anchor=g.anchor, impl=IMPL_KERNEL, tiles=(),
                     predicted_s=total, flops=flops + epi_flops, recomputed_flops=0.0,
                     transcendentals=trans, bytes=bytes_ + copy_bytes, unique_bytes=unique,
                     launches=1, bound="compute" if compute >= memory else "memory",
                     fused=() if epi is None else (FusedProducer(p, 1.0),))


def kernel_copy_bytes(w, fused, anchor: str, layout_of, item: int) -> int:
    """Bytes of the copies the executor makes around the kernel group (peak memory)."""
    return int(sum(copied for *_, copied in kernel_operands(w, fused, anchor, layout_of,
                                                            item)[2]))
