"""The search's own logic on the fake backend (the cost model's time times seeded noise), in
milliseconds: the order of the first trials, pruning, the local-search cadence, failures and
the memory check.  Resume, replay and the shared study: test_search_replay.py."""
from __future__ import annotations

import dataclasses
import json

import pytest

import autotune.search.proposals as proposals
import autotune.search.state as state
from autotune.backends.factory import backend_kind
from autotune.backends.fake import FakeBackend
from autotune.backends.worker import timeout_message
from autotune.search.proposals import MODEL_MARGIN, model_favourites
from autotune.search.state import memory_error
from costmodel import estimate
from costmodel.model import memory_bytes
from db.store import PlanDB
from search_spaces.plans import chained_plan, named_plan, seed_plans
from search_spaces import load_workload
from search_spaces.space import SearchSpace, TileBounds

from tests.support.fake_search import (CHEAP, DEV, NAMED, REUSED, assert_best_is_min_ok, cand_of,
                                       fake_key, measured_keys, name_of, named_in_order,
                                       params_of_row, ran, run, unchained)


@pytest.fixture
def w(small):
    return unchained(small("gated_mlp"))


@pytest.fixture
def space(w):
    # the cpu kind's loop tiles without the generated kernel: these tests pin the order of the
    # first trials, which depends on every random draw from the space (the kernel impl, with
    # its parameters, changes those draws; tests/autotune/backends/test_kernel_impl.py covers it)
    return SearchSpace(w, TileBounds(1, backend_kind("cpu").tile_bounds.hi))


def favourites(w, space, config):
    named = {named_plan(space, n).key for n in NAMED}
    return model_favourites(w, space, DEV, config, named)


# ---- the first trials: named plans, then the model's favourites ----------------------------

def test_named_plans_then_model_favourites_come_before_the_sampler(w, space, fresh_db):
    config = dataclasses.replace(CHEAP, model_seeds=3, budget=9)
    favs = favourites(w, space, config)
    assert len(favs) == 3                     # the model does prefer some to every named plan
    _, rows, _ = run(w, space, fresh_db, config)
    assert [r.number for r in rows] == list(range(9))
    assert [name_of(r) for r in rows[:3]] == named_in_order(w, space)
    assert [cand_of(r).key for r in rows[3:6]] == [c.key for c in favs]
    named_best = min(r.predicted_s for r in rows[:3])
    preds = [r.predicted_s for r in rows[3:6]]
    assert preds == sorted(preds) and max(preds) < MODEL_MARGIN * named_best
    assert all(name_of(r) == "" for r in rows[3:])


def test_a_budget_the_named_plans_fill_skips_the_models_climb(w, space, fast_tmp, monkeypatch):
    # the climb prices thousands of candidates; with no slot left after the seeds it is skipped
    calls = []
    real = state.model_favourites
    monkeypatch.setattr(state, "model_favourites",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    for budget, climbs in ((3, []), (4, [1])):
        with PlanDB(fast_tmp / f"b{budget}.sqlite") as db:
            _, rows, _ = run(w, space, db, dataclasses.replace(CHEAP, model_seeds=3,
                                                               budget=budget))
        assert [name_of(r) for r in rows[:3]] == named_in_order(w, space)
        assert calls == climbs and len(rows) == budget
        if budget == 4:
            assert name_of(rows[3]) == "" and rows[3].predicted_s < min(
                r.predicted_s for r in rows[:3])          # a model favourite, not a draw


def test_a_space_with_a_chain_measures_the_chained_plan_among_the_named_ones(
        small, fresh_db, fast_tmp, monkeypatch):
    # a chain is two parameters away from the heuristic plan (its statement unsplit, the chain
    # on), so no one-step climb need reach it: the chained plan is measured up front
    w = small("attention")
    space = SearchSpace(w, TileBounds(1, backend_kind("cpu").tile_bounds.hi))
    assert space.chains
    seeds = {n: named_plan(space, n) for n in NAMED} | {"chained": chained_plan(space)}
    order = sorted(seeds, key=lambda n: estimate(w, seeds[n], DEV).total_s)
    _, rows, _ = run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=4))
    assert [name_of(r) for r in rows] == order
    assert cand_of(rows[order.index("chained")]).key == seeds["chained"].key
    # measured whatever its prediction (the model prices chains least surely): here predicted
    # 100 times its price, after every named plan, where a tiny factor prunes all but the first
    predict = state.Learner.predict

    def slow_chain(self, cand):
        est, corrected = predict(self, cand)
        k = 100.0 if cand.name == "chained" else 1.0
        return dataclasses.replace(est, total_s=est.total_s * k), corrected * k
    monkeypatch.setattr(state.Learner, "predict", slow_chain)
    db = PlanDB(fast_tmp / "tiny.sqlite")
    _, rows, backend = run(w, space, db, dataclasses.replace(CHEAP, budget=4, prune_factor=1e-9))
    db.close()
    assert name_of(rows[-1]) == "chained" and rows[-1].status == "ok"
    assert [r.status for r in rows[1:-1]] == ["pruned", "pruned"]
    # and none where the workload has no chain (outer_product_mean at its dims: a row of its
    # walk would keep N x E accumulators, over search_spaces.chain.PLAIN_MAX_ACC) or its
    # [space] turns chains off
    none = load_workload("outer_product_mean")
    assert not SearchSpace(none).chains and "chained" not in [
        c.name for c in seed_plans(SearchSpace(none))]
    off = SearchSpace(dataclasses.replace(w, space_json=json.dumps({**w.space, "chains": False})))
    assert not off.chains and "chained" not in [c.name for c in seed_plans(off)]


def test_a_budget_shorter_than_the_queue_runs_its_head(w, space, fresh_db):
    result, rows, _ = run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=2))
    assert [name_of(r) for r in rows] == named_in_order(w, space)[:2]
    assert result.progress.done == 2


def test_the_backend_starts_before_the_model_ranks_its_pool(w, space, fresh_db):
    backend = FakeBackend(w, DEV)
    run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=4), backend)
    assert backend.prepared_after == 0 and backend.calls


# ---- pruning -------------------------------------------------------------------------------

def test_a_huge_prune_factor_prunes_nothing(w, space, fast_tmp):
    config = dataclasses.replace(CHEAP, budget=12)
    with PlanDB(fast_tmp / "a.sqlite") as db:
        default, _, _ = run(w, space, db, config)
    assert default.progress.pruned > 0        # the same search prunes at the default factor
    with PlanDB(fast_tmp / "b.sqlite") as db:
        result, rows, backend = run(w, space, db, dataclasses.replace(config, prune_factor=1e9))
    assert result.progress.pruned == 0 and not [r for r in rows if r.status == "pruned"]
    assert measured_keys(backend) == [cand_of(r).key for r in rows if ran(r)]
    assert result.progress.measured == len(rows) == 12


def test_a_tiny_prune_factor_measures_only_the_first_plan(w, space, fresh_db):
    result, rows, backend = run(w, space, fresh_db,
                                dataclasses.replace(CHEAP, budget=12, prune_factor=1e-9))
    unfused = rows[0]      # the plan predicted fastest (the name is kept from older days)
    assert name_of(unfused) == named_in_order(w, space)[0] and unfused.status == "ok"
    assert measured_keys(backend) == [cand_of(unfused).key]
    for r in rows[1:]:
        if cand_of(r).key == cand_of(unfused).key:
            assert r.status == "ok" and r.error == REUSED
        else:
            assert r.status == "pruned"
            assert r.error == (f"predicted {r.predicted_s:.3g} s > 1e-09 x "
                                  f"{unfused.predicted_s:.3g} s")
    assert result.best.candidate == unfused.candidate


def test_exact_measurements_keep_exactly_the_predicted_records(w, space, fresh_db):
    """Noise off and prune_factor 1: a candidate runs iff the model predicts it no slower
    than the best measured one, so the survivors are known from the predictions alone."""
    backend = FakeBackend(w, DEV, sigma=0.0)
    config = dataclasses.replace(CHEAP, budget=20, prune_factor=1.0)
    result, rows, _ = run(w, space, fresh_db, config, backend)
    best_pred, seen, survivors = None, set(), []
    for r in rows:
        key = cand_of(r).key
        if key in seen:
            assert r.error == REUSED
        elif best_pred is not None and r.predicted_s > best_pred:
            assert r.status == "pruned", r
            assert r.error == f"predicted {r.predicted_s:.3g} s > 1 x {best_pred:.3g} s"
        else:
            assert r.status == "ok" and r.measured_s == pytest.approx(r.predicted_s)
            survivors.append(key)
            seen.add(key)
            best_pred = min(best_pred or r.predicted_s, r.predicted_s)
    assert len(survivors) >= 2 and result.progress.pruned >= 5       # some of each
    assert measured_keys(backend) == survivors
    assert_best_is_min_ok(fresh_db, fake_key(w), rows)


# ---- local search around the incumbent -----------------------------------------------------

def test_every_local_every_th_trial_is_the_models_pick_near_the_incumbent(
        w, space, fresh_db, monkeypatch):
    picks = []
    real_neighbour = proposals.neighbour

    def spy(w_, space_, dev, params, rng, seen, tries=40, correct=None, **kw):
        scored = []

        def scoring(cand):          # the search's own ranking (its learned correction)
            scored.append(correct(cand))
            return scored[-1]
        picked = real_neighbour(w_, space_, dev, params, rng, seen, tries, correct=scoring, **kw)
        picks.append({"incumbent": dict(params), "picked": picked, "scored": scored})
        return picked
    monkeypatch.setattr(state, "neighbour", spy)

    config = dataclasses.replace(CHEAP, budget=11, local_every=3)
    queued = 3 + len(favourites(w, space, config))
    _, rows, _ = run(w, space, fresh_db, config)
    # the queue first (trials 1 and 4 wait for it), then trial numbers 1 modulo local_every
    slots = [n for n in range(queued, 11) if n % 3 == 1]
    assert slots == [7, 10] and len(picks) == len(slots)
    for n, pick in zip(slots, picks):
        row = rows[n]
        assert params_of_row(row) == pick["picked"]
        ok = [r for r in rows[:n] if r.status == "ok"]
        fastest = min(r.measured_s for r in ok)     # the incumbent: the latest of equals
        assert pick["incumbent"] == params_of_row([r for r in ok if r.measured_s == fastest][-1])
        assert row.corrected_s == min(pick["scored"])     # the model's favourite mutation
        assert cand_of(row).key not in {cand_of(r).key for r in rows[:n]}


# ---- failures ------------------------------------------------------------------------------

def test_failures_are_recorded_as_failed_and_the_search_finishes(w, space, fresh_db):
    """The fates of tests/support/faulty_plans, scripted: unfused crashes, greedy hangs,
    heuristic computes a wrong result, the first unnamed candidate NaN."""
    first_unnamed: list[str] = []
    errors = {"unfused": "worker crashed (exit code 3)",
              "heuristic": "wrong result in 'out': relative L2 error 0.01 > rtol 0.001"}

    def fails(cand):
        if not cand.name and first_unnamed in ([], [cand.key]):
            first_unnamed[:] = [cand.key]
            return "wrong result in 'out': non-finite values > rtol 0.001"
        return errors.get(cand.name)
    backend = FakeBackend(w, DEV, fails=fails, hangs=lambda cand: cand.name == "greedy")
    config = dataclasses.replace(CHEAP, budget=8, min_timeout_s=3)
    result, rows, _ = run(w, space, fresh_db, config, backend)
    assert result.progress.done == 8 and [r.number for r in rows] == list(range(8))
    assert sorted(name_of(r) for r in rows[:3]) == sorted(NAMED)
    fates = {"unfused": "worker crashed", "heuristic": "wrong result", "greedy": "timeout",
             "nan": "wrong result in 'out': non-finite"}
    seen_fates = set()
    for r in rows:
        fate = "nan" if cand_of(r).key in first_unnamed else name_of(r)
        if r.status == "pruned":
            continue
        if fate in fates:
            seen_fates.add(fate)
            assert r.status == "failed" and r.measured_s is None, r
            assert r.times == ()
            assert r.error.startswith(fates[fate]) or r.error == REUSED, r
        else:
            assert r.status == "ok" and r.error in (None, REUSED), r
    assert seen_fates == set(fates)
    assert result.progress.failed == sum(r.status == "failed" for r in rows) >= 4
    # a hang is cut at the search's limit: per run the larger of min_timeout_s and
    # timeout_factor x the best so far, for the checked run, warm-ups, repeats and one more,
    # plus min_timeout_s
    runs = 2 + backend.settings.warmup + backend.settings.repeats
    for _, timeout_s, best_s in backend.calls:
        assert timeout_s == pytest.approx(max(3, 10 * (best_s or 0)) * runs + 3)
    assert rows[2].error == timeout_message(3 * runs + 3)     # nothing measured before it
    assert any(best_s for _, _, best_s in backend.calls)
    keys = measured_keys(backend)
    assert len(keys) == len(set(keys))         # a failed candidate is not measured again
    best = assert_best_is_min_ok(fresh_db, fake_key(w), rows)
    assert best.candidate not in [r.candidate for r in rows
                                  if r.status == "failed"]


def test_a_candidate_the_model_cannot_price_fails_as_data(w, space, fresh_db, monkeypatch):
    # pricing raising (a bug in the space or the model) fails that trial, never the search
    predict = state.Learner.predict

    def broken(self, cand):
        if cand.name == "heuristic" or int(cand.key[:8], 16) % 4 == 0:
            raise ValueError("no price\nsecond line")
        return predict(self, cand)
    monkeypatch.setattr(state.Learner, "predict", broken)
    result, rows, backend = run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=8))
    assert result.progress.done == 8 and result.best is not None
    heur = [r for r in rows if name_of(r) == "heuristic"]
    assert heur and heur[0].status == "failed" and heur[0].predicted_s is None
    assert heur[0].error == f"{state.UNPRICED}: ValueError: no price"
    assert cand_of(heur[0]).key not in measured_keys(backend)
    assert all(r.status != "failed" or r.error.startswith(state.UNPRICED) for r in rows)


def test_a_search_where_everything_fails_ends_without_a_best(w, space, fresh_db):
    backend = FakeBackend(w, DEV, fails=lambda cand: "boom")
    result, rows, _ = run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=6), backend)
    assert result.progress.failed == len(rows) == 6
    assert result.progress.pruned == 0        # nothing measured: nothing to prune against
    assert all(r.error in ("boom", REUSED) for r in rows)
    assert result.best is None and fresh_db.best(fake_key(w).key) is None
    assert result.progress.best_s is None


# ---- memory ----------------------------------------------------------------------------------

def test_candidates_that_do_not_fit_fail_without_being_measured(w, space, fresh_db):
    needs = {n: memory_bytes(w, named_plan(space, n), DEV.parallel_units) for n in NAMED}
    assert needs["greedy"] < min(needs["unfused"], needs["heuristic"])
    limit = (needs["greedy"] + min(needs["unfused"], needs["heuristic"])) // 2  # greedy fits
    config = dataclasses.replace(CHEAP, budget=3, model_seeds=0)
    result, rows, backend = run(w, space, fresh_db, config, memory_available=lambda: limit)
    by_name = {name_of(r): r for r in rows}
    for name in ("unfused", "heuristic"):
        r = by_name[name]
        assert r.status == "failed" and r.measured_s is None
        assert r.error == memory_error(needs[name], limit)
        assert r.times == ()                             # never run
        assert cand_of(r).key not in measured_keys(backend)
    greedy = by_name["greedy"]
    assert greedy.status == "ok", greedy.error            # fits: measured, times kept
    assert greedy.times and greedy.rel_err is not None \
        and greedy.rel_err <= w.rtol
    assert measured_keys(backend) == [cand_of(greedy).key]
    assert result.best is not None and result.best.candidate == greedy.candidate


def test_an_unknown_amount_of_memory_refuses_nothing(w, space, fresh_db):
    result, rows, backend = run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=3),
                                memory_available=lambda: None)
    assert result.progress.failed == 0 and len(backend.calls) == result.progress.measured


def test_the_model_climb_answers_the_questions_a_change_opens(small):
    # A contraction turned over to the generated kernel asks for the kernel's parameters; at
    # their defaults (split over rows) the change may look worse than the library, where the
    # same kernel split over the batch is the best of all (attention's batched scores: 0.9 ms,
    # 0.6 ms for the library, 0.33 ms).  The climb answers the new questions before it judges.
    from autotune.api import space_for
    from search_spaces.candidate import IMPL_KERNEL
    from search_spaces.kernel import SPLIT_BATCH
    w = small("attention")
    space = space_for(w, "cpu")
    if space.kernel_bounds is None:
        pytest.skip("no generated kernel on this machine")

    def correct(c):
        s = next((g for g in c.schedules if g.anchor == "s"), None)   # None: s fused away
        if s is not None and s.impl == IMPL_KERNEL:
            return 1.0 if s.kernel.split == SPLIT_BATCH else 3.0
        return 2.0
    config = dataclasses.replace(CHEAP, model_pool=0, model_seeds=4, climb_rounds=1)  # no draws
    favs = model_favourites(w, space, DEV, config, set(), correct)
    assert favs and all(correct(c) == 1.0 for c in favs)
    # (the split's first option is the rows: one change alone lands on 3.0 and is refused)
    from search_spaces.kernel import SPLITS
    assert SPLITS[0] != SPLIT_BATCH


def test_the_model_favourites_spread_over_structures_and_predictions(small):
    # the climb's pool is mostly small variations of its optimum; measuring many of them
    # spends the budget on what the model already calls one plan
    from autotune.api import space_for
    from autotune.search.proposals import PER_STRUCTURE, TIE, structure
    w = small("attention")
    space = space_for(w, "cpu")
    config = dataclasses.replace(CHEAP, model_pool=200, model_seeds=8, climb_rounds=1)
    favs = model_favourites(w, space, DEV, config, set())
    assert len(favs) >= 2
    preds = [estimate(w, c, DEV).total_s for c in favs]
    assert preds == sorted(preds)
    assert all(b > a * (1 + TIE) for a, b in zip(preds, preds[1:]))
    sigs = [structure(c) for c in favs]
    assert max(sigs.count(s) for s in sigs) <= PER_STRUCTURE


def test_the_chained_plans_climb_keeps_its_chain_and_lays_the_keys_along_the_walk():
    # from the chained plan the climb's first improvement used to be turning the chain off
    # (its keys stored [j][h][d] make every score a dot product); kept on, the climb stores
    # k [h][d][j] and the chain's products run in vector registers: the model's favourite
    from autotune.api import space_for
    from costmodel.devices import CPU_DEFAULT
    from search_spaces import load_workload
    w = load_workload("attention", {})
    space = space_for(w, "cpu")
    config = dataclasses.replace(CHEAP, model_pool=0, climb_rounds=2)
    favs = model_favourites(w, space, CPU_DEFAULT, config, set())
    best = favs[0]
    assert any(s.chain_block for s in best.schedules), best.to_json()
    assert best.layout("k", 3) == (0, 2, 1)
    assert estimate(w, best, CPU_DEFAULT).total_s < MODEL_MARGIN * min(
        estimate(w, c, CPU_DEFAULT).total_s for c in seed_plans(space))
