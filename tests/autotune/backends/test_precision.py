"""A library contraction's arithmetic on the CUDA backend (search_spaces.precision): the TF32
rounding and split against float64, the space's precision:ANCHOR question and who gets it,
plans in each precision under the host emulator (whose GEMM model rounds TF32 operands), the
split kernel through nvcc, the host's GEMM planning done once per plan, and the model's price."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

import costmodel
from autotune.backends.base import verify
from autotune.backends.cuda import library as cuda_library
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.cuda.kind import CudaBackendKind
from autotune.backends.cuda.runtime import SPLIT_TF32_SOURCE
from autotune.reference import reference
from costmodel.devices import CPU_DEFAULT, preset
from search_spaces import load_workload, parse_workload
from search_spaces.answers import params_of
from search_spaces.loader import builtin_text
from search_spaces.plans import named_plan
from search_spaces.precision import round_tf32, split_tf32
from search_spaces.space import SearchSpace

CUDA_BOUNDS = CudaBackendKind().tile_bounds
NVCC = shutil.which("nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")


def _with_precision(cand, precision):
    return replace(cand, schedules=tuple(replace(s, precision=precision) if s.impl == "library"
                                         else s for s in cand.schedules))


def test_tf32_rounding_and_split():
    x = np.array([1 + 2**-11, -(1 + 2**-11), 1 + 2**-10 + 2**-11, 3.0, 0.0], np.float32)
    # halfway cases go away from zero; representable values stay
    assert round_tf32(x).tolist() == [1 + 2**-10, -(1 + 2**-10), 1 + 2**-9, 3.0, 0.0]
    rng = np.random.default_rng(0)
    v = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-6, 6, 10_000)).astype(np.float32)
    hi, lo = split_tf32(v)
    assert np.array_equal(round_tf32(hi), hi) and np.array_equal(round_tf32(lo), lo)
    # ten mantissa bits each: the pair holds about 22 of float32's 24
    err = np.abs((hi.astype(np.float64) + lo) - v) / np.abs(v)
    assert err.max() < 2.0 ** -21
    assert (np.abs(hi - v) / np.abs(v)).max() <= 2.0 ** -11


def test_split_products_reach_float32_accuracy_where_tf32_does_not():
    # trimul's triangle einsum with float32 sums: three TF32 products against one
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 64, 32)).astype(np.float32)
    ein = lambda x, y, dt: np.einsum("ikc,jkc->ijc", x, y, dtype=dt).astype(np.float64)
    ref = ein(a.astype(np.float64), b.astype(np.float64), np.float64)
    rel = lambda got: float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    (ah, al), (bh, bl) = split_tf32(a), split_tf32(b)
    fp32 = rel(ein(a, b, np.float32))
    split = rel(ein(al, bh, np.float32) + ein(ah, bl, np.float32) + ein(ah, bh, np.float32))
    tf32 = rel(ein(round_tf32(a), round_tf32(b), np.float32))
    assert split < 2 * fp32 < 1e-6
    assert tf32 > 1e-4                          # over trimul's rtol: not offered there


def test_the_cuda_space_asks_each_library_contractions_precision(small):
    w = small("trimul_outgoing")                 # float32, rtol 1e-4
    space = SearchSpace(w, CUDA_BOUNDS)
    assert space.precisions == ["fp32", "3xtf32"]
    asked = {}
    cand = space.build(lambda n, opts: asked.setdefault(n, opts) and (
        "3xtf32" if n.startswith("precision:") else opts[0]))
    lib = [s.anchor for s in cand.schedules if s.impl == "library"]
    assert lib and {f"precision:{a}" for a in lib} <= set(asked)
    assert all(s.precision == "3xtf32" for s in cand.schedules if s.impl == "library")
    assert params_of(space, cand) is not None
    # the default answer stores nothing: a plan's key is as it was
    plain = named_plan(space, "heuristic")
    assert "precision" not in plain.to_json()
    assert plain.key == named_plan(SearchSpace(w, replace(CUDA_BOUNDS, precisions=())),
                                   "heuristic").key
    # loose tolerances add plain TF32 (and make it the default); float64, the CPU: no question
    loose = parse_workload(builtin_text("trimul_outgoing").replace("rtol = 1e-4", "rtol = 1e-3"),
                           "loose.toml")
    assert SearchSpace(loose, CUDA_BOUNDS).precisions == ["tf32", "fp32", "3xtf32"]
    double = parse_workload(builtin_text("trimul_outgoing").replace('dtype = "float32"',
                                                                    'dtype = "float64"'), "d.toml")
    assert double.dtype == "float64"
    assert SearchSpace(double, CUDA_BOUNDS).precisions == ["fp64"]
    assert SearchSpace(w).precisions == ["fp32"]
    assert SearchSpace(w).meaning("precision:t") == ["fp32"]


@needs_gxx
def test_emulated_plans_in_each_precision(tmp_path):
    # every library contraction split (three TF32 products each, small ones first) verifies
    # at the block's rtol; plain TF32 does not, in the emulator's TF32 model as on a GPU
    w = load_workload("trimul_outgoing", {"N": 24, "C": 16})
    base = named_plan(SearchSpace(w, CUDA_BOUNDS), "heuristic")
    n_lib = sum(s.impl == "library" for s in base.schedules)
    assert n_lib >= 3
    inputs = w.random_inputs(seed=4)
    ref = reference(w, inputs)
    got = {}
    for prec in ("", "3xtf32", "tf32"):
        rt = HostEmulator(threads=2)
        out = CudaPlan(w, _with_precision(base, prec), tmp_path, runtime=rt)(**inputs)
        got[prec] = (verify(out, ref, w.rtol)[1], rt)
    assert not got[""][0] and got[""][1].precisions == ["fp32"] * n_lib
    why, rt = got["3xtf32"]
    assert not why, why
    assert rt.precisions == ["tf32"] * 3 * n_lib and rt.splits == 2 * n_lib
    assert got["tf32"][0], "plain TF32 should miss rtol 1e-4"


@needs_gxx
def test_library_calls_are_planned_once_per_plan(tmp_path, monkeypatch):
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    cand = named_plan(SearchSpace(w, CUDA_BOUNDS), "heuristic")
    calls = []
    real = cuda_library.plan_gemm
    monkeypatch.setattr(cuda_library, "plan_gemm", lambda *a: calls.append(a) or real(*a))
    plan = CudaPlan(w, cand, tmp_path, runtime=HostEmulator(threads=2))
    inputs = w.random_inputs(seed=1)
    first = plan(**inputs)
    n = len(calls)
    assert n >= sum(s.impl == "library" for s in cand.schedules)
    again = plan(**w.random_inputs(seed=2))
    plan(**inputs)
    assert len(calls) == n                       # replayed, not planned again
    assert not verify(again, reference(w, w.random_inputs(seed=2)), w.rtol)[1]
    assert not verify(first, reference(w, inputs), w.rtol)[1]


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH (the CUDA toolkit)")
def test_split_kernel_compiles_for_sm80_and_sm90(tmp_path):
    cu = tmp_path / "split.cu"
    cu.write_text(SPLIT_TF32_SOURCE)
    proc = subprocess.run([NVCC, "-std=c++17", "-gencode", "arch=compute_80,code=sm_80",
                           "-gencode", "arch=compute_90,code=sm_90", "-c", str(cu),
                           "-o", str(tmp_path / "split.o")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_model_prices_the_split_by_shape():
    # as measured on an H200 (bench/results/h200-dda7f13): the triangle einsum (batch 128 of
    # 702^3) and the K=128 projections run three TF32 products slower than one SGEMM (cuBLAS's
    # TF32 reaches 95-130 TFLOP/s there: 3.3 against 2.0 ms for the einsum), gated_mlp's
    # 4096 x 1024 x 4096 contractions faster (0.36-0.42 against 0.68-0.70 ms); plain TF32 is
    # cheapest; the CPU has no tensor cores
    dev = preset("h200")

    def library(w, prec):
        base = named_plan(SearchSpace(w, CUDA_BOUNDS), "heuristic")
        est = costmodel.estimate(w, _with_precision(base, prec), dev)
        return {g.anchor: g for g in est.groups if g.impl == "library"}
    tri = load_workload("trimul_outgoing", {"N": 702})
    lib = {prec: library(tri, prec) for prec in ("", "3xtf32", "tf32")}
    assert lib["3xtf32"]["t"].predicted_s > 1.3 * lib[""]["t"].predicted_s
    assert lib["3xtf32"]["pa"].predicted_s > lib[""]["pa"].predicted_s
    assert lib["tf32"]["t"].predicted_s < lib[""]["t"].predicted_s
    assert lib["3xtf32"]["t"].launches == 5
    mlp = load_workload("gated_mlp", {"T": 4096, "C": 1024, "F": 4096})
    split, plain = library(mlp, "3xtf32"), library(mlp, "")
    assert all(split[a].predicted_s < 0.7 * plain[a].predicted_s for a in ("g", "u", "y"))
    base = named_plan(SearchSpace(tri, CUDA_BOUNDS), "heuristic")
    cpu = [costmodel.estimate(tri, _with_precision(base, p), CPU_DEFAULT).total_s
           for p in ("", "3xtf32")]
    assert cpu[0] == cpu[1]
