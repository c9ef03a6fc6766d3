"""A library contraction on the GPU: one ``cublasGemmStridedBatchedEx`` call on strided views of
the plan's buffers, planned once (on the first run, from its operands' strides) and replayed.

Where the layouts allow a matrix view nothing is copied; otherwise the operand is first copied
into a contiguous stack (or the result written to one and copied back through the output's
transpose), into buffers this GEMM keeps, so a run allocates nothing and can be captured in a
CUDA graph (autotune.backends.cuda.graphs).  The arithmetic is the group's ``precision``
(search_spaces.precision), by default the workload's: "3xtf32" splits both operands into TF32
high and low parts in the plan's split scratch and sums three TF32 tensor-core products.
"""
from __future__ import annotations

from dataclasses import dataclass

from search_spaces.gemm import gemm_form, group_size
from search_spaces.workload import Workload

from autotune.backends.cuda.gemm import GemmCall, Mat, mat3, plan_gemm, run_gemm


@dataclass(frozen=True)
class _Copy:
    """An operand (or result) moved through a contiguous buffer: the transpose of its logical
    view that lines its groups up, and the buffer (batch, rows, cols)."""
    order: tuple[int, ...]
    buf: object


@dataclass(frozen=True)
class _Planned:
    call: GemmCall
    copy_a: _Copy | None
    copy_b: _Copy | None
    copy_out: _Copy | None


class LibraryGemm:
    """The library group ``name`` of ``w`` on runtime ``rt`` in ``precision``; ``run(env,
    scratch)`` on the plan's logical arrays by tensor name (``scratch``: the plan's four split
    buffers, for "3xtf32")."""

    def __init__(self, w: Workload, name: str, rt, precision: str, dtype):
        self.w, self.name, self.rt, self.precision, self.dtype = w, name, rt, precision, dtype
        self.op = op = w.op(name)
        self.form = gemm_form(op)
        self._planned: _Planned | None = None

    def operand_sizes(self) -> tuple[int, int]:
        """Elements of A and B (what a split of each needs)."""
        f, op = self.form, self.op
        return tuple(group_size(op, f.batch) * group_size(op, a) * group_size(op, b)
                     for a, b in ((f.m, f.k), (f.k, f.n)))  # type: ignore[return-value]

    def _plan(self, env) -> _Planned:
        """The call from the operands' shapes and strides (the same on every run: the plan's
        buffers and its inputs' layouts do not change), and the buffers of any copies."""
        op, f, xp = self.op, self.form, self.rt.xp
        ga, gb, go = (f.batch, f.m, f.k), (f.batch, f.k, f.n), (f.batch, f.m, f.n)
        batch = group_size(op, f.batch)

        def desc(arr, idx, grp):
            got = mat3(arr, idx, grp)
            return got[0] if got else None

        def packed(idx, grp):
            sizes = tuple(group_size(op, g) for g in grp)
            order = tuple(idx.index(i) for g in grp for i in g)
            return _Copy(order, xp.empty(sizes, dtype=self.dtype)), \
                Mat(sizes[1], sizes[2], sizes[2], 1, sizes[1] * sizes[2] if batch > 1 else 0)
        A, B, O = env[f.a.tensor], env[f.b.tensor], env[self.name]
        da, db, dc = desc(A, f.a.idx, ga), desc(B, f.b.idx, gb), desc(O, op.parallel, go)
        copies: dict[str, _Copy] = {}
        for _ in range(4):
            call = plan_gemm(da, db, dc, batch) if None not in (da, db, dc) else \
                ("A" if da is None else "B" if db is None else "C")
            if isinstance(call, GemmCall):
                return _Planned(call, copies.get("A"), copies.get("B"), copies.get("C"))
            if call == "A":
                copies["A"], da = packed(f.a.idx, ga)
            elif call == "B":
                copies["B"], db = packed(f.b.idx, gb)
            else:
                copies["C"], dc = packed(op.parallel, go)
        raise RuntimeError(f"no cuBLAS argument list for {self.name}")

    def run(self, env, scratch: tuple | None = None) -> None:
        if self._planned is None:
            self._planned = self._plan(env)
        p, rt, f = self._planned, self.rt, self.form

        def operand(arr, copy: _Copy | None):
            if copy is None:
                return arr
            src = arr.transpose(copy.order)
            rt.copy(copy.buf.reshape(src.shape), src)
            return copy.buf
        bufs = {"A": operand(env[f.a.tensor], p.copy_a), "B": operand(env[f.b.tensor], p.copy_b)}
        out = env[self.name]
        c_buf = out if p.copy_out is None else p.copy_out.buf
        # every array here starts at its buffer's first element (transposes of storage, or
        # kept contiguous copies): its data pointer is the buffer's
        run_gemm(rt, p.call, bufs[p.call.first], bufs[p.call.second], c_buf, f.scale,
                 self.precision, scratch)
        if p.copy_out is not None:
            t = out.transpose(p.copy_out.order)
            rt.copy(t, p.copy_out.buf.reshape(t.shape))
