"""The search with the learned correction, on a fake backend whose "measured" times are the
analytic prediction times a distortion that one feature of the cost breakdown explains: the
corrected search prunes differently and better; the correction starts from what the plan DB
holds for the device; both predictions are stored."""
from __future__ import annotations

import dataclasses
import math

import pytest

from costmodel import estimate
from costmodel.features import FEATURES, features
from db.store import PlanDB
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace, TileBounds

from autotune.backends.factory import backend_kind
from autotune.backends.fake import FakeBackend
from autotune.search.learning import Learner, rebuild_workload
from tests.support.fake_search import CHEAP, DEV, REUSED, fake_key, run

TILE = FEATURES.index("log_tile_elems")
SLOPE = 0.5     # measured = analytic x (elements per tile)^0.5: big tiles are slower than modelled


def true_s(w, cand) -> float:
    est = estimate(w, cand, DEV)
    return est.total_s * math.exp(SLOPE * features(w, est, DEV)[TILE])


class Distorted(FakeBackend):
    """The fake's noisy analytic time times the distortion."""

    def run_time(self, cand, run):
        return super().run_time(cand, run) * math.exp(
            SLOPE * features(self.w, estimate(self.w, cand, self.dev), self.dev)[TILE])


@pytest.fixture(scope="module")
def w():
    return load_workload("gated_mlp")       # default dims: the fake backend runs nothing


@pytest.fixture(scope="module")
def space(w):
    # the cpu kind's loop tiles without the generated kernel: the distortion lives in the loop
    # groups' tiles, and the comparison of decisions counts on the draws such a space offers
    # (tests/costmodel/test_correction.py covers the features of kernel candidates); no chain
    # either, whose draws the same comparison did not count on (its MLP's plain chain)
    return SearchSpace(w, TileBounds(1, backend_kind("cpu").tile_bounds.hi, chains=False))


CONFIG = dataclasses.replace(CHEAP, budget=60, model_pool=50, model_seeds=4)


def decisions(w, rows, factor: float = 2.0) -> tuple[int, int]:
    """(wrongly pruned, wasted measurements) against the true times: a candidate is worth a
    measurement iff it truly runs within ``factor`` x the true best measured before it."""
    best, pruned_wrong, wasted = math.inf, 0, 0
    for r in rows:
        if r.error == REUSED:
            continue
        t = true_s(w, r.to_candidate())
        worth = best == math.inf or t <= factor * best
        pruned_wrong += r.status == "pruned" and worth
        wasted += r.status == "ok" and not worth
        if r.status == "ok":
            best = min(best, t)
    return pruned_wrong, wasted


SEEDS = range(1, 9)


def test_the_corrected_search_prunes_differently_and_better(w, space, fast_tmp):
    """Over eight searches (seeds): each one's corrected run sees the same proposals and
    decides differently; together they prune wrongly or measure in vain less than two thirds
    as often, and in the typical search (the median over seeds) the corrected predictions are
    off by less than half the analytic ones.  Taken together because the fit on one search's
    few dozen measurements is sometimes lucky and sometimes not (seeds 1 and 2 alone once
    stood for the whole claim; on other seeds single searches missed one figure or another
    before and after changes to the analytic model)."""
    wasted = {False: 0, True: 0}
    ratios = []
    for seed in SEEDS:
        out = {}
        for learn in (False, True):
            config = dataclasses.replace(CONFIG, seed=seed, learn=learn)
            with PlanDB(fast_tmp / f"{seed}-{learn}.sqlite") as db:
                _, rows, _ = run(w, space, db, config, Distorted(w, DEV, sigma=0.05))
            out[learn] = rows
            wasted[learn] += sum(decisions(w, rows))
        plain, learnt = out[False], out[True]
        # the random sampler proposes the same candidates to both: only the decisions differ
        assert [r.candidate for r in plain] == [r.candidate for r in learnt]
        assert all(r.corrected_s == r.predicted_s for r in plain)
        corrected = [r for r in learnt if r.corrected_s != r.predicted_s]
        assert len(corrected) > 20                     # the correction was on for most trials
        assert any(r.error.startswith("corrected prediction") for r in learnt
                   if r.status == "pruned")
        assert [r.status for r in plain] != [r.status for r in learnt]
        err = lambda key: sorted(abs(math.log(getattr(r, key) / true_s(w, r.to_candidate())))
                                 for r in corrected)[len(corrected) // 2]
        ratios.append(err("corrected_s") / err("predicted_s"))
    # two thirds: 120 against 205 since the model's tile dealing and cache-set terms (the
    # fake's landscape moved: 89 against 199 before them); a correction that taught nothing
    # would make as many bad decisions as the plain search
    assert wasted[True] < wasted[False] * 2 / 3, wasted
    assert sorted(ratios)[len(ratios) // 2] < 0.5, ratios


def test_the_correction_starts_from_the_devices_measured_trials(w, space, fresh_db):
    run(w, space, fresh_db, dataclasses.replace(CONFIG, seed=1), Distorted(w, DEV, sigma=0.05))
    # another workload (other dims of a built-in) on the same device: fitted before trial 1
    other = load_workload("gated_mlp", {"T": 256})
    assert other.hash != w.hash
    learner = Learner(other, DEV)
    used = learner.load(fresh_db, fake_key(other))
    assert used == len([t for t in fresh_db.trials(fake_key(w).key) if t.status == "ok"])
    assert learner.correction.active and learner.fits == 1
    assert {s.weight for s in learner.samples()} == {0.5}          # none of its own yet
    other_space = SearchSpace(other, backend_kind("cpu").tile_bounds)
    _, rows, _ = run(other, other_space, fresh_db, dataclasses.replace(CONFIG, budget=5),
                     Distorted(other, DEV, sigma=0.05))
    assert all(r.corrected_s != r.predicted_s for r in rows)       # from the first trial on


def test_rows_read_twice_count_once_and_fresh_measurements_refit(w, space, fresh_db):
    run(w, space, fresh_db, dataclasses.replace(CONFIG, budget=30, seed=2),
        Distorted(w, DEV, sigma=0.05))
    rows = fresh_db.trials(fake_key(w).key)
    learner = Learner(w, DEV, refit_every=3)
    learner.load(fresh_db, fake_key(w))
    n = len(learner.samples())
    assert n == len({r.to_candidate().key for r in rows if r.status == "ok"})
    assert not any(learner.observe_stored(r) for r in rows)         # replayed: seen already
    assert len(learner.samples()) == n and learner.fits == 1
    fresh = [space.random(__import__("numpy").random.default_rng(5)) for _ in range(3)]
    refits = [learner.observe(c, true_s(w, c)) for c in fresh]
    assert refits == [False, False, True] and learner.fits == 2


def test_a_workload_from_a_file_is_not_rebuilt(w):
    import json
    canon = json.dumps(w.canonical())
    assert rebuild_workload("gated_mlp", canon, w.hash).hash == w.hash
    assert rebuild_workload("gated_mlp", canon, "0" * 64) is None        # changed since
    assert rebuild_workload("my_model", canon, w.hash) is None           # not a built-in


# ---- group by group ----------------------------------------------------------------------------

def group_true(w, cand) -> tuple[float, tuple[tuple[str, float], ...]]:
    """(total, each group's seconds) when memory-bound loop groups run 6x their analytic time
    and compute-bound ones half of it: residuals of kinds of groups, which the totals blur
    across candidates (and which reorder them)."""
    est = estimate(w, cand, DEV)
    factor = lambda g: 1.0 if g.impl != "loop" else 6.0 if g.bound == "memory" else 0.5
    groups = tuple((g.anchor, g.predicted_s * factor(g)) for g in est.groups)
    return est.total_s - sum(g.predicted_s for g in est.groups) + sum(s for _, s in groups), \
        groups


class GroupDistorted(FakeBackend):
    """The fake with the residual above, in its totals and in its group times."""

    def run_time(self, cand, run):
        return super().run_time(cand, run) / self._estimate(cand).total_s * \
            group_true(self.w, cand)[0]

    def group_times(self, cand, seconds):
        total, groups = group_true(self.w, cand)
        return tuple((a, s * seconds / total) for a, s in groups)


def test_timed_groups_are_stored_and_the_group_fit_corrects_by_kind_of_group(w, space,
                                                                            fresh_db):
    run(w, space, fresh_db, dataclasses.replace(CONFIG, seed=3),
        GroupDistorted(w, DEV, sigma=0.02))
    rows = [r for r in fresh_db.trials(fake_key(w).key) if r.status == "ok" and r.times]
    assert rows and all(dict(r.groups) for r in rows)
    for r in rows:               # each trial's groups are its plan's, summing to its median
        est = estimate(w, r.to_candidate(), DEV)
        assert [a for a, _ in r.groups] == [g.anchor for g in est.groups]
    learner = Learner(w, DEV)
    learner.load(fresh_db, fake_key(w))
    assert learner.groups_fit.active and learner.active
    assert learner.groups_fit.cv_rho > learner.groups_fit.cv_rho_analytic
    # unseen candidates: the group fit's predictions are close to the truth, the analytic not
    import numpy as np
    rng = np.random.default_rng(11)
    seen = {r.to_candidate().key for r in rows}
    fresh = [c for c in (space.random(rng) for _ in range(80)) if c.key not in seen][:30]
    err = lambda f: sorted(abs(math.log(f(c) / group_true(w, c)[0])) for c in fresh)
    corrected = err(learner.seconds)
    analytic = err(lambda c: estimate(w, c, DEV).total_s)
    assert corrected[len(fresh) // 2] < analytic[len(fresh) // 2] / 3


def test_group_times_of_another_code_generator_are_never_taken_for_todays(w, space, fresh_db):
    """Trials stored under another code version (``autotune.code_version``: the plan key's
    ``codegen`` library) teach through their features only: none of their group times is
    memorised for today's signatures, and they rank as a population of their own; under
    their own code version the same rows are memorised."""
    import json

    from db.keys import PlanKey
    run(w, space, fresh_db, dataclasses.replace(CONFIG, seed=4),
        GroupDistorted(w, DEV, sigma=0.02))
    measured = [r.to_candidate() for r in fresh_db.trials(fake_key(w).key)
                if r.status == "ok" and r.groups]
    own, newer = fake_key(w), PlanKey(**{**fake_key(w).parts(),
                                         "libraries_json": json.dumps({"codegen": "newer"})})
    hits = {}
    for key in (own, newer):
        learner = Learner(w, DEV)
        learner.load(fresh_db, key)
        assert learner.groups_fit.active
        memo = dict(learner.groups_fit.memo)
        hits[key.key] = sum(g.signature in memo for c in measured for _, g in learner.group_obs(c))
        populations = {s.group for s in learner.samples()}
        assert populations == ({w.hash} if key is own else {f"{w.hash}@unversioned"})
    assert hits[own.key] >= len(measured) and hits[newer.key] == 0
