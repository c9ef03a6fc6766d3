"""Groups too small to share run on the calling thread: one rule (search_spaces.serial) read by
the loop generator, the kernel's C entry point and the cost model, which must agree."""
from __future__ import annotations

from pathlib import Path

import pytest

import costmodel
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.gemm_call import kernel_spec
from autotune.backends.cpu.gemm_driver import kernel_source
from search_spaces import load_workload
from search_spaces.candidate import Candidate
from search_spaces.partition import groups
from search_spaces.plans import named_plan
from search_spaces.serial import (SERIAL_BYTES, SERIAL_FLOPS, c_condition, kernel_serial,
                                  loop_group_serial, runs_serial)
from search_spaces.space import SearchSpace

TINY = Path(__file__).resolve().parents[2] / "bench" / "unseen" / "tiny.toml"


def test_the_bounds():
    assert runs_serial(SERIAL_BYTES, SERIAL_FLOPS)
    assert not runs_serial(SERIAL_BYTES + 1, 0) and not runs_serial(0, SERIAL_FLOPS + 1)
    assert kernel_serial(1, 4, 4, 4, 4)
    assert not kernel_serial(1, 64, 64, 64, 4)        # 262,144 < 2 * 64^3 flops
    assert not kernel_serial(8, 16, 16, 64, 8)        # 8 items' bytes


@pytest.mark.parametrize("b,m,n,k,item", [(1, 4, 4, 4, 4), (1, 64, 64, 64, 4), (3, 30, 20, 40, 4),
                                          (1, 50, 50, 40, 8), (2, 50, 50, 20, 4),
                                          (1, 1, 4096, 2, 4)])
def test_the_kernels_c_condition_is_the_models(b, m, n, k, item):
    # the C expression, read as Python (its casts dropped), decides as kernel_serial does
    expr = c_condition("sizeof(T)", "nb", "M", "N", "K").replace("(double)", "")
    expr = expr.replace("&&", "and")
    env = {"nb": b, "M": m, "N": n, "K": k}
    assert eval(expr.replace("sizeof(T)", str(item)), {}, env) == kernel_serial(b, m, n, k, item)


def test_a_tiny_block_runs_on_one_thread_and_is_priced_so(monkeypatch):
    w = load_workload(str(TINY))
    cand = named_plan(SearchSpace(w), "unfused")
    src, _ = generate(w, cand)
    gs = groups(w, cand.fused_pairs)
    loops = [s for s in cand.schedules if s.impl == "loop"]     # the other is a library GEMM
    assert src.count("#pragma omp parallel if(0)") == len(loops) == 1
    assert all(loop_group_serial(w, g.members) for g in gs)
    dev = costmodel.preset("cpu")
    assert dev.parallel_units > 1 and dev.thread_start_s > 0
    serial = costmodel.estimate(w, cand, dev).total_s
    # priced as if shared, the same plan pays every other thread's wake-up in each group
    import costmodel.model as model
    import costmodel.rates as rates
    monkeypatch.setattr(rates, "loop_group_serial", lambda w, members: False)
    monkeypatch.setattr(model, "_MEMO", type(model._MEMO)())    # nothing priced before
    shared = costmodel.estimate(w, cand, dev).total_s
    woken = dev.thread_start_s * (dev.parallel_units - 1)
    assert shared - serial == pytest.approx(len(loops) * woken, rel=0.1)


def test_large_groups_stay_parallel():
    w = load_workload("gated_mlp", {})
    cand = named_plan(SearchSpace(w), "unfused")
    src, _ = generate(w, cand)
    assert "if(0)" not in src and "#pragma omp parallel" in src
    assert not any(loop_group_serial(w, g.members) for g in groups(w, cand.fused_pairs))


def test_the_kernel_entry_decides_at_run_time():
    w = load_workload(str(TINY))
    d = {"fused": ["h->o"], "layouts": {}, "name": "",
         "schedules": [{"anchor": "o", "impl": "kernel", "tiles": [1, 3, 2],
                        "kernel": {"kc": 16, "mc": 42, "mr": 14, "nc": 512, "nr": 32}}]}
    src = kernel_source(kernel_spec(w, Candidate.from_dict(d), "o"))
    assert "int par = !" in src and src.count("if(par)") == src.count("#pragma omp parallel") == 2


def test_serial_plans_compute_the_reference(tmp_path):
    # the kernel group (run on this thread) and the loop groups of a tiny block, executed
    from autotune.api import make_executable
    from autotune.backends.base import verify
    from autotune.reference import reference
    w = load_workload(str(TINY))
    kernel = {"fused": ["h->o"], "layouts": {}, "name": "",
              "schedules": [{"anchor": "o", "impl": "kernel", "tiles": [1, 3, 2],
                             "kernel": {"kc": 16, "mc": 42, "mr": 14, "nc": 512, "nr": 32}}]}
    for cand in (Candidate.from_dict(kernel), named_plan(SearchSpace(w), "unfused"),
                 named_plan(SearchSpace(w), "heuristic")):
        plan = make_executable(w, cand, "cpu", tmp_path)
        for seed in (1, 2):
            inputs = w.random_inputs(seed=seed)
            err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
            assert why == "", (cand.name, why)


def test_the_calibrations_call_probes_run_serial():
    # autotune calibrate's launch_s is a probe group's call less its region: one thread's
    # region where the probe's 2 x 2 groups run alone (autotune.backends.cpu.calibration_terms)
    from autotune.backends.cpu.host_probes import calls_run_serial
    assert calls_run_serial()
