"""What `autotune show-best` reports: the best plan per key, with speedups and trial counts."""
from __future__ import annotations

import json

from db.keys import PlanKey, stale_reasons
from db.store import PlanDB
from search_spaces.candidate import Candidate

from .environment import detect


def _named_times(db: PlanDB, plan_key: str) -> dict[str, float]:
    """Best measured time of each named plan under a key (unfused, greedy, heuristic)."""
    out: dict[str, float] = {}
    for row in db.trials(plan_key):
        if row["status"] != "ok":
            continue
        name = json.loads(row["candidate_json"]).get("name", "")
        if name and (name not in out or row["measured_s"] < out[name]):
            out[name] = row["measured_s"]
    return out


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
            named = _named_times(db, r["plan_key"])
            wl = db.workload(r["workload_hash"]) or {}
            dims = json.loads(wl.get("canonical_json", "{}")).get("dims", {})
            cand = Candidate.from_json(r["candidate_json"])
            out.append({
                "workload": r["workload_name"], "dims": dims, "plan_key": key.key,
                "device": device.get("name", ""), "measured_s": r["measured_s"],
                "predicted_s": r["predicted_s"], "study": r["study"],
                "trial_number": r["trial_number"], "updated": r["updated"],
                "speedup": {n: t / r["measured_s"] for n, t in named.items()},
                "named_s": named, "trials": db.trial_counts(r["plan_key"]),
                "stale": ("stale: " + ", ".join(reasons) + " changed") if reasons else "",
                "plan": plan_summary(cand), "candidate": cand.to_dict()})
        return out
    finally:
        db.close()
