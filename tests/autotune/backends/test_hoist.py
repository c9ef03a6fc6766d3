"""Transcendentals that do not vary along a loop group's innermost loop are computed once before
it (autotune.backends.cpu.hoist): which subexpressions move, the C that results, and random
candidates of a block with such expressions (an inlined one and a where() on the innermost
index among them) checked against the float64 reference."""
from __future__ import annotations

import re

from autotune.api import make_executable
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.hoist import invariant_calls
from search_spaces import parse_workload
from search_spaces.candidate import Candidate
from search_spaces.ir import Access, Binary, Call
from tests.autotune.backends.test_orders_exec import candidates, check

# both blocks' extents and input
DIMS = """
[dims]
B = 3
C = 20
P = 37
[inputs]
x = ["B", "C", "P"]
"""

BLOCK = """
name = "gates"
dtype = "float32"
outputs = ["y", "z"]
program = \"\"\"
s[b,c] += x[b,c,p] / P
g[b,c] = sigmoid(s[b,c])
y[b,c,p] = x[b,c,p] * g[b,c] + exp(x[b,c,p]) * tanh(s[b,c] * 0.5)
z[b,c,p] = where(p < 3, exp(s[b,c]), x[b,c,p] * exp(s[b,c] - 1))
\"\"\"
""" + DIMS


def block():
    return parse_workload(BLOCK, "gates.toml")


def test_the_largest_invariant_calls_move_and_nothing_that_varies():
    w = block()
    y = w.op("y").expr
    b, c, p = w.op("y").domain          # the IR's index names (d0, d1, d2)
    stored = lambda t: None           # noqa: E731  (no tensor inlined)
    half = y.b.b.args[0].b             # the constant 0.5
    assert invariant_calls(y, p, stored) == [
        Call("tanh", (Binary("*", Access("s", (b, c)), half),))]
    # g inlined: its sigmoid is reached through the read of g
    inlined = lambda t: w.op("g").expr if t == "g" else None    # noqa: E731
    assert invariant_calls(y, p, inlined)[0] == Access("g", (b, c))
    assert len(invariant_calls(y, p, inlined)) == 2
    # along c everything varies; a where() on p keeps its own branches' invariant calls only
    assert invariant_calls(y, c, inlined) == []
    z = w.op("z").expr
    assert [e.fn for e in invariant_calls(z, p, stored)] == ["exp", "exp"]
    assert invariant_calls(z, c, stored) == []


def test_the_generated_loop_computes_them_once_per_row(tmp_path):
    w = block()
    cand = Candidate.from_dict({"fused": [], "layouts": {}, "name": "", "schedules": [
        {"anchor": a, "impl": "loop", "tiles": t} for a, t in
        (("s", [3, 20]), ("g", [3, 20]), ("y", [1, 4, 37]), ("z", [1, 4, 37]))]})
    src = generate(w, cand)[0]
    body = src[src.index("/* y[d0,d1,d2]"):]
    decl = re.search(r"const float _h0 = ([^;]*);", body)
    assert decl and "AT_TANHf" in decl.group(1) and "G_x" not in decl.group(1)
    loop = body[body.index("#pragma omp simd"):body.index("\n", body.index("for (long v_d2"))]
    assert "AT_TANHf" not in loop and "_h0" in loop and "AT_EXPf(G_x" in loop
    check(w, lambda c: make_executable(w, c, "cpu", tmp_path), [cand])


def test_random_candidates_with_invariant_calls_run_on_the_cpu(tmp_path):
    w = block()
    check(w, lambda c: make_executable(w, c, "cpu", tmp_path), candidates(w, 12, 3))


NORMS = """
name = "norms"
dtype = "float32"
outputs = ["n", "r", "q"]
program = \"\"\"
s[b,c] += x[b,c,p] * x[b,c,p] / P
n[b,c,p] = x[b,c,p] * rsqrt(s[b,c] + 0.5)
r[b,c] += x[b,c,p] * exp(s[b,c] * 0.1)
q[b,p] max= x[b,c,p] * sqrt(s[b,c] + 1)
\"\"\"
""" + DIMS


def _member_code(src: str, statement: str) -> str:
    start = src.index(f"/* {statement}")
    ends = [e for e in (src.find("/*", start + 2), src.find("\nvoid ", start)) if e > 0]
    return src[start:min(ends, default=len(src))]


def test_every_kind_of_loop_computes_its_invariant_calls_once_before_the_innermost(tmp_path):
    # a layer norm's rsqrt (an assignment with no libm call), a sum over the innermost index
    # and a max over an outer one: each declares the call before its innermost loop
    w = parse_workload(NORMS, "norms.toml")
    cand = Candidate.from_dict({"fused": [], "layouts": {}, "name": "", "schedules": [
        {"anchor": a, "impl": "loop", "tiles": t} for a, t in
        (("s", [3, 20]), ("n", [1, 4, 37]), ("r", [3, 20]), ("q", [1, 37]))]})
    src = generate(w, cand)[0]
    for stmt, call in (("n[", "sqrtf("), ("r[", "AT_EXPf("), ("q[", "sqrtf(")):
        code = _member_code(src, stmt)
        decl = re.search(r"const float _h0 = ([^;]*);", code)
        assert decl and call in decl.group(1), (stmt, code)
        loop = code[code.rindex("for (long"):]        # the innermost loop and its body
        assert call not in loop and "_h0" in loop, (stmt, code)
    check(w, lambda c: make_executable(w, c, "cpu", tmp_path), [cand])
    check(w, lambda c: make_executable(w, c, "cpu", tmp_path), candidates(w, 8, 5))
