"""Checking and timing the contenders of a benchmark: every one verified against the reference
before any timing, then interleaved rounds with a pause before each contender's turn."""
from __future__ import annotations

import random
import time

from db.records import Status
from search_spaces.workload import Workload

from autotune.backends.base import (MAX_CALLS, MIN_ROUND_S, WARM_UP_S,  # noqa: F401
                                    calls_per_round, verify, warm_up)
from autotune.bench.runners import Runner, first_line, seconds_per_call
from autotune.report.units import fmt_s

# One process holds several thread pools (our OpenMP, torch's, OpenBLAS's, XLA's Eigen pool) on
# the same cores; a pool that just finished may keep spinning and slow whichever contender runs
# next.  A pause before each timed run lets them go idle.  Attention (S=256) on 2 cores, 5
# rounds: without it medians were 1.2-4.5x the minimum (torch.compile 60 vs 13 ms); with it
# (and OpenMP waiting passively, see autotune.backends.cpu.executor) 1.1-1.3x.
SETTLE_S = 0.2


def check_outputs(w: Workload, runners: dict, rows: dict, ref, say) -> None:
    """Every contender's outputs against the reference, before any timing: a failing or wrong
    one is recorded and dropped from ``runners``."""
    for name in list(runners):
        r, info = runners[name], rows[name]
        try:
            t0 = time.perf_counter()
            outs = r.call()
            info["first_call_s"] = time.perf_counter() - t0
            err, why = verify(r.to_host(outs), ref, w.rtol)
            del outs
            r.call()                            # one more untimed warm-up run
        except Exception as e:
            info.update(status=Status.FAILED, error=first_line(e))
            say(f"{name}: FAILED: {info['error']}")
            getattr(r, "close", lambda: None)()   # a peer's own process
            del runners[name]
            continue
        info["rel_err"] = err
        if why:
            info.update(status=Status.WRONG, error=why)
            say(f"{name}: WRONG ({why}); not timed")
            getattr(r, "close", lambda: None)()   # a peer's own process
            del runners[name]
            continue
        info["status"] = Status.OK
        say(f"{name}: rel err {err:.2g}  (first call {fmt_s(info['first_call_s'])})")


# A contender faster than MIN_ROUND_S is called calls_per_round times in a row within each of its
# rounds, and the round's figure is the mean of those calls (autotune.backends.base has the
# evidence; a search's confirmation rounds follow the same rule).
# ... and a contender under this makes untimed calls after the pause, before its timed ones:
# the first call after 0.2 s idle paid 3-15 ms of waking up (gated_mlp's heuristic plan, the
# same process: 6-12 ms medians back to back, 22-26 ms one call after each 0.2 s pause), which
# is most of a few-ms contender and under 2 % of a 1 s one.
ROUND_WARM_BELOW_S = 1.0
# (One untimed call is not enough on a shared virtual machine: the waking up is counted in
# time, not calls; autotune.backends.base.WARM_UP_S has the figures.)


def time_rounds(runners: dict, rounds: int, seed: int, say, settle_s: float = SETTLE_S,
                min_round_s: float = MIN_ROUND_S, warm_s: float = WARM_UP_S
                ) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Interleaved rounds: each contender once per round, in a shuffled order, each after a
    pause of ``settle_s`` in which the previous one's worker threads go idle; a contender
    faster than ``min_round_s`` runs :func:`calls_per_round` calls back to back in its turn
    and the round records their mean (the count from one timed call first), one faster than
    :data:`ROUND_WARM_BELOW_S` after untimed calls for ``warm_s``
    (:func:`autotune.backends.base.warm_up`).  Returns each contender's per-round seconds and
    its calls per round."""
    def per_call(r, n: int, warm_s: float | None) -> float:
        # a Runner knows where it runs; a bare object with a call() (the tests') runs here
        if isinstance(r, Runner):
            return r.seconds_per_call(n, warm_s)
        return seconds_per_call(r.call, n, warm_s)

    batch, warm = {}, {}
    for name, r in runners.items():
        took = per_call(r, 1, None)
        batch[name] = calls_per_round(took, min_round_s)
        warm[name] = took < ROUND_WARM_BELOW_S
    times: dict[str, list[float]] = {n: [] for n in runners}
    rng = random.Random(seed)
    for k in range(rounds):
        order = list(runners)
        rng.shuffle(order)
        for name in order:
            time.sleep(settle_s)
            # the warm-up wakes what the pause put to sleep
            times[name].append(per_call(runners[name], batch[name],
                                        warm_s if warm[name] else None))
        say(f"round {k + 1}/{rounds}: " + "  ".join(f"{n} {fmt_s(times[n][-1])}" for n in order))
    return times, batch
