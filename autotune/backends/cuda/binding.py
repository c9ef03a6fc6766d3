"""A GPU plan with some inputs bound (autotune.backends.bound): the bound arrays live on the
device from binding on, and the groups that read nothing else run once, at binding, into device
arrays of the binding's own; bound calls skip them."""
from __future__ import annotations

import itertools
from typing import Any, Mapping

import numpy as np

from search_spaces.partition import constant_groups

from autotune.backends.bound import check_activations, check_binding
from autotune.backends.buffers import in_layout


_TOKENS = itertools.count(1)     # a binding's part of its graphs' keys (0: unbound runs)


class CudaBoundPlan:   # an autotune.backends.bound.BoundPlan
    """``plan`` (a :class:`autotune.backends.cuda.executor.CudaPlan`) with ``params`` bound."""

    def __init__(self, plan, params: Mapping[str, Any]):
        w, rt = plan.w, plan.rt
        check_binding(w, {n: tuple(a.shape) for n, a in params.items()})
        self.plan = plan
        self.token = next(_TOKENS)
        self.params = {n: rt.xp.ascontiguousarray(rt.to_device(a), dtype=plan.dtype)
                       for n, a in params.items()}
        self.skip = frozenset(constant_groups(w, plan.groups, set(self.params),
                                              plan.unfoldable()))
        self.storage: dict[str, Any] = {}
        self.logical: dict[str, Any] = {}
        folded = {m for g in plan.groups if g.anchor in self.skip for m in g.members}
        for t in sorted(folded & plan.materialized):
            shape = w.shapes[t]
            self.storage[t], self.logical[t] = in_layout(
                shape, plan.cand.layout(t, len(shape)),
                lambda s: rt.xp.empty(s, dtype=plan.dtype))
        env = {**plan.logical, **self.params, **self.logical}
        if self.skip:
            storage = {**plan.storage, **self.params, **self.storage}
            for g in plan.groups:
                if g.anchor in self.skip:
                    plan.run_group(g, env, storage)
        # a stack whose differing operands (weights) are all bound gets them side by side once
        self.stack_x = {a: st.side_by_side(env, st.side_by_side_empty())
                        for a, st in plan.stacks.items()
                        if {o.tensor for o in st.others} <= set(self.params)}

    def run_device(self, inputs: Mapping[str, Any]) -> dict:
        """The plan's device outputs for ``inputs`` (every input by name), not synchronized."""
        return self.plan.run_with(inputs, self)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        rt = self.plan.rt
        host = {o: rt.to_host(a) for o, a in self.run_device(inputs).items()}
        rt.synchronize()
        return host

    def __call__(self, **activations: Any) -> dict[str, np.ndarray]:
        check_activations(self.plan.w, self.params, activations)
        return self.run({**activations, **self.params})

    def close(self) -> None:
        self.plan.graphs.forget(self.token)
        self.storage, self.logical, self.stack_x = {}, {}, {}
