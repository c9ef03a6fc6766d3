"""Arithmetic precisions of a library contraction on a backend with tensor cores, and which of
them a workload's tolerance admits.

- ``fp32``: float32 multiply-adds (SIMT on a GPU): the float32 reference's own accuracy.
- ``3xtf32``: each float32 operand split into a TF32 high part and a TF32 remainder,
  ``A B ~ Ah Bh + Ah Bl + Al Bh`` on tensor cores with float32 sums: float32 accuracy (the
  dropped ``Al Bl`` is about 2^-22 of the product) at a third of the TF32 rate.  In a NumPy
  model of trimul's triangle einsum (N=64, C=32, float32 sums) the largest error against
  float64, over the largest value, is 3.0e-7 for the split, 3.3e-7 for float32 and 3.1e-4
  for plain TF32 (tests/autotune/backends/test_precision.py): only the split is legal under
  the block's rtol of 1e-4.
- ``tf32``: one TF32 product (10 mantissa bits in, float32 sums): for tolerances of 1e-3 and up.
- ``fp64``: a float64 workload's own precision; nothing else is offered for it.

The default (what a plan without a ``precision:ANCHOR`` answer runs) is :func:`default_precision`:
TF32 where the tolerance admits it, else the workload's type.
"""
from __future__ import annotations

import numpy as np

from .workload import Workload

TF32_RTOL = 1e-3           # a tolerance this loose admits plain TF32 products
# the loosest tolerance each precision's error needs (float32 sums, products of the
# workload's sizes: tests/autotune/backends/test_precision.py)
NEEDS_RTOL = {"fp32": 0.0, "3xtf32": 0.0, "tf32": TF32_RTOL}
# a precision's share of the tensor-core (tf32) rate: the split makes three products
TF32_PRODUCTS = {"3xtf32": 3, "tf32": 1}
TENSOR_PRECISIONS = tuple(TF32_PRODUCTS)      # what tensor cores run (a GPU kernel's choices)
ACCURACY = ("tf32", "3xtf32", "fp32", "fp64")  # least to most accurate


def default_precision(w: Workload) -> str:
    """"tf32" when the workload's tolerance admits TF32 products, else its own type."""
    if w.dtype == "float64":
        return "fp64"
    return "tf32" if w.rtol >= TF32_RTOL else "fp32"


def precision_options(w: Workload, offered: tuple[str, ...]) -> list[str]:
    """The precisions of ``offered`` (a backend's) that ``w`` admits, its default first;
    just the default for a float64 workload or a backend that offers none."""
    first = default_precision(w)
    if w.dtype != "float32" or not offered:
        return [first]
    return [first] + [p for p in offered if p != first and w.rtol >= NEEDS_RTOL[p]]


def stack_precision(w: Workload, precisions) -> str:
    """The arithmetic of one GEMM that computes several contractions (a stack of siblings,
    search_spaces.siblings): the most accurate of theirs (each "" meaning the default), so no
    member runs less accurately than its own schedule says."""
    own = [p or default_precision(w) for p in precisions] or [default_precision(w)]
    return max(own, key=ACCURACY.index)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest with ties away from zero
    (PTX ``cvt.rna.tf32.f32``); finite inputs."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def split_tf32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(high, low): ``high = tf32(x)``, ``low = tf32(x - high)``; both exact in TF32."""
    hi = round_tf32(x)
    return hi, round_tf32(np.asarray(x, np.float32) - hi)


def kernel_precision(w: Workload, sched_precision: str) -> str:
    """The arithmetic a GPU kernel group runs: its schedule's, else the float32-accurate split
    (plain TF32 where the tolerance admits it)."""
    if sched_precision in ("3xtf32", "tf32"):
        return sched_precision
    return "tf32" if w.rtol >= TF32_RTOL else "3xtf32"
