"""A stack of sibling contractions (search_spaces.siblings) on the GPU: one cuBLAS GEMM
``result (sum D, S) = X (sum D, K) @ Y (K, S)``.

As on the CPU (autotune.backends.cpu.stacked) the result is the members' storage one after the
other in one device buffer (each member stores its differing operand's free dims outermost, so
its part is a contiguous (D, S) block and nothing is copied out), X the members' differing
operands side by side in a kept device matrix (one copy kernel per member and call, the
contraction's scale applied in it; once per binding where they are bound: they are weights),
and Y the shared operand as stored where cuBLAS can read it as a matrix, else a contiguous copy.
Why on a GPU: the shared operand is read from DRAM once, not once per member (trimul's five
projections at N=702 each read the 252 MB normalized input), and one wide GEMM fills the device
better than several narrow ones.  The GEMM runs in the most accurate of the members' precisions
(search_spaces.precision.stack_precision).
"""
from __future__ import annotations

from search_spaces.candidate import Candidate
from search_spaces.gemm import gemm_form
from search_spaces.precision import stack_precision
from search_spaces.siblings import checked_stack, free_groups, stack_extents
from search_spaces.workload import Workload

from autotune.backends.cuda.gemm import GemmCall, Mat, mat3, plan_gemm, run_gemm


class CudaStackedGemm:
    """The stack ``members`` of ``cand`` on ``w`` (ValueError if the candidate cannot run it:
    search_spaces.siblings.checked_stack) on runtime ``rt``; ``block``: the flat device array
    (the plan's dtype) holding the members' storage in stack order.  ``run(env)`` writes every
    member's result in place; ``env``: the plan's logical arrays by tensor name."""

    def __init__(self, w: Workload, cand: Candidate, members: tuple[str, ...], block, rt):
        sib = checked_stack(w, members, {s.anchor: s.impl for s in cand.schedules},
                            lambda t: cand.layout(t, len(w.shapes[t])))
        self.members, self.rt = members, rt
        forms = [gemm_form(w.op(m)) for m in members]
        f = forms[0]
        # siblings share their operands' index names (search_spaces.siblings.sibling_sets)
        self.shared = f.a if sib.shared == "a" else f.b
        self.others = tuple(fm.b if sib.shared == "a" else fm.a for fm in forms)
        d_dims, s_dims = free_groups(f, sib.shared)
        self.d, self.s, self.k = stack_extents(w, sib, members[0])
        self.rows = len(members) * self.d          # of X and of the result
        if block.size != self.rows * self.s:
            raise ValueError(f"stack {members}: a block of {block.size} elements does not hold "
                             f"{len(members)} results of {self.d} x {self.s}")
        self.result = block.reshape(self.rows, self.s)
        self.scale = f.scale
        self.precision = stack_precision(w, [cand.schedule(m).precision for m in members])
        # a member's differing operand in (D dims, K dims) order, and that shape
        self._x_order = tuple(self.others[0].idx.index(i) for i in d_dims + f.k)
        self._x_shape = tuple(w.op(members[0]).extent(i) for i in d_dims + f.k)
        self._y_groups = ((), f.k, s_dims)
        self._y_order = tuple(self.shared.idx.index(i) for i in f.k + s_dims)
        self.x = self.side_by_side_empty()
        self._call: GemmCall | None = None
        self._copy_y = None             # the kept contiguous copy of Y, where one is needed

    def side_by_side_empty(self):
        """A fresh (sum D, K) device matrix for :meth:`side_by_side`."""
        return self.rt.xp.empty((self.rows, self.k), dtype=self.result.dtype)

    def operand_sizes(self) -> tuple[int, int]:
        """Elements of X and Y (what a split of each needs)."""
        return self.rows * self.k, self.k * self.s

    def side_by_side(self, env: dict, x) -> object:
        """``x`` filled with the members' differing operands, each scaled by the contraction's
        scale, member after member: X of the stacked GEMM."""
        for i, o in enumerate(self.others):
            dst = x[i * self.d:(i + 1) * self.d].reshape(self._x_shape)
            self.rt.copy(dst, env[o.tensor].transpose(self._x_order),
                         None if self.scale == 1.0 else self.scale)
        return x

    def _plan(self, y) -> GemmCall:
        xm, cm = Mat(self.rows, self.k, self.k, 1, 0), Mat(self.rows, self.s, self.s, 1, 0)
        got = mat3(y, self.shared.idx, self._y_groups)
        call = plan_gemm(xm, got[0], cm, 1) if got else "B"
        if call == "B":         # Y's storage does not nest K and S: copied contiguous
            self._copy_y = self.rt.xp.empty((self.k, self.s), dtype=self.result.dtype)
            call = plan_gemm(xm, Mat(self.k, self.s, self.s, 1, 0), cm, 1)
        if not isinstance(call, GemmCall):
            raise RuntimeError(f"stack {self.members}: no cuBLAS argument list")
        return call

    def run(self, env: dict, x=None, scratch: tuple | None = None) -> None:
        """The stacked GEMM on the plan's arrays ``env``; ``x``: X already built (a
        binding's), else built into the kept matrix now; ``scratch``: the plan's four split
        buffers (for "3xtf32")."""
        y = env[self.shared.tensor]
        if self._call is None:
            self._call = self._plan(y)
        if self._copy_y is not None:
            src = y.transpose(self._y_order)
            self.rt.copy(self._copy_y.reshape(src.shape), src)
            y = self._copy_y
        if x is None:
            x = self.side_by_side(env, self.x)
        call, bufs = self._call, {"A": x, "B": y}
        run_gemm(self.rt, call, bufs[call.first], bufs[call.second], self.result, 1.0,
                 self.precision, scratch)
