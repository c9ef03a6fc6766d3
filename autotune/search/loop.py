"""The search: Optuna ask/tell over the space, the cost model as a filter, every trial persisted.

Order of trials: the named plans (unfused, heuristic, greedy), then the candidates the cost model
ranks best (:mod:`autotune.search.proposals`), then the sampler, with one trial in ``local_every``
the model's pick among mutations of the best plan so far.  A candidate predicted more than the
prune factor times slower than the prediction for the best measured candidate is recorded as
pruned without running (the model's ratios are trusted, not its absolute seconds, and only as
far as its measured errors allow: :mod:`autotune.search.trust`); predictions
are corrected by what the measurements taught (:mod:`autotune.search.learning`).  Each
finished trial is written to the database at once; a rerun of the same search replays them into
the study and continues.  At the end the finalists are re-measured side by side and the winner
is cached (:mod:`autotune.search.confirm`).  Several workers on one shared study:
:mod:`autotune.search.shared`.
"""
from __future__ import annotations

import json
import warnings
from typing import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from costmodel.devices import DeviceSpec
from db.keys import PlanKey
from db.records import Status
from db.store import PlanDB
from search_spaces.space import SearchSpace
from search_spaces.workload import Workload

from autotune.search.config import Progress, SearchConfig, SearchResult, make_sampler
from autotune.search.confirm import confirm, is_confirmed, wants_confirmation
from autotune.search.state import SearchState


# Repeated proposals skipped in a row before one is written as a trial (and spends the
# budget): a space smaller than the budget, or a sampler that only repeats, still ends.
MAX_REPEATS = 20


def _distributions(params: dict, options: dict) -> dict:
    return {k: CategoricalDistribution(options[k]) for k in params}


def search(w: Workload, space: SearchSpace, backend, db: PlanDB, key: PlanKey, dev: DeviceSpec,
           config: SearchConfig, on_trial: Callable[[Progress], None] | None = None,
           memory_available: Callable[[], int | None] | None = None) -> SearchResult:
    """Run (or continue) the search for ``key`` until ``config.budget`` trials exist.

    ``memory_available()`` -> bytes (or None: unknown): a candidate whose predicted memory
    (costmodel.memory_bytes) exceeds it is recorded failed without running.  With
    ``config.storage`` the trials live in a shared Optuna study that other workers (other
    processes, other machines) run at the same time; see :func:`autotune.search.shared.search_shared`.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
    s = SearchState(w, space, backend, dev, config, memory_available)
    if config.learn:     # what this device's measured trials teach, before the first trial
        s.learner.load(db, key)
    if config.storage:
        from autotune.search.shared import search_shared
        s.prepare_backend()      # inputs and reference while the shared study is set up
        return search_shared(s, db, key, on_trial)
    study_name = f"{config.sampler}-seed{config.seed}"
    study = optuna.create_study(direction="minimize", sampler=make_sampler(config.sampler,
                                                                          config.seed))
    # ---- replay what an earlier run of this search finished --------------------------------
    for t in db.trials(key.key, study_name):
        s.absorb(t)
        if t.params and all(k in t.options for k in t.params):
            state = {Status.OK: TrialState.COMPLETE, Status.FAILED: TrialState.FAIL}.get(
                t.status, TrialState.PRUNED)
            study.add_trial(create_trial(
                params=t.params, distributions=_distributions(t.params, t.options), state=state,
                value=t.measured_s if state == TrialState.COMPLETE else None))
    prog = s.prog
    if prog.done and is_confirmed(best := db.best(key.key)):
        # the bar for early stops is the confirmed median, not a lucky run it overruled
        prog.best_s, prog.best_name, s.best_pred = best.measured_s, best.name or \
            best.to_candidate().key[:12], best.predicted_s
    if on_trial and prog.done:
        on_trial(prog)

    # ---- queue: named plans, then the model's favourites -----------------------------------
    if prog.done < config.budget:
        # the worker builds the inputs and the float64 reference while the model ranks its
        # pool (at trimul N=702: 11 s of ranking beside 13-18 s of reference)
        s.prepare_backend()
    if prog.done == 0:
        for params, name in s.queue():
            study.enqueue_trial(params, user_attrs={"name": name})

    rng = np.random.default_rng(config.seed + prog.done)
    repeats = 0          # sampler proposals in a row that repeated an earlier trial
    while prog.done < config.budget:
        # One trial in local_every is a model-filtered neighbour of the best plan so far
        # (local search around the incumbent); the rest come from the sampler.
        if s.incumbent and prog.done % config.local_every == 1 and not _queued(study):
            nb = s.neighbour(rng)
            if nb is not None:
                study.enqueue_trial(nb)
        trial = study.ask()
        outcome = s.evaluate(trial)
        if s.is_repeat(outcome) and repeats < MAX_REPEATS:
            # The sampler proposed a candidate an earlier trial already had (TPE does, more
            # and more as it converges; in a 600-candidate space a third of a 150-trial
            # budget went to repeats): Optuna is told, the budget is not spent, and the
            # model's pick among the incumbent's unseen neighbours goes next.
            s.tell(study, trial, outcome)
            repeats += 1
            nb = s.neighbour(rng) if s.incumbent and not _queued(study) else None
            if nb is not None:
                study.enqueue_trial(nb)
            continue
        repeats = 0
        db.append_trial(key, study_name, outcome)
        s.finish(study, trial, outcome, on_trial)
    confirmed = confirm(s, db, key, study_name, on_trial) \
        if wants_confirmation(s, db.best(key.key)) else None
    return SearchResult(key, study_name, prog, db.best(key.key), confirmed)


def _queued(study: optuna.Study) -> bool:
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))
