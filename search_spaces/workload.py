"""The Workload: a validated program (a DAG of generic ops) with its dims, inputs and checks."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .ir import Op, to_text

DTYPES = ("float32", "float64")
INIT_RE = re.compile(
    r"^\s*(normal|uniform)\(\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\)\s*$|^\s*(bernoulli)\(\s*([0-9.eE+-]+)\s*\)\s*$")
DEFAULT_INIT = "normal(0,1)"


def parse_init(spec: str) -> tuple[str, tuple[float, ...]]:
    """``"normal(0,1)"`` -> ("normal", (0.0, 1.0)); raises ValueError on anything else."""
    m = INIT_RE.match(spec)
    if not m:
        raise ValueError(f"bad init {spec!r}: use normal(mean,std), uniform(lo,hi) or bernoulli(p)")
    if m.group(4):
        p = float(m.group(5))
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bad init {spec!r}: bernoulli p must lie in [0, 1]")
        return "bernoulli", (p,)
    a, b = float(m.group(2)), float(m.group(3))
    if not (np.isfinite(a) and np.isfinite(b)) or (m.group(1) == "normal" and b < 0) or \
            (m.group(1) == "uniform" and b < a):
        raise ValueError(f"bad init {spec!r}: parameters out of range")
    return m.group(1), (a, b)


@dataclass(frozen=True)
class Workload:
    """A declared tensor program, validated, with default or overridden dims.

    ``hash`` is a sha256 over the canonical form: dims, dtype, input shapes, outputs, ops (with
    canonical index names), tolerance and search-space restrictions.  Name, summary, comments,
    whitespace and the user's index names do not enter it.
    """
    name: str
    summary: str
    dtype: str
    dims: tuple[tuple[str, int], ...]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    init: tuple[tuple[str, str], ...]
    outputs: tuple[str, ...]
    ops: tuple[Op, ...]
    rtol: float
    space_json: str = "{}"       # validated [space] table, canonical JSON
    source: str = ""             # path or "builtin:NAME"; not hashed
    # The inputs the TOML's ``parameters`` key declares (weights a caller binds once); not
    # hashed: which inputs a caller fixes changes nothing a plan computes or is timed on.
    params: tuple[str, ...] = ()
    # The dim each input axis is declared with ("" for a literal extent), so that a caller's
    # shapes give the dims to run at; not hashed (the extents themselves are).
    axes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    # ---- lookups -------------------------------------------------------------------------
    @cached_property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        s = {n: shp for n, shp in self.inputs}
        for op in self.ops:
            s[op.out] = op.out_shape
        return s

    @cached_property
    def producer(self) -> dict[str, Op]:
        return {op.out: op for op in self.ops}

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        """tensor -> names of the ops (their outputs) that read it."""
        c: dict[str, list[str]] = {n: [] for n in self.shapes}
        for op in self.ops:
            for t in op.inputs():
                c[t].append(op.out)
        return {k: tuple(v) for k, v in c.items()}

    @cached_property
    def descendants(self) -> dict[str, frozenset[str]]:
        """tensor -> the ops (their outputs) that read it, directly or through others."""
        out: dict[str, frozenset[str]] = {}
        for name in reversed([n for n, _ in self.inputs] + [op.out for op in self.ops]):
            below = set(self.consumers.get(name, ()))
            for c in self.consumers.get(name, ()):
                below |= out[c]
            out[name] = frozenset(below)
        return out

    def op(self, name: str) -> Op:
        return self.producer[name]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.inputs)

    @property
    def activations(self) -> tuple[str, ...]:
        """The inputs passed on every call: those not declared parameters."""
        return tuple(n for n, _ in self.inputs if n not in self.params)

    @property
    def dim_dict(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def space(self) -> dict:
        return json.loads(self.space_json)

    # ---- identity ------------------------------------------------------------------------
    def canonical(self) -> dict:
        return {
            "dims": dict(self.dims),
            "dtype": self.dtype,
            "inputs": [[n, list(s)] for n, s in self.inputs],
            "outputs": list(self.outputs),
            "ops": [{"out": op.out, "combiner": op.combiner, "parallel": list(op.parallel),
                     "reduction": list(op.reduction), "extents": list(op.extents),
                     "expr": to_text(op.expr)} for op in self.ops],
            "rtol": self.rtol,
            "space": json.loads(self.space_json),
        }

    @cached_property
    def hash(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    # ---- data ----------------------------------------------------------------------------
    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Fresh random inputs honouring ``[init]`` (never all zeros), in the workload's dtype."""
        rng = np.random.default_rng(seed)
        init = dict(self.init)
        out = {}
        for name, shape in self.inputs:
            kind, params = parse_init(init.get(name, DEFAULT_INIT))
            if kind == "normal":
                arr = rng.standard_normal(shape, dtype=np.float32) * params[1] + params[0]
            elif kind == "uniform":
                arr = rng.uniform(params[0], params[1], size=shape).astype(np.float32)
            else:
                arr = (rng.random(shape, dtype=np.float32) < params[0]).astype(np.float32)
            out[name] = np.ascontiguousarray(arr, dtype=self.dtype)
        return out

    def flops(self) -> int:
        """Useful flops of one evaluation (each op's body times its domain)."""
        return sum(op.iterations * op.flops_per_iteration()[0] for op in self.ops)
