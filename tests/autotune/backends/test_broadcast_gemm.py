"""A library contraction whose output puts an index of one operand outside the other's (a
channel mix in channels-first order, ``y[n,o,p] += w[o,c] * x[n,c,p]``) runs batched over that
index with the other operand broadcast, writing the output in place: the form
(search_spaces.gemm.broadcast_form), the CPU executor's product against the float64 reference,
and the model's price (no staged copy on the CPU; the GPU, which stages it, keeps the copy)."""
from __future__ import annotations

import pytest

from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.backends.factory import backend_kind
from autotune.reference import reference
from costmodel import estimate, preset
from search_spaces import parse_workload
from search_spaces.candidate import IMPL_LIBRARY
from search_spaces.gemm import broadcast_form, gemm_form
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

# n outside o in y: batch n, w broadcast ("a"); and m1 outside n in z: batch m1, B broadcast
BLOCKS = {
    "mix": ("y", """
y[n,o,p] += w[o,c] * x[n,c,p]
""", "[dims]\nN = 3\nO = 24\nC = 16\nP = 40\n[inputs]\nw = [\"O\", \"C\"]\nx = [\"N\", \"C\", \"P\"]\n"),
    "rows": ("z", """
z[i,n,j] += a[i,j,k] * b[k,n] * 0.5
""", "[dims]\nI = 4\nN = 20\nJ = 12\nK = 9\n[inputs]\na = [\"I\", \"J\", \"K\"]\nb = [\"K\", \"N\"]\n"),
}


def block(name: str):
    out, program, rest = BLOCKS[name]
    text = f'name = "{name}"\noutputs = ["{out}"]\nprogram = """{program}"""\n' + rest
    return parse_workload(text, f"{name}.toml"), out


def identity(w):
    return lambda t: tuple(range(len(w.shapes[t])))


@pytest.mark.parametrize("name, batch, side", [("mix", ("d0",), "a"), ("rows", ("d0",), "b")])
def test_the_outer_index_becomes_a_broadcast_batch(name, batch, side):
    w, out = block(name)
    op = w.op(out)
    form, bcast = broadcast_form(gemm_form(op), op, w.shapes, identity(w))
    assert form.batch == batch and bcast == side
    assert gemm_form(op).batch == ()


def test_no_split_where_the_plain_form_writes_in_place():
    text = ('name = "plain"\noutputs = ["y"]\nprogram = """\ny[o,n,p] += w[o,c] * x[n,c,p]\n"""\n'
            + BLOCKS["mix"][2])
    w = parse_workload(text, "plain.toml")
    # y[o, (n, p)]: a matrix view already; x needs a layout, which the form does not decide
    assert broadcast_form(gemm_form(w.op("y")), w.op("y"), w.shapes, identity(w)) is None


@pytest.mark.parametrize("name", list(BLOCKS))
def test_the_cpu_product_matches_the_reference(name, tmp_path):
    w, out = block(name)
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    assert cand.schedule(out).impl == IMPL_LIBRARY
    plan = make_executable(w, cand, "cpu", tmp_path)
    for seed in (1, 2):
        inputs = w.random_inputs(seed)
        err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
        assert not why and err < 1e-6, why


def test_the_model_prices_no_copy_on_the_cpu_and_the_copy_on_a_gpu():
    w, out = block("mix")
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    cpu = next(g for g in estimate(w, cand, preset("cpu")).groups if g.anchor == out)
    gpu = next(g for g in estimate(w, cand, preset("h200")).groups if g.anchor == out)
    assert cpu.bytes == cpu.unique_bytes                  # nothing staged
    assert gpu.bytes > gpu.unique_bytes                   # the result copied out of [o, n, p]
