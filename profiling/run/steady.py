"""Steady step times: the warm-up that runs until a model's step times settle, and the warnings a
run carries when its timings were not steady.

Why: a plan can keep getting faster for many calls after the first (TorchScript's profiling executor
optimised a forked timm inception_v4 over about a dozen calls: 1864, 1167, … 273, 194 ms, then 65 ms
from the 12th call on). Timing such a plan after a fixed few warm-up steps times its warm-up.

**The settle rule** (`settled`): after each warm-up step, with at least 2 × SETTLE_WINDOW steps
taken, compare the median of the last SETTLE_WINDOW steps with the median of the SETTLE_WINDOW
steps before them. They agree, and the steps have settled, when they differ by at most the largest
of

- SETTLE_TOLERANCE (5 %) of the earlier median,
- the earlier window's noise: its median absolute deviation (MAD), so that a machine busy with
  other work, whose steps jitter by more than 5 %, still settles: a change the steps' own scatter
  hides is no warm-up left to wait for,
- SETTLE_FLOOR_MS (timer and scheduler jitter of sub-millisecond steps).

Medians, never means: one slow step in a window (the scheduler gave the core away) moves neither
median nor MAD. Windows of 4 compared whole, never step by step, so a trend shows: steps falling
by t per step move the medians 4t apart while a window's MAD stays near t, and the rule waits; it
lets through a drift of about 1 % a step (5 % over 4 steps), which the timed phase's drift warning
then names. A sudden drop from one level to another settles once the later window holds the new
level only and the earlier one at most half the old (its MAD is then half the drop).

**The warm-up** (`warm_up`): at least `minimum` steps (--warmup W), then on until the steps settle
or a cap is reached: WARMUP_MAX_STEPS steps, or WARMUP_MAX_S seconds of warm-up steps (the caps
never stop it before W steps; a warm-up they stop says which cap, and the run warns). W = 0 means no
warm-up at all: the timed phase starts with the plan's second call (the first checked its outputs).
For a distributed run, `agree` makes every rank take the same number of warm-up steps (see
`worker.run`: ranks step together through collectives, so one rank stopping early would hang the
others): each step, the ranks all-reduce whether each has settled and whether each hit a cap, and
stop when all have settled or any hit a cap.

**The warnings** (`run_warnings`), one line each, in run.json's "warnings":

- the warm-up hit a cap without settling;
- the timed steps still drift: with at least DRIFT_MIN_STEPS timed steps, the medians of their
  first and last thirds differ by more than DRIFT_TOLERANCE (10 %) of the first's and by more than
  DRIFT_NOISE (3) times the steps' noise: the median absolute deviation of the steps of those two
  thirds from their own third's median (a trend moves the thirds apart but not their scatter; the
  medians of two thirds of pure noise differ by that much about once in a couple of hundred runs);
- the profiler's overhead is below OVERHEAD_FLOOR (0.95): the profiled steps' median was faster than
  the unprofiled one by more than noise, so the step times were still changing (a profiler never
  makes a step faster).

Torch-free and Qt-free: the worker uses it, and the tests drive it with scripted step times.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Steps per window of the settle rule (two windows are compared: at least 2 × this many steps).
SETTLE_WINDOW = 4
#: Two windows agree when their medians differ by at most this fraction of the earlier one …
SETTLE_TOLERANCE = 0.05
#: … or by at most this many ms (timer and scheduler jitter of very short steps) …
SETTLE_FLOOR_MS = 0.02
#: … or by at most the earlier window's median absolute deviation (its noise).

#: Caps of a warm-up that does not settle (never below --warmup): steps, and seconds of warm-up steps.
WARMUP_MAX_STEPS = 200
WARMUP_MAX_S = 30.0
#: Which cap stopped a warm-up (run.json's "warmup_cap").
CAP_STEPS, CAP_SECONDS = "steps", "seconds"

#: Drift of the timed steps: checked from this many steps on (two per third) …
DRIFT_MIN_STEPS = 6
#: … it drifts when the thirds' medians differ by more than this fraction of the first's …
DRIFT_TOLERANCE = 0.10
#: … and by more than this many times the thirds' own scatter (their steps' MAD about their medians).
DRIFT_NOISE = 3.0
#: Profiled median / unprofiled median below this: timings were not steady.
OVERHEAD_FLOOR = 0.95

#: `agree(settled_here, cap_here) -> (settled everywhere, cap anywhere)` (distributed runs).
Agree = Callable[[bool, str | None], tuple[bool, str | None]]


def _mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median."""
    m = statistics.median(values)
    return statistics.median(abs(v - m) for v in values)


def settled(times_ms: Sequence[float], window: int = SETTLE_WINDOW) -> bool:
    """Whether the last `window` step times agree with the `window` before them (see the module docstring)."""
    if window < 1 or len(times_ms) < 2 * window:
        return False
    earlier = times_ms[-2 * window : -window]
    later = times_ms[-window:]
    before, after = statistics.median(earlier), statistics.median(later)
    return abs(after - before) <= max(SETTLE_TOLERANCE * before, _mad(earlier), SETTLE_FLOOR_MS)


@dataclass(frozen=True)
class Warmup:
    """How a warm-up went: its steps (ms each), whether they settled, and which cap stopped them."""

    times_ms: list[float] = field(default_factory=list)
    #: None: no warm-up was asked for (--warmup 0).
    settled: bool | None = None
    #: CAP_STEPS or CAP_SECONDS when a cap stopped it before the steps settled; else None.
    cap: str | None = None


def warm_up(
    step: Callable[[], object],
    minimum: int,
    clock: Callable[[], float] = time.perf_counter,
    agree: Agree | None = None,
    max_steps: int = WARMUP_MAX_STEPS,
    max_s: float = WARMUP_MAX_S,
) -> Warmup:
    """Runs `step()` at least `minimum` times, then until the step times settle or a cap is reached
    (see the module docstring); `minimum` <= 0: not at all. `agree`: ranks decide together."""
    if minimum <= 0:
        return Warmup()
    times: list[float] = []
    start = clock()
    while True:
        t0 = clock()
        step()
        t1 = clock()
        times.append((t1 - t0) * 1000.0)
        done = len(times) >= minimum and settled(times)
        cap = None
        if len(times) >= minimum and not done:
            if len(times) >= max_steps:
                cap = CAP_STEPS
            elif t1 - start >= max_s:
                cap = CAP_SECONDS
        if agree is not None:
            done, cap = agree(done, cap)
        if done:
            return Warmup(times, True, None)
        if cap is not None:
            return Warmup(times, False, cap)


def drift(times_ms: Sequence[float]) -> tuple[float, float] | None:
    """(first third's median, last third's median) of timed steps that still drift (see the
    module docstring); None when they do not, or are too few to tell."""
    n = len(times_ms)
    if n < DRIFT_MIN_STEPS:
        return None
    third = n // 3
    head, tail = times_ms[:third], times_ms[-third:]
    first, last = statistics.median(head), statistics.median(tail)
    noise = statistics.median([abs(t - first) for t in head] + [abs(t - last) for t in tail])
    if abs(last - first) > max(DRIFT_TOLERANCE * first, DRIFT_NOISE * noise):
        return first, last
    return None


def _ms(x: float) -> str:
    """A step time for a warning: whole ms from 100 on, else three significant digits."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def run_warnings(warmup: Warmup, unprofiled_ms: Sequence[float], profiled_ms: Sequence[float]) -> list[str]:
    """The warnings of a run whose timings may not be steady, one line each (see the module docstring)."""
    warnings: list[str] = []
    if warmup.cap is not None:
        n = len(warmup.times_ms)
        what = f"{WARMUP_MAX_STEPS} steps" if warmup.cap == CAP_STEPS else f"{WARMUP_MAX_S:g} s"
        tail = warmup.times_ms[-SETTLE_WINDOW:]
        times = f" (the last {len(tail)}: {', '.join(_ms(t) for t in tail)} ms)" if tail else ""
        warnings.append(f"warm-up reached its cap of {what} after {n} steps without settling{times}")
    moved = drift(unprofiled_ms)
    if moved is not None:
        first, last = moved
        pct = abs(last - first) / first * 100.0 if first > 0 else float("inf")
        way = "below" if last < first else "above"
        warnings.append(
            f"timed steps still drifting: the last third's median ({_ms(last)} ms) is {pct:.0f}% {way} "
            f"the first third's ({_ms(first)} ms) over {len(unprofiled_ms)} steps (still warming up, "
            "or the machine's load changed)"
        )
    if unprofiled_ms and profiled_ms:
        unprofiled, profiled = statistics.median(unprofiled_ms), statistics.median(profiled_ms)
        if unprofiled > 0 and profiled / unprofiled < OVERHEAD_FLOOR:
            warnings.append(
                f"profiler overhead ×{profiled / unprofiled:.2f}: profiled steps ({_ms(profiled)} ms) ran faster "
                f"than unprofiled ones ({_ms(unprofiled)} ms), so step times were not steady"
            )
    return warnings
