"""A workload's dims read off the shapes a caller passes, and the workload at other dims.

A workload is declared with named dims (``x = ["N", "N", "C"]``) and loaded at fixed values; a
model calls it with whatever sequence length it has.  The dims of a call come from the shapes of
its inputs (every axis declared with a dim name gives that dim's value, and all of them must
agree), and the workload is reloaded from its source at those dims.
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Mapping, Sequence

from search_spaces.loader import load_workload
from search_spaces.workload import Workload


class ShapeError(ValueError):
    """Inputs that do not fit the workload: one line naming the input and what was expected."""


def _declared(w: Workload, name: str, shape: tuple[int, ...]) -> str:
    """``[N, N, C]``: how an input is declared (literal extents as numbers), for messages."""
    names = dict(w.axes).get(name) or ("",) * len(shape)
    return "[" + ", ".join(d or str(e) for d, e in zip(names, shape)) + "]"


def check_names(w: Workload, given: Sequence[str], expected: Sequence[str]) -> None:
    """One line for missing or unknown input names (the order of ``given`` does not matter)."""
    missing = [n for n in expected if n not in given]
    if missing:
        raise ShapeError(f"{w.name}: missing input(s) {', '.join(missing)} "
                         f"(it takes {', '.join(expected)})")
    extra = [n for n in given if n not in expected]
    if extra:
        raise ShapeError(f"{w.name}: unknown input(s) {', '.join(extra)} "
                         f"(it takes {', '.join(expected)})")


def dims_of(w: Workload, shapes: Mapping[str, Sequence[int]], partial: bool = False
            ) -> dict[str, int]:
    """The dims at which ``shapes`` (input name -> shape, every input unless ``partial``) fit
    ``w``; dims no given input names keep ``w``'s values.  Raises :class:`ShapeError` naming
    the first misfit."""
    if not partial:
        check_names(w, list(shapes), w.input_names)
    axes = dict(w.axes)
    dims: dict[str, int] = {}
    where: dict[str, str] = {}
    for n, declared in w.inputs:
        if n not in shapes:
            continue
        shp = tuple(int(e) for e in shapes[n])
        if len(shp) != len(declared):
            raise ShapeError(f"{w.name}: input {n!r} has {len(shp)} dimension(s) {shp}, "
                             f"expected {len(declared)}: {_declared(w, n, declared)}")
        for ax, (d, ext, lit) in enumerate(zip(axes.get(n) or ("",) * len(shp), shp, declared)):
            if not d and ext != lit:
                raise ShapeError(f"{w.name}: input {n!r} has shape {shp}; its axis {ax} is "
                                 f"declared {lit}: {_declared(w, n, declared)}")
            if d and d in dims and dims[d] != ext:
                raise ShapeError(f"{w.name}: input {n!r} has shape {shp}: its axis {ax} gives "
                                 f"{d}={ext} but {where[d]} gave {d}={dims[d]}")
            if d and ext < 1:
                raise ShapeError(f"{w.name}: input {n!r} has shape {shp}: empty dim {d}")
            if d and d not in dims:
                dims[d], where[d] = ext, f"axis {ax} of input {n!r}"
    return {d: dims.get(d, v) for d, v in w.dims}


def at_dims(w: Workload, dims: Mapping[str, int]) -> Workload:
    """``w`` reloaded from its source at ``dims`` (``w`` itself at its own dims)."""
    if dict(dims) == w.dim_dict:
        return w
    source = w.source.removeprefix("builtin:")
    if not source or source.startswith("<"):
        raise ShapeError(f"{w.name} was not loaded from a file or a built-in, so it cannot run "
                         f"at other dims than {w.dim_dict}: load it with load_workload(path)")
    stamp = _stamp(w.source)
    if _reload(source, tuple(sorted(w.dims)), stamp).hash != w.hash:
        raise ShapeError(f"{w.source} changed since {w.name} was loaded: load it again")
    return _reload(source, tuple(sorted(dims.items())), stamp)


def _stamp(source: str) -> tuple[int, int]:
    """A file's (mtime, size): an edited file is read again, not taken from the cache."""
    if source.startswith("builtin:"):
        return (0, 0)
    st = os.stat(source)
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _reload(source: str, dims: tuple[tuple[str, int], ...], stamp: tuple[int, int]
            ) -> Workload:
    # the caller saw the loader's warnings (an unused input, say) when it loaded the workload
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_workload(source, dict(dims))


def output_axes(w: Workload) -> dict[str, tuple[str, ...]]:
    """Each output's axes as dim names ("" where no input's named axis reaches it), found by
    following index names from the inputs through every op: the shape-only (fake) kernels of
    the torch op compute output shapes from input shapes with it."""
    names: dict[str, tuple[str, ...]] = {n: a for n, a in w.axes}
    for op in w.ops:
        of_index: dict[str, str] = {}
        for acc in op.reads():
            for i, d in zip(acc.idx, names.get(acc.tensor, ())):
                if d:
                    of_index.setdefault(i, d)
        names[op.out] = tuple(of_index.get(i, "") for i in op.parallel)
    return {o: names[o] for o in w.outputs}


def witnesses(w: Workload) -> dict[str, tuple[str, int]]:
    """Dim name -> (input, axis) of its first appearance among the inputs."""
    out: dict[str, tuple[str, int]] = {}
    for n, a in w.axes:
        for ax, d in enumerate(a):
            if d:
                out.setdefault(d, (n, ax))
    return out
