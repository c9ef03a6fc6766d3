"""PyTorch: a tuned plan as a function of tensors.

    fn = autotune.torch.function(autotune.load_workload("trimul_outgoing"))
    out = fn(x=x, mask=mask, ln_in_w=..., ...)["out"]      # every input, keyword tensors
    layer = fn.bind(ln_in_w=..., w_a=..., ...)              # the declared parameters, once
    out = layer(x=x, mask=mask)["out"]                      # then only the activations

The call is one ``torch.library`` custom op (:mod:`autotune.interop.torch_op`): no copies in or
out for contiguous tensors in the workload's dtype, one node in a ``torch.compile`` graph, and
the plan tuned for the dims the shapes give (:mod:`autotune.interop.resolve`).
"""
from __future__ import annotations

import weakref

import torch

from search_spaces.workload import Workload

from autotune.interop.dims import at_dims, check_names
from autotune.interop.resolve import Resolution, plan_for
from autotune.interop.torch_op import op_for


class TorchFunction:
    """``fn(**tensors) -> {output: tensor}`` running ``w``'s tuned plans on ``device``."""

    def __init__(self, w: Workload, device: str = "cpu", db=None):
        self.w, self.device, self.db = w, device, db
        self.op = op_for(w, device, db)
        self.names, self.outputs = w.input_names, w.outputs

    def __call__(self, **tensors: torch.Tensor) -> dict[str, torch.Tensor]:
        if len(tensors) != len(self.names) or any(n not in tensors for n in self.names):
            check_names(self.w, list(tensors), self.names)
        return dict(zip(self.outputs, self.op.call([tensors[n] for n in self.names])))

    def bind(self, **params: torch.Tensor) -> "BoundTorchFunction":
        """``w``'s declared parameters converted once; the result takes the activations."""
        return BoundTorchFunction(self, params)

    def resolution(self, **shapes) -> Resolution:
        """Which plan runs inputs of these shapes (name -> shape), and why."""
        fn = self.op.fn
        return plan_for(at_dims(self.w, fn.dims(shapes)), fn.device, fn.db)[1]


class BoundTorchFunction:
    """A :class:`TorchFunction` with its parameters bound: ``bound(**activations)``.  The
    bound tensors are read as they are now: bind again after changing them."""

    def __init__(self, fn: TorchFunction, params: dict[str, torch.Tensor]):
        self.w, self.op = fn.w, fn.op
        self.names, self.outputs = fn.w.activations, fn.outputs
        self.number = self.op.bind({n: t.detach() for n, t in params.items()})
        weakref.finalize(self, self.op.unbind, self.number)

    def __call__(self, **tensors: torch.Tensor) -> dict[str, torch.Tensor]:
        if len(tensors) != len(self.names) or any(n not in tensors for n in self.names):
            check_names(self.w, list(tensors), self.names)
        return dict(zip(self.outputs,
                        self.op.call_bound(self.number, [tensors[n] for n in self.names])))


def function(w: Workload, device: str = "cpu", db=None) -> TorchFunction:
    """``w``'s tuned plans as a function of keyword tensors on ``device`` ("cpu" or "cuda"),
    plans read from the database ``db`` (default: the user's)."""
    return TorchFunction(w, device, db)

