"""The float32 exp the CPU codegen inlines (autotune.backends.cpu.fast_exp): its coefficients
are its own fit's, and compiled with the generated code's flags it stays within 1.5e-7 of exp
(relative) wherever exp is a normal float32, with exp's values at the edges (NaN, +-inf,
overflow at ln(FLT_MAX), the floor's exp(lo) below it), vectorised and scalar."""
from __future__ import annotations

import subprocess

import numpy as np

from autotune.backends.cpu import fast_exp
from autotune.backends.cpu.codegen import EXP_BOUNDS, PRELUDE
from autotune.backends.cpu.compiler import CFLAGS

from tests.support.float_loops import compiled_loops

BOUND = 1.5e-7        # 2.5 float32 ulps at 1; compiled (with FMAs) it reads 8e-8 here
LO = EXP_BOUNDS["float32"]

LOOP = """
void apply(const float *restrict x, float *restrict y, long n) {
  #pragma omp simd
  for (long i = 0; i < n; i++) y[i] = AT_EXPf(x[i]);
}
"""
INNER = "    for (long i = 0; i < n; i++) y[r*n + i] = AT_EXPf(x[r*n + i] - m[r]);"
ROWS = f"""
void apply_rows(const float *restrict x, const float *restrict m, float *restrict y, long rows,
                long n) {{
  #pragma omp parallel for
  for (long r = 0; r < rows; r++) {{
    #pragma omp simd
{INNER}
  }}
}}
"""
SRC = PRELUDE + LOOP + """
void apply_scalar(const float *restrict x, float *restrict y, long n) {
  for (long i = 0; i < n; i++) { volatile float v = x[i]; y[i] = AT_EXPf(v); }
}
void softmax_row(const float *restrict x, float *restrict y, long n) {
  float m = -INFINITY, l = 0;
  for (long i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  #pragma omp simd
  for (long i = 0; i < n; i++) y[i] = AT_EXPf(x[i] - m);
  #pragma omp simd reduction(+:l)
  for (long i = 0; i < n; i++) l += y[i];
  #pragma omp simd
  for (long i = 0; i < n; i++) y[i] /= l;
}
"""


def test_the_coefficients_are_the_fits():
    assert fast_exp.fit() == fast_exp.P


def test_the_numpy_form_is_within_bound():
    x = np.linspace(-100, 100, 2_000_001, dtype=np.float32)
    assert fast_exp.max_error(fast_exp.evaluate(x, LO), x, LO) < BOUND


def _compiled(tmp_path):
    return compiled_loops(SRC, tmp_path)


def test_the_compiled_macro_is_within_bound_vector_and_scalar(tmp_path):
    run = _compiled(tmp_path)
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-100, 100, 1_000_001, dtype=np.float32),
                        rng.standard_normal(100_003).astype(np.float32) * 5,
                        rng.uniform(-0.35, 0.35, 100_003).astype(np.float32),
                        rng.uniform(88.0, 88.72, 10_001).astype(np.float32)])
    for fn in ("apply", "apply_scalar"):
        y = run(fn, x)
        assert fast_exp.max_error(y, x, LO) < BOUND, fn
        assert np.all(y > 0)
    # close to the float32 emulation of the same steps (the compiled form contracts the
    # polynomial's multiply-adds into FMAs: a rounding apart, not a different method)
    y, z = run("apply", x), fast_exp.evaluate(x, LO).astype(np.float64)
    fin = np.isfinite(z)
    assert np.array_equal(np.isfinite(y), fin)
    assert np.all(np.abs(y[fin] - z[fin]) <= 3e-7 * z[fin])


def test_edges(tmp_path):
    run = _compiled(tmp_path)
    fmax_log = np.log(np.float64(np.finfo(np.float32).max))
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.7228, 88.723, 1e30, -1e30,
                  LO, LO - 1, -1e-30], np.float32)
    floor = np.exp(np.float64(LO))
    for fn in ("apply", "apply_scalar"):
        y = run(fn, x)
        assert np.isnan(y[0])                     # NaN stays NaN: verification sees it
        assert y[1] == np.inf and y[8] == np.inf and y[7] == np.inf
        assert y[3] == 1 and y[4] == 1 and y[12] == 1
        for i in (5, 6):                          # just under ln(FLT_MAX): finite and right
            assert x[i] < fmax_log and np.isfinite(y[i])
            assert abs(y[i] / np.exp(np.float64(x[i])) - 1) < BOUND
        for i in (2, 9, 10, 11):                  # the floor below lo, as before
            assert abs(y[i] / floor - 1) < BOUND


def test_a_softmax_row_sums_to_one(tmp_path):
    run = _compiled(tmp_path)
    x = np.random.default_rng(1).standard_normal(1003).astype(np.float32) * 20
    y = run("softmax_row", x)
    ref = np.exp(x.astype(np.float64) - x.max())
    assert np.allclose(y, ref / ref.sum(), rtol=1e-6, atol=1e-12)


def test_the_macro_vectorises_with_the_generated_flags(tmp_path):
    # rows dealt out to threads, each row's exps one simd loop, as the generated groups do: it
    # runs in full-width vectors and calls no vector function, the point of inlining (with the
    # bits punned through __builtin_memcpy GCC kept the value in memory in this loop and did
    # not vectorise it)
    c = tmp_path / "rows.c"
    c.write_text(PRELUDE + ROWS)
    flags = [f for f in CFLAGS if f not in ("-shared", "-fPIC")]
    out = subprocess.run(["gcc", *flags, "-c", str(c), "-o", str(tmp_path / "rows.o"),
                          "-fopt-info-vec-optimized"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    line = PRELUDE.count("\n") + ROWS.splitlines().index(INNER) + 1
    assert any(f"rows.c:{line}:" in x and "loop vectorized" in x
               for x in out.stderr.splitlines()), out.stderr
