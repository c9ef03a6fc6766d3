"""Measuring candidates: the Backend protocol and its result type.

A backend compiles a candidate, runs it on fresh random inputs, compares every output with the
float64 reference under the workload's tolerance, and times it (warm-up, repeats, median).
Failures come back as data (status and error text), never as exceptions that stop a search.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

import numpy as np

from search_spaces.candidate import Candidate


@dataclass(frozen=True)
class Measurement:
    """Outcome of measuring one candidate."""
    status: str                    # "ok" | "failed"
    median_s: float | None = None
    times: tuple[float, ...] = ()
    rel_err: float | None = None   # worst relative L2 error over the outputs
    error: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = list(self.times)
        return d


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure: runs after the checked one, and when to stop early."""
    warmup: int = 0                # the checked run already warms caches and code
    repeats: int = 3
    # A checked run this much slower than the best: no repeats (buffers are pre-faulted, so the
    # first run is steady-state).  Both first runs this much slower: stop after two.  Replayed
    # on the 118 measured trials of an N=702 search, (1.15, 1.05) instead of (1.3, 1.1) cut the
    # runs from 268 to 218 and found the same best.
    give_up_factor: float = 1.15
    contend_factor: float = 1.05

    def timed_runs(self, first: float, run: Callable[[], float], best_s: float | None
                   ) -> tuple[float, ...]:
        """Every timed run of a candidate whose checked first run took ``first`` s; ``run()``
        runs it once more and returns its seconds.  One function for every backend (the
        worker's and the test fake's), so that their early stops cannot drift apart."""
        if best_s is not None and first > self.give_up_factor * best_s:
            return (first,)               # far off the best: one run tells
        for _ in range(self.warmup):
            run()
        # the checked run is a timed sample too (the plan pre-faults its buffers)
        times = [first]
        for _ in range(self.repeats - 1):
            times.append(run())
            # not in contention for the best after two runs: more repeats only cost time
            if best_s is not None and len(times) == 2 and \
                    min(times) > self.contend_factor * best_s:
                break
        return tuple(times)


class Backend(Protocol):
    """Compiles and times candidates for one device (CPU, CUDA)."""
    name: str

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None) -> Measurement: ...

    def close(self) -> None: ...


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Relative L2 error; inf when the output holds NaN or inf or has the wrong shape."""
    if out.shape != ref.shape:
        return math.inf
    # in float64 chunks: no 500 MB temporaries for a 250 MB output, and a NaN or inf anywhere
    # makes the sum non-finite
    o, r = np.ravel(out), np.ravel(ref)
    num = den = 0.0
    step = 1 << 20
    for i in range(0, o.size, step):
        d = o[i:i + step].astype(np.float64) - r[i:i + step]
        num += float(np.dot(d, d))
        rr = r[i:i + step].astype(np.float64, copy=False)
        den += float(np.dot(rr, rr))
    if not math.isfinite(num):
        return math.inf
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def verify(outs: dict[str, np.ndarray], ref: dict[str, np.ndarray], rtol: float
           ) -> tuple[float, str]:
    """(worst relative error, error text or "") of a candidate's outputs against the reference."""
    worst = 0.0
    for name, r in ref.items():
        if name not in outs:
            return math.inf, f"output {name!r} missing"
        e = relative_error(outs[name], r)
        worst = max(worst, e)
        if not e <= rtol:
            what = "non-finite values" if e == math.inf else f"relative L2 error {e:.3g}"
            return worst, f"wrong result in {name!r}: {what} > rtol {rtol:g}"
    return worst, ""
