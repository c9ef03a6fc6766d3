"""A CPU plan with some of its inputs bound (a model's weights): what depends only on them is
prepared once instead of on every call.

Two kinds of preparation, both decided from the plan's own steps, not from the workload's name:

- Constant groups (:func:`search_spaces.partition.constant_groups`): a group reading only bound
  inputs, or what such groups compute, runs once at binding, into arrays the binding owns (a
  weight scaled by a bound vector, a product of two bound matrices); bound calls skip it.
- Derived operands (:func:`derived`): an operand a step builds from bound arrays on each call
  (a stack's concatenated sibling weights with the contraction's scale in them, a kernel pair's
  interleaved weights, a weight staged into the layout BLAS takes, an epilogue's copied bias)
  is built on the first bound call, into the binding's own staging, and kept.

The plan stays shared by every binding and by unbound callers: a binding keeps its arrays to
itself, and an unbound call (``prep`` None) builds everything as before.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, TypeVar

import numpy as np

from search_spaces.partition import constant_groups

from autotune.backends.bound import check_activations, check_binding
from autotune.backends.buffers import aligned_empty, in_layout
from autotune.backends.cpu.staging import Staging

T = TypeVar("T")


class Prepared:
    """What one binding of a plan prepared: ``frozen`` (the bound inputs and the tensors the
    constant groups compute), those tensors' arrays (``storage`` in the plan's layouts and
    their ``logical`` views), the ``skip``ped groups' anchors, and the derived operands."""

    def __init__(self, frozen: frozenset[str], skip: frozenset[str]):
        self.frozen, self.skip = frozen, skip
        self.storage: dict[str, np.ndarray] = {}
        self.logical: dict[str, np.ndarray] = {}
        self.stage = Staging()
        self.made: dict[str, Any] = {}

    def close(self) -> None:
        self.stage.close()
        self.made = {}


def derived(prep: Prepared | None, tag: str, sources: Iterable[str], stage: Staging,
            build: Callable[[Staging], T]) -> T:
    """``build(stage)``, or, when ``prep`` has every tensor of ``sources`` frozen, the value
    ``build(prep.stage)`` returned on the first such call (``tag`` names it within the plan:
    each step's tags are its own)."""
    if prep is None or not prep.frozen.issuperset(sources):
        return build(stage)
    got = prep.made.get(tag)
    if got is None:
        got = prep.made[tag] = build(prep.stage)
    return got


class CpuBoundPlan:   # an autotune.backends.bound.BoundPlan
    """``bound(**activations) -> {output: ndarray}``: ``plan`` run with ``params`` bound (see
    the module docstring).  The bound arrays are read as they are at binding: bind again after
    changing them.  :meth:`close` drops what the binding prepared."""

    def __init__(self, plan, params: Mapping[str, np.ndarray]):
        w = plan.w
        check_binding(w, {n: np.shape(a) for n, a in params.items()})
        self.plan = plan
        self.params = {n: np.ascontiguousarray(a, dtype=plan.dtype) for n, a in params.items()}
        self.activations = tuple(n for n in w.input_names if n not in self.params)
        skip = constant_groups(w, plan.groups, set(self.params), plan.unfoldable())
        folded = {m for g in plan.groups if g.anchor in skip for m in g.members}
        self.prep = Prepared(frozenset(self.params) | frozenset(folded), frozenset(skip))
        self._fold(folded & plan.materialized)

    def _fold(self, tensors: set[str]) -> None:
        """Run the constant groups once, into arrays of this binding's own."""
        plan, prep = self.plan, self.prep
        if not prep.skip:
            return
        for t in sorted(tensors):
            shape = plan.w.shapes[t]
            prep.storage[t], prep.logical[t] = in_layout(
                shape, plan.cand.layout(t, len(shape)), lambda s: aligned_empty(s, plan.dtype))
        env = {**plan.logical, **self.params, **prep.logical}
        storage = {**plan.storage, **self.params, **prep.storage}
        for g in plan.groups:
            if g.anchor in prep.skip:
                plan.run_group(g, env, storage, None)

    def __call__(self, **activations: np.ndarray) -> dict[str, np.ndarray]:
        check_activations(self.plan.w, self.params, activations)
        return self.plan.run({**activations, **self.params}, self.prep)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for ``inputs``, every input by name, the bound ones these same arrays
        (the caller's word: :class:`autotune.interop.function.BoundFunction` passes them)."""
        return self.plan.run(inputs, self.prep)

    def close(self) -> None:
        self.prep.close()
