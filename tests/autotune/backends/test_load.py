"""Runs under load and confirmations in the backends: timed_runs makes a busy run again instead of
trusting it (and lets no busy run end a candidate), the /proc load probe's arithmetic and its
fallback, and the worker's confirmation (compile, verify, interleaved rounds)."""
from __future__ import annotations

import os

import pytest

from autotune.backends import load
from autotune.backends.base import Cutoff, MeasureSettings, timed_runs
from autotune.backends.factory import backend_kind
from autotune.backends.load import LoadWatch, NoProbe, ProcStatProbe, machine_probe
from autotune.backends.worker import WorkerHandle, WorkerSpec
from autotune.backends.confirm import ConfirmRequest
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


class Script:
    """A probe that answers busy or not per run, from ``flags`` in turn."""

    def __init__(self, flags):
        self.flags = iter(flags)

    def start(self):
        return None

    def others_cores(self, since):
        return 1.0 if next(self.flags) else 0.1


def timed(times, flags, repeats=3, best_s=None, settings=MeasureSettings()):
    """(trusted times, runs made, runs under load) of timed_runs over ``times`` in turn."""
    it = iter(times)
    made = []

    def run():
        made.append(next(it))
        return made[-1]
    watch = LoadWatch(Script(flags), settings.busy_cores)
    out = timed_runs(run, run, 0, repeats, settings.cutoff(best_s, watch=watch))
    return out, len(made), watch.loaded


def test_a_busy_run_is_made_again_and_left_out():
    out, made, loaded = timed([5.0, 1.0, 1.1, 0.9], [False, True, False, False])
    assert out == [5.0, 1.1, 0.9] and made == 4 and loaded == 1


def test_a_busy_first_run_gives_nothing_up():
    # 10x the best, but the machine was busy: made again; the next (trusted) run decides
    out, made, _ = timed([10.0, 1.0, 1.0, 1.0], [True, False, False, False], best_s=1.0)
    assert out == [1.0, 1.0, 1.0] and made == 4
    # a trusted slow run after a busy one: that one is far off, the candidate is given up
    out, made, _ = timed([10.0, 5.0, 1.0], [True, False, False], best_s=1.0)
    assert out == [5.0] and made == 2


def test_reruns_are_bounded_and_a_busy_machine_still_gives_times():
    s = MeasureSettings(load_reruns=2)
    out, made, loaded = timed([3.0] * 10, [True] * 10, settings=s)
    assert made == 3 + 2 == loaded and out == [3.0] * 5       # every run busy: all of them
    out, made, loaded = timed([3.0, 2.0, 1.0, 1.0, 1.0, 1.0], [True, True, True, False, False],
                              settings=s)
    assert out == [1.0, 1.0] and made == 5 and loaded == 3    # 3 trusted not reached: cap


def test_without_a_watch_every_run_is_trusted():
    it = iter([2.0, 2.0])
    assert timed_runs(lambda: 2.0, lambda: next(it), 0, 3, Cutoff()) == [2.0, 2.0, 2.0]


def test_the_proc_probe_counts_other_processes_cpu_time(monkeypatch):
    probe = ProcStatProbe({0, 1})
    busy, own = iter([1000, 1000 + 150]), iter([200, 200 + 40])
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(probe, "_busy_ticks", lambda: next(busy))
    monkeypatch.setattr(probe, "_own_ticks", lambda: next(own))
    monkeypatch.setattr(load.time, "perf_counter", lambda: next(clock))
    probe.tick_s = 0.01
    # 150 busy ticks on our CPUs in 1 s, 40 of them ours: others kept 1.1 cores busy
    assert probe.others_cores(probe.start()) == pytest.approx(1.1)
    watch = LoadWatch(probe, 0.5)
    busy, own, clock = iter([0, 30]), iter([0, 0]), iter([0.0, 1.0])
    assert watch.time(lambda: 1.0) == (1.0, False) and watch.loaded == 0   # 0.3 cores: idle
    # too short a window to tell: unknown, never busy
    busy, own, clock = iter([0, 100]), iter([0, 0]), iter([0.0, load.MIN_WINDOW_S / 2])
    assert watch.time(lambda: 0.05) == (0.05, False)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc only")
def test_the_machine_probe_reads_proc_and_falls_back(monkeypatch):
    probe = machine_probe()
    assert isinstance(probe, ProcStatProbe)
    since = probe.start()
    assert probe.others_cores(since) is None              # microseconds: cannot tell
    monkeypatch.setattr(ProcStatProbe, "_busy_ticks", lambda self: (_ for _ in ()).throw(
        OSError("no /proc")))
    assert isinstance(machine_probe(), NoProbe)
    assert NoProbe().others_cores(NoProbe().start()) is None


# ---- the worker's confirmation ----------------------------------------------------------------

DIMS = {"N": 16, "C": 8}


@pytest.fixture(scope="module")
def w():
    return load_workload("trimul_outgoing", DIMS)


@pytest.fixture(scope="module")
def plans(w):
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    return {n: named_plan(space, n) for n in ("unfused", "heuristic", "greedy")}


def handle(w, tmp_path, plan_path):
    return WorkerHandle(WorkerSpec("trimul_outgoing", w.dims, 3, str(tmp_path), "cpu"),
                        plan_path, start_timeout_s=120)


def test_the_worker_confirms_finalists_in_rounds(w, plans, tmp_path):
    h = handle(w, tmp_path, "autotune.backends.cpu.executor:CompiledPlan")
    try:
        got = h.confirm(ConfirmRequest((plans["heuristic"], plans["unfused"]), 3,
                                       MeasureSettings(), seed=1, timeout_s=120))
        assert [m.status for m in got] == ["ok", "ok"], [m.error for m in got]
        for m in got:
            assert len(m.times) == 3 and m.median_s == sorted(m.times)[1]
            assert m.rel_err is not None and m.rel_err <= w.rtol    # verified
        # the worker goes on serving measurements afterwards
        assert h.measure(plans["greedy"], MeasureSettings(), 120, None).status == "ok"
    finally:
        h.close()


def test_a_finalist_that_fails_verification_fails_alone(w, plans, tmp_path):
    h = handle(w, tmp_path, "tests.support.faulty_plans:FaultyPlan")
    try:
        wrong, = h.confirm(ConfirmRequest((plans["heuristic"],), 2, MeasureSettings(),
                                          timeout_s=120))
        assert wrong.status == "failed" and wrong.error.startswith("wrong result")
        assert wrong.times == ()
        # a crash takes the whole confirmation with it: every finalist fails, with the reason
        got = h.confirm(ConfirmRequest((plans["heuristic"], plans["unfused"]), 2,
                                       MeasureSettings(), timeout_s=120))
        assert [m.status for m in got] == ["failed", "failed"]
        assert all("worker crashed (exit code 3)" in m.error for m in got)
    finally:
        h.close()
