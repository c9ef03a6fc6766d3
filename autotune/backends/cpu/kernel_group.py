"""Running one kernel group of a plan on the executor's arrays: the contraction's operands
and the group's result as (batch, rows, cols) arrays (views where the layouts allow, copies
where not), the epilogue's extra arrays, and the call.  :func:`as3` and :func:`view3` serve the
library GEMM path too.
"""
from __future__ import annotations

import numpy as np

from search_spaces.candidate import Candidate
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.gemm import gemm_form
from search_spaces.workload import Workload

from autotune.backends.cpu.gemm_call import GemmKernel, operand_source, result_of
from autotune.backends.cpu.gemm_transforms import kernel_transforms, transform_arrays


def view3(arr: np.ndarray, idx: tuple[str, ...], groups3) -> tuple[np.ndarray, np.ndarray | None]:
    """``arr`` (indexed by ``idx``) transposed to the index order of ``groups3`` (batch, rows,
    cols), and its 3-d view (None where no view can express it)."""
    t = arr.transpose([idx.index(i) for g in groups3 for i in g])
    shape = [int(np.prod([arr.shape[idx.index(i)] for i in g], dtype=np.int64)) for g in groups3]
    v = t.view()
    try:
        v.shape = shape      # raises if a view cannot express it
    except AttributeError:
        return t, None
    return t, v


def as3(arr: np.ndarray, idx: tuple[str, ...], groups3) -> np.ndarray:
    """View (or, if impossible, copy) of ``arr`` (indexed by ``idx``) as (batch, rows, cols)."""
    t, v = view3(arr, idx, groups3)
    if v is not None:
        return v
    return t.reshape([int(np.prod([arr.shape[idx.index(i)] for i in g], dtype=np.int64))
                      for g in groups3])


class KernelGroup:
    """The kernel group anchored at ``anchor`` of ``cand`` (on the workload ``w`` it runs),
    called with the plan's arrays by tensor name: writes the group's result in place."""

    def __init__(self, w: Workload, cand: Candidate, anchor: str, kernel: GemmKernel):
        self.w, self.kernel = w, kernel
        parts = kernel_parts(w, cand.fused_pairs, anchor)
        self.form = gemm_form(w.op(parts.contraction))
        self.a, self.b = operand_source(w, parts, "a"), operand_source(w, parts, "b")
        self.out, self.idx = result_of(w, parts.contraction, parts.epilogue)
        self.extras = kernel_transforms(w, parts, lambda t: cand.layout(t, len(w.shapes[t])))[1]

    def __call__(self, env: dict[str, np.ndarray]) -> None:
        f = self.form
        a = as3(env[self.a[0]], self.a[1], (f.batch, f.m, f.k))
        b = as3(env[self.b[0]], self.b[1], (f.batch, f.k, f.n))
        t, c = view3(env[self.out], self.idx, (f.batch, f.m, f.n))
        target = c if c is not None else np.empty((a.shape[0], a.shape[1], b.shape[2]),
                                                  dtype=a.dtype)
        extra = transform_arrays(self.w, self.extras, env)
        self.kernel(a, b, target, f.scale, extra)     # the contraction's scale as alpha
        if c is None:
            t[...] = target.reshape(t.shape)
