"""Timeouts on the device's own time scale: a candidate's time limit has a floor per device kind
(seconds on a GPU, not the CPU's half minute), and a CUDA candidate already slower than the best
by the give-up factor is timed once, as on the CPU (here on the host emulator)."""
from __future__ import annotations

import shutil

import pytest
from optuna.trial import FixedTrial

from autotune.backends.base import Measurement, MeasureSettings
from autotune.backends.factory import backend_kind
from autotune.backends.worker import _run
from autotune.reference import reference
from autotune.search.config import SearchConfig
from autotune.search.state import SearchState
from costmodel import preset
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from search_spaces.answers import params_of


class Recorder:
    """A backend that records the timeout it is given and reports ``best_s``."""
    name = "recorder"
    settings = MeasureSettings()          # warmup 0, repeats 3: 5 runs' worth of time

    def __init__(self, kind):
        self.kind = kind
        self.timeouts: list[float] = []

    def measure(self, cand, timeout_s, best_s, leniency=None):
        self.timeouts.append(timeout_s)
        return Measurement("ok", 0.005, (0.005,), 0.0)

    def close(self):
        pass


def timeout_given(w, dev, config, best_s):
    kind = backend_kind(dev.kind)
    space = SearchSpace(w, kind.tile_bounds)
    backend = Recorder(kind)
    state = SearchState(w, space, backend, dev, config, None)
    state.prog.best_s = best_s
    state.evaluate(FixedTrial(params_of(space, named_plan(space, "heuristic"))))
    return backend.timeouts[0]


def test_timeout_floor_is_per_device_kind(small):
    w = small("trimul_outgoing")
    assert backend_kind("cuda").min_timeout_s < 10 <= backend_kind("cpu").min_timeout_s
    config = SearchConfig()
    # a 5 ms best: the floor rules; (2 + warmup + repeats) runs of it, plus the floor
    assert timeout_given(w, preset("h200"), config, 0.005) == pytest.approx(5 * 5.0 + 5.0)
    assert timeout_given(w, preset("cpu"), config, 0.005) == pytest.approx(5 * 30.0 + 30.0)
    # a slow best scales the limit on either device; an explicit floor overrides the kind's
    assert timeout_given(w, preset("h200"), config, 2.0) == pytest.approx(5 * 20.0 + 5.0)
    assert timeout_given(w, preset("h200"), SearchConfig(min_timeout_s=3), None) == \
        pytest.approx(5 * 3.0 + 3.0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the host emulator compiles with g++")
def test_cuda_candidate_far_slower_than_best_is_timed_once(small, tmp_path):
    from autotune.backends.cuda.emulator import HostEmulator
    from autotune.backends.cuda.executor import CudaPlan
    w = small("gated_mlp")
    plan = CudaPlan(w, named_plan(SearchSpace(w, backend_kind("cuda").tile_bounds), "heuristic"), tmp_path,
                    runtime=HostEmulator(threads=2))
    inputs = w.random_inputs(seed=0)
    ref = reference(w, inputs)
    settings = MeasureSettings(warmup=0, repeats=3)
    far = _run(w, plan, inputs, ref, settings, best_s=1e-12)
    assert far.status == "ok", far.error
    assert len(far.times) == 1 and far.median_s == far.times[0]
    near = _run(w, plan, inputs, ref, settings, best_s=1e6)      # far faster than the best
    assert near.status == "ok" and len(near.times) == 3
    # the plan's own surface: without a best, every repeat is timed
    _, times = plan.timed_call(inputs, warmup=0, repeats=3)
    assert len(times) == 3
    _, times = plan.timed_call(inputs, warmup=0, repeats=3,
                                 cutoff=settings.cutoff(best_s=1e-12))
    assert len(times) == 1


class _Learner:
    """A fitted correction that prices every candidate at ``seconds``."""
    active = True

    def __init__(self, seconds):
        self.value = seconds

    def seconds(self, cand):
        return self.value


def test_pruning_never_measures_the_best_below_its_run(small):
    """A correction that prices the best measured candidate far below its own run (fitted on
    other workloads) must not prune what is predicted slower than that price but faster than
    the run; the best's run is the floor of the comparison."""
    w = small("trimul_outgoing")
    dev = preset("cpu")
    kind = backend_kind(dev.kind)
    space = SearchSpace(w, kind.tile_bounds)
    state = SearchState(w, space, Recorder(kind), dev, SearchConfig(prune_factor=2.0), None)
    state.best_cand, state.best_pred = named_plan(space, "heuristic"), 0.177
    state.prog.best_s = 0.943               # what the best measured candidate ran
    state.learner = _Learner(0.080)         # what the correction says it runs
    assert state.prune_reason(0.233, 0.197) is None
    assert state.prune_reason(0.233, 1.9) is not None      # past 2 x its run: pruned
    state.prog.best_s = 0.05                # a run faster than its price: the price rules
    assert state.prune_reason(0.233, 0.197) is not None
