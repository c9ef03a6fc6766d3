"""What `autotune show-best` reports: the best plan per key, with speedups and trial counts."""
from __future__ import annotations

import json

from db.keys import PlanKey, stale_reasons
from db.store import PlanDB
from search_spaces.candidate import Candidate

from autotune.environment import detect


def _named_times(db: PlanDB, plan_key: str) -> tuple[dict[str, float], dict[str, float]]:
    """Best measured time of each named plan under a key (unfused, greedy, heuristic), and
    the predicted time of those never measured (pruned: greedy at full size, typically)."""
    measured: dict[str, float] = {}
    predicted: dict[str, float] = {}
    for row in db.trials(plan_key):
        name = json.loads(row["candidate_json"]).get("name", "")
        if not name:
            continue
        if row["status"] == "ok":
            if name not in measured or row["measured_s"] < measured[name]:
                measured[name] = row["measured_s"]
        elif row["predicted_s"] is not None:
            predicted[name] = row["predicted_s"]
    return measured, {k: v for k, v in predicted.items() if k not in measured}


def plan_summary(cand: Candidate) -> str:
    """One line: fused edges, library groups, non-identity layouts."""
    lib = [s.anchor for s in cand.schedules if s.impl == "library"]
    parts = [f"{len(cand.schedules)} groups", f"fused {', '.join(cand.fused) or 'nothing'}"]
    if lib:
        parts.append(f"library GEMM for {', '.join(lib)}")
    if cand.layouts:
        parts.append("layouts " + ", ".join(f"{t}{list(p)}" for t, p in cand.layouts))
    return "; ".join(parts)


def best_report(db: PlanDB, workload_hash: str | None = None) -> list[dict]:
    """Rows for show-best, one per plan key, JSON-serialisable."""
    try:
        rows = db.best_rows(workload_hash)
        current = None
        cpu = detect("cpu")
        out = []
        for r in rows:
            key = PlanKey.from_row(r)
            device = json.loads(r["device_json"])
            if device.get("kind") == "cpu":
                current = PlanKey.for_env(r["workload_hash"], cpu)
            reasons = stale_reasons(r, current) if current else []
            named, named_pred = _named_times(db, r["plan_key"])
            wl = db.workload(r["workload_hash"]) or {}
            dims = json.loads(wl.get("canonical_json", "{}")).get("dims", {})
            cand = Candidate.from_json(r["candidate_json"])
            out.append({
                "workload": r["workload_name"], "dims": dims, "plan_key": key.key,
                "device": device.get("name", ""), "measured_s": r["measured_s"],
                "predicted_s": r["predicted_s"], "study": r["study"],
                "trial_number": r["trial_number"], "updated": r["updated"],
                "speedup": {n: t / r["measured_s"] for n, t in named.items()},
                "named_s": named, "named_predicted_s": named_pred,
                "trials": db.trial_counts(r["plan_key"]),
                "stale": ("stale: " + ", ".join(reasons) + " changed") if reasons else "",
                "plan": plan_summary(cand), "candidate": cand.to_dict()})
        return out
    finally:
        db.close()
