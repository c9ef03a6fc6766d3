"""Peers: the workload's program translated from its IR into other frameworks (JAX, PyTorch).

Nothing here is written per workload.  Each :class:`~search_spaces.ir.Op` is translated
generically:

* a ``+=`` op whose body is a product (``op.factors()``) becomes one ``einsum`` whose operands are
  the factors, each evaluated over its own indices; constant factors become one scalar, reduction
  indices no factor uses multiply by their extent, output indices no factor uses are broadcast;
* every other op is evaluated by broadcasting over its iteration domain, then reduced (``max=``)
  over its reduction axes, or returned as is (``=``);
* a ``where(COND, A, B)`` is the framework's ``where`` on a mask built from integer ranges
  (``arange``) of the indices the condition names, broadcast like the operands.

Canonical index names (``d0, d1, ...``) map to einsum letters.  The frameworks are optional
dependencies, imported inside the builders; a missing one raises :class:`PeerUnavailable`.

    fn = jax_function(w)                  # jax.jit-ed
    outs = fn(**w.random_inputs())        # {output name: jax.Array}
"""
from __future__ import annotations

import math
import string

from search_spaces.ir import Access, Binary, Const, Expr, Op, Pow, Select, Unary, index_names
from search_spaces.workload import Workload

PRECISIONS = ("default", "highest")
_LETTERS = string.ascii_letters


class PeerUnavailable(Exception):
    """The framework a peer needs is not installed (or not usable) here."""


# ---- the framework-neutral translation --------------------------------------------------------
class _Ops:
    """What the translation needs from a framework; subclasses bind it to jnp or torch."""
    fns: dict

    def einsum(self, spec: str, *xs): ...
    def transpose(self, x, perm): ...
    def reshape(self, x, shape): ...
    def broadcast_to(self, x, shape): ...
    def amax(self, x, axes): ...
    def full(self, shape, value): ...
    def arange(self, n): ...
    def where(self, mask, a, b): ...


def _const_value(e: Expr) -> float:
    """Value of an expression without accesses, folded in float64."""
    if isinstance(e, Const):
        return float(e.value)
    if isinstance(e, Unary):
        return -_const_value(e.x)
    if isinstance(e, Binary):
        a, b = _const_value(e.a), _const_value(e.b)
        return {"+": a + b, "-": a - b, "*": a * b,
                "/": (a / b) if b else math.copysign(math.inf, a) if a else math.nan}[e.op]
    if isinstance(e, Pow):
        return float(_const_value(e.base) ** e.exponent)
    if isinstance(e, Select):   # a condition without indices: a constant too
        return _const_value(e.a) if e.cond.holds({}) else _const_value(e.b)
    args = [_const_value(a) for a in e.args]
    x = args[0]
    return {
        "exp": lambda: math.exp(x), "log": lambda: math.log(x), "sqrt": lambda: math.sqrt(x),
        "rsqrt": lambda: 1.0 / math.sqrt(x), "sigmoid": lambda: 0.5 * (1 + math.tanh(0.5 * x)),
        "tanh": lambda: math.tanh(x), "relu": lambda: max(x, 0.0), "abs": lambda: abs(x),
        "max": lambda: max(args), "min": lambda: min(args),
    }[e.fn]()


def _used(e: Expr, order: tuple[str, ...]) -> tuple[str, ...]:
    used = index_names(e)
    return tuple(i for i in order if i in used)


def _letters(idx, letter) -> str:
    return "".join(letter[i] for i in idx)


def _eval(e: Expr, env: dict, axes: tuple[str, ...], op: Op, F: _Ops):
    """``e`` as an array over ``axes`` (size 1 where ``e`` does not use an index), or a float."""
    if not index_names(e):
        return _const_value(e)
    if isinstance(e, Access):
        arr = env[e.tensor]
        perm = sorted(range(len(e.idx)), key=lambda p: axes.index(e.idx[p]))
        if perm != list(range(len(perm))):
            arr = F.transpose(arr, tuple(perm))
        shape = tuple(op.extent(i) if i in e.idx else 1 for i in axes)
        return F.reshape(arr, shape) if len(shape) != len(e.idx) else arr
    if isinstance(e, Unary):
        return -_eval(e.x, env, axes, op, F)
    if isinstance(e, Binary):
        a, b = _eval(e.a, env, axes, op, F), _eval(e.b, env, axes, op, F)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        return a / b
    if isinstance(e, Pow):
        base = _eval(e.base, env, axes, op, F)
        return base ** int(e.exponent)
    if isinstance(e, Select):
        def iota(i):      # the index's values along its axis
            return F.reshape(F.arange(op.extent(i)),
                             tuple(op.extent(i) if i == x else 1 for x in axes))
        mask = e.cond.over(iota)
        if isinstance(mask, bool):   # a condition without indices picks a branch
            return _eval(e.a if mask else e.b, env, axes, op, F)
        return F.where(mask, _eval(e.a, env, axes, op, F), _eval(e.b, env, axes, op, F))
    return F.fns[e.fn](*[_eval(a, env, axes, op, F) for a in e.args])


def _sum_of_products(op: Op, env: dict, F: _Ops, letter: dict):
    const = 1.0
    operands, specs = [], []
    for f in op.factors():
        if not index_names(f):
            const *= _const_value(f)
            continue
        idx = _used(f, op.domain)
        operands.append(_eval(f, env, idx, op, F))
        specs.append(_letters(idx, letter))
    used = {i for s in specs for i in s}
    out_idx = tuple(i for i in op.parallel if letter[i] in used)
    # reduction indices no factor reads: the sum counts each term that many times
    for i in op.reduction:
        if letter[i] not in used:
            const *= op.extent(i)
    if not operands:
        return F.full(op.out_shape, const)
    res = F.einsum(",".join(specs) + "->" + _letters(out_idx, letter), *operands)
    if const != 1.0:
        res = res * const
    if out_idx != op.parallel:  # output indices no factor reads: broadcast over them
        res = F.reshape(res, tuple(op.extent(i) if i in out_idx else 1 for i in op.parallel))
        res = F.broadcast_to(res, op.out_shape)
    return res


def _dense(op: Op, env: dict, F: _Ops):
    val = _eval(op.expr, env, op.domain, op, F)
    if isinstance(val, float):
        return F.full(op.out_shape, val)   # a constant op ("=" only: "+=" takes the other path)
    val = F.broadcast_to(val, op.extents)
    if op.combiner == "none" or not op.reduction:
        return val
    return F.amax(val, tuple(range(len(op.parallel), len(op.domain))))


def _program(w: Workload, F: _Ops):
    """The workload as a Python function of framework arrays, built from its ops."""
    names = sorted({i for op in w.ops for i in op.domain})
    if len(names) > len(_LETTERS):
        raise PeerUnavailable(f"{w.name}: more than {len(_LETTERS)} distinct indices")
    letter = dict(zip(names, _LETTERS))
    ops, outputs, input_names = w.ops, w.outputs, w.input_names

    def program(**inputs):
        env = {n: inputs[n] for n in input_names}
        for op in ops:
            if op.combiner == "sum":
                env[op.out] = _sum_of_products(op, env, F, letter)
            else:
                env[op.out] = _dense(op, env, F)
        return {o: env[o] for o in outputs}

    program.__name__ = f"{w.name}_peer"
    return program


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {', '.join(PRECISIONS)}")


# ---- JAX ---------------------------------------------------------------------------------------
def jax_function(w: Workload, precision: str = "default"):
    """The workload as a ``jax.jit``-ed ``fn(**inputs) -> {output: jax.Array}``.

    ``precision`` ("default" | "highest") is passed to every einsum.  A float64 workload runs
    with 64-bit types enabled for its calls (the returned callable wraps the jitted one).
    """
    _check_precision(precision)
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except Exception as e:  # ImportError, or a broken install failing at import
        raise PeerUnavailable(f"JAX is not installed ({type(e).__name__}: {e}); "
                              f"install it with `pip install 'jax[cpu]'`") from None
    prec = lax.Precision.HIGHEST if precision == "highest" else lax.Precision.DEFAULT

    class JaxOps(_Ops):
        fns = {"exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt,
               "sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "relu": jax.nn.relu, "abs": jnp.abs,
               "max": jnp.maximum, "min": jnp.minimum}

        def einsum(self, spec, *xs):
            return jnp.einsum(spec, *xs, precision=prec)

        def transpose(self, x, perm):
            return jnp.transpose(x, perm)

        def reshape(self, x, shape):
            return jnp.reshape(x, shape)

        def broadcast_to(self, x, shape):
            return jnp.broadcast_to(x, tuple(shape))

        def amax(self, x, axes):
            return jnp.max(x, axis=axes)

        def full(self, shape, value):
            return jnp.full(tuple(shape), value, dtype=w.dtype)

        def arange(self, n):
            return jnp.arange(n)

        def where(self, mask, a, b):
            return jnp.where(mask, a, b)

    fn = jax.jit(_program(w, JaxOps()))
    if w.dtype != "float64":
        return fn

    def fn64(**inputs):
        with jax.enable_x64(True):
            return fn(**inputs)
    fn64.jitted = fn
    return fn64


# ---- PyTorch -----------------------------------------------------------------------------------
def torch_function(w: Workload, compile: bool = False, precision: str = "default"):
    """The workload as ``fn(**inputs) -> {output: torch.Tensor}`` (eager, or ``torch.compile``-d
    with ``compile=True``).  Inputs may be NumPy arrays or tensors.  ``precision="highest"``
    disables reduced-precision (TF32) matmuls during each call."""
    _check_precision(precision)
    try:
        import torch
    except Exception as e:
        raise PeerUnavailable(f"PyTorch is not installed ({type(e).__name__}: {e}); "
                              f"install it with `pip install torch`") from None
    dtype = {"float32": torch.float32, "float64": torch.float64}[w.dtype]

    def _t(x):
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=dtype)

    class TorchOps(_Ops):
        fns = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
               "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "abs": torch.abs,
               "max": lambda a, b: torch.maximum(_t(a), _t(b)),
               "min": lambda a, b: torch.minimum(_t(a), _t(b))}

        def einsum(self, spec, *xs):
            return torch.einsum(spec, *xs)

        def transpose(self, x, perm):
            return x.permute(*perm)

        def reshape(self, x, shape):
            return x.reshape(shape)

        def broadcast_to(self, x, shape):
            return x.expand(*shape)

        def amax(self, x, axes):
            return torch.amax(x, dim=axes)

        def full(self, shape, value):
            return torch.full(tuple(shape), value, dtype=dtype)

        def arange(self, n):
            return torch.arange(n)

        def where(self, mask, a, b):
            return torch.where(mask, _t(a), _t(b))

    program = _program(w, TorchOps())
    if compile:
        program = torch.compile(program)
    names = w.input_names

    def fn(**inputs):
        args = {n: torch.as_tensor(inputs[n], dtype=dtype) for n in names}
        if precision != "highest":
            with torch.no_grad():
                return program(**args)
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            with torch.no_grad():
                return program(**args)
        finally:
            torch.set_float32_matmul_precision(old)
    fn.program = program
    return fn


PEERS = {"jax": jax_function, "torch": lambda w, **kw: torch_function(w, compile=False, **kw),
         "inductor": lambda w, **kw: torch_function(w, compile=True, **kw)}
