"""Compiled float32 loops for the inlined-math tests (test_fast_exp, test_fast_tanh): each C
function of ``src`` takes ``(const float *x, float *y, long n)``."""
from __future__ import annotations

import ctypes

import numpy as np

from autotune.backends.cpu.compiler import compile_source


def compiled_loops(src: str, folder):
    """``run(fn, x) -> y``: C function ``fn`` of ``src`` (compiled with the generated code's
    flags into ``folder``) applied to the float32 array ``x``; ``y`` starts at 7.0, so an
    element the function never writes shows."""
    lib = ctypes.CDLL(str(compile_source(src, folder)))
    ptr = ctypes.POINTER(ctypes.c_float)

    def run(fn: str, x) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        y = np.full_like(x, 7.0)
        getattr(lib, fn)(x.ctypes.data_as(ptr), y.ctypes.data_as(ptr), ctypes.c_long(x.size))
        return y
    return run
