"""Candidates with inlined intermediates run: on the CPU backend and under the CUDA host
emulator, random candidates of a block with inlinable ops, every run checked against the
float64 reference of the original workload (tests.autotune.backends.test_orders_exec.check)."""
from __future__ import annotations

from autotune.api import make_executable
from search_spaces import parse_workload
from search_spaces.space import SearchSpace, TileBounds
from tests.autotune.backends.test_orders_exec import candidates, check
from tests.search_spaces.test_inline import PROGRAM


def block():
    return parse_workload(PROGRAM, "block.toml")


def inlined(w, n: int, seed: int, bounds: TileBounds = TileBounds()):
    cands = candidates(w, n, seed, bounds)
    assert any(c.inlined for c in cands) and any(not c.inlined for c in cands)
    return cands


def test_random_inlined_candidates_run_on_the_cpu(tmp_path):
    w = block()
    assert SearchSpace(w).inline_options == ("y", "d")
    check(w, lambda c: make_executable(w, c, "cpu", tmp_path), inlined(w, 12, 5))


def test_inlined_candidates_under_the_emulator(emulator, tmp_path):  # noqa: F811
    from autotune.backends.cuda.executor import CudaPlan
    w = block()
    check(w, lambda c: CudaPlan(w, c, tmp_path, runtime=emulator),
          inlined(w, 6, 6, TileBounds(1, 1024)), seed=1)
