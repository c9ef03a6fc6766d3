"""Running a candidate's stack of sibling contractions (search_spaces.siblings) as one library
GEMM: ``result (sum D, S) = X (sum D, K) @ Y (K, S)``, where the result is the members' storage
one after the other in one buffer (each member stores D outermost, so its part is a contiguous
(D, S) block), X holds the members' differing operands side by side (copied on each call, the
contraction's scale applied in that copy; once per binding where they are bound) and Y is the
shared operand as stored (a view where its layout allows, else a kept staging copy).
"""
from __future__ import annotations

import numpy as np

from search_spaces.candidate import Candidate
from search_spaces.gemm import gemm_form
from search_spaces.siblings import checked_stack, stack_extents
from search_spaces.workload import Workload

from autotune.backends.cpu.binding import Prepared, derived
from autotune.backends.cpu.kernel_group import as3
from autotune.backends.cpu.staging import Staging


class StackedGemm:
    """The stack ``members`` of ``cand`` on ``w`` (ValueError if the candidate cannot run it:
    search_spaces.siblings.checked_stack); ``block``: the raw bytes holding the members'
    storage in stack order.  Called with the plan's arrays by tensor name: writes every
    member's result in place."""

    def __init__(self, w: Workload, cand: Candidate, members: tuple[str, ...],
                 block: np.ndarray, stage: Staging):
        sib = checked_stack(w, members, {s.anchor: s.impl for s in cand.schedules},
                            lambda t: cand.layout(t, len(w.shapes[t])))
        self.members, self.stage = members, stage
        self.shared_side = sib.shared
        forms = [gemm_form(w.op(m)) for m in members]
        self.form = f = forms[0]
        self.shared = f.a if sib.shared == "a" else f.b
        self.others = tuple(fm.b if sib.shared == "a" else fm.a for fm in forms)
        self.d, s_, self.k = stack_extents(w, sib, members[0])
        dtype = np.dtype(w.dtype)
        if block.nbytes != len(members) * self.d * s_ * dtype.itemsize:
            raise ValueError(f"stack {members}: a block of {block.nbytes} bytes does not hold "
                             f"{len(members)} results of {self.d} x {s_}")
        self.result = block.view(dtype).reshape(len(members) * self.d, s_)
        self.scale = dtype.type(f.scale)
        self.dtype = dtype

    def __call__(self, env: dict[str, np.ndarray], prep: Prepared | None = None) -> None:
        f, st, tag = self.form, self.stage, f"stack:{self.members[0]}"
        if self.shared_side == "a":
            # out_i (N, M) = B_i^T (N, K) @ A^T (K, M)
            y = derived(prep, f"{tag}:y", (self.shared.tensor,), st, lambda s: as3(
                env[self.shared.tensor], self.shared.idx, (f.batch, f.m, f.k), s, f"{tag}:y",
                blas=True)[0].T)
        else:
            # out_i (M, N) = A_i (M, K) @ B (K, N)
            y = derived(prep, f"{tag}:y", (self.shared.tensor,), st, lambda s: as3(
                env[self.shared.tensor], self.shared.idx, (f.batch, f.k, f.n), s, f"{tag}:y",
                blas=True)[0])
        # the differing operands side by side, the contraction's scale applied in the copy: a
        # binding of them (the siblings' weights) builds this once
        x = derived(prep, f"{tag}:x", tuple(o.tensor for o in self.others), st,
                    lambda s: self._side_by_side(env, s.scratch(
                        f"{tag}:x", (len(self.members) * self.d, self.k), self.dtype)))
        np.matmul(x, y, out=self.result)

    def _side_by_side(self, env: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        f = self.form
        if self.shared_side == "a":
            parts = [as3(env[o.tensor], o.idx, (f.batch, f.k, f.n))[0].T for o in self.others]
        else:
            parts = [as3(env[o.tensor], o.idx, (f.batch, f.m, f.k))[0] for o in self.others]
        for i, p in enumerate(parts):
            rows = x[i * self.d:(i + 1) * self.d]
            if self.scale != 1:
                np.multiply(p, self.scale, out=rows)
            else:
                np.copyto(rows, p)
        return x
