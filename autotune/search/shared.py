"""Several workers on one search: trials live in a shared Optuna study (journal file or RDB),
claimed atomically, each written to the plan database under the study's name and number."""
from __future__ import annotations

import os
import time

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from db.keys import PlanKey
from db.store import PlanDB

from autotune.search.state import SearchState
from autotune.search.config import Progress, SearchResult, make_sampler
from autotune.search.confirm import confirm, wants_confirmation
from autotune.search.storage import open_storage, shared_study_name


def _create_study_once(storage, name: str) -> bool:
    """Create study ``name``; True for exactly one caller however many race (the storage's
    unique study names arbitrate: RDB constraint, journal log order)."""
    try:
        storage.create_new_study([StudyDirection.MINIMIZE], name)
        return True
    except optuna.exceptions.DuplicatedStudyError:
        return False


def _claim(study, storage, study_id: int):
    """Atomically take a WAITING trial of the shared study (the same test-and-set Optuna's
    own ask() uses); (trial_id, frozen trial), or None when none is left."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        tid = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if storage.set_trial_state_values(tid, state=TrialState.RUNNING):
                return tid, t
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return None


def search_shared(s: SearchState, db: PlanDB, key: PlanKey, on_trial) -> SearchResult:
    """One worker of a search shared through Optuna's storage.

    Budget: the study holds exactly ``budget`` trials.  One worker per budget value (the one
    that creates the marker study ``NAME:budget=N``) enqueues what is missing: the named
    plans and the model's favourites when the study is new, then empty trials (slots) whose
    parameters the sampler chooses when a worker takes them.  Workers only ever take queued
    trials, with the storage's atomic WAITING -> RUNNING switch, so no trial is run twice and
    none is created beyond the budget.  Each trial is written to the plan DB under the
    study's name and Optuna's trial number: the pair is unique, so a row is never duplicated.

    The confirmation (:mod:`autotune.search.confirm`) runs once per budget, in the worker
    that finds every trial of the study finished: the last one to finish (the one that
    creates the marker study ``NAME:confirmed=N`` should several finish at once).  It
    confirms the trials its own plan database holds.
    """
    config = s.config
    storage = open_storage(config.storage)
    name = shared_study_name(key, config)
    _create_study_once(storage, name)
    # every worker draws its own proposals: the same seed would propose the same points
    seed = int(np.random.SeedSequence([config.seed, os.getpid()]).generate_state(1)[0])
    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=make_sampler(config.sampler, seed, shared=True))
    study_id = storage.get_study_id_from_name(name)
    ready = f"budget:{config.budget}"
    queue = s.queue() if not study.get_trials(deepcopy=False) else []
    if _create_study_once(storage, f"{name}:budget={config.budget}"):
        existing = study.get_trials(deepcopy=False)
        missing = config.budget - len(existing)
        firsts = (queue if not existing else [])[:max(missing, 0)]
        for params, cname in firsts:
            study.enqueue_trial(params, user_attrs={"name": cname})
        for _ in range(missing - len(firsts)):
            study.enqueue_trial({})
        study.set_user_attr(ready, True)
    else:   # another worker tops up: wait until it has queued the trials (or seems gone)
        deadline = time.monotonic() + 120
        while ready not in study.user_attrs and time.monotonic() < deadline:
            time.sleep(0.2)

    rows_seen: set[int] = set()
    rng = np.random.default_rng(seed)
    while True:
        for t in db.trials(key.key, name):          # what other workers sharing the DB did
            if t.number not in rows_seen:
                rows_seen.add(t.number)
                s.absorb(t)
        claimed = _claim(study, storage, study_id)
        if claimed is None:
            break
        tid, frozen = claimed
        if s.incumbent and frozen.number % s.config.local_every == 1 and \
                not frozen.system_attrs.get("fixed_params"):
            nb = s.neighbour(rng)
            if nb is not None:     # how enqueue_trial fixes a trial's parameters
                storage.set_trial_system_attr(tid, "fixed_params", nb)
        trial = optuna.Trial(study, tid)
        outcome = s.evaluate(trial)
        db.add_trial(key, name, trial.number, outcome)
        rows_seen.add(trial.number)
        s.finish(study, trial, outcome, None)
        _shared_progress(s.prog, study)
        if on_trial:
            on_trial(s.prog)
    _shared_progress(s.prog, study)
    confirmed = None
    if _all_finished(study) and wants_confirmation(s, db.best(key.key)) and \
            _create_study_once(storage, f"{name}:confirmed={config.budget}"):
        confirmed = confirm(s, db, key, name, on_trial)
    return SearchResult(key, name, s.prog, db.best(key.key), confirmed)


def _all_finished(study) -> bool:
    """No trial of the shared study waits or runs (this worker's own were told first, so the
    last worker to finish sees every trial finished)."""
    return not study.get_trials(deepcopy=False, states=(TrialState.WAITING,
                                                        TrialState.RUNNING))


def _shared_progress(prog: Progress, study) -> None:
    """Counts over the whole shared study (every worker's finished trials)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                    TrialState.FAIL))
    prog.done = len(done)
    prog.measured = sum(t.state == TrialState.COMPLETE for t in done)
    prog.pruned = sum(t.state == TrialState.PRUNED for t in done)
    prog.failed = sum(t.state == TrialState.FAIL for t in done)
    ok = [t for t in done if t.state == TrialState.COMPLETE]
    if ok:
        best = min(ok, key=lambda t: t.value)
        if prog.best_s is None or best.value < prog.best_s:
            # another worker's trial (whose plan-DB row this worker may not see)
            prog.best_s = best.value
            prog.best_name = best.user_attrs.get("name") or f"trial {best.number}"
