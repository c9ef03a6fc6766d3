"""The CUDA backend's tensor-core contraction kernel (autotune.backends.cuda.mma_kernel): the
space offers it with its precisions, its plans match the float64 reference under the host
emulator (mma.sync emulated lane by lane: the PTX fragment layout and the TF32 rounding are
what is checked), every layout is read and written in place, the split reaches float32
accuracy where one TF32 product does not, the sources compile for sm_80 and sm_90 without
register spills, and the model prices the kernel on a GPU."""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

import costmodel
from autotune.backends.base import verify
from autotune.backends.cuda.codegen import generate_cuda
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.cuda.kind import CudaBackendKind
from autotune.reference import reference
from costmodel.devices import preset
from search_spaces import builtin_names, load_workload, parse_workload
from search_spaces.answers import params_of
from search_spaces.candidate import make_candidate
from search_spaces.kernel import gpu_options
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.rewrite import rewritten
from search_spaces.space import SearchSpace
from tests.conftest import SMALL_DIMS
from tests.support.skips import NVCC_SKIP

GPU = CudaBackendKind().tile_bounds
NVCC = shutil.which("nvcc")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
# the shared small dims, trimul's smaller (the emulated warp is slow) and gated_mlp's off the
# 16-wide fragments
SMALL = {**SMALL_DIMS, "trimul_outgoing": {"N": 12, "C": 8}, "trimul_incoming": {"N": 12, "C": 8},
         "gated_mlp": {"T": 20, "C": 16, "F": 24}}


def kernel_plans(w, n: int, seed: int = 0, fuse=None):
    """``n`` candidates of the CUDA space with every GEMM-shaped contraction on the kernel,
    no chain, the other answers at random (``fuse``: the answer to every fusion and pair
    question)."""
    space = SearchSpace(w, GPU)
    out, seen = [], set()
    for s in range(20 * n):
        r = random.Random(seed * 1000 + s)

        def choose(q, opts):
            if q.startswith("impl:"):
                return "kernel" if "kernel" in opts else opts[0]
            if q.startswith("chain:"):
                return 0           # a chain walks its contraction, not on the kernel
            if fuse is not None and q.split(":")[0] in ("fuse", "pair"):
                return fuse
            return r.choice(list(opts))
        c = space.build(choose)
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
        if len(out) == n:
            break
    return out


# ---- the space -----------------------------------------------------------------------------------
def test_the_gpu_space_offers_the_kernel_with_the_precisions_the_tolerance_admits():
    w = load_workload("gated_mlp", SMALL["gated_mlp"])      # rtol 1e-4: the split only
    space = SearchSpace(w, GPU)
    assert "kernel" in space.impl_options("g") and space.kernel_precisions == ["3xtf32"]
    asked = {}
    cand = space.build(lambda q, o: asked.setdefault(q, o) and (
        "kernel" if q.startswith("impl:") else o[0]))
    kern = [s for s in cand.schedules if s.impl == "kernel"]
    assert kern and all(s.precision == "3xtf32" for s in kern)
    assert not any(q.endswith(":precision") for q in asked)      # one choice: not asked
    assert all(s.kernel.vec_bytes == 64 and s.kernel.mr % 16 == 0 for s in kern)
    assert params_of(space, cand) is not None
    # plain TF32 where the tolerance admits it: then the kernel's precision is a question
    loose = replace(w, rtol=1e-3)
    space = SearchSpace(loose, GPU)
    assert space.kernel_precisions == ["tf32", "3xtf32"]
    cand = space.build(lambda q, o: "kernel" if q.startswith("impl:") else
                       "3xtf32" if q.endswith(":precision") else o[0])
    assert {s.precision for s in cand.schedules if s.impl == "kernel"} == {"3xtf32"}
    assert space.meaning("kernel:g:precision") == ["tf32", "3xtf32"]
    assert params_of(space, cand) is not None
    # a float64 workload: no tensor-core precision, so no kernel on the GPU
    w64 = replace(w, dtype="float64")
    assert "kernel" not in SearchSpace(w64, GPU).impl_options("g")


# ---- the emulated kernel against the reference ---------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("name", [n for n in builtin_names()])
def test_kernel_plans_of_every_builtin_match_the_reference(name, emulator, tmp_path):
    w = load_workload(name, SMALL.get(name, {}))
    inputs = w.random_inputs(seed=4)
    ref = reference(w, inputs)
    plans = kernel_plans(w, 1, fuse=1) + kernel_plans(w, 1, seed=1)
    ran = 0
    for cand in plans:
        plan = CudaPlan(w, cand, tmp_path, runtime=emulator)
        ran += sum(k.whole_warps for k in plan.kernels.values())
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, f"{cand.key[:12]} {sorted(cand.fused_pairs)}: {why}"
    assert ran > 0


@needs_gxx
def test_pairs_prologues_and_epilogues_run_inside_the_kernel(emulator, tmp_path):
    # trimul's kernels over random fusions: gated projections as pairs, gates and the output
    # gate as epilogues, producers of either operand as prologues, each plan verified
    w = load_workload("trimul_outgoing", SMALL["trimul_outgoing"])
    inputs = w.random_inputs(seed=5)
    ref = reference(w, inputs)
    seen = {"prologue_a": 0, "prologue_b": 0, "pair": 0, "epilogue": 0}
    for cand in kernel_plans(w, 3, seed=2):        # (a seed whose three cover all four)
        plan = CudaPlan(w, cand, tmp_path, runtime=emulator)
        for k in plan.kernels.values():
            if k.whole_warps:
                parts = kernel_parts(plan.w, cand.fused_pairs, k.anchor)
                seen["prologue_a"] += parts.prologue_a is not None
                seen["prologue_b"] += parts.prologue_b is not None
                seen["pair"] += bool(parts.pair)
                seen["epilogue"] += parts.epilogue is not None
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, f"{sorted(cand.fused_pairs)}: {why}"
    assert all(seen.values()), seen


GEMM = '''name = "odd_gemm"
summary = "a GEMM with both operands transposed, odd extents and a gated epilogue"
dtype = "float32"
outputs = ["out"]
program = """
p[i,j] += a[k,i] * b[j,k]
out[i,j] = sigmoid(g[j]) * p[i,j] * 0.5
"""
[dims]
I = 37
J = 45
K = 29
[inputs]
a = ["K", "I"]
b = ["J", "K"]
g = ["J"]
[tolerance]
rtol = RTOL
'''


def _all_params(cand, params):
    return replace(cand, schedules=_kernel_schedules(cand, kernel=params))


def _kernel_schedules(cand, **changes):
    """``cand``'s schedules with ``changes`` made to each kernel group's."""
    return tuple(replace(s, **changes) if s.impl == "kernel" else s for s in cand.schedules)


def _odd(rtol: float):
    return parse_workload(GEMM.replace("RTOL", repr(rtol)), "odd_gemm.toml")


def _kernel_cand(w, precision: str, out_perm=(0, 1), layouts=None):
    space = SearchSpace(w, GPU)
    base = space.build(lambda q, o: "kernel" if q.startswith("impl:") else
                       1 if q.startswith("fuse:") else o[0])
    scheds = _kernel_schedules(base, precision=precision)
    lay = {**dict(base.layouts), "out": out_perm, **(layouts or {})}
    return make_candidate(base.fused, {t: p for t, p in lay.items() if t in w.shapes}, scheds)


@needs_gxx
@pytest.mark.parametrize("out_perm", [(0, 1), (1, 0)])
def test_the_split_reaches_float32_accuracy_where_one_tf32_product_does_not(out_perm, emulator,
                                                                             tmp_path):
    w = _odd(1e-4)
    inputs = w.random_inputs(seed=7)
    ref = reference(w, inputs)["out"]
    errs = {}
    for prec in ("3xtf32", "tf32"):
        cand = _kernel_cand(w, prec, out_perm)
        plan = CudaPlan(w, cand, tmp_path, runtime=emulator)
        assert [k.members for k in plan.kernels.values()] == [("p", "out")]
        got = plan(**inputs)["out"]
        errs[prec] = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    # the emulated cvt.rna and m16n8k8 layout: 37 x 45 x 29 crosses every fragment edge
    assert errs["3xtf32"] < 1e-6
    assert 1e-5 < errs["tf32"] < 1e-2 and errs["tf32"] > 30 * errs["3xtf32"]


# ---- nvcc: the kernels compile for sm_80 and sm_90, without spills ----------------------------------
@pytest.mark.skipif(NVCC is None, reason=NVCC_SKIP)
@pytest.mark.parametrize("name", ["trimul_outgoing", "gated_mlp"])
def test_kernel_sources_compile_for_sm80_and_sm90_without_spills(name, tmp_path):
    w = load_workload(name)                                 # default dims
    parts, names = [], []
    # the largest warp tile, a pair's, and random ones (the other built-ins' kernels compile in
    # test_cuda_codegen's nvcc and NVRTC tests, at small dims)
    big = replace(gpu_options().default, mr=64, nr=64, mc=128, nc=128)
    plans = [_all_params(c, big) for c in kernel_plans(w, 1, fuse=1)] + \
        kernel_plans(w, 1, seed=3)
    for j, cand in enumerate(plans):
        src, kernels = generate_cuda(rewritten(w, cand), cand, prefix=f"p{j}_")
        parts.append(src)
        names += [k.name for k in kernels if k.whole_warps]
    assert names
    cu = tmp_path / f"{name}.cu"
    cu.write_text("\n".join(parts))
    for arch in ("80", "90"):
        proc = subprocess.run([NVCC, "-std=c++17", f"-arch=sm_{arch}", "-Xptxas", "-v", "-c",
                               str(cu), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[:3000]
        for k in names:
            m = re.search(rf"Compiling entry function '{k}'.*?(\d+) bytes spill stores",
                          proc.stderr, re.S)
            assert m and m.group(1) == "0", f"{k} on sm_{arch} spills registers"


# ---- the model ------------------------------------------------------------------------------------
def test_the_model_prices_the_gpu_kernel_as_a_tensor_core_roofline():
    w = load_workload("trimul_outgoing", {"N": 256, "C": 128})
    dev = preset("h200")
    prices = {}
    first = {"a": (2, 0, 1), "b": (2, 0, 1)}       # channel-first: k at unit stride
    for prec, lay in (("3xtf32", first), ("tf32", first), ("last", {})):
        cand = _kernel_cand(w, prec.replace("last", "3xtf32"), layouts=lay)
        est = costmodel.estimate(w, cand, dev)
        prices[prec] = {g.anchor: g for g in est.groups if g.impl == "kernel"}
    t = next(a for a, g in prices["3xtf32"].items() if "t" in g.ops)
    big, one = prices["3xtf32"][t], prices["tf32"][t]
    # the triangle product is compute-bound: three products cost about three times one
    assert big.bound == "compute" and 2.5 < big.predicted_s / one.predicted_s < 3.1
    # channel-last operands: each block's slices a stride apart, a sector per element
    last = prices["last"][t]
    assert last.bound == "memory" and last.predicted_s > 1.2 * big.predicted_s
    # a pair computes both contractions: its flops are twice one projection's
    pairs = [g for g in prices["3xtf32"].values() if len(g.ops) >= 3]
    single = [g for g in prices["3xtf32"].values() if len(g.ops) == 2 and "t" not in g.ops]
    if pairs and single:
        assert pairs[0].flops > 1.9 * min(s.flops for s in single)
    # the same candidate on the CPU is the CPU kernel's price, not the GPU's
    cpu = costmodel.estimate(w, _kernel_cand(w, "3xtf32"), preset("cpu"))
    assert cpu.total_s > 10 * sum(g.predicted_s for g in prices["3xtf32"].values())


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("name", ["trimul_outgoing", "gated_mlp", "attention"])
def test_gpu_kernel_plans_match_the_reference(name, gpu, tmp_path):
    # the real mma.sync: its fragment layout and cvt.rna, as the emulator models them
    w = load_workload(name, SMALL[name])
    inputs = w.random_inputs(seed=11)
    ref = reference(w, inputs)
    for cand in kernel_plans(w, 2, fuse=1) + kernel_plans(w, 2, seed=4):
        _, why = verify(CudaPlan(w, cand, tmp_path, runtime=gpu)(**inputs), ref, w.rtol)
        assert not why, f"{sorted(cand.fused_pairs)}: {why}"


@pytest.mark.cuda
def test_gpu_split_and_tf32_accuracy_on_odd_extents(gpu, tmp_path):
    w = _odd(1e-4)
    inputs = w.random_inputs(seed=7)
    ref = reference(w, inputs)["out"]
    for prec, lo, hi in (("3xtf32", 0.0, 1e-6), ("tf32", 1e-5, 1e-2)):
        got = CudaPlan(w, _kernel_cand(w, prec, (1, 0)), tmp_path, runtime=gpu)(**inputs)["out"]
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        assert lo < err < hi, (prec, err)


# ---- the K slices' copies: cp.async, 16 bytes where storage allows, two stages --------------------
VEC_GEMM = '''name = "vec_gemm"
summary = "a GEMM whose operands are read along their unit-stride dims, one extent off the tile"
dtype = "float32"
outputs = ["out"]
program = """
out[i,j] += a[i,k] * b[k,j]
"""
[dims]
I = 37
J = 44
K = 40
[inputs]
a = ["I", "K"]
b = ["K", "J"]
[tolerance]
rtol = 1e-4
'''


@needs_gxx
def test_slices_copy_16_bytes_where_storage_allows_and_zero_fill_the_edges(emulator, tmp_path):
    """a[i,k] along k (K = 40) and b[k,j] along j (J = 44, off every block tile's width) go
    four floats a copy, the slices past the edges zero-filled; a layout that puts an odd
    extent or a stride of 37 floats along the vector copies one float a time; every variant
    matches the reference."""
    w = parse_workload(VEC_GEMM, "vec_gemm.toml")
    inputs = w.random_inputs(seed=11)
    ref = reference(w, inputs)
    seen = {}
    for mc, nc, kc in ((64, 64, 32), (128, 128, 16)):
        cand = _all_params(_kernel_cand(w, "3xtf32"),
                           replace(gpu_options().default, mc=mc, nc=nc, kc=kc))
        src, _ = generate_cuda(w, cand)
        seen[mc] = (src.count("at_cp16(&"), src.count("at_cp4(&"))
        plan = CudaPlan(w, cand, tmp_path, runtime=emulator)
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, why
    # both operands by vectors (each slice load emitted twice: the first slice, the next ones)
    assert all(v == (4, 0) for v in seen.values()), seen
    # the same GEMM with b[k,j] read along k (j outermost: J's stride 40) and a's i odd
    at_k = parse_workload(VEC_GEMM.replace('b = ["K", "J"]', 'b = ["J", "K"]').replace(
        "b[k,j]", "b[j,k]"), "vec_gemm_t.toml")
    src, _ = generate_cuda(at_k, _kernel_cand(at_k, "3xtf32"))
    assert src.count("p_b + (inb") and "at_cp16(&Bn" not in src
    plan = CudaPlan(at_k, _kernel_cand(at_k, "3xtf32"), tmp_path, runtime=emulator)
    ins = at_k.random_inputs(seed=12)
    _, why = verify(plan(**ins), reference(at_k, ins), at_k.rtol)
    assert not why, why


def test_two_stages_where_both_fit_one_for_the_largest_pair():
    from autotune.backends.cuda.mma_kernel import TWO_STAGE_BYTES
    w = load_workload("trimul_outgoing", SMALL["trimul_outgoing"])
    big = replace(gpu_options().default, mr=32, nr=32, mc=128, nc=128, kc=32)
    stages = {}
    for cand in kernel_plans(w, 2, fuse=1):
        cand = _all_params(cand, big)
        src, _ = generate_cuda(rewritten(w, cand), cand)
        for m in re.finditer(r"anchor (\w+), tensor-core.*?(\d) stage\(s\), shared (\d+) B",
                             src):
            stages[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    assert stages and all(b <= TWO_STAGE_BYTES for n, b in stages.values() if n == 2), stages
    assert all(2 * b > TWO_STAGE_BYTES for n, b in stages.values() if n == 1), stages
    assert {n for n, _ in stages.values()} == {1, 2}, stages     # a pair at 128 x 128: one
