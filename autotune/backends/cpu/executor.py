"""Runs a candidate on the CPU: compiled loop groups through ctypes, library GEMMs through NumPy.

Materialized intermediates live in buffers allocated once per compiled plan, each stored in the
candidate's layout (``storage = logical.transpose(perm)``); program outputs are fresh arrays
unless the caller dropped the previous result, so results a caller holds are never overwritten.
"""
from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, Candidate
from search_spaces.gemm import broadcast_form, gemm_form, operand_groups
from search_spaces.partition import Group, groups, materialized
from search_spaces.rewrite import rewritten
from search_spaces.workload import Workload

from autotune import threads
from autotune.backends.base import (WARM_UP_S, Arrays, BufferPool, Cutoff, group_medians,
                                    timed_runs, warm_up)
from autotune.backends.buffers import aligned_empty, held, in_layout, owner_refs
from autotune.backends.cpu.binding import CpuBoundPlan, Prepared, derived
from autotune.backends.cpu.codegen import generate_units
from autotune.backends.cpu.compiler import (  # noqa: F401  (the names callers import here)
    CFLAGS, KERNEL_OPT, LIBMVEC_TANH, LOOP_OPT, CompileError, _libmvec_flags, compile_all,
    compile_source, load_gemm_kernel)
from autotune.backends.cpu.gemm_call import kernel_spec
from autotune.backends.cpu.gemm_driver import kernel_source
from autotune.backends.cpu.kernel_group import KernelGroup, as3, blasable, view3
from autotune.backends.cpu.stacked import StackedGemm
from autotune.backends.cpu.staging import Staging


# A checked first call shorter than this is followed by one more before any sample is taken
# (see CompiledPlan.timed_call); longer ones are their own sample, their one-time costs under 1 %.
FIRST_CALL_WARM_BELOW_S = 0.2
# A checked first call that allocated staging matrices is not steady-state when faulting them in
# took a noticeable part of it: trimul N=702's unfused plan staged three 252 MB matrices, 2.27 s
# on its first call and 0.98 s after (~1.7 ns a byte).  A stack's copied weights (5 x 64 KB)
# cost well under a millisecond of a 1.3 s call: re-running such a call cost an N=702 search
# 67 runs, ~90 s.  Past STAGED_SHARE of the call at that rate, the call after it is the sample.
FAULT_S_PER_BYTE = 1.7e-9
STAGED_SHARE = 0.01


threads.warn_if_late()     # the settings the plans need came too late for a runtime


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul`` of (batch, m, k) by (batch, k, n), with a batch of one passed as plain
    matrices: NumPy's stacked path ran a transposed 4096x64 @ 64x4096 operand 2.7x slower
    (99 ms vs 37 ms here) than its two-dimensional path, which hands the transpose to BLAS."""
    if a.shape[0] != 1 or b.shape[0] != 1:      # a batch, or one side broadcast over it
        return np.matmul(a, b, out=out)
    res = np.matmul(a[0], b[0], out=None if out is None else out[0])
    return res[None]


class CompiledPlan:
    """An executable candidate (a :class:`autotune.backends.base.Plan`):
    ``plan(**inputs) -> {output: ndarray}``.

    ``pool``: where buffers come from and go back to on :meth:`release` (a measuring worker's
    :class:`autotune.backends.base.BufferPool`); without one each plan faults in its own.
    """
    warm_up_s: float = WARM_UP_S     # untimed calls after a short checked call (timed_call)

    def __init__(self, w: Workload, cand: Candidate, cache_dir: Path,
                 pool: BufferPool | None = None):
        # the workload the candidate runs: its contraction orders applied (same inputs and
        # outputs; the split statements' intermediates are plan buffers like any other)
        threads.warm_blas()
        w = rewritten(w, cand)
        self.w, self.cand = w, cand
        self.dtype = np.dtype(w.dtype)
        units = generate_units(w, cand)
        # one library per group: a neighbouring candidate recompiles only the groups it changes
        specs = {s.anchor: kernel_spec(w, cand, s.anchor) for s in cand.schedules
                 if s.impl == IMPL_KERNEL}
        libs = compile_all([(src, LOOP_OPT) for src, _ in units]
                           + [(kernel_source(spec), KERNEL_OPT) for spec in specs.values()],
                           cache_dir)
        self.libs = {k.anchor: ctypes.CDLL(str(lib)) for (_, k), lib in zip(units, libs)}
        self.kernels = {k.anchor: k for _, k in units}
        # (load_gemm_kernel finds each kernel compiled: compile_source's cache on disk)
        # staged GEMM operands and results (layouts no view expresses), kept between calls
        self.staging = Staging()
        self.kernel_groups = {a: KernelGroup(w, cand, a, load_gemm_kernel(spec, str(cache_dir)),
                                             self.staging)
                              for a, spec in specs.items()}
        self.groups = groups(w, cand.fused_pairs)
        # each library group's op and matrix form, looked up once (not on every call)
        self._forms = {s.anchor: self._form(w.op(s.anchor))
                       for s in cand.schedules if s.impl == IMPL_LIBRARY}
        self._last_groups: tuple[float, ...] = ()
        self._profile: dict[str, float] = {}
        self.materialized = mats = materialized(w, cand.fused_pairs)
        self.storage: dict[str, np.ndarray] = {}
        self._last_out: dict[str, np.ndarray] = {}
        self.logical: dict[str, np.ndarray] = {}
        self._pool = pool
        inter = sorted(mats - set(w.outputs))
        # one buffer per tensor, but one for each stack of siblings: their results lie one
        # after the other, the stacked GEMM's result matrix (autotune.backends.cpu.stacked)
        stacked = {m for s in cand.stacks for m in s}
        blocks = [(t,) for t in inter if t not in stacked] + list(cand.stacks) \
            + [(o,) for o in w.outputs]
        nbytes = lambda t: int(np.prod(w.shapes[t], dtype=np.int64)) * self.dtype.itemsize
        self._blocks = (pool if pool is not None else BufferPool()).take_all(
            [sum(nbytes(t) for t in b) for b in blocks])
        self._raw = {}
        for b, raw in zip(blocks, self._blocks):
            offsets = np.cumsum([0] + [nbytes(t) for t in b])
            self._raw.update((t, raw[lo:hi]) for t, lo, hi in zip(b, offsets, offsets[1:]))
        for t in inter:
            self._place(t)
        self.stacks = {s[0]: StackedGemm(w, cand, s, self._blocks[blocks.index(s)], self.staging)
                       for s in cand.stacks}
        self._skipped = stacked - set(self.stacks)   # run by their stack's first member
        self._owner: dict[str, int] = {}     # each output's owner_refs when it was made
        for o in w.outputs:
            self._last_out[o] = self._raw[o].view(self.dtype).reshape(w.shapes[o])
            self._owner[o] = owner_refs(self._last_out[o])
        # the buffers' addresses, read once: ``ndarray.ctypes.data`` builds a ctypes object
        # each time (3.3 us here), and a loop group's call passed each of its arguments' anew
        self._addr = {t: a.ctypes.data for t, a in self.storage.items()}
        self.fns = {a: getattr(self.libs[a], k.name) for a, k in self.kernels.items()}
        for f in self.fns.values():
            f.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            f.restype = None

    def _place(self, t: str) -> None:
        shape = self.w.shapes[t]
        self.storage[t], self.logical[t] = in_layout(
            shape, self.cand.layout(t, len(shape)),
            lambda s: self._raw[t].view(self.dtype).reshape(s))

    def release(self) -> None:
        """Give the buffers back to the pool; the plan is unusable afterwards.  An output a
        caller still holds is not given back."""
        self.staging.close()
        if self._pool is None or not self._raw:
            return
        raws = self._blocks
        self.storage, self.logical, self._last_out, self._raw = {}, {}, {}, {}
        self._addr = {}
        # (the kernel groups keep views of the buffers between calls: dropped first)
        self.stacks, self._blocks, self.kernel_groups = {}, [], {}
        self._pool.give([b for b in raws if not held(b)])

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        return self.run(inputs)

    def bind(self, params: Mapping[str, np.ndarray]) -> CpuBoundPlan:
        """This plan with ``params`` (some of its inputs) bound: what depends only on them is
        prepared once (:mod:`autotune.backends.cpu.binding`)."""
        return CpuBoundPlan(self, params)

    def unfoldable(self) -> set[str]:
        """Groups a binding never runs ahead: a stack's members run as one GEMM."""
        return {m for s in self.cand.stacks for m in s}

    def run(self, inputs: Mapping[str, np.ndarray], prep: Prepared | None = None
            ) -> dict[str, np.ndarray]:
        """The outputs for ``inputs``; ``prep``: what a binding prepared (its constant groups'
        arrays, skipped here, and its derived operands)."""
        w = self.w
        env = dict(self.logical)
        storage = dict(self.storage)
        for n, shp in w.inputs:
            if n not in inputs:
                raise ValueError(f"missing input {n!r}")
            a = np.ascontiguousarray(inputs[n], dtype=self.dtype)
            if a.shape != shp:
                raise ValueError(f"input {n!r} has shape {a.shape}, expected {shp}")
            env[n] = storage[n] = a
        if prep is not None and prep.skip:
            env.update(prep.logical)
            storage.update(prep.storage)
        outs = {}
        for o in w.outputs:
            prev = self._last_out.get(o)
            # Reuse last call's output array when nobody holds it or a view of it any more
            # (the dict entry, ``prev`` and getrefcount's argument are its only references, and
            # its memory's owner has no more than when the array was made: NumPy points views
            # at the owner): fresh pages cost a page fault each, 0.1-0.3 s for a 250 MB output.
            # A caller who kept it, or a slice of it, gets a new one.
            if prev is None or sys.getrefcount(prev) > 3 or owner_refs(prev) > self._owner[o]:
                prev = aligned_empty(w.shapes[o], self.dtype)
                self._owner[o] = owner_refs(prev)
            self._last_out[o] = prev
            outs[o] = env[o] = storage[o] = prev
        # each group's seconds, for the learned correction (a clock read per group: ~100 ns
        # against groups of tens of microseconds and more)
        clock = time.perf_counter
        stamps = [clock()]
        skip = prep.skip if prep is not None else ()
        # addresses of the plan's own buffers, less those a binding replaced; the inputs' and
        # outputs' are read once a call, by the first group that passes them
        replaced = prep.storage if prep is not None else {}
        addr = {t: a for t, a in self._addr.items() if t not in replaced}
        for g in self.groups:
            if g.anchor not in skip:
                self.run_group(g, env, storage, prep, addr)
            stamps.append(clock())
        self._last_groups = tuple(b - a for a, b in zip(stamps, stamps[1:]))
        return outs

    def run_group(self, g: Group, env: dict, storage: dict, prep: Prepared | None,
                  addr: dict[str, int] | None = None) -> None:
        """Run one group on the plan's arrays (``env`` logical, ``storage`` as stored);
        ``addr``: the addresses of ``storage``'s arrays known so far (filled in here)."""
        if g.anchor in self.stacks:
            self.stacks[g.anchor](env, prep)
        elif g.anchor in self._skipped:
            pass
        elif self.cand.schedule(g.anchor).impl == IMPL_LIBRARY:
            self._gemm(g.anchor, env, prep)
        elif self.cand.schedule(g.anchor).impl == IMPL_KERNEL:
            self.kernel_groups[g.anchor](env, prep)
        else:
            k = self.kernels[g.anchor]
            addr = {} if addr is None else addr
            vals = []
            for t in k.args:
                a = addr.get(t)
                if a is None:
                    a = addr[t] = storage[t].ctypes.data
                vals.append(a)
            self.fns[g.anchor]((ctypes.c_void_p * len(vals))(*vals))

    def timed_call(self, inputs: dict[str, np.ndarray], warmup: int = 0, repeats: int = 3,
                   check: Callable[[Arrays], bool] | None = None,
                   cutoff: Cutoff = Cutoff()) -> tuple[Arrays, list[float]]:
        """(outputs of the last run, host seconds of the timed runs).  The checked first run
        is a timed sample too (the buffers are pre-faulted, so it is steady-state; one under
        FIRST_CALL_WARM_BELOW_S, or one that allocated staging matrices, is followed by one
        more, which is the sample); when
        ``cutoff`` gives up on it, it is the only one; after ``warmup`` untimed runs the
        repeats stop early once the first two are out of contention (runs under load do
        not count: :func:`autotune.backends.base.timed_runs`)."""
        last: list = [None]
        runs: list[tuple[float, tuple[float, ...]]] = []   # (seconds, each group's seconds)

        def first() -> float | None:
            staged = self.staging.allocated
            t0 = time.perf_counter()
            last[0] = self(**inputs)
            seconds = time.perf_counter() - t0
            if check is not None and not check(last[0]):
                return None
            if (self.staging.allocated - staged) * FAULT_S_PER_BYTE > STAGED_SHARE * seconds:
                # the call allocated (and faulted in) staging matrices, which the pool's
                # buffers are not, and enough of them to show: not steady-state
                return run()
            if seconds < FIRST_CALL_WARM_BELOW_S:
                # a short plan's first call is not steady-state: it is the run that touches
                # its code pages and wakes OpenMP's and BLAS's threads (measured idle, 2 cores,
                # four 4-6 ms gelu_mlp plans: first calls 1-20 % slower than the five after,
                # the order of the gaps between those plans), and the calls after it, for some
                # tens of milliseconds, still pay the host's waking up (WARM_UP_S); the sample
                # is the call after those
                warm_up(lambda: self(**inputs), self.warm_up_s)
                return run()
            runs.append((seconds, self._last_groups))
            return seconds

        def run() -> float:
            last[0] = None     # a run reuses the output arrays only when nobody holds them
            t0 = time.perf_counter()
            last[0] = self(**inputs)
            seconds = time.perf_counter() - t0
            runs.append((seconds, self._last_groups))
            return seconds
        times = timed_runs(first, run, warmup, repeats, cutoff)
        self._profile = group_medians([a.anchor for a in self.groups], runs, times)
        return last[0], times

    def group_seconds(self) -> dict[str, float]:
        """Each group's median seconds (by anchor) over the trusted runs of the last
        :meth:`timed_call`."""
        return dict(self._profile)

    def _form(self, op):
        """(op, matrix form, the operand broadcast over the form's batch or None)."""
        f = gemm_form(op)
        split = broadcast_form(f, op, self.w.shapes,
                               lambda t: self.cand.layout(t, len(self.w.shapes[t])))
        return (op, f, None) if split is None else (op, *split)

    def _gemm(self, name: str, env, prep: Prepared | None = None) -> None:
        op, f, bcast = self._forms[name]
        st = self.staging
        ga, gb, go = operand_groups(f, bcast)
        A = derived(prep, f"{name}:a", (f.a.tensor,), st, lambda s: as3(
            env[f.a.tensor], f.a.idx, ga, s, f"{name}:a", blas=True))
        B = derived(prep, f"{name}:b", (f.b.tensor,), st, lambda s: as3(
            env[f.b.tensor], f.b.idx, gb, s, f"{name}:b", blas=True))
        out = env[name]
        t, O = view3(out, op.parallel, go)
        # NumPy's product has no alpha: the contraction's scale goes on the smallest of the
        # three matrices (outer_product_mean's 1/S over its 67 MB result took 24 ms a call,
        # one thread, where its 1 MB operand takes microseconds)
        scale_c = f.scale != 1.0 and out.size <= min(A.size, B.size)
        if f.scale != 1.0 and not scale_c:
            small, which = (A, "a") if A.size <= B.size else (B, "b")
            scaled = derived(prep, f"{name}:{which}*", ((f.a if which == "a" else f.b).tensor,), st,
                             lambda s: np.multiply(small, self.dtype.type(f.scale), out=s.scratch(
                                 f"{name}:{which}*", small.shape, small.dtype)))
            A, B = (scaled, B) if which == "a" else (A, scaled)
        if O is not None and blasable(O) and O.strides[-1] == O.itemsize:
            _matmul(A, B, O)
        elif O is not None and blasable(O):
            # column-major result: compute its transpose, B^T A^T, straight into it
            _matmul(B.transpose(0, 2, 1), A.transpose(0, 2, 1), O.transpose(0, 2, 1))
        else:
            res = _matmul(A, B, st.scratch(f"{name}:c", (max(A.shape[0], B.shape[0]),
                                                          A.shape[1], B.shape[2]), A.dtype))
            st.copy(t, res.reshape(t.shape))
            O = None
        if scale_c:
            np.multiply(out, self.dtype.type(f.scale), out=out)
