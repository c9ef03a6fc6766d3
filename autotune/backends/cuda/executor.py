"""Runs a candidate on an NVIDIA GPU: generated loop-group kernels (NVRTC through CuPy) and
library contractions through cuBLAS, in the candidate's layouts.

``CudaPlan(w, cand, cache_dir)`` has the call contract of :class:`autotune.backends.cpu.executor.CompiledPlan`:
``plan(**inputs) -> {output: numpy array}`` (inputs may also be CuPy arrays already on the
device).  It synchronizes the device before returning, so a caller's ``perf_counter`` around a
call measures the whole run (host transfers included); :meth:`CudaPlan.timed_call` times the
device work alone with CUDA events (inputs uploaded once, warm-up, median of repeats).

Materialized intermediates and the outputs live in device buffers allocated once per plan,
each stored in the candidate's layout (``storage = logical.transpose(perm)``).  A library group
is one cuBLAS GEMM (:mod:`autotune.backends.cuda.library`), a stack of siblings one GEMM whose
result is its members' storage (:mod:`autotune.backends.cuda.stacked`); in the group's
``precision`` (search_spaces.precision), by default the workload's (the plan's ``precision``
attribute: "fp32", "tf32" or "fp64"): "3xtf32" splits both operands into TF32 high and low
parts (a small kernel) and sums three TF32 tensor-core products, the small ones first, into
the float32 result.  A run allocates nothing after the first: every copy and split buffer is
kept, host inputs go to kept device buffers, and from the second run with inputs at the same
addresses the whole plan is one CUDA graph (:mod:`autotune.backends.cuda.graphs`;
``graphs=False``: every run eager).

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

from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, IMPL_LOOP, Candidate
from search_spaces.partition import Group, groups, materialized
from search_spaces.precision import default_precision
from search_spaces.rewrite import rewritten
from search_spaces.siblings import member_offsets
from search_spaces.workload import Workload

from autotune.backends.base import Arrays, Cutoff, group_medians, timed_runs
from autotune.backends.buffers import in_layout
from autotune.backends.cuda.binding import CudaBoundPlan
from autotune.backends.cuda.codegen import check_limits, generate_cuda
from autotune.backends.cuda.graphs import PlanGraphs
from autotune.backends.cuda.library import LibraryGemm
from autotune.backends.cuda.runtime import CupyRuntime
from autotune.backends.cuda.stacked import CudaStackedGemm

precision_of = default_precision     # the plan-wide default (bench scripts, `explain`)


# ---- the plan ------------------------------------------------------------------------------------
class CudaPlan:
    """An executable candidate on the GPU (a :class:`autotune.backends.base.Plan`):
    ``plan(**inputs) -> {output: numpy array}``.

    Raises :class:`autotune.backends.cuda.codegen.TileTooLarge` before compiling anything when a kernel's
    footprints exceed the device's shared memory per block, and
    :class:`autotune.backends.cuda.runtime.CudaUnavailable` without CuPy or a device.
    """

    def __init__(self, w: Workload, cand: Candidate, cache_dir: Path, runtime=None,
                 block: int = 256, graphs: bool = True):
        unsupported = sorted({s.impl for s in cand.schedules}
                             - {IMPL_LOOP, IMPL_LIBRARY, IMPL_KERNEL})
        if unsupported:
            raise ValueError(f"plan {cand.name or cand.key[:12]}: the CUDA backend does not run "
                             f"impl {', '.join(map(repr, unsupported))} (a plan from another "
                             f"backend's search?): search with --device cuda")
        w = rewritten(w, cand)          # the candidate's contraction orders applied
        self.w, self.cand = w, cand
        self.rt = runtime if runtime is not None else CupyRuntime()
        self.dtype = np.dtype(w.dtype)
        self.precision = default_precision(w)
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
        # a stack's members lie one after the other in one buffer: its GEMM's result matrix
        place = {}
        for members in cand.stacks:
            at = member_offsets(w, members)
            block = xp.empty(sum(math.prod(w.shapes[m]) for m in members), dtype=self.dtype)
            place.update((m, (block, at[m], math.prod(w.shapes[m]))) for m in members)
        for t in sorted(mats | set(w.outputs)):
            shape = w.shapes[t]
            alloc = (lambda s: xp.empty(s, dtype=self.dtype)) if t not in place else \
                (lambda s, b=place[t]: b[0][b[1]:b[1] + b[2]].reshape(s))
            self.storage[t], self.logical[t] = in_layout(shape, cand.layout(t, len(shape)),
                                                         alloc)
        self.stacks = {s[0]: CudaStackedGemm(w, cand, s, place[s[0]][0], self.rt)
                       for s in cand.stacks}
        self.library = {s.anchor: LibraryGemm(w, s.anchor, self.rt, s.precision or
                                              self.precision, self.dtype)
                        for s in cand.schedules
                        if s.impl == IMPL_LIBRARY and not cand.stack(s.anchor)}
        # the split's TF32 parts: one set of buffers for every 3xTF32 GEMM (they run one
        # after another on the stream), sized once so a captured graph's addresses hold
        split = [n for g in [*self.library.values(), *self.stacks.values()]
                 if g.precision == "3xtf32" for n in g.operand_sizes()]
        self._split = tuple(xp.empty(max(split), dtype=self.dtype) for _ in range(4)) \
            if split else None
        self._host_inputs: dict[str, object] = {}    # device copies of host inputs, kept
        self.graphs = PlanGraphs(self.rt, graphs)
        self._profile: dict[str, float] = {}

    # ---- running ---------------------------------------------------------------------------
    def upload(self, inputs: dict) -> dict:
        """The inputs on the device, contiguous, in the workload's dtype (device arrays that
        already are pass through)."""
        rt, out = self.rt, {}
        for n, shp in self.w.inputs:
            if n not in inputs:
                raise ValueError(f"missing input {n!r}")
            a = inputs[n]
            host = not isinstance(a, rt.ndarray)
            if host:
                a = np.ascontiguousarray(a, dtype=self.dtype)
            if tuple(a.shape) != tuple(shp):
                raise ValueError(f"input {n!r} has shape {tuple(a.shape)}, expected {shp}")
            if host:
                # into a device buffer the plan keeps: the same address on every call, so
                # calls with host inputs replay one graph
                if n not in self._host_inputs:
                    self._host_inputs[n] = rt.xp.empty(shp, dtype=self.dtype)
                rt.put(self._host_inputs[n], a)
                a = self._host_inputs[n]
            elif a.dtype != self.dtype or not a.flags.c_contiguous or rt.address(a) % 16:
                # a fresh array starts on a 16-byte boundary: the tensor-core kernel copies
                # 16 bytes at a time where the storage allows
                a = rt.xp.array(a, dtype=self.dtype, order="C", copy=True)
            out[n] = a
        return out

    def run_device(self, **inputs) -> dict:
        """Run on device-resident (or host) inputs; returns the plan's device output buffers
        (overwritten by the next run) without synchronizing."""
        return self.run_with(inputs, None)

    def run_with(self, inputs, bound: CudaBoundPlan | None,
                 lap: Callable[[], None] | None = None) -> dict:
        """:meth:`run_device`; ``bound``: the binding whose inputs are among ``inputs`` (its
        constant groups' arrays used, those groups skipped); ``lap``: called after each group
        that ran (a timer's mark on the stream)."""
        storage = dict(self.storage)
        env = dict(self.logical)
        dev = self.upload(inputs)
        for n, a in dev.items():
            env[n] = storage[n] = a
        skip = ()
        if bound is not None:
            env.update(bound.logical)
            storage.update(bound.storage)
            skip = bound.skip

        def issue() -> None:
            for g in self.groups:
                if g.anchor not in skip:
                    self.run_group(g, env, storage, bound)
                    if lap is not None:
                        lap()
        # one graph for the whole run where it was seen before (a timer's laps need the
        # groups one by one)
        key = (tuple(self.rt.address(a) for a in dev.values()),
               bound.token if bound is not None else 0)
        if lap is not None or not self.graphs.run(key, issue):
            issue()
        return {o: self.logical[o] for o in self.w.outputs}

    def run_group(self, g: Group, env: dict, storage: dict,
                  bound: CudaBoundPlan | None = None) -> None:
        """One group on the device; ``bound``: the binding whose prepared stack operands it
        uses."""
        stack = self.cand.stack(g.anchor)
        if stack:
            if stack[0] == g.anchor:     # the first member runs the stack, the others nothing
                self.stacks[g.anchor].run(env, bound.stack_x.get(g.anchor) if bound else None,
                                          self._split)
        elif g.anchor in self.library:
            self.library[g.anchor].run(env, self._split)
        else:
            k = self.kernels[g.anchor]
            self.rt.launch(self.fns[k.name], k, [storage[t] for t in k.args])

    def unfoldable(self) -> set[str]:
        """Groups a binding never runs ahead: a stack's members run as one GEMM."""
        return {m for s in self.cand.stacks for m in s}

    def bind(self, params) -> CudaBoundPlan:
        """This plan with ``params`` bound (autotune.backends.bound)."""
        return CudaBoundPlan(self, params)

    def __call__(self, **inputs) -> dict[str, np.ndarray]:
        outs = self.run_device(**inputs)
        host = {o: self.rt.to_host(a) for o, a in outs.items()}
        self.rt.synchronize()
        return host

    def group_seconds(self) -> dict[str, float]:
        """Each group's median seconds (by anchor) over the trusted runs of the last
        :meth:`timed_call`: the time between CUDA events recorded on the stream after each
        group (the previous group's end to this one's, host gaps between them included)."""
        return dict(self._profile)

    def timed_call(self, inputs: dict, warmup: int = 1, repeats: int = 3,
                   check: Callable[[Arrays], bool] | None = None,
                   cutoff: Cutoff = Cutoff()) -> tuple[dict[str, np.ndarray], list[float]]:
        """(outputs of the first run, device times of the timed runs in seconds): inputs are
        uploaded once; the first run (it loads the kernels) is checked and not timed; after
        ``warmup`` untimed runs each run is timed with CUDA events, and the runs stop early as
        the CPU plan's do (:func:`autotune.backends.base.timed_runs`): a first timed run past
        the search's give-up factor times its best is the only one."""
        dev = self.upload(inputs)
        if self.graphs.enabled:
            self.run_device(**dev)      # eager: loads the kernels, plans and allocates
        # checked: with graphs, the run that captures and replays the graph the runs time
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
        if times:        # the groups one by one, between events, in one more run
            with self.rt.timer() as t:
                self.run_with(dev, None, t.lap)
            self._profile = group_medians([g.anchor for g in self.groups],
                                          [(t.seconds, t.laps)], [t.seconds])
        self.rt.synchronize()
        return outs, times

    def release(self) -> None:
        """Drop the device buffers (back to CuPy's memory pool); the plan is unusable
        afterwards."""
        self.storage, self.logical, self.library, self.stacks = {}, {}, {}, {}
        self._split, self._host_inputs = None, {}
        self.graphs.clear()

    def median_time(self, inputs: dict, warmup: int = 1, repeats: int = 3) -> float:
        return statistics.median(self.timed_call(inputs, warmup, repeats)[1])
