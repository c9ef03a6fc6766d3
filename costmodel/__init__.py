"""Analytic cost model: pure functions from a candidate and a device to a predicted time."""
from .devices import PRESETS, DeviceSpec, preset
from .estimate import CostEstimate, FusedProducer, GroupCost
from .model import estimate, memory_bytes

__all__ = ["PRESETS", "DeviceSpec", "preset", "CostEstimate", "FusedProducer", "GroupCost",
           "estimate", "memory_bytes"]
