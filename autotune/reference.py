"""The float64 reference: the program evaluated statement by statement with NumPy.

Sums of products are split into factors, each evaluated over its own indices only, and contracted
pairwise through ``np.matmul`` (BLAS), so the triangle einsum is 128 batched GEMMs rather than a
loop nest over the 4-d domain.  Anything else is evaluated by broadcasting over the domain, in
chunks along the first parallel index so that no temporary exceeds ``CHUNK_ELEMS`` elements.

A ``where(COND, A, B)`` is evaluated over its own indices too: the condition becomes a boolean
mask over the indices it names (at their absolute values inside the chunk), broadcast against
the branches, so a masked factor is one more operand of the contraction.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from search_spaces.ir import (FUNCTION_VALUES, Access, Binary, Const, Expr, Op, Pow, Select,
                              Unary, index_names)
from search_spaces.workload import Workload

from autotune.cache_dirs import refs_dir
from autotune.threads import cores

CHUNK_ELEMS = 1 << 25


def _indices(e: Expr, order: tuple[str, ...]) -> tuple[str, ...]:
    used = index_names(e)
    return tuple(i for i in order if i in used)


def _index_array(i: str, axes: tuple[str, ...], window: dict[str, slice]) -> np.ndarray:
    """The absolute values of index ``i`` over its window, shaped to broadcast over ``axes``."""
    s = window[i]
    shape = [1] * len(axes)
    shape[axes.index(i)] = s.stop - s.start
    return np.arange(s.start, s.stop, dtype=np.int64).reshape(shape)


def _eval(e: Expr, env, axes: tuple[str, ...], window: dict[str, slice]):
    """Evaluate ``e`` as an array broadcast over ``axes`` (size-1 where an index is unused);
    ``window`` holds every domain index's range (the chunk of the first parallel one)."""
    if isinstance(e, Const):
        return np.float64(e.value)
    if isinstance(e, Access):
        arr = env[e.tensor]
        arr = arr[tuple(window.get(i, slice(None)) for i in e.idx)]
        perm = sorted(range(len(e.idx)), key=lambda p: axes.index(e.idx[p]))
        arr = arr.transpose(perm)
        shape = [1] * len(axes)
        for p in perm:
            shape[axes.index(e.idx[p])] = arr.shape[perm.index(p)]
        return arr.reshape(shape)
    if isinstance(e, Unary):
        return -_eval(e.x, env, axes, window)
    if isinstance(e, Binary):
        a, b = _eval(e.a, env, axes, window), _eval(e.b, env, axes, window)
        return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[e.op](a, b)
    if isinstance(e, Pow):
        return np.power(_eval(e.base, env, axes, window), float(e.exponent))
    if isinstance(e, Select):
        mask = e.cond.over(lambda i: _index_array(i, axes, window))
        return np.where(mask, _eval(e.a, env, axes, window), _eval(e.b, env, axes, window))
    args = [_eval(a, env, axes, window) for a in e.args]
    return FUNCTION_VALUES[e.fn](*args)


def _contract(a, ia, b, ib, keep):
    """Contract two factor arrays over shared indices not in ``keep`` with one batched matmul."""
    only_a = [i for i in ia if i not in ib and i not in keep]
    only_b = [i for i in ib if i not in ia and i not in keep]
    if only_a:
        a = a.sum(axis=tuple(ia.index(i) for i in only_a))
        ia = tuple(i for i in ia if i not in only_a)
    if only_b:
        b = b.sum(axis=tuple(ib.index(i) for i in only_b))
        ib = tuple(i for i in ib if i not in only_b)
    batch = [i for i in ia if i in ib and i in keep]
    summed = [i for i in ia if i in ib and i not in keep]
    fa = [i for i in ia if i not in ib]
    fb = [i for i in ib if i not in ia]
    size = dict(zip(ia, a.shape)) | dict(zip(ib, b.shape))
    prod = lambda idx: int(np.prod([size[i] for i in idx], dtype=np.int64))
    A = a.transpose([ia.index(i) for i in batch + fa + summed]).reshape(
        prod(batch), prod(fa), prod(summed))
    B = b.transpose([ib.index(i) for i in batch + summed + fb]).reshape(
        prod(batch), prod(summed), prod(fb))
    C = np.matmul(A, B)
    out_idx = tuple(batch + fa + fb)
    return C.reshape([size[i] for i in out_idx]), out_idx


def _sum_of_products(op: Op, env, window) -> np.ndarray:
    const = 1.0
    terms = []
    for f in op.factors():
        if not index_names(f):
            const *= float(_eval(f, env, (), window))
            continue
        idx = _indices(f, op.domain)
        terms.append((np.broadcast_to(_eval(f, env, idx, window), [
            _win_extent(op, i, window) for i in idx]), idx))
    if not terms:  # a constant summed over the reduction domain
        n = float(np.prod([op.extent(i) for i in op.reduction]))
        shape = [_win_extent(op, i, window) for i in op.parallel]
        return np.full(shape, const * n)
    while len(terms) > 1:
        best = None
        for x in range(len(terms)):
            for y in range(x + 1, len(terms)):
                rest = {i for k, (_, ix) in enumerate(terms) if k not in (x, y) for i in ix}
                keep = set(op.parallel) | rest
                res = set(terms[x][1]) | set(terms[y][1])
                res &= keep
                cost = np.prod([op.extent(i) for i in res], dtype=np.float64)
                if best is None or cost < best[0]:
                    best = (cost, x, y, keep)
        _, x, y, keep = best
        (a, ia), (b, ib) = terms[x], terms[y]
        merged = _contract(a, ia, b, ib, keep)
        terms = [t for k, t in enumerate(terms) if k not in (x, y)] + [merged]
    arr, idx = terms[0]
    red = tuple(p for p, i in enumerate(idx) if i not in op.parallel)
    if red:
        arr = arr.sum(axis=red)
        idx = tuple(i for i in idx if i in op.parallel)
    # indices of the output that no factor uses: the sum broadcasts over them
    full = [i for i in op.parallel]
    arr = arr.transpose([idx.index(i) for i in full if i in idx])
    shape = [_win_extent(op, i, window) if i in idx else 1 for i in full]
    arr = arr.reshape(shape)
    if const != 1.0:      # a 500 MB multiply by one costs a pass and fresh pages
        arr = arr * const
    return np.broadcast_to(arr, [_win_extent(op, i, window) for i in full])


def _win_extent(op: Op, i: str, window) -> int:
    s = window.get(i)
    return op.extent(i) if s is None else len(range(*s.indices(op.extent(i))))


def _dense(op: Op, env, window) -> np.ndarray:
    val = _eval(op.expr, env, op.domain, window)
    val = np.broadcast_to(val, [_win_extent(op, i, window) for i in op.domain])
    red = tuple(range(len(op.parallel), len(op.domain)))
    if op.combiner == "none":
        return val
    if op.combiner == "max":
        return val.max(axis=red)
    return val.sum(axis=red)


def evaluate_op(op: Op, env: dict[str, np.ndarray]) -> np.ndarray:
    """One op in float64: contraction path for sums of products, chunked broadcasting otherwise."""
    use_products = op.combiner == "sum" and any(index_names(f) for f in op.factors())
    per_row = op.iterations // max(op.extent(op.parallel[0]), 1) if op.parallel else op.iterations
    rows = op.extent(op.parallel[0]) if op.parallel else 1
    step = rows if use_products else max(1, min(rows, CHUNK_ELEMS // max(per_row, 1)))
    whole = {i: slice(0, op.extent(i)) for i in op.domain}
    if use_products:
        # one window: the contraction's result is the output (no copy into fresh pages when
        # it already has the output's layout; asarray copies when it has not)
        res = np.asarray(_sum_of_products(op, env, whole).reshape(op.out_shape),
                         dtype=np.float64, order="C")
        if any(np.may_share_memory(res, env[t]) for t in op.inputs()):
            res = res.copy()       # a lone factor summed over nothing: never alias an input
        return res
    out = np.empty(op.out_shape, dtype=np.float64)
    if not op.parallel:
        out[...] = _dense(op, env, whole)
        return out
    # chunks over the cores: NumPy's ufuncs and reductions run on one thread and release the
    # GIL, so each thread evaluates its own rows (at trimul N=702 the elementwise ops were most
    # of a 13-18 s reference on one core); each chunk a core's share of CHUNK_ELEMS
    threads = cores()
    step = max(1, min(step // threads, -(-rows // threads)))

    def chunk(start: int) -> None:
        window = whole | {op.parallel[0]: slice(start, min(start + step, rows))}
        out[start:start + step] = _dense(op, env, window)

    starts = range(0, rows, step)
    if threads == 1 or len(starts) == 1:
        for start in starts:
            chunk(start)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(chunk, starts))
    return out


def reference(workload: Workload, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate ``workload`` in float64; returns {output name: float64 array}."""
    missing = [n for n in workload.input_names if n not in inputs]
    if missing:
        raise ValueError(f"reference: missing inputs {missing}")
    env = {n: np.asarray(inputs[n], dtype=np.float64) for n in workload.input_names}
    for n, shp in workload.inputs:
        if env[n].shape != shp:
            raise ValueError(f"reference: input {n!r} has shape {env[n].shape}, expected {shp}")
    needed = _last_use(workload)
    for k, op in enumerate(workload.ops):
        env[op.out] = evaluate_op(op, env)
        for t in [t for t, last in needed.items() if last == k and t not in workload.outputs]:
            env.pop(t, None)  # free intermediates early: N=702 tensors are 500 MB in float64
    return {o: env[o] for o in workload.outputs}


def _last_use(workload: Workload) -> dict[str, int]:
    last: dict[str, int] = {}
    for k, op in enumerate(workload.ops):
        for t in op.inputs():
            last[t] = k
    return last


# ---- the reference's cache on disk (a measuring worker's, beside its compiled kernels) ----------
def reference_path(cache_dir: Path, whash: str, seed: int) -> Path:
    return refs_dir(cache_dir) / f"{whash[:32]}-seed{seed}"


def load_or_compute_reference(w, inputs, cache_dir: Path, seed: int) -> dict[str, np.ndarray]:
    """The float64 reference for (workload, dims, seed), cached as .npy files (no pickle)."""
    folder = reference_path(cache_dir, w.hash, seed)
    try:
        return {o: np.load(folder / f"{o}.npy", allow_pickle=False) for o in w.outputs}
    except (OSError, ValueError):
        pass
    ref = reference(w, inputs)
    folder.mkdir(parents=True, exist_ok=True)
    for o, arr in ref.items():
        tmp = folder / f".{o}.{os.getpid()}.npy"
        np.save(tmp, arr, allow_pickle=False)
        os.replace(tmp, folder / f"{o}.npy")
    return ref
