"""The plan key: what a cached measurement is valid for.

A plan's timing means something only for one workload (dims and dtype included, via its
hash), one search space, one device and one set of library versions, written by one
schema.  The key is a sha256 over a canonical JSON of all of those, and every part is
also stored as its own column so that stale rows can be explained and pruned.

Python's ``hash()`` (salted per process) and pickle (version dependent) are never used:
the key must be identical across processes, machines and Python versions.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import search_spaces.space

if TYPE_CHECKING:
    from autotune.environment import Environment

# Version of the database layout (tables and columns).  Bump it together with a new
# entry in db.schema.MIGRATIONS.  2: trials.times_json and trials.rel_err.  3: trials.corrected_s.
# 4: trials.group_times_json.
SCHEMA_VERSION = 4



def canonical_json(obj) -> str:
    """Compact, key-sorted JSON: the same value always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


@dataclass(frozen=True)
class PlanKey:
    """All the parts a cached plan is valid for; ``key`` is their sha256."""

    workload_hash: str
    space_version: str
    device_json: str
    libraries_json: str
    schema_version: int

    @classmethod
    def for_env(cls, workload_hash: str, env: "Environment",
                space_version: str | None = None) -> "PlanKey":
        """The key of ``workload_hash`` on ``env`` in the current space and schema.  The space's
        version is search_spaces.space.SPACE_VERSION, read at each call: bumping it there (when
        the candidate encoding changes) makes every plan cached under the old one stale."""
        if space_version is None:
            space_version = search_spaces.space.SPACE_VERSION
        return cls(workload_hash=workload_hash, space_version=space_version,
                   device_json=canonical_json(env.device_dict()),
                   libraries_json=canonical_json(env.library_dict()),
                   schema_version=SCHEMA_VERSION)

    @classmethod
    def from_row(cls, row: dict) -> "PlanKey":
        """Rebuild a key from a trials or best_plans row (which store every part)."""
        return cls(workload_hash=row["workload_hash"], space_version=row["space_version"],
                   device_json=row["device_json"], libraries_json=row["libraries_json"],
                   schema_version=int(row["schema_version"]))

    def parts(self) -> dict:
        """The parts as a dict of column name -> value."""
        return asdict(self)

    @property
    def key(self) -> str:
        """sha256 hex of the canonical JSON of every part."""
        return hashlib.sha256(canonical_json(self.parts()).encode("utf-8")).hexdigest()

    def columns(self) -> dict:
        """The parts plus ``plan_key``: the key columns of trials and best_plans."""
        return {"plan_key": self.key, **self.parts()}


def stale_reasons(parts: dict, current) -> list[str]:
    """Which parts of a stored row differ from ``current`` (a PlanKey or a dict of parts).

    The workload hash is not compared: another workload's plan is not stale, just
    another workload.
    """
    cur = current.parts() if isinstance(current, PlanKey) else dict(current)
    names = {"space_version": "search space", "device_json": "device",
             "libraries_json": "library versions", "schema_version": "schema"}
    return [_which(label, parts[col], cur[col]) if col == "libraries_json" else label
            for col, label in names.items()
            if col in cur and str(parts[col]) != str(cur[col])]


def _which(label: str, stored: str, current: str) -> str:
    """``label`` with the names of the libraries whose versions differ ("library versions
    (codegen)": the code generator changed), where both rows parse."""
    try:
        a, b = json.loads(stored), json.loads(current)
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    except (ValueError, AttributeError):
        return label
    return f"{label} ({', '.join(diff)})" if diff else label
