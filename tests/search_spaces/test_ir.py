"""The IR: iteration domains, indexing maps, contraction classification, the canonical hash."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

import autotune
from search_spaces import builtin_names, load_workload, parse_workload
from search_spaces.ir import Access
from search_spaces.loader import builtin_text

SMALL = {"trimul_outgoing": {"N": 8, "C": 4}, "trimul_incoming": {"N": 8, "C": 4},
         "attention": {"S": 6, "H": 2, "D": 3, "C": 5},
         "gated_mlp": {"T": 4, "C": 6, "F": 10},
         "outer_product_mean": {"S": 3, "N": 5, "C": 6, "E": 2, "Z": 7},
         "triangle_attention_starting": {"N": 5, "C": 6, "H": 2, "D": 3},
         "triangle_attention_ending": {"N": 5, "C": 6, "H": 2, "D": 3},
         "msa_row_attention": {"S": 3, "N": 5, "Cm": 6, "Cz": 4, "H": 2, "D": 3},
         "pair_transition": {"N": 5, "C": 4, "F": 16},
         "gelu_mlp": {"T": 4, "C": 6, "F": 10},
         "causal_attention": {"S": 6, "H": 2, "D": 3, "C": 5}}


def small(name: str):
    return load_workload(name, dims=SMALL.get(name))


def maps(op):
    """{tensor: indexing map} for every access of ``op`` (each tensor read once here)."""
    return {a.tensor: op.indexing_map(a) for a in op.reads()}


# ---- domains and indexing maps ----------------------------------------------------------
def test_trimul_outgoing_einsum_domain_and_maps():
    w = small("trimul_outgoing")
    t = w.op("t")
    assert t.combiner == "sum"
    assert t.parallel == ("d0", "d1", "d2") and t.reduction == ("d3",)   # i, j, h | k
    assert t.domain == ("d0", "d1", "d2", "d3")
    assert t.extents == (8, 8, 4, 8)
    assert t.out_shape == (8, 8, 4) and t.iterations == 8 * 8 * 4 * 8
    # 'ikc,jkc->ijc': a[i,k,h] -> (0, 3, 2), b[j,k,h] -> (1, 3, 2)
    assert [(a.tensor, a.idx) for a in t.reads()] == [("a", ("d0", "d3", "d2")),
                                                      ("b", ("d1", "d3", "d2"))]
    assert maps(t) == {"a": (0, 3, 2), "b": (1, 3, 2)}


def test_trimul_incoming_einsum_maps():
    t = small("trimul_incoming").op("t")
    assert t.parallel == ("d0", "d1", "d2") and t.reduction == ("d3",)
    # 'kjc,kic->ijc': a[k,j,h] -> (3, 1, 2), b[k,i,h] -> (3, 0, 2)
    assert maps(t) == {"a": (3, 1, 2), "b": (3, 0, 2)}


def test_trimul_other_ops():
    w = small("trimul_outgoing")
    mu = w.op("mu")                 # mu[i,j] += x[i,j,c] / C
    assert (mu.parallel, mu.reduction, mu.extents) == (("d0", "d1"), ("d2",), (8, 8, 4))
    assert maps(mu) == {"x": (0, 1, 2)}
    xn = w.op("xn")                 # elementwise with broadcasts of mu-like and per-channel tensors
    assert xn.combiner == "none" and xn.reduction == ()
    assert maps(xn) == {"xc": (0, 1, 2), "var": (0, 1), "ln_in_w": (2,), "ln_in_b": (2,)}
    a = w.op("a")
    assert maps(a) == {"mask": (0, 1), "ga": (0, 1, 2), "b_ga": (2,), "pa": (0, 1, 2),
                       "b_a": (2,)}
    pa = w.op("pa")                 # pa[i,j,h] += xn[i,j,c] * w_a[c,h]
    assert pa.reduction == ("d3",) and maps(pa) == {"xn": (0, 1, 3), "w_a": (3, 2)}
    assert w.shapes["t"] == (8, 8, 4) and w.shapes["mu"] == (8, 8)


def _one(program: str, inputs: str, dims: str = "I = 2\nJ = 3\nK = 5\nL = 7\n"):
    out = re.match(r"\s*(\w+)", program.strip().split("\n")[-1]).group(1)
    text = (f'name = "t"\noutputs = ["{out}"]\nprogram = """\n{program}\n"""\n'
            f"[dims]\n{dims}[inputs]\n{inputs}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return parse_workload(text, "t.toml")


def test_domain_is_parallel_in_output_order_then_reduction_in_first_appearance():
    w = _one("y[j,i] += A[i,k,l] * B[l,j,k]", 'A = ["I", "K", "L"]\nB = ["L", "J", "K"]\n')
    op = w.ops[0]
    # j -> d0, i -> d1 (output order), then k -> d2, l -> d3 (first appearance on the right)
    assert op.parallel == ("d0", "d1") and op.reduction == ("d2", "d3")
    assert op.extents == (3, 2, 5, 7)
    assert maps(op) == {"A": (1, 2, 3), "B": (3, 0, 2)}
    assert op.text() == "y[d0,d1] += (A[d1,d2,d3] * B[d3,d0,d2])"


def test_broadcasting_maps_and_max_combiner():
    w = _one("m[i] max= A[i,k]\nz[i,k] = exp(A[i,k] - m[i]) * v[k]",
             'A = ["I", "K"]\nv = ["K"]\n')
    m, z = w.ops
    assert m.combiner == "max" and m.reduction == ("d1",) and maps(m) == {"A": (0, 1)}
    assert z.combiner == "none" and z.domain == ("d0", "d1")
    assert maps(z) == {"A": (0, 1), "m": (0,), "v": (1,)}
    assert w.consumers["m"] == ("z",) and w.consumers["A"] == ("m", "z")
    assert w.producer["z"] is z


def test_indexing_map_of_an_arbitrary_access():
    op = _one("y[i,j] += A[i,k] * B[k,j]", 'A = ["I", "K"]\nB = ["K", "J"]\n').ops[0]
    assert op.indexing_map(Access("B", ("d2", "d1"))) == (2, 1)
    assert op.extent("d2") == 5


def test_attention_softmax_ops():
    w = small("attention")
    m = w.op("m")
    assert m.combiner == "max" and m.reduction == ("d2",) and maps(m) == {"s": (0, 1, 2)}
    po = w.op("po")                 # po[i,c] += o[i,h,d] * w_o[h,d,c]: two reduction indices
    assert po.parallel == ("d0", "d1") and po.reduction == ("d2", "d3")
    assert maps(po) == {"o": (0, 2, 3), "w_o": (2, 3, 1)}
    o = w.op("o")                   # o[i,h,d] += a[h,i,j] * v[h,j,d]
    assert maps(o) == {"a": (1, 0, 3), "v": (1, 3, 2)}


@pytest.mark.parametrize("name", builtin_names())
def test_program_is_a_dag_in_definition_order(name):
    w = small(name)
    seen = set(w.input_names)
    for op in w.ops:
        assert set(op.inputs()) <= seen, (op.out, op.inputs())
        assert op.out not in seen
        seen.add(op.out)
        assert len(op.extents) == len(op.domain)
        for a in op.reads():        # every map is a projected permutation into the domain
            m = op.indexing_map(a)
            assert len(set(m)) == len(m) and all(0 <= p < len(op.domain) for p in m)
            assert tuple(op.extents[p] for p in m) == w.shapes[a.tensor]
    assert set(w.outputs) <= {op.out for op in w.ops}


# ---- contraction classification ---------------------------------------------------------
CONTRACTIONS = {
    "trimul_outgoing": {"pa", "ga", "pb", "gb", "t", "po", "go"},
    "trimul_incoming": {"pa", "ga", "pb", "gb", "t", "po", "go"},
    "attention": {"q", "k", "v", "s", "o", "po"},
    "gated_mlp": {"g", "u", "y"},
    "outer_product_mean": {"pa", "pb", "o", "po"},
}


@pytest.mark.parametrize("name", sorted(CONTRACTIONS))
def test_is_contraction_on_builtins(name):
    w = small(name)
    assert {op.out for op in w.ops if op.is_contraction} == CONTRACTIONS[name]


def test_layer_norm_and_square_sums_are_not_contractions():
    w = small("trimul_outgoing")
    for name in ("mu", "var", "mu2", "var2"):        # sum(x)/C and sum(xc*xc)/C
        assert w.op(name).combiner == "sum" and not w.op(name).is_contraction
    for name in ("xc", "xn", "a", "b", "out"):        # elementwise
        assert not w.op(name).is_contraction
    assert not small("gated_mlp").op("ms").is_contraction       # sum(x*x)/C
    att = small("attention")
    assert not att.op("m").is_contraction and not att.op("l").is_contraction


def test_is_contraction_small_programs():
    inp = 'A = ["I", "K"]\nB = ["K", "J"]\n'
    assert _one("y[i,j] += A[i,k] * B[k,j]", inp).ops[0].is_contraction
    assert _one("y[i,j] += -A[i,k] * B[k,j] / 2", inp).ops[0].is_contraction
    assert not _one("y[i] += A[i,k] * A[i,k]", 'A = ["I", "K"]\n').ops[0].is_contraction
    assert not _one("y[i,j] max= A[i,k] * B[k,j]", inp).ops[0].is_contraction   # max, not sum
    # a product of sums is not a product of factors
    assert not _one("y[i,j] += A[i,k] + B[k,j]", inp).ops[0].is_contraction


# ---- the canonical hash ------------------------------------------------------------------
TEXT = builtin_text("trimul_outgoing")


def h(text: str, dims=None, path="x.toml") -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_workload(text, path, dims).hash


def test_hash_is_sha256_hex_and_stable_in_process():
    a = h(TEXT)
    assert re.fullmatch(r"[0-9a-f]{64}", a)
    assert a == h(TEXT) == load_workload("trimul_outgoing").hash
    assert h(TEXT, path="elsewhere.toml") == a


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_hash_is_stable_across_processes(seed):
    code = ("import autotune; print(autotune.load_workload('trimul_outgoing', "
            "dims={'N': 16, 'C': 8}).hash); print(autotune.load_workload('attention').hash)")
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, timeout=60).stdout.split()
    assert out == [autotune.load_workload("trimul_outgoing", dims={"N": 16, "C": 8}).hash,
                   autotune.load_workload("attention").hash]


def test_hash_ignores_whitespace_comments_name_summary_and_index_names():
    base = h(TEXT)
    spaced = TEXT.replace("t[i,j,h]   += a[i,k,h] * b[j,k,h]",
                          "t[ i , j , h ]+=a[i,k,h]*b[j,k,h]   # the einsum, again\n\n# extra")
    assert spaced != TEXT and h(spaced) == base
    no_comments = "\n".join(l for l in TEXT.split("\n") if not l.lstrip().startswith("#"))
    assert h(no_comments) == base
    renamed = TEXT.replace("t[i,j,h]   += a[i,k,h] * b[j,k,h]", "t[p,q,r] += a[p,s,r] * b[q,s,r]")
    assert renamed != TEXT and h(renamed) == base
    meta = TEXT.replace('name = "trimul_outgoing"', 'name = "other"').replace(
        'summary = "AlphaFold', 'summary = "Not AlphaFold')
    assert h(meta) == base
    # a literal extent equal to the dim's: the same shapes, the same hash
    assert h(TEXT.replace('mask = ["N", "N"]', 'mask = ["N", 702]')) == base
    # the same dims given as overrides or written in the file
    assert h(TEXT, dims={"N": 16}) == h(TEXT.replace("N = 702", "N = 16"))


@pytest.mark.parametrize("change", [
    ("N = 702", "N = 701"),                                             # a dim
    ("C = 128", "C = 64"),
    ("0.00001", "0.0001"),                                              # an expression constant
    ("x[i,j,c] / C", "x[i,j,c] / N"),                                   # a dim used as constant
    ("t[i,j,h]   += a[i,k,h] * b[j,k,h]", "t[i,j,h]   += a[k,j,h] * b[k,i,h]"),   # the maps
    ("sigmoid(go[i,j,c]", "tanh(go[i,j,c]"),                            # a function
    ("t[i,j,h]   +=", "t[i,j,h] max="),                                 # the combiner
    ('dtype = "float32"', 'dtype = "float64"'),                         # the dtype
    ("rtol = 1e-4", "rtol = 1e-3"),                                     # the tolerance
    ('outputs = ["out"]', 'outputs = ["out", "t"]'),                    # the outputs
    ("[tolerance]", '[space]\ntiles = [16]\n[tolerance]'),              # the space table
])
def test_hash_changes_with_meaning(change):
    old, new = change
    assert TEXT.count(old) >= 1
    assert h(TEXT.replace(old, new)) != h(TEXT)


def test_hash_changes_with_input_shape_and_dims_override():
    base = h(TEXT)
    assert h(TEXT, dims={"N": 64}) != base
    assert h(TEXT, dims={"N": 64}) != h(TEXT, dims={"N": 64, "C": 16})
    shape = _one("y[i] += A[i,k]", 'A = ["I", "K"]\n').hash
    assert _one("y[i] += A[i,k]", 'A = ["I", "L"]\n').hash != shape
    assert _one("y[i] += A[i,k]", 'A = ["I", "K"]\n').hash == shape


def test_all_builtins_have_distinct_hashes():
    hashes = {small(n).hash for n in builtin_names()}
    assert len(hashes) == len(builtin_names())
