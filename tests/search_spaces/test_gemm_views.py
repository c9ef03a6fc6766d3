"""The runs a staged operand's copy moves (gemm.staged_run), checked against NumPy: the
longest innermost stretch that is contiguous both in the stored array and in the row-major
(batch, rows, cols) matrix the executor copies it into."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from search_spaces.gemm import as_matrix_view, staged_run

IDX = ("i", "j", "e", "f")
SHAPE = (3, 4, 5, 6)
GROUPS = ((), ("i", "j"), ("e", "f"))


def _numpy_run(perm) -> int:
    """Elements from the last of the matrix's order on that are contiguous in storage: the
    stored array in ``perm`` order, viewed in logical order, compared element by element."""
    stored = np.arange(np.prod(SHAPE)).reshape([SHAPE[p] for p in perm])
    logical = stored.transpose(np.argsort(perm)).reshape(-1)   # the matrix's row-major order
    run = 1
    while run < logical.size and logical[run] == logical[0] + run:
        run += 1
    # the first run's length need not divide the rest evenly: take the largest divisor of the
    # trailing extents' products that every run reaches
    for n in sorted({int(np.prod(SHAPE[k:])) for k in range(len(SHAPE) + 1)}, reverse=True):
        if n <= run and all((logical[s:s + n] == logical[s] + np.arange(n)).all()
                            for s in range(0, logical.size, n)):
            return n
    return 1


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_the_run_is_what_both_sides_keep_contiguous(perm):
    assert staged_run(IDX, SHAPE, perm, GROUPS) == _numpy_run(perm)


def test_runs_of_the_outer_product_means_layouts():
    shape, groups = (128, 128, 32, 32), ((), ("i", "j"), ("e", "f"))
    # o stored [i, e, j, f]: no view (j sits between e and f), but f's 32 stay together
    assert not as_matrix_view(IDX, shape, (0, 2, 1, 3), groups)
    assert staged_run(IDX, shape, (0, 2, 1, 3), groups) == 32
    assert staged_run(IDX, shape, (2, 3, 0, 1), groups) == 1          # [e, f, i, j]
    assert staged_run(IDX, shape, (0, 1, 2, 3), groups) == 128 * 128 * 32 * 32
    # an index of extent one neither breaks nor lengthens a run
    assert staged_run(IDX, (128, 1, 32, 32), (0, 2, 1, 3), groups) == 128 * 32 * 32
