"""model-check's rounds and its confirmation of the candidates the regrets hinge on, with a
backend that plays scripted times (no compiler, milliseconds)."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.backends.base import Measurement
from autotune.report.check_rounds import PASSES, confirm, measure_rounds
from autotune.report.model_check import CheckedCandidate, hinges
from db.records import Status


@dataclass(frozen=True)
class Cand:
    key: str
    name: str = ""


class Scripted:
    """Each candidate's runs in order (the last repeated); "fail" fails that run."""

    def __init__(self, runs: dict[str, list]):
        self.runs, self.calls = runs, []

    def measure(self, c, timeout_s, best_s):
        n = sum(k == c.key for k in self.calls)
        self.calls.append(c.key)
        seq = self.runs[c.key]
        t = seq[min(n, len(seq) - 1)]
        if t == "fail":
            return Measurement(Status.FAILED, error="boom")
        return Measurement(Status.OK, t, (t,))


def quiet(_):
    pass


def test_rounds_measure_every_candidate_once_each_and_drop_a_failure():
    cands = [Cand("u", "unfused"), Cand("a"), Cand("b")]
    be = Scripted({"u": [3.0], "a": [1.0, 1.1, 1.2], "b": [2.0, "fail"]})
    st = measure_rounds(be, cands, 3, 0, 1.0, quiet)
    assert be.calls[0] == "u"                                   # the named plan first
    assert st["a"][1] == [1.0, 1.1, 1.2] and st["u"][1] == [3.0] * 3
    assert st["b"][0] == Status.FAILED and st["b"][1] == [2.0] and st["b"][2] == "boom"
    assert be.calls.count("b") == 2                             # not run after it failed
    measure_rounds(be, cands, 2, 0, 1.0, quiet, st, tag="confirm")   # adds to the state
    assert len(st["a"][1]) == 5 and be.calls.count("b") == 2


def test_confirmation_remeasures_the_hinges_until_they_stop_moving():
    cands = [Cand(k) for k in "abcd"]
    be = Scripted({k: [1.0] for k in "abcd"})
    st = measure_rounds(be, cands, 1, 0, 1.0, quiet)
    asked = []

    def hinge(state):                    # "a" first; once "a" has more rounds, "b" joins
        asked.append(1)
        return {"a"} if len(state["a"][1]) == 1 else {"a", "b"}

    got = confirm(be, cands, st, hinge, 2, 0, 1.0, quiet)
    assert got == frozenset("ab")
    # pass 1: a twice; pass 2: a and b twice each, side by side; then the set stood still
    assert len(st["a"][1]) == 1 + 2 + 2 and len(st["b"][1]) == 1 + 2
    assert len(st["c"][1]) == 1 and len(asked) == 3


def test_confirmation_stops_after_its_passes_and_does_nothing_at_zero_rounds():
    cands = [Cand(str(i)) for i in range(6)]
    be = Scripted({c.key: [1.0] for c in cands})
    st = measure_rounds(be, cands, 1, 0, 1.0, quiet)
    moving = iter(range(100))
    got = confirm(be, cands, st, lambda s: {str(next(moving))}, 1, 0, 1.0, quiet)
    assert got == {"0", "1", "2"} and sum(len(st[c.key][1]) for c in cands) == 6 + PASSES
    assert confirm(be, cands, st, lambda s: {"0"}, 0, 0, 1.0, quiet) == frozenset()


def test_a_candidate_failing_in_its_confirmation_is_not_confirmed():
    cands = [Cand("a"), Cand("b")]
    be = Scripted({"a": [1.0, "fail"], "b": [2.0]})
    st = measure_rounds(be, cands, 1, 0, 1.0, quiet)
    assert confirm(be, cands, st, lambda s: {"a", "b"}, 2, 0, 1.0, quiet) == frozenset("b")
    assert st["a"][0] == Status.FAILED


def point(key, pred, corr, meas, status=Status.OK):
    return CheckedCandidate("", key, status, pred, corr, corr, meas)


def test_hinges_are_each_models_pick_and_the_three_fastest():
    pts = [point("p", 1.0, 9.0, 5.0), point("q", 2.0, 0.5, 6.0), point("f1", 3.0, 3.0, 1.0),
           point("f2", 4.0, 4.0, 2.0), point("f3", 5.0, 5.0, 3.0), point("slow", 6.0, 6.0, 9.0),
           point("x", 0.1, 0.1, None, Status.FAILED)]
    assert hinges(pts) == {"p", "q", "f1", "f2", "f3"}
    assert hinges([point("a", 1.0, None, 2.0), point("b", 2.0, None, 1.0)]) == {"a", "b"}
    assert hinges([]) == set()
