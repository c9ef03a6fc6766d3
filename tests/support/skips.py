"""Skips that say what brings the missing part, and a strict mode in which any other skip
fails the run.

A test that needs an optional part imports it through :func:`require`, whose skip reason
names the extra that installs it (``pip install -e '.[EXTRA]'``).  With ``AUTOTUNE_STRICT_SKIPS=1``
in the environment (``.ci/run`` sets it after installing every extra and starting PostgreSQL),
the session fails when a test skipped for any reason but the one that CI cannot remove: no CUDA
device (:data:`GPU_SKIP`).  PyTorch is no exception any more: CI installs it (the ``torch`` extra,
pinned in ``.ci/run``), so a torch test that skips there fails the run.  tests/conftest.py
registers the hooks below.
"""
from __future__ import annotations

import os

import pytest

STRICT_ENV = "AUTOTUNE_STRICT_SKIPS"
GPU_SKIP = "needs CuPy and a CUDA device (pip install -e '.[cuda]' on a machine with an NVIDIA GPU)"
GPU_PRESENT_SKIP = "a GPU is present here"          # tests of the no-GPU messages
ALLOWED = (GPU_SKIP, GPU_PRESENT_SKIP)
NVCC_SKIP = "nvcc not on PATH (the CUDA toolkit; no pip extra brings it)"

# optional module -> the extra of pyproject.toml that installs it
EXTRAS = {"jax": "bench", "iree.compiler": "mlir", "iree.runtime": "bench",
          "matplotlib": "plot", "psycopg2": "postgres", "torch": "torch"}


def require(module: str):
    """``module`` imported, or the test skipped with the extra that brings it."""
    return pytest.importorskip(module, reason=extra_reason(module))


def extra_reason(module: str) -> str:
    return f"needs {module} (pip install -e '.[{EXTRAS[module]}]', or '.[all]')"


def allowed(reason: str) -> bool:
    return reason.startswith(ALLOWED)


# ---- the strict mode's hooks -------------------------------------------------------------------
_skipped: list[tuple[str, str]] = []        # (test id, reason) of every skip this session


def _reason(report) -> str:
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text.removeprefix("Skipped: ")


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, _reason(report)))


def pytest_collectreport(report):
    if report.skipped:                       # a whole module skipped at import
        _skipped.append((report.nodeid, _reason(report)))


def _strict_failures() -> list[tuple[str, str]]:
    if os.environ.get(STRICT_ENV, "") in ("", "0"):
        return []
    return [(n, r) for n, r in _skipped if not allowed(r)]


def pytest_sessionfinish(session, exitstatus):
    if _strict_failures() and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    bad = _strict_failures()
    if not bad:
        return
    tr = terminalreporter
    tr.section(f"{STRICT_ENV}: {len(bad)} skip(s) for a reason other than no CUDA device",
               red=True)
    for nodeid, reason in bad:
        tr.line(f"SKIPPED {nodeid}: {reason}", red=True)
