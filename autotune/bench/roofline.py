"""The machine's limit for a workload: useful flops at the peak rate, or compulsory bytes at the
copy bandwidth, on the cost model's spec of the device (calibrated for the cpu)."""
from __future__ import annotations

import math
import warnings

import numpy as np

from costmodel.devices import DeviceSpec
from search_spaces.ir import accesses
from search_spaces.orders import order_choices, scale_flops
from search_spaces.rewrite import rewrite
from search_spaces.workload import Workload

from autotune.backends.factory import backend_kind


F64_SHARE = 0.5     # float64's peak and GEMM rates as a share of float32's


def spec_of(env) -> tuple[DeviceSpec, bool | None]:
    """The cost-model device and whether it is this machine's calibration (None for GPU
    presets, which are datasheets)."""
    kind = backend_kind(env.kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # an uncalibrated spec is said in the record
        spec = kind.device_spec(env)
    return spec, kind.calibrated()


def compulsory_bytes(w: Workload) -> int:
    """Inputs read once and outputs written once."""
    item = np.dtype(w.dtype).itemsize
    return item * (sum(math.prod(s) for _, s in w.inputs)
                   + sum(math.prod(w.shapes[o]) for o in w.outputs))


def useful_flops(w: Workload) -> int:
    """The flops no plan can avoid: each product the space may split (orders.product_of) in its
    order of fewest flops, not as written (a bilinear layer's single statement would otherwise
    raise the floor above the plans that split it: 0.9x the floor, measured), and a sum's
    constant factors (``/ sqrt(D)``, ``/ T``) once per element of its result, as a GEMM's alpha
    applies them, not once per term (a covariance's ``/ T`` per term put its 0.9x plans under
    the floor)."""
    best = tuple((stmt, ch.orders[0].tree) for stmt, ch in sorted(order_choices(w).items()))
    total = 0
    for op in rewrite(w, best).ops:
        per = op.flops_per_iteration()[0]
        if op.combiner == "sum" and op.reduction:
            const = scale_flops([f for f in op.factors() if not accesses(f)])
            total += op.iterations * (per - const) + op.out_size * const
        else:
            total += op.iterations * per
    return total


def floor_of(w: Workload, spec, calibrated: bool | None = None) -> dict:
    """The roofline floor of ``w`` on a cost-model device spec: useful flops at the peak FMA
    rate (the machine's limit; :func:`useful_flops`) or
    compulsory bytes at the copy bandwidth, whichever is longer; float64 at F64_SHARE of the
    float32 rates.
    The same flops at the library GEMM rate are reported beside it (``gemm_floor_s``): what a
    plan whose every flop ran in BLAS would take."""
    flops = useful_flops(w)
    nbytes = compulsory_bytes(w)
    # float64 at half the float32 rates: half the lanes of a vector (AVX2, AVX-512, NEON), and
    # the datasheets' FP64 (non-tensor) rate of the A100 and H100/H200 is half their FP32
    per = F64_SHARE if w.dtype == "float64" else 1.0
    peak, gemm = spec.f32_flops * per, spec.gemm_flops * per
    compute = flops / peak
    memory = nbytes / spec.bandwidth
    return {"useful_flops": flops, "compulsory_bytes": nbytes, "peak_flops": peak,
            "gemm_flops": gemm, "bandwidth": spec.bandwidth, "compute_s": compute,
            "memory_s": memory, "floor_s": max(compute, memory),
            "gemm_floor_s": max(flops / gemm, memory),
            "bound": "compute" if compute >= memory else "memory",
            "spec": spec.name, "calibrated": calibrated}
