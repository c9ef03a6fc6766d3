"""A workload as a ``torch.library`` custom op: one node in a ``torch.compile`` graph.

Each workload gets two ops in the ``autotune`` namespace: ``NAME(Tensor t0, ...)``, taking
every input in declaration order, and (when the workload declares parameters)
``NAME_bound(Tensor a0, ..., int binding)``, taking the activations and the number of a binding
whose parameters were converted once.  Their kernels hand the tensors' memory to the plan
without copying (CPU tensors as NumPy views, CUDA tensors through DLPack as CuPy arrays) and
wrap the plan's fresh outputs the same way.  Their shape-only (fake) kernels compute the output
shapes from the input shapes, symbolically (an output axis takes the size of the input axis
declared with the same dim), so compiled graphs with dynamic shapes keep them as one op.  The
plans are for inference: a backward through one raises.
"""
from __future__ import annotations

import hashlib
import itertools
import re
from typing import Any, Sequence

import torch

from search_spaces.workload import Workload

from autotune.interop.dims import dims_of, output_axes, witnesses
from autotune.interop.function import BoundFunction, DTypeError, PlanFunction
from autotune.interop.resolve import db_path

TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}
# Kept for the process's life: torch drops a library's ops when the object is collected.
_LIB = torch.library.Library("autotune", "FRAGMENT")
_OPS: dict[str, "WorkloadOp"] = {}
_BINDING_NUMBERS = itertools.count(1)


def _no_backward(ctx, *grads):
    raise RuntimeError("autotune plans compute forward passes only: there is no backward "
                       "through a tuned plan (call it under torch.no_grad() or "
                       "torch.inference_mode())")


def op_for(w: Workload, device: str = "cpu", db=None) -> "WorkloadOp":
    """The ops of ``w`` on ``device`` with plans from ``db``, registered on first use (a
    second function for the same three shares them: torch cannot define an op twice)."""
    ident = f"{w.source}|{w.hash}|{device}|{db_path(db)}"
    name = f"{re.sub(r'[^A-Za-z0-9_]', '_', w.name)}_" \
           f"{hashlib.sha256(ident.encode()).hexdigest()[:10]}"
    if name not in _OPS:
        _OPS[name] = WorkloadOp(PlanFunction(w, device, db), name)
    return _OPS[name]


def _define(name: str, args: str, ret: str, run, fake) -> Any:
    _LIB.define(f"{name}({args}) -> {ret}")
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, run, key)
    torch.library.register_fake(f"autotune::{name}", fake, lib=_LIB)
    torch.library.register_autograd(f"autotune::{name}", _no_backward, lib=_LIB)
    return getattr(torch.ops.autotune, name).default


class WorkloadOp:
    """The custom ops of one workload (see the module's docstring); :meth:`call` and
    :meth:`call_bound` return the outputs as a tuple in the workload's order."""

    def __init__(self, fn: PlanFunction, name: str):
        w = self.w = fn.w
        self.fn = fn
        self.names, self.acts = w.input_names, w.activations   # read per call: computed once
        self.dtype = TORCH_DTYPES[w.dtype]
        self.out_axes = output_axes(w)
        self.witness = witnesses(w)
        self.bindings: dict[int, BoundFunction] = {}
        ret = "Tensor" if len(w.outputs) == 1 else f"({', '.join(['Tensor'] * len(w.outputs))})"
        self.op = _define(name, ", ".join(f"Tensor t{i}" for i in range(len(w.inputs))), ret,
                          self._run, self._fake)
        self.bound_op = _define(
            f"{name}_bound", ", ".join([f"Tensor a{i}" for i in range(len(w.activations))] +
                                       ["int binding"]),
            ret, self._run_bound, self._fake_bound) if w.params else None

    # ---- calling -----------------------------------------------------------------------------
    def call(self, tensors: Sequence[torch.Tensor]) -> tuple:
        out = self.op(*tensors)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    def call_bound(self, number: int, tensors: Sequence[torch.Tensor]) -> tuple:
        out = self.bound_op(*tensors, number)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    def bind(self, params: dict[str, torch.Tensor]) -> int:
        """Convert ``params`` once; the number a bound call passes."""
        number = next(_BINDING_NUMBERS)
        self.bindings[number] = self.fn.bind(**self._arrays(params.items(), "parameter"))
        return number

    def unbind(self, number: int) -> None:
        self.bindings.pop(number, None)

    # ---- kernels -----------------------------------------------------------------------------
    def _run(self, *tensors: torch.Tensor):
        arrays = self._arrays(zip(self.names, tensors), "input")
        return self._wrap(self._device_run(lambda: self.fn.run(arrays), tensors))

    def _bound(self, number: int) -> BoundFunction:
        try:
            return self.bindings[number]
        except KeyError:
            raise RuntimeError(f"{self.w.name}: binding {number} was released (its bound "
                               f"function was garbage-collected): bind again") from None

    def _run_bound(self, *args):
        *tensors, number = args
        bound = self._bound(number)
        arrays = self._arrays(zip(self.acts, tensors), "input")
        return self._wrap(self._device_run(lambda: bound(**arrays), tensors))

    def _fake(self, *tensors: torch.Tensor):
        self._check(zip(self.names, tensors), "input")
        return self._fake_outputs(dict(zip(self.names, tensors)))

    def _fake_bound(self, *args):
        *tensors, number = args
        self._check(zip(self.acts, tensors), "input")
        return self._fake_outputs({**self._bound(number).params,
                                   **dict(zip(self.acts, tensors))})

    def _fake_outputs(self, given: dict):
        w, like = self.w, next(t for t in given.values() if isinstance(t, torch.Tensor))
        shapes = {n: tuple(a.shape) for n, a in given.items()}
        if all(isinstance(s, int) for shp in shapes.values() for s in shp):
            # a misfit fails at trace time with the eager call's message (symbolic sizes are
            # left alone: reading them as ints would pin the graph to one shape)
            dims_of(w, shapes)
        outs = []
        for o in w.outputs:
            shape = [given[self.witness[d][0]].shape[self.witness[d][1]] if d else e
                     for d, e in zip(self.out_axes[o], w.shapes[o])]
            outs.append(like.new_empty(shape, dtype=self.dtype))
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- conversions -------------------------------------------------------------------------
    def _check(self, named, what: str) -> None:
        cuda = self.fn.kind == "cuda"
        for n, t in named:
            if t.dtype != self.dtype:
                raise DTypeError(f"{self.w.name}: {what} {n!r} is {t.dtype}, the workload takes "
                                 f"{self.dtype} (convert it once, outside the call)")
            if t.is_cuda != cuda:    # is_cuda: a tenth of t.device's cost, paid per input
                raise ValueError(f"{self.w.name}: {what} {n!r} is on {t.device}, this function "
                                 f"runs on {self.fn.device} (move the tensor, or make the "
                                 f"function with device={t.device.type!r})")

    def _arrays(self, named, what: str) -> dict:
        if self.fn.kind == "cuda":
            import cupy   # the GPU's array module, only where a GPU runs the plan
            named = list(named)
            self._check(named, what)
            return {n: cupy.from_dlpack(t.detach()) for n, t in named}
        out = {}
        for n, t in named:       # one pass: the checks and the views (per call, every input)
            if t.dtype != self.dtype or t.is_cuda:
                self._check([(n, t)], what)
            # a view of the tensor's memory (detach().numpy() measured faster than numpy()
            # alone, and autograd refuses numpy() on a tensor that requires grad)
            out[n] = t.detach().numpy()
        return out

    def _device_run(self, run, tensors):
        if self.fn.kind != "cuda":
            return run()
        import cupy
        # The plan launches on CuPy's current stream (its cuBLAS calls too), not torch's:
        # torch's stream is drained first and CuPy's after, so neither side reads unfinished
        # memory.
        torch.cuda.current_stream(tensors[0].device).synchronize()
        with cupy.cuda.Device(tensors[0].device.index):
            outs = run()
            cupy.cuda.get_current_stream().synchronize()
        return outs

    def _wrap(self, outs: dict):
        wrap = torch.from_numpy if self.fn.kind != "cuda" else torch.from_dlpack
        res = [wrap(outs[o]) for o in self.w.outputs]
        return res[0] if len(res) == 1 else tuple(res)
