"""CUDA loop kernels reduce over a contiguous dim a warp at a time (search_spaces.threads.
warp_reduced): the generated source uses shuffles there and only there, compiles with nvcc, and
the host emulator (a warp of 2 to 8 threads, shuffles between barriers) matches the float64
reference on extents that no warp width divides, for sums and maxima, over global tensors and
over fused members' shared-memory buffers."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from autotune.backends.base import verify
from autotune.backends.cuda.codegen import generate_cuda
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan
from autotune.reference import reference
from search_spaces.partition import groups
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from search_spaces.threads import warp_reduced
from tests.support.workloads import workload

NVCC = shutil.which("nvcc")

SOFTMAX = """m[i] max= x[i,c]
e[i,c] = exp(x[i,c] - m[i])
s[i] += e[i,c]
y[i,c] = e[i,c] / s[i]
t[c] += x[i,c]
"""


def softmax(rows: int, cols: int):
    return workload(SOFTMAX, {"I": rows, "C": cols}, {"x": ["I", "C"]}, ["y", "t"])


def lanes_by_op(w, cand) -> dict[str, str | None]:
    out = {}
    for g in groups(w, cand.fused_pairs):
        for m in g.members:
            op = w.op(m)
            if op.reduction:
                shapes = {o: w.op(o).out_shape for o in g.members}   # whole-extent buffers
                out[m] = warp_reduced(w, g, op, lambda t: tuple(range(len(w.shapes[t]))),
                                      shapes)
    return out


def test_the_contiguous_reduced_dim_goes_to_the_lanes_and_nothing_else():
    w = softmax(37, 100)
    lanes = lanes_by_op(w, named_plan(SearchSpace(w), "unfused"))
    # the row max and sum walk c at unit stride; the column sum t walks i at a row's stride
    assert lanes == {"m": "d1", "s": "d1", "t": None}    # (i, c) read as (d0, d1)
    # a reduced extent under a warp keeps a thread per element
    short = softmax(37, 24)
    assert set(lanes_by_op(short, named_plan(SearchSpace(short), "unfused")).values()) == {None}


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warp-kernels")


@pytest.mark.parametrize("threads", [2, 4, 8])
@pytest.mark.parametrize("plan", ["unfused", "heuristic", "greedy"])
def test_emulated_warp_reductions_match_the_reference(plan, threads, kernel_cache):
    w = softmax(37, 100)               # 100: no warp width divides it
    cand = named_plan(SearchSpace(w), plan)
    src, _ = generate_cuda(w, cand)
    assert "__shfl_xor_sync" in src and "lanes along" in src
    inputs = w.random_inputs(seed=threads)
    out = CudaPlan(w, cand, kernel_cache, runtime=HostEmulator(threads=threads))(**inputs)
    _, why = verify(out, reference(w, inputs), w.rtol)
    assert not why, f"{plan} with {threads} threads a warp: {why}"


def test_a_fused_members_buffer_is_reduced_by_warps():
    # the heuristic plan fuses the whole softmax: s sums e's row in shared memory
    w = softmax(37, 100)
    cand = named_plan(SearchSpace(w), "heuristic")
    assert any({"e", "s"} <= set(g.members) for g in groups(w, cand.fused_pairs))
    src, _ = generate_cuda(w, cand)
    member = src[src.index("/* s[d0] += e[d0,d1]"):]
    member = member[:member.index("__syncthreads")]
    assert "lanes along d1" in member and "acc += L_e[" in member
    assert "+= AT_WARP)" in member and "if (lane == 0) L_s[" in member


def test_the_emulator_wants_a_power_of_two_warp():
    for bad in (0, 3, 6, 64):
        with pytest.raises(ValueError, match="power of two"):
            HostEmulator(threads=bad)


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH (the CUDA toolkit)")
def test_warp_reductions_compile_with_nvcc(tmp_path):
    w = softmax(37, 100)
    parts = [generate_cuda(w, named_plan(SearchSpace(w), p), prefix=f"{p}_")[0]
             for p in ("unfused", "heuristic", "greedy")]
    cu = tmp_path / "warps.cu"
    cu.write_text("\n".join(parts))
    proc = subprocess.run([NVCC, "-std=c++17", "-gencode", "arch=compute_80,code=sm_80",
                           "-gencode", "arch=compute_90,code=sm_90", "-c", str(cu), "-o",
                           str(tmp_path / "k.o")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[:3000]


@pytest.mark.parametrize("block", [16, 100, 2048])
def test_a_block_of_partial_warps_is_refused(block):
    w = softmax(37, 100)
    with pytest.raises(ValueError, match="multiple of 32"):
        generate_cuda(w, named_plan(SearchSpace(w), "heuristic"), block=block)
