"""Running one kernel group of a plan on the executor's arrays: the contraction's operands
and the group's result as (batch, rows, cols) arrays (views where the layouts allow, copies
where not, kept from call to call: :mod:`.staging`), the epilogue's extra arrays, and the call.
:func:`as3` and :func:`view3` serve the library GEMM path too.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from search_spaces.candidate import Candidate
from search_spaces.kernel_fusion import kernel_parts, pair_operands
from search_spaces.gemm import gemm_form
from search_spaces.workload import Workload

from autotune.backends.cpu.binding import Prepared, derived
from autotune.backends.cpu.gemm_call import (GemmKernel, operand_source, pair_axis,
                                             result_of)
from autotune.backends.cpu.gather import Tables, gathered_view, offset_tables
from autotune.backends.cpu.gemm_transforms import kernel_transforms, transform_arrays
from autotune.backends.cpu.staging import Staging


@functools.lru_cache(maxsize=4096)
def _recipe(shape: tuple[int, ...], strides: tuple[int, ...], idx: tuple[str, ...],
            groups3: tuple[tuple[str, ...], ...]) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(axes order, 3-d shape, whether a view expresses it) for an array of ``shape`` and
    ``strides`` indexed by ``idx``: decided once per layout, since a plan's arrays keep theirs
    from call to call (working it out each call cost about 16 us an operand, 0.1 ms a GEMM with
    the form's lookup: attention's 256x256x256 projections ran 290 us where the bare matmul
    took 180 us)."""
    perm = tuple(idx.index(i) for g in groups3 for i in g)
    tshape, tstrides = [shape[a] for a in perm], [strides[a] for a in perm]
    shape3 = tuple(int(np.prod([shape[idx.index(i)] for i in g], dtype=np.int64))
                   for g in groups3)
    # each group's axes (consecutive after the transpose) merge into one when each steps over
    # the next's whole extent: decided from the strides, so the reshape below never copies
    k = 0
    for g in groups3:
        axes = [a for a in range(k, k + len(g)) if tshape[a] != 1]
        k += len(g)
        if any(tstrides[a] != tstrides[b] * tshape[b] for a, b in zip(axes, axes[1:])):
            return perm, shape3, False
    return perm, shape3, True


def view3(arr: np.ndarray, idx: tuple[str, ...], groups3) -> tuple[np.ndarray, np.ndarray | None]:
    """``arr`` (indexed by ``idx``) transposed to the index order of ``groups3`` (batch, rows,
    cols), and its 3-d view (None where no view can express it)."""
    perm, shape3, viewable = _recipe(arr.shape, arr.strides, idx, tuple(groups3))
    t = arr.transpose(perm)
    # (a reshape the strides allow is a view; NumPy's own test, where it is not, builds the copy
    # first: 10-50 ms for a 67 MB array, so the recipe decides)
    return t, (t.reshape(shape3) if viewable else None)


def blasable(m: np.ndarray) -> bool:
    """Whether BLAS takes the (batch, rows, cols) array ``m`` as it is: one of its last two
    axes unit-stride, the other stepping over at least the first's extent."""
    it = m.itemsize
    s1, s2 = m.strides[-2], m.strides[-1]
    return (s2 == it and s1 >= m.shape[-1] * it) or (s1 == it and s2 >= m.shape[-2] * it)


def as3(arr: np.ndarray, idx: tuple[str, ...], groups3, stage: Staging | None = None,
        name: str = "", blas: bool = False) -> np.ndarray:
    """View (or, if impossible, copy) of ``arr`` (indexed by ``idx``) as (batch, rows, cols);
    the copy goes to ``stage``'s matrix ``name`` when there is a stage.  ``blas``: a view BLAS
    cannot take (neither matrix axis unit-stride) is copied too.

    Why ``blas``: NumPy's matmul on such a view does not call BLAS as it is; measured on the
    2-core AMD host, trimul's (c, i, k) view of a[i, k, c] (702x702x128, batch unit-stride)
    times its b: 1.3-1.9 s where two staged copies (0.18 s each, on both cores) and the BLAS
    product (0.55 s) take 0.91 s; the cost model priced it as staged already."""
    perm, shape3, viewable = _recipe(arr.shape, arr.strides, idx, tuple(groups3))
    t = arr.transpose(perm)
    if viewable:
        v = t.reshape(shape3)
        if stage is None or not blas or blasable(v):
            return v
    elif stage is None:
        return t.reshape(shape3)        # NumPy's own copy
    return stage.matrix(name, t, shape3)


class KernelGroup:
    """The kernel group anchored at ``anchor`` of ``cand`` (on the workload ``w`` it runs),
    called with the plan's arrays by tensor name: writes the group's result in place."""

    def __init__(self, w: Workload, cand: Candidate, anchor: str, kernel: GemmKernel,
                 stage: Staging | None = None):
        self.w, self.kernel, self.anchor = w, kernel, anchor
        self.stage = stage or Staging()
        parts = kernel_parts(w, cand.fused_pairs, anchor)
        self.form = gemm_form(w.op(parts.contraction))
        self.a, self.b = operand_source(w, parts, "a"), operand_source(w, parts, "b")
        self.out, self.idx = result_of(w, parts.contraction, parts.epilogue)
        self.extras = kernel_transforms(w, parts, lambda t: cand.layout(t, len(w.shapes[t])))[1]
        self._extra_key: tuple | None = None
        self._extra: tuple[np.ndarray, ...] = ()
        self._extra_names = tuple(o.tensor for _, o in self.extras)
        # a pair: the second contraction's operand that is not shared, in the first's index
        # names (pair_of checked that it sits at the same positions), which the kernel's
        # packing interleaves with the first's along the paired axis
        self.second = pair_operands(w, parts.epilogue)[1].tensor if parts.pair else None
        self.paired = "a" if pair_axis(kernel.spec) == "m" else "b"
        # the tensors the call reads or writes through views; while the same array objects
        # come back (the plan's buffers, its reused outputs, inputs passed again), last
        # call's C arguments stand (see _remember)
        self._names = (self.a[0], self.b[0], self.out) + self._extra_names \
            + ((self.second,) if self.second else ())
        self._last: tuple[weakref.ref, ...] = ()
        self._last_prep: Prepared | None = None
        self._last_args: tuple | None = None
        self._tables: tuple[np.ndarray, ...] = ()

    def __call__(self, env: dict[str, np.ndarray], prep: Prepared | None = None) -> None:
        if self._last_args is not None and prep is self._last_prep \
                and all(env[n] is r() for n, r in zip(self._names, self._last)):
            self.kernel.call_with(self._last_args)
            return
        f = self.form
        st, k = self.stage, self.anchor
        # each operand once per binding where it is bound
        a = derived(prep, f"{k}:a", (self.a[0],), st, lambda s: self._operand(env, "a", s))
        b = derived(prep, f"{k}:b", (self.b[0],), st, lambda s: self._operand(env, "b", s))
        gather = tuple(t for side, (src, _) in (("a", self.a), ("b", self.b))
                       if side in self.kernel.spec.gather
                       for t in derived(prep, f"{k}:{side}:tables", (src,), st,
                                        lambda s, side=side: self._tables_of(env, side)))
        second = None if self.second is None else derived(
            prep, f"{k}:second", (self.second,), st,
            lambda s: self._operand(env, self.paired, s, self.second))
        out = env[self.out]
        t, c = view3(out, self.idx, (f.batch, f.m, f.n))
        target = c if c is not None else st.scratch(
            f"{k}:c", _recipe(out.shape, out.strides, self.idx, (f.batch, f.m, f.n))[1],
            a.dtype)
        extra = derived(prep, f"{k}:extra", self._extra_names, st,
                        lambda s: self._extra_arrays(env, s))
        # the offset tables live while the C arguments that point at them may be called again
        self._tables = gather
        args = self.kernel.arguments(a, b, target, f.scale, extra, second,  # scale as alpha
                                     gather)
        self.kernel.call_with(args)
        if c is None:
            st.copy(t, target.reshape(t.shape))
        self._remember(env, prep, (a, b, c) + tuple(extra)
                       + ((second,) if second is not None else ()), args)

    def _remember(self, env, prep: Prepared | None, passed: tuple, args: tuple) -> None:
        """Keep this call's C arguments for the next call with the same arrays, where every
        array passed to C is a view of the tensor it stands for (no staged copy, whose content
        a call must refresh, no result staged for a copy back).
        Why: building them (the operands' views, the checks' key, five addresses through
        ``ndarray.ctypes``) cost more than the kernel's own call on small products: a chain of
        four 2 x 2 kernel groups ran 15.5 us a group beyond a loop group's."""
        arrays = tuple(env[n] for n in self._names)
        views = passed[2] is not None and all(
            np.may_share_memory(x, src) for x, src in zip(passed, arrays))
        # weak references: a plan output the caller dropped must not be kept alive (the
        # executor reuses an output nobody else holds), and a live referent is the very array
        # whose addresses ``args`` holds
        self._last, self._last_prep, self._last_args = \
            (tuple(weakref.ref(x) for x in arrays), prep, args) if views else ((), None, None)

    def _extra_arrays(self, env, stage: Staging) -> tuple[np.ndarray, ...]:
        """The fusions' extra arrays: last call's views again where they view the same memory
        the same way (building them costs ~35 us an array, measured at trimul N=32 where the
        gate's epilogue group took 0.31 ms of which 0.12 ms was its three extras' views); made
        afresh where any array moved, and every call where one is a copy, whose content may
        have changed."""
        arrays = [env[o.tensor] for _, o in self.extras]
        key = tuple((x.__array_interface__["data"][0], x.shape, x.strides) for x in arrays)
        if key == self._extra_key and stage is self.stage:
            return self._extra
        copied: list[str] = []
        extra = transform_arrays(self.w, self.extras, env, stage, self.anchor, copied)
        if stage is self.stage:
            self._extra_key, self._extra = (None, ()) if copied else (key, extra)
        return extra

    def _operand(self, env, side: str, st: Staging, tensor: str | None = None) -> np.ndarray:
        """The kernel's operand ``side`` as (batch, rows, cols) (zero-strided along rows and
        cols where the kernel gathers it: ``spec.gather``, :meth:`_tables_of`); ``tensor``: a
        pair's second operand on that side, read in the first's index names."""
        src, idx, dims = self._side(side)
        if tensor is None and side in self.kernel.spec.gather:
            return gathered_view(env[src], idx, dims)       # read where it lies
        return as3(env[tensor or src], idx, dims, st,
                   f"{self.anchor}:{side}" + ("2" if tensor else ""))

    def _tables_of(self, env, side: str) -> Tables:
        """The offset tables of the gathered operand ``side`` (its rows' and its columns')."""
        src, idx, dims = self._side(side)
        return offset_tables(env[src], idx, dims)

    def _side(self, side: str):
        """The tensor the kernel packs as operand ``side``, its subscript, and its (batch,
        rows, cols) index groups."""
        f = self.form
        src, idx = self.a if side == "a" else self.b
        return src, idx, (f.batch, f.m, f.k) if side == "a" else (f.batch, f.k, f.n)
