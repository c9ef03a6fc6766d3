"""How far the search trusts its model's ratios: the prune factor, from the model's own errors.

A candidate is pruned when its (corrected) prediction is more than a factor over the best
measured candidate's.  A fixed factor of 2 spends measurements on candidates a good model
already rules out: in an N=702 trimul search (49d9aee) a third of the 104 measured candidates
ran 1.5-2.3x the best, each ~3.5 s with its compile and check, where the corrected model's
errors were ~10 %.  :class:`ModelTrust` keeps the out-of-sample error of each fresh
measurement (the prediction made before the run, from a fit that had not seen it) and tightens
the factor to what those errors allow.

Only the spread of the errors matters (a model that is off by a constant still ranks right):
``sigma`` is 1.4826 x the median absolute deviation of ``log(measured / predicted)``, a robust
standard deviation.  A pruned candidate is compared with the best one, each with its own error,
so the ratio's error has spread ``sqrt(2) x sigma``; the factor is ``exp(z x sqrt(2) x
sigma)``, at z = 2.5 (a candidate truly as fast as the best is pruned with odds ~0.6 % where
the errors are normal), never above the configured ceiling, never below :data:`FLOOR`, and the
ceiling itself until :data:`MIN_ERRORS` errors are known.
"""
from __future__ import annotations

import math
import statistics

CEILING = 2.0        # the factor until the errors say more (and the most they may allow)
MIN_ERRORS = 12      # fewer out-of-sample errors than this: the ceiling
Z = 2.5
FLOOR = 1.3          # the two-core machine's run-to-run noise alone is ~10 %


class ModelTrust:
    """Out-of-sample errors of the model's (corrected) predictions, and the prune factor they
    allow under a ``ceiling``."""

    def __init__(self, ceiling: float = CEILING):
        self.ceiling = ceiling
        self._errors: list[float] = []      # log(measured / predicted)

    def add(self, predicted_s: float, measured_s: float | None) -> None:
        """A candidate predicted ``predicted_s`` before it was measured ``measured_s``."""
        if measured_s is not None and 0 < measured_s < math.inf and 0 < predicted_s < math.inf:
            self._errors.append(math.log(measured_s / predicted_s))

    def sigma(self) -> float | None:
        """The robust spread of the errors so far (None: too few to say)."""
        if len(self._errors) < MIN_ERRORS:
            return None
        med = statistics.median(self._errors)
        return 1.4826 * statistics.median(abs(e - med) for e in self._errors)

    def factor(self) -> float:
        """The prune factor now: the ceiling, tightened by what the errors allow."""
        s = self.sigma()
        if s is None:
            return self.ceiling
        return min(self.ceiling, max(FLOOR, math.exp(Z * math.sqrt(2.0) * s)))

    def __len__(self) -> int:
        return len(self._errors)
