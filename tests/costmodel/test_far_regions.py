"""Reads from more far-apart regions than the prefetchers follow (``rates.far_regions``,
``rates.regions_waste``), and the layouts that let a reduction over a batched contraction's
batch index read from a few regions (``SearchSpace._reduced_along``)."""
from __future__ import annotations

import dataclasses

import pytest

import costmodel
from costmodel.devices import CPU_DEFAULT
from costmodel.rates import far_regions
from costmodel.rates import TRACKED_REGIONS, regions_waste
from search_spaces import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.space import SearchSpace
from tests.support.workloads import workload

SHAPE = (702, 128, 702)      # t[i, c, j] of trimul at N = 702, by index position (i, c, j)


@pytest.mark.parametrize("perm, regions", [
    ((1, 0, 2), 128),   # channel first: each (8 x 64) tile of rows lies in 128 planes 2 MB apart
    ((0, 1, 2), 8),     # (i, c, j): 128 rows 2.8 KB apart in each of 8 regions
    ((0, 2, 1), 8),     # (i, j, c): the box's rows of 64 x 128 are each one contiguous run
])
def test_regions_a_tile_reads(perm, regions):
    assert far_regions(SHAPE, perm, (8, 128, 64), 4) == regions


def test_a_box_as_large_as_the_tensor_is_one_region():
    assert far_regions(SHAPE, (1, 0, 2), SHAPE, 4) == 1


def test_regions_waste_is_one_up_to_the_tracked_streams_then_the_calibrated_factor():
    dev = dataclasses.replace(CPU_DEFAULT, access=dataclasses.replace(CPU_DEFAULT.access,
                                                                     far_regions=2.0))
    assert regions_waste(1, dev) == regions_waste(TRACKED_REGIONS, dev) == 1.0
    mid = regions_waste(2 * TRACKED_REGIONS, dev)
    assert 1.0 < mid < 2.0
    assert regions_waste(4 * TRACKED_REGIONS, dev) == regions_waste(1024, dev) == 2.0


def _norm_s(perm, far: float) -> float:
    """Predicted seconds of a centre-norm-like loop group (a mean over c, each element less
    it, then scaled) over x stored in ``perm``, tiles (8, 64, 128) of (i, j, c)."""
    w = workload("mu[i,j] += x[i,j,c] / 128.0\nxc[i,j,c] = x[i,j,c] - mu[i,j]\n"
                 "y[i,j,c] = xc[i,j,c] * 2.0\n",
                 {"I": 256, "J": 256, "C": 128}, {"x": ["I", "J", "C"]}, ["y"])
    dev = dataclasses.replace(CPU_DEFAULT, access=dataclasses.replace(CPU_DEFAULT.access,
                                                                     far_regions=far))
    cand = make_candidate(["mu->xc", "xc->y"], {"x": perm}, [GroupSchedule("y", (8, 64, 128))], "t")
    (g,) = costmodel.estimate(w, cand, dev).groups
    return g.predicted_s


def test_the_channel_first_norm_pays_for_its_regions_and_the_channel_middle_does_not():
    first, middle = _norm_s((2, 0, 1), 1.9), _norm_s((0, 2, 1), 1.9)
    assert first > 1.2 * middle
    # the same two walks at par where far regions cost nothing: the term is the difference
    assert _norm_s((2, 0, 1), 1.0) == pytest.approx(_norm_s((0, 2, 1), 1.0))


def test_a_reduction_over_the_batch_index_adds_batch_middle_layouts():
    # trimul's t[i,j,c] (batch c) is normed over c: (i, c, j) and (j, c, i) are offered
    space = SearchSpace(load_workload("trimul_outgoing"))
    assert {(0, 2, 1), (1, 2, 0)} <= set(space.layout_options("t"))
    # a and b are only read by the einsum, which keeps c as its batch: no such layouts
    assert (0, 2, 1) not in space.layout_options("a")


def test_no_batch_middle_layouts_without_a_reduction_over_the_batch():
    # attention's scores s[h,i,j] are reduced over j only (the softmax), never over h
    space = SearchSpace(load_workload("attention"))
    assert space.layout_options("s") == [(0, 1, 2), (0, 2, 1)]


def _chain(layouts: dict, far: float = 1.0):
    """Attention's online-softmax chain group with ``layouts`` over the chained plan's, tiles
    of one head (so that a tile reads one head's keys), on a device whose cache holds none of
    its operands."""
    from autotune.backends.factory import backend_kind
    from search_spaces.plans import chained_plan
    w = load_workload("attention")
    c = chained_plan(SearchSpace(w, backend_kind("cpu").tile_bounds))
    chain = next(s for s in c.schedules if s.chain_block)
    scheds = tuple(dataclasses.replace(s, tiles=(16, 1, 32)) if s is chain else s
                   for s in c.schedules)
    c = dataclasses.replace(c, schedules=scheds,
                            layouts=tuple(sorted({**dict(c.layouts), **layouts}.items())))
    dev = dataclasses.replace(CPU_DEFAULT, cache_bytes=1e5, access=dataclasses.replace(
        CPU_DEFAULT.access, far_regions=far))
    (g,) = [g for g in costmodel.estimate(w, c, dev).groups if g.chain]
    return g


def _chain_bytes(k_perm, far: float) -> float:
    return _chain({"k": k_perm}, far).bytes


def test_a_chain_pays_for_the_regions_its_walk_reads_like_a_loop_group():
    # k[h,j,d] stored (d, h, j): one head's 256 keys a tile lie in 32 rows 8 KiB apart
    near, far = _chain_bytes((0, 1, 2), 2.5), _chain_bytes((2, 0, 1), 2.5)
    assert far > near
    assert _chain_bytes((2, 0, 1), 1.0) == near       # the term is the difference


def test_a_chain_whose_walk_steps_a_line_at_a_time_counts_its_flops_as_strided():
    """What the learned correction sees of a chain's gathers (GroupCost.strided_flops): the
    members that read a tensor a line or more apart per step of the walk over keys."""
    gathered = _chain({"k": (0, 1, 2), "v": (0, 1, 2)})       # k[h,j,d]: j steps 32 floats
    walked = _chain({"k": (0, 2, 1), "v": (0, 2, 1)})         # stored (h, d, j): j unit-stride
    assert 0 < gathered.strided_flops <= gathered.flops
    assert walked.strided_flops == 0
