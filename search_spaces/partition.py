"""Fusion partitions: groups from fused edges, their anchors, legality, and enumeration.

Semantics: fusing the edge p->c puts p into c's group; a group is a connected set of ops under
fused edges and runs as one loop nest hosted by its anchor, the group's single sink.  Every other
member is evaluated inside the anchor's tiles (a prologue, or for a contraction feeding an
elementwise anchor, an epilogue).  A tensor read outside the group that computes it is
materialized.  Legal groups are convex (no path leaves the group and re-enters it), have one
sink (sibling ops with no consumer in the group cannot share one loop nest), and read each other
without a cycle (groups run one after another).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from .space_spec import edges_of
from .workload import Workload


@dataclass(frozen=True)
class Group:
    """Ops of one fused group, in program order; ``anchor`` is the sink that hosts the nest."""
    members: tuple[str, ...]
    anchor: str

    @property
    def producers(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m != self.anchor)


def edge_names(w: Workload) -> list[str]:
    return [f"{p}->{c}" for p, c in edges_of(w.ops)]


def _components(w: Workload, fused: set[tuple[str, str]]) -> list[list[str]]:
    parent = {op.out: op.out for op in w.ops}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p, c in fused:
        parent[find(p)] = find(c)
    comps: dict[str, list[str]] = {}
    for op in w.ops:
        comps.setdefault(find(op.out), []).append(op.out)
    return list(comps.values())


def check_partition(w: Workload, fused: set[tuple[str, str]]) -> str | None:
    """None if the partition given by ``fused`` is legal, else why not (one line)."""
    ops = {op.out for op in w.ops}
    for p, c in fused:
        if p not in ops or c not in ops or c not in w.consumers.get(p, ()):
            return f"{p}->{c} is not an edge between ops"
    comps = _components(w, fused)
    for comp in comps:
        members = set(comp)
        sinks = [m for m in comp if not any(c in members for c in w.consumers[m])]
        if len(sinks) != 1:
            return f"group {{{', '.join(comp)}}} has {len(sinks)} sinks ({', '.join(sinks)}); " \
                   f"a group needs exactly one"
        for m in comp:
            for c in w.consumers[m]:
                if c in members:
                    continue
                if w.descendants[c] & members:
                    return f"group {{{', '.join(comp)}}} is not convex: {m}->{c} leaves it " \
                           f"and a path from {c} comes back"
    return _group_cycle(w, comps)


def _group_cycle(w: Workload, comps: list[list[str]]) -> str | None:
    """Why the groups cannot run in any order (two or more of them read each other), or None.
    Convex groups are not enough: {kf, kv, num} and {qf, z, den} of a linear attention are
    each convex, but num reads qf of the second and z reads kf of the first."""
    deps = _group_reads(w, comps)
    left = set(deps)
    while left:
        ready = {k for k in left if not deps[k] & left}
        if not ready:
            # name the groups on cycles: drop, too, those nothing left reads
            while dropped := {k for k in left if not any(k in deps[j] for j in left)}:
                left -= dropped
            stuck = sorted(left, key=lambda k: comps[k][0])
            names = "; ".join("{" + ", ".join(comps[k]) + "}" for k in stuck)
            return f"groups {names} read each other: no order runs them (a cycle of groups)"
        left -= ready
    return None


def _group_reads(w: Workload, comps: list[list[str]]) -> dict[int, set[int]]:
    """For each group (by position in ``comps``), the other groups whose ops it reads."""
    owner = {m: k for k, comp in enumerate(comps) for m in comp}
    return {k: {owner[t] for m in comp for t in w.op(m).inputs() if t in owner} - {k}
            for k, comp in enumerate(comps)}


_GROUPS: dict[tuple, tuple[Group, ...]] = {}   # (workload hash, fused edges) -> groups
KEPT_MAX = 20_000    # answers kept per cache (a search asks a few thousand)


def _kept(cache: dict, key, make):
    """``cache[key]``, made by ``make()`` the first time; the cache is emptied when full."""
    done = cache.get(key)
    if done is None:
        if len(cache) >= KEPT_MAX:
            cache.clear()
        done = cache[key] = make()
    return done


def groups(w: Workload, fused: set[tuple[str, str]]) -> list[Group]:
    """Groups of a legal partition, in an order where every group runs after what it reads
    (kept per workload and partition: a search prices thousands of candidates over a few
    hundred partitions)."""
    return list(_kept(_GROUPS, (w.hash, frozenset(fused)),
                      lambda: tuple(_ordered_groups(w, fused))))


def _ordered_groups(w: Workload, fused: set[tuple[str, str]]) -> list[Group]:
    out = []
    comps = _components(w, fused)
    for comp in comps:
        members = set(comp)
        sink = [m for m in comp if not any(c in members for c in w.consumers[m])][0]
        out.append(Group(tuple(comp), sink))
    # Topological order of the group DAG (check_partition refuses a cycle of groups); a
    # member may be materialized by a group whose anchor comes late in the program, so the
    # anchors' program order is not enough.  Ties keep program order, for stable output.
    deps = _group_reads(w, comps)
    pos = {op.out: k for k, op in enumerate(w.ops)}
    done: list[int] = []
    ready = set()
    while len(done) < len(out):
        ready = [k for k in range(len(out)) if k not in done and deps[k] <= set(done)]
        if not ready:
            raise ValueError("fusion groups form a cycle (an illegal partition: check_partition "
                             "says which)")
        done.append(min(ready, key=lambda k: pos[out[k].anchor]))
    return [out[k] for k in done]


def materialized(w: Workload, fused: set[tuple[str, str]]) -> set[str]:
    """Intermediates that some consumer reads from memory (plus the program outputs)."""
    out = set(w.outputs)
    for p, c in edges_of(w.ops):
        if (p, c) not in fused:
            out.add(p)
    return out


def legal_partitions(w: Workload, limit_edges: int = 16) -> list[frozenset[tuple[str, str]]]:
    """Every legal set of fused edges (exhaustive; for small programs and tests)."""
    edges = edges_of(w.ops)
    if len(edges) > limit_edges:
        raise ValueError(f"{len(edges)} edges: too many to enumerate exhaustively")
    out = []
    for r in range(len(edges) + 1):
        for sub in combinations(edges, r):
            s = set(sub)
            if check_partition(w, s) is None:
                out.append(frozenset(s))
    return out


_REPAIRED: dict[tuple, frozenset] = {}   # (workload hash, wanted, forced) -> repair's answer


def repair(w: Workload, wanted: list[tuple[str, str]], forced: list[tuple[str, str]] = ()
           ) -> set[tuple[str, str]]:
    """The largest prefix-greedy legal subset of ``wanted`` (forced edges first).  Kept per
    workload and request: a search builds thousands of candidates from a few fusion choices,
    and each repair checks the partition once per edge (a quarter of a candidate's build)."""
    def greedy() -> frozenset:
        fused: set[tuple[str, str]] = set()
        for e in list(forced) + [e for e in wanted if e not in forced]:
            trial = fused | {e}
            if check_partition(w, trial) is None:
                fused = trial
        return frozenset(fused)
    return set(_kept(_REPAIRED, (w.hash, tuple(wanted), tuple(forced)), greedy))


def constant_groups(w: Workload, ordered: list[Group], frozen: set[str] | frozenset[str],
                    exclude: set[str] | frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Anchors of the groups of ``ordered`` (in run order) that read only ``frozen`` inputs or
    what other such groups compute, and compute no program output: what a plan whose inputs
    ``frozen`` are bound may run once, at binding, instead of on every call (a weight scaled
    by another, a sum of bound biases).  Groups anchored in ``exclude`` are never constant,
    nor is anything that reads them."""
    const = set(frozen)
    out = []
    for g in ordered:
        members = set(g.members)
        reads = {t for m in g.members for t in w.op(m).inputs()} - members
        if g.anchor in exclude or members & set(w.outputs) or not reads <= const:
            continue
        const |= members
        out.append(g.anchor)
    return tuple(out)
