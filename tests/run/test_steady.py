"""The warm-up's settle rule, its caps and the warnings, on scripted step times and a fake clock."""

from __future__ import annotations

import random

import pytest

from branchscope.profiling.run.steady import (
    CAP_SECONDS,
    CAP_STEPS,
    SETTLE_WINDOW,
    WARMUP_MAX_S,
    WARMUP_MAX_STEPS,
    Warmup,
    drift,
    run_warnings,
    settled,
    warm_up,
)

#: What a forked timm inception_v4 did under TorchScript's profiling executor, then flat.
INCEPTION = [1864.0, 1167.0, 700.0, 400.0, 273.0, 194.0] + [65.0, 65.0, 66.0, 64.0, 65.0] * 20


class ScriptedSteps:
    """A step and the clock it runs on: step i takes times_ms[i] (the last one from then on)."""

    def __init__(self, times_ms: list[float]) -> None:
        self.times_ms, self.now, self.calls = times_ms, 0.0, 0

    def clock(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.times_ms[min(self.calls, len(self.times_ms) - 1)] / 1000.0
        self.calls += 1


def _warm(times_ms: list[float], minimum: int = 3, **kw) -> tuple[Warmup, ScriptedSteps]:
    steps = ScriptedSteps(times_ms)
    return warm_up(steps.step, minimum, steps.clock, **kw), steps


def test_a_plan_that_keeps_getting_faster_warms_up_until_its_steps_are_flat():
    warmup, steps = _warm(INCEPTION)
    assert warmup.settled is True and warmup.cap is None
    n = len(warmup.times_ms)
    assert n == steps.calls
    # every step of the slow start is in the warm-up, and a full window of flat steps after it
    assert warmup.times_ms[:6] == pytest.approx(INCEPTION[:6]) and n >= 6 + SETTLE_WINDOW
    assert n <= 6 + 2 * SETTLE_WINDOW  # and it stopped once the flat steps filled both windows
    assert all(t < 70.0 for t in warmup.times_ms[-SETTLE_WINDOW:])


def test_the_settle_rule_on_its_own():
    assert not settled(INCEPTION[: 2 * SETTLE_WINDOW - 1])  # too few steps to compare two windows
    assert not settled(INCEPTION[:8]) and not settled(INCEPTION[:10])  # still falling, then straddling
    assert settled(INCEPTION[:14]) and settled([10.0] * 2 * SETTLE_WINDOW)
    assert settled(
        [0.05, 0.06, 0.05, 0.05, 0.06, 0.07, 0.06, 0.06]
    )  # 20 % apart, but under the 0.02 ms floor


@pytest.mark.parametrize("seed", range(20))
def test_noisy_flat_steps_settle_soon(seed):
    """A busy machine: ±20 % jitter around 100 ms and now and then a step 5× slower (the core given away)."""
    rng = random.Random(seed)
    times = [
        100.0 * (1.0 + rng.uniform(-0.2, 0.2)) * (5.0 if rng.random() < 0.1 else 1.0) for _ in range(500)
    ]
    warmup, _ = _warm(times)
    assert warmup.settled is True and warmup.cap is None
    assert 2 * SETTLE_WINDOW <= len(warmup.times_ms) <= 40


def test_flat_steps_settle_after_two_windows_or_the_minimum():
    warmup, _ = _warm([10.0] * 50)
    assert (len(warmup.times_ms), warmup.settled) == (2 * SETTLE_WINDOW, True)
    warmup, _ = _warm([10.0] * 50, minimum=15)
    assert (len(warmup.times_ms), warmup.settled) == (15, True)


def test_steps_that_never_settle_stop_at_the_step_cap_and_say_so():
    times = [1.03**i for i in range(WARMUP_MAX_STEPS + 50)]  # 3 % slower every step (a leak): never flat
    warmup, steps = _warm(times)
    assert (warmup.settled, warmup.cap) == (False, CAP_STEPS)
    assert len(warmup.times_ms) == steps.calls == WARMUP_MAX_STEPS
    (line,) = run_warnings(warmup, [], [])
    assert line.startswith(
        f"warm-up reached its cap of {WARMUP_MAX_STEPS} steps after {WARMUP_MAX_STEPS} steps without settling"
    )


def test_slow_steps_that_never_settle_stop_at_the_seconds_cap():
    times = [2000.0 * 0.9**i + 500.0 for i in range(100)]  # 2.5 s, 2.3 s, …: still falling when the cap comes
    warmup, steps = _warm(times)
    assert (warmup.settled, warmup.cap) == (False, CAP_SECONDS)
    n = len(warmup.times_ms)
    assert sum(warmup.times_ms[: n - 1]) < WARMUP_MAX_S * 1000.0 <= sum(warmup.times_ms)
    assert f"cap of {WARMUP_MAX_S:g} s after {n} steps" in run_warnings(warmup, [], [])[0]


def test_a_slow_drift_of_about_one_percent_a_step_passes_for_settled():
    """What the rule lets through (the timed phase's drift warning names what is left)."""
    warmup, _ = _warm([100.0 - 0.4 * i for i in range(100)])
    assert warmup.settled is True and len(warmup.times_ms) == 2 * SETTLE_WINDOW


def test_caps_never_cut_the_warm_up_short_of_the_minimum():
    times = [5000.0 * 1.1**i for i in range(30)]  # 5 s steps, 10 % slower each: past the seconds cap after 6
    warmup, _ = _warm(times, minimum=12)
    assert (len(warmup.times_ms), warmup.cap) == (12, CAP_SECONDS)


def test_a_sudden_drop_settles_only_once_the_new_level_fills_a_window():
    times = [100.0] * 6 + [50.0] * 30  # a recompile from the 7th call on: before the first comparison
    warmup, _ = _warm(times)
    assert warmup.settled is True
    # not while the later window straddles the drop, nor while the earlier one is mostly the old level
    assert warmup.times_ms[-SETTLE_WINDOW:] == pytest.approx([50.0] * SETTLE_WINDOW)
    assert len(warmup.times_ms) == 12


def test_warmup_zero_runs_no_step():
    warmup, steps = _warm([10.0], minimum=0)
    assert (warmup, steps.calls) == (Warmup([], None, None), 0)
    assert run_warnings(warmup, [10.0] * 20, [11.0] * 10) == []


class Ranks:
    """`agree` of two ranks in one process: the other rank says what `other` scripts."""

    def __init__(self, other: list[tuple[bool, str | None]]) -> None:
        self.other, self.calls = other, 0

    def __call__(self, settled_here: bool, cap_here: str | None) -> tuple[bool, str | None]:
        settled_there, cap_there = self.other[min(self.calls, len(self.other) - 1)]
        self.calls += 1
        return settled_here and settled_there, cap_here or cap_there


def test_ranks_stop_together_once_every_rank_settled():
    other = [(False, None)] * 12 + [(True, None)]  # the other rank settles at its 13th step
    ranks = Ranks(other)
    warmup, steps = _warm([10.0] * 100, agree=ranks)  # this one would stop after 8
    assert warmup.settled is True and len(warmup.times_ms) == steps.calls == ranks.calls == 13


def test_ranks_stop_together_when_any_rank_hits_a_cap():
    ranks = Ranks([(False, None)] * 4 + [(False, CAP_SECONDS)])
    warmup, steps = _warm([10.0] * 100, minimum=1, agree=ranks)
    assert (warmup.settled, warmup.cap, steps.calls) == (False, CAP_SECONDS, 5)


def test_drift_compares_the_first_and_last_thirds_of_the_timed_steps():
    assert drift([100.0, 90.0, 80.0, 70.0, 60.0]) is None  # too few to tell
    assert drift([100.0] * 7 + [80.0] * 7 + [60.0] * 7) == (100.0, 60.0)
    assert drift([60.0, 61.0, 59.0, 60.0, 62.0, 58.0] * 4) is None  # steady
    # noisy but flat: the thirds' medians differ by over 10 %, yet by less than twice the steps' noise
    noisy = [100.0, 130.0, 70.0, 125.0, 75.0, 100.0, 120.0, 80.0, 90.0, 110.0, 60.0, 140.0]
    assert drift(noisy) is None


def test_warnings_name_drifting_timed_steps_and_a_profiler_overhead_below_one():
    settled_warmup = Warmup([10.0] * 8, True, None)
    assert run_warnings(settled_warmup, [65.0] * 20, [70.0] * 10) == []
    # what the user saw: the timed steps were the warm-up's tail, the profiled ones steady
    timed = [1864.0, 1167.0, 700.0, 400.0, 273.0, 194.0, 150.0, 120.0, 100.0, 90.0]
    warnings = run_warnings(settled_warmup, timed, [65.0] * 10)
    assert len(warnings) == 2
    assert warnings[0].startswith(
        "timed steps still drifting: the last third's median (100 ms) is 91% below the first third's (1167 ms) over 10 steps"
    )
    assert warnings[1].startswith(
        "profiler overhead ×0.28: profiled steps (65 ms) ran faster than unprofiled ones (234 ms)"
    )


def test_a_profiler_overhead_just_under_one_is_noise_not_a_warning():
    assert run_warnings(Warmup([1.0] * 8, True, None), [100.0] * 20, [97.0] * 10) == []
