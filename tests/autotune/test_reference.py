"""The float64 reference against independent NumPy implementations of each built-in.

The implementations below are written from each model's maths (layer norms, projections, einsums),
not by walking the IR, so a wrong statement in a built-in TOML or a wrong evaluation rule in
``autotune.reference`` shows up as a mismatch.
"""
from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import autotune
from search_spaces import builtin_names, load_workload, parse_workload
from tests.support.where import causal, where_workload

reference_module = importlib.import_module("autotune.reference")


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def f64(inputs):
    return {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}


# ---- independent implementations ---------------------------------------------------------
def np_trimul(p, incoming: bool):
    """AlphaFold 2 Algorithms 11/12 (triangle multiplicative update), with C intermediate."""
    z = layer_norm(p["x"], p["ln_in_w"], p["ln_in_b"])
    mask = p["mask"][..., None]
    a = mask * sigmoid(z @ p["w_ga"] + p["b_ga"]) * (z @ p["w_a"] + p["b_a"])
    b = mask * sigmoid(z @ p["w_gb"] + p["b_gb"]) * (z @ p["w_b"] + p["b_b"])
    if incoming:
        t = np.einsum("kjc,kic->ijc", a, b)
    else:
        t = np.einsum("ikc,jkc->ijc", a, b)
    g = sigmoid(z @ p["w_g"] + p["b_g"])
    return g * (layer_norm(t, p["ln_out_w"], p["ln_out_b"]) @ p["w_o"] + p["b_o"])


def np_attention(p):
    x = p["x"]
    d = p["w_q"].shape[2]
    q = np.einsum("sc,chd->hsd", x, p["w_q"])
    k = np.einsum("sc,chd->hsd", x, p["w_k"])
    v = np.einsum("sc,chd->hsd", x, p["w_v"])
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attn = e / e.sum(axis=-1, keepdims=True)
    o = attn @ v                                      # [h, s, d]
    concat = o.transpose(1, 0, 2).reshape(x.shape[0], -1)   # [s, h*d], head-major
    return concat @ p["w_o"].reshape(-1, p["w_o"].shape[2]) + p["b_o"]


def np_gated_mlp(p):
    x = p["x"]
    xn = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * p["norm_w"]
    g = xn @ p["w_gate"]
    silu = g / (1.0 + np.exp(-g))
    return x + (silu * (xn @ p["w_up"])) @ p["w_down"]


def np_outer_product_mean(p):
    m = layer_norm(p["msa"], p["ln_w"], p["ln_b"])
    a = m @ p["w_a"] + p["b_a"]                      # [s, i, e]
    b = m @ p["w_b"] + p["b_b"]                      # [s, j, f]
    s, n, e = a.shape
    # outer product summed over s as one GEMM: [i*e, s] @ [s, j*f]
    o = a.reshape(s, n * e).T @ b.reshape(s, n * e) / s
    o = o.reshape(n, e, n, e).transpose(0, 2, 1, 3)  # [i, j, e, f]
    return o.reshape(n, n, e * e) @ p["w_o"].reshape(e * e, -1) + p["b_o"]


IMPLS = {
    "trimul_outgoing": lambda p: {"out": np_trimul(p, incoming=False)},
    "trimul_incoming": lambda p: {"out": np_trimul(p, incoming=True)},
    "attention": lambda p: {"out": np_attention(p)},
    "gated_mlp": lambda p: {"out": np_gated_mlp(p)},
    "outer_product_mean": lambda p: {"out": np_outer_product_mean(p)},
}
# small dims, distinct where possible so that a swapped index cannot go unnoticed
SMALL = {
    "trimul_outgoing": {"N": 11, "C": 6},
    "trimul_incoming": {"N": 11, "C": 6},
    "attention": {"S": 10, "H": 3, "D": 4, "C": 8},
    "gated_mlp": {"T": 7, "C": 12, "F": 20},
    "outer_product_mean": {"S": 5, "N": 7, "C": 9, "E": 3, "Z": 4},
}


@pytest.mark.parametrize("name", builtin_names())
@pytest.mark.parametrize("seed", [0, 1])
def test_builtin_matches_independent_numpy(name, seed):
    assert name in IMPLS, f"built-in {name!r} has no independent NumPy implementation here"
    w = load_workload(name, dims=SMALL[name])
    inputs = w.random_inputs(seed=seed)
    ref = autotune.reference(w, inputs)
    want = IMPLS[name](f64(inputs))
    assert set(ref) == set(w.outputs) == set(want)
    for k in want:
        assert ref[k].dtype == np.float64 and ref[k].shape == want[k].shape
        assert np.all(np.isfinite(ref[k]))
        assert np.abs(want[k]).max() > 1e-3                      # not a trivially zero case
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["attention", "gated_mlp", "outer_product_mean"])
def test_new_builtins_at_default_dims(name):
    w = load_workload(name)
    inputs = w.random_inputs(seed=3)
    ref = autotune.reference(w, inputs)
    want = IMPLS[name](f64(inputs))
    for k in want:
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-9, atol=1e-11)
        assert 0.01 < np.std(ref[k]) < 100          # sensible scale with the [init] weights


def test_chunked_evaluation_matches(monkeypatch):
    # force the broadcasting path to work row-chunk by row-chunk
    w = load_workload("trimul_outgoing", dims={"N": 9, "C": 5})
    inputs = w.random_inputs(seed=4)
    whole = autotune.reference(w, inputs)["out"]
    monkeypatch.setattr(reference_module, "CHUNK_ELEMS", 7)
    chunked = autotune.reference(w, inputs)["out"]
    np.testing.assert_allclose(chunked, whole, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(chunked, np_trimul(f64(inputs), False), rtol=1e-10, atol=1e-12)


# ---- every language construct against NumPy ---------------------------------------------
PROGRAM = """
s[i]     += A[i,k] * v[k] / K
m[i]    max= A[i,k]
e[i,k]    = exp(A[i,k] - m[i]) - log(abs(A[i,k]) + 1) + sqrt(abs(A[i,k])) * rsqrt(2 + v[k] ** 2)
f[i,k]    = sigmoid(A[i,k]) * tanh(A[i,k]) + relu(A[i,k]) - abs(A[i,k]) + (-A[i,k]) ** 3
g[i,k]    = max(A[i,k], v[k]) + min(A[i,k], 0.5) + A[i,k] ** -2 + I
c[i,j]   += A[i,k] * B[k,j] * v[k] * 2
t[j,i]   += B[k,j] * A[i,k]
n[i]     += (3 * v[k] + A[i,k]) / 2
mn[j]   max= -B[k,j] * B[k,j]
"""


def test_every_construct_against_numpy():
    outs = ["s", "m", "e", "f", "g", "c", "t", "n", "mn"]
    text = (f'name = "all"\noutputs = {outs!r}\nprogram = """{PROGRAM}"""\n'.replace("'", '"')
            + '[dims]\nI = 5\nJ = 4\nK = 6\n[inputs]\nA = ["I", "K"]\nB = ["K", "J"]\nv = ["K"]\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = parse_workload(text, "all.toml")
    inputs = w.random_inputs(seed=5)
    ref = autotune.reference(w, inputs)
    p = f64(inputs)
    A, B, v = p["A"], p["B"], p["v"]
    m = A.max(axis=1)
    want = {
        "s": A @ v / 6,
        "m": m,
        "e": np.exp(A - m[:, None]) - np.log(np.abs(A) + 1)
        + np.sqrt(np.abs(A)) / np.sqrt(2 + v ** 2),
        "f": sigmoid(A) * np.tanh(A) + np.maximum(A, 0) - np.abs(A) + (-A) ** 3,
        "g": np.maximum(A, v) + np.minimum(A, 0.5) + A ** -2.0 + 5,
        "c": np.einsum("ik,kj,k->ij", A, B, v) * 2,
        "t": (A @ B).T,
        "n": (3 * v.sum() + A.sum(axis=1)) / 2,
        "mn": (-B * B).max(axis=0),
    }
    assert set(ref) == set(want)
    for k in want:
        assert ref[k].dtype == np.float64
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-10, atol=1e-12, err_msg=k)


# ---- where(COND, A, B) against NumPy ---------------------------------------------------------
def np_where_forms(p):
    A, B, v = p["A"], p["B"], p["v"]
    i, k = np.indices(A.shape)
    kb, jb = np.indices(B.shape)
    out = {
        "a": np.where(k <= i, A, -A),
        "b": np.where(k > i + 1, A, -100).max(axis=1),
        "c": A @ (np.where(kb - jb < 2, B, 0) * v[:, None]),
        "d": (A * np.where(i == k, 2, 1)) @ B,
        "e": np.where(i != k, np.where(i >= 2, np.exp(A), v[None, :]), 0.5),
        "f": A @ v,
        "g": A * (2 * i - k >= -1),
    }
    masked = np.where(k < i, out["a"], out["e"])
    out["r"] = (masked * out["b"][:, None] * out["g"]).sum(axis=1)
    return out


@pytest.mark.parametrize("chunk", [None, 3])
def test_where_forms_against_numpy(chunk, monkeypatch):
    """Every place a condition can be (elementwise, max=, a masked operand of a contraction, a
    mask factor without accesses, nested, index-free, a repeated index), also evaluated chunk
    by chunk so that a chunk's indices must be its absolute ones."""
    if chunk:
        monkeypatch.setattr(reference_module, "CHUNK_ELEMS", chunk)
    w = where_workload("float64")
    inputs = w.random_inputs(seed=7)
    ref = autotune.reference(w, inputs)
    want = np_where_forms(f64(inputs))
    assert set(ref) == set(want)
    for k in want:
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-12, atol=1e-12, err_msg=k)


def np_causal_attention(p, window=5, causal=True):
    """Causal multi-head attention from its maths: softmax over the keys j <= i of each query
    (every key without ``causal``), values more than ``window`` positions back weighted by a
    half."""
    x = p["x"]
    q = np.einsum("ic,chd->hid", x, p["w_q"])
    k = np.einsum("jc,chd->hjd", x, p["w_k"])
    v = np.einsum("jc,chd->hjd", x, p["w_v"])
    S, D = x.shape[0], q.shape[-1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    allowed = np.tril(np.ones((S, S), dtype=bool)) if causal else np.ones((S, S), dtype=bool)
    out = np.zeros((S, x.shape[1]))
    for h in range(q.shape[0]):
        for i in range(S):
            js = np.flatnonzero(allowed[i])
            e = np.exp(scores[h, i, js] - scores[h, i, js].max())
            wgt = e / e.sum() * np.where(i - js > window, 0.5, 1.0)
            out[i] += (wgt @ v[h, js]) @ p["w_o"][h]
    return out


def test_causal_test_workload_against_numpy():
    w = causal({"S": 11, "H": 2, "D": 4, "C": 6})
    inputs = w.random_inputs(seed=3)
    ref = autotune.reference(w, inputs)["out"]
    want = np_causal_attention(f64(inputs))
    np.testing.assert_allclose(ref, want, rtol=1e-10, atol=1e-12)
    # each mask matters: without either the result is far from it
    for other in (dict(causal=False), dict(window=10**6)):
        far = np_causal_attention(f64(inputs), **other)
        assert np.abs(far - want).max() > 1e-2 * np.abs(want).max(), other


# ---- inputs ---------------------------------------------------------------------------------
def test_random_inputs_honour_init_for_trimul():
    w = load_workload("trimul_outgoing", dims={"N": 96, "C": 16})
    x = w.random_inputs(seed=0)
    assert set(x) == set(w.input_names)
    for name, shape in w.inputs:
        assert x[name].dtype == np.float32 and x[name].shape == shape
        assert x[name].flags.c_contiguous
    mask = x["mask"]
    assert set(np.unique(mask)) == {0.0, 1.0}
    assert abs(mask.mean() - 0.9) < 0.03                      # bernoulli(0.9), 9216 samples
    assert abs(x["ln_in_w"].mean() - 1.0) < 0.1               # normal(1, 0.1)
    assert abs(x["w_a"].std() - 0.088) < 0.015                # normal(0, 0.088), 256 samples
    assert abs(x["x"].mean()) < 0.05 and abs(x["x"].std() - 1) < 0.05   # default normal(0,1)


def test_random_inputs_uniform_and_dtype():
    text = ('name = "u"\ndtype = "float64"\noutputs = ["y"]\nprogram = """\ny[i] += A[i,k] * v[k]\n"""\n'
            '[dims]\nI = 50\nK = 40\n[inputs]\nA = ["I", "K"]\nv = ["K"]\n'
            '[init]\nA = "uniform(-2, 3)"\nv = "bernoulli(0.5)"\n')
    w = parse_workload(text, "u.toml")
    x = w.random_inputs(seed=1)
    assert x["A"].dtype == np.float64
    assert x["A"].min() >= -2 and x["A"].max() < 3 and abs(x["A"].mean() - 0.5) < 0.15
    assert set(np.unique(x["v"])) <= {0.0, 1.0}


@pytest.mark.parametrize("name", builtin_names())
def test_random_inputs_never_all_zero_and_seeded(name):
    w = load_workload(name, dims=SMALL.get(name))
    a, b, c = w.random_inputs(seed=0), w.random_inputs(seed=0), w.random_inputs(seed=1)
    for k in w.input_names:
        assert a[k].dtype == np.float32
        assert np.any(a[k] != 0), k
        assert np.all(np.isfinite(a[k]))
        np.testing.assert_array_equal(a[k], b[k])              # same seed, same data
        if a[k].size > 4 and k != "mask":
            assert not np.array_equal(a[k], c[k]), k           # another seed, other data
    assert any(not np.array_equal(a[k], c[k]) for k in w.input_names)


def test_reference_output_is_float64_and_inputs_untouched():
    w = load_workload("gated_mlp", dims=SMALL["gated_mlp"])
    inputs = w.random_inputs(seed=2)
    copies = {k: v.copy() for k, v in inputs.items()}
    out = autotune.reference(w, inputs)
    assert list(out) == ["out"] and out["out"].dtype == np.float64
    assert out["out"].shape == (7, 12)
    for k in inputs:
        np.testing.assert_array_equal(inputs[k], copies[k])
        assert inputs[k].dtype == np.float32
    # float64 inputs give the same answer (the reference works in float64 throughout)
    np.testing.assert_array_equal(autotune.reference(w, f64(inputs))["out"], out["out"])


def test_reference_rejects_missing_or_misshapen_inputs():
    w = load_workload("gated_mlp", dims=SMALL["gated_mlp"])
    inputs = w.random_inputs(seed=0)
    with pytest.raises(ValueError, match="missing"):
        autotune.reference(w, {k: v for k, v in inputs.items() if k != "w_up"})
    bad = dict(inputs, x=inputs["x"][:-1])
    with pytest.raises(ValueError, match="shape"):
        autotune.reference(w, bad)
