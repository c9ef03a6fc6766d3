"""Shared-memory rows of a multiple of 32 banks are padded by one element
(costmodel.cuda_limits.padded_shape): the generated offsets, the kernel's shared-memory size and
the limit check agree, and the emulated plans match the float64 reference."""
from __future__ import annotations

import pytest

from autotune.backends.base import verify
from autotune.backends.cuda.codegen import generate_cuda
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan
from autotune.reference import reference
from costmodel.cuda_limits import group_shared_bytes, padded_shape
from search_spaces.partition import groups
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from tests.support.workloads import workload

SOFTMAX = """m[i] max= x[i,c]
e[i,c] = exp(x[i,c] - m[i])
s[i] += e[i,c]
y[i,c] = e[i,c] / s[i]
"""


@pytest.mark.parametrize("shape,item,padded", [
    ((4, 32), 4, (4, 33)), ((3, 5, 64), 4, (3, 5, 65)), ((4, 16), 8, (4, 17)),
    ((1, 32), 4, (1, 32)),          # one row: nothing to conflict with
    ((4, 24), 4, (4, 24)), ((4, 16), 4, (4, 16)), ((96,), 4, (96,))])
def test_rows_of_whole_bank_rows_get_one_more_element(shape, item, padded):
    assert padded_shape(shape, item) == padded


def test_the_kernel_indexes_and_sizes_the_padded_buffer(tmp_path):
    w = workload(SOFTMAX, {"I": 37, "C": 64}, {"x": ["I", "C"]}, ["y"])
    cand = named_plan(SearchSpace(w), "heuristic")
    (g,) = groups(w, cand.fused_pairs)
    assert {"e", "y"} <= set(g.members)
    src, (kern,) = generate_cuda(w, cand)
    # e's buffer is 37 rows of 64 floats: rows 65 apart
    assert "L_e[v_d0*65 + v_d1*1]" in src and "L_e[v_d0*64" not in src
    assert "G_y[v_d0*64 + v_d1*1]" in src            # global memory keeps its layout
    assert kern.smem_bytes == group_shared_bytes(w, g, cand.schedule(g.anchor).tiles)
    assert kern.smem_bytes >= 4 * 37 * 65
    inputs = w.random_inputs(seed=5)
    out = CudaPlan(w, cand, tmp_path, runtime=HostEmulator(threads=4))(**inputs)
    _, why = verify(out, reference(w, inputs), w.rtol)
    assert not why, why
