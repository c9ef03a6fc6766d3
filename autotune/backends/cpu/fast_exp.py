"""float32 exp for generated C (loops, chains, the kernel's prologues and epilogues): a range
reduction and a polynomial, inlined, so that it vectorises as plain arithmetic instead of
calling libmvec.

Why: exp is the softmax's, the sigmoid gate's and the SiLU's one costly operation, and glibc's
vector expf is a call per vector that the loop cannot overlap with its neighbours.  On the
development host (AMD EPYC, AVX-512, one core, the generated code's flags, best of 20,000
runs over 8,192 floats in cache) libmvec's expf took 2.5 us and this form 1.2 us; attention's
softmax group (8 x 256 rows of 256: max, exp, sum, divide) ran 86-92 us on 2 cores with
libmvec's and 73-76 us with this one (two interleaved runs of 400 calls, medians).

The form, for x clamped to [lo, 89] (lo: codegen.EXP_BOUNDS, read from the file's copy of
the weak global as before):

* n = rint(x log2(e)), at least -125, and r = x - n ln2 in two FMAs (Cody and Waite's split
  of ln2 into a short ``LN2_HI``, exact in n * LN2_HI for |n| < 2^15, and ``LN2_LO``);
  explicit ``fmaf`` calls, which -ffast-math's reassociation leaves apart (with plain
  arithmetic GCC folded the split into one constant: 3.7e-6 relative error);
* exp(r) = P(r), P of degree 6 (:data:`P`), on |r| <= ln2/2 plus a margin;
* 2^n applied by adding n to P's exponent bits (an integer add: exact, no multiplication that
  -ffast-math could reassociate into an overflowing 2^128): P(r) lies in [0.7, 1.42] and n in
  [-125, 128], so the exponent stays in range except where exp overflows, which the last step
  answers: x > ln(FLT_MAX) gives +inf.

The bit pun goes through a union: through ``__builtin_memcpy`` GCC kept the value in memory
inside the generated ``omp simd`` loops and did not vectorise them ("data ref analysis
failed"), 5x slower than libmvec.

Compiled with the generated code's flags it is within 1e-7 of exp relative (1.5 float32
ulps) wherever exp is a normal float32 (tests/autotune/backends/test_fast_exp.py).  NaN stays
NaN (the clamps compare false and the polynomial of NaN is NaN); +inf gives +inf, -inf the
floor's exp(lo), as before.  float64's exp stays glibc's (libmvec's vector exp).
"""
from __future__ import annotations

import numpy as np

from autotune.backends.cpu.c_poly import c_float, c_horner

LN2_HI = 0.693359375             # 355/512: n * LN2_HI is exact in float32 for |n| < 2^15
LN2_LO = -2.12194440e-4          # ln2 - LN2_HI, rounded to float32
LOG2E = 1.44269504
HI_CLAMP = 89.0                  # above ln(FLT_MAX) = 88.72: n stays a small integer
OVERFLOW = 88.7228394            # ln(FLT_MAX) rounded up: above it exp is +inf in float32
N_FLOOR = -125                   # 2^-125 * P(r) >= 2^-125.5: still a normal float32
# exp(r) on |r| <= ln2/2 + 1e-3, lowest degree first; :func:`fit`'s, rounded to float32
P = (1.0, 1.0, 0.499999911, 0.166664168, 0.0416682437, 0.00837506074, 0.00138365326)
HALF_WIDTH = 0.3466 + 0.001


def fit(degree: int = 6, iters: int = 50) -> tuple[float, ...]:
    """Coefficients (lowest degree first, each rounded to float32) of the polynomial closest to
    exp on [-HALF_WIDTH, HALF_WIDTH] in the largest relative error: least squares on the
    relative error at Chebyshev points, reweighted by each point's error (Lawson's iteration
    towards the minimax polynomial)."""
    r = HALF_WIDTH * np.cos(np.linspace(0, np.pi, 20001))
    v = np.vander(r, degree + 1, increasing=True)
    f = np.exp(r)
    base = 1 / f                              # relative error
    lawson = np.full_like(r, 1 / r.size)
    c = np.zeros(degree + 1)
    for _ in range(iters):
        w = base * np.sqrt(lawson)
        c = np.linalg.lstsq(v * w[:, None], f * w, rcond=None)[0]
        err = np.abs(v @ c - f) / f
        lawson = lawson * err
        lawson /= lawson.sum()
    return tuple(float(f"{np.float32(x):.9g}") for x in c)


def evaluate(x: np.ndarray, lo: float = -87.0, p=P) -> np.ndarray:
    """The approximation in float32, step for step as the C macro does it."""
    f32 = np.float32
    e = np.clip(np.asarray(x, f32), f32(lo), f32(HI_CLAMP))
    e = np.where(np.isnan(x), f32(np.nan), e)
    with np.errstate(invalid="ignore"):
        n = np.maximum(np.rint(e * f32(LOG2E)), f32(N_FLOOR))
        n = np.where(np.isnan(e), f32(np.nan), n)
        # fmaf rounds once: the product of two float32s is exact in float64, and the float64
        # sum rounded to float32 is fmaf's result but for rare double roundings
        r = f32(np.float64(e) - np.float64(n) * np.float64(f32(LN2_HI)))
        r = f32(np.float64(r) + np.float64(n) * np.float64(f32(-LN2_LO)))
        acc = f32(p[-1])
        for c in p[-2::-1]:
            acc = acc * r + f32(c)
        bits = acc.view(np.uint32) + (np.nan_to_num(n).astype(np.int32).astype(np.uint32)
                                      << np.uint32(23))
        out = bits.view(f32)
    return np.where(e > f32(OVERFLOW), f32(np.inf), out)


def max_error(y: np.ndarray, x: np.ndarray, lo: float = -87.0) -> float:
    """The largest relative error of ``y`` against float64 exp(max(x, lo)) over the points
    where that is a normal float32 (overflow checked apart)."""
    ref = np.exp(np.maximum(np.asarray(x, np.float64), lo))
    ok = ref < np.finfo(np.float32).max
    return float((np.abs(np.asarray(y, np.float64)[ok] - ref[ok]) / ref[ok]).max())


# AT_EXPf(x): a GNU statement expression; at_exp_lo_f is the file's copy of the floor
# (codegen.EXP_DECLS)
EXP_MACRO = (
    "#define AT_EXPf(x) ({ float _e = (x); "
    "_e = _e < at_exp_lo_f ? at_exp_lo_f : _e; "
    f"_e = _e > {c_float(HI_CLAMP)} ? {c_float(HI_CLAMP)} : _e; "
    f"float _n = __builtin_rintf(_e * {c_float(LOG2E)}); "
    f"_n = _n < {c_float(N_FLOOR)} ? {c_float(N_FLOOR)} : _n; "
    f"float _r = __builtin_fmaf(_n, {c_float(-LN2_LO)}, "
    f"__builtin_fmaf(_n, {c_float(-LN2_HI)}, _e)); "
    "union { float f; unsigned u; } _v; "
    f"_v.f = {c_horner(P, '_r')}; "
    "_v.u += (unsigned)(int)_n << 23; "
    f"_e > {c_float(OVERFLOW)} ? INFINITY : _v.f; }})\n")
