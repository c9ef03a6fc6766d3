"""float32 tanh for generated C loops: a rational function of x, inlined, so that it vectorises
as plain arithmetic instead of calling libmvec.

Why: glibc's vector tanhf is the slowest of the vector math calls on the development host (AMD
EPYC, AVX2: 0.90 ns an element on one core against expf's 0.43; a loop over 4096 floats built
with the generated code's flags, best of 20 runs), and the tanh of a GELU or a tanh MLP is most
of such a group's time; this form runs 0.44 ns there (its one division is the bound).  XLA and IREE compile tanh to a rational approximation too.

The form: tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9, P of degree 5 and Q of degree 3 (Q(0) = 1),
x clamped to [-9, 9] first (tanh(9) rounds to 1 in float32) and the result to [-1, 1].  The
coefficients are this module's own fit (:func:`fit`: least squares on the relative error,
reweighted by the previous denominator, Sanathanan-Koerner, in the variable (x/9)^2 to keep the
system conditioned), rounded to float32.  Evaluated in float32 it is within 3.8e-7 of tanh,
absolute and relative, over every float (a grid of 4 million points in [-12, 12],
:func:`max_error`; tests/autotune/backends/test_fast_tanh.py checks the compiled C).  NaN stays
NaN (both clamps compare false); +-inf gives +-1.
"""
from __future__ import annotations

import numpy as np

from autotune.backends.cpu.c_poly import c_horner

CLAMP = 9.0
# x P(t) / Q(t), t = x^2, lowest degree first; printed with 9 significant digits (exact for
# float32) by :func:`fit`'s rounding
P = (0.99999994, 0.12926957, 0.00292902673, 9.34183208e-06, -1.29986297e-08, 1.8797703e-11)
Q = (1.0, 0.462602496, 0.0237971246, 0.00022923619)


def fit(num: int = 5, den: int = 3, iters: int = 12) -> tuple[tuple[float, ...], ...]:
    """(P, Q) of degrees ``num`` and ``den`` in t = x^2 minimising tanh's relative error on
    (0, CLAMP], each coefficient rounded to float32."""
    x = np.concatenate([np.linspace(1e-5, CLAMP, 40000),
                        CLAMP * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 8000)))])
    x = x[x > 0]
    s = (x / CLAMP) ** 2                      # the fit's variable, in [0, 1]
    f = np.tanh(x) / x                        # what P/Q approximates
    q_prev = np.ones_like(s)
    for _ in range(iters):
        a = np.concatenate([np.vander(s, num + 1, increasing=True),
                            -f[:, None] * np.vander(s, den + 1, increasing=True)[:, 1:]], 1)
        w = 1 / (f * q_prev)                  # relative error, over the last denominator
        sol = np.linalg.lstsq(a * w[:, None], f * w, rcond=None)[0]
        p, q = sol[:num + 1], np.concatenate([[1.0], sol[num + 1:]])
        q_prev = np.polyval(q[::-1], s)
    scale = CLAMP ** (-2.0 * np.arange(max(num, den) + 1))     # back to t = x^2
    return (tuple(float(f"{np.float32(v):.9g}") for v in p * scale[:num + 1]),
            tuple(float(f"{np.float32(v):.9g}") for v in q * scale[:den + 1]))


def evaluate(x: np.ndarray, p=P, q=Q) -> np.ndarray:
    """The approximation in float32, operation for operation as the C macro does it."""
    x = np.clip(np.asarray(x, np.float32), np.float32(-CLAMP), np.float32(CLAMP))
    t = x * x
    num, den = np.float32(p[-1]), np.float32(q[-1])
    for c in p[-2::-1]:
        num = num * t + np.float32(c)
    for c in q[-2::-1]:
        den = den * t + np.float32(c)
    return np.clip(x * num / den, np.float32(-1), np.float32(1))


def max_error(y: np.ndarray, x: np.ndarray) -> float:
    """The largest of the absolute and the relative error of ``y`` against float64 tanh(x)."""
    ref = np.tanh(np.asarray(x, np.float64))
    ab = np.abs(np.asarray(y, np.float64) - ref)
    return float(max(ab.max(), (ab / np.maximum(np.abs(ref), 1e-30))[x != 0].max()))


# AT_TANHf(x): a GNU statement expression, as AT_EXPf is (codegen.PRELUDE)
TANH_MACRO = (
    "#define AT_TANHf(x) ({ float _x = (x); "
    f"_x = _x < -{CLAMP}f ? -{CLAMP}f : (_x > {CLAMP}f ? {CLAMP}f : _x); "
    "float _t = _x * _x; "
    f"float _y = _x * {c_horner(P, '_t')} / {c_horner(Q, '_t')}; "
    "_y < -1.0f ? -1.0f : (_y > 1.0f ? 1.0f : _y); })\n"
    "#define AT_TANH(x) tanh(x)\n")
