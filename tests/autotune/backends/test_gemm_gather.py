"""Operands read through offset tables (``KernelSpec.gather``): an operand whose rows or K are
indices apart in its layout is packed where it lies, not copied into a matrix first.  The
tables against the arrays they address, the kernel against float64 einsum for 4-d operands in
layouts with and without runs, both store orientations, a prologue, several blocks and
threads, and a plan whose contraction is such a product: gathered, verified, called again
after the tables' first owners are gone, and priced without the copy."""
from __future__ import annotations

import gc
from dataclasses import replace

import numpy as np
import pytest

from search_spaces.gemm import as_matrix_view, gathered
from search_spaces.kernel import KernelParams
from autotune.backends.cpu.executor import load_gemm_kernel
from autotune.backends.cpu.gather import gathered_operand
from autotune.backends.cpu.gemm_kernel import STORE_COLS, STORE_ROWS, KernelSpec, Transform
from autotune.backends.cpu.machine import machine_bounds


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gather-kernels"))


def _params(**kw) -> KernelParams:
    vb = machine_bounds().vec_bytes[0]
    lanes = vb // 4
    return replace(KernelParams(mr=6, nr=2 * lanes, mc=12, kc=16, nc=4 * lanes, vec_bytes=vb),
                   **kw)


def test_which_layouts_are_gathered():
    # t[a,c,i,k] as rows (a,i) by K (c,k): neither group nests into one stride
    idx, shape = ("a", "c", "i", "k"), (4, 5, 6, 7)
    groups = ((), ("a", "i"), ("c", "k"))
    assert gathered(idx, shape, (0, 1, 2, 3), groups)
    assert not as_matrix_view(idx, shape, (0, 1, 2, 3), groups)
    # stored (a,i,c,k) it is a matrix: viewed, not gathered
    assert not gathered(idx, shape, (0, 2, 1, 3), groups)
    # a batch that nests into no one stride is not gathered (the executor stages it)
    assert not gathered(("b", "c", "m", "k"), (2, 3, 4, 5), (0, 2, 1, 3),
                        (("b", "c"), ("m",), ("k",)))
    assert gathered(("b", "c", "m", "k"), (2, 3, 4, 5), (0, 1, 2, 3),
                    (("b",), ("m", "c"), ("k",)))


@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (3, 1, 0, 2), (2, 0, 3, 1)])
def test_the_tables_address_every_element(perm):
    rng = np.random.default_rng(0)
    idx, groups = ("a", "c", "i", "k"), (("a",), ("i",), ("c", "k"))
    shape = (3, 4, 5, 6)
    store = rng.standard_normal(tuple(shape[p] for p in perm)).astype(np.float32)
    arr = store.transpose(np.argsort(perm))             # indexed (a, c, i, k), laid out perm
    view, (rows, cols) = gathered_operand(arr, idx, groups)
    assert view.shape == (3, 5, 24) and view.strides[1:] == (0, 0)
    assert rows.dtype == np.int64 and rows.shape == (5,) and cols.shape == (24,)
    flat = np.lib.stride_tricks.as_strided(arr, (arr.size,), (4,))  # from the base pointer
    base = view.strides[0] // 4
    for a in range(3):
        got = flat[a * base + rows[:, None] + cols[None, :]]
        want = arr[a].transpose(1, 0, 2).reshape(5, 24)   # (i, (c, k))
        np.testing.assert_array_equal(got, want)


def test_a_batch_no_stride_walks_is_copied_first():
    """An array laid out otherwise than the plan said, its batch's indices apart: copied into
    the groups' order, then addressed by the tables like any other."""
    rng = np.random.default_rng(3)
    arr = rng.standard_normal((4, 5, 3, 6)).astype(np.float32).transpose(0, 2, 1, 3)
    idx, groups = ("b", "c", "m", "k"), (("b", "c"), ("m",), ("k",))   # (4, 3, 5, 6) as given
    view, (rows, cols) = gathered_operand(arr, idx, groups)
    assert not np.shares_memory(view, arr) and view.shape == (12, 5, 6)
    flat = np.lib.stride_tricks.as_strided(view.base if view.base is not None else view,
                                           (arr.size,), (4,))
    want = arr.reshape(12, 5, 6)
    base = view.strides[0] // 4
    for b in range(12):
        np.testing.assert_array_equal(flat[b * base + rows[:, None] + cols[None, :]], want[b])


def _einsum_operands(rng, perm_a, perm_b, sizes):
    """t[a,c,i,k] and v[c,b,k,j] laid out in the given storage orders."""
    A, O = sizes
    def make(shape, perm):
        return np.ascontiguousarray(
            rng.standard_normal(tuple(shape[p] for p in perm)).astype(np.float32)
        ).transpose(np.argsort(perm))
    return make((A, A, O, O), perm_a), make((A, A, O, O), perm_b)


@pytest.mark.parametrize("store", [STORE_ROWS, STORE_COLS])
@pytest.mark.parametrize("perms", [((0, 1, 2, 3), (0, 1, 2, 3)),     # runs along K and cols
                                   ((1, 3, 0, 2), (3, 1, 2, 0)),     # runs along rows and K
                                   ((2, 0, 3, 1), (1, 0, 3, 2))])
@pytest.mark.parametrize("sizes", [(5, 3), (13, 6)])
@pytest.mark.parametrize("split", ["m", "n"])
def test_the_gathered_kernel_matches_float64(kdir, store, perms, sizes, split):
    """s[a,b,i,j] = sum_{c,k} t[a,c,i,k] v[c,b,k,j]: rows (a,i), K (c,k), columns (b,j); at
    13 x 6 the product (78 x 78 x 78) runs several row, column and K blocks on every thread
    (split "n": several chunks of columns, each packing its own B and all of A)."""
    rng = np.random.default_rng(sum(sizes))
    t, v = _einsum_operands(rng, *perms, sizes)
    A, O = sizes
    ga = (("a", "i"), ("c", "k"))
    gb = (("c", "k"), ("b", "j"))
    ta, (ra, ka) = gathered_operand(t, ("a", "c", "i", "k"), ((),) + ga)
    tb, (kb, cb) = gathered_operand(v, ("c", "b", "k", "j"), ((),) + gb)
    # a prologue on A (x 2 + its K index), to check the indices the gathered packer hands it
    pro = Transform("({x} * 2 + (T){k})")
    kern = load_gemm_kernel(KernelSpec(_params(split=split), "float32", store, prologue_a=pro,
                                       gather="ab"), kdir)
    c = np.full((1, A * O, A * O), np.nan, dtype=np.float32)
    if store == STORE_COLS:         # C^T = B^T A^T: m unit-stride
        c = c.transpose(0, 2, 1)
    kern(ta, tb, c, 1.0, gather=(ra, ka, kb, cb))
    tk = t.astype(np.float64) * 2 + np.arange(O)[None, None, None, :] \
        + O * np.arange(A)[None, :, None, None]
    want = np.einsum("acik,cbkj->aibj", tk, v.astype(np.float64)).reshape(A * O, A * O)
    np.testing.assert_allclose(c[0], want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    # one operand gathered, the other a plain matrix
    kern1 = load_gemm_kernel(KernelSpec(_params(split=split), "float32", STORE_ROWS, gather="a"),
                             kdir)
    vm = np.ascontiguousarray(v.transpose(0, 2, 1, 3)).reshape(1, A * O, A * O)
    c1 = np.full((1, A * O, A * O), np.nan, dtype=np.float32)
    kern1(ta, vm, c1, 1.0, gather=(ra, ka))
    want1 = np.einsum("acik,cbkj->aibj", t.astype(np.float64),
                      v.astype(np.float64)).reshape(A * O, A * O)
    np.testing.assert_allclose(c1[0], want1, rtol=2e-5, atol=2e-5 * np.abs(want1).max())


def test_bad_tables_are_refused(kdir):
    kern = load_gemm_kernel(KernelSpec(_params(), "float32", gather="a"), kdir)
    t = np.ones((3, 3, 2, 2), np.float32)
    ta, (ra, ka) = gathered_operand(t, ("a", "c", "i", "k"), ((), ("a", "i"), ("c", "k")))
    b = np.ones((1, 6, 4), np.float32)
    c = np.zeros((1, 6, 4), np.float32)
    with pytest.raises(ValueError, match="expected 2 offset tables"):
        kern(ta, b, c)
    with pytest.raises(ValueError, match="int64 array of 6 entries"):
        kern(ta, b, c, gather=(ra.astype(np.int32), ka))
    with pytest.raises(ValueError, match="zero-strided"):
        kern(np.ones((1, 6, 6), np.float32), b, c, gather=(ra, ka))


def test_a_plan_gathers_prices_no_copy_and_survives_its_tables(kdir, tmp_path):
    """cc_doubles' contraction as a kernel group: the spec gathers both operands, the plan is
    right on fresh inputs call after call (the C arguments it keeps point at tables that must
    outlive the call that made them), and the model prices no copy for the kernel where the
    library GEMM's plan copies both operands."""
    from pathlib import Path
    from search_spaces.candidate import Candidate
    from search_spaces.loader import load_workload
    from autotune.backends.base import BufferPool, verify
    from autotune.backends.factory import backend_kind, resolve
    from autotune.reference import reference
    from costmodel.kernel_cost import kernel_copy_bytes
    root = Path(__file__).resolve().parents[3]
    w = load_workload(root / "bench" / "unseen" / "cc_doubles.toml", {"A": 9, "O": 5})
    cj = ('{"fused":[],"layouts":{"s":[0,2,1,3]},"name":"","schedules":[{"anchor":"r",'
          '"impl":"loop","tiles":[3,9,5,5]},{"anchor":"s","impl":"kernel","kernel":{"kc":16,'
          '"mc":12,"mr":6,"nc":32,"nr":16,"outer":"b","pack_a":false,"pack_b":false,'
          '"split":"m","stream":false,"vec_bytes":16},"tiles":[9,9,5,5]}]}')
    cand = Candidate.from_json(cj)
    kind = backend_kind(resolve("cpu").kind)
    plan = kind.make_plan(w, cand, tmp_path, pool=BufferPool())
    assert plan.kernel_groups["s"].kernel.spec.gather == "ab"
    for seed in range(3):
        inputs = w.random_inputs(seed)
        ref = reference(w, inputs)
        for _ in range(2):
            _, why = verify(plan(**inputs), ref, w.rtol)
            assert not why, why
            gc.collect()
            junk = [np.full(4096, -1.0) for _ in range(64)]     # reuse what was freed
            del junk
    # neither operand is a matrix (so a library GEMM copies both), and the kernel copies none
    groups = {"t": ((), ("a", "i"), ("c", "k")), "v": ((), ("c", "k"), ("b", "j"))}
    for name, idx in (("t", ("a", "c", "i", "k")), ("v", ("c", "b", "k", "j"))):
        assert not as_matrix_view(idx, w.shapes[name], (0, 1, 2, 3), groups[name])
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    assert kernel_copy_bytes(w, cand.fused_pairs, "s", layout_of, 4) == 0


def test_explain_names_the_gathered_operands(monkeypatch):
    """`autotune explain --device cpu` says which tensors a kernel group packs through offset
    tables, with its parameters, in the table and in JSON."""
    import json as _json
    from pathlib import Path
    from typer.testing import CliRunner
    from search_spaces.candidate import Candidate
    from autotune.cli import tools
    from autotune.cli.app import app
    cand = Candidate.from_json(
        '{"fused":[],"layouts":{"s":[0,2,1,3]},"name":"","schedules":[{"anchor":"r",'
        '"impl":"loop","tiles":[3,9,5,5]},{"anchor":"s","impl":"kernel","kernel":{"kc":16,'
        '"mc":12,"mr":6,"nc":32,"nr":16,"outer":"b","pack_a":true,"pack_b":true,'
        '"split":"m","stream":false,"vec_bytes":16},"tiles":[9,9,5,5]}]}')
    monkeypatch.setattr(tools, "_cached_best", lambda *a, **k: cand)
    path = str(Path(__file__).resolve().parents[3] / "bench" / "unseen" / "cc_doubles.toml")
    args = ["explain", path, "--dims", "A=9,O=5", "--plan", "best", "--device", "cpu"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "  kernel: 6x16 tiles, MC 12, KC 16, NC 32, outer b; t, v packed through offset " \
           "tables (no copy)" in r.output
    r = CliRunner().invoke(app, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    (s,) = [g for g in _json.loads(r.stdout)["groups"] if g["anchor"] == "s"]
    assert s["kernel"]["gathered"] == ["t", "v"] and s["kernel"]["params"]["kc"] == 16
