"""What a kernel group (search_spaces.kernel_fusion) loads and stores, each as a tensor and its
subscript in the contraction's own index names, so that one element's address in any layout
follows from the contraction's (batch, rows, cols) indices.  Pure: no I/O."""
from __future__ import annotations

from dataclasses import dataclass

from .footprint import strides
from .gemm import gathered, gemm_form
from .kernel_fusion import KernelParts, pair_operands
from .workload import Workload


@dataclass(frozen=True)
class KernelRead:
    """``tensor`` read (or written) at ``sub`` (the contraction's index names, one per dim)."""
    tensor: str
    sub: tuple[str, ...]


@dataclass(frozen=True)
class KernelAccesses:
    """The kernel's operands as it loads them (``a``, ``b``: the operand, or its prologue's
    main input), a pair's second non-shared operand and its role ("a" or "b"; None without a
    pair), and what it stores (the epilogue's result, or the contraction's)."""
    a: KernelRead
    b: KernelRead
    pair: KernelRead | None
    pair_role: str
    out: KernelRead


def kernel_accesses(w: Workload, parts: KernelParts) -> KernelAccesses:
    op = w.op(parts.contraction)
    form = gemm_form(op)

    def source(role: str) -> KernelRead:
        pro = parts.prologue_a if role == "a" else parts.prologue_b
        if pro is None:
            acc = form.a if role == "a" else form.b
            return KernelRead(acc.tensor, acc.idx)
        to_p = pro.to_contraction(w)
        return KernelRead(pro.main, tuple(to_p[i] for i in pro.main_idx))

    epi = parts.epilogue
    pair, role = None, ""
    if epi is not None and epi.pair:
        _, o2, role = pair_operands(w, epi)
        op2 = w.op(epi.pair)
        to1 = dict(zip(epi.read, op.parallel))
        to2 = dict(zip(epi.pair_read, op2.parallel))
        ren = {to2[i]: to1[i] for i in w.op(epi.consumer).parallel}
        f2 = gemm_form(op2)
        s1, s2 = (form.a, f2.a) if epi.shared == "a" else (form.b, f2.b)
        ren.update(zip(s2.idx, s1.idx))
        pair = KernelRead(o2.tensor, tuple(ren[j] for j in o2.idx))
    if epi is None:
        out = KernelRead(op.out, op.parallel)
    else:
        to_p = epi.to_contraction(w)
        out = KernelRead(epi.consumer, tuple(to_p[i] for i in w.op(epi.consumer).parallel))
    return KernelAccesses(source("a"), source("b"), pair, role, out)


def unit_stride_side(w: Workload, layout_of, read: KernelRead, groups) -> str:
    """Which side of a (batch, rows, cols) tile of ``read`` its storage walks at unit stride:
    "cols" or "rows" (the last index of that group has stride 1), else "" (only a batch index
    or none: neighbouring elements of a tile lie a stride apart, a sector each on a GPU)."""
    st = dict(zip(read.sub, strides(w.shapes[read.tensor], layout_of(read.tensor))))
    for side, grp in (("cols", groups[2]), ("rows", groups[1])):
        have = [i for i in grp if i in st]
        if have and st[have[-1]] == 1:
            return side
    return ""


def vector_cols(w: Workload, layout_of, read: KernelRead, groups, ext: dict[str, int],
                width: int = 4) -> bool:
    """Whether ``width`` neighbouring columns of a (batch, rows, cols) tile of ``read``,
    starting at a multiple of ``width``, are always ``width`` neighbouring elements in storage
    on a ``width``-element boundary (given the tensor starts on one): the columns' innermost
    index (of extent > 1) has unit stride and an extent ``width`` divides, and every other
    stride of the tensor is a multiple of ``width``.  What a 16-byte copy of four floats into a
    row of a shared tile needs."""
    st = dict(zip(read.sub, strides(w.shapes[read.tensor], layout_of(read.tensor))))
    live = [i for i in groups[2] if ext[i] > 1]
    return bool(live) and st.get(live[-1]) == 1 and ext[live[-1]] % width == 0 and \
        all(s % width == 0 for i, s in st.items() if s != 1 and ext.get(i, 1) > 1)


def gathered_operands(w: Workload, layout_of, parts: KernelParts) -> str:
    """The contraction's operands ("a", "b", "ab" or "") that the CPU kernel of ``parts``
    packs through offset tables: those their layouts (``layout_of``) make no strided matrix
    (:func:`~search_spaces.gemm.gathered`), where the kernel reads the operand or its
    prologue's main input; none in a pair, whose packer interleaves two operands."""
    if parts.pair:
        return ""
    acc = kernel_accesses(w, parts)
    form = gemm_form(w.op(parts.contraction))
    out = ""
    for which, read, groups in (("a", acc.a, (form.batch, form.m, form.k)),
                                ("b", acc.b, (form.batch, form.k, form.n))):
        if gathered(read.sub, w.shapes[read.tensor], layout_of(read.tensor), groups):
            out += which
    return out


def gathered_tensors(w: Workload, layout_of, parts: KernelParts) -> tuple[str, ...]:
    """The tensors the CPU kernel of ``parts`` reads through offset tables
    (:func:`gathered_operands`), as ``autotune explain`` names them."""
    acc = kernel_accesses(w, parts)
    return tuple(read.tensor for which, read in (("a", acc.a), ("b", acc.b))
                 if which in gathered_operands(w, layout_of, parts))
