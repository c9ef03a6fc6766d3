"""A plan tuned at other dims, carried over to the dims a caller runs at.

A model sees many sequence lengths and a search tunes a few.  For a shape nobody tuned, the plan
tuned at the nearest shape of the same program keeps its fusion, contraction orders, layouts and
kernel choices; only its tiles change: a tile stays what it was, clamped to the new extent, so no
tile grows past what the tuned plan ran (per-thread buffers, shared memory), and every tile is
one the new shape's space offers (a power of two below the extent, or the whole extent).  The
adapted plan is compiled and verified once against the float64 reference before it is used.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from db.keys import PlanKey
from db.records import BestPlan
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.rewrite import rewritten
from search_spaces.workload import Workload

from autotune.backends.base import Plan, verify
from autotune.interop.dims import ShapeError, at_dims
from autotune.reference import reference


@dataclass(frozen=True)
class TunedShape:
    """A best plan cached for the same program at other dims, under the same device, library
    versions, space and schema as the caller's key."""
    dims: tuple[tuple[str, int], ...]
    best: BestPlan

    def distance(self, dims: dict[str, int]) -> float:
        """Sum over the dims of |log(tuned / wanted)|: 256 is as near to 512 as 1024 is."""
        return sum(abs(math.log(v / dims[d])) for d, v in self.dims)


def tuned_shapes(w: Workload, key: PlanKey, store: PlanDB) -> list[TunedShape]:
    """Every other shape of ``w``'s program with a best plan usable under ``key``, nearest to
    ``w``'s dims first (among equally near ones the larger: clamping its tiles keeps them
    within what ran)."""
    current = {k: v for k, v in key.parts().items() if k != "workload_hash"}
    found = []
    for b in store.best_rows():
        parts = b.key.parts()
        if b.workload_name != w.name or parts["workload_hash"] == w.hash or \
                any(str(parts[k]) != str(v) for k, v in current.items()):
            continue
        row = store.workload(parts["workload_hash"])
        dims = json.loads(row["canonical_json"]).get("dims", {}) if row else {}
        if set(dims) != set(w.dim_dict):
            continue
        try:   # the same name may label another program: its plans are not this one's
            if at_dims(w, dims).hash != parts["workload_hash"]:
                continue
        except (ShapeError, ValueError):
            continue
        found.append(TunedShape(tuple((d, dims[d]) for d in w.dim_dict), b))
    wanted = w.dim_dict
    return sorted(found, key=lambda t: (t.distance(wanted), -sum(v for _, v in t.dims)))


def _clamp(tile: int, old: int, new: int) -> int:
    """A tile of extent ``old`` for extent ``new``."""
    if tile >= new:
        return new
    if tile >= old and tile & (tile - 1):
        # a whole old extent that is no power of two (702, in a larger new extent): the
        # space offers powers of two below an extent, so the largest one under it
        return 1 << (tile.bit_length() - 1)
    return tile


def adapt(cand: Candidate, tuned: Workload, w: Workload) -> Candidate:
    """``cand`` (tuned for ``tuned``) for ``w``, the same program at other dims: tiles clamped
    to the new extents, everything else kept."""
    old, new = rewritten(tuned, cand), rewritten(w, cand)
    schedules = []
    for s in cand.schedules:
        o, n = old.op(s.anchor).out_shape, new.op(s.anchor).out_shape
        # only the tiles change: the impl, a kernel's parameters, a chain's block stay
        schedules.append(replace(s, tiles=tuple(_clamp(t, a, b) for t, a, b in
                                                zip(s.tiles, o, n))))
    return replace(cand, schedules=tuple(schedules),
                   name=f"{cand.name or 'tuned'}@{','.join(f'{d}={v}' for d, v in tuned.dims)}")


def verified(plan: Plan, w: Workload, seed: int = 0) -> tuple[float, str]:
    """(worst relative error, error text or "") of one run of ``plan`` on random inputs."""
    inputs = w.random_inputs(seed)
    try:
        outs = plan(**inputs)
    except Exception as e:   # a plan that cannot run is a failed verification, not a crash
        return math.inf, f"{type(e).__name__}: {e}".splitlines()[0]
    return verify(outs, reference(w, inputs), w.rtol)
