"""How the worker's confirmation times a round (autotune.backends.confirm): a plan of a few
milliseconds runs calls_per_round calls a round (its first, checked run tells how many) and the
round's figure is their median; a slow plan keeps one call a round; a wrong one fails after its
checked run.  In-process, with a scripted plan: what each round asked of the plan is recorded."""
from __future__ import annotations

import pytest

from autotune.backends.base import MAX_CALLS, BufferPool, MeasureSettings, calls_per_round
from autotune.backends.confirm import ConfirmRequest, run_confirmation
from autotune.backends.load import NoProbe
from autotune.reference import reference
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


class ScriptedPlan:
    """Returns the reference (or a wrong copy); its runs take ``seconds``, every third call
    ``slow`` times that: a round's median must not be moved by them."""

    def __init__(self, ref, seconds: float, wrong: bool, asks: list):
        self.ref, self.seconds, self.wrong, self.asks = ref, seconds, wrong, asks
        self.n = 0

    def timed_call(self, inputs, warmup, repeats, check=None, cutoff=None):
        self.asks.append((repeats, check is not None))
        outs = {k: v * (1.5 if self.wrong else 1.0) for k, v in self.ref.items()}
        if check is not None and not check(outs):
            return outs, []
        times = []
        for _ in range(repeats):
            self.n += 1
            times.append(self.seconds * (3.0 if self.n % 3 == 0 else 1.0))
        return outs, times

    def release(self):
        pass


@pytest.fixture(scope="module")
def setting():
    w = load_workload("trimul_outgoing", {"N": 8, "C": 4})
    space = SearchSpace(w)
    cands = tuple(named_plan(space, n) for n in ("heuristic", "unfused", "greedy"))
    inputs = w.random_inputs(0)
    ref = reference(w, inputs)
    return w, cands, inputs, ref


def confirm(setting, seconds: dict, wrong=()):
    w, cands, inputs, ref = setting
    asks: dict[str, list] = {c.name: [] for c in cands}

    def make_plan(w_, cand, kernels, pool=None):
        return ScriptedPlan(ref, seconds[cand.name], cand.name in wrong, asks[cand.name])
    got = run_confirmation(w, ConfirmRequest(cands, 3, MeasureSettings(), seed=2), inputs, ref,
                           None, make_plan, BufferPool(), NoProbe())
    return dict(zip((c.name for c in cands), got)), asks


def test_a_round_of_a_fast_plan_is_the_median_of_many_calls(setting):
    got, asks = confirm(setting, {"heuristic": 0.002, "unfused": 0.04, "greedy": 0.5})
    k = calls_per_round(0.002)
    assert k == MAX_CALLS
    # the checked run, then k calls in each of the three rounds
    assert asks["heuristic"] == [(1, True), (k, False), (k, False), (k, False)]
    assert asks["unfused"] == [(1, True), (2, False), (2, False), (2, False)]
    # a seconds-long plan: its checked run is round one's figure, one call a round after it
    assert asks["greedy"] == [(1, True), (1, False), (1, False)]
    h = got["heuristic"]
    assert h.status == "ok" and len(h.times) == 3
    # one call in three ran 3x: the medians of 50 calls are the steady time
    assert h.times == (0.002, 0.002, 0.002) and h.median_s == 0.002
    assert got["greedy"].times[0] in (0.5, 1.5) and len(got["greedy"].times) == 3


def test_a_wrong_finalist_fails_after_its_checked_run(setting):
    got, asks = confirm(setting, {"heuristic": 0.002, "unfused": 0.002, "greedy": 0.002},
                        wrong=("unfused",))
    assert got["unfused"].status == "failed" and got["unfused"].error.startswith("wrong result")
    assert asks["unfused"] == [(1, True)]                # never timed again
    assert got["heuristic"].status == "ok" and got["greedy"].status == "ok"
