"""Epilogue fusion into the generated kernel: an elementwise consumer of a kernel contraction
evaluated on the accumulator tile and stored in its own layout.  The space offers it only where
it is legal, params_of rebuilds it, the CPU executor runs it (verified against the float64
reference: built-ins and workloads written here, batched, transposing, broadcasting operands
in any layout), the cost model prices the saved store and load, and emit shows it."""
from __future__ import annotations

import numpy as np
import pytest

import costmodel
from autotune.backends.base import verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.factory import backend_kind
from autotune.reference import reference
from search_spaces import load_workload
from search_spaces.candidate import IMPL_KERNEL, Candidate, make_candidate
from search_spaces.kernel_fusion import epilogue_of, kernel_parts
from search_spaces.partition import groups
from search_spaces.space import SearchSpace
from search_spaces.answers import params_of
from tests.search_spaces.test_orders import workload


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-epilogue")


def space_of(w) -> SearchSpace:
    return SearchSpace(w, backend_kind("cpu").tile_bounds)


def kernel_plan(space: SearchSpace, seed: int | None, fuse=lambda edge: 1,
                pair=lambda edge: 0) -> Candidate:
    """GEMM-shaped contractions on the kernel, ``fuse(edge)`` answering every fusion and
    ``pair(edge)`` every pair (none by default: test_kernel_pair's subject), every other
    choice random (the first option for ``seed`` None) but inlining and chains (none: the
    workload's ops stay as written, so the tests read the kernel's parts from it)."""
    rng = np.random.default_rng(seed) if seed is not None else None

    def choose(name, opts):
        if name.startswith("impl:") and IMPL_KERNEL in opts:
            return IMPL_KERNEL
        if name.startswith("fuse:"):
            return fuse(name.split("@")[0][5:])
        if name.startswith("pair:"):
            return pair(name.split("@")[0][5:])
        if name.startswith(("inline:", "chain:")):
            return 0                   # no chain either: its contraction runs in its walk
        return opts[int(rng.integers(len(opts)))] if rng is not None else opts[0]
    return space.build(choose)


def epilogues(w, cand) -> dict[str, str]:
    """consumer -> contraction of every kernel group with an epilogue."""
    out = {}
    for s in cand.schedules:
        if s.impl == IMPL_KERNEL:
            parts = kernel_parts(w, cand.fused_pairs, s.anchor)
            if parts.epilogue is not None:
                out[s.anchor] = parts.contraction
    return out


def run_checked(w, cand, kdir, seed=0):
    inputs = w.random_inputs(seed)
    err, why = verify(CompiledPlan(w, cand, kdir)(**inputs), reference(w, inputs), w.rtol)
    assert not why, f"{cand.to_json()}: {why}"


def test_legality(small):
    w = small("trimul_outgoing")
    assert epilogue_of(w, "pa", "a") is not None and epilogue_of(w, "ga", "a") is not None
    assert epilogue_of(w, "po", "out") is not None        # an output as the epilogue's result
    assert epilogue_of(w, "t", "tc") is None               # t is read by mu2 too
    assert epilogue_of(w, "t", "mu2") is None              # a reduction
    assert epilogue_of(w, "xn", "pa") is None              # no contraction to fuse into
    g = small("gated_mlp")
    assert epilogue_of(g, "g", "hid") is not None          # reads g twice: one accumulator
    assert epilogue_of(g, "y", "out") is not None
    # where() on the rows and columns of the scores (i and j; h is the batch): legal
    causal = small("causal_attention")
    assert epilogue_of(causal, "s", "sm") is not None
    # ... not on a batch index: the kernel does not see a batch item's indices
    batch_cond = workload("r[z,i,j] += X[z,i,k] * Y[z,k,j]\n"
                          "s[z,i,j] = where(z == i, r[z,i,j], 0.0)",
                          {"Z": 3, "I": 4, "J": 5, "K": 6},
                          {"X": ["Z", "I", "K"], "Y": ["Z", "K", "J"]}, outputs=("s",))
    assert epilogue_of(batch_cond, "r", "s") is None


@pytest.mark.parametrize("name", ["trimul_outgoing", "gated_mlp"])
def test_builtin_epilogues_run_verified_and_rebuild(small, name, kdir):
    w = small(name)
    space = space_of(w)
    seen: set[str] = set()
    for seed in range(3):
        cand = kernel_plan(space, seed)
        epi = epilogues(w, cand)
        assert epi, cand.to_json()
        seen |= set(epi)
        for c, p in epi.items():
            assert f"{p}->{c}" in cand.fused and cand.schedule(c).kernel is not None
            assert not any(s.anchor == p for s in cand.schedules)   # p is never stored
        params = params_of(space, cand)
        assert params is not None and space.build(lambda n, o: params[n]).key == cand.key
        assert Candidate.from_json(cand.to_json()) == cand
        run_checked(w, cand, kdir, seed)
    want = {"trimul_outgoing": {"a", "b", "out"}, "gated_mlp": {"hid", "out"}}[name]
    assert seen == want


def test_the_other_projection_may_be_the_epilogue(small, kdir):
    """trimul's a = mask * sigmoid(ga + b_ga) * (pa + b_a): either projection's kernel may
    apply it; the other is read as a tensor."""
    w = small("trimul_outgoing")
    space = space_of(w)
    cand = kernel_plan(space, 1, fuse=lambda e: int(e not in ("ga->a", "gb->b")))
    assert epilogues(w, cand)["a"] == "pa" and epilogues(w, cand)["b"] == "pb"
    assert "ga->a" not in cand.fused
    run_checked(w, cand, kdir, 1)


def test_unfused_kernel_keeps_its_consumer_apart(small, kdir):
    w = small("gated_mlp")
    cand = kernel_plan(space_of(w), 0, fuse=lambda e: 0)
    assert epilogues(w, cand) == {}
    assert {s.anchor for s in cand.schedules if s.impl == IMPL_KERNEL} == {"g", "u", "y"}
    run_checked(w, cand, kdir)


WRITTEN = [
    # transposing store, a bias by column, a mask by row and column, a power and a relu
    ("p[i,j] += A[i,k] * B[k,j]\nq[j,i] = relu(p[i,j] + bias[j]) * M[i,j] - 0.5 * p[i,j] ** 2",
     {"I": 37, "J": 29, "K": 23}, {"A": ["I", "K"], "B": ["K", "J"], "bias": ["J"],
                                   "M": ["I", "J"]}, ("q",)),
    # batched, with a per-batch operand: each batch item sees its own slice
    ("r[b,i,j] += X[b,i,k] * Y[b,k,j]\ns[b,i,j] = r[b,i,j] * g[b,j] + h[i] * 3.0",
     {"Z": 3, "I": 21, "J": 34, "K": 17}, {"X": ["Z", "I", "K"], "Y": ["Z", "K", "J"],
                                           "g": ["Z", "J"], "h": ["I"]}, ("s",)),
    # rows (i, j) flattened; u[i] does not nest into them: copied into a broadcast first;
    # an intermediate operand (e, computed by a loop group) in whatever layout the plan picks
    ("e[i,j,n] = exp(E[i,j,n])\np[i,j,n] += X[i,j,k] * W[k,n]\n"
     "c[i,j,n] = sigmoid(p[i,j,n]) * u[i] + e[i,j,n]",
     {"I": 6, "J": 7, "N": 19, "K": 11}, {"E": ["I", "J", "N"], "X": ["I", "J", "K"],
                                          "W": ["K", "N"], "u": ["I"]}, ("c",)),
    # a causal mask on the scores, stored transposed, with a bias by column
    ("p[i,j] += A[i,k] * B[k,j]\nq[j,i] = where(j <= i, p[i,j] * 0.5, -1.0) + bias[j]",
     {"I": 37, "J": 29, "K": 23}, {"A": ["I", "K"], "B": ["K", "J"], "bias": ["J"]}, ("q",)),
    # conditions on indices inside flattened rows (a, b) and on the columns, with offsets and
    # a coefficient, nested; a batch index the conditions leave alone
    ("p[z,a,b,n] += X[z,a,b,k] * W[z,k,n]\n"
     "c[z,a,b,n] = where(b + 1 >= n, where(a + a != n - 2, p[z,a,b,n], 1.0), 0.0) * 2.0",
     {"Z": 2, "A": 5, "B": 7, "N": 13, "K": 9}, {"X": ["Z", "A", "B", "K"],
                                                 "W": ["Z", "K", "N"]}, ("c",)),
]


@pytest.mark.parametrize("case", range(len(WRITTEN)))
def test_written_workloads(case, kdir):
    program, dims, inputs, outputs = WRITTEN[case]
    w = workload(program, dims, inputs, outputs=outputs)
    space = space_of(w)
    consumer = outputs[0]
    for seed in range(4):
        cand = kernel_plan(space, seed)
        assert consumer in epilogues(w, cand), cand.to_json()
        params = params_of(space, cand)
        assert params is not None and space.build(lambda n, o: params[n]).key == cand.key
        run_checked(w, cand, kdir, seed)


def test_a_causal_mask_is_the_scores_epilogue(kdir):
    """causal_attention's sm = where(j <= i, s, -1e9): the scores' kernel applies the mask
    before s is stored (where the random choices leave the edge to the kernel)."""
    w = load_workload("causal_attention", {"S": 24, "H": 2, "D": 8, "C": 16})
    space = space_of(w)
    masked = 0
    for seed in range(4):
        cand = kernel_plan(space, seed)
        masked += epilogues(w, cand).get("sm") == "s"
        run_checked(w, cand, kdir, seed)
    assert masked >= 1


def test_a_prologue_with_a_condition_runs_verified(kdir):
    """A masked operand (the strict lower triangle of A, scaled) applied as A is packed."""
    w = workload("q[i,k] = where(k < i, A[i,k], 0.0) * 2.0\np[i,j] += q[i,k] * B[k,j]",
                 {"I": 33, "J": 21, "K": 40}, {"A": ["I", "K"], "B": ["K", "J"]},
                 outputs=("p",))
    space = space_of(w)
    for seed in range(3):
        cand = kernel_plan(space, seed)
        parts = kernel_parts(w, cand.fused_pairs, "p")
        assert parts.prologue_a is not None and parts.prologue_a.producer == "q"
        run_checked(w, cand, kdir, seed)


def test_a_forced_loop_fusion_wins_over_the_epilogue(small):
    w = workload("p[i,j] += A[i,k] * B[k,j]\nq[i,j] = p[i,j] * 2.0\nr[i,j] = q[i,j] + 1.0",
                 {"I": 8, "J": 8, "K": 8}, {"A": ["I", "K"], "B": ["K", "J"]}, outputs=("r",),
                 space='[space]\nforce_fusion = ["q->r"]\n')
    cand = kernel_plan(space_of(w), 0)
    assert epilogues(w, cand) == {} and "q->r" in cand.fused


def test_cost_model_prices_the_saved_store_and_load():
    w = load_workload("gated_mlp", {"T": 2048, "C": 256, "F": 1024})
    space = space_of(w)
    dev = costmodel.preset("cpu")
    fused = kernel_plan(space, None, fuse=lambda e: int(e == "y->out"))
    apart = kernel_plan(space, None, fuse=lambda e: 0)
    assert fused.schedule("out").kernel == apart.schedule("y").kernel
    assert epilogues(w, fused) == {"out": "y"} and epilogues(w, apart) == {}
    ef, ea = costmodel.estimate(w, fused, dev), costmodel.estimate(w, apart, dev)
    g = next(x for x in ef.groups if x.anchor == "out")
    assert g.impl == IMPL_KERNEL and set(g.ops) == {"y", "out"} and g.fused
    parts = [x for x in ea.groups if x.anchor in ("y", "out")]
    y_bytes = 2048 * 256 * 4
    # the intermediate's store and its load by the loop group are gone, nothing else changes
    assert sum(x.bytes for x in parts) - g.bytes >= 2 * y_bytes * 0.99
    assert ef.total_s < ea.total_s
    assert costmodel.memory_bytes(w, fused, 2) < costmodel.memory_bytes(w, apart, 2)


def test_emit_names_the_epilogue(small):
    w = small("gated_mlp")
    cand = kernel_plan(space_of(w), 0)
    em = backend_kind("cpu").emit(w, cand)
    assert "kernel_out.c" in em.files and "x->e0" in em.files["kernel_out.c"]
    assert any("kernel_out.c" in n and "epilogue out[" in n for n in em.notes)
    assert [g.anchor for g in groups(w, cand.fused_pairs)].count("out") == 1


# the triangle logits: the scores over a batch (h, i), plus a bias by (h, j, k) and a mask by
# (i, k), each broadcast along one of the batch's two indices, in layouts that do not nest it
TWO_INDEX_BATCH = ("sc[h,i,j,k] += q[h,i,j,d] * kk[h,i,k,d]\n"
                   "lg[h,i,j,k] = sc[h,i,j,k] + tb[h,j,k] + 10.0 * (mask[i,k] - 1.0)",
                   {"H": 3, "I": 5, "J": 7, "K": 9, "D": 4},
                   {"q": ["H", "I", "J", "D"], "kk": ["H", "I", "K", "D"],
                    "tb": ["H", "J", "K"], "mask": ["I", "K"]})


@pytest.mark.parametrize("tb_layout", [(0, 1, 2), (1, 2, 0)])
def test_extras_broadcast_along_part_of_a_two_index_batch_are_read_in_place(tb_layout, kdir):
    """Each batch item reads its bias and mask at (b / I, b % I) along two strides, where they
    were copied into a (h, i, j, k) broadcast on every call (triangle_attention_starting's
    logits kernel: 67 M floats twice, 0.38 s of its 0.43 s)."""
    from costmodel.kernel_cost import kernel_operands
    program, dims, inputs = TWO_INDEX_BATCH
    w = workload(program, dims, inputs, outputs=("lg",))
    space = space_of(w)
    for seed in range(3):
        cand = kernel_plan(space, seed)
        if epilogues(w, cand).get("lg") != "sc":
            continue
        cand = make_candidate(cand.fused, {**dict(cand.layouts), "tb": tb_layout},
                              cand.schedules, "t")
        plan = CompiledPlan(w, cand, kdir)
        x = w.random_inputs(seed)
        _, why = verify(plan(**x), reference(w, x), w.rtol)
        assert not why, f"{cand.to_json()}: {why}"
        kg = plan.kernel_groups["lg"]
        assert {o.tensor: a.ndim for (_, o), a in zip(kg.extras, kg._extra)} == \
            {"tb": 4, "mask": 4}                      # views, kept: nothing copied
        lay = lambda t: cand.layout(t, len(w.shapes[t]))
        _, rows = kernel_operands(w, cand.fused_pairs, "lg", lay, 4)
        assert all(copied == 0 for t, _, _, copied, _ in rows if t in ("tb", "mask"))
        return
    pytest.fail("no seed fused the logits into the scores' kernel")


# a tensor-network step: rows (a, b), columns (e, f); s[f] and v[e] broadcast along one
# index of the column group, u[a] along one of the rows: none nests as one stride
# (r: an intermediate, stored as the plan says; an input arrives as the caller's array)
COMPACT = ("r[a,b,e,f] = R[a,b,e,f] * 0.5\nt[a,b,e,f] += x[a,b,c,d] * y[c,d,e,f]\n"
           "o[a,b,e,f] = t[a,b,e,f] * s[f] + v[e] * u[a] + r[a,b,e,f] * r[a,b,e,f]",
           {"A": 5, "B": 6, "C": 3, "D": 4, "E": 7, "F": 9},
           {"x": ["A", "B", "C", "D"], "y": ["C", "D", "E", "F"], "s": ["F"], "v": ["E"],
            "u": ["A"], "R": ["A", "B", "E", "F"]})


@pytest.mark.parametrize("r_layout", [(0, 1, 2, 3), (3, 2, 1, 0)])
def test_extras_that_nest_in_no_stride_are_copied_over_their_own_groups_only(r_layout, kdir):
    """An extra that no strided view expresses is copied over the (batch, rows, cols) groups
    it has indices in and broadcast along the rest: s[f] beside an (a, b) x (e, f) product is
    E*F elements, not the whole C (contract4d: 737 K floats on every call, its epilogue priced
    at 3.1 ms against 1.7 ms unfused).  r stored transposed has indices in both: copied whole.
    The kernel reads every copy with constant strides; the model prices the same bytes."""
    from costmodel.kernel_cost import kernel_operands
    program, dims, inputs = COMPACT
    w = workload(program, dims, inputs, outputs=("o",))
    space = space_of(w)
    A, B, E, F = (dims[k] for k in "ABEF")
    want = {"s": E * F, "v": E * F, "u": A * B,
            "r": 0 if r_layout == (0, 1, 2, 3) else A * B * E * F}
    for seed in range(3):
        cand = kernel_plan(space, seed, fuse=lambda edge: edge == "t->o")
        assert epilogues(w, cand) == {"o": "t"}, cand.to_json()
        cand = make_candidate(cand.fused, {**dict(cand.layouts), "r": r_layout},
                              cand.schedules, "t")
        plan = CompiledPlan(w, cand, kdir)
        for call in range(2):           # new inputs in the same copies
            x = w.random_inputs(10 * seed + call)
            _, why = verify(plan(**x), reference(w, x), w.rtol)
            assert not why, f"{cand.to_json()}: {why}"
        kg = plan.kernel_groups["o"]
        assert all(o.strides is not None for _, o in kg.extras)
        copies = {o.tensor: kg.stage._scratch[f"o:x{n}"].size
                  for n, (_, o) in enumerate(kg.extras) if f"o:x{n}" in kg.stage._scratch}
        assert copies == {t: n for t, n in want.items() if n}
        lay = lambda t: cand.layout(t, len(w.shapes[t]))
        _, rows = kernel_operands(w, cand.fused_pairs, "o", lay, 4)
        assert {t: copied / 4 for t, _, role, copied, _ in rows if role == "e"} == want
