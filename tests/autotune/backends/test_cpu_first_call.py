"""The CPU plan's first call: a short one is not a sample (it pays one-time costs), a long one
is; either way the checked outputs are the first call's."""
from __future__ import annotations

import time

import numpy as np

from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

from autotune.api import make_executable
from autotune.backends.cpu import executor
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.factory import backend_kind


class _Scripted(CompiledPlan):
    """A real plan whose calls take scripted extra seconds (call 1 first)."""
    extra: tuple[float, ...] = ()

    def __call__(self, **inputs):
        self.calls = getattr(self, "calls", 0) + 1
        i = min(self.calls, len(self.extra)) - 1
        time.sleep(self.extra[i])
        return super().__call__(**inputs)


def _plan(small, tmp_path, extra):
    w = small("gated_mlp")
    cand = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "heuristic")
    plan = make_executable(w, cand, "cpu", tmp_path)
    plan.__class__ = _Scripted
    plan.extra = extra
    return w, plan


def test_a_short_cold_first_call_is_not_the_sample(small, tmp_path):
    w, plan = _plan(small, tmp_path, (0.1, 0.0))    # the first call 0.1 s slower, then fast
    checked = []
    _, times = plan.timed_call(w.random_inputs(0), 0, 1,
                               check=lambda outs: checked.append(plan.calls) or True)
    assert checked == [1]                 # the check saw the first call's outputs
    # untimed calls for WARM_UP_S after it (the host's waking up), then the sample
    assert plan.calls >= 3 and len(times) == 1
    assert times[0] < 0.1                 # the sample is a warm call
    assert executor.FIRST_CALL_WARM_BELOW_S > 0.1    # (what makes 0.1 s "short")


def test_a_long_first_call_is_its_own_sample(small, tmp_path):
    long = executor.FIRST_CALL_WARM_BELOW_S + 0.05
    w, plan = _plan(small, tmp_path, (long,))
    _, times = plan.timed_call(w.random_inputs(0), 0, 1, check=lambda outs: True)
    assert plan.calls == 1 and len(times) == 1 and times[0] >= long


def test_a_failed_check_runs_nothing_more(small, tmp_path):
    w, plan = _plan(small, tmp_path, (0.0,))
    outs, times = plan.timed_call(w.random_inputs(0), 0, 3, check=lambda outs: False)
    assert times == [] and plan.calls == 1
    assert all(np.isfinite(v).all() for v in outs.values())


def test_a_short_plan_is_warmed_up_for_a_while_before_its_samples(small, tmp_path):
    # the waking up is counted in time, not calls: a 5 ms plan makes many untimed calls
    from autotune.backends.base import WARM_UP_S
    w, plan = _plan(small, tmp_path, (0.005,))
    t0 = time.perf_counter()
    _, times = plan.timed_call(w.random_inputs(0), 0, 1, check=lambda outs: True)
    assert time.perf_counter() - t0 >= WARM_UP_S
    assert plan.calls >= 1 + WARM_UP_S / 0.005 * 0.5 and len(times) == 1



class _Staged(_Scripted):
    """Its first call allocates ``staged`` float32 elements of staging scratch, as one with
    staged GEMM operands does."""
    staged = 1 << 22        # 16 MB: ~30 ms to fault in, 10 % of a 0.25 s call

    def __call__(self, **inputs):
        out = super().__call__(**inputs)
        if self.calls == 1:
            self.staging.scratch("a:x", (self.staged,), np.float32)
        return out


class _LightlyStaged(_Staged):
    staged = 1024           # 4 KB, as a stack's copied weights: nothing to wait out


def test_a_long_first_call_that_allocated_staging_is_not_the_sample(small, tmp_path):
    """Staging matrices are allocated (and their pages faulted in) by the first call that
    needs them, outside the pool's pre-faulted buffers: that call is followed by one more,
    which is the sample."""
    long = executor.FIRST_CALL_WARM_BELOW_S + 0.05
    w, plan = _plan(small, tmp_path, (long, 0.0))
    plan.__class__ = _Staged
    checked = []
    _, times = plan.timed_call(w.random_inputs(0), 0, 1,
                               check=lambda outs: checked.append(plan.calls) or True)
    assert checked == [1] and plan.calls == 2 and len(times) == 1
    assert times[0] < long                # the second call's time, not the first's


def test_a_first_call_that_staged_little_is_the_sample(small, tmp_path):
    """Faulting in a few kilobytes is no part of a quarter-second call: that call is the
    sample, as any long first call is."""
    long = executor.FIRST_CALL_WARM_BELOW_S + 0.05
    w, plan = _plan(small, tmp_path, (long, 0.0))
    plan.__class__ = _LightlyStaged
    _, times = plan.timed_call(w.random_inputs(0), 0, 1, check=lambda outs: True)
    assert plan.calls == 1 and len(times) == 1 and times[0] >= long
