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


def np_causal_attention(p):
    """Multi-head self-attention where position i attends to positions j <= i (scores above the
    diagonal set to -inf before the softmax)."""
    x = p["x"]
    n, d = x.shape[0], p["w_q"].shape[2]
    q = np.einsum("sc,chd->hsd", x, p["w_q"])
    k = np.einsum("sc,chd->hsd", x, p["w_k"])
    v = np.einsum("sc,chd->hsd", x, p["w_v"])
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), q @ k.transpose(0, 2, 1) / np.sqrt(d),
                      -np.inf)
    o = softmax(scores) @ v                                  # [h, s, d]
    return o.transpose(1, 0, 2).reshape(n, -1) @ p["w_o"].reshape(-1, p["w_o"].shape[2]) + p["b_o"]

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


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_triangle_attention_starting(p):
    """AlphaFold 2 Algorithm 13 with OpenFold's mask bias 1e9 * (mask - 1) on the keys [i, k]."""
    z = layer_norm(p["z"], p["ln_w"], p["ln_b"])               # [i, j, c]
    d = p["w_q"].shape[2]
    q = np.einsum("ijc,chd->ijhd", z, p["w_q"]) / np.sqrt(d)
    k = np.einsum("ijc,chd->ijhd", z, p["w_k"])
    v = np.einsum("ijc,chd->ijhd", z, p["w_v"])
    b = np.einsum("jkc,ch->jkh", z, p["w_b"])                  # the triangle bias b[j, k, h]
    logits = (np.einsum("ijhd,ikhd->ijkh", q, k) + b[None]
              + 1e9 * (p["mask"] - 1.0)[:, None, :, None])     # key (i, k) masked
    a = softmax(logits, axis=2)                                # over k
    g = sigmoid(np.einsum("ijc,chd->ijhd", z, p["w_g"]) + p["b_g"])
    o = g * np.einsum("ijkh,ikhd->ijhd", a, v)
    n = z.shape[0]
    return o.reshape(n, n, -1) @ p["w_o"].reshape(-1, p["w_o"].shape[2]) + p["b_o"]


def np_triangle_attention_ending(p):
    """Algorithm 14 the way OpenFold computes it: the starting-node block on the transposed pair
    representation and mask, its output transposed back."""
    t = dict(p, z=p["z"].transpose(1, 0, 2), mask=p["mask"].T)
    return np_triangle_attention_starting(t).transpose(1, 0, 2)


def np_msa_row_attention(p):
    """AlphaFold 2 Algorithm 7 with OpenFold's MSA mask bias 1e9 * (mask - 1) on the keys [s, j]."""
    m = layer_norm(p["m"], p["ln_m_w"], p["ln_m_b"])           # [s, i, c]
    d = p["w_q"].shape[2]
    q = np.einsum("sic,chd->shid", m, p["w_q"])
    k = np.einsum("sjc,chd->shjd", m, p["w_k"])
    v = np.einsum("sjc,chd->shjd", m, p["w_v"])
    b = layer_norm(p["z"], p["ln_z_w"], p["ln_z_b"]) @ p["w_z"]   # [i, j, h]
    logits = (q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + b.transpose(2, 0, 1)[None]
              + 1e9 * (p["mask"] - 1.0)[:, None, None, :])
    o = softmax(logits) @ v                                    # [s, h, i, d]
    g = sigmoid(np.einsum("sic,chd->shid", m, p["w_g"]) + p["b_g"][None, :, None, :])
    s, h, n, _ = o.shape
    concat = (g * o).transpose(0, 2, 1, 3).reshape(s, n, h * d)
    return concat @ p["w_o"].reshape(h * d, -1) + p["b_o"]


def np_pair_transition(p):
    """AlphaFold 2 Algorithm 15: LayerNorm, Linear to 4c, ReLU, Linear back to c."""
    a = layer_norm(p["z"], p["ln_w"], p["ln_b"]) @ p["w_1"] + p["b_1"]
    return np.maximum(a, 0.0) @ p["w_2"] + p["b_2"]


def np_gelu_mlp(p):
    """A pre-norm transformer MLP with GELU in its tanh approximation (Hendrycks & Gimpel)."""
    x = p["x"]
    h = layer_norm(x, p["ln_w"], p["ln_b"]) @ p["w_1"] + p["b_1"]
    gelu = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))
    return x + gelu @ p["w_2"] + p["b_2"]


IMPLS = {
    "trimul_outgoing": lambda p: {"out": np_trimul(p, incoming=False)},
    "trimul_incoming": lambda p: {"out": np_trimul(p, incoming=True)},
    "attention": lambda p: {"out": np_attention(p)},
    "gated_mlp": lambda p: {"out": np_gated_mlp(p)},
    "outer_product_mean": lambda p: {"out": np_outer_product_mean(p)},
    "triangle_attention_starting": lambda p: {"out": np_triangle_attention_starting(p)},
    "triangle_attention_ending": lambda p: {"out": np_triangle_attention_ending(p)},
    "msa_row_attention": lambda p: {"out": np_msa_row_attention(p)},
    "pair_transition": lambda p: {"out": np_pair_transition(p)},
    "gelu_mlp": lambda p: {"out": np_gelu_mlp(p)},
    "causal_attention": lambda p: {"out": np_causal_attention(p)},
}
# small dims, distinct where possible so that a swapped index cannot go unnoticed
SMALL = {
    "trimul_outgoing": {"N": 11, "C": 6},
    "trimul_incoming": {"N": 11, "C": 6},
    "attention": {"S": 10, "H": 3, "D": 4, "C": 8},
    "gated_mlp": {"T": 7, "C": 12, "F": 20},
    "outer_product_mean": {"S": 5, "N": 7, "C": 9, "E": 3, "Z": 4},
    "triangle_attention_starting": {"N": 7, "C": 6, "H": 2, "D": 3},
    "triangle_attention_ending": {"N": 7, "C": 6, "H": 2, "D": 3},
    "msa_row_attention": {"S": 3, "N": 7, "Cm": 6, "Cz": 5, "H": 2, "D": 4},
    "pair_transition": {"N": 5, "C": 6, "F": 24},
    "gelu_mlp": {"T": 7, "C": 12, "F": 20},
    "causal_attention": {"S": 9, "H": 3, "D": 4, "C": 8},
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



# the blocks with pair or MSA inputs at their default channels and heads, their lengths cut so that
# the float64 reference of an N^3 or S N^2 tensor stays fast
@pytest.mark.parametrize("name,dims", [
    ("gelu_mlp", {}),
    ("pair_transition", {"N": 24}),
    ("triangle_attention_starting", {"N": 24}),
    ("triangle_attention_ending", {"N": 24}),
    ("msa_row_attention", {"S": 6, "N": 24}),
])
def test_blocks_at_default_channels(name, dims):
    w = load_workload(name, dims)
    inputs = w.random_inputs(seed=3)
    ref = autotune.reference(w, inputs)
    want = IMPLS[name](f64(inputs))
    for k in want:
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-9, atol=1e-11)
        assert 0.1 < np.std(ref[k]) < 10           # sensible scale with the [init] weights


@pytest.mark.parametrize("seed", [0, 1])
def test_causal_attention_is_masked_attention(seed):
    w = load_workload("causal_attention", dims=SMALL["causal_attention"])
    p = f64(w.random_inputs(seed=seed))
    got = autotune.reference(w, p)["out"]
    np.testing.assert_allclose(got, np_causal_attention(p), rtol=1e-10, atol=1e-12)
    # the last position sees every key: plain attention there, and nowhere else
    full = np_attention(p)
    np.testing.assert_allclose(got[-1], full[-1], rtol=1e-10, atol=1e-12)
    assert all(not np.allclose(got[i], full[i], rtol=1e-6) for i in range(len(got) - 1))
    # the first position sees only itself: its output is its own value vector, projected
    v0 = np.einsum("c,chd->hd", p["x"][0], p["w_v"]).reshape(-1)
    np.testing.assert_allclose(got[0], v0 @ p["w_o"].reshape(-1, p["w_o"].shape[2]) + p["b_o"],
                               rtol=1e-10, atol=1e-12)

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


def np_windowed_causal_attention(p, window=5, causal=True):
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
    want = np_windowed_causal_attention(f64(inputs))
    np.testing.assert_allclose(ref, want, rtol=1e-10, atol=1e-12)
    # each mask matters: without either the result is far from it
    for other in (dict(causal=False), dict(window=10**6)):
        far = np_windowed_causal_attention(f64(inputs), **other)
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
