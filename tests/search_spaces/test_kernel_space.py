"""The kernel impl's questions in the search space (pure: fixed machine bounds, nothing runs):
asked per GEMM-shaped contraction, qualified in a contraction order's variant where their
options differ, and rebuilt by params_of."""
from __future__ import annotations

import numpy as np

from search_spaces.candidate import IMPL_KERNEL
from search_spaces.kernel import SPLIT_BATCH, KernelBounds
from search_spaces.kernel_space import kernel_question_options
from search_spaces.space import SearchSpace, TileBounds
from search_spaces.answers import params_of
from tests.search_spaces.test_orders import workload

BOUNDS = TileBounds(1, 256, KernelBounds(vec_bytes=(32, 16), registers=16, cores=2))


def batched_chain():
    """``r[b,i,l] += A[b,i,j] * B[b,j,k] * C[b,k,l]``: no GEMM as written, two batched GEMMs
    in either order."""
    return workload("r[b,i,l] += A[b,i,j] * B[b,j,k] * C[b,k,l]",
                    {"Z": 4, "I": 24, "J": 6, "K": 20, "L": 5},
                    {"A": ["Z", "I", "J"], "B": ["Z", "J", "K"], "C": ["Z", "K", "L"]})


def test_kernel_questions_of_a_gemm_and_their_options():
    w = workload("r[i,k] += A[i,j] * B[j,k]", {"I": 32, "J": 16, "K": 24},
                 {"A": ["I", "J"], "B": ["J", "K"]})
    space = SearchSpace(w, BOUNDS)
    asked: dict[str, list] = {}

    def pick(n, opts):
        asked[n] = list(opts)
        return IMPL_KERNEL if n == "impl:r" else opts[-1]
    cand = space.build(pick)
    assert cand.schedule("r").impl == IMPL_KERNEL
    kq = {n.split(":")[2]: o for n, o in asked.items() if n.startswith("kernel:r:")}
    assert kq == kernel_question_options(BOUNDS.kernel, w, "r")
    assert kq["split"] == ["m", "n"]             # one batch item: no batch split offered
    assert space.meaning("kernel:r:mc") == kq["mc"]
    assert SearchSpace(w).meaning("kernel:r:mc") is None     # a backend without the kernel
    params = params_of(space, cand)
    assert params is not None and space.build(lambda n, o: params[n]).key == cand.key


def test_variant_kernel_questions_are_qualified_and_rebuild():
    w = batched_chain()
    space = SearchSpace(w, BOUNDS)
    assert "r" not in space.library_ok and space.meaning("kernel:r:split") is None
    rng = np.random.default_rng(0)
    seen_kernel_in_variant = False
    for _ in range(40):
        names: list[str] = []

        def pick(n, opts):
            names.append(n)
            return opts[int(rng.integers(len(opts)))]
        cand = space.build(pick)
        kern = {s.anchor for s in cand.schedules if s.impl == IMPL_KERNEL}
        if cand.orders and "r" in kern:
            seen_kernel_in_variant = True
            # r is a GEMM only in the variant: its questions are qualified by the order
            assert any(n.startswith("kernel:r:split@r=") for n in names)
            assert not any(n.startswith("kernel:r:") and "@" not in n for n in names)
            sub = space.variant(cand.orders)
            assert SPLIT_BATCH in sub.meaning("kernel:r:split")    # 4 batch items, 2 cores
        params = params_of(space, cand)
        assert params is not None, cand.to_json()
        assert space.build(lambda n, o: params[n]).key == cand.key
    assert seen_kernel_in_variant
