"""How a CPU plan's two thread pools share the cores: settings applied before either runtime loads.

A CPU plan alternates OpenMP loop groups (the generated C, libgomp) with GEMMs (NumPy's OpenBLAS),
each runtime with its own threads on the same cores, and both spin-wait after their work ends
before they sleep.  A spinning thread of one holds a core the other's next parallel region needs:

* libgomp spins by default; measured on 2 cores, best plans, default vs ``OMP_WAIT_POLICY=
  PASSIVE``: gated_mlp 28.0 -> 9.4 ms, attention 20.0 -> 7.2 ms, trimul_incoming (N=256)
  398 -> 331 ms.
* OpenBLAS's threads spin for 2^28 cycles (about 0.1 s) after every call unless
  ``OPENBLAS_THREAD_TIMEOUT`` says fewer (2^4 is its floor: they sleep at once).  Measured on
  2 cores, attention (S=256) candidates, the default vs 4, two alternating processes each: the
  fused loop group after the q/k/v GEMMs 146 -> 104 ms, 75 -> 43 ms, 32 -> 17 ms; whole plans
  up to 1.9x faster, and the default's times depended on what ran before (the source of
  candidates measuring 2x their model for no feature of theirs).

Sleeping at once has its own price: every parallel region and every GEMM then wakes a thread (on
a virtual machine tens of microseconds each), which a plan of a few milliseconds with a dozen
groups pays a dozen times. A short spin in between keeps the wake-ups off the back-to-back
groups and ends before a spinning thread can hold a core for long: ``GOMP_SPINCOUNT=10000``
(about 110 us on the 2-core Xeon) and ``OPENBLAS_THREAD_TIMEOUT=14`` (2^14 cycles of the
time-stamp counter: 7 us at 2.4 GHz). Spins of about 50 us (5000 and 17, measured on an AVX-512
host against the runtimes' own 3 ms and 0.1 s, which made plans 1.2-7.5x slower) were still long
enough, on the 2-core AMD EPYC (znver1) host, to hold the core that the next group of the other
runtime needed: odd_mlp's heuristic plan (tanh loop groups between 997x53x53 GEMMs) ran a GEMM
in 170 us where it takes 70. Heuristic plans called back to back, medians of 7 rounds, one
process per setting, two alternations, 5000/17 -> 1000/14: odd_mlp 414-420 -> 254-257 us,
var_pow 503-509 -> 392-395 us, attention 1917-1920 -> 1762-1771 us; 5000/14 and 1000/17 each
kept part of the loss (bench/results/threads-spin/).

Those were plans of library GEMMs. Searched plans now run their contractions in the generated
kernel, OpenMP groups back to back, and there 1000 (11 us on the Xeon) was too short: the
workers slept between groups and at the regions' joins, and each woke late (2-core Xeon,
bench/thread_spin.py on the cached best plans of an all-built-ins run, two alternations, 1000
-> 10000: attention 1438/1384 -> 1297/1199 us, gated_mlp 4216/4048 -> 3831/3754 us, gelu_mlp
3268/2968 -> 2839/2544 us); their heuristic plans (library GEMMs) moved -5 to +3 %, odd_mlp's
-10 %, var_pow's (a 0.5 ms plan) +17 %. 30000 gained no more on the best plans and cost the
library plans 12-56 % (attention's heuristic 2.7 -> 3.3 ms), 3000 gained little
(bench/results/xeon-thread-spin/).

Both runtimes read their variable once, when they are loaded, so :func:`apply` runs at
``import autotune``, before NumPy is imported; a value the user set wins.  A runtime loaded
before that (``import numpy`` before ``import autotune``) keeps spinning, and
:func:`warn_if_late` says so once, where plans are built.  Spawned measuring workers inherit the
settings with the environment.
"""
from __future__ import annotations

import os
import warnings

# (variable, value, a substring of the runtime library's file name)
SETTINGS = (("OMP_WAIT_POLICY", "PASSIVE", "libgomp"),
            ("GOMP_SPINCOUNT", "10000", "libgomp"),
            ("OPENBLAS_THREAD_TIMEOUT", "14", "openblas"))
# libgomp's spin count overrides its wait policy: one a user chose is not overridden
_UNLESS = {"GOMP_SPINCOUNT": "OMP_WAIT_POLICY"}

_late: list[str] = []


def _loaded_libraries() -> str:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:      # not Linux: nothing to tell
        return ""


def apply() -> None:
    """Set each variable the user has not set; note those whose runtime is already loaded."""
    maps = None
    chosen = set(os.environ)          # what the user set, before any of ours
    for var, value, lib in SETTINGS:
        if var in chosen or _UNLESS.get(var) in chosen:
            continue
        os.environ[var] = value
        maps = _loaded_libraries() if maps is None else maps
        if lib in maps:
            _late.append(f"{var}={value}")


def late() -> tuple[str, ...]:
    """The settings that came after their runtime was loaded (so it ignores them)."""
    return tuple(_late)


def settings() -> dict[str, str | None]:
    """Each thread variable as this process's runtimes were started with (None: unset), and
    ``late`` for those a runtime loaded before :func:`apply` ignores.  A bench records it:
    every contender of its process runs under them, torch.compile's own libgomp included (at
    ``GOMP_SPINCOUNT=1000`` its workers slept between regions as ours did; see the module)."""
    out: dict[str, str | None] = {var: os.environ.get(var) for var, _, _ in SETTINGS}
    out["late"] = " ".join(_late) or None
    return out


def warn_if_late() -> None:
    """One warning naming the settings a runtime loaded too early ignores, and the fix."""
    if _late:
        warnings.warn(f"a thread runtime was loaded before autotune (NumPy or torch imported "
                      f"first), so its idle threads spin and slow the plans up to 2x; import "
                      f"autotune first, or set {' '.join(_late)} in the environment before "
                      f"starting Python", RuntimeWarning, stacklevel=3)


def cores() -> int:
    """The cores this process may run on (its affinity mask, where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# One 512^3 float32 GEMM through NumPy before the first plan of a process (~1 ms once).  Until
# OpenBLAS has run a GEMM that size, some shapes stay slow for the life of the process, not
# just on a first call: conv1x1_norm's batched 128x128 @ 128x3136 library group ran 21.5 ms
# in a fresh process, call after call, and 14.5-15.5 ms once any 256^3 or larger GEMM had run
# (a 64^3 one did not do it); whole heuristic plan 24.1-24.4 ms vs 17.2-17.7 ms, separate
# processes.  A search's worker (reference loaded from disk, no GEMM of its own) measured the
# slow state and the bench (its float64 reference computed in-process) the fast one: the
# search ranked that plan 1.26x slower than the bench did, and cached a plan 1.20x slower than
# it.  A program that runs a model has long left the slow state, so every process that runs
# plans leaves it first.
_blas_warm: list[bool] = []


def warm_blas() -> None:
    """Run the one GEMM that takes OpenBLAS out of its first state, once per process (the CPU
    executor calls it before its first plan)."""
    if not _blas_warm:
        import numpy as np
        _blas_warm.append(True)
        a = np.ones((512, 512), np.float32)
        np.matmul(a, a)
