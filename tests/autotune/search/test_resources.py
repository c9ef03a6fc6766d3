"""Resource limits: the predicted memory of a candidate (costmodel.model.memory_bytes), the
search refusing one that does not fit without running it, and a worker that runs out of memory
(MemoryError, or SIGKILL from the OOM killer) failing only that candidate."""
from __future__ import annotations

import dataclasses
import math
import signal

import pytest

import autotune.backends.cpu.kind
from autotune.api import run_search
from autotune.backends.cpu.kind import host_memory_available
from autotune.backends.factory import backend_kind
from autotune.backends.base import MeasureSettings
from autotune.search.config import SearchConfig
from autotune.search.state import memory_error
from autotune.backends.worker import WorkerHandle, WorkerSpec, crash_message
from costmodel.model import memory_bytes
from db.store import PlanDB
from search_spaces import load_workload, parse_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


QUICK = MeasureSettings(warmup=0, repeats=1)
DIMS = {"N": 16, "C": 8}

SMALL = '''name = "mem"
outputs = ["y"]
program = """
t[i,k] = x[i,k] * 2
y[i] += t[i,k]
"""
[dims]
N = 64
K = 32
[inputs]
x = ["N", "K"]
'''


# ---- the prediction ------------------------------------------------------------------------

def test_memory_bytes_counts_tensors_and_per_thread_tile_buffers():
    w = parse_workload(SMALL)
    sched = [GroupSchedule("t", (8, 32)), GroupSchedule("y", (8,))]
    unfused = make_candidate([], {}, sched)
    # x, t and y, whole, 4 bytes each; no tile buffers
    assert memory_bytes(w, unfused, threads=2) == (64 * 32 * 2 + 64) * 4
    fused = make_candidate(["t->y"], {}, [GroupSchedule("y", (8,))])
    # t lives only in y's tiles: 8 rows x all 32 k, one buffer per thread
    base = (64 * 32 + 64) * 4
    assert memory_bytes(w, fused, threads=0) == base
    assert memory_bytes(w, fused, threads=1) == base + 8 * 32 * 4
    assert memory_bytes(w, fused, threads=16) == base + 16 * 8 * 32 * 4


def test_memory_bytes_of_the_triangle_update():
    w = load_workload("trimul_outgoing", {"N": 64, "C": 16})
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    inputs = sum(math.prod(s) for _, s in w.inputs) * 4
    every = sum(math.prod(s) for s in w.shapes.values()) * 4
    for name in ("unfused", "heuristic", "greedy"):
        cand = named_plan(space, name)
        need = memory_bytes(w, cand, threads=2)
        assert inputs < need, name
        if name == "unfused":   # everything materialized, plus at most GEMM layout copies
            assert every <= need <= 2 * every
    # at N=702 (the full size) the unfused plan holds ~20 tensors of 252 MB each
    big = load_workload("trimul_outgoing")
    need = memory_bytes(big, named_plan(SearchSpace(big, backend_kind("cpu").tile_bounds), "unfused"), 2)
    assert 4e9 < need < 12e9


def test_available_memory_is_read():
    avail = host_memory_available()
    assert avail is not None and 1 << 26 < avail < 1 << 50
    assert backend_kind("cpu").memory_probe() is host_memory_available
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert backend_kind("cuda").memory_probe()() is None      # no GPU here: no check, not a crash


def test_memory_error_text():
    assert memory_error(int(12.5e9), int(3.2e9)) == \
        "needs 12.5 GB, 3.2 GB available (predicted memory: not run)"


# ---- the search refuses what does not fit -------------------------------------------------

def test_search_with_nothing_fitting_runs_nothing(tmp_path, monkeypatch):
    w = load_workload("trimul_outgoing", DIMS)
    monkeypatch.setattr(autotune.backends.cpu.kind, "host_memory_available", lambda: 1000)
    db = tmp_path / "p.sqlite"
    result = run_search(w, "cpu", db=db, settings=QUICK,
                        config=SearchConfig(budget=4, model_pool=20, model_seeds=2))
    assert result.progress.failed == 4 and result.best is None
    with PlanDB(db) as pdb:
        rows = pdb.trials(result.key.key)
    assert all(r.status == "failed" and ("GB available" in r.error or
                                         r.error == "same candidate as an earlier trial")
               for r in rows)
    assert not (tmp_path / "refs").exists()           # the worker never even started
    assert not list(tmp_path.glob("kernels/*.so"))    # nor compiled anything


# ---- a worker out of memory --------------------------------------------------------------

@pytest.fixture
def hostile(tmp_path):
    w = load_workload("trimul_outgoing", DIMS)
    h = WorkerHandle(WorkerSpec("trimul_outgoing", w.dims, 3, str(tmp_path), "cpu"),
                     "tests.support.hostile_plans:HostilePlan", start_timeout_s=120)
    yield w, named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "heuristic"), h
    h.close()


def test_memory_error_in_the_worker_fails_cleanly(hostile):
    w, plan, h = hostile
    ok = dataclasses.replace(plan, name="ok")
    assert h.measure(ok, QUICK, 120, None).status == "ok"
    pid = h.proc.pid
    m = h.measure(dataclasses.replace(plan, name="hog"), QUICK, 120, None)
    assert m.status == "failed" and m.median_s is None
    assert m.error == "out of memory while running the candidate (MemoryError)"
    assert h.proc.pid == pid and h.proc.is_alive()      # the same worker goes on
    assert h.measure(ok, QUICK, 120, None).status == "ok"


def test_worker_killed_like_the_oom_killer_does(hostile):
    w, plan, h = hostile
    ok = dataclasses.replace(plan, name="ok")
    m = h.measure(dataclasses.replace(plan, name="oom-killed"), QUICK, 120, None)
    assert m.status == "failed"
    assert m.error == crash_message(-signal.SIGKILL)
    assert "out-of-memory killer" in m.error and "exit code -9" in m.error
    assert h.measure(ok, QUICK, 120, None).status == "ok"   # a fresh worker


def test_crash_message():
    assert crash_message(3) == "worker crashed (exit code 3)"
    assert crash_message(None) == "worker crashed (exit code None)"
