"""The CUDA plan as one graph (autotune.backends.cuda.graphs), under the host emulator: its
capture records the device work without running it and refuses any allocation, and a replay
runs exactly what was recorded, so a plan whose run needed host work (a fresh array, a copy
made outside the runtime) fails here.  On a GPU (cuda-marked) the replays match the eager runs
and allocate nothing."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.cuda.kind import CudaBackendKind
from autotune.reference import reference
from search_spaces import load_workload
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace

from tests.search_spaces.test_siblings import stacking_choice

GPU_BOUNDS = CudaBackendKind().tile_bounds
SMALL = {"trimul_outgoing": {"N": 12, "C": 8}, "gated_mlp": {"T": 16, "C": 16, "F": 32},
         "attention": {"S": 16, "H": 2, "D": 8, "C": 16},
         "causal_attention": {"S": 16, "H": 2, "D": 8, "C": 16}}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("graph-kernels")


def _plans(w, space):
    """The named plans, a stacked plan in the split precision, and the tensor-core kernel."""
    out = [named_plan(space, n) for n in NAMED_PLANS]
    if space.siblings:
        base = stacking_choice(space, np.random.default_rng(0))
        out.append(space.build(lambda q, o: "3xtf32" if q.startswith("precision:") and
                               "3xtf32" in o else base(q, o)))
    out.append(space.build(lambda q, o: "kernel" if q.startswith("impl:") and "kernel" in o
                           else o[0]))
    return out


def _check(outs, w, inputs):
    _, why = verify({k: np.array(v) for k, v in outs.items()}, reference(w, inputs), w.rtol)
    assert not why, why


@pytest.mark.parametrize("name", sorted(SMALL))
def test_runs_replay_one_graph_that_reads_what_the_inputs_hold(name, emulator, cache):
    w = load_workload(name, SMALL[name])
    space = SearchSpace(w, GPU_BOUNDS)
    for cand in _plans(w, space):
        plan = CudaPlan(w, cand, cache, runtime=emulator)
        inputs = w.random_inputs(seed=1)
        replays = emulator.replays
        _check(plan.run_device(**inputs), w, inputs)          # eager
        assert plan.graphs.captures == 0 and emulator.replays == replays
        _check(plan.run_device(**inputs), w, inputs)          # captured, then replayed
        assert plan.graphs.error is None, f"{cand.name or cand.key}: {plan.graphs.error}"
        assert plan.graphs.captures == 1 and emulator.replays == replays + 1
        # new values in the same arrays: the graph reads them, not the captured run's
        for n, a in w.random_inputs(seed=2).items():
            inputs[n][...] = a
        _check(plan.run_device(**inputs), w, inputs)
        assert plan.graphs.captures == 1 and emulator.replays == replays + 2


def test_inputs_elsewhere_run_eagerly_then_get_their_own_graph(emulator, cache):
    w = load_workload("gated_mlp", SMALL["gated_mlp"])
    plan = CudaPlan(w, named_plan(SearchSpace(w, GPU_BOUNDS), "heuristic"), cache,
                    runtime=emulator)
    one, two = w.random_inputs(seed=3), w.random_inputs(seed=4)
    for inputs, captures in ((one, 0), (one, 1), (two, 1), (two, 2), (one, 2)):
        _check(plan.run_device(**inputs), w, inputs)
        assert plan.graphs.captures == captures


def test_graphs_off_runs_every_call_eagerly(emulator, cache):
    w = load_workload("trimul_outgoing", SMALL["trimul_outgoing"])
    plan = CudaPlan(w, named_plan(SearchSpace(w, GPU_BOUNDS), "heuristic"), cache,
                    runtime=emulator, graphs=False)
    inputs = w.random_inputs(seed=5)
    replays = emulator.replays
    for _ in range(3):
        _check(plan.run_device(**inputs), w, inputs)
    assert plan.graphs.captures == 0 and emulator.replays == replays


def test_a_run_that_allocates_is_not_captured_and_runs_eagerly(emulator, cache, monkeypatch):
    w = load_workload("trimul_outgoing", SMALL["trimul_outgoing"])
    plan = CudaPlan(w, named_plan(SearchSpace(w, GPU_BOUNDS), "heuristic"), cache,
                    runtime=emulator)
    gemm = next(iter(plan.library.values()))
    run = gemm.run

    def allocating(env, scratch=None):       # a fresh array on every run: host work
        plan.rt.xp.empty(4)
        run(env, scratch)
    monkeypatch.setattr(gemm, "run", allocating)
    inputs = w.random_inputs(seed=6)
    for _ in range(3):
        _check(plan.run_device(**inputs), w, inputs)
    assert not plan.graphs.enabled and plan.graphs.captures == 0
    assert "allocates during a capture" in plan.graphs.error


def test_a_binding_has_graphs_of_its_own(emulator, cache):
    w = load_workload("trimul_outgoing", SMALL["trimul_outgoing"])
    space = SearchSpace(w, GPU_BOUNDS)
    plan = CudaPlan(w, space.build(stacking_choice(space, np.random.default_rng(1))), cache,
                    runtime=emulator)
    inputs = w.random_inputs(seed=7)
    weights = {n: a for n, a in inputs.items() if n.startswith("w")}
    acts = {n: a for n, a in inputs.items() if n not in weights}
    bound = plan.bind(weights)
    for _ in range(3):
        _check(bound(**acts), w, inputs)
    assert plan.graphs.captures == 1
    for _ in range(2):                       # unbound calls: a graph of their own
        _check(plan.run_device(**inputs), w, inputs)
    assert plan.graphs.captures == 2
    bound.close()
    assert [k[-1] for k in plan.graphs._graphs] == [0]


def test_timed_call_times_graph_replays_and_profiles_every_group(emulator, cache):
    w = load_workload("attention", SMALL["attention"])
    plan = CudaPlan(w, named_plan(SearchSpace(w, GPU_BOUNDS), "heuristic"), cache,
                    runtime=emulator)
    inputs = w.random_inputs(seed=8)
    replays = emulator.replays
    outs, times = plan.timed_call(inputs, warmup=1, repeats=3)
    _check(outs, w, inputs)
    assert len(times) == 3 and plan.graphs.captures == 1
    assert emulator.replays - replays == 1 + 1 + 3        # checked, warm-up, timed
    assert list(plan.group_seconds()) == [g.anchor for g in plan.groups]


@pytest.mark.cuda
def test_on_the_gpu_replays_match_and_allocate_nothing(gpu, cache):
    import cupy
    w = load_workload("trimul_outgoing", {"N": 64, "C": 32})
    space = SearchSpace(w, GPU_BOUNDS)
    pool = cupy.get_default_memory_pool()
    for cand in _plans(w, space):
        plan = CudaPlan(w, cand, cache, runtime=gpu)
        inputs = w.random_inputs(seed=9)           # host arrays: kept device copies
        _check(plan(**inputs), w, inputs)
        _check(plan(**inputs), w, inputs)
        assert plan.graphs.error is None and plan.graphs.captures == 1
        used = pool.used_bytes()
        for _ in range(3):
            new = w.random_inputs(seed=10)
            _check(plan(**new), w, new)
        assert pool.used_bytes() == used and plan.graphs.captures == 1
        plan.release()


def test_moving_inputs_keep_a_bounded_number_of_graphs():
    """A caller whose inputs move on every call: the graphs kept and the keys remembered stay
    bounded, the least recently used dropped first."""
    from autotune.backends.cuda.graphs import MAX_GRAPHS, MAX_SEEN, PlanGraphs

    class Recorder:           # a runtime whose graphs are the keys they were captured for
        def __init__(self):
            self.replayed = []

        def capture(self, issue):
            return issue()

        def replay(self, graph):
            self.replayed.append(graph)
    rt = Recorder()
    graphs = PlanGraphs(rt)
    for n in range(3 * MAX_SEEN):
        assert not graphs.run(((n,), 0), lambda: None)      # first sight: eager
    assert len(graphs._seen) == MAX_SEEN
    for n in range(2 * MAX_GRAPHS):
        for _ in range(2):
            graphs.run(((n,), 0), lambda n=n: n)
    assert len(graphs._graphs) == MAX_GRAPHS and graphs.captures == 2 * MAX_GRAPHS
    assert graphs.run(((2 * MAX_GRAPHS - 1,), 0), lambda: None)     # kept: replayed
    assert rt.replayed[-1] == 2 * MAX_GRAPHS - 1
