"""A make_plan for the measuring worker (``"hostile_plans:HostilePlan"``) whose behaviour the
candidate's name chooses, for the resource-limit and numerics tests:

* ``hog``        -> lowers the worker's address-space limit (RLIMIT_AS) to what it uses now
                    plus 256 MB, then allocates 4 GB: a MemoryError inside the worker (the
                    limit is restored afterwards, as a real limit would stay in force for
                    one candidate only);
* ``oom-killed`` -> the process sends itself SIGKILL, as the kernel's OOM killer would;
* ``scale:F``    -> every output multiplied by (1 + F * rtol): a relative error of F * rtol;
* ``inf`` / ``-inf`` / ``nan`` -> one output element replaced by that value;
* anything else  -> the real outputs.
"""
from __future__ import annotations

import os
import resource
import signal

import numpy as np

from autotune.backends.cpu.executor import CompiledPlan


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


class HostilePlan(CompiledPlan):
    """A CompiledPlan whose runs misbehave as its candidate's name says; the inherited
    ``timed_call`` runs them through :meth:`__call__`."""

    def __init__(self, w, cand, cache_dir, pool=None):
        super().__init__(w, cand, cache_dir, pool)
        self.mode = cand.name

    def __call__(self, **inputs):
        if self.mode == "hog":
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (_address_space_bytes() + (256 << 20), hard))
            try:
                hog = np.ones(1 << 30, dtype=np.float32)   # 4 GB: more than the limit allows
                return {o: hog for o in self.w.outputs}
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if self.mode == "oom-killed":
            os.kill(os.getpid(), signal.SIGKILL)
        outs = super().__call__(**inputs)
        if self.mode.startswith("scale:"):
            f = 1.0 + float(self.mode.split(":")[1]) * self.w.rtol
            return {k: (v.astype(np.float64) * f).astype(v.dtype) for k, v in outs.items()}
        if self.mode in ("inf", "-inf", "nan"):
            bad = {}
            for k, v in outs.items():
                v = v.copy()
                v.flat[v.size // 2] = float(self.mode)
                bad[k] = v
            return bad
        return outs
