"""The cost of a group run by the generated contraction kernel (impl ``kernel``, CPU).  Pure.

A roofline at the kernel's rate, less the share of partial register tiles, over the traffic its
blocking implies: A read once per NC block of columns, B once, C written once per KC slice (and
read back on each later one; there is no zeroing pass).  Packing absorbs any strides, so only an
operand that is no strided matrix at all is copied first (as for a library GEMM).
docs/costmodel.md gives the reasons.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_KERNEL
from search_spaces.gemm import as_matrix_view, gemm_form, operand_groups
from search_spaces.kernel import KernelParams
from search_spaces.partition import Group

from .devices import DeviceSpec
from .estimate import GroupCost
from .rates import GEMM_FLOOR, SMALL_GEMM, loop_launch_s


def tile_use(extent: int, tile: int) -> float:
    """The share of the register tiles' lanes that hold real elements along one dim."""
    return extent / (math.ceil(extent / tile) * tile) if extent else 1.0


def kernel_group(w, g: Group, k: KernelParams | None, layout_of, dev: DeviceSpec,
                 item: int) -> GroupCost:
    """The group ``g`` (one contraction) run by the kernel with parameters ``k`` (None: a
    hand-written candidate that left them out, priced as one block without padding)."""
    op = w.op(g.anchor)
    form = gemm_form(op)
    ext = dict(zip(op.domain, op.extents))
    size = lambda idx: math.prod(ext[i] for i in idx)
    b_, m, n, kk = size(form.batch), size(form.m), size(form.n), size(form.k)
    flops = 2.0 * b_ * m * n * kk
    mr, nr, nc, kc = (k.mr, k.nr, k.nc, k.kc) if k is not None else (1, 1, max(n, 1), max(kk, 1))
    eff = tile_use(m, mr) * tile_use(n, nr) * min(1.0, kk / SMALL_GEMM) ** 0.5
    passes = {form.a.tensor: math.ceil(n / nc), form.b.tensor: 1,
              op.out: 2 * max(1, math.ceil(kk / kc)) - 1}
    bytes_ = unique = copy_bytes = 0.0
    ga, gb, go = operand_groups(form)
    for tensor, idx, grp in ((form.a.tensor, form.a.idx, ga), (form.b.tensor, form.b.idx, gb),
                             (op.out, op.parallel, go)):
        nbytes = math.prod(w.shapes[tensor]) * item
        unique += nbytes
        bytes_ += nbytes * passes[tensor]
        if not as_matrix_view(idx, w.shapes[tensor], layout_of(tensor), grp):
            # the executor copies it into (or the result out of) a strided matrix first
            copy_bytes += 2 * nbytes * dev.access.transpose_copy
    rate = (dev.kernel_flops or dev.gemm_flops) * max(eff, GEMM_FLOOR)
    compute, memory = flops / rate, bytes_ / dev.bandwidth
    t = max(compute, memory) + loop_launch_s(dev) + copy_bytes / dev.bandwidth
    return GroupCost(ops=(op.out,), anchor=op.out, impl=IMPL_KERNEL, tiles=(),
                     predicted_s=t, flops=flops, recomputed_flops=0.0, transcendentals=0.0,
                     bytes=bytes_ + copy_bytes, unique_bytes=unique, launches=1,
                     bound="compute" if compute >= memory else "memory", fused=())
