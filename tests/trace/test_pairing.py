"""Paired speedups on synthetic step times (`profiling/trace/pairing.py`): drift, equal configurations, a clear 2×."""

from __future__ import annotations

import numpy as np

from branchscope.profiling.trace.pairing import (
    RESAMPLES,
    Bootstrap,
    pair_ratios,
    paired_speedup,
    unpaired_speedup,
)


def _load(t: np.ndarray) -> np.ndarray:
    """A machine whose load rises slowly over the measurement: step times grow 2.5× from first to last."""
    return 1.0 + 1.5 * t / t[-1]


def test_a_drift_fools_the_unpaired_comparison_and_not_the_paired_one():
    rng = np.random.default_rng(7)
    n = 30
    cost = 20.0  # both configurations cost the same on an idle machine
    # Unpaired: all of A's steps early, all of B's late (two runs minutes apart).
    slots = np.arange(2 * n, dtype=float)
    load = _load(slots)
    a_early = cost * load[:n] * rng.normal(1.0, 0.03, n)
    b_late = cost * load[n:] * rng.normal(1.0, 0.03, n)
    unpaired = unpaired_speedup(b_late, a_early)  # "A is faster than B"
    assert unpaired is not None and unpaired.distinguishable and unpaired.lo > 1.3
    # Paired: the same machine, the same drift, the steps taken in alternation (A B, B A, …).
    a_slots = [2 * i + (i % 2) for i in range(n)]
    b_slots = [2 * i + 1 - (i % 2) for i in range(n)]
    a_paired = cost * load[a_slots] * rng.normal(1.0, 0.03, n)
    b_paired = cost * load[b_slots] * rng.normal(1.0, 0.03, n)
    paired = paired_speedup(b_paired, a_paired)
    assert paired is not None and not paired.distinguishable
    assert paired.lo <= 1.0 <= paired.hi
    assert "not distinguishable from 1.0×" in paired.text("B")


def test_equal_configurations_give_an_interval_holding_one():
    rng = np.random.default_rng(1)
    base = 50.0 * rng.lognormal(0.0, 0.08, 40)
    other = 50.0 * rng.lognormal(0.0, 0.08, 40)
    s = paired_speedup(base, other)
    assert s is not None and s.lo <= 1.0 <= s.hi and not s.distinguishable
    assert 0.9 < s.median < 1.1


def test_a_clear_two_times_speedup_is_distinguishable_and_said():
    rng = np.random.default_rng(2)
    load = _load(np.arange(20, dtype=float))  # drift shared by each pair
    base = 40.0 * load * rng.normal(1.0, 0.05, 20)
    other = 20.0 * load * rng.normal(1.0, 0.05, 20)
    s = paired_speedup(base, other)
    assert s is not None and s.distinguishable
    assert 1.8 < s.lo <= s.median <= s.hi < 2.2
    text = s.text("sequential 1×1")
    assert text.startswith(f"{s.median:.2f}× faster than sequential 1×1 (95% interval ")
    slower = paired_speedup(other, base)
    assert slower is not None and slower.distinguishable and slower.hi < 1.0
    assert "slower than sequential 1×1" in slower.text("sequential 1×1")


def test_the_interval_is_deterministic_and_bootstrapped_enough():
    rng = np.random.default_rng(3)
    base, other = rng.uniform(10, 12, 15), rng.uniform(8, 10, 15)
    assert RESAMPLES >= 2000
    assert paired_speedup(base, other) == paired_speedup(base, other)
    assert paired_speedup(base, other, Bootstrap(seed=1)) != paired_speedup(base, other, Bootstrap(seed=2))


def test_pairs_without_usable_times_are_left_out():
    ratios = pair_ratios([10.0, float("nan"), 0.0, 8.0, 9.0], [5.0, 5.0, 5.0, -1.0])
    assert list(ratios) == [2.0]
    assert paired_speedup([], [1.0]) is None
    assert paired_speedup([float("inf")], [1.0]) is None
