"""The generated contraction kernel against NumPy's float64 matmul: edge shapes (M, N, K not
multiples of the tiles, K = 1 and 0, batches), strided and transposed operands, both dtypes,
every packing and threading choice, both store orientations, and the fusion hooks."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from search_spaces.kernel import (OUTER_A, PACK_ALL_BYTES, SPLIT_BATCH, SPLIT_N, KernelBounds,
                                  KernelParams, default_params, kernel_options, legalize,
                                  micro_tiles)
from autotune.backends.cpu.executor import load_gemm_kernel
from autotune.backends.cpu.gemm_call import store_for
from autotune.backends.cpu.gemm_driver import WIDE_PRAGMA, kernel_source
from autotune.backends.buffers import aligned_empty
from autotune.backends.cpu.gemm_kernel import (STORE_COLS, STORE_ROWS, STREAM_ALIGN, KernelSpec,
                                               Transform)
from autotune.backends.cpu.machine import machine_bounds


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gemm-kernels"))


def _small(dtype: str, **kw) -> KernelParams:
    """Blocks far smaller than any shape below, so every loop runs several blocks and edges."""
    item = np.dtype(dtype).itemsize
    vb = machine_bounds().vec_bytes[0]
    lanes = vb // item
    base = KernelParams(mr=6, nr=2 * lanes, mc=12, kc=16, nc=4 * lanes, vec_bytes=vb)
    return replace(base, **kw)


def _operands(rng, dtype, nb, m, n, k, layout):
    """a (nb, m, k) and b (nb, k, n) in the given layout: row-major, column-major (transposed
    storage) or strided (every other element of a larger array)."""
    def make(shape):
        if layout == "cols":
            return np.ascontiguousarray(
                rng.standard_normal(shape[:1] + shape[:0:-1]).astype(dtype)).transpose(0, 2, 1)
        if layout == "strided":
            big = rng.standard_normal((shape[0], 2 * shape[1], 3 * shape[2])).astype(dtype)
            return big[:, ::2, ::3]
        return rng.standard_normal(shape).astype(dtype)
    return make((nb, m, k)), make((nb, k, n))


def _check(got, a, b, alpha=1.0, post=lambda x: x):
    want = post(alpha * np.matmul(a.astype(np.float64), b.astype(np.float64)))
    k = max(a.shape[2], 1)
    tol = (3e-6 if got.dtype == np.float32 else 1e-13) * np.sqrt(k) * 4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


SHAPES = [(1, 37, 53, 29), (1, 1, 1, 1), (1, 50, 70, 1), (3, 25, 41, 70), (2, 7, 100, 33),
          (1, 64, 64, 64), (1, 13, 5, 0)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["rows", "cols", "strided"])
def test_kernel_matches_float64_matmul(kdir, dtype, layout):
    kern = load_gemm_kernel(KernelSpec(_small(dtype), dtype), kdir)
    rng = np.random.default_rng(1)
    for nb, m, n, k in SHAPES:
        a, b = _operands(rng, dtype, nb, m, n, k, layout)
        c = np.full((nb, m, n), np.nan, dtype=dtype)      # beta = 0: nothing is read from C
        kern(a, b, c, 0.5)
        _check(c, a, b, 0.5)


@pytest.mark.parametrize("change", [dict(pack_a=False), dict(pack_b=False),
                                    dict(pack_a=False, pack_b=False), dict(split=SPLIT_BATCH),
                                    dict(split=SPLIT_N), dict(split=SPLIT_N, pack_a=False),
                                    dict(split=SPLIT_N, nc=None, outer=OUTER_A),
                                    dict(outer=OUTER_A, pack_a=False, pack_b=False),
                                    dict(mr=4, nr=None, kc=7, mc=9, nc=None)])
def test_every_packing_and_split_is_correct(kdir, change):
    dtype = "float32"
    p = _small(dtype)
    change = {k: (v if v is not None else getattr(p, k) * 3 // 2) for k, v in change.items()}
    p = legalize(replace(p, **change), 4)
    kern = load_gemm_kernel(KernelSpec(p, dtype), kdir)
    rng = np.random.default_rng(2)
    for layout in ("rows", "cols", "strided"):
        for nb, m, n, k in SHAPES + [(5, 19, 45, 40)]:
            a, b = _operands(rng, dtype, nb, m, n, k, layout)
            c = np.full((nb, m, n), np.nan, dtype=dtype)
            kern(a, b, c)
            _check(c, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_k_slices_packed_at_once_or_one_by_one(kdir, dtype):
    """A column block whose whole K fits in PACK_ALL_BYTES is packed at once (every slice,
    then the blocks of C: two barriers a column block); a deeper one slice by slice (two
    barriers a slice).  Both on every thread, B packed from row- and column-major storage."""
    p = _small(dtype)
    kern = load_gemm_kernel(KernelSpec(p, dtype), kdir)
    item = np.dtype(dtype).itemsize
    deep = PACK_ALL_BYTES // (p.nc * item) + 3 * p.kc + 5          # past the bound
    rng = np.random.default_rng(5)
    for k in (7 * p.kc + 3, deep):
        assert (k * p.nc * item <= PACK_ALL_BYTES) == (k < deep)
        for layout in ("rows", "cols"):
            a, b = _operands(rng, dtype, 2, 2 * p.mr + 5, p.nc + 3 * p.nr // 2, k, layout)
            c = np.full((2, a.shape[1], b.shape[2]), np.nan, dtype=dtype)
            kern(a, b, c)
            _check(c, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_streaming_stores_when_c_takes_one_k_slice(kdir, dtype):
    """Streamed where the rows start on cache lines, plain stores where not (an output that
    starts one element or 16 bytes into a line-aligned buffer: 16 bytes streamed at 0.6x the
    plain stores' rate), accumulation as usual where K takes several slices."""
    p = replace(_small(dtype), kc=64, stream=True)
    src = kernel_source(KernelSpec(p, dtype))
    assert "AT_STREAM_P" in src and "__builtin_ia32_movntp" in src and "SFENCE()" in src
    assert f"& {STREAM_ALIGN - 1}) == 0" in src
    kern = load_gemm_kernel(KernelSpec(p, dtype), kdir)
    rng = np.random.default_rng(6)
    item = np.dtype(dtype).itemsize
    for nb, m, n, k in [(1, 45, 64, 30), (2, 33, 70, 64), (1, 40, 48, 150)]:
        a, b = _operands(rng, dtype, nb, m, n, k, "rows")
        for offset in (0, 1, 16 // item):
            buf = aligned_empty(nb * m * n + 16, dtype)
            buf[:] = np.nan
            c = buf[offset:offset + nb * m * n].reshape(nb, m, n)
            kern(a, b, c)
            _check(c, a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_major_output_stores_along_m(kdir, dtype):
    rng = np.random.default_rng(3)
    c = np.full((2, 61, 43), np.nan, dtype=dtype).transpose(0, 2, 1)   # (2, 43, 61), m unit
    assert store_for(c) == STORE_COLS
    assert store_for(np.empty((2, 43, 61), dtype=dtype)) == STORE_ROWS
    kern = load_gemm_kernel(KernelSpec(_small(dtype), dtype, store=STORE_COLS), kdir)
    for layout in ("rows", "cols"):
        a, b = _operands(rng, dtype, 2, 43, 61, 35, layout)
        kern(a, b, c)
        _check(c, a, b)
    # a row-major output through the cols kernel, and the other way round: slow, still right
    a, b = _operands(rng, dtype, 1, 30, 20, 10, "rows")
    rows = np.empty((1, 30, 20), dtype=dtype)
    kern(a, b, rows)
    _check(rows, a, b)


def test_broadcast_batch_of_b(kdir):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 20, 30)).astype(np.float32)
    b = rng.standard_normal((1, 30, 40)).astype(np.float32)
    c = np.empty((3, 20, 40), dtype=np.float32)
    load_gemm_kernel(KernelSpec(_small("float32")), kdir)(a, b, c)
    _check(c, a, np.broadcast_to(b, (3, 30, 40)))


@pytest.mark.parametrize("store", [STORE_ROWS, STORE_COLS])
def test_prologue_and_epilogue_hooks(kdir, store):
    """A per-row scale applied to A as it is packed, a per-column bias added on the
    accumulator tile: the hooks fusion will use, in both store orientations."""
    spec = KernelSpec(_small("float32", pack_a=False), "float32", store=store,
                      prologue_a=Transform("{x} * x->scale[{m}]", ("scale",)),
                      epilogue=Transform("({x} + x->bias[{n}]) * 2", ("bias",)))
    assert spec.args == ("scale", "bias")
    kern = load_gemm_kernel(spec, kdir)
    rng = np.random.default_rng(5)
    m, n, k = 45, 39, 50                   # k > kc: the epilogue runs after the last K slice
    a, b = _operands(rng, "float32", 1, m, n, k, "rows")
    scale = rng.standard_normal(m).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.empty((1, n, m), dtype=np.float32).transpose(0, 2, 1) if store == STORE_COLS \
        else np.empty((1, m, n), dtype=np.float32)
    kern(a, b, c, 1.0, (scale, bias))
    _check(c, a * scale[None, :, None], b, post=lambda x: (x + bias) * 2)


def test_bad_arguments_are_refused(kdir):
    kern = load_gemm_kernel(KernelSpec(_small("float32")), kdir)
    a = np.zeros((1, 4, 5), np.float32)
    with pytest.raises(ValueError):
        kern(a, np.zeros((1, 6, 3), np.float32), np.zeros((1, 4, 3), np.float32))
    with pytest.raises(ValueError):
        kern(a.astype(np.float64), np.zeros((1, 5, 3)), np.zeros((1, 4, 3)))
    with pytest.raises(ValueError):
        kern(a, np.zeros((1, 5, 3), np.float32), np.zeros((1, 4, 3), np.float32), 1.0,
             (np.zeros(3, np.float32),))


def test_machine_bounds_and_legal_ranges():
    mb = machine_bounds()
    assert mb.vec_bytes and all(v in (16, 32, 64) for v in mb.vec_bytes)
    assert mb.l1_bytes < mb.l2_bytes <= mb.l3_bytes and mb.cores >= 1
    for bounds in (mb, KernelBounds(), KernelBounds((64, 32, 16), 32)):
        for item in (4, 8):
            for vb in bounds.vec_bytes:
                tiles = micro_tiles(bounds, vb, item)
                assert tiles
                for mr, nr in tiles:       # accumulators + B vectors + broadcast fit
                    nv = nr // (vb // item)
                    assert nr % (vb // item) == 0 and mr * nv + nv + 1 <= bounds.registers
            opts = kernel_options(bounds, item, batch=1)
            d = opts.default
            assert (d.mr, d.nr) in opts.tiles and d.split == "m"
            assert d.kc * d.nr * item <= 2 * bounds.l1_bytes and d.mc % d.mr == 0
            assert d.mc * d.kc * item <= bounds.l2_bytes and d.nc % d.nr == 0
            assert SPLIT_BATCH in kernel_options(bounds, item, batch=64).splits
    odd = legalize(KernelParams(mr=5, nr=20, mc=7, kc=3, nc=50, split="?", vec_bytes=32), 4)
    assert (odd.nr, odd.mc, odd.nc, odd.split) == (16, 5, 48, "m")


def test_source_uses_the_requested_vectors():
    p = default_params(KernelBounds((64, 32), 32), 4)
    src = kernel_source(KernelSpec(p))
    assert "vector_size(64)" in src and src.count("ukr_u(") == 0
    src = kernel_source(KernelSpec(replace(p, pack_a=False)))
    assert "static inline void ukr_u(" in src
    # a prologue on A forces its packing: no in-place micro-kernel
    src = kernel_source(KernelSpec(replace(p, pack_a=False),
                                   prologue_a=Transform("{x} * 2")))
    assert "static inline void ukr_u(" not in src


# (skylake-avx512: an AVX-512 target whose tuning, as every Intel one's in GCC 12, prefers
# 256-bit loops; x86-64-v4's generic tuning already takes 512)
@pytest.mark.parametrize("march", ["x86-64-v2", "skylake-avx512"])
def test_kernel_loops_take_the_kernels_vector_width(march, tmp_path):
    # a kernel of 64-byte vectors asks GCC for 512-bit loops (its epilogue's, prologue's and
    # packing's) where the target has AVX-512; one of 32-byte vectors does not ask; the source
    # stays valid C for targets without AVX-512
    import platform
    import shutil
    import subprocess
    from autotune.environment import compiler_version
    p = default_params(KernelBounds((64, 32), 32), 4)
    epi = Transform("({x} > 0 ? {x} : 0.125f * {x})")
    wide = kernel_source(KernelSpec(p, epilogue=epi))
    pragma = '#pragma GCC target("prefer-vector-width=512")'
    assert wide.count(pragma) == 1 and wide.index(pragma) < wide.index("static")  # all functions
    narrow = kernel_source(KernelSpec(replace(p, vec_bytes=32), epilogue=epi))
    assert pragma not in narrow
    if platform.machine() != "x86_64" or shutil.which("cc") is None:
        pytest.skip("x86-64 targets need an x86-64 cc")
    if "clang" in compiler_version().lower():
        pytest.skip("clang has no prefer-vector-width target option (the source guards it)")
    asm = {}
    for name, src in (("wide", wide), ("unasked", wide.replace(WIDE_PRAGMA, "")),
                      ("narrow", narrow)):
        path = tmp_path / f"{name}.c"
        path.write_text(src)
        proc = subprocess.run(["cc", f"-march={march}", "-O2", "-fopenmp", "-ffast-math",
                               "-Werror", "-S", "-o", str(tmp_path / f"{name}.s"), str(path)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[:2000]
        asm[name] = "\n".join(line for line in (tmp_path / f"{name}.s").read_text().splitlines()
                              if not line.startswith("\t.file"))
    if march != "x86-64-v2":     # the epilogue's loop at 16 floats a vector: more zmm code
        assert asm["wide"].count("%zmm") > asm["unasked"].count("%zmm")
    else:                        # no AVX-512: the request is not even seen
        assert asm["wide"] == asm["unasked"]


FEW_ROWS = [(1, 4, 203, 37), (1, 1, 77, 20), (2, 3, 130, 50), (1, 5, 64, 9)]


@pytest.mark.parametrize("change", [{}, dict(pack_b=False), dict(pack_a=False, pack_b=False),
                                    dict(outer=OUTER_A), dict(kc=64, stream=True)])
def test_few_rows_split_the_columns(kdir, change):
    """Rows too few to give every thread a row block (a decoding step's 4 tokens): the threads
    take column chunks of whole micro-panels instead.  Results against float64 in every
    layout, with a per-row prologue and a per-column epilogue that catch a chunk read or
    stored at the wrong offset."""
    dtype = "float32"
    p = legalize(replace(_small(dtype), mr=4, mc=4, **change), 4)
    spec = KernelSpec(p, dtype, prologue_a=Transform("{x} * x->scale[{m}]", ("scale",)),
                      epilogue=Transform("({x} + x->bias[{n}]) * 2", ("bias",)))
    kern = load_gemm_kernel(spec, kdir)
    rng = np.random.default_rng(7)
    for layout in ("rows", "cols", "strided"):
        for nb, m, n, k in FEW_ROWS:
            a, b = _operands(rng, dtype, nb, m, n, k, layout)
            scale = rng.standard_normal(m).astype(np.float32)
            bias = rng.standard_normal(n).astype(np.float32)
            c = np.full((nb, m, n), np.nan, dtype=dtype)
            kern(a, b, c, 1.0, (scale, bias))
            _check(c, a * scale[None, :, None], b, post=lambda x: (x + bias) * 2)


def test_few_rows_keep_every_thread_busy(kdir):
    """Which thread stored each element of C (its number, through the epilogue): with 4 rows
    and one row block, every thread of the region has columns of its own.  Fails where one
    thread takes the whole block."""
    probe = load_gemm_kernel(KernelSpec(_small("float32"), "float32",
                                        epilogue=Transform("{x} * 0 + omp_get_thread_num()")),
                             kdir)
    rng = np.random.default_rng(8)
    a, b = _operands(rng, "float32", 1, 4, 256, 16, "rows")
    c = np.full((1, 4, 256), np.nan, dtype=np.float32)
    probe(a, b, c)
    threads = set(np.unique(c).tolist())
    expected = set(range(min(4, _region_threads(kdir))))
    assert threads == expected, (threads, expected)


def _region_threads(kdir) -> int:
    """Threads of the kernel's parallel region: a 64-row product whose row blocks go round."""
    probe = load_gemm_kernel(KernelSpec(replace(_small("float32"), mc=6), "float32",
                                        epilogue=Transform("{x} * 0 + omp_get_thread_num()")),
                             kdir)
    rng = np.random.default_rng(9)
    a, b = _operands(rng, "float32", 1, 240, 16, 8, "rows")
    c = np.empty((1, 240, 16), dtype=np.float32)
    probe(a, b, c)
    return int(c.max()) + 1


def test_no_k_slices_under_64():
    """KC 16 and 32 lost to deeper slices at every few-row shape once B could be read in place
    (search_spaces.kernel._kc_options): no product is offered them."""
    bounds = machine_bounds()
    kc = kernel_options(bounds, 4, batch=1).kc
    assert kc and min(kc) >= 64 and kernel_options(bounds, 8, batch=4).kc


_BLOCKS_NOT_ON_THE_TILE = """
import sys
import numpy as np
from search_spaces.kernel import KernelParams
from autotune.backends.cpu.executor import load_gemm_kernel
from autotune.backends.cpu.gemm_kernel import KernelSpec
# MC 48 is no multiple of MR 14: a block packs 4 panels, 56 rows
p = KernelParams(14, 32, 48, 384, 1024, True, True, "batch", 16, "b", False)
kern = load_gemm_kernel(KernelSpec(p, "float32", "rows"), sys.argv[1])
rng = np.random.default_rng(0)
a = rng.standard_normal((4, 300, 200), dtype=np.float32)
b = rng.standard_normal((4, 200, 150), dtype=np.float32)
c = np.full((4, 300, 150), np.nan, np.float32)
for _ in range(3):
    kern(a, b, c)
ref = np.matmul(a.astype(np.float64), b)
assert np.abs(c - ref).max() <= 1e-4 * np.abs(ref).max()
junk = [np.empty(1000 + i) for i in range(200)]   # malloc walks the heap it corrupted
"""


def test_blocks_off_the_register_tile_stay_inside_their_buffers(kdir, tmp_path):
    """Parameters whose MC is no multiple of MR (a hand-edited candidate, a --variant of
    bench/gemm_kernel.py) once made the batch split pack past its A buffer: glibc's heap
    checks (MALLOC_CHECK_=3) aborted the process.  Run in a child process under those checks."""
    import os
    import subprocess
    import sys
    script = tmp_path / "blocks.py"
    script.write_text(_BLOCKS_NOT_ON_THE_TILE)
    env = {**os.environ, "MALLOC_CHECK_": "3", "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, str(script), str(kdir)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_kernel_spec_legalizes_a_candidates_blocks(small):
    """A candidate's kernel parameters are fitted to their register tile before any C is
    generated from them (MC and NC rounded to MR and NR)."""
    from search_spaces.candidate import Candidate
    from autotune.backends.cpu.gemm_call import kernel_spec
    from tests.autotune.backends.test_kernel_epilogue import kernel_plan, space_of
    w = small("gated_mlp")
    cand = kernel_plan(space_of(w), 0)
    d = cand.to_dict()
    anchor = next(s["anchor"] for s in d["schedules"] if s.get("kernel"))
    for s in d["schedules"]:
        if s["anchor"] == anchor:
            s["kernel"].update(mr=14, nr=32, mc=48, nc=100)
    p = kernel_spec(w, Candidate.from_dict(d), anchor).params
    assert p.mc % p.mr == 0 and p.nc % p.nr == 0 and p.mc <= 48


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("change", [{}, {"outer": OUTER_A}, {"split": SPLIT_BATCH},
                                    {"pack_b": False}, {"kc": 64}])
@pytest.mark.parametrize("shape", [(1, 37, 29), (3, 25, 70), (1, 130, 200), (2, 7, 33)])
@pytest.mark.parametrize("store", [STORE_ROWS, STORE_COLS])
def test_a_symmetric_product_computes_one_triangle_and_copies_it(kdir, dtype, change, shape,
                                                                 store):
    # x^T x: the kernel computes the tiles on and above the diagonal, then copies the upper
    # triangle onto the lower one; a NaN-filled C shows any element left unwritten, and the
    # result is symmetric to the bit (the same products summed in the same order)
    nb, m, k = shape
    rng = np.random.default_rng(m + k)
    x = rng.standard_normal((nb, k, m)).astype(dtype)
    a = x.transpose(0, 2, 1)
    c = np.full((nb, m, m), np.nan, dtype)
    if store == STORE_COLS:
        c = np.full((nb, m, m), np.nan, dtype).transpose(0, 2, 1)
    spec = KernelSpec(_small(dtype, **change), dtype, store_for(c), sym=True)
    load_gemm_kernel(spec, kdir)(a, x, c)
    _check(c, a, x)
    assert np.array_equal(c, c.transpose(0, 2, 1))


@pytest.mark.parametrize("store", [STORE_ROWS, STORE_COLS])
def test_a_symmetric_product_split_by_columns(kdir, store):
    # split n: chunks of columns on either side of the diagonal, each thread storing the
    # mirror images of its own tiles (none of them written twice)
    for nb, m, k in ((1, 130, 200), (3, 25, 70)):
        rng = np.random.default_rng(m)
        x = rng.standard_normal((nb, k, m)).astype("float32")
        a = x.transpose(0, 2, 1)
        c = np.full((nb, m, m), np.nan, "float32")
        if store == STORE_COLS:
            c = c.transpose(0, 2, 1)
        spec = KernelSpec(_small("float32", split=SPLIT_N), "float32", store_for(c), sym=True)
        load_gemm_kernel(spec, kdir)(a, x, c)
        _check(c, a, x)
        assert np.array_equal(c, c.transpose(0, 2, 1))


def test_a_symmetric_kernel_leaves_the_lower_triangle_to_the_mirror_images(kdir):
    # two different operands under sym=True: away from the diagonal's band of tiles the lower
    # triangle holds the upper one's mirror images, not the product (what shows that the tiles
    # wholly below the diagonal are skipped), and every element above is the product (the
    # threads' spans of equal work cover every row)
    rng = np.random.default_rng(5)
    m, k = 150, 40
    p = _small("float64")
    a = rng.standard_normal((1, m, k)).astype("float64")
    b = rng.standard_normal((1, k, m)).astype("float64")
    c = np.full((1, m, m), np.nan)
    load_gemm_kernel(KernelSpec(p, "float64", STORE_ROWS, sym=True), kdir)(a, b, c)
    full = (a @ b)[0]
    upper = np.triu_indices(m)
    np.testing.assert_allclose(c[0][upper], full[upper], rtol=1e-12, atol=1e-12)
    far = np.tril_indices(m, -(p.mr + p.nr))
    np.testing.assert_array_equal(c[0][far], c[0].T[far])
    assert not np.allclose(c[0][far], full[far])
    assert not np.isnan(c).any()
