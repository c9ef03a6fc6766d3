"""Write the JSON record of a finished search from its plan database (bench/results/search-*.json).

The wall time comes from outside (bash ``time`` around the search command): the database knows
when each trial finished, not when the process started.

    python bench/search_record.py --db /tmp/run/plans.sqlite --wall 12m41.6s \
        --command "autotune search trimul_outgoing --budget 200 --db /tmp/run/plans.sqlite" \
        --how-run "clean checkout of 8469539, fresh database" --out bench/results
"""
from __future__ import annotations

import autotune  # noqa: F401  (first: its thread settings precede NumPy's OpenBLAS)

import argparse
import json
import platform
import sqlite3
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:      # run as a script: this checkout's db package
    sys.path.insert(0, str(ROOT))

from db.records import BestPlan, Status, StoredTrial, is_confirmation  # noqa: E402


def record(db: Path, wall: str, command: str, how_run: str) -> dict:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    keys = [r[0] for r in con.execute("SELECT DISTINCT plan_key FROM trials")]
    if len(keys) != 1:
        sys.exit(f"{db}: expected the trials of one search (one plan key), found {len(keys)}")
    every = [StoredTrial.from_row(dict(r)) for r in con.execute(
        "SELECT * FROM trials WHERE plan_key = ? ORDER BY created", keys)]
    # the search's own trials; the confirmation's re-measurements are reported apart
    rows = [r for r in every if not is_confirmation(r.study)]
    confirm = [r for r in every if is_confirmation(r.study)]
    ok = [r for r in rows if r.status == Status.OK]
    best = min(ok, key=lambda r: r.measured_s)
    cached = con.execute("SELECT * FROM best_plans WHERE plan_key = ?", keys).fetchone()
    cached = BestPlan.from_row(dict(cached)) if cached else None
    w = con.execute("SELECT name, canonical_json FROM workloads WHERE hash = ?",
                    (rows[0].key.workload_hash,)).fetchone()
    runs = sum(len(r.times) for r in ok)
    return {
        "command": command,
        "how_run": how_run,
        "wall_time": wall,
        "workload": w[0] if w else None,
        "dims": json.loads(w[1])["dims"] if w else None,
        "trials": dict(Counter(str(r.status) for r in rows)),
        "timed_runs": runs,
        "first_trial_at": rows[0].created,
        "last_trial_at": rows[-1].created,
        "cached_best": None if cached is None else {
            "name": cached.name, "measured_s": cached.measured_s, "study": cached.study,
            "trial": cached.trial_number},
        "confirmation": [{"name": r.name, "key": r.to_candidate().key[:16],
                          "status": str(r.status), "median_s": r.measured_s,
                          "times_s": list(r.times)} for r in confirm],
        # the fastest single search trial (before the confirmation re-measured it)
        "best_measured_s": best.measured_s,
        "best_times_s": list(best.times),
        "best_predicted_s": best.predicted_s,
        "best_trial": best.number,
        "best_candidate": best.candidate,
        "plan_key": keys[0],
        "device_json": json.loads(rows[0].key.device_json),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--wall", required=True, help="wall time of the search command")
    ap.add_argument("--command", required=True)
    ap.add_argument("--how-run", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    a = ap.parse_args()
    rec = record(a.db, a.wall, a.command, a.how_run)
    tag = "-".join(f"{k}{v}" for k, v in sorted((rec["dims"] or {}).items()))
    name = f"search-{rec['workload']}-{tag}-cpu.json"
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / name
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    c = rec["cached_best"] or {}
    print(f"wrote {path}: {rec['trials']}, fastest trial {rec['best_measured_s']:.3f} s "
          f"(trial {rec['best_trial']}), cached {c.get('name') or '-'} "
          f"{c.get('measured_s') or float('nan'):.3f} s after {len(rec['confirmation'])} "
          f"confirmed finalists, {rec['timed_runs']} timed runs, wall {rec['wall_time']}")


if __name__ == "__main__":
    main()
