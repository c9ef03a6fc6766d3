"""The host emulator's header is compiled once (autotune.backends.cuda.emulator.emulator_header)
and g++ reads the precompiled form in the compiles of plans' kernels (the emulated plans'
results are checked against the reference in test_cuda_codegen and the other emulator tests)."""
from __future__ import annotations

import shutil
import subprocess

from autotune.backends.cuda.emulator import EMU_FLAGS, emulator_header
from autotune.backends.cuda.emulator_header import EMU_HEADER

CXX = shutil.which("g++") or "g++"     # the emulator's compiler, as every emulator test needs


def test_the_precompiled_header_is_the_one_g_plus_plus_reads(tmp_path):
    header = emulator_header(CXX)
    assert header.read_text() == EMU_HEADER
    assert header.with_name("emu.h.gch").stat().st_size > 0
    cpp = tmp_path / "k.cpp"
    # as the emulator writes a plan: the header first, then the warp width and the kernels
    cpp.write_text(f'#include "{header}"\n#define AT_WARP 4\n'
                   'extern "C" float twice(float x) { return 2 * rsqrtf(x * x); }\n')
    proc = subprocess.run([CXX, *EMU_FLAGS, "-shared", "-H", "-Winvalid-pch", str(cpp), "-o",
                           str(tmp_path / "k.so")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # -H marks a precompiled header it used with "!" (and one it rejected with "x")
    assert f"! {header}.gch" in proc.stderr, proc.stderr[:2000]
    assert emulator_header(CXX) == header           # once per process
