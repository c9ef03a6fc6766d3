#!/usr/bin/env python
"""Reliability of the search and its plan database, as figures.

    python bench/reliability.py                 # 20 kills, 4 concurrent searches, 3 shared workers
    python bench/reliability.py --kills 5 --out /tmp/results

1. kill -9 of `autotune search` at random moments (small dims): after each kill the database
   opens and `autotune db check` says OK, every trial seen in the database before the kill is
   still there unchanged, each study's trials are numbered 0..n-1, the best plan is the fastest
   ok trial of its key, and the next run resumes (the named plans are never run twice).
2. 4 concurrent `autotune search` processes on one database, two on the same workload and
   study, two on other workloads: all finish, every trial a process reports running is in the
   database (0 lost), best = min over the ok trials of each key.
3. 3 workers sharing one Optuna study through a journal file (`--storage journal:PATH`):
   exactly budget trials in the study, distinct numbers, each with its one row in the plan
   database and none else.

Every check raises AssertionError with what went wrong; the figures are printed and written to
``<out>/reliability.json``.  tests/test_reliability.py runs the same functions, smaller.
"""
from __future__ import annotations

import autotune  # noqa: F401  (first: its thread settings precede NumPy's OpenBLAS)

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORKLOAD, DIMS = "trimul_outgoing", "N=24,C=8"
NAMED = ("unfused", "heuristic", "greedy")
SUMMARY = re.compile(r"^(\S+): (\d+) trials \((\d+) measured, (\d+) pruned, (\d+) failed; "
                     r"(\d+) run by this process\)")


def search_cmd(db: Path, budget: int, workload: str = WORKLOAD, dims: str = DIMS,
               seed: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "autotune.cli", "search", workload, "--dims", dims,
            "--budget", str(budget), "--db", str(db), "--seed", str(seed), "--repeats", "1",
            *extra]


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("AUTOTUNE_DB", None)
    return env


def snapshot(db: Path) -> dict[tuple, tuple]:
    """Committed trials, read-only: (plan_key, study, number) -> (candidate, status, time)."""
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT plan_key, study, number, candidate_json, status, "
                               "measured_s FROM trials").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}       # not created yet (no tables): nothing finished
    return {(r[0], r[1], r[2]): (r[3], r[4], r[5]) for r in rows}


def db_check(db: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "db", "check", "--db", str(db)],
                       capture_output=True, text=True, env=child_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.strip().startswith(f"{db}: OK"), \
        f"db check failed: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def check_invariants(db: Path, named_once: bool = True) -> dict:
    """Numbers 0..n-1 per study, best = min over ok trials per key (or, after a confirmation,
    what db.check.expected_best says), and (``named_once``) the named plans at most once per
    search study; returns {"trials": n, "keys": k} (n: the searches' trials, confirmations'
    rows not counted).  Two searches started together on one study each run the named plans
    (they do not share a queue: that is what --storage is for), hence the switch."""
    from db.check import expected_best
    from db.records import StoredTrial, is_confirmation
    from db.store import PlanDB
    with PlanDB(db) as pdb:
        problems = pdb.check()
        assert problems == [], problems
        rows = [StoredTrial.from_row(r) for r in pdb.db.query(
            "SELECT * FROM trials ORDER BY plan_key, study, number")]
        studies: dict[tuple, list[StoredTrial]] = {}
        for r in rows:
            studies.setdefault((r.plan_key, r.study), []).append(r)
        for (k, study), rs in studies.items():
            if not study.startswith("autotune-"):      # append_trial numbering: dense
                assert [r.number for r in rs] == list(range(len(rs))), (k[:12], study)
            names = [r.name for r in rs]
            for n in NAMED if named_once and not is_confirmation(study) else ():
                assert names.count(n) <= 1, f"{n} ran {names.count(n)} times in {study}"
        keys = {r.plan_key for r in rows}
        for k in keys:
            expected = expected_best(pdb.db.conn, k)
            best = pdb.best(k)
            if expected is not None:
                assert best is not None and best.measured_s == expected, (k[:12], best)
            else:
                assert best is None
    return {"trials": sum(not is_confirmation(r.study) for r in rows), "keys": len(keys)}


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """True when no process of the group is left within ``timeout`` (the orphaned worker
    notices its parent's pipe closing and exits by itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# ---- 1. kill -9 at random moments -----------------------------------------------------------

def kills(n: int, folder: Path, seed: int = 1, startup_share: float = 0.25,
          log=print) -> dict:
    """``n`` runs of one search, each killed at a random moment: with probability
    ``startup_share`` a moment in its first 3 s (imports, opening and migrating the
    database, model seeding, the worker starting), else a random 0-0.6 s after its k-th new
    trial was committed (k from 1 to 4: mid-measurement, mid-compile, mid-commit)."""
    rng = random.Random(seed)
    db = folder / "kills.sqlite"
    budget = 10_000                      # never reached: every run ends by its kill
    before_all: dict = {}
    records = []
    for i in range(n):
        if rng.random() < startup_share:
            after_trials, extra = 0, rng.uniform(0.1, 3.0)
        else:
            after_trials, extra = rng.randint(1, 4), rng.uniform(0.0, 0.6)
        err = open(folder / f"kill{i}.err", "w")
        proc = subprocess.Popen(search_cmd(db, budget), stdout=subprocess.DEVNULL, stderr=err,
                                env=child_env(), start_new_session=True)
        t0 = time.monotonic()
        seen = snapshot(db)
        start = len(seen)
        reached = t0 if after_trials == 0 else None
        while proc.poll() is None and time.monotonic() - t0 < 120:
            if reached is not None and time.monotonic() - reached >= extra:
                break
            time.sleep(0.03)
            seen = snapshot(db) or seen
            if reached is None and len(seen) - start >= after_trials:
                reached = time.monotonic()
        seen = snapshot(db) or seen        # what had committed just before the kill
        delay = time.monotonic() - t0
        assert proc.poll() is None, f"search {i} ended before its kill: " + \
            (folder / f"kill{i}.err").read_text()
        os.kill(proc.pid, signal.SIGKILL)  # the search process itself, as `kill -9 PID`
        proc.wait(30)
        err.close()
        worker_left = _wait_group_gone(proc.pid, 15)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        after = snapshot(db)
        lost = [k for k in seen if k not in after]
        changed = [k for k in seen if k in after and after[k] != seen[k]]
        earlier_lost = [k for k in before_all if k not in after]
        status = db_check(db) if db.exists() else "no database yet"
        inv = check_invariants(db) if db.exists() else {"trials": 0, "keys": 0}
        rec = {"kill": i, "at_s": round(delay, 2), "planned": (
                   f"{extra:.2f} s after start" if after_trials == 0 else
                   f"{extra:.2f} s after new trial {after_trials}"),
               "seen_before_kill": len(seen),
               "after": len(after), "new_this_run": len(after) - len(before_all),
               "lost": len(lost) + len(earlier_lost), "changed": len(changed),
               "db_check": status.split(": ", 1)[-1], "worker_exited_by_itself": worker_left,
               **inv}
        records.append(rec)
        log(f"  kill {i + 1:2d} at {delay:4.1f} s ({rec['planned']}): {len(seen):3d} trials "
            f"seen before, "
            f"{len(after):3d} after, lost {rec['lost']}, db check {rec['db_check']}, "
            f"worker {'exited' if worker_left else 'KILLED BY US'}")
        assert not lost and not earlier_lost and not changed, (lost, earlier_lost, changed)
        before_all = after
    # the rerun resumes and finishes: exactly the budget, nothing run twice
    final_budget = len(before_all) + 5
    r = subprocess.run(search_cmd(db, final_budget), capture_output=True, text=True,
                       env=child_env(), timeout=600)
    assert r.returncode == 0, r.stderr
    m = SUMMARY.match(r.stdout.strip().splitlines()[-1])
    assert m and int(m.group(2)) == final_budget, r.stdout
    final = snapshot(db)
    assert all(k in final and final[k] == v for k, v in before_all.items())
    inv = check_invariants(db)
    assert inv["trials"] == final_budget, inv
    db_check(db)
    return {"kills": n, "survived": sum(r["db_check"].startswith("OK") or
                                        r["db_check"] == "no database yet" for r in records),
            "trials_lost": sum(r["lost"] for r in records),
            "trials_changed": sum(r["changed"] for r in records),
            "workers_exited_by_themselves": sum(r["worker_exited_by_itself"] for r in records),
            "kills_with_trials_in_db": sum(r["after"] > 0 for r in records),
            "resumed_to": final_budget, "resumed_run_added": int(m.group(6)),
            "records": records}


# ---- 2. concurrent searches on one database -------------------------------------------------

CONCURRENT = [(WORKLOAD, DIMS, 0), (WORKLOAD, DIMS, 0),
              ("trimul_incoming", "N=24,C=8", 0), ("gated_mlp", "T=32,C=16,F=32", 0)]


def _summary(stdout: str) -> re.Match:
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    m = SUMMARY.match(last)
    assert m, f"no summary line in: {stdout[-500:]}"
    return m


def concurrent(folder: Path, budget: int = 8, jobs=CONCURRENT, log=print) -> dict:
    from autotune.environment import detect
    from db.keys import PlanKey
    from db.check import expected_best
    from db.records import Status
    from db.store import PlanDB
    from search_spaces import load_workload
    from autotune.cli.common import parse_dims
    db = folder / "concurrent.sqlite"          # not created: the four race to create it
    t0 = time.monotonic()
    procs = [subprocess.Popen(search_cmd(db, budget, wl, dims, seed), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env())
             for wl, dims, seed in jobs]
    outs = [p.communicate(timeout=900) for p in procs]
    took = time.monotonic() - t0
    for (wl, _, _), p, (out, err) in zip(jobs, procs, outs):
        assert p.returncode == 0, f"{wl}: exit {p.returncode}: {err[-2000:]}"
    env = detect("cpu")
    per_key: dict[str, dict] = {}
    for (wl, dims, seed), (out, _) in zip(jobs, outs):
        m = _summary(out)
        k = PlanKey.for_env(load_workload(wl, parse_dims(dims)).hash, env).key
        d = per_key.setdefault(k, {"workload": wl, "processes": 0, "reported": 0})
        d["processes"] += 1
        d["reported"] += int(m.group(6))
    with PlanDB(db) as pdb:
        for k, d in per_key.items():
            rows = pdb.trials(k, "tpe-seed0")
            d["in_db"] = len(rows)
            d["lost"] = d["reported"] - len(rows)
            ok = [r.measured_s for r in rows if r.status == Status.OK]
            # the fastest ok trial, or the winner of the last confirmation of the key
            d["best_is_min"] = bool(ok) and \
                pdb.best(k).measured_s == expected_best(pdb.db.conn, k)
            assert d["lost"] == 0 and d["best_is_min"], (d, k[:12])
            assert sorted(r.number for r in rows) == list(range(len(rows)))
    check_invariants(db, named_once=False)
    db_check(db)
    for d in per_key.values():
        log(f"  {d['workload']:<16} {d['processes']} process(es): {d['reported']} trials "
            f"reported, {d['in_db']} in the database, lost {d['lost']}, best = min "
            f"{d['best_is_min']}")
    return {"processes": len(jobs), "all_finished": True, "seconds": round(took, 1),
            "trials_reported": sum(d["reported"] for d in per_key.values()),
            "trials_in_db": sum(d["in_db"] for d in per_key.values()),
            "trials_lost": sum(d["lost"] for d in per_key.values()),
            "per_workload": list(per_key.values())}


# ---- 3. workers sharing one Optuna study ------------------------------------------------------

def shared(folder: Path, workers: int = 3, budget: int = 12, log=print,
           storage: str | None = None) -> dict:
    """``storage``: an Optuna storage URL (default: a journal file in ``folder``)."""
    import optuna
    from optuna.trial import TrialState

    from autotune.environment import detect
    from autotune.search.config import SearchConfig
    from autotune.search.storage import open_storage, shared_study_name
    from autotune.cli.common import parse_dims
    from db.keys import PlanKey
    from db.records import Status
    from db.store import PlanDB
    from search_spaces import load_workload
    db = folder / "shared.sqlite"
    url = storage or f"journal:{folder / 'journal.log'}"
    opened = open_storage(url)        # an RDB gets its tables here, before the workers race
    t0 = time.monotonic()
    procs = [subprocess.Popen(search_cmd(db, budget, extra=("--storage", url)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env()) for _ in range(workers)]
    outs = [p.communicate(timeout=900) for p in procs]
    took = time.monotonic() - t0
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"worker exit {p.returncode}: {err[-2000:]}"
    ran = [int(_summary(out).group(6)) for out, _ in outs]
    key = PlanKey.for_env(load_workload(WORKLOAD, parse_dims(DIMS)).hash, detect("cpu"))
    name = shared_study_name(key, SearchConfig())
    trials = optuna.load_study(study_name=name, storage=opened).get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    assert len(trials) == budget and sorted(numbers) == list(range(budget)), numbers
    state = {TrialState.COMPLETE: Status.OK, TrialState.PRUNED: Status.PRUNED,
             TrialState.FAIL: Status.FAILED}
    assert all(t.state in state for t in trials), [t.state for t in trials]
    with PlanDB(db) as pdb:
        rows = pdb.trials(key.key, name)
        assert pdb.check() == []
    assert sorted(r.number for r in rows) == list(range(budget)), [r.number for r in rows]
    by_number = {r.number: r for r in rows}
    for t in trials:
        r = by_number[t.number]
        assert r.status == state[t.state], (t.number, r.status, t.state)
        if t.state == TrialState.COMPLETE:
            assert r.measured_s == t.value
        assert r.params == t.params
    names = [r.name for r in rows]
    assert all(names.count(n) == 1 for n in NAMED), names
    assert sum(ran) == budget, ran
    log(f"  {workers} workers, budget {budget}: {len(trials)} trials in the shared study "
        f"(numbers 0..{budget - 1}), {len(rows)} rows in the plan database, trials per worker "
        f"{ran}, {took:.0f} s")
    return {"workers": workers, "budget": budget, "optuna_trials": len(trials),
            "distinct_numbers": len(set(numbers)), "plan_db_rows": len(rows),
            "duplicates": len(rows) - len({r.number for r in rows}),
            "lost": budget - len(rows), "trials_per_worker": ran, "seconds": round(took, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1, help="seed of the kill moments")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    import shlex
    out: dict = {"command": shlex.join(["python", "bench/reliability.py", *(argv or sys.argv[1:])]),
                 "workload": WORKLOAD, "dims": DIMS, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="autotune-reliability-") as tmp:
        tmp = Path(tmp)
        t0 = time.monotonic()
        print(f"1. kill -9 of `autotune search` at {args.kills} random moments ({WORKLOAD} "
              f"{DIMS})")
        (tmp / "k").mkdir()
        out["kill"] = kills(args.kills, tmp / "k", seed=args.seed)
        k = out["kill"]
        print(f"   {k['survived']}/{k['kills']} kills survived (database opens, db check OK), "
              f"{k['trials_lost']} trials lost, {k['trials_changed']} changed; resumed to "
              f"{k['resumed_to']} trials")
        print("2. 4 concurrent searches on one database")
        (tmp / "c").mkdir()
        out["concurrent"] = c = concurrent(tmp / "c")
        print(f"   all {c['processes']} finished in {c['seconds']} s: {c['trials_reported']} "
              f"trials reported, {c['trials_in_db']} in the database, {c['trials_lost']} lost")
        print("3. 3 workers sharing one Optuna study (journal file)")
        (tmp / "s").mkdir()
        out["shared"] = s = shared(tmp / "s")
        print(f"   {s['optuna_trials']} trials in the study for a budget of {s['budget']}, "
              f"{s['plan_db_rows']} plan-database rows, {s['duplicates']} duplicates, "
              f"{s['lost']} lost")
        out["seconds"] = round(time.monotonic() - t0, 1)
    path = Path(args.out) / "reliability.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
