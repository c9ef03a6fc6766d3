"""What binding a plan's inputs means on every backend (:meth:`autotune.backends.base.Plan.bind`):
the checks a binding makes, and the bound plan's protocol.

A bound plan runs the plan with some inputs (a model's weights) fixed at binding and prepares
what depends only on them once: groups that read nothing else run at binding, not on each call
(:func:`search_spaces.partition.constant_groups`); the CPU plan also keeps the operands it
builds from them (autotune.backends.cpu.binding).  The plan stays shared: a binding keeps what
it prepared to itself, and unbound calls of the same plan run as before.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from search_spaces.workload import Workload


class BoundPlan(Protocol):
    """``bound(**activations) -> {output: array}``; :meth:`run` takes every input by name, the
    bound ones the very arrays bound (what a caller that keeps them passes)."""

    def __call__(self, **activations: Any) -> dict[str, Any]: ...

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None:
        """Drop what the binding prepared."""
        ...


def check_binding(w: Workload, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """ValueError (one line) unless every name of ``shapes`` is an input of ``w`` of that
    shape."""
    want = dict(w.inputs)
    unknown = sorted(set(shapes) - set(want))
    if unknown:
        raise ValueError(f"{w.name}: cannot bind {', '.join(map(repr, unknown))}: not an "
                         f"input (inputs: {', '.join(want)})")
    for n, shape in shapes.items():
        if tuple(shape) != tuple(want[n]):
            raise ValueError(f"{w.name}: bound input {n!r} has shape {tuple(shape)}, the plan "
                             f"takes {tuple(want[n])}")


def check_activations(w: Workload, bound: Mapping[str, Any], activations: Mapping[str, Any]
                      ) -> None:
    """ValueError (one line) when a call passes a bound input again."""
    clash = sorted(set(activations) & set(bound))
    if clash:
        free = [n for n in w.input_names if n not in bound]
        raise ValueError(f"{w.name}: {', '.join(map(repr, clash))} is bound: pass only "
                         f"{', '.join(free)}")
