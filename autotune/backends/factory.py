"""Backend kinds by CLI name: ``cpu`` (generated C + OpenMP, BLAS via NumPy) and ``cuda`` (CuPy).

A kind is one object (:class:`autotune.backends.base.BackendKind`) in its own folder; it is
imported the first time its name is looked up, so a CPU machine never imports the GPU's code.
A new backend is a folder under ``autotune/backends/`` plus one line in :data:`KINDS`.
"""
from __future__ import annotations

import functools
import importlib

from autotune.backends.base import BackendKind
from autotune.environment import Environment, detect

KINDS: dict[str, str] = {           # CLI name -> "module:class" of its BackendKind
    "cpu": "autotune.backends.cpu.kind:CpuBackendKind",
    "cuda": "autotune.backends.cuda.kind:CudaBackendKind",
}


@functools.cache
def backend_kind(name: str) -> BackendKind:
    """The kind registered under ``name``; ValueError naming the choices otherwise."""
    try:
        module, _, cls = KINDS[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: expected one of {', '.join(KINDS)}") \
            from None
    return getattr(importlib.import_module(module), cls)()


def resolve(device: str) -> Environment:
    """``cpu`` | ``cuda`` | ``auto`` -> the detected environment (NoGPUError for a missing GPU)."""
    return detect(device)
