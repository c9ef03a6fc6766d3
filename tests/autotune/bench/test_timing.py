"""The bench's interleaved rounds: a contender faster than the round's minimum runs several calls
back to back in its turn (the round records their mean), a slow one runs once; each after
untimed calls for a while, which wake what the pause put to sleep."""
from __future__ import annotations

import time
from dataclasses import dataclass

from autotune.backends.base import warm_up
from autotune.bench.timing import MAX_CALLS, calls_per_round, time_rounds


@dataclass
class Sleeper:
    """A contender whose call sleeps ``seconds`` and counts itself."""
    seconds: float
    calls: int = 0
    ends: list = None

    def call(self):
        self.calls += 1
        time.sleep(self.seconds)
        self.ends = (self.ends or []) + [time.perf_counter()]
        return object()


def test_calls_per_round_fill_the_minimum_and_are_capped():
    assert calls_per_round(0.5, 0.1) == 1          # seconds-long: one call a round
    assert calls_per_round(0.01, 0.1) == 10
    assert calls_per_round(1e-7, 0.1) == MAX_CALLS
    assert calls_per_round(0.0, 0.1) == MAX_CALLS   # a clock that read nothing


def test_fast_contenders_are_batched_and_their_rounds_are_means():
    fast, slow = Sleeper(0.002), Sleeper(0.03)
    said = []
    times, calls = time_rounds({"fast": fast, "slow": slow}, rounds=3, seed=0, say=said.append,
                               settle_s=0.0, min_round_s=0.02, warm_s=0.0)
    assert calls["slow"] == 1 and 3 <= calls["fast"] <= 10
    # one timed call decides the batch, then every round makes one untimed call (warm_s=0: the
    # least warm-up; both are under ROUND_WARM_BELOW_S) and the batch
    assert slow.calls == 1 + 3 * 2 and fast.calls == 1 + 3 * (1 + calls["fast"])
    assert len(times["fast"]) == len(times["slow"]) == 3 and len(said) == 3
    # a round's figure is per call, not per batch
    assert all(0.002 <= t < 0.02 for t in times["fast"])
    assert all(t >= 0.03 for t in times["slow"])


def test_warm_up_is_counted_in_time_not_calls():
    fast, slow = Sleeper(0.002), Sleeper(0.03)
    # a fast contender makes untimed calls until the warm-up's time has passed, and no more: it
    # stops at the first call that ends past it (judged by the calls' own clock, so that a
    # loaded machine, where a 2 ms sleep takes 10, reads the same); a slow one makes one
    t0 = time.perf_counter()
    n = warm_up(fast.call, 0.05)
    assert fast.calls == n >= 3
    assert fast.ends[-1] - t0 >= 0.05 and fast.ends[-2] - t0 < 0.05 + 0.005
    assert warm_up(slow.call, 0.02) == 1
    before = fast.calls
    times, calls = time_rounds({"fast": fast}, rounds=2, seed=0, say=lambda _: None,
                               settle_s=0.0, min_round_s=0.01, warm_s=0.05)
    per_round = (fast.calls - before - 1) / 2      # less the call that sizes the batch
    assert per_round >= calls["fast"] + 3          # the batch plus a warm-up of several calls


def test_a_contender_over_a_second_is_not_warmed(monkeypatch):
    import autotune.bench.timing as timing
    monkeypatch.setattr(timing, "ROUND_WARM_BELOW_S", 0.01)
    slow = Sleeper(0.02)
    times, calls = time_rounds({"slow": slow}, rounds=2, seed=0, say=lambda _: None,
                               settle_s=0.0, min_round_s=0.01)
    assert calls["slow"] == 1 and slow.calls == 1 + 2
