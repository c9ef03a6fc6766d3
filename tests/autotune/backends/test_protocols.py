"""The backend seam: kinds by CLI name, every kind and plan with the whole protocol, the plans'
timed calls (checked first run, early stops), the worker's messages as records, and the emitted
sources coming from the kinds."""
from __future__ import annotations

import inspect
import math
import pickle
import shutil

import pytest
from typer.testing import CliRunner

from autotune.backends.base import (BackendKind, Cutoff, Measurement, MeasureSettings, Plan,
                                    verify)
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.factory import KINDS, backend_kind
from autotune.backends.worker import (MeasureReply, MeasureRequest, Ready, Shutdown,
                                      WorkerError, WorkerHandle, WorkerSpec)
from autotune.reference import reference
from costmodel import preset
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


def _members(protocol) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if inspect.isfunction(v)}
    return {n for n in names if not n.startswith("_") or n == "__call__"}


# ---- the registry ------------------------------------------------------------------------------

def test_kinds_are_looked_up_by_cli_name():
    assert set(KINDS) == {"cpu", "cuda"}
    for name in KINDS:
        kind = backend_kind(name)
        assert kind.name == name
        assert backend_kind(name) is kind                  # one object per kind
    with pytest.raises(ValueError, match="unknown backend 'tpu': expected one of cpu, cuda"):
        backend_kind("tpu")


# ids not named "cuda": conftest skips items with that keyword where no GPU is present
ON = {"ids": lambda name: f"{name}-kind"}


@pytest.mark.parametrize("name", sorted(KINDS), **ON)
def test_every_kind_has_the_whole_protocol(name):
    kind = backend_kind(name)
    missing = [m for m in _members(BackendKind) if not hasattr(kind, m)]
    assert not missing, missing
    # one plan factory signature for every kind: the buffer pool is an explicit parameter
    assert list(inspect.signature(kind.make_plan).parameters) == ["w", "cand", "cache_dir",
                                                                  "pool"]


def test_kinds_differ_where_their_devices_do():
    cpu, cuda = backend_kind("cpu"), backend_kind("cuda")
    assert (cpu.tile_bounds.hi, cuda.tile_bounds.hi) == (256, 1024)
    assert (cpu.units, cuda.units) == ("cores", "SMs")
    spec = preset("cpu")
    # CPU threads hold their own tile buffers; GPU tiles live in shared memory
    assert cpu.memory_threads(spec) == spec.parallel_units > 0
    assert cuda.memory_threads(preset("h100")) == 0
    assert cuda.calibrated() is None
    from autotune.environment import Environment
    assert cuda.device_spec(Environment("cuda", "NVIDIA H200")).name == "h200"
    assert cuda.device_spec(Environment("cuda", "Some Future GPU")).name == "h100"


@pytest.mark.parametrize("cls", ["cpu", "cuda"], **ON)
def test_both_plans_have_the_whole_plan_protocol(cls):
    if cls == "cpu":
        plan_cls = CompiledPlan
    else:
        from autotune.backends.cuda.executor import CudaPlan
        plan_cls = CudaPlan
    for m in _members(Plan):
        assert callable(getattr(plan_cls, m, None)), m
    params = list(inspect.signature(plan_cls.timed_call).parameters)
    assert params == ["self", "inputs", "warmup", "repeats", "check", "cutoff"]


# ---- early stops -------------------------------------------------------------------------------

def test_cutoff():
    never = MeasureSettings().cutoff(None)
    assert not never.gives_up(1e9) and not never.out_of_contention([1e9, 1e9])
    c = MeasureSettings(give_up_factor=1.15, contend_factor=1.05).cutoff(1.0)
    assert c.gives_up(1.2) and not c.gives_up(1.1)
    assert c.out_of_contention([1.06, 1.07]) and not c.out_of_contention([1.06, 1.0])
    assert not c.out_of_contention([2.0]) and not c.out_of_contention([2.0, 2.0, 2.0])
    assert not Cutoff().gives_up(math.inf)


def test_by_default_a_third_run_is_made_only_when_the_candidate_can_still_win():
    """The median of three cannot beat the best once two runs are slower than it; one faster
    run keeps it in the race."""
    c = MeasureSettings().cutoff(1.0)
    assert c.out_of_contention([1.01, 1.02])
    assert not c.out_of_contention([1.01, 0.99])


# ---- the CPU plan's timed call ------------------------------------------------------------------

class CountingPlan(CompiledPlan):
    """A CompiledPlan that counts its runs; its warm-up after a short checked call is the one
    call warm_up always makes (the real one runs for WARM_UP_S: see
    test_cpu_first_call.py)."""
    runs = 0
    warm_up_s = 0.0

    def __call__(self, **inputs):
        self.runs += 1
        return super().__call__(**inputs)


@pytest.fixture(scope="module")
def cpu_case(tmp_path_factory):
    from search_spaces import load_workload
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    inputs = w.random_inputs(4)
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "heuristic")
    return w, inputs, reference(w, inputs), cand, tmp_path_factory.mktemp("k")


def test_cpu_timed_call_times_the_checked_run_and_repeats(cpu_case):
    w, inputs, ref, cand, cache = cpu_case
    plan = CountingPlan(w, cand, cache)
    seen = []
    outs, times = plan.timed_call(inputs, 1, 3, check=lambda o: seen.append(o) or True)
    # checked (short: not a sample), one warm-up call, its timed successor, warm-up, two more
    assert len(seen) == 1 and plan.runs == 1 + 1 + 1 + 1 + 2
    assert len(times) == 3 and all(t > 0 for t in times)
    assert not verify(outs, ref, w.rtol)[1]


def test_cpu_timed_call_stops_when_the_check_fails(cpu_case):
    w, inputs, ref, cand, cache = cpu_case
    plan = CountingPlan(w, cand, cache)
    outs, times = plan.timed_call(inputs, 1, 3, check=lambda o: False)
    assert times == [] and plan.runs == 1
    assert not verify(outs, ref, w.rtol)[1]              # the first run's outputs


def test_cpu_timed_call_stops_when_it_cannot_be_the_best(cpu_case):
    w, inputs, _, cand, cache = cpu_case
    plan = CountingPlan(w, cand, cache)
    _, times = plan.timed_call(inputs, 1, 5, cutoff=Cutoff(1e-12, 1.15, 1.05))
    # far off: one timed run tells (a short plan's checked call, a warm-up call, then its timed
    # successor)
    assert len(times) == 1 and plan.runs == 3
    plan = CountingPlan(w, cand, cache)
    _, times = plan.timed_call(inputs, 1, 5, cutoff=Cutoff(1e-12, math.inf, 1.05))
    assert len(times) == 2 and plan.runs == 5            # two runs out of contention


def test_cuda_plan_checks_its_first_run_and_releases(cpu_case):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    from autotune.backends.cuda.emulator import HostEmulator
    from autotune.backends.cuda.executor import CudaPlan
    w, inputs, ref, _, cache = cpu_case
    cand = named_plan(SearchSpace(w, backend_kind("cuda").tile_bounds), "heuristic")
    plan = CudaPlan(w, cand, cache, runtime=HostEmulator(threads=2))
    outs, times = plan.timed_call(inputs, 1, 3, check=lambda o: False)
    assert times == [] and not verify(outs, ref, w.rtol)[1]
    outs, times = plan.timed_call(inputs, 0, 2, check=lambda o: True)
    assert len(times) == 2                               # no best yet: every repeat
    outs, times = plan.timed_call(inputs, 0, 2, check=lambda o: True,
                                  cutoff=Cutoff(1e-12, 1.15, 1.05))
    assert len(times) == 1                               # far off the best: one run tells
    plan.release()
    assert plan.storage == {} and plan.logical == {}


# ---- the worker's messages --------------------------------------------------------------------

class _Pipe:
    def __init__(self, reply):
        self.reply, self.sent = reply, []

    def send(self, msg):
        self.sent.append(msg)

    def poll(self, timeout):
        return True

    def recv(self):
        return self.reply


class _Proc:
    pid = 1

    def __init__(self):
        self.alive = True

    def is_alive(self):
        return self.alive

    def kill(self):
        self.alive = False

    def join(self, timeout=None):
        return None


def _handle(reply) -> WorkerHandle:
    h = WorkerHandle(WorkerSpec("trimul_outgoing", (("N", 16), ("C", 8)), 0, "/nonexistent"))
    h.proc, h.conn, h.ready = _Proc(), _Pipe(reply), True     # a worker already serving
    return h


def test_worker_reply_carries_the_measurement_and_the_pooled_bytes(cpu_case):
    cand = cpu_case[3]
    m = Measurement("ok", 0.5, (0.5,), 1e-7)
    h = _handle(MeasureReply(m, 4096))
    settings = MeasureSettings(repeats=1)
    assert h.measure(cand, settings, 10, 0.25) == m
    assert h.pooled_bytes == 4096
    assert h.conn.sent == [MeasureRequest(cand, settings, 0.25, 10)]


def test_worker_error_after_start_is_a_failed_measurement(cpu_case):
    h = _handle(WorkerError("worker failed to start: boom"))
    proc = h.proc
    m = h.measure(cpu_case[3], MeasureSettings(), 10, None)
    assert m.status == "failed" and m.error == "worker failed to start: boom"
    assert h.proc is None and not proc.alive and h.pooled_bytes == 0


def test_worker_messages_are_frozen_picklable_records(cpu_case):
    for msg in (MeasureRequest(cpu_case[3], MeasureSettings(), None), Shutdown(), Ready(),
                WorkerError("x"), MeasureReply(Measurement("failed", error="e"), 0)):
        assert pickle.loads(pickle.dumps(msg)) == msg
        with pytest.raises(AttributeError):
            msg.extra = 1


# ---- emitted sources ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "cuda"], **ON)
def test_emit_writes_what_the_kind_emits(device, cpu_case, tmp_path):
    from autotune.cli.app import app
    w = cpu_case[0]
    cand = named_plan(SearchSpace(w, backend_kind(device).tile_bounds), "greedy")
    emitted = backend_kind(device).emit(w, cand)
    assert emitted.files and emitted.notes
    r = CliRunner().invoke(app, ["emit", "trimul_outgoing", "--dims", "N=16,C=8", "--plan",
                                 "greedy", "--device", device, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*emitted.files, "README.txt"])
    for name, text in emitted.files.items():
        assert (tmp_path / name).read_text() == text
    readme = (tmp_path / "README.txt").read_text().splitlines()
    assert readme[0].startswith(f"workload {w.name}") and readme[3:] == list(emitted.notes)
