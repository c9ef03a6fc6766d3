"""The CUDA backend without a GPU, and with one.

* The CUDA source of every built-in's named plans and of 5 random candidates per built-in (plus a
  float64 program using every function) compiles with nvcc for sm_80 and sm_90: one .cu
  holding every workload's plans (kernel names prefixed per workload and plan), one nvcc call
  with two -gencode options; each workload's test reports the errors in its own plans.
  Skipped without nvcc.
* The same kernels run on the CPU under autotune.backends.cuda.emulator.HostEmulator (the source compiled
  as C++, several threads per block with a real barrier for __syncthreads, cuBLAS argument lists
  through a NumPy model of gemmStridedBatched) and match the float64 reference.  Skipped
  without g++.
* Tiles whose footprints exceed shared memory are rejected before anything is compiled or
  launched, and costmodel.cuda_limits agrees with the generated kernels.
* ``@pytest.mark.cuda`` tests need CuPy and a device: CudaPlan on the GPU against the reference
  for every built-in's named plans, CUDA-event timing, the >48 KB shared-memory opt-in, TF32.
"""
from __future__ import annotations

import itertools
from dataclasses import replace
import math
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli.app import app
from autotune.backends.cuda.codegen import TileTooLarge, check_limits, generate_cuda, kernel_source
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan, precision_of
from autotune.backends.cuda.kind import CudaBackendKind
from autotune.backends.cuda.gemm import Mat, emulate_gemm, plan_gemm
from autotune.backends.base import verify
from autotune.reference import reference
from costmodel import preset
from costmodel.cuda_limits import over_limit, shared_bytes
from search_spaces import builtin_names, load_workload, parse_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.kernel import GPU_VEC_BYTES, KernelBounds
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.rewrite import rewritten
from search_spaces.space import SearchSpace, TileBounds
from tests.conftest import cuda_device_present
from tests.support.skips import GPU_PRESENT_SKIP, NVCC_SKIP
from tests.support.where import causal

NVCC = shutil.which("nvcc")
CXX = shutil.which("g++")
BOUNDS = TileBounds(1, 1024)
GPU_BOUNDS = CudaBackendKind().tile_bounds     # with the tensor-core kernel
RANDOM_PER_WORKLOAD = 5
SMALL = {"trimul_outgoing": {"N": 12, "C": 8}, "trimul_incoming": {"N": 12, "C": 8},
         "attention": {"S": 16, "H": 2, "D": 8, "C": 16},
         "gated_mlp": {"T": 16, "C": 16, "F": 32},
         "outer_product_mean": {"S": 6, "N": 8, "C": 8, "E": 4, "Z": 8},
         "triangle_attention_starting": {"N": 6, "C": 8, "H": 2, "D": 4},
         "triangle_attention_ending": {"N": 6, "C": 8, "H": 2, "D": 4},
         "msa_row_attention": {"S": 3, "N": 6, "Cm": 8, "Cz": 4, "H": 2, "D": 4},
         "pair_transition": {"N": 6, "C": 8, "F": 32},
         "gelu_mlp": {"T": 16, "C": 16, "F": 64},
         "causal_attention": {"S": 16, "H": 2, "D": 8, "C": 16}}

KITCHEN = '''name = "kitchen"
summary = "every function, max=, powers and a contraction, in float64"
dtype = "float64"
outputs = ["out", "m"]
program = """
e[i,j]   = exp(x[i,j] * 0.1) + log(abs(x[i,j]) + 1) + sqrt(abs(x[i,j])) + rsqrt(abs(x[i,j]) + 1)
g[i,j]   = sigmoid(e[i,j]) * tanh(x[i,j]) + relu(x[i,j]) - max(x[i,j], 0.5) + min(x[i,j], -0.5)
m[i]   max= g[i,j]
p[i,j]   = g[i,j] ** 2 + (x[i,j] * x[i,j] + 1) ** -1
s[i,k]  += p[i,j] * y[j,k]
out[i,k] = -s[i,k] / (m[i] + 2)
"""
[dims]
I = 12
J = 10
K = 9
[inputs]
x = ["I", "J"]
y = ["J", "K"]
[tolerance]
rtol = 1e-9
'''
WORKLOADS = list(builtin_names()) + ["kitchen", "causal"]


def small(name: str):
    if name == "kitchen":
        return parse_workload(KITCHEN, "kitchen.toml")
    if name == "causal":        # where() masks (tests/data/causal_attention.toml)
        return causal()
    return load_workload(name, SMALL.get(name, {}))


def candidates(w, n_random: int, seed: int = 0, bounds=BOUNDS):
    space = SearchSpace(w, bounds)
    rng = np.random.default_rng(seed)
    out = [named_plan(space, n) for n in NAMED_PLANS]
    seen = {c.key for c in out}
    for _ in range(20 * n_random):
        if len(out) >= len(NAMED_PLANS) + n_random:
            break
        c = space.random(rng)
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
    return out


# ---- nvcc: every named plan and a sample of candidates compiles for sm_80 and sm_90 ---------------
@pytest.fixture(scope="module")
def nvcc_build(tmp_path_factory):
    """Every workload's plans in one .cu and one nvcc call (nvcc's own start-up is 1.1-1.4 s
    of each call here): (returncode, stderr, each error line's (workload, plan), kernels per
    workload, the object file's symbols or None)."""
    tmp = tmp_path_factory.mktemp("nvcc")
    parts, where, line = [], [], 1
    kernels_of: dict[str, int] = {}
    for i, name in enumerate(WORKLOADS):
        w = small(name)
        kernels_of[name] = 0
        # the named plans and random ones, and random ones of the CUDA backend's own space (its
        # tensor-core kernel among them)
        for j, cand in enumerate(candidates(w, RANDOM_PER_WORKLOAD) +
                                 candidates(w, 2, seed=7, bounds=GPU_BOUNDS)[len(NAMED_PLANS):]):
            # (the generator takes the workload the candidate runs: inlined ops gone)
            src, kernels = generate_cuda(rewritten(w, cand), cand, prefix=f"w{i}p{j}_")
            kernels_of[name] += len(kernels)
            where.append((line, (name, cand.name or cand.key)))
            parts.append(src)
            line += src.count("\n") + 1
    cu = tmp / "plans.cu"
    cu.write_text("\n".join(parts))
    cmd = [NVCC, "-std=c++17", "--threads", "2", "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_90,code=sm_90", "-c", str(cu), "-o", str(tmp / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    errors = []
    for l in proc.stderr.splitlines():
        m = re.search(r"\((\d+)\): error", l)
        if m:
            errors.append((next(p for start, p in reversed(where) if start <= int(m.group(1))),
                           l))
    syms = None
    if proc.returncode == 0 and shutil.which("cuobjdump"):
        r = subprocess.run(["cuobjdump", "-symbols", str(tmp / "k.o")], capture_output=True,
                           text=True)
        syms = r.stdout if r.returncode == 0 else None
    return proc.returncode, proc.stderr, errors, kernels_of, syms


@pytest.mark.skipif(NVCC is None, reason=NVCC_SKIP)
@pytest.mark.parametrize("name", WORKLOADS)
def test_generated_cuda_compiles_with_nvcc(name, nvcc_build):
    code, stderr, errors, kernels_of, syms = nvcc_build
    mine = [(plan, l) for (wl, plan), l in errors if wl == name]
    if mine:
        pytest.fail(f"nvcc rejected the generated source of {name} (plans "
                    f"{sorted({p for p, _ in mine})}):\n" + "\n".join(l for _, l in mine[:10]))
    # an error nvcc placed in no workload's lines fails every workload's test
    assert code == 0, f"nvcc failed:\n{stderr[:4000]}"
    assert kernels_of[name] > 0 or name == "kitchen"
    # every kernel appears in the object file under its (unmangled, extern "C") name
    if syms is not None:
        assert f"w{WORKLOADS.index(name)}p0_group_" in syms or kernels_of[name] == 0


def _nvrtc_libraries() -> dict[str, object]:
    """libnvrtc of each version found, loaded, by version ("12.9"): the pip wheels' layouts
    (CUDA 12's nvidia-cuda-nvrtc-cu12: nvidia/cuda_nvrtc/lib; CUDA 13's nvidia-cuda-nvrtc:
    nvidia/cu13/lib) and the system's."""
    import ctypes
    import ctypes.util
    import importlib.util
    paths = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for layout in ("cuda_nvrtc/lib", "cu1*/lib"):
            paths += sorted(Path(root).glob(f"{layout}/libnvrtc.so*"))
    found = ctypes.util.find_library("nvrtc")
    libs: dict[str, object] = {}
    for p in [str(p) for p in paths if ".alt." not in p.name] + ([found] if found else []):
        try:
            lib = ctypes.CDLL(p)
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
                continue
        except (OSError, AttributeError):
            continue
        libs.setdefault(f"{major.value}.{minor.value}", lib)
    return libs


NVRTC = _nvrtc_libraries()
NVRTC_GPU_SPACE = ("trimul_outgoing", "gated_mlp", "attention")
ARCHS = ("sm_80", "sm_90")
NVRTC_PARAMS = [pytest.param(lib, id=f"nvrtc{v}") for v, lib in sorted(NVRTC.items())] or [
    pytest.param(None, id="nvrtc", marks=pytest.mark.skip(
        reason="needs libnvrtc (pip install -e '.[nvrtc]', or '.[all]')"))]


@pytest.mark.parametrize("nvrtc", NVRTC_PARAMS)
@pytest.mark.parametrize("name", WORKLOADS)
def test_generated_cuda_compiles_with_nvrtc(name, nvrtc):
    """The runtime compiles through NVRTC (cupy.RawModule): the same sources, the same options,
    with each NVRTC found (CuPy for CUDA 12 and for CUDA 13 each load their own)."""
    import ctypes
    from autotune.backends.cuda.runtime import NVRTC_OPTIONS
    w = small(name)
    plans = candidates(w, RANDOM_PER_WORKLOAD)
    if name in NVRTC_GPU_SPACE:     # the tensor-core kernel through NVRTC too (nvcc: all)
        plans += candidates(w, 2, seed=7, bounds=GPU_BOUNDS)[len(NAMED_PLANS):]
    src = "\n".join(generate_cuda(rewritten(w, c), c, prefix=f"p{j}_")[0]
                    for j, c in enumerate(plans))

    def compile_for(arch: str) -> tuple[int, str]:
        prog = ctypes.c_void_p()
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"plans.cu", 0,
                                        None, None) == 0
        opts = [o.encode() for o in NVRTC_OPTIONS] + [f"--gpu-architecture={arch}".encode()]
        rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc, log.value.decode()
    # one program per architecture, on two threads (ctypes lets go of the GIL in NVRTC)
    with ThreadPoolExecutor(2) as pool:
        for arch, (rc, log) in zip(ARCHS, pool.map(compile_for, ARCHS)):
            assert rc == 0, f"NVRTC ({arch}) rejected {name}:\n{log[:4000]}"


@pytest.mark.skipif(NVCC is None, reason=NVCC_SKIP)
def test_one_kernel_file_compiles_alone(tmp_path):
    """What `autotune emit` writes per kernel (prelude + kernel) is a complete translation unit."""
    w = small("trimul_outgoing")
    src, kernels = generate_cuda(w, named_plan(SearchSpace(w, BOUNDS), "heuristic"))
    k = max(kernels, key=lambda k: k.smem_bytes)
    cu = tmp_path / f"{k.name}.cu"
    cu.write_text(kernel_source(src, k))
    proc = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-c", str(cu), "-o",
                           str(tmp_path / "k.o")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[:3000]


# ---- the generated kernels run under the host emulator and match the reference --------------------
@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emu-kernels")


@pytest.mark.parametrize("name", WORKLOADS)
def test_emulated_plans_match_reference(name, emulator, kernel_cache):
    w = small(name)
    inputs = w.random_inputs(seed=2)
    ref = reference(w, inputs)
    for cand in candidates(w, 2, seed=1):
        plan = CudaPlan(w, cand, kernel_cache, runtime=emulator)
        outs = plan(**inputs)
        err, why = verify(outs, ref, w.rtol)
        assert not why, f"{name} plan {cand.name or cand.key}: {why}\n{cand.to_json()}"
        # a second call reuses the plan's buffers and gives the same answer
        again = plan(**inputs)
        for o in w.outputs:
            np.testing.assert_array_equal(again[o], outs[o])


def test_emulated_boundary_tiles_and_layouts(emulator, kernel_cache):
    """Tiles that do not divide the extents, every fused chain, non-identity layouts."""
    w = load_workload("trimul_outgoing", {"N": 13, "C": 6})
    space = SearchSpace(w, BOUNDS)
    base = named_plan(space, "heuristic")
    inputs = w.random_inputs(seed=4)
    ref = reference(w, inputs)
    scheds = [GroupSchedule(s.anchor, (4, 8, 4)[: len(s.tiles)], s.impl)
              if s.impl == "loop" else s for s in base.schedules]
    cand = make_candidate(base.fused, dict(base.layouts), scheds, "odd-tiles")
    plan = CudaPlan(w, cand, kernel_cache, runtime=emulator)
    assert any(k.grid > 1 for k in plan.kernels.values())
    _, why = verify(plan(**inputs), ref, w.rtol)
    assert not why, why


def test_a_cpu_plans_stacks_and_kernels_run_on_the_gpu(emulator, kernel_cache):
    # a CPU search's plan given to the CUDA backend: its stacked siblings run as one cuBLAS
    # GEMM; a contraction on the CPU's generated kernel runs as the GPU's tensor-core kernel,
    # its blocks fitted to the GPU's ranges
    w = small("trimul_outgoing")
    cpu_bounds = replace(BOUNDS, kernel=KernelBounds(), stacks=True)
    space = SearchSpace(w, cpu_bounds)
    inputs = w.random_inputs(seed=3)
    stacked = space.build(lambda n, opts: 1 if n.startswith("stack:") else
                          "library" if n.startswith("impl:") else opts[0])
    assert stacked.stacks
    plan = CudaPlan(w, stacked, kernel_cache, runtime=emulator)
    assert list(plan.stacks) == [stacked.stacks[0][0]]
    _, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
    assert not why, why
    cpu = space.build(lambda n, opts: "kernel" if n.startswith("impl:") and "kernel" in opts
                      else 0 if n.startswith("stack:") else opts[0])
    kern = [s for s in cpu.schedules if s.impl == "kernel"]
    assert kern and all(s.kernel.vec_bytes != GPU_VEC_BYTES for s in kern)
    plan = CudaPlan(w, cpu, kernel_cache, runtime=emulator)
    blocks = [k.block for k in plan.kernels.values() if k.whole_warps]
    assert blocks and all(b % 32 == 0 and b <= 512 for b in blocks)
    out = plan(**inputs)
    _, why = verify(out, reference(w, inputs), w.rtol)
    assert not why, why


def kept_clocks(runtime, monkeypatch) -> list:
    """Every timer ``runtime.timer()`` hands out from now on, in order (its ``laps`` and
    ``seconds`` read after the run it timed)."""
    clocks, timer = [], runtime.timer

    def kept_timer():
        clocks.append(timer())
        return clocks[-1]
    monkeypatch.setattr(runtime, "timer", kept_timer)
    return clocks


def test_emulated_timed_call_and_device_inputs(emulator, kernel_cache, monkeypatch):
    w = small("gated_mlp")
    inputs = w.random_inputs(seed=6)
    plan = CudaPlan(w, named_plan(SearchSpace(w, BOUNDS), "heuristic"), kernel_cache,
                    runtime=emulator)
    clocks = kept_clocks(emulator, monkeypatch)
    outs, times = plan.timed_call(inputs, warmup=1, repeats=3)
    assert len(times) == 3 and all(t > 0 for t in times)
    _, why = verify(outs, reference(w, inputs), w.rtol)
    assert not why, why
    # each group timed from the mark after the one before it, in one more run than the timed
    # ones: every group, and together they are that run (its laps; not compared with the other
    # runs' times, which a busy machine may make faster or slower than this one: CI, stop 59)
    groups = plan.group_seconds()
    assert list(groups) == [g.anchor for g in plan.groups]
    assert all(t > 0 for t in groups.values())
    profiled = clocks[-1]
    assert len(clocks) > len(times) and len(profiled.laps) == len(groups)
    assert list(groups.values()) == pytest.approx(profiled.laps)
    assert sum(profiled.laps) <= profiled.seconds
    with pytest.raises(ValueError, match="missing input"):
        plan(**{k: v for k, v in list(inputs.items())[1:]})


# ---- cuBLAS argument lists --------------------------------------------------------------------
def _strided(rng, batch, rows, cols, order):
    """A (batch, rows, cols) array stored in ``order`` (a permutation of 0,1,2, outermost first),
    returned as the logical view and its Mat."""
    shape = (batch, rows, cols)
    store = rng.standard_normal([shape[d] for d in order])
    view = store.transpose(np.argsort(order))
    st = [s // view.itemsize for s in view.strides]
    return view, store, Mat(rows, cols, st[1], st[2], st[0] if batch > 1 else 0)


@pytest.mark.parametrize("oa,ob,oc", list(itertools.product(
    [(0, 1, 2), (0, 2, 1), (1, 0, 2), (2, 0, 1)], repeat=3))[::3])
def test_plan_gemm_matches_matmul(oa, ob, oc):
    rng = np.random.default_rng(sum(oa) * 7 + sum(ob) * 3 + sum(oc))
    batch, M, K, N = 3, 5, 4, 6
    A, a_store, ma = _strided(rng, batch, M, K, oa)
    B, b_store, mb = _strided(rng, batch, K, N, ob)
    C, c_store, mc = _strided(rng, batch, M, N, oc)
    call = plan_gemm(ma, mb, mc, batch)      # every matrix here has a unit stride: no copies
    assert not isinstance(call, str), call
    bufs = {"A": a_store, "B": b_store}
    emulate_gemm(call, bufs[call.first], bufs[call.second], c_store, 0.5)
    np.testing.assert_allclose(C, 0.5 * A @ B, rtol=1e-12)


def test_plan_gemm_transposes_and_copies():
    # row-major everything: C^T = B^T A^T with no transposes
    call = plan_gemm(Mat(5, 4, 4, 1, 20), Mat(4, 6, 6, 1, 24), Mat(5, 6, 6, 1, 30), 2)
    assert (call.first, call.transa, call.transb, call.ldc) == ("B", "N", "N", 6)
    # column-major output: C = A B directly
    call = plan_gemm(Mat(5, 4, 4, 1, 0), Mat(4, 6, 1, 4, 0), Mat(5, 6, 1, 5, 0), 1)
    assert (call.first, call.transa, call.transb, call.ldc) == ("A", "T", "N", 5)
    # an operand with no unit stride must be copied first
    assert plan_gemm(Mat(5, 4, 8, 2, 0), Mat(4, 6, 6, 1, 0), Mat(5, 6, 6, 1, 0), 1) == "A"


# ---- shared-memory limits ------------------------------------------------------------------------
class _NoCompile(HostEmulator):
    def compile(self, *a, **k):
        raise AssertionError("compiled although a tile exceeds shared memory")


def _with_tiles(cand, anchor, tiles):
    scheds = [GroupSchedule(s.anchor, tiles, s.impl) if s.anchor == anchor else s
              for s in cand.schedules]
    return make_candidate(cand.fused, dict(cand.layouts), scheds, cand.name)


def test_tiles_over_shared_memory_are_rejected_before_launch(tmp_path):
    w = load_workload("trimul_outgoing", {"N": 702})
    heur = named_plan(SearchSpace(w, BOUNDS), "heuristic")
    big = _with_tiles(heur, "xn", (8, 702, 128))       # 8 x 702 x 128 floats of xc: 2.9 MB
    with pytest.raises(TileTooLarge, match=r"shared memory per block .* > 227 KB"):
        CudaPlan(w, big, tmp_path, runtime=_NoCompile(smem_limit=227 * 1024))
    _, kernels = generate_cuda(w, big)
    with pytest.raises(TileTooLarge):
        check_limits(kernels, 163 * 1024, "sm_80")
    with pytest.raises(TileTooLarge):
        generate_cuda(w, big, smem_limit=227 * 1024)
    # the cost model learns the same: over the limit on the GPU presets, never on the CPU
    assert shared_bytes(w, big) == max(k.smem_bytes for k in kernels) > 227 * 1024
    assert over_limit(w, big, preset("h200")) and over_limit(w, big, preset("a100"))
    assert not over_limit(w, big, preset("cpu"))
    assert not over_limit(w, heur, preset("h200"))


def test_shared_bytes_agrees_with_generated_kernels():
    for name in builtin_names():
        w = small(name)
        for cand in candidates(w, 8, seed=5):
            rw = rewritten(w, cand)
            _, kernels = generate_cuda(rw, cand)
            assert shared_bytes(rw, cand) == max([k.smem_bytes for k in kernels], default=0)
            for k in kernels:
                assert 32 <= k.block <= 256 and k.block % 32 == 0
                assert k.grid == math.prod(math.ceil(e / t) for e, t in
                                           zip(w.op(k.anchor).out_shape, k.tiles))


def test_precision_follows_the_tolerance():
    w = small("trimul_outgoing")
    assert precision_of(w) == "fp32"                     # rtol 1e-4: no TF32
    loose = parse_workload(KITCHEN.replace('dtype = "float64"', 'dtype = "float32"')
                           .replace("rtol = 1e-9", "rtol = 1e-3"), "k.toml")
    assert precision_of(loose) == "tf32"
    assert precision_of(small("kitchen")) == "fp64"


# ---- autotune emit ---------------------------------------------------------------------------------
def test_emit_writes_one_cu_per_kernel_and_a_readme(tmp_path):
    runner = CliRunner()
    out = tmp_path / "cuda"
    r = runner.invoke(app, ["emit", "trimul_outgoing", "--dims", "N=16,C=8", "--plan",
                            "heuristic", "--device", "cuda", "--out", str(out)])
    assert r.exit_code == 0, r.output
    w = small("trimul_outgoing")
    _, kernels = generate_cuda(w, named_plan(SearchSpace(w, BOUNDS), "heuristic"))
    assert sorted(p.name for p in out.glob("*.cu")) == sorted(f"{k.name}.cu" for k in kernels)
    readme = (out / "README.txt").read_text()
    for k in kernels:
        assert f"{k.name}.cu: anchor {k.anchor}" in readme and f"grid {k.grid}" in readme
    assert "library GEMM (cuBLAS, fp32)" in readme
    r = runner.invoke(app, ["emit", "trimul_outgoing", "--dims", "N=16,C=8", "--plan", "greedy",
                            "--device", "cpu", "--out", str(tmp_path / "cpu")])
    assert r.exit_code == 0, r.output
    assert "void group_" in (tmp_path / "cpu" / "plan.c").read_text()
    r = runner.invoke(app, ["emit", "--plan", "fastest", "--out", str(tmp_path / "x")])
    assert r.exit_code == 1 and "--plan 'fastest'" in r.output


@pytest.mark.skipif(cuda_device_present(), reason=GPU_PRESENT_SKIP)
def test_emit_best_without_gpu_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["emit", "--plan", "best", "--device", "cuda", "--out",
                                 str(tmp_path)])
    assert r.exit_code == 1
    assert len(r.output.strip().splitlines()) == 1 and "no NVIDIA GPU" in r.output


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("name", WORKLOADS)
def test_gpu_plans_match_reference(name, gpu, tmp_path):
    w = small(name)
    inputs = w.random_inputs(seed=3)
    ref = reference(w, inputs)
    for cand in candidates(w, 3, seed=2):
        plan = CudaPlan(w, cand, tmp_path, runtime=gpu)
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, f"{name} plan {cand.name or cand.key}: {why}\n{cand.to_json()}"


@pytest.mark.cuda
def test_gpu_named_plans_at_larger_dims_and_event_timing(gpu, tmp_path, monkeypatch):
    w = load_workload("trimul_outgoing", {"N": 96, "C": 32})
    clocks = kept_clocks(gpu, monkeypatch)
    inputs = w.random_inputs(seed=1)
    ref = reference(w, inputs)
    for name in NAMED_PLANS:
        plan = CudaPlan(w, named_plan(SearchSpace(w, BOUNDS), name), tmp_path, runtime=gpu)
        outs, times = plan.timed_call(inputs, warmup=1, repeats=3)
        _, why = verify(outs, ref, w.rtol)
        assert not why, f"{name}: {why}"
        assert len(times) == 3 and all(0 < t < 10 for t in times)
        assert plan.precision == "fp32"
        groups = plan.group_seconds()            # CUDA events between the groups
        assert list(groups) == [g.anchor for g in plan.groups]
        assert all(t > 0 for t in groups.values())
        # the laps of one more run, not graph-replayed: they add up to that run
        assert list(groups.values()) == pytest.approx(clocks[-1].laps)
        assert sum(clocks[-1].laps) <= clocks[-1].seconds + 1e-5     # events: ~0.5 us apart


@pytest.mark.cuda
def test_gpu_shared_memory_opt_in(gpu, tmp_path):
    w = load_workload("trimul_outgoing", {"N": 128, "C": 128})
    heur = named_plan(SearchSpace(w, BOUNDS), "heuristic")
    cand = _with_tiles(heur, "xn", (1, 128, 128))      # xc: 64 KB of shared memory per block
    plan = CudaPlan(w, cand, tmp_path, runtime=gpu)
    assert any(k.needs_opt_in for k in plan.kernels.values())
    inputs = w.random_inputs(seed=5)
    _, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
    assert not why, why


@pytest.mark.cuda
def test_gpu_tf32_when_tolerance_admits(gpu, tmp_path):
    import dataclasses
    w = load_workload("gated_mlp", {"T": 64, "C": 64, "F": 128})
    loose = dataclasses.replace(w, rtol=1e-2)
    plan = CudaPlan(loose, named_plan(SearchSpace(loose, BOUNDS), "unfused"), tmp_path,
                    runtime=gpu)
    assert plan.precision == "tf32"
    inputs = loose.random_inputs(seed=1)
    _, why = verify(plan(**inputs), reference(loose, inputs), loose.rtol)
    assert not why, why


@pytest.mark.cuda
def test_gpu_search_smoke(gpu, tmp_path):
    from autotune.api import run_search
    from autotune.backends.base import MeasureSettings
    from autotune.search.config import SearchConfig
    w = load_workload("trimul_outgoing", {"N": 32, "C": 16})
    res = run_search(w, "cuda", tmp_path / "plans.sqlite", SearchConfig(budget=6),
                     MeasureSettings(warmup=1, repeats=2))
    assert res.best is not None and res.progress.measured >= 1


def test_neighbouring_threads_store_to_neighbouring_addresses():
    # every loop kernel's global stores at trimul N=702 (heuristic and unfused plans): the
    # index a thread's flat position decodes first (the fastest across a warp) walks the
    # stored tensor at unit stride.  The CPU loop orders had the centre layer norm's store
    # 492,804 floats apart between neighbouring threads.
    w = load_workload("trimul_outgoing", {"N": 702, "C": 128})
    stores = 0
    for plan in ("heuristic", "unfused"):
        src, _ = generate_cuda(w, named_plan(SearchSpace(w, TileBounds(1, 1024)), plan))
        for block in src.split("    for (int f = threadIdx.x; f < cnt; f += blockDim.x) {")[1:]:
            fast = re.search(r"int q = f;\n\s+const int (v_\w+) = ", block).group(1)
            body = block.split("\n  }\n")[0]
            for t, off in re.findall(r"G_(\w+)\[([^\]]+)\] = val;", body):
                terms = dict(x.split("*") for x in off.split(" + "))
                assert terms.get(fast) == "1", f"{plan}: store to {t} at {off}, fastest {fast}"
                stores += 1
    assert stores >= 8
