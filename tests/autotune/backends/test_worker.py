"""The isolated measuring worker (autotune.backends.worker.WorkerHandle) driven directly: correct
candidates are timed, wrong ones rejected by verification, and a crash or hang costs only the
candidate (the next measure restarts the worker)."""
from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time

import pytest

from autotune.backends.factory import backend_kind
from autotune.backends.base import MeasureSettings
from autotune.backends.worker import WorkerHandle, WorkerSpec
from autotune.reference import reference_path
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


DIMS = {"N": 16, "C": 8}
SEED = 3
QUICK = MeasureSettings(warmup=1, repeats=2)


@pytest.fixture(scope="module")
def w():
    return load_workload("trimul_outgoing", DIMS)


@pytest.fixture(scope="module")
def plans(w):
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    return {n: named_plan(space, n) for n in ("unfused", "heuristic", "greedy")}


def spec(w, tmp_path) -> WorkerSpec:
    return WorkerSpec("trimul_outgoing", w.dims, SEED, str(tmp_path), "cpu")


@pytest.fixture
def real(w, tmp_path):
    h = WorkerHandle(spec(w, tmp_path), "autotune.backends.cpu.executor:CompiledPlan", start_timeout_s=120)
    yield h
    h.close()


@pytest.fixture
def faulty(w, tmp_path):
    h = WorkerHandle(spec(w, tmp_path), "tests.support.faulty_plans:FaultyPlan", start_timeout_s=120)
    yield h
    h.close()


def test_correct_candidate_is_timed_and_verified(w, plans, real, tmp_path):
    m = real.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=None)
    assert m.status == "ok", m.error
    assert m.error == ""
    assert len(m.times) == QUICK.repeats and all(t > 0 for t in m.times)
    assert m.median_s == sorted(m.times)[len(m.times) // 2] or \
        math.isclose(m.median_s, sum(m.times) / 2)        # median of 2 = their mean
    assert m.rel_err is not None and 0 <= m.rel_err <= w.rtol
    # the worker cached the float64 reference beside the kernels, one .npy per output
    ref = reference_path(tmp_path, w.hash, SEED)
    assert sorted(p.name for p in ref.iterdir()) == [f"{o}.npy" for o in sorted(w.outputs)]
    assert any((tmp_path / "kernels").glob("k_*.so"))
    # the same worker process serves the next candidate
    pid = real.proc.pid
    m2 = real.measure(plans["unfused"], QUICK, timeout_s=120, best_s=None)
    assert m2.status == "ok", m2.error
    assert real.proc.pid == pid


def test_a_worker_launched_early_serves_the_first_candidate(w, plans, real, tmp_path):
    """launch() returns before the worker is ready (it computes the reference meanwhile); the
    first measure waits for that same process instead of starting another."""
    t0 = time.monotonic()
    real.launch()
    assert real.proc is not None and real.proc.is_alive() and not real.ready
    assert time.monotonic() - t0 < 5                     # did not wait for the reference
    pid = real.proc.pid
    real.launch()                                        # a second launch starts nothing
    assert real.proc.pid == pid
    m = real.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=None)
    assert m.status == "ok", m.error
    assert real.ready and real.proc.pid == pid
    assert reference_path(tmp_path, w.hash, SEED).is_dir()


def test_a_launched_worker_that_dies_while_starting_costs_one_candidate(plans, real):
    real.launch()
    real.proc.kill()
    real.proc.join(5)
    m = real.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=None)
    assert m.status == "failed" and m.error == "worker died while starting"
    m = real.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=None)
    assert m.status == "ok", m.error                     # the next one starts a new worker
    assert real.ready and real.proc.is_alive()


def test_far_slower_than_best_is_timed_once(plans, real):
    # one run more than give_up_factor x the best so far: no warm-up and repeats
    m = real.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=1e-12)
    assert m.status == "ok", m.error
    assert len(m.times) == 1 and m.median_s == m.times[0]


def test_verification_rejects_wrong_and_non_finite_outputs(plans, faulty):
    wrong = faulty.measure(plans["heuristic"], QUICK, timeout_s=120, best_s=None)
    assert wrong.status == "failed"
    assert "wrong result" in wrong.error and "relative L2 error" in wrong.error
    assert wrong.median_s is None and wrong.times == ()
    assert wrong.rel_err == pytest.approx(0.01, rel=1e-2)   # outputs x 1.01
    nan = faulty.measure(dataclasses.replace(plans["heuristic"], name="nan"), QUICK, 120, None)
    assert nan.status == "failed" and "non-finite" in nan.error and nan.median_s is None
    # a verification failure is data, not a crash: the worker is still the same process
    assert faulty.proc is not None and faulty.proc.is_alive()
    ok = faulty.measure(dataclasses.replace(plans["heuristic"], name="ok"), QUICK, 120, None)
    assert ok.status == "ok", ok.error


def test_crash_marks_failed_and_next_measure_restarts(plans, faulty):
    ok_cand = dataclasses.replace(plans["heuristic"], name="ok")
    first = faulty.measure(ok_cand, QUICK, timeout_s=120, best_s=None)
    assert first.status == "ok", first.error
    pid = faulty.proc.pid
    crash = faulty.measure(plans["unfused"], QUICK, timeout_s=120, best_s=None)
    assert crash.status == "failed"
    assert "crashed" in crash.error and "exit code 3" in crash.error
    after = faulty.measure(ok_cand, QUICK, timeout_s=120, best_s=None)
    assert after.status == "ok", after.error
    assert faulty.proc.pid != pid


def test_hang_is_killed_at_the_timeout_and_next_measure_restarts(plans, faulty):
    ok_cand = dataclasses.replace(plans["heuristic"], name="ok")
    assert faulty.measure(ok_cand, QUICK, 120, None).status == "ok"   # compiles, starts worker
    proc = faulty.proc
    t0 = time.monotonic()
    hang = faulty.measure(plans["greedy"], QUICK, timeout_s=4, best_s=None)
    waited = time.monotonic() - t0
    assert hang.status == "failed" and "timeout" in hang.error
    assert 3.5 <= waited < 30
    assert not proc.is_alive()                     # the hung process was killed
    after = faulty.measure(ok_cand, QUICK, timeout_s=120, best_s=None)
    assert after.status == "ok", after.error


def test_worker_that_cannot_start_reports_failure(w, tmp_path):
    h = WorkerHandle(spec(w, tmp_path), "tests.support.faulty_plans:NoSuchPlan", start_timeout_s=60)
    try:
        m = h.measure(named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "heuristic"), QUICK, 60, None)
    finally:
        h.close()
    assert m.status == "failed" and m.error


# ---- numerics: non-finite outputs and the tolerance ----------------------------------------

def test_verify_rejects_nan_and_inf_anywhere():
    import numpy as np
    from autotune.backends.base import verify
    rng = np.random.default_rng(0)
    ref = {"out": rng.standard_normal((8, 8, 4))}
    good = {"out": ref["out"].astype(np.float32)}
    err, msg = verify(good, ref, 1e-4)
    assert msg == "" and err < 1e-6
    for bad in (np.nan, np.inf, -np.inf):
        for pos in (0, 100, 255):
            out = ref["out"].astype(np.float32)
            out.flat[pos] = bad
            err, msg = verify({"out": out}, ref, 1e-4)
            assert err == math.inf and "non-finite values" in msg, (bad, pos, msg)
    assert "missing" in verify({}, ref, 1e-4)[1]
    assert verify({"out": good["out"][:4]}, ref, 1e-4)[0] == math.inf   # wrong shape


@pytest.mark.parametrize("rtol", [1e-4, 1e-2])
def test_verify_honours_the_tolerance(rtol):
    """An output off by 0.5 x rtol (relative L2) passes, one off by 2 x rtol fails; both in
    float64 (exact) and rounded to float32."""
    import numpy as np
    from autotune.backends.base import verify
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((16, 16, 8))
    noise = rng.standard_normal(ref.shape)
    noise *= np.linalg.norm(ref) / np.linalg.norm(noise)       # |noise| = |ref|
    for dtype in (np.float64, np.float32):
        for factor, passes in ((0.5, True), (0.99, True), (1.01, False), (2.0, False)):
            out = (ref + factor * rtol * noise).astype(dtype)
            err, msg = verify({"out": out}, {"out": ref}, rtol)
            assert err == pytest.approx(factor * rtol, rel=1e-2)
            assert (msg == "") == passes, (dtype, factor, err, msg)
            if not passes:
                assert f"relative L2 error {err:.3g} > rtol {rtol:g}" in msg


@pytest.fixture
def hostile(w, tmp_path):
    h = WorkerHandle(spec(w, tmp_path), "tests.support.hostile_plans:HostilePlan", start_timeout_s=120)
    yield h
    h.close()


def test_worker_tolerance_and_non_finite_outputs(w, plans, hostile):
    """Through the worker: outputs scaled by (1 + 0.5 rtol) pass, by (1 + 2 rtol) fail; an
    inf, -inf or NaN in an output fails verification."""
    base = plans["heuristic"]
    half = hostile.measure(dataclasses.replace(base, name="scale:0.5"), QUICK, 120, None)
    assert half.status == "ok", half.error
    assert half.rel_err == pytest.approx(0.5 * w.rtol, rel=0.05)
    double = hostile.measure(dataclasses.replace(base, name="scale:2"), QUICK, 120, None)
    assert double.status == "failed" and double.median_s is None
    assert double.rel_err == pytest.approx(2 * w.rtol, rel=0.05)
    assert f"> rtol {w.rtol:g}" in double.error
    for bad in ("inf", "-inf", "nan"):
        m = hostile.measure(dataclasses.replace(base, name=bad), QUICK, 120, None)
        assert m.status == "failed" and "non-finite values" in m.error, (bad, m)
        assert m.rel_err == math.inf


@pytest.mark.parametrize("var, default", [("OMP_WAIT_POLICY", "PASSIVE"),
                                          ("GOMP_SPINCOUNT", "10000"),
                                          ("OPENBLAS_THREAD_TIMEOUT", "14")])
@pytest.mark.parametrize("preset", [None, "7"])
def test_idle_threads_sleep_between_groups_unless_the_user_says_otherwise(var, default, preset):
    # spinning OpenMP threads slowed whole plans 1.2-3x by holding the cores BLAS needed, and
    # spinning OpenBLAS threads slowed the loop groups after a GEMM up to 2x; a short spin
    # each keeps the wake-ups off back-to-back groups
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                            "OPENBLAS_THREAD_TIMEOUT")}
    if preset:
        env[var] = preset
    code = ("import os, warnings; warnings.simplefilter('error'); "
            f"import autotune.backends.cpu.executor; print(os.environ[{var!r}])")
    out = subprocess.run([sys.executable, "-c", code],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == (preset or default)


def test_a_wait_policy_the_user_chose_is_not_overridden_by_a_spin_count():
    # libgomp's GOMP_SPINCOUNT, once set, wins over OMP_WAIT_POLICY
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    code = ("import os; import autotune.backends.cpu.executor; "
            "print(os.environ['OMP_WAIT_POLICY'], os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ACTIVE", "None"]


def test_numpy_imported_before_autotune_is_warned_about():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    code = ("import numpy, warnings; warnings.simplefilter('error'); "
            "import autotune.backends.cpu.executor")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "OPENBLAS_THREAD_TIMEOUT=14" in r.stderr


def test_openmp_loaded_before_autotune_is_warned_about():
    import ctypes.util
    gomp = ctypes.util.find_library("gomp")
    if not gomp:
        pytest.skip("no libgomp here")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = (f"import ctypes, warnings; ctypes.CDLL({gomp!r}); "
            "warnings.simplefilter('error'); import autotune.backends.cpu.executor")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "OMP_WAIT_POLICY=PASSIVE" in r.stderr
