"""Plans whose generated kernel computes one triangle of a symmetric product (search_spaces.
symmetry) against the float64 reference: bare, under a symmetric epilogue, batched, and in a
channel-first result layout; and the kernel that runs them does skip the lower tiles."""
from __future__ import annotations

import pytest

from search_spaces.candidate import Candidate
from search_spaces.loader import parse_workload
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.backends.cpu.gemm_call import kernel_spec
from autotune.reference import reference

COSINE = """
name = "cos"
dtype = "{dtype}"
outputs = ["sim"]
program = \"\"\"
n[i] += x[i,d] * x[i,d]
g[i,j] += x[i,d] * x[j,d]
sim[i,j] = g[i,j] * rsqrt(n[i] + 1e-6) * rsqrt(n[j] + 1e-6)
\"\"\"
[dims]
I = 70
D = 130
[inputs]
x = ["I", "D"]
"""

BATCHED = """
name = "bgram"
dtype = "float32"
outputs = ["g"]
program = "g[b,p,q] += z[b,k,p] * z[b,k,q] / K"
[dims]
B = 3
K = 130
P = 37
[inputs]
z = ["B", "K", "P"]
"""

KERNEL = {"kc": 32, "mc": 12, "mr": 6, "nc": 32, "nr": 16, "outer": "b", "pack_a": True,
          "pack_b": True, "split": "m", "stream": False, "vec_bytes": 32}


def _plan(schedules, fused=(), layouts=None):
    return Candidate.from_dict({"fused": list(fused), "layouts": layouts or {}, "name": "",
                                "schedules": schedules})


CASES = {
    "epilogue": (COSINE.format(dtype="float32"), _plan(
        [{"anchor": "n", "impl": "loop", "tiles": [70]},
         {"anchor": "sim", "impl": "kernel", "tiles": [70, 70], "kernel": KERNEL}],
        fused=["g->sim"]), "sim"),
    "bare, float64": (COSINE.format(dtype="float64"), _plan(
        [{"anchor": "n", "impl": "loop", "tiles": [70]},
         {"anchor": "g", "impl": "kernel", "tiles": [70, 70], "kernel": KERNEL},
         {"anchor": "sim", "impl": "loop", "tiles": [8, 70]}]), "g"),
    "channel-first result": (COSINE.format(dtype="float32"), _plan(
        [{"anchor": "n", "impl": "loop", "tiles": [70]},
         {"anchor": "g", "impl": "kernel", "tiles": [70, 70], "kernel": KERNEL},
         {"anchor": "sim", "impl": "loop", "tiles": [8, 70]}], layouts={"g": [1, 0]}), "g"),
    "batched": (BATCHED, _plan(
        [{"anchor": "g", "impl": "kernel", "tiles": [3, 37, 37], "kernel": KERNEL}]), "g"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_symmetric_plans_compute_the_reference(case, tmp_path):
    text, cand, anchor = CASES[case]
    w = parse_workload(text, "sym.toml")
    assert kernel_spec(w, cand, anchor).sym      # the kernel that runs computes one triangle
    plan = make_executable(w, cand, "cpu", tmp_path)
    for seed in (1, 2):
        inputs = w.random_inputs(seed=seed)
        err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
        assert why == "", (case, why)
