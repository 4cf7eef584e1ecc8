"""Step times of a run and how far two runs' step times can be told apart.

A run times steps without the profiler ("unprofiled", the honest number: at least K, up to 20 or
2 s of steps) and K more under it (run.json `unprofiled_steps_ms` and `steps_ms`, read through `RunRecord.unprofiled_stats`
and `profiled_stats`). `StepStats` is the median and the spread (min,
quartiles, max) of one of those lists; two runs are *within noise* of each other when their
interquartile ranges overlap: half of each run's steps fall in a range that the other's also
reaches, so the difference of their medians is not worth a claim.

A sweep runs each cell in several passes, round-robin (a fresh worker per cell per pass), because
a shared machine drifts between runs more than the steps of one run spread. Two sweep cells are
within noise of each other (`within_noise_over_passes`) when the interquartile ranges of their steps
pooled over every pass overlap, **or** the ranges (lowest to highest) of their passes' medians
overlap: a difference that the drift from one pass to the next also shows is not worth a claim.
With one pass the second range is a point, and the rule is `within_noise`'s on the pooled steps.

Qt-free and torch-free: the runs list, `branchscope compare` and `branchscope sweep` all use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: (min, q1, q3, max) of step times, ms.
Spread = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class StepStats:
    """Median and spread of n step times, in milliseconds."""

    n: int
    median: float
    min: float
    q1: float
    q3: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> StepStats | None:
        """The stats of the finite, non-negative values; None when there are none."""
        xs = sorted(float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)
        if not xs:
            return None
        if len(xs) == 1:
            q1 = q3 = xs[0]
        else:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(len(xs), statistics.median(xs), xs[0], q1, q3, xs[-1])

    @property
    def spread(self) -> Spread:
        """(min, q1, q3, max), as run.json and `branchscope compare --json` write it."""
        return (self.min, self.q1, self.q3, self.max)

    def rounded_spread(self, digits: int = 4) -> Spread:
        lo, q1, q3, hi = (round(x, digits) for x in self.spread)
        return (lo, q1, q3, hi)

    def within_noise(self, other: StepStats) -> bool:
        """Whether the two runs' interquartile ranges overlap (see the module docstring)."""
        return self.q1 <= other.q3 and other.q1 <= self.q3


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two closed ranges (lo, hi) share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def within_noise_over_passes(
    a_iqr: tuple[float, float],
    a_passes: tuple[float, float],
    b_iqr: tuple[float, float],
    b_passes: tuple[float, float],
) -> bool:
    """Two sweep cells within noise (see the module docstring): their pooled steps' interquartile
    ranges (q1, q3) overlap, or their passes' medians' ranges (lowest, highest) do."""
    return overlaps(a_iqr, b_iqr) or overlaps(a_passes, b_passes)


def speedup(baseline: StepStats | None, run: StepStats | None) -> float | None:
    """The baseline's median ÷ the run's: above 1, the run is faster. None where either is unknown."""
    if baseline is None or run is None or run.median <= 0:
        return None
    return baseline.median / run.median
