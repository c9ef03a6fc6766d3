"""The float32 tanh the CPU codegen inlines (autotune.backends.cpu.fast_tanh): its coefficients
are its own fit's, and compiled with the generated code's flags it stays within 4e-7 of tanh
over every float range, with tanh's values at the edges (0, +-inf, NaN)."""
from __future__ import annotations

import numpy as np

from autotune.backends.cpu import fast_tanh
from autotune.backends.cpu.codegen import PRELUDE

from tests.support.float_loops import compiled_loops

BOUND = 4e-7          # 3.4 float32 ulps at 1; the fit's own figure is 3.74e-7

SRC = PRELUDE + """
void apply(const float *restrict x, float *restrict y, long n) {
  #pragma omp simd
  for (long i = 0; i < n; i++) y[i] = AT_TANHf(x[i]);
}
void apply_scalar(const float *restrict x, float *restrict y, long n) {
  for (long i = 0; i < n; i++) { volatile float v = x[i]; y[i] = AT_TANHf(v); }
}
"""


def test_the_coefficients_are_the_fits():
    assert fast_tanh.fit() == (fast_tanh.P, fast_tanh.Q)


def test_the_numpy_form_is_within_bound():
    x = np.linspace(-12, 12, 2_000_001, dtype=np.float32)
    assert fast_tanh.max_error(fast_tanh.evaluate(x), x) < BOUND


def _compiled(tmp_path):
    return compiled_loops(SRC, tmp_path)


def test_the_compiled_macro_is_within_bound_vector_and_scalar(tmp_path):
    run = _compiled(tmp_path)
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-12, 12, 1_000_001, dtype=np.float32),
                        rng.standard_normal(100_003).astype(np.float32) * 3,
                        np.float32(10.0) ** rng.uniform(-30, 30, 10_001).astype(np.float32),
                        -np.float32(10.0) ** rng.uniform(-30, 30, 10_001).astype(np.float32)])
    for fn in ("apply", "apply_scalar"):
        y = run(fn, x)
        assert fast_tanh.max_error(y, x) < BOUND, fn
        assert np.all(np.abs(y) <= 1)
    # odd, and exactly +-1 at the clamp and beyond
    assert np.array_equal(run("apply", -x[:1000]), -run("apply", x[:1000]))
    assert np.all(run("apply", np.array([9.5, 20, 1e30], np.float32)) == 1)


def test_edges(tmp_path):
    run = _compiled(tmp_path)
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-38, -1e-45], np.float32)
    for fn in ("apply", "apply_scalar"):
        y = run(fn, x)
        assert y[0] == 0 and y[1] == 0 and y[2] == 1 and y[3] == -1
        assert np.isnan(y[4])                       # NaN stays NaN: verification sees it
        assert abs(y[5] - 1e-38) <= 1e-44 and abs(y[6] + 1e-45) <= 2e-45
