"""Online-softmax chains (search_spaces.chain): found from the ops' algebra on the built-ins
and on blocks written only here, refused where an op breaks the rescale, offered by the space
as chain:ANCHOR / chain_block:ANCHOR (not on a backend without them, nor under `chains =
false`), rebuilt by params_of, priced by the cost model and shown by `explain`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import costmodel
from autotune.cli.app import app
from costmodel.devices import preset
from search_spaces import load_workload, parse_workload
from search_spaces.candidate import Candidate, GroupSchedule
from search_spaces.chain import detect
from search_spaces.ir import accesses, to_text
from search_spaces.plans import chained_plan, named_plan
from search_spaces.space import SPACE_VERSION, SearchSpace, TileBounds
from search_spaces.answers import params_of
from search_spaces.chain import PLAIN_MAX_ACC
from tests.support.chains import (BROKEN, biased, broken, chain_workload, inline, kernel_sum,
                                  lse, mlp, plain)


def test_attention_chain_has_every_role(small):
    (ch,) = detect(small("attention")).values()
    assert (ch.anchor, ch.scores, ch.max_op, ch.exp_op, ch.sum_op, ch.norm_op,
            ch.contraction, ch.epilogue) == ("o", ("s",), "m", "p", "l", "a", "o", None)
    assert ch.members == ("s", "m", "p", "l", "a", "o") and ch.extent == 16


def test_builtins_with_masks_and_gates(small):
    (causal,) = detect(small("causal_attention")).values()
    assert causal.scores == ("s", "sm")          # the where() mask is walked with the scores
    (tri,) = detect(small("triangle_attention_starting")).values()
    assert tri.scores == ("sc", "lg") and tri.epilogue == "go" and tri.anchor == "go"
    # the gated MLP's hidden layer is a plain chain; trimul's einsum keeps a row of N
    # accumulators through its walk, too many to offer (PLAIN_MAX_ACC)
    (mlp,) = detect(small("gated_mlp")).values()
    assert not mlp.softmax and mlp.scores == ("g", "u") and mlp.epilogue == "out"
    assert detect(load_workload("trimul_outgoing", {"N": PLAIN_MAX_ACC + 1, "C": 4})) == {}


def test_plain_chains_walk_scores_without_a_softmax():
    (k,) = detect(kernel_sum()).values()
    assert (k.anchor, k.scores, k.max_op, k.exp_op, k.sum_op, k.contraction, k.epilogue) == \
        ("y", ("g",), None, "k", None, "y", None)
    assert k.members == ("g", "k", "y") and k.extent == 37 and not k.softmax
    assert k.text().startswith("fused walk over an index of extent 37")
    (m,) = detect(mlp()).values()
    assert (m.anchor, m.scores, m.exp_op, m.contraction, m.epilogue) == \
        ("out", ("h",), "s", "y", "out")


@pytest.mark.parametrize("old,new", [
    # the weights read outside the walk
    ("y[i,c]  += k[i,j] * a[j,c]\n", "y[i,c]  += k[i,j] * a[j,c]\nq[i,j] = k[i,j] * 2.0\n"),
    # weights of inputs only: no score is reduced per point, a prologue (the kernel's), no walk
    ("k[i,j]   = exp((2.0 * g[i,j] - nx[i] - nz[j]) * 0.1)",
     "k[i,j]   = exp(nx[i] * nz[j] * 0.1)"),
    # the weights twice in the product: not linear in them
    ("y[i,c]  += k[i,j] * a[j,c]", "y[i,c]  += k[i,j] * k[i,j] * a[j,c]"),
])
def test_plain_chain_near_misses(old, new):
    from tests.support.chains import KERNEL_SUM
    assert old in KERNEL_SUM
    outputs = ["y", "q"] if "q[i,j]" in new else ["y"]
    w = chain_workload(KERNEL_SUM.replace(old, new), outputs, {"N": 13, "M": 13, "D": 5, "C": 3},
                       {"x": ["N", "D"], "z": ["M", "D"], "a": ["M", "C"]}, "near")
    assert detect(w) == {}


def test_chains_written_only_here():
    (c1,) = detect(lse()).values()
    assert (c1.anchor, c1.contraction, c1.epilogue, c1.extent) == ("lse", None, "lse", 37)
    (c2,) = detect(biased()).values()
    # scores from a contraction and a bias of another shape; the exponentials stored in another
    # index order than the scores; a weighted sum; normalised in the epilogue
    assert (c2.scores, c2.max_op, c2.exp_op, c2.sum_op, c2.norm_op, c2.contraction,
            c2.epilogue) == (("s", "t"), "mx", "e", "z", None, "u", "y")
    (c3,) = detect(plain()).values()
    assert (c3.anchor, c3.norm_op, c3.contraction) == ("r", None, "o")


def test_factors_of_the_final_sum_leave_the_walk():
    # o += p * v * g[d] / sqrt(l[i] * exp(m[i] - m[i])): the last factor reads the final sum
    # and max at the rows only, the same for every j: applied after the walk, not in it
    w = inline()
    (ch,) = detect(w).values()
    assert (ch.anchor, ch.contraction, ch.outer) == ("o", "o", (3,))
    inner, outer = ch.contraction_parts(w.op("o"))
    assert {a.tensor for a in accesses(inner)} == {"p", "v", "g"} and "/" not in to_text(inner)
    assert {a.tensor for a in accesses(outer)} == {"l", "m"}
    # the chained plan keeps the three-factor statement unsplit, so the chain is on
    cand = chained_plan(SearchSpace(w))
    assert cand.orders == () and any(s.chain_block for s in cand.schedules)


@pytest.mark.parametrize("key", list(BROKEN))
def test_broken_algebra_is_no_chain(key):
    assert detect(broken(key)) == {}


def _attention_text() -> str:
    from search_spaces.loader import builtin_text
    return builtin_text("attention")


def test_space_offers_chains_only_where_they_run(small):
    w = small("attention")
    asked = []
    SearchSpace(w).build(lambda n, opts: asked.append((n, list(opts))) or opts[-1])
    assert ("chain:o", [0, 1]) in asked
    assert ("chain_block:o", [16]) in asked       # extent 16: one block, no rescale
    assert SearchSpace(load_workload("attention", {"S": 300, "H": 2, "D": 8, "C": 16})) \
        .chain_blocks("o") == [16, 32, 64, 128, 256]
    cuda = SearchSpace(w, TileBounds(1, 1024, chains=False))
    names = []
    cuda.build(lambda n, opts: names.append(n) or opts[-1])
    assert not any(n.startswith("chain") for n in names)
    off = parse_workload(_attention_text() + "\n[space]\nchains = false\n", "off.toml")
    assert SearchSpace(off).chains == {}


def test_chain_candidate_is_exactly_its_group_and_round_trips(small):
    w = load_workload("attention", {"S": 40, "H": 2, "D": 8, "C": 16})
    space = SearchSpace(w)
    rng = np.random.default_rng(3)
    seen = 0
    for _ in range(40):
        cand = space.build(lambda n, opts: 1 if n.startswith("chain:")
                           else opts[int(rng.integers(len(opts)))])
        sched = cand.schedule("o")
        # blocks below the 40 keys, and one over all of them
        assert sched.chain_block in (16, 32, 64) and sched.impl == "loop"
        assert {e.split("->")[1] for e in cand.fused} >= {"m", "p", "l", "a", "o"}
        assert not any(e.startswith(("q->", "k->", "v->")) for e in cand.fused)
        params = params_of(space, cand)
        assert params is not None and params["chain:o"] == 1
        assert params["chain_block:o"] == sched.chain_block
        assert Candidate.from_json(cand.to_json()) == cand
        seen += 1
    assert seen == 40
    plain_cand = named_plan(space, "heuristic")
    assert "chain_block" not in plain_cand.to_json()    # unchained plans keep their keys
    assert params_of(space, plain_cand)["chain:o"] == 0


def test_space_version_names_the_chains():
    assert int(SPACE_VERSION) >= 4
    assert GroupSchedule.from_dict({"anchor": "o", "tiles": [4], "chain_block": 32}) \
        .chain_block == 32


def test_cost_model_prices_the_rescale_and_the_saved_bytes():
    w = load_workload("attention", {"S": 1024, "H": 8, "D": 32, "C": 256})
    space = SearchSpace(w)
    dev = preset("a100")
    base = chained_plan(space)
    small_blocks = _with_block(base, 16)
    big_blocks = _with_block(base, 256)
    g16 = next(g for g in costmodel.estimate(w, small_blocks, dev).groups if g.chain)
    g256 = next(g for g in costmodel.estimate(w, big_blocks, dev).groups if g.chain)
    assert g16.flops > g256.flops and g16.transcendentals > g256.transcendentals
    assert "blocks of 16" in g16.chain and "scores s" in g16.chain
    # the unfused plan writes and reads the S x S scores, exponentials and weights
    unfused = costmodel.estimate(w, named_plan(space, "unfused"), dev)
    members = set(g256.ops)
    unfused_bytes = sum(g.bytes for g in unfused.groups if g.anchor in members)
    assert g256.bytes < unfused_bytes / 10
    assert costmodel.memory_bytes(w, base, 4) < costmodel.memory_bytes(
        w, named_plan(space, "unfused"), 4)


def test_cpu_chain_products_in_vector_registers_are_priced_near_the_fma_peak():
    # attention's chained plan with k stored [h][d][j]: the scores run a vector of the walk at
    # a time and the accumulators stay in registers, 8 query rows a step; stored [j][h][d]
    # each score is a dot product over d at the loop rate
    from dataclasses import replace
    from costmodel.chain_cost import VECTOR_EFFICIENCY, _vector_members
    from costmodel.devices import CPU_DEFAULT
    w = load_workload("attention", {"S": 256, "H": 8, "D": 32, "C": 256})
    base = chained_plan(SearchSpace(w))
    fast = replace(base, layouts=tuple(sorted({**dict(base.layouts), "k": (0, 2, 1)}.items())))
    (chain,) = detect(w).values()
    sched = fast.schedule("o")
    common = chain.common("o")
    box = {common[i]: t for i, t in zip(w.op("o").parallel, sched.tiles)}
    ext = {common[i]: e for i, e in zip(w.op("o").parallel, w.op("o").out_shape)}
    vec, step = _vector_members(w, chain, 64, box, ext, 32, lambda t: fast.layout(t, 3),
                                CPU_DEFAULT)
    assert vec == {"s", "o"} and step == 8
    assert _vector_members(w, chain, 64, box, ext, 32, lambda t: fast.layout(t, 3),
                           preset("a100")) == (set(), 1)
    pred = {name: next(g for g in costmodel.estimate(w, c, CPU_DEFAULT).groups
                       if g.chain).predicted_s for name, c in (("fast", fast), ("base", base))}
    assert pred["fast"] < pred["base"] / 2
    # the two products alone at the vector rate bound the fast chain from below
    assert pred["fast"] > 4 * 256 * 256 * 8 * 32 / (CPU_DEFAULT.f32_flops * VECTOR_EFFICIENCY)


def _with_block(cand, block):
    from dataclasses import replace
    return replace(cand, schedules=tuple(
        replace(s, chain_block=block) if s.chain_block else s for s in cand.schedules))


def test_explain_shows_the_chain():
    r = CliRunner().invoke(app, ["explain", "attention", "--plan", "chained", "--dims",
                                 "S=128,H=2,D=16,C=32"])
    assert r.exit_code == 0, r.output
    assert "chain:  online softmax over an index of extent 128: scores s, max m, exp p, " \
           "sum l, normalise a, contraction o, blocks of 64" in r.stdout
    j = CliRunner().invoke(app, ["explain", "attention", "--plan", "chained", "--format",
                                 "json", "--dims", "S=128,H=2,D=16,C=32"])
    assert any("chain" in g for g in json.loads(j.stdout)["groups"])


def test_masked_chain_is_priced_at_its_slowest_thread():
    # 512 query rows under j <= i + 20 in two tiles: the later tile walks about three times
    # the blocks of the earlier, and one of two cores runs it alone; in 4 or 16 tiles dealt
    # heaviest first both cores finish together.  A mask that covers nothing leaves the
    # tiles equal and the price the same in every tiling.
    from dataclasses import replace
    from costmodel.devices import CPU_DEFAULT
    from tests.support.chains import CROSS, chain_workload
    pred = {}
    for cond in ("j <= i + 20", "j <= i + 1000"):
        w = chain_workload(CROSS.replace("j <= i + 20", cond), ["o"],
                           {"H": 1, "T": 512, "S": 512, "C": 32, "D": 32},
                           {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"]},
                           dtype="float32")
        base = chained_plan(SearchSpace(w))
        for t in (256, 128, 32):
            c = replace(base, schedules=tuple(replace(s, tiles=(1, t, 32)) if s.chain_block
                                              else s for s in base.schedules))
            pred[cond, t] = next(g for g in costmodel.estimate(w, c, CPU_DEFAULT).groups
                                 if g.chain).predicted_s
    assert pred["j <= i + 20", 256] > 1.25 * pred["j <= i + 20", 128]
    assert pred["j <= i + 20", 128] == pytest.approx(pred["j <= i + 20", 32], rel=0.02)
    assert pred["j <= i + 20", 128] < 0.75 * pred["j <= i + 1000", 128]
    assert pred["j <= i + 1000", 256] == pytest.approx(pred["j <= i + 1000", 32], rel=0.02)
