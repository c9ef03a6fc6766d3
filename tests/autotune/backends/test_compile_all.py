"""The CPU executor compiles a plan's group sources concurrently: each source gets the library
its own sequential compile would give (the cache is keyed by source), duplicates compile once,
and a source that does not compile fails the whole plan with the compiler's error."""
from __future__ import annotations

import ctypes

import pytest

from autotune.backends.cpu.compiler import KERNEL_OPT, LOOP_OPT
from autotune.backends.cpu.executor import CompileError, compile_all, compile_source


def source(k: int) -> str:
    return f"int value_{k}(void) {{ return {k}; }}\n"


def test_every_source_gets_its_own_library(tmp_path):
    srcs = [source(k) for k in range(5)] + [source(2)]
    libs = compile_all([(s, LOOP_OPT) for s in srcs], tmp_path / "par", jobs=2)
    assert len(libs) == 6 and libs[2] == libs[5]
    assert len(set(libs)) == 5
    for k, lib in enumerate(libs[:5]):
        assert getattr(ctypes.CDLL(str(lib)), f"value_{k}")() == k
    # the same files a one-at-a-time compile names (the cache key is the source)
    seq = [compile_source(s, tmp_path / "seq") for s in srcs]
    assert [p.name for p in libs] == [p.name for p in seq]
    assert compile_all([], tmp_path / "par") == []
    # the optimisation level is part of the key: a kernel's level builds its own library
    kern = compile_all([(srcs[0], KERNEL_OPT), (srcs[0], LOOP_OPT)], tmp_path / "par", jobs=2)
    assert KERNEL_OPT != LOOP_OPT and kern[1] == libs[0] and kern[0] != libs[0]
    assert kern[0] == compile_source(srcs[0], tmp_path / "par", opt=KERNEL_OPT)
    assert ctypes.CDLL(str(kern[0])).value_0() == 0


def test_a_broken_source_fails_the_plan(tmp_path):
    with pytest.raises(CompileError, match="cc failed"):
        compile_all([(source(1), LOOP_OPT), ("int broken(void) { return }\n", KERNEL_OPT),
                     (source(3), LOOP_OPT)], tmp_path, jobs=2)
