"""Is the machine busy while a candidate runs?  The CPU time other processes took during a run.

A timed run that shared its cores with another process measures the machine, not the
candidate: on a 2-core machine one busy neighbour made a 2.4 s plan run 6.7 s.  The probe here
reads, before and after a run, the busy time of the CPUs this process may run on (``/proc/stat``)
and this process's own CPU time (``/proc/self/stat``, every thread): the difference is what the
others took.  Two small file reads per run, microseconds; the load average, by contrast, is a
one-minute mean and cannot tell one run from the next.  Elsewhere (no ``/proc``) the probe
answers "unknown" and every run is trusted, as before.

A :class:`LoadWatch` times one candidate's runs through a probe and counts those taken under
load; :func:`autotune.backends.base.timed_runs` repeats such runs instead of trusting them.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Protocol

# Shorter runs than this cannot be judged: /proc counts in clock ticks (10 ms), so a 10 ms run
# could read 0 or 2 cores of others' time by rounding alone.  At 0.1 s the rounding is at
# most ~0.2 core, under the 0.5-core threshold.
MIN_WINDOW_S = 0.1


class LoadProbe(Protocol):
    """Reads the machine's load: ``start()`` a reading, ``others_cores(start)`` the cores other
    processes kept busy on average since it (None: cannot tell)."""

    def start(self) -> object: ...

    def others_cores(self, since: object) -> float | None: ...


class NoProbe:
    """A probe that never knows (no /proc): every run is trusted."""

    def start(self) -> object:
        return None

    def others_cores(self, since: object) -> float | None:
        return None


class ProcStatProbe:
    """Linux: busy ticks of this process's CPUs (``/proc/stat``) less its own (``/proc/self/
    stat``: utime + stime of all its threads, OpenMP and BLAS workers included)."""

    def __init__(self, cpus: set[int] | None = None):
        self.cpus = {f"cpu{c}" for c in (cpus if cpus is not None else os.sched_getaffinity(0))}
        self.tick_s = 1.0 / os.sysconf("SC_CLK_TCK")

    def _busy_ticks(self) -> int:
        busy = 0
        with open("/proc/stat", "rb") as f:
            for line in f:
                if not line.startswith(b"cpu"):
                    break
                parts = line.split()
                if parts[0].decode() in self.cpus:
                    # user nice system idle iowait irq softirq steal (guest is inside user)
                    v = [int(x) for x in parts[1:9]]
                    busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        return busy

    @staticmethod
    def _own_ticks() -> int:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])        # utime, stime (fields 14, 15)

    def start(self) -> object:
        return time.perf_counter(), self._busy_ticks(), self._own_ticks()

    def others_cores(self, since: object) -> float | None:
        t0, busy0, own0 = since
        wall = time.perf_counter() - t0
        if wall < MIN_WINDOW_S:
            return None
        others = (self._busy_ticks() - busy0) - (self._own_ticks() - own0)
        return max(others, 0) * self.tick_s / wall


def machine_probe() -> LoadProbe:
    """The probe for this machine: /proc where it can be read, else one that never knows."""
    try:
        probe = ProcStatProbe()
        probe.others_cores(probe.start())
        return probe
    except (OSError, ValueError, IndexError, AttributeError):
        return NoProbe()


class LoadWatch:
    """Times the runs of one measurement through ``probe``; a run during which other processes
    kept more than ``busy_cores`` cores busy on average is under load.  ``loaded`` counts
    them (one watch per measurement: the worker reads it into the Measurement)."""

    def __init__(self, probe: LoadProbe, busy_cores: float):
        self.probe, self.busy_cores = probe, busy_cores
        self.loaded = 0

    def time(self, run: Callable[[], float | None]) -> tuple[float | None, bool]:
        """``run()``'s seconds, and whether the machine was busy while it ran."""
        since = self.probe.start()
        seconds = run()
        others = self.probe.others_cores(since)
        busy = others is not None and others > self.busy_cores
        self.loaded += busy
        return seconds, busy
