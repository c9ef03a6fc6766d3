"""Loading and calling the generated contraction kernel on NumPy arrays, and the kernel a
candidate's contraction gets.

:class:`GemmKernel` loads a compiled :class:`autotune.backends.cpu.gemm_kernel.KernelSpec`
(``executor.load_gemm_kernel`` compiles it with the loop groups' compiler and flags) and calls it
through ctypes on strided (batch, rows, cols) views: no copies, whatever the strides.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from search_spaces.candidate import Candidate
from search_spaces.kernel_fusion import Epilogue, KernelParts, kernel_parts
from search_spaces.footprint import strides
from search_spaces.gemm import gemm_form, group_size
from search_spaces.kernel_reads import gathered_operands
from search_spaces.kernel import default_params, legalize, pair_params
from search_spaces.workload import Workload
from search_spaces.symmetry import symmetric_kernel

from autotune.backends.cpu.gemm_driver import ENTRY
from autotune.backends.cpu.gemm_kernel import STORE_COLS, STORE_ROWS, KernelSpec, pair_half
from autotune.backends.cpu.gemm_transforms import kernel_transforms
from autotune.backends.cpu.machine import machine_bounds


class GemmKernel:
    """One compiled kernel: ``kernel(a, b, c, alpha, extra)`` sets ``c[i] = epilogue(alpha *
    a[i] @ b[i])`` for 3-d arrays ``a`` (batch, m, k), ``b`` (batch, k, n), ``c`` (batch, m, n)
    of the spec's dtype, in any strides (a batch stride of 0 broadcasts an operand).  ``extra``:
    the arrays the spec's transforms read, in ``spec.args`` order; a 3-d one (over the batch
    and the rows and cols of C, A or B, any strides, 0 to broadcast) hands its strides to the
    kernel as ``x->NAME_b/_r/_c`` (and each batch item sees its own), any other is read as the
    transform indexes it."""

    def __init__(self, spec: KernelSpec, library: Path):
        self.spec = spec
        self.dtype = np.dtype(spec.dtype)
        self.lib = ctypes.CDLL(str(library))
        fn = getattr(self.lib, ENTRY)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_long), ctypes.c_double,
                       ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = None
        self._fn = fn
        self._dims: dict[tuple, ctypes.Array] = {}    # checked shapes and strides -> d

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
                 extra: tuple[np.ndarray, ...] = (), second: np.ndarray | None = None,
                 gather: tuple[np.ndarray, ...] = ()) -> None:
        """For a pair (``spec.pair``), ``second`` is the second contraction's operand on the
        paired axis (the same shape as the first's, ``a`` or ``b``: :func:`pair_axis`), which
        the kernel's packing interleaves with the first's.  ``gather``: for each operand
        ``spec.gather`` names, its offset tables (``gather.gathered_operand``: A's rows and
        K, B's K and columns), the operand itself zero-strided along both."""
        self.call_with(self.arguments(a, b, c, alpha, extra, second, gather))

    def arguments(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
                  extra: tuple[np.ndarray, ...] = (), second: np.ndarray | None = None,
                  gather: tuple[np.ndarray, ...] = ()) -> tuple:
        """The C call's arguments for these arrays (checked; ValueError where the kernel cannot
        take them): :meth:`call_with` runs the kernel on them again while the arrays live."""
        tail = () if second is None else (second,)
        key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, c.dtype, c.shape,
               c.strides, c.flags.writeable,
               tuple((x.dtype, x.shape, x.strides) for x in extra + tail),
               tuple((g.dtype, g.shape, g.strides) for g in gather))
        dims = self._dims.get(key)
        if dims is None:
            # checked and built once per set of shapes and strides: both took ~25 us a call,
            # 3x the kernel's own call on a tiny product (the 2 x 2 calibration probe: 7.6 us
            # in C, 33 us through here)
            if len(self._dims) >= 64:
                self._dims.clear()
            self._check_gather(a, b, gather)
            dims = self._dims[key] = self._checked_dims(a, b, c, extra, second)
        ptrs = [x.ctypes.data for x in extra + tail + tuple(gather)]
        xs = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
        return (a.ctypes.data, b.ctypes.data, c.ctypes.data, dims, float(alpha), xs)

    def call_with(self, args: tuple) -> None:
        """The kernel on :meth:`arguments`' result (the arrays it was made from still alive
        and unmoved: the caller's word)."""
        self._fn(*args)

    def _check_gather(self, a: np.ndarray, b: np.ndarray, gather: tuple[np.ndarray, ...]):
        """ValueError unless ``gather`` holds the tables the spec reads, each a contiguous
        int64 table as long as its operand's axis, the operand zero-strided along both."""
        want = [(name, arr, n) for name, arr in (("a", a), ("b", b)) if name in self.spec.gather
                for n in arr.shape[1:]]
        if len(gather) != len(want):
            raise ValueError(f"expected {len(want)} offset tables for the gathered operands "
                             f"{self.spec.gather!r}, got {len(gather)}")
        for (name, arr, n), t in zip(want, gather):
            if arr.strides[1:] != (0, 0):
                raise ValueError(f"{name}: a gathered operand is zero-strided along its rows "
                                 f"and columns (its tables address them), got {arr.strides}")
            if t.dtype != np.int64 or t.shape != (n,) or not t.flags.c_contiguous:
                raise ValueError(f"{name}: an offset table is a contiguous int64 array of "
                                 f"{n} entries, got {t.dtype} {t.shape}")

    def _checked_dims(self, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                      extra: tuple[np.ndarray, ...], second: np.ndarray | None):
        """The kernel's ``d`` argument for arrays of these shapes and strides (ValueError when
        the kernel cannot take them)."""
        it = self.dtype.itemsize
        along = pair_axis(self.spec)          # "m", "n" or "" (no pair)
        if bool(along) != (second is not None):
            raise ValueError("a pair's kernel needs the second contraction's operand (second=)"
                             if along else "only a pair's kernel takes a second operand")
        named = (("a", a), ("b", b), ("c", c)) + ((("second", second),) if along else ())
        for name, arr in named:
            if arr.dtype != self.dtype or arr.ndim != 3:
                raise ValueError(f"{name}: expected a 3-d {self.dtype} array, got "
                                 f"{arr.ndim}-d {arr.dtype}")
            if any(s % it for s in arr.strides):
                raise ValueError(f"{name}: strides {arr.strides} are not whole elements")
        nb, m, k = a.shape
        if b.shape[1] != k or [m, b.shape[2]] != list(c.shape[1:]) \
                or b.shape[0] not in (nb, 1) or a.shape[0] != c.shape[0]:
            raise ValueError(f"shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
        first = a if along == "m" else b
        if along and second.shape[1:] != first.shape[1:] or \
                along and second.shape[0] not in (first.shape[0], 1):
            raise ValueError(f"a pair's second operand {second.shape} is not shaped as the "
                             f"first's {first.shape}")
        if along and k > self.spec.params.kc:
            raise ValueError(f"a pair takes K in one slice: K {k} > KC {self.spec.params.kc}")
        if not c.flags.writeable:
            raise ValueError("c is read-only")
        if len(extra) != len(self.spec.args):
            raise ValueError(f"expected {len(self.spec.args)} extra arrays, got {len(extra)}")
        st = lambda arr: [s // it for s in arr.strides]
        sb = st(b)
        if b.shape[0] == 1:
            sb[0] = 0
        xst = []
        for x in extra:
            if x.dtype != self.dtype or any(s % it for s in x.strides):
                raise ValueError(f"extra arrays must be {self.dtype} in whole-element strides")
            # over (batch, m, n) for an epilogue, (batch, m, k) or (batch, k, n) for a prologue;
            # or (outer batch, inner batch, ...): a batch of two indices that no one stride
            # walks (a tensor broadcast along one of them), item b at (b / inner, b % inner)
            if x.ndim not in (3, 4):
                xst += [1, 0, 0, 0, 0]
                continue
            batch = x.shape[0] if x.ndim == 3 else x.shape[0] * x.shape[1]
            if batch not in (nb, 1) or x.shape[-2:] not in (c.shape[1:], (m, k), (k, b.shape[2])):
                raise ValueError(f"extra array of shape {x.shape} fits no operand of "
                                 f"{a.shape} @ {b.shape}")
            sx = st(x)
            if x.ndim == 3:
                xst += [1, 0 if x.shape[0] == 1 else sx[0], 0, *sx[1:]]
            else:
                xst += [x.shape[1], *sx]
        # a pair's kernel runs over twice C's extent along the paired axis, in whole tiles
        h = pair_half(self.spec)
        kern = [-(-e // h) * 2 * h if along == ax else e for ax, e in zip("mn", c.shape[1:])]
        tail = []
        if along:
            s2 = st(second)
            if second.shape[0] == 1:
                s2[0] = 0
            tail = [c.shape[1] if along == "m" else c.shape[2], *s2]
        return (ctypes.c_long * (13 + len(xst) + len(tail)))(nb, *kern, k, *st(a), *sb,
                                                             *st(c), *xst, *tail)


def pair_axis(spec: KernelSpec) -> str:
    """The contraction's axis ("m" or "n") a pair's kernel axis is ("" for no pair): the
    kernel's rows are m in ``rows`` store, n in ``cols``."""
    if not spec.pair:
        return ""
    return "m" if (spec.pair == "rows") == (spec.store == STORE_ROWS) else "n"


def store_for(c: np.ndarray) -> str:
    """The store orientation that writes ``c`` (batch, m, n) with vector stores where it can:
    along m when only m is unit-stride, else along n."""
    it = c.itemsize
    return STORE_COLS if c.strides[2] != it and c.strides[1] == it and c.shape[1] > 1 \
        else STORE_ROWS


def kernel_spec(w: Workload, cand: Candidate, anchor: str) -> KernelSpec:
    """The kernel that the group anchored at ``anchor`` runs: its parameters, the workload's
    dtype, its fusions (:mod:`search_spaces.kernel_fusion`), and the store orientation the
    result's layout wants (``cols`` when the m index is the unit-stride one, as in a
    channel-major intermediate).  The result is the epilogue's output where there is one."""
    parts = kernel_parts(w, cand.fused_pairs, anchor)
    p, epi = parts.contraction, parts.epilogue
    op = w.op(p)
    form = gemm_form(op)
    out, idx = result_of(w, p, epi)
    shape = w.shapes[out]
    st = dict(zip(idx, strides(shape, cand.layout(out, len(shape)))))
    ext = dict(zip(op.parallel, op.out_shape))

    def inner(group) -> int:
        live = [i for i in group if ext[i] > 1]
        return st[live[-1]] if live else 0
    m_stride, n_stride = inner(form.m), inner(form.n)
    rows = [i for i in form.m if ext[i] > 1]
    store = STORE_COLS if m_stride == 1 and n_stride != 1 and rows else STORE_ROWS
    params = cand.schedule(anchor).kernel   # None only in a hand-written candidate
    item = 4 if w.dtype == "float32" else 8
    # legal whatever the candidate says (a hand-written or edited one may give any blocks)
    params = legalize(params, item) if params is not None \
        else default_params(machine_bounds(), item)
    hooks, _ = kernel_transforms(w, parts, lambda t: cand.layout(t, len(w.shapes[t])))
    pair = ""
    if parts.pair:
        params = pair_params(params, group_size(op, form.k), item)
        # the paired contraction axis is the one the non-shared operand brings; as a kernel
        # axis, rows in ``rows`` store are m
        along = "n" if parts.epilogue.shared == "a" else "m"
        pair = "rows" if (along == "m") == (store == STORE_ROWS) else "cols"
    return KernelSpec(params, w.dtype, store, **hooks, pair=pair,
                      sym=symmetric_kernel(w, parts), gather=gathered_operands(
                          w, lambda t: cand.layout(t, len(w.shapes[t])), parts))


def result_of(w: Workload, p: str, epi: Epilogue | None) -> tuple[str, tuple[str, ...]]:
    """The tensor a kernel group stores (the contraction's result, or its epilogue's) and its
    subscript in the contraction's index names."""
    if epi is None:
        return p, w.op(p).parallel
    to_p = epi.to_contraction(w)
    return epi.consumer, tuple(to_p[i] for i in w.op(epi.consumer).parallel)


def operand_source(w: Workload, parts: KernelParts, which: str) -> tuple[str, tuple[str, ...]]:
    """The tensor the kernel packs as the contraction's operand ``which`` ("a" or "b"): the
    operand itself, or its prologue's main input; with its subscript in the contraction's
    index names."""
    form = gemm_form(w.op(parts.contraction))
    pro = parts.prologue_a if which == "a" else parts.prologue_b
    if pro is None:
        read = form.a if which == "a" else form.b
        return read.tensor, read.idx
    to_p = pro.to_contraction(w)
    return pro.main, tuple(to_p[i] for i in pro.main_idx)
