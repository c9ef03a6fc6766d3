"""autotune.torch.function: keyword tensors in, output tensors out, the tensors' own memory
handed to the plan and the plan's outputs handed back (no copies), one custom op inside
torch.compile graphs, parameters bound once, one-line errors."""
from __future__ import annotations

import warnings

import pytest

from autotune.backends.base import verify
from autotune.reference import reference
from search_spaces import load_workload
from tests.support.skips import require

torch = require("torch")
import autotune.interop.function as function_mod  # noqa: E402
import autotune.torch as at  # noqa: E402
from autotune.interop.dims import ShapeError  # noqa: E402
from autotune.interop.function import DTypeError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class Spy:
    """A plan that records the memory it was given and the memory it returned."""

    def __init__(self, plan):
        self.plan, self.seen, self.returned = plan, {}, {}

    def __call__(self, **inputs):
        return self.record(inputs, self.plan(**inputs))

    def record(self, inputs, outs):
        self.seen = {n: a.ctypes.data for n, a in inputs.items()}
        self.returned = {n: a.ctypes.data for n, a in outs.items()}
        return outs

    def bind(self, params):
        """The plan bound to ``params``, its runs recorded here too."""
        bound, spy = self.plan.bind(params), self

        class Bound:
            def run(self, inputs):
                return spy.record(inputs, bound.run(inputs))
        return Bound()


@pytest.fixture
def spied(monkeypatch):
    spies = []
    real = function_mod.plan_for

    def spying(w, device, db):
        plan, res = real(w, device, db)
        spies.append(Spy(plan))
        return spies[-1], res
    monkeypatch.setattr(function_mod, "plan_for", spying)
    return spies


def tensors(w, seed=1):
    x = w.random_inputs(seed)
    return x, {n: torch.from_numpy(a) for n, a in x.items()}


def check(w, x, outs):
    err, why = verify({n: t.numpy() for n, t in outs.items()}, reference(w, x), w.rtol)
    assert not why, why


def test_round_trip_hands_over_memory_both_ways(small, fast_tmp, spied):
    w = small("trimul_outgoing")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    outs = fn(**tx)
    check(w, x, outs)
    [spy] = spied
    assert spy.seen == {n: t.data_ptr() for n, t in tx.items()}
    assert outs["out"].data_ptr() == spy.returned["out"]
    # held by the caller, an output is never overwritten by the next call
    first = outs["out"].clone()
    fn(**tensors(w, seed=2)[1])
    assert torch.equal(outs["out"], first)


def test_bound_parameters_are_converted_once_and_shared(small, fast_tmp, spied):
    w = small("trimul_incoming")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    layer = fn.bind(**{n: tx[n] for n in w.params})
    outs = layer(x=tx["x"], mask=tx["mask"])
    check(w, x, outs)
    assert spied[0].seen == {n: t.data_ptr() for n, t in tx.items()}
    assert torch.equal(outs["out"], fn(**tx)["out"])
    with pytest.raises(ShapeError, match=r"missing input\(s\) mask \(it takes x, mask\)"):
        layer(x=tx["x"])


def test_other_shapes_and_layouts(small, fast_tmp):
    w = small("trimul_outgoing")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    w12 = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    x, tx = tensors(w12, seed=3)
    check(w12, x, fn(**tx))
    # a transposed view: the plan makes it contiguous itself; the result is the same
    xt = tx["x"].transpose(0, 1).contiguous().transpose(0, 1)
    assert not xt.is_contiguous()
    check(w12, x, fn(**{**tx, "x": xt}))


def test_errors_are_one_line(small, fast_tmp):
    w = small("trimul_outgoing")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    _, tx = tensors(w)
    cases = [
        (DTypeError, {**tx, "x": tx["x"].double()},
         "trimul_outgoing: input 'x' is torch.float64, the workload takes torch.float32"),
        (DTypeError, {**tx, "mask": tx["mask"].bool()}, "input 'mask' is torch.bool"),
        (ShapeError, {**tx, "x": tx["x"][:, :5]}, "axis 1 gives N=5 but axis 0 of input 'x'"),
        (ShapeError, {n: t for n, t in tx.items() if n != "w_g"}, r"missing input(s) w_g"),
    ]
    for error, kw, needle in cases:
        with pytest.raises(error) as e:
            fn(**kw)
        assert needle in str(e.value) and "\n" not in str(e.value)


def test_backward_says_plans_are_forward_only(small, fast_tmp):
    w = small("gated_mlp")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    _, tx = tensors(w)
    x = tx["x"].clone().requires_grad_()
    out = fn(**{**tx, "x": x})["out"]
    with pytest.raises(RuntimeError, match="forward passes only"):
        out.sum().backward()


def test_one_op_in_a_compiled_graph(small, fast_tmp):
    w = small("trimul_outgoing")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    compiled = torch.compile(lambda **kw: fn(**kw)["out"] * 2, backend=record, fullgraph=True)
    torch.testing.assert_close(compiled(**tx), fn(**tx)["out"] * 2, rtol=0, atol=0)
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function"]
    ours = [n for n in calls if "autotune" in str(n.target)]
    assert len(ours) == 1 and str(ours[0].target).startswith("autotune.trimul_outgoing_")
    assert len(calls) == 2                        # the op and the multiplication


def test_dynamic_shapes_keep_one_graph(small, fast_tmp):
    """The shape-only kernel gives symbolic output sizes: two sequence lengths, one graph."""
    w = small("trimul_outgoing")
    layer = at.function(w, "cpu", fast_tmp / "p.sqlite").bind(
        **{n: t for n, t in tensors(w)[1].items() if n in w.params})
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    step = torch.compile(lambda z, m: layer(x=z, mask=m)["out"] + z, backend=record,
                         dynamic=True, fullgraph=True)
    for n in (16, 12):
        wn = load_workload("trimul_outgoing", {"N": n, "C": 8})
        _, tx = tensors(wn, seed=n)
        torch.testing.assert_close(step(tx["x"], tx["mask"]),
                                   layer(x=tx["x"], mask=tx["mask"])["out"] + tx["x"])
    assert len(graphs) == 1


def test_bound_op_through_aot_autograd(small, fast_tmp):
    """aot_eager runs the shape-only kernel (functionalization, fake tensors) and then the
    real one: the bound op's output shapes come from its activations and its binding."""
    w = small("trimul_outgoing")
    fn = at.function(w, "cpu", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    layer = fn.bind(**{n: tx[n] for n in w.params})
    compiled = torch.compile(lambda x, mask: layer(x=x, mask=mask)["out"].sigmoid(),
                             backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(tx["x"], tx["mask"]), fn(**tx)["out"].sigmoid())


@pytest.mark.cuda
def test_cuda_round_trip(small, fast_tmp):
    w = small("trimul_outgoing")
    fn = at.function(w, "cuda", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = fn(**{n: t.cuda() for n, t in tx.items()})
    assert outs["out"].is_cuda
    check(w, x, {n: t.cpu() for n, t in outs.items()})
    with pytest.raises(ValueError, match="is on cpu, this function runs on cuda"):
        fn(**tx)


@pytest.mark.cuda
def test_cuda_bound_round_trip(small, fast_tmp):
    """The weights bound on the device once; the activations alone per call."""
    w = small("trimul_outgoing")
    fn = at.function(w, "cuda", fast_tmp / "p.sqlite")
    x, tx = tensors(w)
    cuda = {n: t.cuda() for n, t in tx.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = fn.bind(**{n: cuda[n] for n in w.params})
        for seed in (1, 2):
            x2, tx2 = tensors(w, seed)
            acts = {n: tx2[n].cuda() for n in w.activations}
            outs = layer(**acts)
            assert outs["out"].is_cuda
            check(w, {**x, **{n: x2[n] for n in w.activations}},
                  {n: t.cpu() for n, t in outs.items()})
