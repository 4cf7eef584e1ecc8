"""How long a sweep will take, and how long it has left: what the Sweep tab says before Start and
while it runs, and what `branchscope sweep` prints with each cell ("cell 3/8 fork 2×1: 59.8 ms ·
about 2 min left").

A sweep runs its cells × passes runs one after another, each a fresh worker (`sweep.py`); a cell
whose first pass failed is not run again. Before any run finished, a run's time is a guess
(`run_guess_s`): a fresh worker's fixed cost (`RUN_OVERHEAD_S`: starting Python and torch, building
and tracing the model, writing and compressing the trace) plus its steps (at least W warm-up, K
timed, K profiled: `warmup + 3 × steps`) at the step time of an earlier run of the model when one
is known, else `STEP_GUESS_S`. Once runs finish, `SweepClock` takes the time they took on average
instead, so the figure follows the model and the machine's load. Whole runs are counted, never
the steps inside one: a run's fixed cost is most of it for a small model.

No torch and no Qt here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic
from typing import TYPE_CHECKING

from branchscope.profiling.trace.records import RunRecord

if TYPE_CHECKING:
    from branchscope.profiling.run.sweep import SweepRequest

#: A fresh worker's time beyond its steps, in seconds: on a busy 2-core machine the inception demo's
#: phases besides its steps took 3–4 s (run.json's `phase_seconds`), the runner's process start, gzip
#: and commit about 2 s more.
RUN_OVERHEAD_S = 6.0
#: A step's time when no earlier run of the model says it (seconds; the inception demo's is 20–50 ms
#: unprofiled on 2 cores, profiled steps cost more).
STEP_GUESS_S = 0.1


def run_guess_s(steps: int, warmup: int, earlier: RunRecord | None = None) -> float:
    """One run's seconds before any ran: an earlier run of the model's own phases when run.json
    says them (with the runner's share of `RUN_OVERHEAD_S`), else the fixed cost plus its steps
    (see the module docstring)."""
    phases = earlier.phase_seconds if earlier is not None else None
    if phases:
        return sum(phases.values()) + RUN_OVERHEAD_S / 3
    return RUN_OVERHEAD_S + max(0, warmup + 3 * steps) * STEP_GUESS_S


def duration_text(seconds: float) -> str:
    """"a few seconds", "about 40 s", "about 3 min", "about 1 h 5 min": rounded as a person would say it."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 90:
        return f"about {int(round(seconds / 10.0)) * 10} s"
    minutes = int(round(seconds / 60.0))
    if minutes < 60:
        return f"about {minutes} min"
    return f"about {minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


def plan_text(cells: int, passes: int, run_s: float) -> str:
    """What a sweep of `cells` × `passes` runs will take: "10 cells × 3 passes = 30 runs, about 4 min"."""
    runs = cells * passes
    counted = f"{cells} cell{'s' if cells != 1 else ''}" + (f" × {passes} passes = {runs} runs" if passes > 1 else "")
    return f"{counted}, {duration_text(runs * run_s)}"


@dataclass
class SweepClock:
    """The time left of a running sweep, from the runs it finished (see the module docstring).
    `now` is the clock (seconds, monotonic)."""

    cells: int
    passes: int
    #: One run's seconds before any finished (`run_guess_s`).
    guess_s: float
    now: Callable[[], float] = field(default=lambda: monotonic())
    started: float = field(default=-1.0)
    #: Runs finished, and runs later passes will skip (a cell whose first pass failed).
    finished: int = 0
    skipped: int = 0
    _last: float = -1.0

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.now()
        self._last = self.started

    @classmethod
    def of(cls, request: SweepRequest, earlier: RunRecord | None = None) -> SweepClock:
        """The clock of a sweep about to start: its cells and passes, its runs at the guessed time
        (`run_guess_s`; from `earlier`, a run of the model, where there is one)."""
        options = request.options
        return cls(len(request.cells()), request.passes, run_guess_s(options.steps, options.warmup, earlier))

    @property
    def runs(self) -> int:
        """The runs the sweep will make: cells × passes, less those a failed first pass skips."""
        return max(0, self.cells * self.passes - self.skipped)

    def restart(self) -> None:
        """The sweep's first run starts now (what came before, checking the request, is not a run's)."""
        self.started = self._last = self.now()

    def leave_out(self, cells: int) -> None:
        """`cells` of the sweep never run (skipped: their mode cannot run here, `CellRecord.skipped`)."""
        self.skipped += cells * self.passes

    def run_done(self, sweep_pass: int | None, failed: bool) -> None:
        """A run ended (a sweep's `CellEvent`: its pass, whether it failed)."""
        self.finished += 1
        self._last = self.now()
        if failed and (sweep_pass or 1) == 1:
            self.skipped += self.passes - 1

    @property
    def measured(self) -> bool:
        """Whether the figure comes from runs that finished (else it is the guess)."""
        return self.finished > 0

    def seconds_left(self) -> float:
        """The runs left at the measured (else the guessed) seconds a run, less what the run going
        on has already taken (never below the runs after it)."""
        left = self.runs - self.finished
        if left <= 0:
            return 0.0
        per = (self._last - self.started) / self.finished if self.finished else self.guess_s
        going = max(0.0, self.now() - self._last)
        return max(per * (left - 1), per * left - going)

    def text(self) -> str:
        """"about 2 min left" ("… left, a guess until a cell finishes" before any run finished); ""
        when no run is left."""
        if self.runs - self.finished <= 0:
            return ""
        guess = "" if self.measured else " (a guess until a cell finishes)"
        return f"{duration_text(self.seconds_left())} left{guess}"
