"""Symmetric products (search_spaces.symmetry): which contractions are symmetric in two of
their free indices, when the kernel computes one triangle, and the share of tiles it computes."""
from __future__ import annotations

import pytest

import json

from search_spaces.kernel_fusion import KernelParts, kernel_parts
from search_spaces.loader import parse_workload
from search_spaces.symmetry import (SYM_MIN_K, computed_share, symmetric_kernel,
                                    symmetric_pair)

DIMS = {"K": 128, "P": 32, "B": 4, "T": 4}
INPUTS = {"x": ["K", "P"], "y": ["K", "P"], "w": ["K"], "z": ["B", "K", "P"], "s": ["P", "K"],
          "b": ["P"], "t": ["T", "P"]}


def _w(program: str, outputs):
    used = {n: v for n, v in INPUTS.items() if f"{n}[" in program}
    text = (f'name = "t"\ndtype = "float32"\noutputs = {json.dumps(list(outputs))}\n'
            f'program = """\n{program}\n"""\n[dims]\n'
            + "".join(f"{k} = {v}\n" for k, v in DIMS.items())
            + "[inputs]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in used.items()))
    return parse_workload(text, "t.toml")


@pytest.mark.parametrize("program, symmetric", [
    ("g[p,q] += x[k,p] * x[k,q]", True),                  # x^T x
    ("g[p,q] += x[k,p] * x[k,q] / 64", True),             # a covariance's scale
    ("g[b,p,q] += z[b,k,p] * z[b,k,q]", True),            # batched
    ("g[p,q] += s[p,k] * s[q,k]", True),                  # x x^T
    ("g[q,p] += x[k,p] * x[k,q]", True),                  # stored transposed
    ("g[p,q] += x[k,p] * y[k,q]", False),                        # two tensors
    ("g[p,q] += x[k,p] * x[k,q] * w[k]", False),                 # a third factor
    ("g[p,q] += s[p,k] * x[k,q]", False),                        # a product of two tensors
])
def test_which_products_are_symmetric(program, symmetric):
    w = _w(program, ["g"])
    pair = symmetric_pair(w.op("g"))
    assert (pair is not None) == symmetric
    if pair:    # the op's own (canonical) names of two free indices of one extent
        op = w.op("g")
        assert set(pair) <= set(op.parallel) and op.extent(pair[0]) == op.extent(pair[1])


def test_a_product_deep_enough_with_a_symmetric_epilogue_computes_one_triangle():
    w = _w("g[p,q] += x[k,p] * x[k,q]\nh[p,q] = g[p,q] + b[q]", ["h"])
    assert symmetric_kernel(w, KernelParts("g"))
    assert not symmetric_kernel(w, kernel_parts(w, {("g", "h")}, "h"))   # an epilogue
    for body, symmetric in (("g[p,q] * b[p] * b[q]", True),             # a cosine's scale
                            ("b[q] * (g[q,p] + 1.0) * b[p]", True),      # read transposed
                            ("max(b[p], b[q]) - g[p,q]", True),
                            ("g[p,q] * b[p] - b[q]", False),
                            ("g[p,q] / b[q]", False),
                            ("where(p <= q, g[p,q], 0.0)", False)):      # a mask on indices
        wb = _w(f"g[p,q] += x[k,p] * x[k,q]\nh[p,q] = {body}", ["h"])
        assert symmetric_kernel(wb, kernel_parts(wb, {("g", "h")}, "h")) == symmetric, body
    shallow = _w("g[p,q] += t[k,p] * t[k,q]", ["g"])
    assert DIMS["T"] < SYM_MIN_K and not symmetric_kernel(shallow, KernelParts("g"))


def test_the_share_of_tiles_computed():
    assert computed_share(8, 8, 8) == 1.0           # one tile: the diagonal's
    assert computed_share(16, 8, 8) == 0.75         # three of four
    assert 0.5 < computed_share(2048, 6, 64) < 0.52
    assert computed_share(0, 6, 64) == 1.0


def _kernel_plan(anchor: str, size: int):
    from search_spaces.candidate import Candidate
    k = {"kc": 256, "mc": 96, "mr": 6, "nc": 4096, "nr": 64, "outer": "b", "pack_a": True,
         "pack_b": True, "split": "m", "stream": False, "vec_bytes": 64}
    return Candidate.from_dict({"fused": [], "layouts": {}, "name": "", "schedules": [
        {"anchor": anchor, "impl": "kernel", "tiles": [size, size], "kernel": k}]})


def test_the_model_prices_the_tiles_a_symmetric_product_computes():
    # x^T x against x^T y of the same shapes: the arithmetic of the tiles on and above the
    # diagonal, plus the copy of the triangle (costmodel.kernel_cost.kernel_group)
    import costmodel
    DIMS.update(K=2048, P=1024)
    try:
        sym = _w("g[p,q] += x[k,p] * x[k,q]", ["g"])
        two = _w("g[p,q] += x[k,p] * y[k,q]", ["g"])
    finally:
        DIMS.update(K=128, P=32)
    dev = costmodel.preset("cpu")
    t_sym = costmodel.estimate(sym, _kernel_plan("g", 1024), dev).total_s
    t_two = costmodel.estimate(two, _kernel_plan("g", 1024), dev).total_s
    assert 0.5 < t_sym / t_two < 0.7
