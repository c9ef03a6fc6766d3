"""PyTorch: a tuned plan as a function of tensors, and drop-in AlphaFold modules built on it.

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
from torch import nn

from search_spaces.loader import load_workload
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


# ---- drop-in modules ------------------------------------------------------------------------------
class _TriangleMultiplicativeUpdate(nn.Module):
    """AlphaFold 2's triangle multiplicative update (supplement, algorithms 11 and 12) with
    OpenFold's parameter names, so that an OpenFold state dict loads; ``forward(z, mask)``
    returns the update (the caller adds it to ``z``).  It runs the tuned plans of the built-in
    workload ``trimul_outgoing`` / ``trimul_incoming`` (tune them with ``autotune search``),
    for inference only.  The built-ins have one channel dim, so ``c_hidden`` must equal ``c_z``
    (as in AlphaFold 2, OpenFold, Boltz and Protenix)."""
    _workload = ""
    _outgoing = True

    def __init__(self, c_z: int, c_hidden: int, *, db=None):
        super().__init__()
        if c_hidden != c_z:
            raise ValueError(f"c_hidden={c_hidden} != c_z={c_z}: the tuned {self._workload} "
                             f"workload has one channel dim C for both")
        self.c_z, self.c_hidden, self.db = c_z, c_hidden, db
        self.linear_a_p = nn.Linear(c_z, c_hidden)
        self.linear_a_g = nn.Linear(c_z, c_hidden)
        self.linear_b_p = nn.Linear(c_z, c_hidden)
        self.linear_b_g = nn.Linear(c_z, c_hidden)
        self.linear_g = nn.Linear(c_z, c_z)
        self.linear_z = nn.Linear(c_hidden, c_z)
        self.layer_norm_in = nn.LayerNorm(c_z)
        self.layer_norm_out = nn.LayerNorm(c_hidden)
        self._fns: dict[str, TorchFunction] = {}
        self._bound: tuple[tuple, BoundTorchFunction] | None = None
        self._function("cpu")   # here, not while torch.compile traces a first call

    def _function(self, kind: str) -> TorchFunction:
        """The workload's function on a device kind (a CUDA one is made by the first eager
        call on a CUDA tensor: call the module once before compiling it)."""
        if kind not in self._fns:
            w = load_workload(self._workload, {"C": self.c_z})
            self._fns[kind] = function(w, kind, self.db)
        return self._fns[kind]

    def parameters_for_workload(self) -> dict[str, torch.Tensor]:
        """The workload's parameters from this module's: nn.Linear holds ``weight`` as
        [out, in] and the workload's projections read ``w[in, out]``.  The built-in incoming
        update contracts ``a[k,j] * b[k,i]`` where AlphaFold's is ``a[k,i] * b[k,j]``, so its
        ``a`` projection is this module's ``b`` and the other way round."""
        a, b = (self.linear_a_p, self.linear_a_g), (self.linear_b_p, self.linear_b_g)
        if not self._outgoing:
            a, b = b, a
        lin = {"a": a[0], "ga": a[1], "b": b[0], "gb": b[1], "o": self.linear_z,
               "g": self.linear_g}
        out = {"ln_in_w": self.layer_norm_in.weight, "ln_in_b": self.layer_norm_in.bias,
               "ln_out_w": self.layer_norm_out.weight, "ln_out_b": self.layer_norm_out.bias}
        for k, m in lin.items():
            out[f"w_{k}"] = m.weight.t().contiguous()
            out[f"b_{k}"] = m.bias
        return out

    def _bound_for(self, kind: str) -> BoundTorchFunction:
        # Bound once per weight version: load_state_dict, an optimizer step or any in-place
        # change bumps a tensor's version and makes the next call bind again.
        key = (kind,) + tuple((p.data_ptr(), p._version) for p in self.parameters())
        if self._bound is None or self._bound[0] != key:
            with torch.no_grad():
                self._bound = (key, self._function(kind).bind(**self.parameters_for_workload()))
        return self._bound[1]

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``z`` [*, N, N, c_z], ``mask`` [*, N, N] (None: all ones) -> the update [*, N, N,
        c_z]; leading dims run one plan call each."""
        if mask is None:
            mask = z.new_ones(z.shape[:-1])
        lead = z.shape[:-3]
        zs, ms = z.reshape(-1, *z.shape[-3:]), mask.reshape(-1, *mask.shape[-2:]).to(z.dtype)
        kind = z.device.type
        if torch.compiler.is_compiling():
            # traced: the weight transposes become graph ops and the op takes every input
            fn, params = self._fns[kind], self.parameters_for_workload()
            outs = [fn(x=x, mask=m, **params)["out"] for x, m in zip(zs, ms)]
        else:
            bound = self._bound_for(kind)
            outs = [bound(x=x, mask=m)["out"] for x, m in zip(zs, ms)]
        return torch.stack(outs).reshape(*lead, *z.shape[-3:]) if lead else outs[0]


class TriangleMultiplicationOutgoing(_TriangleMultiplicativeUpdate):
    """Outgoing edges: ``t[i,j] = sum_k a[i,k] * b[j,k]`` (AlphaFold 2, algorithm 11)."""
    _workload = "trimul_outgoing"
    _outgoing = True


class TriangleMultiplicationIncoming(_TriangleMultiplicativeUpdate):
    """Incoming edges: ``t[i,j] = sum_k a[k,i] * b[k,j]`` (AlphaFold 2, algorithm 12)."""
    _workload = "trimul_incoming"
    _outgoing = False
