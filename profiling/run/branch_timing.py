"""Each branch's time in the model's own sequential forward, measured in the worker with forward
hooks (for the prediction, `profiling/trace/prediction.py`, of a run that does not run the model
sequentially: fork, threads, streams).

A branch is timed by what it owns (`ownership.py`): each piece of it (a run of its own graph nodes
in the forward) opens at a forward pre-hook and closes at a forward hook of the module calls that
start and end it, told apart by call number where a module is called more than once a step; the
branch's time in a step is the sum of its pieces'. The clock is `time.perf_counter` (after
synchronising the devices: `sync`); the hooks are removed once the steps are measured, and a branch
no piece of which has a module call stays unmeasured. The steps are not profiled: they run on the
worker's main thread at the run's intra-op thread count, after the profile (the runner has stopped
sampling the threads by then). Torch is imported only when called (worker only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from branchscope.profiling.trace.prediction import StepSamples

#: Sequential steps measured for the prediction (after one unmeasured step): the run's --steps,
#: within these bounds (the bound's interval needs `prediction.MIN_CI_STEPS`).
MIN_STEPS = 5
MAX_STEPS = 10


class UnmatchedCalls(Exception):
    """No measured step's module calls matched the graph's (`ownership.py`): the one-line reason."""


def measure_branch_times(
    model: Any,
    analysis: Any,
    step: Callable[[], None],
    steps: int,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> StepSamples | None:
    """Each of `steps` calls of `step` (the model's own forward) timed, with the time of each branch
    in it (ms, by what it owns: see the module docstring), after one unmeasured call; None when
    `model` is not an eager `nn.Module` (TorchScript) or no branch has a piece to mark. A step whose
    calls did not match the graph's is left out; UnmatchedCalls when none matched. The hooks are
    gone when this returns, whatever `step` raised."""
    from branchscope.profiling.run.ownership import piece_hooks

    totals: dict[str, float] = {}  # of the step running now
    opened: dict[int, float] = {}

    def on_open(piece: Any) -> None:
        sync()
        opened[piece.index] = clock()

    def on_close(piece: Any) -> None:
        started = opened.pop(piece.index, None)
        if started is not None:
            sync()
            totals[piece.branch] = totals.get(piece.branch, 0.0) + clock() - started

    hooks = piece_hooks(model, analysis, on_open, on_close)
    if hooks is None:
        return None
    with hooks:
        if not hooks.active:
            return None
        step()  # one unmeasured step with the hooks on
        sync()
        samples = StepSamples()
        for _ in range(steps):
            totals.clear()
            opened.clear()
            unmatched = hooks.unmatched_steps
            t0 = clock()
            step()
            sync()
            elapsed = (clock() - t0) * 1000.0
            if hooks.unmatched_steps == unmatched:
                samples.add(elapsed, {n: t * 1000.0 for n, t in totals.items()})
    if not samples.steps_ms:
        raise UnmatchedCalls(
            f"the model's module calls did not match its graph's in any of {steps} steps (its forward takes another path)"
        )
    return samples
