"""Dims read off a caller's shapes, the workload at other dims and the ``parameters`` key:
every misfit one line naming the input."""
from __future__ import annotations

import pytest

from autotune.interop.dims import ShapeError, at_dims, dims_of, output_axes, witnesses
from search_spaces import WorkloadError, builtin_names, load_workload, parse_workload

TINY = """
name = "mm"
outputs = ["y"]
parameters = ["w"]
program = "y[t,f] += x[t,c] * w[c,f]"
[dims]
T = 4
C = 3
F = 5
[inputs]
x = ["T", "C"]
w = ["C", "F"]
"""


def shapes(w, **over):
    return {**{n: s for n, s in w.inputs}, **over}


def test_dims_of_reads_every_named_axis(small):
    w = small("trimul_outgoing")
    assert dims_of(w, shapes(w)) == {"N": 16, "C": 8}
    assert dims_of(w, shapes(w, x=(12, 12, 8), mask=(12, 12))) == {"N": 12, "C": 8}


@pytest.mark.parametrize("over,needle", [
    ({"x": (12, 11, 8)}, "axis 1 gives N=11 but axis 0 of input 'x' gave N=12"),
    ({"mask": (16, 16, 1)}, "'mask' has 3 dimension(s) (16, 16, 1), expected 2: [N, N]"),
    ({"w_a": (8, 4)}, "'w_a' has shape (8, 4): its axis 1 gives C=4 but axis 2 of input 'x'"),
])
def test_misfits_are_one_line_naming_the_input(small, over, needle):
    w = small("trimul_outgoing")
    with pytest.raises(ShapeError) as e:
        dims_of(w, shapes(w, **over))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_missing_and_unknown_inputs(small):
    w = small("gated_mlp")
    s = shapes(w)
    del s["x"]
    with pytest.raises(ShapeError, match=r"gated_mlp: missing input\(s\) x \(it takes x, "):
        dims_of(w, s)
    with pytest.raises(ShapeError, match=r"unknown input\(s\) y"):
        dims_of(w, {**shapes(w), "y": (1,)})


def test_literal_extents_must_match():
    w = parse_workload(TINY.replace('w = ["C", "F"]', 'w = [3, "F"]'), "<t>")
    assert dims_of(w, {"x": (4, 3), "w": (3, 7)}) == {"T": 4, "C": 3, "F": 7}
    with pytest.raises(ShapeError, match=r"its axis 0 is declared 3: \[3, F\]"):
        dims_of(w, {"x": (4, 3), "w": (2, 7)})


def test_at_dims_reloads_the_source_and_refuses_text(small, tmp_path):
    w = small("trimul_outgoing")
    assert at_dims(w, w.dim_dict) is w
    w12 = at_dims(w, {"N": 12, "C": 8})
    assert w12.hash == load_workload("trimul_outgoing", {"N": 12, "C": 8}).hash
    with pytest.raises(ShapeError, match="not loaded from a file"):
        at_dims(parse_workload(TINY, "<t>"), {"T": 8, "C": 3, "F": 5})
    path = tmp_path / "mm.toml"
    path.write_text(TINY)
    mm = load_workload(str(path))
    assert at_dims(mm, {"T": 8, "C": 3, "F": 5}).shapes["y"] == (8, 5)
    path.write_text(TINY.replace("x[t,c] * w[c,f]", "x[t,c] * w[c,f] * 2"))
    with pytest.raises(ShapeError, match="changed since mm was loaded"):
        at_dims(mm, {"T": 16, "C": 3, "F": 5})


def test_output_axes_follow_index_names(small):
    w = small("trimul_incoming")
    assert output_axes(w) == {"out": ("N", "N", "C")}
    assert witnesses(w)["N"] == ("x", 0) and witnesses(w)["C"] == ("x", 2)
    mm = parse_workload(TINY, "<t>")
    assert output_axes(mm) == {"y": ("T", "F")} and witnesses(mm)["F"] == ("w", 1)


# ---- the parameters key ------------------------------------------------------------------------
def test_parameters_key_and_activations():
    w = parse_workload(TINY, "<t>")
    assert w.params == ("w",) and w.activations == ("x",)
    no_params = parse_workload(TINY.replace('parameters = ["w"]\n', ""), "<t>")
    assert no_params.params == () and no_params.hash == w.hash   # not hashed


@pytest.mark.parametrize("value,needle", [
    ('["v"]', "'parameters' names 'v', which is not an input (inputs: x, w)"),
    ('["w", "w"]', "'parameters' lists an input twice"),
    ('"w"', "'parameters' must be a list of input names"),
    ('["w", "x"]', "'parameters' names every input"),
])
def test_bad_parameters_are_one_located_error(value, needle):
    with pytest.raises(WorkloadError) as e:
        parse_workload(TINY.replace('parameters = ["w"]', f"parameters = {value}"), "t.toml")
    assert needle in str(e.value) and str(e.value).startswith("t.toml:4:")


def test_every_builtin_declares_its_weights_and_keeps_its_hash():
    for name in builtin_names():
        w = load_workload(name)
        assert w.params and w.activations, name
        assert set(w.activations) <= {"x", "mask", "m", "z", "msa"}, name

