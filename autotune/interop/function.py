"""A workload as a function of arrays at whatever dims its inputs' shapes give, and the same
with its parameters bound: the layer under autotune.torch and autotune.jax.

Arrays are NumPy arrays on the CPU and CuPy arrays on a GPU; they reach the plan as they are
(a contiguous input in the workload's dtype is never copied) and the outputs come back as the
plan's own fresh arrays on the CPU, or copies of its device buffers on a GPU (a CUDA plan
overwrites its buffers on the next run, and a caller's result must not change under it).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from search_spaces.workload import Workload

from autotune.backends.base import Plan
from autotune.backends.factory import resolve
from autotune.interop.dims import at_dims, check_names, dims_of
from autotune.interop.resolve import Resolution, plan_for


class DTypeError(TypeError):
    """An input in another dtype than the workload's (converting it would copy every call)."""


class PlanFunction:
    """``fn(**inputs) -> {output: array}`` for ``w`` at the dims the inputs' shapes give, on
    ``device``, with the plan tuned for those dims (see :mod:`autotune.interop.resolve`)."""

    def __init__(self, w: Workload, device: str = "cpu", db=None):
        self.w, self.device, self.db = w, device, db
        self.kind = resolve(device).kind
        self.names = w.input_names
        self.dtype = np.dtype(w.dtype)
        # the input shapes of a call, in input order -> its plan: a call after the first for a
        # shape costs one dict lookup, no dims arithmetic and no database query
        self._plans: dict[tuple, Plan] = {}

    def dims(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        return dims_of(self.w, shapes)

    def resolution(self, shapes: Mapping[str, Sequence[int]]) -> Resolution:
        """Which plan runs inputs of these shapes, and why."""
        return plan_for(at_dims(self.w, self.dims(shapes)), self.device, self.db)[1]

    def plan(self, shapes: Mapping[str, Sequence[int]]) -> Plan:
        key = tuple(tuple(shapes[n]) for n in self.names)
        plan = self._plans.get(key)
        if plan is None:
            w = at_dims(self.w, self.dims(shapes))
            plan = self._plans[key] = plan_for(w, self.device, self.db)[0]
        return plan

    def __call__(self, **inputs: Any) -> dict[str, Any]:
        return self.run(inputs)

    def run(self, inputs: Mapping[str, Any], binding: "BoundFunction | None" = None
            ) -> dict[str, Any]:
        """The outputs for ``inputs`` (every input by name); ``binding``: the bound function
        whose parameters are among them, so the plan runs with what it prepared for them."""
        try:
            key = tuple(inputs[n].shape for n in self.names)
        except KeyError:
            check_names(self.w, list(inputs), self.names)
            raise
        if len(inputs) != len(self.names):
            check_names(self.w, list(inputs), self.names)
        for n in self.names:
            if inputs[n].dtype != self.dtype:
                raise DTypeError(f"{self.w.name}: input {n!r} is {inputs[n].dtype}, the workload "
                                 f"takes {self.dtype} (convert it once, outside the call)")
        plan = self._plans.get(key) or self.plan({n: inputs[n].shape for n in self.names})
        if binding is not None:
            plan = binding.bound_plan(plan)
            if self.kind == "cuda":
                return {o: a.copy() for o, a in plan.run_device(inputs).items()}
            return plan.run(inputs)
        if self.kind == "cuda":
            return {o: a.copy() for o, a in plan.run_device(**inputs).items()}
        return plan(**inputs)

    def bind(self, **params: Any) -> "BoundFunction":
        """This function with ``w``'s declared parameters fixed: ``bound(**activations)``."""
        return BoundFunction(self, params)


class BoundFunction:
    """A :class:`PlanFunction` with the workload's parameters bound once: each one checked
    against the workload's shapes and made contiguous in its dtype on the plan's device here,
    so a call passes (and converts) only the activations; each plan it runs (one per shape)
    is bound to them on first use, and prepares what depends only on them then (its
    ``bind``: groups computing from parameters alone run once, stacked or interleaved
    weights are built once)."""

    def __init__(self, fn: PlanFunction, params: Mapping[str, Any]):
        w = fn.w
        if not w.params:
            raise ValueError(f"{w.name} declares no parameters: list the inputs a caller binds "
                             f"in its TOML (parameters = [\"w\", ...])")
        check_names(w, list(params), w.params)
        for n, a in params.items():
            if np.dtype(a.dtype) != fn.dtype:
                raise DTypeError(f"{w.name}: parameter {n!r} is {a.dtype}, the workload takes "
                                 f"{fn.dtype}")
        dims_of(w, {n: a.shape for n, a in params.items()}, partial=True)
        xp = np if fn.kind == "cpu" else _cupy()
        self.fn, self.w = fn, w
        self.params = {n: xp.ascontiguousarray(params[n]) for n in w.params}
        self.names = w.activations
        self._bound: dict[int, tuple[Plan, Any]] = {}    # id(plan) -> (plan, its binding)

    def __call__(self, **activations: Any) -> dict[str, Any]:
        if len(activations) != len(self.names) or any(n in self.params for n in activations):
            check_names(self.w, list(activations), self.names)
        return self.fn.run({**activations, **self.params}, self)

    def bound_plan(self, plan: Plan):
        """``plan`` bound to these parameters (made on the first call that runs it)."""
        got = self._bound.get(id(plan))
        if got is None:
            got = self._bound[id(plan)] = (plan, plan.bind(self.params))
        return got[1]


def _cupy():
    import cupy   # a GPU's module: imported only when a CUDA function binds parameters
    return cupy
