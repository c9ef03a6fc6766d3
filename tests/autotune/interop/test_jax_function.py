"""autotune.jax.function: JAX arrays in and out; on concrete arrays the plan reads their own
memory, under jax.jit it is a pure_callback; parameters bound once; one-line errors."""
from __future__ import annotations

import numpy as np
import pytest

import autotune.interop.function as function_mod
from autotune.backends.base import verify
from autotune.interop.dims import ShapeError
from autotune.interop.function import DTypeError
from autotune.reference import reference
from search_spaces import load_workload
from tests.support.skips import require

jax = require("jax")
jnp = jax.numpy
import autotune.jax as aj  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def arrays(w, seed=1):
    x = w.random_inputs(seed)
    return x, {n: jnp.asarray(a) for n, a in x.items()}


def check(w, x, outs):
    err, why = verify({n: np.asarray(a) for n, a in outs.items()}, reference(w, x), w.rtol)
    assert not why, why


def test_concrete_call_reads_the_arrays_own_memory(small, fast_tmp, monkeypatch):
    seen = {}
    real = function_mod.plan_for

    def spying(w, device, db):
        plan, res = real(w, device, db)

        def spy(**inputs):
            seen.update({n: a.ctypes.data for n, a in inputs.items()})
            outs = plan(**inputs)
            seen["returned"] = outs["out"]
            return outs
        return spy, res
    monkeypatch.setattr(function_mod, "plan_for", spying)
    w = small("gated_mlp")
    fn = aj.function(w, "cpu", fast_tmp / "p.sqlite")
    x, jx = arrays(w)
    outs = fn(**jx)
    check(w, x, outs)
    assert {n: seen[n] for n in jx} == {n: a.unsafe_buffer_pointer() for n, a in jx.items()}
    out, plan_out = outs["out"], seen["returned"]
    if plan_out.ctypes.data % 64 == 0:    # JAX's alignment: then DLPack shares the buffer
        assert out.unsafe_buffer_pointer() == plan_out.ctypes.data


def test_under_jit_and_bound(small, fast_tmp):
    w = small("trimul_outgoing")
    fn = aj.function(w, "cpu", fast_tmp / "p.sqlite")
    x, jx = arrays(w)
    check(w, x, jax.jit(lambda **kw: fn(**kw))(**jx))
    layer = fn.bind(**{n: jx[n] for n in w.params})
    step = jax.jit(lambda x, mask: layer(x=x, mask=mask)["out"] * 2)
    np.testing.assert_allclose(np.asarray(step(jx["x"], jx["mask"])),
                               2 * np.asarray(fn(**jx)["out"]), rtol=1e-6)
    # another N under jit: the shapes of the trace give the dims
    w12 = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    x12, j12 = arrays(w12, seed=2)
    x12.update({n: x[n] for n in w.params})
    check(w12, x12, {"out": step(j12["x"], j12["mask"]) / 2})
    with pytest.raises(TypeError, match="bind concrete arrays"):
        jax.jit(lambda p: fn.bind(**{**{n: jx[n] for n in w.params}, "w_a": p}))(jx["w_a"])


def test_errors_are_one_line(small, fast_tmp):
    w = small("gated_mlp")
    fn = aj.function(w, "cpu", fast_tmp / "p.sqlite")
    _, jx = arrays(w)
    with pytest.raises(DTypeError, match="gated_mlp: input 'x' is int32, the workload takes "
                                         "float32"):
        fn(**{**jx, "x": jx["x"].astype(jnp.int32)})
    with pytest.raises(ShapeError, match=r"unknown input\(s\) y"):
        fn(**jx, y=jx["x"])
    with pytest.raises(ShapeError, match="'w_up' has shape"):
        jax.jit(lambda **kw: fn(**kw))(**{**jx, "w_up": jx["w_up"][:3]})
