"""Prologue fusion into the generated kernel: an elementwise producer of an operand evaluated as
the operand is packed (a layer norm's normalization from its per-row statistics, a gate, a
scaled weight), alone or with an epilogue, on A, on B or both; verified against the float64
reference, rebuilt by params_of, priced by the cost model, shown by emit."""
from __future__ import annotations

import pytest

import costmodel
from autotune.backends.factory import backend_kind
from search_spaces.candidate import IMPL_KERNEL
from search_spaces.kernel_fusion import kernel_parts, prologue_of
from search_spaces.answers import params_of
from tests.autotune.backends.test_kernel_epilogue import kernel_plan, run_checked, space_of
from tests.search_spaces.test_orders import workload


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-prologue")


def prologues(w, cand) -> dict[str, tuple[str, str]]:
    """producer -> (contraction, operand) of every prologue in ``cand``."""
    out = {}
    for s in cand.schedules:
        if s.impl == IMPL_KERNEL:
            parts = kernel_parts(w, cand.fused_pairs, s.anchor)
            for pro in (parts.prologue_a, parts.prologue_b):
                if pro is not None:
                    out[pro.producer] = (pro.contraction, pro.operand)
    return out


LAYER_NORM = """
mu[t]      += x[t,c] / C
xc[t,c]     = x[t,c] - mu[t]
var[t]     += xc[t,c] * xc[t,c] / C
xn[t,c]     = xc[t,c] * rsqrt(var[t] + 0.00001) * g[c] + beta[c]
ws[c,f]     = W[c,f] * s[f]
y[t,f]     += xn[t,c] * ws[c,f]
z[t,f]      = y[t,f] + bias[f]
"""
LN_DIMS = {"T": 45, "C": 37, "F": 29}
LN_INPUTS = {"x": ["T", "C"], "g": ["C"], "beta": ["C"], "W": ["C", "F"], "s": ["F"],
             "bias": ["F"]}


def test_legality(small):
    w = small("trimul_outgoing")
    assert prologue_of(w, "tn", "po").operand == "a"       # the centre layer norm
    assert prologue_of(w, "tn", "po").main == "tc"          # var2 is a per-row statistic
    assert prologue_of(w, "a", "t").operand == "a" and prologue_of(w, "b", "t").operand == "b"
    assert prologue_of(w, "xn", "pa") is None               # xn feeds five projections
    assert prologue_of(w, "var2", "tn") is None             # tn is no contraction
    assert prologue_of(small("gated_mlp"), "xn", "g") is None    # read by g and u


def test_layer_norm_as_the_operand_is_packed(kdir):
    """Normalization from its row statistics on A, a scaled weight on B, a bias epilogue:
    one kernel group of four ops, in every drawn configuration."""
    w = workload(LAYER_NORM, LN_DIMS, LN_INPUTS, outputs=("z",))
    space = space_of(w)
    for seed in range(4):
        cand = kernel_plan(space, seed)
        assert prologues(w, cand) == {"xn": ("y", "a"), "ws": ("y", "b")}, cand.to_json()
        parts = kernel_parts(w, cand.fused_pairs, "z")
        assert set(parts.members) == {"xn", "ws", "y", "z"}
        assert parts.prologue_a.main == "xc"
        params = params_of(space, cand)
        assert params is not None and space.build(lambda n, o: params[n]).key == cand.key
        run_checked(w, cand, kdir, seed)


def test_prologue_alone_and_on_one_side(kdir):
    w = workload(LAYER_NORM, LN_DIMS, LN_INPUTS, outputs=("z",))
    space = space_of(w)
    only_a = kernel_plan(space, 1, fuse=lambda e: int(e == "xn->y"))
    assert prologues(w, only_a) == {"xn": ("y", "a")}
    assert kernel_parts(w, only_a.fused_pairs, "y").epilogue is None
    run_checked(w, only_a, kdir, 1)
    only_b = kernel_plan(space, 2, fuse=lambda e: int(e == "ws->y"))
    assert prologues(w, only_b) == {"ws": ("y", "b")}
    run_checked(w, only_b, kdir, 2)


def test_trimul_prologues(small, kdir):
    """The centre layer norm into the output projection (with the output gate as epilogue),
    and the gated, masked a and b packed straight into the batched triangle einsum."""
    w = small("trimul_outgoing")
    space = space_of(w)
    # a and b as prologues, not epilogues; the gate's epilogue on po's kernel, not go's
    skip = {"ga->a", "pa->a", "gb->b", "pb->b", "go->out"}
    cand = kernel_plan(space, 3, fuse=lambda e: int(e not in skip))
    pro = prologues(w, cand)
    assert pro["tn"] == ("po", "a") and pro["a"] == ("t", "a") and pro["b"] == ("t", "b")
    assert kernel_parts(w, cand.fused_pairs, "out").prologue_a.producer == "tn"
    params = params_of(space, cand)
    assert params is not None and space.build(lambda n, o: params[n]).key == cand.key
    for seed in range(2):
        run_checked(w, kernel_plan(space, seed, fuse=lambda e: int(e not in skip)), kdir, seed)


def test_cost_model_prices_the_saved_intermediate():
    w = workload(LAYER_NORM, {"T": 4096, "C": 256, "F": 512}, LN_INPUTS, outputs=("z",))
    space = space_of(w)
    dev = costmodel.preset("cpu")
    fused = kernel_plan(space, None, fuse=lambda e: int(e == "xn->y"))
    apart = kernel_plan(space, None, fuse=lambda e: 0)
    assert prologues(w, fused) == {"xn": ("y", "a")} and prologues(w, apart) == {}
    ef, ea = costmodel.estimate(w, fused, dev), costmodel.estimate(w, apart, dev)
    g = next(x for x in ef.groups if x.anchor == "y")
    assert set(g.ops) == {"xn", "y"} and [f.producer for f in g.fused] == ["xn"]
    assert g.transcendentals > 0                        # the rsqrt, per packed element
    assert ef.total_s < ea.total_s
    assert costmodel.memory_bytes(w, fused, 2) < costmodel.memory_bytes(w, apart, 2)


def test_emit_names_the_prologues():
    w = workload(LAYER_NORM, LN_DIMS, LN_INPUTS, outputs=("z",))
    cand = kernel_plan(space_of(w), 0)
    em = backend_kind("cpu").emit(w, cand)
    note = next(n for n in em.notes if n.startswith("kernel_z.c"))
    assert "prologue A xn[" in note and "prologue B ws[" in note and "epilogue z[" in note
    src = em.files["kernel_z.c"]
    assert "x->a0" in src and "x->b0" in src and "x->e0" in src
