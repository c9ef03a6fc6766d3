"""Peers generated from the IR (autotune.bench.peers) agree with the float64 reference."""
import sys
import warnings

import numpy as np
import pytest

from tests.support.skips import require

require("jax")

import autotune  # noqa: E402
from autotune.backends.base import relative_error  # noqa: E402
from autotune.bench.peers import PeerUnavailable, jax_function, torch_function  # noqa: E402
from search_spaces import builtin_names, load_workload, parse_workload  # noqa: E402
from tests.support.where import causal, where_workload  # noqa: E402


def small(name: str):
    w = load_workload(name)
    return load_workload(name, {k: min(v, 12) for k, v in w.dims})


def errors(w, fn, seed=1):
    inputs = w.random_inputs(seed=seed)
    ref = autotune.reference(w, inputs)
    outs = fn(**inputs)
    assert set(outs) == set(w.outputs)
    for o in w.outputs:
        assert tuple(outs[o].shape) == w.shapes[o], o
    return {o: relative_error(np.asarray(outs[o], dtype=np.float64), ref[o]) for o in w.outputs}


@pytest.mark.parametrize("name", builtin_names())
@pytest.mark.parametrize("precision", ["default", "highest"])
def test_jax_peer_matches_reference(name, precision):
    w = small(name)
    errs = errors(w, jax_function(w, precision))
    assert all(e <= w.rtol for e in errs.values()), errs


PROGRAM = """
s[i]     += A[i,k] * v[k] / K
m[i]    max= A[i,k]
e[i,k]    = exp(A[i,k] - m[i]) - log(abs(A[i,k]) + 1) + sqrt(abs(A[i,k])) * rsqrt(2 + v[k] ** 2)
f[i,k]    = sigmoid(A[i,k]) * tanh(A[i,k]) + relu(A[i,k]) - abs(A[i,k]) + (-A[i,k]) ** 3
g[i,k]    = max(A[i,k], v[k]) + min(A[i,k], 0.5) + (A[i,k] * A[i,k] + 1) ** -2 + I
c[i,j]   += A[i,k] * B[k,j] * v[k] * 2
t[j,i]   += B[k,j] * A[i,k]
n[i]     += (3 * v[k] + A[i,k]) / 2
mn[j]   max= -B[k,j] * B[k,j]
n2[i]    += A[i,k] * exp(v[k]) * A[i,k] / sqrt(4)
p0[i]    += A[i,k] ** 0
"""
OUTS = ["s", "m", "e", "f", "g", "c", "t", "n", "mn", "n2", "p0"]


def every_construct(dtype: str):
    text = (f'name = "all"\ndtype = "{dtype}"\noutputs = {OUTS!r}\n'.replace("'", '"')
            + f'program = """{PROGRAM}"""\n'
            + '[dims]\nI = 5\nJ = 4\nK = 6\n[inputs]\nA = ["I", "K"]\nB = ["K", "J"]\n'
              'v = ["K"]\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_workload(text, "all.toml")


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float64", 1e-12)])
def test_jax_peer_every_construct(dtype, tol):
    """Every function, Pow (negative and zero exponents), max reductions, transposed outputs,
    repeated and constant factors; float64 runs with 64-bit types on."""
    w = every_construct(dtype)
    fn = jax_function(w, "highest")
    errs = errors(w, fn, seed=5)
    assert all(e <= tol for e in errs.values()), errs
    if dtype == "float64":
        out = fn(**w.random_inputs(seed=5))
        assert all(np.asarray(v).dtype == np.float64 for v in out.values())


def test_jax_peer_is_jitted_and_reusable():
    import jax
    w = small("gated_mlp")
    fn = jax_function(w)
    assert isinstance(fn, type(jax.jit(lambda x: x)))
    a = fn(**w.random_inputs(seed=1))["out"]
    b = fn(**w.random_inputs(seed=2))["out"]
    assert not np.allclose(np.asarray(a), np.asarray(b))


def test_bad_precision():
    with pytest.raises(ValueError, match="precision"):
        jax_function(small("gated_mlp"), "fast")


@pytest.mark.parametrize("builder,module", [(jax_function, "jax"), (torch_function, "torch")])
def test_missing_framework_is_one_clear_error(monkeypatch, builder, module):
    monkeypatch.setitem(sys.modules, module, None)   # makes `import module` raise ImportError
    with pytest.raises(PeerUnavailable) as e:
        builder(small("gated_mlp"))
    assert "\n" not in str(e.value) and "not installed" in str(e.value)


@pytest.mark.parametrize("name", builtin_names())
def test_torch_peer_matches_reference(name):
    require("torch")
    w = small(name)
    errs = errors(w, lambda **x: {k: v.numpy() for k, v in torch_function(w)(**x).items()})
    assert all(e <= w.rtol for e in errs.values()), errs


# ---- where(COND, A, B): jnp.where / torch.where on iota comparisons ---------------------------
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float64", 1e-12)])
def test_jax_peer_every_where_form(dtype, tol):
    w = where_workload(dtype)
    errs = errors(w, jax_function(w, "highest"), seed=4)
    assert all(e <= tol for e in errs.values()), errs


def test_jax_peer_causal_attention():
    w = causal()
    errs = errors(w, jax_function(w, "highest"), seed=2)
    assert all(e <= w.rtol for e in errs.values()), errs


@pytest.mark.parametrize("make", [lambda: where_workload("float64"), causal],
                         ids=["where_forms", "causal"])
def test_torch_peer_where(make):
    require("torch")
    w = make()
    errs = errors(w, lambda **x: {k: v.numpy() for k, v in torch_function(w)(**x).items()})
    assert all(e <= max(w.rtol, 1e-10) for e in errs.values()), errs
