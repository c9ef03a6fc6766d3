"""Finalists confirmed: the end of a search re-measures its best candidates side by side.

Each trial of a search is measured at its own moment, most of them once or twice; on a shared
machine one of them may have caught a quiet second (and look faster than it is) or a busy one
(and look slower).  So at the end the finalists are re-measured in one measuring process, in
interleaved rounds (:meth:`autotune.backends.base.Backend.confirm`), and the winner by median
becomes the cached best, replacing a faster single run (:meth:`db.store.PlanDB.add_confirmation`,
which also stores the confirmation's runs as trials of the study ``<study>:confirm``).

The finalists (:func:`pick_finalists`): the ``finalists`` fastest measured candidates, the named
plans that were measured (but those whose repeated runs were all far slower than the fastest
measurement, :data:`OUT_OF_REACH`, where confirming them would take notable time), those of the
``finalists`` candidates the model predicts fastest that were measured only once (a first run
the early stop did not repeat) or under load (runs this process had to take while the machine
was busy), and the best stored before the confirmation (another study's, say).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from db.keys import PlanKey
from db.records import BestPlan, Status, StoredTrial, TrialOutcome, is_confirmation
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.plans import SEED_NAMES

from autotune.backends.base import Leniency, calls_per_round
from autotune.search.config import Confirmation, SearchConfig
from autotune.search.state import SearchState

FASTEST, NAMED, MODEL, STORED = "fastest", "named", "model", "stored best"


@dataclass(frozen=True)
class Finalist:
    """A candidate to confirm, what the search knew of it, and why it was picked (``why``:
    any of FASTEST, NAMED, MODEL, STORED)."""
    candidate: Candidate
    predicted_s: float | None
    measured_s: float | None
    why: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.candidate.name or self.candidate.key[:12]


# A named plan whose repeated, unloaded runs have a median this many times the fastest
# measurement's (or more than the search's give-up band, if that is wider) is not confirmed:
# it is slow, not unlucky.  At trimul N=702 the unfused plan (2.5x the best) took ~20 s of a
# confirmation's ~55 s: three rounds of 4 s, its compile and its check.
OUT_OF_REACH = 1.5
# ... unless confirming it costs next to nothing: its rounds take at most this many seconds.
# attention's heuristic plan, the first trial of a `bench --all` search, ran 3.84 ms thrice
# (2.1x the fastest) and was left out; in the bench that followed it ran 1.76 ms, ahead of
# the cached 1.84 ms.
CHEAP_CONFIRM_S = 1.0


def out_of_reach(t: StoredTrial, fastest: float, reach: float, loaded: frozenset[str],
                 rounds: int) -> bool:
    return len(t.times) >= 2 and t.to_candidate().key not in loaded and \
        t.measured_s is not None and t.measured_s > reach * fastest and \
        t.measured_s * rounds > CHEAP_CONFIRM_S


def pick_finalists(trials: list[StoredTrial], best: BestPlan | None, config: SearchConfig,
                   loaded: frozenset[str] = frozenset(), reach: float = OUT_OF_REACH
                   ) -> list[Finalist]:
    """The finalists among a search's ``trials`` (and the stored ``best``), in this order:
    fastest first, then named plans, the model's picks, the stored best; each once.
    ``loaded``: keys of candidates measured under load; ``reach``: how many times the fastest
    measurement a named plan's repeated runs may be and still be confirmed."""
    ok: dict[str, StoredTrial] = {}
    for t in trials:
        if t.status == Status.OK and not is_confirmation(t.study):
            ok.setdefault(t.to_candidate().key, t)       # a later trial of it reused this one
    n = config.finalists
    picks: list[tuple[StoredTrial, str]] = []
    picks += [(t, FASTEST) for t in sorted(ok.values(), key=lambda t: t.measured_s)[:n]]
    fastest = min((t.measured_s for t in ok.values()), default=math.inf)
    picks += [(t, NAMED) for t in ok.values() if t.name in SEED_NAMES
              and not out_of_reach(t, fastest, reach, loaded, config.confirm_rounds)]
    by_model = sorted(ok.values(), key=lambda t: t.predicted_s or math.inf)[:n]
    picks += [(t, MODEL) for t in by_model
              if len(t.times) <= 1 or t.to_candidate().key in loaded]
    why: dict[str, list[str]] = {}
    found: dict[str, Finalist] = {}
    for t, reason in picks:
        key = t.to_candidate().key
        why.setdefault(key, []).append(reason)
        found.setdefault(key, Finalist(t.to_candidate(), t.predicted_s, t.measured_s, ()))
    if best is not None:
        cand = best.to_candidate()
        why.setdefault(cand.key, []).append(STORED)
        found.setdefault(cand.key, Finalist(cand, best.predicted_s, best.measured_s, ()))
    return [Finalist(f.candidate, f.predicted_s, f.measured_s, tuple(why[k]))
            for k, f in found.items()]


def confirm_rounds(config: SearchConfig, measured: Sequence[float | None]) -> int:
    """Rounds of a confirmation of finalists measured at ``measured`` seconds a call:
    ``config.confirm_rounds`` at least, and more, up to ``config.max_confirm_rounds``, while
    they all fit in ``config.confirm_s`` (a plan under MIN_ROUND_S runs calls_per_round calls
    a round, as the confirmation does)."""
    least = config.confirm_rounds
    per_round = sum(t * calls_per_round(t) for t in measured if t is not None and t > 0)
    if least <= 0 or not per_round > 0:
        return least
    return max(least, min(config.max_confirm_rounds, int(config.confirm_s / per_round)))


def is_confirmed(best: BestPlan | None) -> bool:
    """Whether the stored best plan is the winner of a confirmation."""
    return best is not None and is_confirmation(best.study)


def wants_confirmation(s: SearchState, best: BestPlan | None) -> bool:
    """A search confirms when configured to, when it has something to confirm, and when this
    run measured something new or the stored best is no confirmation's winner yet (a rerun of
    a finished, confirmed search changes nothing)."""
    return s.config.confirm_rounds > 0 and best is not None and \
        (s.prog.new > 0 or not is_confirmed(best))


def confirm(s: SearchState, db: PlanDB, key: PlanKey, study: str, on_trial
            ) -> Confirmation | None:
    """Confirm the finalists of search ``study``; None when nothing was left to confirm or no
    finalist passed (the stored best is then unchanged)."""
    band = s.backend.settings.give_up_at(Leniency(s.noise.spread()))
    finals = pick_finalists(db.trials(key.key, study), db.best(key.key), s.config,
                            frozenset(s.loaded), max(OUT_OF_REACH, band))
    if not finals:
        return None
    rounds = confirm_rounds(s.config, [f.measured_s for f in finals])
    prog = s.prog
    prog.last = f"confirming {len(finals)} finalists x {rounds} rounds"
    if on_trial:
        on_trial(prog)
    # each finalist's runs are given what one of its trial runs is: the compile, every round
    # and the runs made again under load
    runs = rounds + 1 + s.backend.settings.load_reruns
    limit = sum(s.run_limit(f.measured_s) * runs for f in finals) + s.timeout_floor()
    got = s.backend.confirm([f.candidate for f in finals], rounds, limit)
    outcomes = [TrialOutcome(f.candidate, m.status, f.predicted_s, m.median_s,
                             m.error or None, times=m.times, rel_err=m.rel_err)
                for f, m in zip(finals, got)]
    loaded = sum(m.loaded_runs for m in got)
    prog.loaded_runs += loaded
    prog.busy = loaded > 0
    if db.add_confirmation(key, study, outcomes) is None:
        prog.last = f"confirmation failed: {got[0].error if got else 'no finalist'}"
        if on_trial:
            on_trial(prog)
        return None
    # the winner as add_confirmation chose it: the first of the fastest medians
    win = min((i for i, m in enumerate(got) if m.status == Status.OK),
              key=lambda i: got[i].median_s)
    prog.best_s, prog.best_name = got[win].median_s, finals[win].label
    prog.last = f"confirmed {finals[win].label}: {prog.best_s:.4g} s"
    if on_trial:
        on_trial(prog)
    return Confirmation(rounds, tuple(f.label for f in finals), finals[win].label,
                        prog.best_s, sum(m.status != Status.OK for m in got), loaded)
