"""The declared program (workload language, IR of generic ops) and the space of candidates."""
from .errors import WorkloadError
from .loader import builtin_names, load_workload, parse_workload
from .workload import Workload

__all__ = ["WorkloadError", "Workload", "builtin_names", "load_workload", "parse_workload"]
