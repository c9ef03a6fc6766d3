"""What stops a measuring worker: its parent's death, its request's timeout, and a run past
its cap; and the errors the parent reports for each.  Signals, not Python handlers: they hold
while a compiled call that keeps the GIL runs."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from autotune.backends.load import LoadProbe, LoadWatch

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None) -> None:
    """Make this process die when its parent does, however the parent ends (``kill -9``
    included).  Linux: the kernel sends SIGKILL on the parent's death (``PR_SET_PDEATHSIG``),
    which also holds while a compiled call runs.  Elsewhere: a thread polls the parent's pid.
    (The signal follows the parent *thread* that started us: WorkerHandle starts workers from
    the search's own thread.)"""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)        # the parent died before the signal was armed: nobody to serve
    if armed or parent_pid is None:
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def arm_run_timeout(seconds: float | None) -> None:
    """Stop this process ``seconds`` from now (wall clock) unless disarmed with ``None``.

    SIGALRM at its default disposition: the kernel ends the process, so this holds even while
    a compiled call that keeps the GIL runs (no Python handler has to run)."""
    if seconds is None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


class CappedWatch(LoadWatch):
    """A load watch whose every run is also stopped at ``cap`` seconds: the alarm is set to the
    cap (or what is left of the request's timeout, if less) while a run lasts, and back to
    the request's deadline after it."""

    def __init__(self, probe: LoadProbe, busy_cores: float, cap: float, deadline: float):
        super().__init__(probe, busy_cores)
        self.cap, self.deadline = cap, deadline

    def time(self, run):
        left = self.deadline - time.monotonic()
        arm_run_timeout(min(self.cap, left))
        try:
            return super().time(run)
        finally:
            arm_run_timeout(self.deadline - time.monotonic())


def crash_message(code: int | None) -> str:
    """What a dead worker's exit code says.  SIGKILL from nobody we know of is how the
    kernel's out-of-memory killer ends a process: say so, since the candidate is then the
    likely cause."""
    if code == -signal.SIGKILL:
        return (f"worker crashed (exit code {code}: killed by SIGKILL, as the out-of-memory "
                "killer does; the candidate may need more memory than is free)")
    return f"worker crashed (exit code {code})"


def timeout_message(timeout_s: float) -> str:
    return f"timeout: no result within {timeout_s:.0f} s"


def run_cap_message(cap_s: float, factor: float) -> str:
    return f"stopped: a run took over {cap_s:.3g} s ({factor:g}x the best so far)"
