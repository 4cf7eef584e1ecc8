"""StepStats: median, quartiles and the within-noise rule that speedups are reported with."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.step_stats import StepStats, speedup, within_noise_over_passes


def test_quartiles_and_spread_of_known_values():
    s = StepStats.of([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s is not None
    assert (s.n, s.median, s.min, s.max) == (5, 3.0, 1.0, 5.0)
    assert s.spread == (1.0, 2.0, 4.0, 5.0)


def test_bad_values_are_skipped_and_nothing_left_is_none():
    assert StepStats.of([]) is None
    assert StepStats.of([math.nan, -1.0, "x"]) is None  # type: ignore[list-item]
    s = StepStats.of([math.inf, 2.0, None])  # type: ignore[list-item]
    assert s is not None and s.n == 1 and s.spread == (2.0, 2.0, 2.0, 2.0)


def test_overlapping_interquartile_ranges_are_within_noise_and_disjoint_ones_are_not():
    a = StepStats.of([10, 11, 12, 13, 14])
    b = StepStats.of([12.5, 13, 13.5, 14, 20])
    c = StepStats.of([20, 21, 22, 23, 24])
    assert a and b and c
    assert a.within_noise(b) and b.within_noise(a)
    assert not a.within_noise(c) and not c.within_noise(a)


def test_speedup_uses_medians_of_the_run_json_unprofiled_steps():
    base = RunRecord(unprofiled_steps_ms=[10, 10, 10]).unprofiled_stats
    fast = RunRecord(unprofiled_steps_ms=[5, 5, 6]).unprofiled_stats
    assert speedup(base, fast) == 2.0
    assert speedup(None, fast) is None
    assert RunRecord(steps_ms=[1]).unprofiled_stats is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50))
def test_spread_is_ordered_and_holds_the_median(values):
    s = StepStats.of(values)
    assert s is not None
    assert s.min <= s.q1 <= s.median <= s.q3 <= s.max
    assert s.within_noise(s)


def test_sweep_cells_are_within_noise_by_quartiles_or_by_their_passes_medians():
    apart = ((10.0, 11.0), (10.5, 10.9))
    assert within_noise_over_passes(*apart, (10.8, 12.0), (11.5, 11.6))  # quartiles overlap
    assert within_noise_over_passes(*apart, (13.0, 13.5), (10.9, 13.4))  # the passes' medians do
    assert not within_noise_over_passes(*apart, (11.1, 12.0), (11.0, 11.5))  # neither
    assert within_noise_over_passes((5.0, 5.0), (5.0, 5.0), (5.0, 6.0), (5.5, 5.5))  # touching counts
