"""A measuring worker never outlives its search: killed with SIGKILL in the middle of a long
candidate, the search leaves no worker behind; and the worker stops itself at the request's
run timeout, even inside a compiled call that holds the GIL (tests.support.slow_plans)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.backends import worker
from autotune.backends.base import MeasureSettings
from autotune.backends.worker import WorkerHandle, WorkerSpec
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds
from tests.support import ROOT
from tests.support.slow_plans import running_markers

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads processes from /proc (Linux)")

DIMS = {"N": 8, "C": 4}

# A search process reduced to what matters: it starts a worker and waits for one measurement.
SEARCH = textwrap.dedent("""
    import sys
    from autotune.backends.base import MeasureSettings
    from autotune.backends.worker import WorkerHandle, WorkerSpec
    from search_spaces import load_workload
    from search_spaces.plans import named_plan
    from search_spaces.space import SearchSpace, TileBounds
    w = load_workload("trimul_outgoing", {dims!r})
    h = WorkerHandle(WorkerSpec("trimul_outgoing", w.dims, 0, sys.argv[1], "cpu"),
                     "tests.support.slow_plans:SlowPlan")
    cand = named_plan(SearchSpace(w, TileBounds(1, 256)), "heuristic")
    print(h.measure(cand, MeasureSettings(), 600, None))
""").format(dims=DIMS)


def status(pid: int) -> dict[str, str] | None:
    """/proc/PID/status as a dict; None once the process is gone (a zombie counts as gone:
    it runs nothing, and whoever adopted it reaps it)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    d = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    return None if d.get("State", "").startswith(("Z", "X")) else d


def children(pid: int) -> set[int]:
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and (s := status(int(p.name))) and s.get("PPid") == str(pid):
            out.add(int(p.name))
    return out


def wait_for(pred, timeout_s: float, step: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (got := pred()):
            return got
        time.sleep(step)
    return pred()


def test_search_killed_mid_candidate_leaves_no_worker(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    search = subprocess.Popen([sys.executable, "-c", SEARCH, str(tmp_path)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kernels = tmp_path / "kernels"
    leftover: set[int] = set()
    try:
        markers = wait_for(lambda: running_markers(kernels) or search.poll() is not None, 120)
        assert search.poll() is None, search.communicate()
        assert markers, "the worker never started its candidate"
        pid = int(markers[0].read_text())
        assert status(pid)["PPid"] == str(search.pid)     # the search's worker, mid-candidate
        before = children(search.pid)
        assert pid in before
        time.sleep(0.5)                                    # well inside the 1000 s candidate
        search.kill()
        search.wait(10)
        t0 = time.monotonic()
        wait_for(lambda: not any(status(p) for p in before), 1.0)
        leftover = {p for p in before if status(p)}
        gone_after = time.monotonic() - t0
        assert not leftover, (f"still running {gone_after:.1f} s after the search was killed: "
                              + ", ".join(f"pid {p} ({status(p)['State']}, parent {status(p)['PPid']})"
                                         for p in leftover))
    finally:
        if search.poll() is None:
            search.kill()
            search.wait()
        for p in leftover:                                 # never leave an orphan behind
            os.kill(p, signal.SIGKILL)


def test_worker_stops_itself_inside_a_gil_holding_call():
    code = ("from autotune.backends.worker import arm_run_timeout; import ctypes; "
            "arm_run_timeout(0.5); ctypes.PyDLL(None).sleep(60)")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGALRM, r.stderr
    assert time.monotonic() - t0 < 30


def test_measure_request_carries_the_timeout_the_worker_enforces(tmp_path, monkeypatch):
    """With the parent's own backstop pushed far out, a hung candidate still ends at the
    request's timeout: the worker stopped itself."""
    monkeypatch.setattr(worker, "PARENT_GRACE_S", 300.0)
    w = load_workload("trimul_outgoing", DIMS)
    h = WorkerHandle(WorkerSpec("trimul_outgoing", w.dims, 0, str(tmp_path), "cpu"),
                     "tests.support.slow_plans:SlowPlan", start_timeout_s=120)
    cand = named_plan(SearchSpace(w, TileBounds(1, 256)), "heuristic")
    try:
        assert h._start() is None
        t0 = time.monotonic()
        m = h.measure(cand, MeasureSettings(), timeout_s=2, best_s=None)
        waited = time.monotonic() - t0
    finally:
        h.close()
    assert running_markers(tmp_path / "kernels"), "the candidate never ran"
    assert m.status == "failed" and m.error == "timeout: no result within 2 s"
    assert 1.5 <= waited < 60


def test_fallback_watchdog_ends_a_worker_whose_parent_dies(tmp_path):
    """Where PR_SET_PDEATHSIG is not available, a thread polling the parent's pid does it."""
    grandchild = textwrap.dedent("""
        import os, sys, time
        from autotune.backends.worker import die_with_parent
        sys.platform = "other"              # take the portable path (after the imports)
        die_with_parent(int(sys.argv[1]))
        open(sys.argv[2], "w").write(str(os.getpid()))
        while True:
            time.sleep(0.1)
    """)
    parent = textwrap.dedent("""
        import subprocess, sys, os, time
        subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
        time.sleep(600)
    """)
    marker = tmp_path / "pid"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", parent, grandchild, str(marker)], cwd=ROOT,
                         env=env)
    pid = None
    try:
        assert wait_for(lambda: marker.exists() and marker.read_text(), 60)
        pid = int(marker.read_text())
        assert status(pid) is not None
        p.kill()
        p.wait()
        assert wait_for(lambda: status(pid) is None, 2.0), f"{pid} outlived its parent"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if pid is not None and status(pid) is not None:
            os.kill(pid, signal.SIGKILL)


def test_a_run_past_its_cap_is_stopped_and_said_so(tmp_path):
    """With a best so far, each run is stopped at run_factor x best (at least run_floor_s),
    long before the request's timeout; the error names the cap, not a timeout."""
    w = load_workload("trimul_outgoing", DIMS)
    h = WorkerHandle(WorkerSpec("trimul_outgoing", w.dims, 0, str(tmp_path), "cpu"),
                     "tests.support.slow_plans:SlowSecondRun")
    cand = named_plan(SearchSpace(w, TileBounds(1, 256)), "heuristic")
    settings = MeasureSettings(run_floor_s=0.5)
    try:
        t0 = time.monotonic()
        m = h.measure(cand, settings, 600, 0.01)
        took = time.monotonic() - t0
    finally:
        h.close()
    assert m.status == "failed" and m.error == worker.run_cap_message(0.5, 10.0), m.error
    assert "0.5 s" in m.error and took < 60
    assert settings.run_cap(None) is None and settings.run_cap(2.0) == 20.0
