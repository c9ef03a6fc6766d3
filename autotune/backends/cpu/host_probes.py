"""Calibration probes through the executor's own Python path: the library GEMM rate by shape
class (NumPy's BLAS through the executor's GEMM call) and the fixed cost of a group's call, from
tiny compiled plans.  Each returns the best of its runs after a warm-up
(``probes.best_times``); figures set against each other run interleaved.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from costmodel.rates import BATCHED_SMALL, SKINNY_K, SKINNY_MN
from search_spaces import parse_workload
from search_spaces.candidate import IMPL_KERNEL
from search_spaces.partition import groups
from search_spaces.plans import named_plan
from search_spaces.serial import loop_group_serial
from search_spaces.space import SearchSpace, TileBounds

from autotune.backends.buffers import aligned_empty
from autotune.backends.cpu.executor import CompiledPlan, _matmul
from autotune.backends.cpu.machine import machine_bounds
from autotune.backends.cpu.probes import best_time, best_times

# (batch, M, N, K) at which each GEMM shape class is measured: the class's defining dim at its
# measuring point in costmodel.rates, the others where no other class limits them
GEMM_SHAPES = {
    "skinny_k": (1, 32768, SKINNY_K[0], SKINNY_K[0]),          # N = 128: skinny_mn's end
    "skinny_mn": (1, 4096, SKINNY_MN[0], SKINNY_K[1]),
    "batched_small": (256, BATCHED_SMALL[0], BATCHED_SMALL[0], BATCHED_SMALL[0]),
}
CALLS = 20             # plan calls per timed run of the launch probe


def gemm_flops(shapes: dict[str, tuple[int, int, int, int]], repeats: int) -> dict[str, float]:
    """flop/s of the executor's GEMM call on float32 ``batch`` x (M x K) @ (K x N), for each
    named shape, interleaved (the rates are set against each other)."""
    rng = np.random.default_rng(0)

    def run(shape):
        b, m, n, k = shape
        a = rng.standard_normal((b, m, k), dtype=np.float32)
        bm = rng.standard_normal((b, k, n), dtype=np.float32)
        c = aligned_empty((b, m, n), np.float32)      # as a plan's outputs are
        return lambda r: _matmul(a, bm, c)
    t = best_times({name: run(shape) for name, shape in shapes.items()}, repeats)
    return {name: 2.0 * math.prod(shapes[name]) / t[name] for name in shapes}


def numpy_copy_bandwidth(src: np.ndarray, dst: np.ndarray, repeats: int) -> float:
    """bytes/s (read plus written) of ``np.copyto`` between the two arrays."""
    t = best_time(lambda r: np.copyto(dst, src), repeats)
    return 2.0 * src.size * src.itemsize / t


def _chain(name: str, ops: int, contraction: bool):
    """A program of ``ops`` ops over 2 x 2 matrices, each reading the previous one: matrix
    products by ``w`` (library GEMMs, unfused) or elementwise updates (loop groups)."""
    names = ["a"] + [f"t{i}" for i in range(ops)]
    body = "".join(
        f"{names[i + 1]}[i,j] += {names[i]}[i,k] * w[k,j]\n" if contraction else
        f"{names[i + 1]}[i,j] = {names[i]}[i,j] * 0.5 + 1\n" for i in range(ops))
    text = (f'name = "{name}"\noutputs = ["{names[-1]}"]\nprogram = """\n{body}"""\n'
            '[dims]\nN = 2\n[inputs]\na = ["N", "N"]\n' + ('w = ["N", "N"]\n' if contraction
                                                          else ""))
    return parse_workload(text, f"{name}.toml")


def _calls(w, cache_dir: Path, kernel: bool = False):
    """A run of CALLS calls of ``w``'s unfused plan (``kernel``: its contractions on the
    generated kernel, every other choice the space's first)."""
    if kernel:
        space = SearchSpace(w, TileBounds(1, 256, machine_bounds()))
        cand = space.build(lambda q, opts: IMPL_KERNEL if q.startswith("impl:") else
                           0 if q.startswith("fuse:") else opts[0])
    else:
        cand = named_plan(SearchSpace(w), "unfused")
    plan = CompiledPlan(w, cand, cache_dir)
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(s).astype(np.float32) for n, s in w.inputs}

    def run(r):
        for _ in range(CALLS):
            plan(**inputs)
    return run


def calls_run_serial(ops: int = 4) -> bool:
    """Whether the loop groups :func:`group_call_s` times run on the calling thread
    (search_spaces.serial: 2 x 2 matrices do), so that their region wakes no other thread."""
    w = _chain(f"calib_loop_{ops}", ops, False)
    cand = named_plan(SearchSpace(w), "unfused")
    return all(loop_group_serial(w, g.members) for g in groups(w, cand.fused_pairs))


def group_call_s(contraction: bool, cache_dir: Path, repeats: int, ops: int = 4,
                 kernel: bool = False) -> float:
    """Seconds one more group adds to a plan's call: a chain of ``ops`` groups against a chain
    of one, both unfused and interleaved, so the per-call set-up (inputs, outputs) cancels
    out.  ``kernel``: the contractions on the generated kernel instead of the library."""
    kind = "kernel" if kernel else "gemm" if contraction else "loop"
    t = best_times({"many": _calls(_chain(f"calib_{kind}_{ops}", ops, contraction), cache_dir,
                                   kernel),
                    "one": _calls(_chain(f"calib_{kind}_1", 1, contraction), cache_dir, kernel)},
                   repeats)
    return max(t["many"] - t["one"], 0.0) / CALLS / (ops - 1)
