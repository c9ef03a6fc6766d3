"""Fixtures the CUDA backend's test modules share: the host emulator and the GPU runtime."""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import cuda_device_present
from tests.support.skips import GPU_SKIP


@pytest.fixture(scope="module")
def emulator():
    """The host emulator: the generated CUDA compiled by g++, 4 threads a block."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    from autotune.backends.cuda.emulator import HostEmulator
    return HostEmulator(threads=4)


@pytest.fixture(scope="module")
def gpu():
    """The GPU through CuPy (the test skipped without one)."""
    if not cuda_device_present():
        pytest.skip(GPU_SKIP)
    from autotune.backends.cuda.runtime import CupyRuntime
    return CupyRuntime()
