"""JAX: a tuned plan as a function of JAX arrays.

    fn = autotune.jax.function(autotune.load_workload("gated_mlp"))
    out = fn(x=x, norm_w=..., w_gate=..., w_up=..., w_down=...)["out"]
    layer = fn.bind(norm_w=..., w_gate=..., w_up=..., w_down=...)   # parameters, once
    out = jax.jit(lambda x: layer(x=x)["out"])(x)

Called on concrete arrays, the plan reads the arrays' own memory (NumPy views on the CPU, DLPack
on a GPU) and its outputs become JAX arrays through DLPack (without a copy where the plan's
buffer meets JAX's alignment, 64 bytes; JAX copies it otherwise).  Under ``jax.jit`` (or any
transformation) the call is a ``jax.pure_callback`` on the CPU: JAX hands the callback copies
and copies its results.  On a GPU only the concrete call exists.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from search_spaces.workload import Workload

from autotune.interop.dims import at_dims, check_names
from autotune.interop.function import BoundFunction, DTypeError, PlanFunction


class JaxFunction:
    """``fn(**arrays) -> {output: jax.Array}`` running ``w``'s tuned plans on ``device``."""

    def __init__(self, w: Workload, device: str = "cpu", db=None):
        self.w, self.fn = w, PlanFunction(w, device, db)
        self.names = w.input_names

    def __call__(self, **arrays: Any) -> dict[str, jax.Array]:
        return _call(self.w, self.fn, self.fn.run, self.names, arrays, {})

    def bind(self, **params: Any) -> "BoundJaxFunction":
        """``w``'s declared parameters converted once (concrete arrays, not traced ones)."""
        return BoundJaxFunction(self, params)


class BoundJaxFunction:
    """A :class:`JaxFunction` with its parameters bound: ``bound(**activations)``."""

    def __init__(self, fn: JaxFunction, params: dict[str, Any]):
        self.w, self.fn = fn.w, fn.fn
        if any(isinstance(a, jax.core.Tracer) for a in params.values()):
            raise TypeError(f"{fn.w.name}: bind concrete arrays, outside jax.jit: bound "
                            f"parameters are converted once, not per trace")
        self.bound = BoundFunction(self.fn, {n: _host(self.fn, a) for n, a in params.items()})
        self.names = fn.w.activations

    def __call__(self, **arrays: Any) -> dict[str, jax.Array]:
        return _call(self.w, self.fn, lambda a: self.bound(**a), self.names, arrays,
                     self.bound.params)


def function(w: Workload, device: str = "cpu", db=None) -> JaxFunction:
    """``w``'s tuned plans as a function of keyword JAX arrays on ``device``."""
    return JaxFunction(w, device, db)


def _host(fn: PlanFunction, a):
    """The plan's view of a concrete array: NumPy on the CPU (read-only, no copy), CuPy on a
    GPU through DLPack."""
    if fn.kind == "cuda":
        import cupy   # the GPU's array module, only where a GPU runs the plan
        return cupy.from_dlpack(a)
    return np.asarray(a)


def _call(w: Workload, fn: PlanFunction, run, names, arrays: dict, bound: dict) -> dict:
    if len(arrays) != len(names) or any(n not in arrays for n in names):
        check_names(w, list(arrays), names)
    for n in names:
        if np.dtype(arrays[n].dtype) != fn.dtype:
            raise DTypeError(f"{w.name}: input {n!r} is {arrays[n].dtype}, the workload "
                             f"takes {fn.dtype} (convert it once, outside the call)")
    if not any(isinstance(arrays[n], jax.core.Tracer) for n in names):
        outs = run({n: _host(fn, arrays[n]) for n in names})
        return {o: jax.dlpack.from_dlpack(outs[o]) for o in w.outputs}
    if fn.kind == "cuda":
        raise TypeError(f"{w.name}: on a GPU call the plan on concrete arrays, outside "
                        f"jax.jit (a traced call runs only on the CPU, as a callback)")
    shapes = {n: tuple(a.shape) for n, a in bound.items()}
    shapes.update((n, tuple(arrays[n].shape)) for n in names)
    at = at_dims(w, fn.dims(shapes))       # the traced shapes are static: dims known here
    result = tuple(jax.ShapeDtypeStruct(at.shapes[o], fn.dtype) for o in w.outputs)

    def callback(*args):
        outs = run({n: np.asarray(a) for n, a in zip(names, args)})
        return tuple(outs[o] for o in w.outputs)
    outs = jax.pure_callback(callback, result, *(arrays[n] for n in names),
                             vmap_method="sequential")
    return dict(zip(w.outputs, outs))
