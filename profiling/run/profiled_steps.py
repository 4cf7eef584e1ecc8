"""The worker's phases that step the plan, named as run.json's "phase_seconds" names them: `warmup`
(until the step times settle, `steady.warm_up`), `timing` (steps without the profiler,
`timed_steps`), `profile` (K steps inside the profiler, each in `record_function("step N")`) and
`prediction` (the model's own forward, its branches timed one by one, `branch_timing`).

Imports torch when called (through the `Model` it is given, and torch.profiler), never at import.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from branchscope.profiling.run.branch_pool import gil_enabled
from branchscope.profiling.run.cpu_sampler import settle_interop_pool
from branchscope.profiling.run.model_setup import Model, RankInfo, Started
from branchscope.profiling.run.protocol import step_label
from branchscope.profiling.run.steady import CAP_SECONDS, CAP_STEPS, Warmup, warm_up
from branchscope.profiling.run.thread_memory import ThreadMemory, for_run
from branchscope.profiling.trace.events import PhaseEvent, ProgressEvent
from branchscope.profiling.trace.prediction import StepSamples
from branchscope.profiling.trace.records import BranchThreadRecord

#: The timed (unprofiled) phase: at least --steps steps, and up to TIMED_MIN_STEPS of them unless
#: TIMED_BUDGET_S of timed steps have passed, at most TIMED_MAX_STEPS (see `timed_steps`).
TIMED_MIN_STEPS = 20
TIMED_BUDGET_S = 2.0
TIMED_MAX_STEPS = 200


@dataclass(frozen=True)
class StepTimes:
    """What the stepping phases measured: the warm-up, the unprofiled steps (ms), the profiled
    steps, and the branches' sequential times for the prediction (None: not measured here)."""

    warmup: Warmup
    unprofiled_ms: list[float]
    profiled: Profiled
    measured: StepSamples | None


def warmup(args: argparse.Namespace, model: Model, plan: Any, dist: RankInfo | None) -> Warmup:
    """The "warmup" phase (`steady.warm_up`): the ranks of a distributed run warm up together."""

    def warm() -> None:
        model.step(plan, "warming up")
        model.sync()

    def agree(settled_here: bool, cap_here: str | None) -> tuple[bool, str | None]:
        """Ranks warm up together (see steady.warm_up): stop when all settled or any hit a cap."""
        torch = model.torch
        flags = torch.tensor(
            [not settled_here, cap_here == CAP_STEPS, cap_here == CAP_SECONDS], dtype=torch.int64, device=model.device
        )
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        unsettled, steps_cap, seconds_cap = (bool(x) for x in flags.tolist())
        return not unsettled, CAP_STEPS if steps_cap else CAP_SECONDS if seconds_cap else None

    return warm_up(warm, args.warmup, agree=None if dist is None else agree)


def timing(args: argparse.Namespace, started: Started, model: Model, plan: Any, dist: RankInfo | None) -> list[float]:
    """The "timing" phase: the unprofiled steps' times (ms, `timed_steps`); ranks step together
    (collectives), so each times the same number of steps, never "as many as fit". Imports the
    profiler at its end (its import is counted here)."""

    def step() -> None:
        model.step(plan, "running a step")
        model.sync()

    unprofiled = timed_steps(step, args.steps) if dist is None else timed_steps(step, args.steps, budget_s=0.0)
    # OpenMP workers of pool threads started with the plan's first run (on CUDA, threads named like
    # the main thread are more likely CUDA's: its team started before the model was loaded).
    started.census.note(main_named_are_intra=not model.is_cuda)
    import torch.profiler  # noqa: F401 - imported with the timing, as the profile's start is not

    return unprofiled


def timed_steps(
    step: Any, steps: int, clock: Any = time.perf_counter, budget_s: float = TIMED_BUDGET_S
) -> list[float]:
    """Times `step()` (ms each): at least `steps` times, and on up to TIMED_MIN_STEPS times unless
    `budget_s` (TIMED_BUDGET_S) of timed steps have passed by then; at most TIMED_MAX_STEPS times in all."""
    floor = min(steps, TIMED_MAX_STEPS)
    goal = min(max(steps, TIMED_MIN_STEPS), TIMED_MAX_STEPS) if budget_s > 0 else floor
    times: list[float] = []
    while len(times) < goal:
        t0 = clock()
        step()
        times.append((clock() - t0) * 1000.0)
        if len(times) >= floor and sum(times) >= budget_s * 1000.0:
            break
    return times


def profiler_threads(torch: Any, mode: Any) -> dict[str, Any]:
    """torch.profiler's arguments for the threads it records: every thread where the mode runs branches
    on threads it does not follow by itself (Python threads: `Mode.profile_all_threads`)."""
    if not mode.profile_all_threads:
        return {}
    return {"experimental_config": torch._C._profiler._ExperimentalConfig(profile_all_threads=True)}


@dataclass
class Profiled:
    """What the "profile" phase gave: the profiler (to export its trace), each step's time (ms),
    whether the GIL was on, threads mode's pool threads' own measures (None: no such pool, or
    no GIL to wait for), and where the profiler records no memory, what recorded it
    (`thread_memory`: None where the profiler did) and run.json's `memory_source`."""

    prof: Any
    steps_ms: list[float]
    gil: bool
    branch_threads: list[BranchThreadRecord] | None
    memory: ThreadMemory | None = None
    memory_source: str | None = None


def profile(args: argparse.Namespace, proto: Any, started: Started, model: Model, plan: Any) -> Profiled:
    """The "profile" phase: --steps steps inside the profiler, each inside `record_function("step
    N")`, every thread profiled where the mode asks (`profiler_threads`), threads mode's pool
    measuring its branches, memory recorded per thread where the profiler records none
    (`thread_memory`); `proto` hears "profile" once the profiler has started, and each step."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch, mode, pool, census = model.torch, started.mode, started.pool, started.census
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.is_cuda else [])
    steps_ms: list[float] = []
    if pool is not None:
        pool.reset_times()
        pool.measuring = True  # each pool thread measures the branches it runs (see branch_pool)
    with profile(
        activities=activities, record_shapes=True, profile_memory=True, **profiler_threads(torch, mode)
    ) as prof:
        census.note("other")  # the profiler's own threads
        proto.emit(PhaseEvent(phase="profile"))  # after the profiler's (slow) start
        proto.wait_until_sampled()  # a rank of a distributed run: until the runner samples its threads
        memory, memory_source = for_run(torch, mode, pool)
        if memory is not None:
            memory.on_pool(pool, memory.start)
        for i in range(1, args.steps + 1):
            t0 = time.perf_counter()
            with record_function(step_label(i)):
                output = model.step(plan, f"profiling step {i}")
                model.sync()
                if mode.settle is None:
                    del output  # freed in the step, as the model's own caller would
            steps_ms.append((time.perf_counter() - t0) * 1000.0)
            if mode.settle is not None:  # freed where the profiler sees it, once the pool let go (Mode.settle)
                mode.settle()
                del output
            proto.emit(ProgressEvent(step=i, of=args.steps))
        # A forked task's future completes before its pool thread has finished the task (and
        # closed its profiler ranges). Stopping the profiler then races with that thread: seen
        # here as heap corruption (glibc malloc abort) and garbage bytes in the exported trace.
        settle_interop_pool()
        if memory is not None:
            memory.on_pool(pool, memory.stop)
    census.note(main_named_are_intra=not model.is_cuda)
    if pool is not None:
        pool.measuring = False
    gil = gil_enabled()
    threads = [_thread_record(t) for t in pool.times()] if pool is not None and gil else None
    return Profiled(prof, steps_ms, gil, threads, memory, memory_source)


def _thread_record(t: Any) -> BranchThreadRecord:
    """run.json's record of one pool thread's `branch_pool.ThreadTimes` (ns, as ms)."""
    return BranchThreadRecord(
        tid=t.tid,
        calls=t.calls,
        **{f"{name}_ms": round(getattr(t, f"{name}_ns") / 1e6, 4) for name in ("wall", "cpu", "core_wait", "gil_wait")},
    )


def measures_branches(started: Started, analysis: Any) -> bool:
    """Whether the run has a "prediction" phase: a model with branches, in any mode but the baseline
    (whose own profiled steps give the branches' times, from its trace)."""
    return not started.mode.traits.baseline and bool(analysis.regions)


def prediction(args: argparse.Namespace, model: Model, analysis: Any) -> StepSamples | None:
    """The "prediction" phase (`measures_branches`): the prediction's sequential per-branch times,
    measured on the model's own forward (`branch_timing`); None where measuring them failed (a note
    says why)."""
    from branchscope.profiling.run.branch_timing import MAX_STEPS, MIN_STEPS, measure_branch_times

    n = min(MAX_STEPS, max(MIN_STEPS, args.steps))
    try:
        return measure_branch_times(model.loaded.model, analysis, model.own_step, n, model.sync)
    except Exception as exc:  # noqa: BLE001 - the run's results stand; the prediction is left out, said why
        analysis.notes.append(f"no prediction: measuring the branches failed: {type(exc).__name__}: {exc}".splitlines()[0])
        return None
