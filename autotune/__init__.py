"""autotune: a declarative, cost-model-driven fusion autotuner for einsum-heavy tensor programs."""
from search_spaces import Workload, WorkloadError, builtin_names, load_workload

from .reference import reference

__version__ = "0.1.0"
__all__ = ["Workload", "WorkloadError", "builtin_names", "load_workload", "reference",
           "__version__"]
