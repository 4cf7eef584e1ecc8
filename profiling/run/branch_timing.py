"""Each branch's time in the model's own sequential forward, measured in the worker with forward
hooks (for the prediction, `profiling/trace/prediction.py`, of a run that does not run the model
sequentially: fork, threads, streams).

As `plans.annotate_branches_with_hooks` marks a branch for the trace, a forward pre-hook on the
branch's first submodule starts its clock and a forward hook on its last submodule stops it; here
the clock is `time.perf_counter` (after synchronising the devices: `sync`), the hooks are removed
once the steps are measured, and a branch without a submodule of its own stays unmeasured. The
steps run on the worker's main thread at the run's intra-op thread count, after the profile (the
runner has stopped sampling the threads by then). Torch is imported only when called (worker only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from branchscope.profiling.trace.prediction import typical_step

#: Sequential steps measured for the prediction (after one unmeasured step): the run's --steps,
#: within these bounds.
MIN_STEPS = 3
MAX_STEPS = 10


def measure_branch_times(
    model: Any,
    analysis: Any,
    step: Callable[[], None],
    steps: int,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, dict[str, float], int] | None:
    """(step ms, ms of each branch it could mark, steps): medians (`prediction.typical_step`) over `steps` calls of
    `step` (the model's own forward) with timing hooks on `model`'s branches (`analysis`: a
    `branches.BranchAnalysis`); None when `model` is not an eager `nn.Module` (TorchScript) or no
    branch has a submodule to hook. The hooks are gone when this returns, whatever `step` raised."""
    import torch

    from branchscope.profiling.run.branches import branch_module_ends

    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return None
    totals: dict[str, float] = {}  # of the step running now
    handles: list[Any] = []

    def hook(name: str, first: Any, last: Any) -> None:
        started: list[float] = []

        def enter(_module: Any, _args: Any) -> None:
            sync()
            started.append(clock())

        def leave(_module: Any, _args: Any, _out: Any) -> None:
            if started:
                sync()
                totals[name] = totals.get(name, 0.0) + clock() - started.pop()

        handles.append(first.register_forward_pre_hook(enter))
        handles.append(last.register_forward_hook(leave))

    try:
        for branch, first, last in branch_module_ends(model, analysis):
            hook(branch.name, first, last)
        if not handles:
            return None
        step()  # one unmeasured step with the hooks on
        sync()
        steps_ms: list[float] = []
        branch_ms: list[dict[str, float]] = []
        for _ in range(steps):
            totals.clear()
            t0 = clock()
            step()
            sync()
            steps_ms.append((clock() - t0) * 1000.0)
            branch_ms.append({n: t * 1000.0 for n, t in totals.items()})
    finally:
        for h in handles:
            h.remove()
    return typical_step(steps_ms, branch_ms)
