"""Pairs in the generated kernel: two contractions over a shared operand under one epilogue
(trimul's a = mask * sigmoid(ga + b) * (pa + b), a SwiGLU's silu(x W_gate) * (x W_up)) computed
as one kernel whose tiles hold both at the same elements.  Legal only where the two really are
one GEMM over interleaved operands; the space asks it and params_of rebuilds it; the CPU
executor runs it (verified against the float64 reference on odd extents, in both store
orientations and along both contraction axes); the cost model prices one pass; emit names it."""
from __future__ import annotations

import numpy as np
import pytest

import costmodel
from autotune.backends.cpu.gemm_call import kernel_spec, pair_axis
from autotune.backends.factory import backend_kind
from search_spaces import load_workload
from search_spaces.answers import params_of
from search_spaces.candidate import IMPL_KERNEL, Candidate
from search_spaces.kernel_fusion import kernel_parts, pair_of
from tests.autotune.backends.test_kernel_epilogue import (epilogues, kernel_plan, run_checked,
                                                          space_of)
from tests.search_spaces.test_orders import workload


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-pair")


def shared_b():
    """Two projections whose shared operand is their second factor: the pair runs along m."""
    return workload("p1[c,t] += w1[c,k] * x[t,k]\np2[c,t] += w2[c,k] * x[t,k]\n"
                    "g[c,t] = sigmoid(p2[c,t]) * p1[c,t]\nr[c,t] = g[c,t] * g[c,t]",
                    {"C": 11, "T": 19, "K": 7},
                    {"x": ["T", "K"], "w1": ["C", "K"], "w2": ["C", "K"]})


def two(second: str, dims=None):
    return workload(f"p1[t,c] += x[t,k] * w1[k,c]\n{second}\nr[t,c] = p1[t,c] * p2[t,c]",
                    dims or {"T": 9, "C": 9, "K": 9},
                    {"x": ["T", "K"], "w1": ["K", "C"],
                     **({"w2": ["K", "C"]} if "w2" in second else {})})


def pairs_of(w, cand) -> dict[str, str]:
    out = {}
    for s in cand.schedules:
        if s.impl == IMPL_KERNEL:
            parts = kernel_parts(w, cand.fused_pairs, s.anchor)
            if parts.pair:
                out[s.anchor] = parts.pair
    return out


def test_legality(small):
    w = small("trimul_outgoing")
    epi = pair_of(w, "ga", "pa", "a")
    assert epi is not None and epi.shared == "a" and epi.pair == "pa"
    assert pair_of(w, "go", "po", "out") is None           # go reads xn, po reads tn
    assert pair_of(w, "pa", "pb", "a") is None             # a does not read pb
    assert pair_of(small("gated_mlp"), "g", "u", "hid").shared == "a"
    assert pair_of(shared_b(), "p2", "p1", "g").shared == "b"
    assert pair_of(two("p2[t,c] += x[t,k] * w2[k,c]"), "p1", "p2", "r") is not None
    # the shared tensor read at other positions, the same second operand, another scale
    assert pair_of(two("p2[t,c] += x[k,t] * w2[k,c]"), "p1", "p2", "r") is None
    assert pair_of(two("p2[t,c] += x[t,k] * w1[k,c]"), "p1", "p2", "r") is None
    assert pair_of(two("p2[t,c] += 2 * x[t,k] * w2[k,c]"), "p1", "p2", "r") is None
    # the second operands read transposed against each other
    w_t = workload("p1[t,c] += x[t,k] * w1[k,c]\np2[t,c] += x[t,k] * w2[c,k]\n"
                   "r[t,c] = p1[t,c] * p2[t,c]", {"T": 9, "C": 9, "K": 9},
                   {"x": ["T", "K"], "w1": ["K", "C"], "w2": ["C", "K"]})
    assert pair_of(w_t, "p1", "p2", "r") is None


def test_the_space_asks_pairs_and_rebuilds_them(small):
    for w, want in ((small("trimul_outgoing"), {"a": "pa", "b": "pb"}),
                    (small("gated_mlp"), {"hid": "u"}), (shared_b(), {"g": "p1"})):
        space = space_of(w)
        cand = kernel_plan(space, 0, pair=lambda e: 1)
        assert pairs_of(w, cand) == want
        params = params_of(space, cand)
        assert params is not None and space.build(lambda n, o: params[n]).key == cand.key
        # the pair asked as pair:p2->c
        assert all(params[f"pair:{p2}->{c}"] == 1 for c, p2 in want.items())
        # answering no to the pair's own question leaves the plain epilogue
        plain = kernel_plan(space, 0)
        assert pairs_of(w, plain) == {}
        assert set(want) <= set(epilogues(w, plain))


@pytest.mark.parametrize("name", ["trimul_outgoing", "gated_mlp", "shared_b"])
def test_pairs_run_verified(small, name, kdir):
    w = shared_b() if name == "shared_b" else small(name)
    space = space_of(w)
    seen = set()
    for seed in range(2):        # (seeds 0 and 1 take both orientations on all three)
        cand = kernel_plan(space, seed, pair=lambda e: 1)
        assert pairs_of(w, cand)
        run_checked(w, cand, kdir, seed)
        for anchor in pairs_of(w, cand):
            spec = kernel_spec(w, cand, anchor)
            seen.add((spec.pair, pair_axis(spec)))
    # both kernel axes (the store orientation decides which one the pair halves)
    assert {p for p, _ in seen} == {"rows", "cols"}, seen
    assert {a for _, a in seen} == {"m" if name == "shared_b" else "n"}


def test_pairs_split_by_columns_run_verified(kdir):
    """Split n deals chunks of the kernel's columns to the threads, each packing its own B
    panels (a pair along n: both halves, from both operands) and all of A (a pair along m:
    its interleaved panels) again: verified in both orientations and along both axes, at
    extents past what runs on one thread (search_spaces.serial)."""
    along_n = two("p2[t,c] += x[t,k] * w2[k,c]", {"T": 70, "C": 45, "K": 33})
    along_m = workload("p1[c,t] += w1[c,k] * x[t,k]\np2[c,t] += w2[c,k] * x[t,k]\n"
                       "g[c,t] = sigmoid(p2[c,t]) * p1[c,t]\nr[c,t] = g[c,t] * g[c,t]",
                       {"C": 37, "T": 90, "K": 29},
                       {"x": ["T", "K"], "w1": ["C", "K"], "w2": ["C", "K"]})
    seen = set()
    for w in (along_n, along_m):
        for seed in range(2):
            d = kernel_plan(space_of(w), seed, pair=lambda e: 1).to_dict()
            for s in d["schedules"]:
                if s.get("kernel"):
                    s["kernel"].update(split="n", nc=64)
            cand = Candidate.from_dict(d)
            assert pairs_of(w, cand)
            run_checked(w, cand, kdir, seed)
            for anchor in pairs_of(w, cand):
                spec = kernel_spec(w, cand, anchor)
                assert spec.params.split == "n"
                seen.add((spec.pair, pair_axis(spec)))
    assert {p for p, _ in seen} == {"rows", "cols"} and {a for _, a in seen} == {"m", "n"}


def test_a_pair_is_priced_as_one_pass(small):
    """The pair's group reads the shared operand once and stores only the epilogue's result:
    fewer bytes than the contraction alone plus its partner's epilogue group."""
    w = load_workload("gated_mlp")        # default dims: activations outweigh the weights
    space = space_of(w)
    cand = kernel_plan(space, 0, pair=lambda e: 1)
    plain = kernel_plan(space, 0)
    assert pairs_of(w, cand) == {"hid": "u"} and pairs_of(w, plain) == {}
    dev = costmodel.preset("cpu")
    est_pair, est_plain = costmodel.estimate(w, cand, dev), costmodel.estimate(w, plain, dev)
    pair_g = next(g for g in est_pair.groups if g.anchor == "hid")
    two_g = [g for g in est_plain.groups if g.anchor in ("u", "hid")]
    assert len(two_g) == 2 and set(pair_g.ops) == {"g", "u", "hid"}
    assert pair_g.bytes < sum(g.bytes for g in two_g)
    assert pair_g.flops == pytest.approx(sum(g.flops for g in two_g), rel=0.35)


def test_emit_names_the_pair(small):
    w = small("trimul_outgoing")
    cand = kernel_plan(space_of(w), 0, pair=lambda e: 1)
    em = backend_kind("cpu").emit(w, cand)
    note = next(n for n in em.notes if n.startswith("kernel_a.c"))
    assert "paired with" in note and "pa[" in note and "epilogue" in note


def test_the_kernel_refuses_a_pair_deeper_than_its_slice(small, kdir):
    from autotune.backends.cpu.executor import load_gemm_kernel
    from dataclasses import replace
    w = small("gated_mlp")
    cand = kernel_plan(space_of(w), 0, pair=lambda e: 1)
    spec = kernel_spec(w, cand, "hid")
    kern = load_gemm_kernel(replace(spec, params=replace(spec.params, kc=2)), str(kdir))
    k, m, n = 5, 4, 3
    a = np.ones((1, m, k), np.float32)
    b = np.ones((1, k, n), np.float32)
    c = np.zeros((1, m, n), np.float32)
    second = a if pair_axis(spec) == "m" else b
    extra = tuple(np.ones((1, m, n), np.float32) for _ in spec.args)
    with pytest.raises(ValueError, match="one slice"):
        kern(a, b, c, 1.0, extra, second)
    with pytest.raises(ValueError, match="second"):
        kern(a, b, c, 1.0, extra)
