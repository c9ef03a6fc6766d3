"""autotune: a declarative, cost-model-driven fusion autotuner for einsum-heavy tensor programs."""
from autotune import threads

threads.apply()     # before NumPy loads OpenBLAS: see autotune.threads

from search_spaces import Workload, WorkloadError, builtin_names, load_workload  # noqa: E402

from autotune.reference import reference  # noqa: E402
from autotune.version import __version__  # noqa: E402


def load_best(w, device: str = "cpu", db=None):
    """The cached best plan for ``w`` on ``device`` as ``fn(**inputs) -> {output: array}``;
    the heuristic plan (with a warning) when none is cached.  See autotune.api."""
    from autotune.api import load_best as _load_best
    return _load_best(w, device, db)


__all__ = ["Workload", "WorkloadError", "builtin_names", "load_workload", "reference", "load_best",
           "__version__"]
