"""A speedup from step times measured in alternation: the median of per-pair ratios and its interval.

Two runs minutes apart on a shared machine give an untrustworthy ratio: the machine's load drifts
between them by more than either run's own spread. `branchscope speedup` measures configurations in
alternation instead (one step of each in turn, or one fresh worker of each in turn), so pair i holds
the i-th time of the baseline and the i-th time of the other configuration, taken moments apart under
the same load. Each pair gives one ratio (baseline / other: above 1, the other is faster); the speedup
is their median, and its 95% interval comes from a bootstrap over the pairs (resampled with
replacement, a seeded generator: the same times give the same interval). An interval that holds 1.0
is "not distinguishable from 1.0×".

`unpaired_speedup` is the comparison pairing replaces (the ratio of two medians, each list resampled
on its own), kept to show what drift does to it.

`parts_text` says a parallel speedup in its parts (its plan × its threads), for every view.

Qt-free and torch-free (numpy only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord, SpeedupValueRecord

#: Bootstrap resamples (at least 2000 for a 95% interval's 2.5% tails).
RESAMPLES = 4000
#: The generator's seed: an interval is a function of the step times alone.
SEED = 20261126
#: The interval's coverage.
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Speedup:
    """A speedup (baseline time / other time) and its bootstrap interval."""

    median: float
    lo: float
    hi: float
    #: How many pairs (or, unpaired, the smaller list's length) it rests on.
    n: int

    @property
    def distinguishable(self) -> bool:
        """Whether the interval leaves 1.0 out (the two configurations differ, at this level)."""
        return not (self.lo <= 1.0 <= self.hi)

    @property
    def ci95(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    def text(self, baseline: str) -> str:
        """"1.42× faster than sequential 1×1 (95% interval 1.31–1.55×)", "not distinguishable from 1.0× …"."""
        interval = f"{self.lo:.2f}–{self.hi:.2f}×"
        if not self.distinguishable:
            return f"not distinguishable from 1.0× ({interval})"
        if self.median >= 1.0:
            return f"{self.median:.2f}× faster than {baseline} (95% interval {interval})"
        return f"{1.0 / self.median:.2f}× slower than {baseline} (speedup {self.median:.2f}×, 95% interval {interval})"


def _positive(values: Sequence[float]) -> np.ndarray:
    return np.asarray([float(v) for v in values], dtype=np.float64)


def pair_ratios(baseline: Sequence[float], other: Sequence[float]) -> np.ndarray:
    """baseline[i] / other[i] for the pairs where both times are finite and above 0 (a longer list's
    extra times have no partner and are left out)."""
    n = min(len(baseline), len(other))
    b, o = _positive(baseline[:n]), _positive(other[:n])
    ok = np.isfinite(b) & np.isfinite(o) & (b > 0) & (o > 0)
    return np.asarray(b[ok] / o[ok], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """How a speedup's interval is drawn: `resamples` resamples with replacement, from a generator
    seeded `seed` (the same times give the same interval), the interval covering `level`."""

    resamples: int = RESAMPLES
    seed: int = SEED
    level: float = LEVEL

    def medians(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The median of `values` resampled with replacement, `resamples` times."""
        n = len(values)
        return np.median(values[rng.integers(0, n, size=(max(self.resamples, 1), n))], axis=1)

    def interval(self, samples: np.ndarray) -> tuple[float, float]:
        """The central `level` of `samples`."""
        tail = (1.0 - self.level) / 2.0 * 100.0
        lo, hi = np.percentile(samples, [tail, 100.0 - tail])
        return float(lo), float(hi)


def paired_speedup(
    baseline: Sequence[float], other: Sequence[float], bootstrap: Bootstrap = Bootstrap()
) -> Speedup | None:
    """The median of per-pair ratios baseline[i] / other[i] and its bootstrap interval (the median
    of the ratios resampled with replacement); None without a usable pair."""
    ratios = pair_ratios(baseline, other)
    if len(ratios) == 0:
        return None
    rng = np.random.default_rng(bootstrap.seed)
    lo, hi = bootstrap.interval(bootstrap.medians(ratios, rng))
    return Speedup(float(np.median(ratios)), lo, hi, len(ratios))


def unpaired_speedup(
    baseline: Sequence[float], other: Sequence[float], bootstrap: Bootstrap = Bootstrap()
) -> Speedup | None:
    """median(baseline) / median(other), each list resampled on its own: what two independent runs
    give (and what drift between them fools). None when either list has no usable time."""
    b, o = _positive(baseline), _positive(other)
    b, o = b[np.isfinite(b) & (b > 0)], o[np.isfinite(o) & (o > 0)]
    if len(b) == 0 or len(o) == 0:
        return None
    rng = np.random.default_rng(bootstrap.seed)
    mb, mo = bootstrap.medians(b, rng), bootstrap.medians(o, rng)
    lo, hi = bootstrap.interval(mb / mo)
    return Speedup(float(np.median(b) / np.median(o)), lo, hi, min(len(b), len(o)))


def finite_median(values: Sequence[float]) -> float | None:
    """The median of the finite values; None when there are none."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(np.median(xs)) if xs else None


def parts_text(parts: SpeedupPartsRecord, threads: int, short: bool = False) -> str:
    """A parallel speedup in its parts (`records.SpeedupPartsRecord`), the one way every view says
    it: "1.35× = 1.40× from TorchScript's plan × 0.96× from 2 threads", each part with its interval
    where it has one (paired: `branchscope speedup`; a ratio of medians has none); `short` for a
    cell of a table: "1.40× plan × 0.96× threads". The whole is over sequential 1×J; the plan's
    words are the mode's own (`plan_by`, from `ModeTraits.plan_title`)."""
    whole = parts.whole.median if parts.whole is not None and parts.whole.median is not None else 0.0

    def said(v: SpeedupValueRecord) -> str:
        ci = v.ci95 if v.ci95 and len(v.ci95) == 2 else None
        return f"{v.median or 0:.2f}×" + ("" if short or ci is None else f" [{ci[0]:.2f}–{ci[1]:.2f}]")

    if short:
        return f"{said(parts.plan)} plan × {said(parts.parallel)} threads"
    return (
        f"{whole:.2f}× = {said(parts.plan)} from {parts.plan_by or 'its plan'} × "
        f"{said(parts.parallel)} from {threads} thread{'s' if threads != 1 else ''}"
    )
