"""Compiling generated C: the flags, glibc's vector math library where it helps, a cache of
shared libraries on disk keyed by source and flags, parallel compiles of a plan's groups, and the
generated contraction kernel loaded once per process.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autotune.backends.cpu.gemm_call import GemmKernel
from autotune.backends.cpu.gemm_driver import kernel_source
from autotune.backends.cpu.gemm_kernel import KernelSpec
from autotune.threads import cores

# -ffast-math lets reductions vectorise; -fno-finite-math-only keeps -INFINITY (max= init) and
# NaN outputs meaningful, so verification still sees them.
LOOP_OPT = "-O3"
CFLAGS = [LOOP_OPT, "-march=native", "-fopenmp", "-ffast-math", "-fno-finite-math-only",
          "-fPIC", "-shared"]
# The generated contraction kernel at -O2: its micro-kernel is written in vector types and its
# packing loops ask for SIMD themselves, so -O3's extra passes (loop versioning for strides,
# unswitching) only lengthen the compile: 0.78 -> 0.40 s a kernel (1.38 -> 0.77 s with A read
# in place) on the AVX2 EPYC, rates level in one process (O2/O3 0.955-1.106 over 12 shapes and
# packings, bench/results/epyc-avx2-761ae07/kernel_olevel.txt; whole plans whose kernels take
# fused prologues and epilogues 0.76-1.035, plan_olevel.txt).  A search compiles every kernel
# candidate's kernels.
KERNEL_OPT = "-O2"


@functools.lru_cache(maxsize=1)
def _libmvec_flags() -> list[str]:
    """glibc's vector math library, when present: vectorised expf/logf in generated loops, and
    tanhf/tanh where it has them (glibc >= 2.35: a scalar tanhf costs 13 ns here, the tanh of
    gelu_mlp's GELU ~40 % of its best plans; a declaration the library lacks would leave the
    kernel with an undefined symbol)."""
    name = ctypes.util.find_library("mvec")
    if not name:
        return []
    flags = ["-DAUTOTUNE_LIBMVEC", "-lmvec"]
    try:
        lib = ctypes.CDLL(name)
        if all(hasattr(lib, sym) for sym in LIBMVEC_TANH):
            flags.insert(1, "-DAUTOTUNE_LIBMVEC_TANH")
    except OSError:
        pass
    return flags


# the vector variants of tanhf and tanh that the declaration lets GCC call (x86-64 vector ABI:
# b SSE4, c AVX, d AVX2, e AVX-512; then the lanes and "v", one vector argument)
LIBMVEC_TANH = ("_ZGVbN4v_tanhf", "_ZGVcN8v_tanhf", "_ZGVdN8v_tanhf", "_ZGVeN16v_tanhf",
                "_ZGVbN2v_tanh", "_ZGVcN4v_tanh", "_ZGVdN4v_tanh", "_ZGVeN8v_tanh")


class CompileError(RuntimeError):
    """The C compiler rejected generated source (a bug in codegen, reported as trial failure)."""


def flags_at(opt: str) -> list[str]:
    """CFLAGS with the optimisation level ``opt`` (LOOP_OPT or KERNEL_OPT)."""
    return [opt, *(f for f in CFLAGS if not f.startswith("-O"))]


def compile_source(src: str, cache_dir: Path, cc: str = "cc", opt: str = LOOP_OPT) -> Path:
    """Compile ``src`` at ``opt`` to a shared library, cached by the hash of source and flags."""
    cflags = flags_at(opt)
    flags = " ".join(cflags + _libmvec_flags())
    digest = hashlib.sha256((src + flags + cc).encode()).hexdigest()[:24]
    cache_dir.mkdir(parents=True, exist_ok=True)
    lib = cache_dir / f"k_{digest}.so"
    if lib.exists():
        return lib
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        c_path = Path(tmp) / "k.c"
        c_path.write_text(src)
        out = Path(tmp) / "k.so"
        proc = subprocess.run([cc, *cflags, str(c_path), "-o", str(out), *_libmvec_flags(),
                               "-lm"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            first = next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr[:300])
            raise CompileError(f"cc failed: {first.strip()}")
        os.replace(out, lib)  # atomic: concurrent searches never load a half-written library
    return lib


def compile_all(units: list[tuple[str, str]], cache_dir: Path, jobs: int | None = None
                ) -> list[Path]:
    """:func:`compile_source` of each (source, optimisation level), one compiler per core at a
    time: a plan's groups are separate translation units, and a candidate with generated
    kernels spent 4-5 s of its trial compiling them one after the other at N=702 (seven
    kernels of 0.5-1 s each, 2 cores; the worker compiles before it times anything, so the
    cores are free)."""
    todo = list(dict.fromkeys(units))

    def one(unit: tuple[str, str]) -> Path:
        return compile_source(unit[0], cache_dir, opt=unit[1])
    jobs = jobs or cores()
    if len(todo) <= 1 or jobs <= 1:
        done = {u: one(u) for u in todo}
    else:
        with ThreadPoolExecutor(min(jobs, len(todo))) as ex:
            done = dict(zip(todo, ex.map(one, todo)))
    return [done[u] for u in units]


@functools.lru_cache(maxsize=64)
def load_gemm_kernel(spec: KernelSpec, cache_dir: str) -> GemmKernel:
    """The generated contraction kernel for ``spec``, compiled (cached on disk by its source)
    and loaded once per process."""
    return GemmKernel(spec, compile_source(kernel_source(spec), Path(cache_dir),
                                           opt=KERNEL_OPT))
