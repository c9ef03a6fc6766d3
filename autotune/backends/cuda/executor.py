"""Runs a candidate on an NVIDIA GPU: generated loop-group kernels (NVRTC through CuPy) and
library contractions through cuBLAS, in the candidate's layouts.

``CudaPlan(w, cand, cache_dir)`` has the call contract of :class:`autotune.backends.cpu.executor.CompiledPlan`:
``plan(**inputs) -> {output: numpy array}`` (inputs may also be CuPy arrays already on the
device).  It synchronizes the device before returning, so a caller's ``perf_counter`` around a
call measures the whole run (host transfers included); :meth:`CudaPlan.timed_call` times the
device work alone with CUDA events (inputs uploaded once, warm-up, median of repeats).

Materialized intermediates and the outputs live in device buffers allocated once per plan,
each stored in the candidate's layout (``storage = logical.transpose(perm)``).  A library group
is one ``cublasGemmStridedBatchedEx`` call on strided views of those buffers (no copies when
the layouts allow a matrix view; otherwise the operand is copied to a contiguous one first), with
TF32 tensor cores only when the workload's tolerance admits it (``rtol >= 1e-3``): the plan's
``precision`` attribute says which ("fp32", "tf32" or "fp64").

The device is a runtime: :class:`autotune.backends.cuda.runtime.CupyRuntime` (CuPy, imported
lazily) or :class:`autotune.backends.cuda.emulator.HostEmulator`, which runs the same generated
CUDA source on the CPU (compiled as C++ with a small header that maps the CUDA built-ins, a few
threads per block with a real barrier for ``__syncthreads``) and the same cuBLAS argument lists
(:mod:`autotune.backends.cuda.gemm`) through a NumPy model of ``gemmStridedBatched``: the tests
check the backend's results against the reference without a GPU.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Callable

import numpy as np

from search_spaces.candidate import IMPL_LIBRARY, Candidate
from search_spaces.gemm import gemm_form, group_size
from search_spaces.partition import Group, groups, materialized
from search_spaces.rewrite import rewritten
from search_spaces.workload import Workload

from autotune.backends.base import Arrays, Cutoff, timed_runs
from autotune.backends.buffers import in_layout
from autotune.backends.cuda.binding import CudaBoundPlan
from autotune.backends.cuda.codegen import check_limits, generate_cuda
from autotune.backends.cuda.gemm import GemmCall, Mat, mat3, plan_gemm
from autotune.backends.cuda.runtime import CupyRuntime

TF32_RTOL = 1e-3           # a tolerance this loose admits TF32 tensor-core GEMMs


def precision_of(w: Workload) -> str:
    """"tf32" when the workload's tolerance admits TF32 GEMMs, else its own type."""
    if w.dtype == "float64":
        return "fp64"
    return "tf32" if w.rtol >= TF32_RTOL else "fp32"


# ---- the plan ------------------------------------------------------------------------------------
class CudaPlan:
    """An executable candidate on the GPU (a :class:`autotune.backends.base.Plan`):
    ``plan(**inputs) -> {output: numpy array}``.

    Raises :class:`autotune.backends.cuda.codegen.TileTooLarge` before compiling anything when a kernel's
    footprints exceed the device's shared memory per block, and
    :class:`autotune.backends.cuda.runtime.CudaUnavailable` without CuPy or a device.
    """

    def __init__(self, w: Workload, cand: Candidate, cache_dir: Path, runtime=None,
                 block: int = 256):
        w = rewritten(w, cand)          # the candidate's contraction orders applied
        self.w, self.cand = w, cand
        self.rt = runtime if runtime is not None else CupyRuntime()
        self.dtype = np.dtype(w.dtype)
        self.precision = precision_of(w)
        src, kernels = generate_cuda(w, cand, block=block)
        check_limits(kernels, self.rt.smem_limit, self.rt.device_name)
        self.source = src
        self.kernels = {k.anchor: k for k in kernels}
        self.fns = self.rt.compile(src, kernels, Path(cache_dir)) if kernels else {}
        self.kernel_attrs = {k.name: self.rt.attributes(self.fns[k.name]) for k in kernels}
        self.groups = groups(w, cand.fused_pairs)
        self.materialized = mats = materialized(w, cand.fused_pairs)
        xp = self.rt.xp
        self.storage: dict[str, object] = {}
        self.logical: dict[str, object] = {}
        for t in sorted(mats | set(w.outputs)):
            shape = w.shapes[t]
            self.storage[t], self.logical[t] = in_layout(
                shape, cand.layout(t, len(shape)), lambda s: xp.empty(s, dtype=self.dtype))
        self._gemm_plans: dict[str, tuple] = {}

    # ---- running ---------------------------------------------------------------------------
    def upload(self, inputs: dict) -> dict:
        """The inputs on the device, contiguous, in the workload's dtype (device arrays that
        already are pass through)."""
        rt, out = self.rt, {}
        for n, shp in self.w.inputs:
            if n not in inputs:
                raise ValueError(f"missing input {n!r}")
            a = inputs[n]
            if isinstance(a, np.ndarray) or not isinstance(a, rt.ndarray):
                a = np.ascontiguousarray(a, dtype=self.dtype)
            a = rt.to_device(a)
            if tuple(a.shape) != tuple(shp):
                raise ValueError(f"input {n!r} has shape {tuple(a.shape)}, expected {shp}")
            if a.dtype != self.dtype or not a.flags.c_contiguous:
                a = rt.xp.ascontiguousarray(a, dtype=self.dtype)
            out[n] = a
        return out

    def run_device(self, **inputs) -> dict:
        """Run on device-resident (or host) inputs; returns the plan's device output buffers
        (overwritten by the next run) without synchronizing."""
        return self.run_with(inputs, None)

    def run_with(self, inputs, bound: CudaBoundPlan | None) -> dict:
        """:meth:`run_device`; ``bound``: the binding whose inputs are among ``inputs`` (its
        constant groups' arrays used, those groups skipped)."""
        storage = dict(self.storage)
        env = dict(self.logical)
        for n, a in self.upload(inputs).items():
            env[n] = storage[n] = a
        skip = ()
        if bound is not None:
            env.update(bound.logical)
            storage.update(bound.storage)
            skip = bound.skip
        for g in self.groups:
            if g.anchor not in skip:
                self.run_group(g, env, storage)
        return {o: self.logical[o] for o in self.w.outputs}

    def run_group(self, g: Group, env: dict, storage: dict) -> None:
        if self.cand.schedule(g.anchor).impl == IMPL_LIBRARY:
            self._gemm(g.anchor, env)
        else:
            k = self.kernels[g.anchor]
            self.rt.launch(self.fns[k.name], k, [storage[t] for t in k.args])

    def bind(self, params) -> CudaBoundPlan:
        """This plan with ``params`` bound (autotune.backends.bound)."""
        return CudaBoundPlan(self, params)

    def __call__(self, **inputs) -> dict[str, np.ndarray]:
        outs = self.run_device(**inputs)
        host = {o: self.rt.to_host(a) for o, a in outs.items()}
        self.rt.synchronize()
        return host

    def group_seconds(self) -> dict[str, float]:
        """Not timed group by group on the GPU yet (it would take an event pair per group
        and run): the learned correction fits such trials on their totals."""
        return {}

    def timed_call(self, inputs: dict, warmup: int = 1, repeats: int = 3,
                   check: Callable[[Arrays], bool] | None = None,
                   cutoff: Cutoff = Cutoff()) -> tuple[dict[str, np.ndarray], list[float]]:
        """(outputs of the first run, device times of the timed runs in seconds): inputs are
        uploaded once; the first run (it loads the kernels) is checked and not timed; after
        ``warmup`` untimed runs each run is timed with CUDA events, and the runs stop early as
        the CPU plan's do (:func:`autotune.backends.base.timed_runs`): a first timed run past
        the search's give-up factor times its best is the only one."""
        dev = self.upload(inputs)
        outs = {o: self.rt.to_host(a) for o, a in self.run_device(**dev).items()}
        if check is not None and not check(outs):
            return outs, []
        for _ in range(warmup):
            self.run_device(**dev)

        def run() -> float:
            with self.rt.timer() as t:
                self.run_device(**dev)
            return t.seconds
        times = timed_runs(run, run, 0, repeats, cutoff)
        self.rt.synchronize()
        return outs, times

    def release(self) -> None:
        """Drop the device buffers (back to CuPy's memory pool); the plan is unusable
        afterwards."""
        self.storage, self.logical, self._gemm_plans = {}, {}, {}

    def median_time(self, inputs: dict, warmup: int = 1, repeats: int = 3) -> float:
        return statistics.median(self.timed_call(inputs, warmup, repeats)[1])

    # ---- library GEMMs ---------------------------------------------------------------------
    def _gemm(self, name: str, env) -> None:
        xp = self.rt.xp
        op = self.w.op(name)
        f = gemm_form(op)
        ga, gb, go = (f.batch, f.m, f.k), (f.batch, f.k, f.n), (f.batch, f.m, f.n)
        A, B, O = env[f.a.tensor], env[f.b.tensor], env[name]

        def contiguous(arr, idx, grp):
            order = [idx.index(i) for g in grp for i in g]
            sizes = [math.prod(arr.shape[idx.index(i)] for i in g) for g in grp]
            return xp.ascontiguousarray(arr.transpose(order)).reshape(sizes)

        def desc(arr, idx, grp):
            got = mat3(arr, idx, grp)
            return got[0] if got else None

        da, db, dc = desc(A, f.a.idx, ga), desc(B, f.b.idx, gb), desc(O, op.parallel, go)
        batch = group_size(op, f.batch)
        a_buf, b_buf, c_buf = A, B, O
        tmp_out = None
        for _ in range(4):
            call = plan_gemm(da, db, dc, batch) if None not in (da, db, dc) else \
                ("A" if da is None else "B" if db is None else "C")
            if isinstance(call, GemmCall):
                break
            if call == "A":
                a_buf = contiguous(A, f.a.idx, ga)
                da = Mat(a_buf.shape[1], a_buf.shape[2], a_buf.shape[2], 1,
                         a_buf.shape[1] * a_buf.shape[2] if batch > 1 else 0)
            elif call == "B":
                b_buf = contiguous(B, f.b.idx, gb)
                db = Mat(b_buf.shape[1], b_buf.shape[2], b_buf.shape[2], 1,
                         b_buf.shape[1] * b_buf.shape[2] if batch > 1 else 0)
            else:
                m_, n_ = group_size(op, f.m), group_size(op, f.n)
                tmp_out = c_buf = xp.empty((batch, m_, n_), dtype=self.dtype)
                dc = Mat(m_, n_, n_, 1, m_ * n_ if batch > 1 else 0)
        else:
            raise RuntimeError(f"no cuBLAS argument list for {name}")
        bufs = {"A": a_buf, "B": b_buf}
        # every array here starts at its buffer's first element (transposes of storage, or
        # fresh contiguous copies): its data pointer is the buffer's
        self.rt.gemm(call, bufs[call.first], bufs[call.second], c_buf, f.scale, self.precision)
        if tmp_out is not None:
            order = [op.parallel.index(i) for g in go for i in g]
            t = O.transpose(order)
            t[...] = tmp_out.reshape(t.shape)

