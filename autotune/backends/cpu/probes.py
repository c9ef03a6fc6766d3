"""Generated-C microbenchmarks for the cpu calibration: what code built like the plans' loop
groups (the executor's compiler and flags, OpenMP on every core) reaches on this machine.

Every probe compiles through :func:`autotune.backends.cpu.executor.compile_source` (cached in the
kernel cache) and returns rates or times, the best of their runs after a warm-up
(:func:`best_times`): noise from other processes only ever slows a run down.  Figures that are
set against each other (a pattern's bandwidth against the streaming copy's, a function's loop
against the plain loop) run interleaved, round by round, so both see the same load.
``calibration_terms.py`` turns them into the cost model's terms.
"""
from __future__ import annotations

import ctypes
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from autotune.backends.buffers import aligned_full
from autotune.backends.cpu.codegen import _Emitter
from autotune.backends.cpu.prelude import PRELUDE
from autotune.backends.cpu.executor import compile_source
from autotune.backends.loops import COMMON_FUNCTIONS

STRIDE = 1000           # floats between consecutive reads of the strided probe (4000 bytes)
FRESH = 64              # floats between the strided probe's runs: each run reads unseen lines
FUNCTION_ELEMS = 4096   # floats per thread in the transcendental probe (in L1)
# the many-regions probe: a read of FAR_REGIONS regions a step, RUN floats from each (pages
# apart), against the same read from one region.  On the development host (AMD EPYC, 2 cores,
# 256 MB) 1 to 16 regions read at 20-22 GB/s, 32 at 12-15, 64 to 256 at 10-15: beyond the
# streams its prefetchers follow, each line is a demand miss (tests in test_calibration.py)
FAR_REGIONS = 128
RUN = 64


RUN_BUDGET_S = 0.15     # per repeat: short probes run until this much time has passed
MAX_RUNS = 50


def best_times(fns: dict[str, Callable[[int], object]], repeats: int,
               max_rounds: int = MAX_RUNS) -> dict[str, float]:
    """Best wall time of each ``fn(r)`` after a warm-up ``fn(0)``, run in rounds (r = 1, 2,
    ...: each fn once per round): at least ``repeats`` rounds, more while they take under
    ``repeats * RUN_BUDGET_S`` per fn in all (up to ``max_rounds``).  On a shared machine the
    best of many short runs is the one that found the cores idle."""
    for fn in fns.values():
        fn(0)
    best = dict.fromkeys(fns, math.inf)
    spent, r, repeats = 0.0, 0, max(1, repeats)
    while r < repeats or (spent < repeats * RUN_BUDGET_S * len(fns) and r < max_rounds):
        r += 1
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(r)
            took = time.perf_counter() - t0
            best[name], spent = min(best[name], took), spent + took
    return {name: max(t, 1e-9) for name, t in best.items()}


def best_time(fn: Callable[[int], object], repeats: int, max_runs: int = MAX_RUNS) -> float:
    """:func:`best_times` of one function."""
    return best_times({"": fn}, repeats, max_runs)[""]


def _function_spellings() -> dict[str, str]:
    """Each transcendental as the CPU codegen spells it for float32, applied to ``x[i]``."""
    table = {**COMMON_FUNCTIONS, **_Emitter.FUNCTIONS}
    from costmodel.devices import TRANSCENDENTALS
    return {fn: table[fn].format("x[i]", s="f") for fn in TRANSCENDENTALS}


# Peak FMA rate: ten independent chains of vector FMAs per thread, each in its own register:
# enough in flight to cover the FMA latency (4-5 cycles) on two FMA ports, and few enough that
# the chains, m and c fit in 16 AVX2 registers without spilling.  Vectors are the widest the
# compiler targets (-march=native).  m < 1 keeps the values finite; the sum keeps the work alive.
_PEAK_SRC = r"""
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
int autotune_peak_lanes(void) { return LANES; }
double autotune_peak(long iters, int *threads) {
    double total = 0.0;
    int used = 1;
    #pragma omp parallel reduction(+:total)
    {
        vf m, c;
        for (int l = 0; l < LANES; l++) { m[l] = 0.999999f; c[l] = 1e-3f * (l + 1); }
        vf a0 = c, a1 = c * 2, a2 = c * 3, a3 = c * 4, a4 = c * 5;
        vf a5 = c * 6, a6 = c * 7, a7 = c * 8, a8 = c * 9, a9 = c * 10;
        for (long i = 0; i < iters; i++) {
            a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
            a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
            a8 = a8 * m + c; a9 = a9 * m + c;
        }
        vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
        for (int l = 0; l < LANES; l++) total += s[l];
        #pragma omp single
        used = omp_get_num_threads();
    }
    *threads = used;
    return total;
}
"""
_PEAK_CHAINS = 10


def _source() -> str:
    funcs = "".join(f"""
void probe_fn_{fn}(const float *restrict x, float *restrict y, long n, long reps) {{
    #pragma omp parallel
    {{
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        long lo = n * t / nt, hi = n * (t + 1) / nt;
        for (long r = 0; r < reps; r++) {{
            #pragma omp simd
            for (long i = lo; i < hi; i++) y[i] = {expr};
            __asm__ volatile("" : : "r"(y) : "memory");
        }}
    }}
}}
""" for fn, expr in {**_function_spellings(), "ref": "x[i] * 0.999f + 0.001f"}.items())
    return PRELUDE + "#include <omp.h>\n" + _PEAK_SRC + r"""
void probe_copy(const float *restrict src, float *restrict dst, long n) {
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) dst[i] = src[i];
}
double probe_strided(const float *restrict src, long n, long stride) {
    double s = 0.0;
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (long i = 0; i < n; i++) s += src[i * stride];
    return s;
}
/* n floats cut into `regions` equal regions; each step reads `run` floats of every region
   (as a loop tile reads a box whose rows lie pages apart), then moves on */
double probe_spread_read(const float *restrict src, long n, long regions, long run) {
    long len = n / regions;
    double s = 0.0;
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (long pos = 0; pos < len - run + 1; pos += run)
        for (long r = 0; r < regions; r++) {
            const float *p = src + r * len + pos;
            float part = 0.0f;
            #pragma omp simd reduction(+:part)
            for (long q = 0; q < run; q++) part += p[q];
            s += part;
        }
    return s;
}
/* dst[j][i] = src[i][j]: the read walks unit-stride, the write with a stride of rows */
void probe_transpose(const float *restrict src, float *restrict dst, long rows, long cols) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < rows; i++)
        #pragma omp simd
        for (long j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}
/* as the loop groups open theirs: parallel, dynamic schedule over tiles */
void probe_regions(long reps, int threads) {
    for (long r = 0; r < reps; r++) {
        #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (long t = 0; t < 64; t++) __asm__ volatile("" ::: "memory");
    }
}
/* as a loop group deals its tiles (dynamic schedule, one tile a step), each tile a bounded
   loop over its elements of y (in cache) */
void probe_tiles(float *restrict y, long n, long tile, long reps) {
    long ntiles = (n + tile - 1) / tile;
    for (long r = 0; r < reps; r++) {
        #pragma omp parallel for schedule(dynamic, 1)
        for (long t = 0; t < ntiles; t++) {
            long lo = t * tile, hi = lo + tile < n ? lo + tile : n;
            #pragma omp simd
            for (long i = lo; i < hi; i++) y[i] = y[i] * 0.5f + 1.0f;
        }
        __asm__ volatile("" : : "r"(y) : "memory");
    }
}
int probe_max_threads(void) { return omp_get_max_threads(); }
""" + funcs


def load_probes(cache_dir: Path) -> ctypes.CDLL:
    """The compiled probe library (CompileError / OSError when there is no working compiler)."""
    lib = ctypes.CDLL(str(compile_source(_source(), cache_dir)))
    P, L = ctypes.c_void_p, ctypes.c_long
    lib.probe_copy.argtypes = [P, P, L]
    lib.probe_strided.argtypes = [P, L, L]
    lib.probe_strided.restype = ctypes.c_double
    lib.probe_transpose.argtypes = [P, P, L, L]
    lib.probe_spread_read.argtypes = [P, L, L, L]
    lib.probe_spread_read.restype = ctypes.c_double
    lib.probe_regions.argtypes = [L, ctypes.c_int]
    lib.probe_tiles.argtypes = [P, L, L, L]
    lib.probe_max_threads.restype = ctypes.c_int
    lib.autotune_peak.argtypes = [L, ctypes.POINTER(ctypes.c_int)]
    lib.autotune_peak.restype = ctypes.c_double
    for fn in (*_function_spellings(), "ref"):
        getattr(lib, f"probe_fn_{fn}").argtypes = [P, P, L, L]
    return lib


def peak_flops(lib, repeats: int, iters: int = 50_000_000) -> float:
    """Peak float32 flop/s of this machine: FMA chains on every core."""
    lanes = int(lib.autotune_peak_lanes())
    threads = ctypes.c_int(1)
    total = [0.0]

    def run(r):
        total[0] = lib.autotune_peak(iters, ctypes.byref(threads))
    t = best_time(run, repeats)
    if not math.isfinite(total[0]):
        raise RuntimeError("peak-flops loop produced a non-finite sum")
    return 2.0 * _PEAK_CHAINS * lanes * iters * threads.value / t   # FMA = 2 flops


def memory_bandwidths(lib, src: np.ndarray, dst: np.ndarray, repeats: int) -> dict[str, float]:
    """bytes/s of three generated parallel loops over the two float32 buffers, interleaved:
    ``copy``, a unit-stride copy (bytes read plus written); ``strided_read``, the useful bytes
    of reading every STRIDE-th float (a line, and every fourth a page, per element; each round
    starts FRESH floats further, on lines no earlier round brought into the cache, hence at most
    STRIDE / FRESH - 1 rounds); ``transpose``, a 2-D transposing copy of a ``side x side``
    matrix, ``side`` as large as both buffers allow (odd, against cache-set aliasing; bytes read
    plus written); ``one_region`` and ``far_regions``, bytes read by
    ``probe_spread_read`` from one region and from FAR_REGIONS regions, RUN floats a step."""
    n = min(src.size, dst.size)
    side = max(1, int(math.isqrt(n)) | 1)
    side = side if side * side <= n else max(1, side - 2)
    strided = max(1, (src.size - STRIDE) // STRIDE)
    base, out = src.ctypes.data, dst.ctypes.data
    rounds = STRIDE // FRESH - 1
    t = best_times({"copy": lambda r: lib.probe_copy(base, out, n),
                    "strided_read": lambda r: lib.probe_strided(base + 4 * FRESH * r, strided,
                                                                STRIDE),
                    "transpose": lambda r: lib.probe_transpose(base, out, side, side),
                    "one_region": lambda r: lib.probe_spread_read(base, n, 1, RUN),
                    "far_regions": lambda r: lib.probe_spread_read(base, n, FAR_REGIONS, RUN)},
                   min(max(1, repeats), rounds), max_rounds=rounds)
    return {"copy": 2.0 * n * 4 / t["copy"], "strided_read": strided * 4 / t["strided_read"],
            "transpose": 2.0 * side * side * 4 / t["transpose"],
            "one_region": spread_read_bytes(n, 1) / t["one_region"],
            "far_regions": spread_read_bytes(n, FAR_REGIONS) / t["far_regions"]}


def spread_read_bytes(n: int, regions: int, run: int = RUN) -> int:
    """Bytes ``probe_spread_read`` reads from ``n`` floats cut into ``regions`` regions."""
    per = n // regions
    steps = (per - run) // run + 1 if per >= run else 0
    return 4 * steps * run * regions


def region_times(lib, repeats: int, reps: int = 200) -> tuple[float, float, int]:
    """(seconds of an empty parallel-for region on one thread, seconds each further thread adds,
    threads): regions back to back, so every one wakes its threads as a plan's groups do."""
    threads = max(1, int(lib.probe_max_threads()))
    t = best_times({"one": lambda r: lib.probe_regions(reps, 1),
                    "all": lambda r: lib.probe_regions(reps, threads)}, repeats)
    one = t["one"] / reps
    if threads == 1:
        return one, 0.0, 1
    return one, max(t["all"] / reps - one, 0.0) / (threads - 1), threads


def tile_time(lib, repeats: int, n: int = 1 << 16, reps: int = 5) -> float:
    """Seconds of one core per tile a loop group deals out (the dynamic schedule's step, the
    tile's bounds and loop set-up): an in-cache update of ``n`` floats in tiles of one element
    against one tile per thread, regions back to back."""
    threads = max(1, int(lib.probe_max_threads()))
    y = aligned_full(n, 1.0, np.float32)
    t = best_times({"many": lambda r: lib.probe_tiles(y.ctypes.data, n, 1, reps),
                    "few": lambda r: lib.probe_tiles(y.ctypes.data, n, -(-n // threads), reps)},
                   repeats)
    if not np.isfinite(y).all():
        raise RuntimeError("the tile probe produced non-finite values")
    return max(t["many"] - t["few"], 0.0) / reps * threads / (n - threads)


def function_times(lib, repeats: int, reps: int = 50) -> dict[str, float]:
    """Seconds per evaluation (all threads together) of each transcendental in a vectorised
    in-cache loop ``y[i] = f(x[i])``, beyond the same loop's ``y[i] = x[i] * a + b`` (key
    ``ref``, which keeps its own time: the loop's loads, stores and 2 flops)."""
    threads = max(1, int(lib.probe_max_threads()))
    n = FUNCTION_ELEMS * threads
    x = (0.5 + (np.arange(n) % 97) / 97.0).astype(np.float32)      # in every domain
    names = ("ref", *_function_spellings())
    ys = {fn: aligned_full(n, 0.0, np.float32) for fn in names}

    def run(fn):
        f, y = getattr(lib, f"probe_fn_{fn}"), ys[fn].ctypes.data
        return lambda r: f(x.ctypes.data, y, n, reps)
    t = best_times({fn: run(fn) for fn in names}, repeats)
    for fn, y in ys.items():
        if not np.isfinite(y).all():
            raise RuntimeError(f"the {fn} probe produced non-finite values")
    per = {fn: s / (n * reps) for fn, s in t.items()}
    return {fn: (s if fn == "ref" else max(s - per["ref"], 0.0)) for fn, s in per.items()}
