"""Binding a plan's parameters (autotune.backends.bound, .cpu.binding, .cuda.binding): groups
computing from bound inputs alone run once at binding, operands built from bound inputs (a
stack's side-by-side weights, a pair's weights, scaled or staged weights) are built
once per binding; bound calls match the float64 reference on fresh activations, unbound calls
of the same plan in between stay right, and bad bindings get one-line errors."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.factory import backend_kind
from autotune.reference import reference
from search_spaces import load_workload, parse_workload
from autotune.backends.cpu.gemm_call import pair_axis
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.partition import constant_groups, groups
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds
from tests.autotune.backends.test_kernel_epilogue import kernel_plan, space_of
from tests.autotune.backends.test_kernel_pair import pairs_of
from tests.search_spaces.test_siblings import stacking_choice


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return tmp_path_factory.mktemp("binding")


def scaled_weight():
    """A weight scaled by a bound vector (as a folded normalization scale would be) before the
    product, and a bias summed from two bound parts: both computable from parameters alone."""
    return parse_workload(
        'name = "scaled"\ndtype = "float32"\noutputs = ["y"]\n'
        'parameters = ["w", "g", "b1", "b2"]\n'
        'program = """\nwn[k,c] = w[k,c] * g[k]\nbias[c] = b1[c] + b2[c]\n'
        'p[t,c] += x[t,k] * wn[k,c]\ny[t,c] = p[t,c] + bias[c]\n"""\n'
        '[dims]\nT = 37\nK = 24\nC = 20\n'
        '[inputs]\nx = ["T", "K"]\nw = ["K", "C"]\ng = ["K"]\nb1 = ["C"]\nb2 = ["C"]\n',
        "scaled.toml")


def split(w, inputs):
    params = {n: a for n, a in inputs.items() if n in w.params}
    return params, {n: a for n, a in inputs.items() if n not in w.params}


def check(w, outs, inputs):
    err, why = verify(outs, reference(w, inputs), w.rtol)
    assert not why, why


def counting(plan) -> list[str]:
    """The anchors of the groups ``plan`` runs, recorded as it runs them."""
    ran: list[str] = []
    inner = plan.run_group

    def run_group(g, *args):
        ran.append(g.anchor)
        inner(g, *args)
    plan.run_group = run_group
    return ran


def test_constant_groups_follow_what_the_bound_inputs_reach():
    w = scaled_weight()
    gs = groups(w, set())
    assert constant_groups(w, gs, {"w", "g", "b1", "b2"}) == ("wn", "bias")
    assert constant_groups(w, gs, {"w", "b1", "b2"}) == ("bias",)      # g not bound
    assert constant_groups(w, gs, {"w", "g", "b1", "b2"}, exclude={"wn"}) == ("bias",)
    # every input bound: p too, but never y, a program output
    assert constant_groups(w, gs, set(w.input_names)) == ("wn", "bias", "p")
    # wn fused into p: its group reads x too
    assert constant_groups(w, groups(w, {("wn", "p")}), {"w", "g", "b1", "b2"}) == ("bias",)


@pytest.mark.parametrize("plan_name", ["unfused", "heuristic"])
def test_constant_groups_run_once_at_binding(plan_name, kdir):
    w = scaled_weight()
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    cand = named_plan(space, plan_name)
    plan = CompiledPlan(w, cand, kdir)
    const = set(constant_groups(w, plan.groups, set(w.params)))
    assert const and const <= {"wn", "bias"}
    ran = counting(plan)
    inputs = w.random_inputs(0)
    params, acts = split(w, inputs)
    bound = plan.bind(params)
    assert set(ran) == const                  # the constant groups ran at binding
    for seed in (1, 2):                       # fresh activations, the bound weights
        ran.clear()
        x = w.random_inputs(seed)["x"]
        check(w, bound(x=x), {**params, "x": x})
        assert not set(ran) & const and ran   # ... and not again
    # an unbound call of the same plan, other weights: every group runs, its own weights used
    other = w.random_inputs(3)
    ran.clear()
    check(w, plan(**other), other)
    assert const <= set(ran)
    # the binding's folded arrays are its own: the unbound call did not disturb them
    check(w, bound(x=acts["x"]), inputs)


def test_a_stacks_side_by_side_weights_are_built_once(kdir):
    w = load_workload("trimul_outgoing", {"N": 9, "C": 8})
    space = SearchSpace(w, TileBounds(stacks=True))
    cand = space.build(stacking_choice(space, np.random.default_rng(0)))
    assert cand.stacks
    plan = CompiledPlan(w, cand, kdir)
    inputs = w.random_inputs(0)
    params, acts = split(w, inputs)
    bound = plan.bind(params)
    tag = f"stack:{cand.stacks[0][0]}:x"
    check(w, bound(**acts), inputs)
    made = bound.prep.made[tag]
    assert f"{tag}" not in plan.staging._scratch          # built in the binding's staging
    fresh = {**params, **split(w, w.random_inputs(5))[1]}
    check(w, bound(**split(w, fresh)[1]), fresh)
    assert bound.prep.made[tag] is made                    # not built again
    other = w.random_inputs(6)                             # unbound, other weights
    check(w, plan(**other), other)
    check(w, bound(**acts), inputs)


@pytest.mark.parametrize("name", ["trimul_outgoing", "gated_mlp"])
def test_a_pairs_weights_are_read_where_they_lie(small, name, kdir):
    """The kernel's packing interleaves a pair's two weights: the binding keeps views of the
    bound arrays themselves (no interleaved copy), the same ones on every bound call."""
    w = small(name)
    space = space_of(w)
    cand = kernel_plan(space, 0, pair=lambda e: 1)
    pairs = pairs_of(w, cand)
    assert pairs
    plan = CompiledPlan(w, cand, kdir)
    inputs = w.random_inputs(0)
    params, acts = split(w, inputs)
    bound = plan.bind(params)
    check(w, bound(**acts), inputs)
    kept = {}
    for anchor in pairs:
        group = plan.kernel_groups[anchor]
        side = "b" if pair_axis(group.kernel.spec) == "n" else "a"
        for tag, tensor in ((f"{anchor}:{side}", (group.a, group.b)[side == "b"][0]),
                            (f"{anchor}:second", group.second)):
            made = bound.prep.made[tag]
            owners = (params[tensor], bound.prep.storage.get(tensor),
                      bound.prep.logical.get(tensor))
            assert any(o is not None and np.shares_memory(made, o) for o in owners), tag
            kept[tag] = made
    other = w.random_inputs(7)
    check(w, plan(**other), other)                         # unbound, other weights
    fresh = {**params, **split(w, w.random_inputs(8))[1]}
    check(w, bound(**split(w, fresh)[1]), fresh)
    assert all(bound.prep.made[t] is a for t, a in kept.items())


def contraction(plan, anchor):
    """The contraction of the kernel group anchored at ``anchor``."""
    return plan.w.op(kernel_parts(plan.w, plan.cand.fused_pairs, anchor).contraction)


def test_bad_bindings_say_what_is_wrong(kdir, small):
    w = scaled_weight()
    plan = CompiledPlan(w, named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds),
                                      "heuristic"), kdir)
    params, acts = split(w, w.random_inputs(0))
    with pytest.raises(ValueError, match="cannot bind 'q': not an input"):
        plan.bind({**params, "q": params["w"]})
    with pytest.raises(ValueError, match=r"bound input 'g' has shape \(3,\)"):
        plan.bind({**params, "g": np.ones(3, np.float32)})
    bound = plan.bind(params)
    with pytest.raises(ValueError, match="'w' is bound: pass only x"):
        bound(x=acts["x"], w=params["w"])


@pytest.mark.parametrize("plan_name", ["unfused", "heuristic"])
def test_the_gpu_plan_folds_its_constant_groups_too(plan_name, kdir):
    """The same binding on the CUDA plan, its generated kernels run by the host emulator."""
    w = scaled_weight()
    cand = named_plan(SearchSpace(w, backend_kind("cuda").tile_bounds), plan_name)
    plan = CudaPlan(w, cand, kdir, runtime=HostEmulator(threads=2))
    const = set(constant_groups(w, plan.groups, set(w.params)))
    assert const
    ran = counting(plan)
    inputs = w.random_inputs(0)
    params, acts = split(w, inputs)
    bound = plan.bind(params)
    assert set(ran) == const
    ran.clear()
    check(w, bound(**acts), inputs)
    assert ran and not set(ran) & const
    other = w.random_inputs(4)
    check(w, plan(**other), other)          # unbound, other weights
    check(w, bound.run(inputs), inputs)
    with pytest.raises(ValueError, match="'g' is bound: pass only x"):
        bound(x=acts["x"], g=params["g"])
