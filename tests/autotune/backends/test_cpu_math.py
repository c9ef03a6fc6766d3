"""How the CPU code generator spells its functions: exp through a floor on its argument (glibc's
vector exp takes a slow path for a whole vector when one lane underflows, as masked scores do),
max, min and relu as comparisons (GCC calls libm's fmaxf per element under
-fno-finite-math-only); and that the results still match the float64 reference."""
from __future__ import annotations

import re

import numpy as np
import pytest

from search_spaces import parse_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.backends.cpu.codegen import EXP_BOUNDS, generate
from autotune.backends.factory import backend_kind
from autotune.reference import reference

PROGRAM = """
p[i,j]  = exp(where(j <= i, x[i,j], -1000000000.0))
g[i,j]  = sigmoid(x[i,j]) + relu(x[i,j])
h[i,j]  = max(x[i,j], p[i,j]) - min(x[i,j], g[i,j])
"""


def _workload():
    text = ('name = "math"\noutputs = ["p", "h"]\nprogram = """' + PROGRAM + '"""\n'
            '[dims]\nI = 37\nJ = 29\n[inputs]\nx = ["I", "J"]\n')
    return parse_workload(text, "math.toml")


def test_exp_goes_through_its_floor_and_max_min_relu_are_comparisons():
    w = _workload()
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    src, _ = generate(w, named_plan(space, "unfused"))
    body = src.split("#define AT_EXP(x)")[1]          # the groups, past the prelude
    assert "AT_EXPf(" in body
    assert not re.search(r"\bexpf\(", body)            # every exp is bounded
    assert not re.search(r"\bfm(ax|in)f\(", body)      # no libm call per element


def test_results_match_the_reference_and_masked_exps_are_negligible(tmp_path):
    w = _workload()
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    inputs = w.random_inputs(0)
    ref = reference(w, inputs)
    for name in ("unfused", "heuristic"):
        outs = make_executable(w, named_plan(space, name), "cpu", tmp_path)(**inputs)
        err, why = verify(outs, ref, w.rtol)
        assert not why, (name, why)
        p = outs["p"]
        masked = np.triu(np.ones(p.shape, bool), 1)            # j > i: exp(-1e9)
        floor = np.exp(np.float32(EXP_BOUNDS["float32"]))
        assert np.all(p[masked] >= 0) and np.all(p[masked] <= floor * 1.001)
        assert np.allclose(p[~masked], np.exp(inputs["x"].astype(np.float64))[~masked],
                           rtol=1e-5)


def test_calls_end_in_an_overlapped_vector_at_every_row_width(tmp_path):
    # rows of 29 (and tiles of 29, 8, 5, 3 along them: remainders of 5, 0, 5 and widths under
    # one vector, which keep the scalar loop): the last vector of a row overlaps the ones
    # before it and recomputes some elements, which must come out the same
    from dataclasses import replace

    from search_spaces.candidate import GroupSchedule
    w = _workload()
    base = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    inputs = w.random_inputs(3)
    ref = reference(w, inputs)
    for tile in (29, 8, 5, 3):
        cand = replace(base, schedules=tuple(GroupSchedule(s.anchor, (7, tile), s.impl)
                                             for s in base.schedules), name=f"t{tile}")
        src, _ = generate(w, cand)
        group_p = src.split("/* p[d0,d1]")[1].split("/*")[0]
        assert "_hi - 8 + _k" in group_p and "AT_EXPf" in group_p
        err, why = verify(make_executable(w, cand, "cpu", tmp_path)(**inputs), ref, w.rtol)
        assert not why, (tile, why)
        assert err < 1e-6, (tile, err)


def test_a_max_over_an_outer_index_is_a_select_not_a_conditional_store(tmp_path):
    # mp's inner loop runs over c, the reduced k outside it: each step updates a row of mp.
    # A conditional store (`if (_v > t) t = _v;`) vectorised as a masked store, microcoded on
    # AMD's Zen; the select stores unconditionally.  NaN in x is passed over as before (a
    # comparison with NaN is false either way): the max of the other elements.
    text = ('name = "mp"\noutputs = ["mp"]\nprogram = """\nmp[n,c] max= abs(x[n,k,c])\n"""\n'
            '[dims]\nN = 13\nK = 9\nC = 21\n[inputs]\nx = ["N", "K", "C"]\n')
    w = parse_workload(text, "mp.toml")
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    src, _ = generate(w, cand)
    group = src.split("/* mp[d0,d1] max=")[1]
    assert "_v > _o ? _v : _o" in group and "if (_v >" not in group
    inputs = w.random_inputs(5)
    plan = make_executable(w, cand, "cpu", tmp_path)
    err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
    assert not why and err < 1e-6, why
    x = inputs["x"].copy()
    x[3, 0, 4] = np.nan
    assert plan(x=x)["mp"][3, 4] == np.abs(x[3, 1:, 4]).max()


@pytest.mark.parametrize("dtype, call", [("float32", "AT_TANHf("), ("float64", "AT_TANH(")])
def test_tanh_rows_end_in_an_overlapped_vector_too(tmp_path, dtype, call):
    # float32's tanh is an inlined rational (AT_TANHf), float64's libm's: rows of 53 ended in
    # a scalar remainder of 5 once AT_TANHf replaced tanhf (its spelling no longer matched the
    # list of calls that take the overlapped end): a tanh over 997 x 53 ran 31.8 us a call on
    # 2 cores, 25.0 us overlapped
    text = (f'name = "th"\ndtype = "{dtype}"\noutputs = ["h"]\nprogram = """\n'
            'h[t,c] = tanh(x[t,c] * 2.0)\n"""\n[dims]\nT = 37\nC = 53\n[inputs]\n'
            'x = ["T", "C"]\n')
    w = parse_workload(text, "th.toml")
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    src, _ = generate(w, cand)
    vw = 8 if dtype == "float32" else 4
    group = src.split("/* h[d0,d1]")[1]
    assert call in group and f"_hi - {vw} + _k" in group
    inputs = w.random_inputs(2)
    err, why = verify(make_executable(w, cand, "cpu", tmp_path)(**inputs),
                      reference(w, inputs), w.rtol)
    assert not why and err < 1e-6, why


def test_a_sigmoid_nested_in_a_tanh_vectorises(tmp_path):
    """A fused group whose expression nests one statement expression in another (the gated
    update of a GRU step: tanh of a sum holding a sigmoid, z, r and n fused into hn): GCC
    reported "control flow in loop" and ran it scalar while the exp's floor was read from the
    weak global (2.07 ms against 0.36 ms for the loops apart); its loop must be vectorised,
    and its results still match the reference."""
    import subprocess

    from autotune.backends.cpu.compiler import CFLAGS, _libmvec_flags
    text = ('name = "gru"\noutputs = ["hn"]\nprogram = """\n'
            "z[b,k] = sigmoid(xz[b,k] + bz[k])\n"
            "r[b,k] = sigmoid(xr[b,k] + br[k])\n"
            "n[b,k] = tanh(xh[b,k] + r[b,k] * hh[b,k])\n"
            'hn[b,k] = (1.0 - z[b,k]) * n[b,k] + z[b,k] * h[b,k]\n"""\n'
            '[dims]\nB = 16\nK = 64\n[inputs]\nxz = ["B", "K"]\nxr = ["B", "K"]\n'
            'xh = ["B", "K"]\nhh = ["B", "K"]\nh = ["B", "K"]\nbz = ["K"]\nbr = ["K"]\n')
    w = parse_workload(text, "gru.toml")
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "heuristic")
    assert len(cand.schedules) == 1                          # one group: z, r, n fused
    src, _ = generate(w, cand)
    path = tmp_path / "gru.c"
    path.write_text(src)
    flags = [f for f in CFLAGS + _libmvec_flags() if f != "-lmvec"]
    report = subprocess.run(["cc", *flags, "-c", str(path), "-o", str(tmp_path / "gru.o"),
                             "-fopt-info-vec-all"], capture_output=True, text=True, check=True)
    lines = src.splitlines()
    nested = [k + 1 for k, line in enumerate(lines)
              if "AT_TANHf" in line and "AT_EXPf" in line and "#pragma" not in line
              and line.lstrip().startswith("for (long v_") and "_lo; " in line]
    assert nested, "no loop holds the nested expression"
    for k in nested:
        assert re.search(rf"gru\.c:{k}:\d+: optimized: loop vectorized", report.stderr), \
            [x for x in report.stderr.splitlines() if f"gru.c:{k}:" in x][:3]
    inputs = w.random_inputs(2)
    err, why = verify(make_executable(w, cand, "cpu", tmp_path)(**inputs),
                      reference(w, inputs), w.rtol)
    assert not why, why
