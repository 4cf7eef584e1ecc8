"""The worker's "export" phase: the profiler's trace, its threads named, and the run's facts,
made once (`run_record`, run.json's `records.RunRecord`) and written twice: into the trace's
top-level "branchscope" object (`run_info.RunInfo.of_run`: the same values under the same keys)
and, by the worker, into run.json.

The trace (OUT/trace.json) is uncompressed JSON with "traceEvents" as its last key, so the runner
can append the CPU samples and compress it in one pass into trace.json.gz. No torch import: the
torch module and the profiler come from the phases before.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.branch_pool import python_version
from branchscope.profiling.run.cpu_sampler import read_thread_names
from branchscope.profiling.run.folder import write_json_atomic
from branchscope.profiling.run.model_setup import Model, Phases, Planned, RankInfo, Started
from branchscope.profiling.run.profiled_steps import StepTimes
from branchscope.profiling.run.steady import run_warnings
from branchscope.profiling.trace.prediction import (
    FROM_MEASURED,
    FROM_PROFILED,
    StepSamples,
    branch_times_from_trace,
    predict_from,
)
from branchscope.profiling.trace.records import (
    RUN_FORMAT,
    BranchRecord,
    LeftOutRecord,
    PredictionRecord,
    RunRecord,
    TraceClock,
)
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.step_stats import StepStats


def pool_tids_from_trace(trace: dict[str, Any]) -> list[int]:
    """Threads the profiler names PTThreadPool: the pool where /proc cannot tell (OpenMP workers
    never run profiled ops, so they are seldom among them)."""
    tids = set()
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "M" and ev.get("name") == "thread_name" and isinstance(ev.get("tid"), int):
            if "PTThreadPool" in str(ev.get("args", {}).get("name", "")):
                tids.add(ev["tid"])
    return sorted(tids)


def name_threads(trace: dict[str, Any], names: dict[int, str]) -> None:
    """One "thread_name" per thread, with the OS name the worker read ({tid: name}): the profiler may
    name a thread twice, once by the name it had when started (a Python thread starts with its
    creator's name, "python", before the branch pool names it)."""
    seen: set[tuple[Any, Any]] = set()
    kept = []
    for ev in trace.get("traceEvents", []):
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "thread_name":
            key = (ev.get("pid"), ev.get("tid"))
            if key in seen:
                continue
            seen.add(key)
            tid = ev.get("tid")
            if isinstance(tid, int) and tid in names and isinstance(ev.get("args"), dict):
                ev["args"]["name"] = f"thread {tid} ({names[tid]})"
        kept.append(ev)
    trace["traceEvents"] = kept


def add_thread_memory(trace: dict[str, Any], memory: Any) -> None:
    """The memory events `thread_memory.ThreadMemory` recorded (where the profiler records none)
    added to the trace's events, on its clock."""
    if memory is not None:
        trace.setdefault("traceEvents", []).extend(memory.trace_events(trace.get("baseTimeNanoseconds"), os.getpid()))


def trace_clock(trace: dict[str, Any]) -> dict[str, Any]:
    """What the runner needs to put CPU samples on the trace's clock without parsing the trace again."""
    lo, hi = float("inf"), float("-inf")
    for e in trace.get("traceEvents", []):
        ts = e.get("ts")
        if e.get("ph") in ("X", "i", "C") and isinstance(ts, int | float):
            dur = e.get("dur")
            lo = min(lo, ts)
            hi = max(hi, ts + (dur if isinstance(dur, int | float) else 0))
    base = trace.get("baseTimeNanoseconds")
    return {
        "base_time_ns": base if isinstance(base, int | float) else None,
        "first_us": lo if lo <= hi else None,
        "last_us": hi if lo <= hi else None,
    }


def exported_trace(prof: Any, raw: Path) -> dict[str, Any]:
    """The profiler's Chrome trace, through a file (the only way torch exports it), then removed.

    On a full disk kineto may fail quietly, leaving no file or a truncated one: that becomes the
    OSError it is ("no space left on device"), not a FileNotFoundError or a JSON error.

    kineto writes the path it is given into the trace unescaped (its "traceName") and turns `\\` into
    `/` when it renames its temporary file, so --out names holding `"`, `\\` or a newline broke the
    export. It is given `/proc/self/fd/N/NAME` instead, N a descriptor on the folder: only safe
    characters, whatever the folder is called. "traceName" is dropped (the path is not the trace's).
    """
    folder_fd = os.open(raw.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        via_fd = f"/proc/self/fd/{folder_fd}/{raw.name}"
        prof.export_chrome_trace(via_fd if os.path.isdir(os.path.dirname(via_fd)) else str(raw))
        with open(raw, encoding="utf-8") as f:
            trace = json.load(f, strict=False)  # kineto may write raw control characters in strings
        if not isinstance(trace, dict):
            raise ValueError("the profiler's trace is not a JSON object")
        trace.pop("traceName", None)
        return trace
    except (OSError, ValueError) as exc:
        if _disk_full(raw.parent):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(raw.parent)) from exc
        raise
    finally:
        os.close(folder_fd)
        for leftover in (raw, raw.with_name(raw.name + ".tmp")):
            leftover.unlink(missing_ok=True)


def _disk_full(folder: Path, slack: int = 1 << 20) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < slack


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    """Uncompressed JSON with "traceEvents" last, so the file ends with the array's `]}` (see the runner)."""
    ordered = {k: v for k, v in trace.items() if k != "traceEvents"}
    ordered["traceEvents"] = trace.get("traceEvents", [])
    write_json_atomic(path, ordered)


def run_prediction(
    baseline: bool, branches: list[dict[str, Any]], trace: dict[str, Any], measured: StepSamples | None
) -> PredictionRecord | None:
    """The run's prediction (`profiling/trace/prediction.py`): from a baseline (sequential) run's
    profiled steps (its branches' annotations in its trace), or from the unprofiled sequential
    steps `measured` in the worker for any other mode; None without branches or times."""
    if not branches:
        return None
    source = FROM_MEASURED
    if baseline:
        measured = branch_times_from_trace(trace.get("traceEvents", []))
        source = FROM_PROFILED
    if measured is None or not measured.steps_ms:
        return None
    return predict_from([BranchRecord(**b) for b in branches], measured, source=source)


@dataclass(frozen=True)
class RunSoFar:
    """What the phases before the export made: the worker's arguments, its place in a distributed
    run, its threads and mode, the model, the plan, the step times."""

    args: argparse.Namespace
    dist: RankInfo | None
    started: Started
    model: Model
    made: Planned
    steps: StepTimes


def export(run: RunSoFar, phases: Phases) -> RunRecord:
    """The "export" phase: the profiler's trace (its threads named by the OS names the worker read,
    the inter-op pool taken from the trace where /proc gave no census), the prediction, and the
    run's record; the trace written with the record's facts as its "branchscope" object. Returns
    the record, its "phase_seconds" ending with the export."""
    args, started, made = run.args, run.started, run.made
    census = started.census
    trace = exported_trace(run.steps.profiled.prof, args.out / "trace.raw.json")
    census.note("other")
    threads = {**census.names, **read_thread_names()}
    name_threads(trace, threads)
    add_thread_memory(trace, run.steps.profiled.memory)
    interop = census.interop_tids if census.names else pool_tids_from_trace(trace)  # no /proc here: no census
    branches = made.analysis.to_json()
    prediction = None
    if made.plan.marks is not None and made.plan.marks.unmatched_steps:
        made.analysis.notes.append(
            f"no prediction: the model's module calls did not match its graph's in {made.plan.marks.unmatched_steps} of "
            f"{made.plan.marks.steps} steps (its forward took another path), so its branch marks cannot be trusted"
        )
    else:
        prediction = run_prediction(started.mode.traits.baseline, branches, trace, run.steps.measured)
    facts = Facts(threads=threads, interop_tids=interop, branches=branches, prediction=prediction, clock=trace_clock(trace))
    record = run_record(run, facts, phases)
    trace["branchscope"] = RunInfo.of_run(record).trace_object()
    write_trace(args.out / "trace.json", trace)
    phases.end("export")
    return msgspec.structs.replace(record, phase_seconds=dict(phases.seconds))


@dataclass(frozen=True)
class Facts:
    """What the export found of the run: each thread's OS name ({tid: name}), the inter-op pool's
    threads, the branches (as `BranchRecord` fields), the prediction, where the trace's events lie."""

    threads: dict[int, str]
    interop_tids: list[int]
    branches: list[dict[str, Any]]
    prediction: PredictionRecord | None
    clock: dict[str, Any]


def run_record(run: RunSoFar, facts: Facts, phases: Phases) -> RunRecord:
    """The run's facts, once: run.json's record, of which the trace's "branchscope" object is made."""
    args, dist, started, model, steps = run.args, run.dist, run.started, run.model, run.steps
    torch, analysis, plan, loaded = model.torch, run.made.analysis, run.made.plan, model.loaded
    steps_ms, unprofiled = steps.profiled.steps_ms, steps.unprofiled_ms
    profiled_stats, unprofiled_stats = StepStats.of(steps_ms), StepStats.of(unprofiled)
    assert profiled_stats is not None and unprofiled_stats is not None  # K >= 1 steps of each
    median, unprofiled_median = profiled_stats.median, unprofiled_stats.median
    ranked: dict[str, Any] = {}
    if dist is not None:
        ranked = {"rank": dist.rank, "local_rank": dist.local_rank, "world_size": dist.world_size, "backend": model.backend}
    return RunRecord(
        format=RUN_FORMAT,
        mode=args.mode,
        mode_traits=started.mode.traits,
        plan_by=started.mode.traits.plan_title,
        interop=args.interop,
        intra=args.intra,
        cores=usable_cores(),
        device=model.device_label,
        torch=str(torch.__version__),
        python=python_version(),
        python_executable=sys.executable,
        gil=steps.profiled.gil,
        branch_threads=steps.profiled.branch_threads,
        model=loaded.label,
        source=loaded.kind,
        input_shapes=list(args.input_shapes) or None,
        dtype=args.dtype if args.input_shapes else None,
        steps=args.steps,
        warmup=args.warmup,
        steps_ms=[round(x, 4) for x in steps_ms],
        median_ms=round(median, 4),
        unprofiled_steps=len(unprofiled),
        unprofiled_steps_ms=[round(x, 4) for x in unprofiled],
        unprofiled_median_ms=round(unprofiled_median, 4),
        unprofiled_spread_ms=unprofiled_stats.rounded_spread(4),
        profiler_overhead=round(median / unprofiled_median, 4) if unprofiled_median > 0 else None,
        warmup_steps=len(steps.warmup.times_ms),
        warmup_steps_ms=[round(x, 4) for x in steps.warmup.times_ms],
        warmup_settled=steps.warmup.settled,
        warmup_cap=steps.warmup.cap,
        phase_seconds=dict(phases.seconds),
        tracer_seconds={tracer: round(s, 4) for tracer, s in analysis.tracer_seconds.items()},
        plan_build_seconds=None if plan.build_s is None else round(plan.build_s, 4),
        plan_compile_seconds=None if plan.compile_s is None else round(plan.compile_s, 4),
        warnings=run_warnings(steps.warmup, unprofiled, steps_ms),
        branches=[BranchRecord(**b) for b in facts.branches],
        regions=len({b["region"] for b in facts.branches}),
        max_abs_diff=run.made.max_abs_diff,
        main_tid=started.main_tid,
        interop_tids=facts.interop_tids,
        intra_tids=started.census.intra_tids,
        threads_applied={"interop": torch.get_num_interop_threads(), "intra": torch.get_num_threads()},
        pid=os.getpid(),
        threads={str(tid): name for tid, name in sorted(facts.threads.items())},
        fx_error=analysis.fx_error,
        tracer=analysis.tracer,
        tracer_errors=analysis.tracer_errors,
        notes=analysis.notes,
        left_out=[LeftOutRecord(**x.to_json()) for x in analysis.left_out],
        prediction=facts.prediction,
        plan="plan.py" if plan.source else None,
        trace="trace.json.gz",
        trace_clock=TraceClock(**facts.clock),
        train_step=loaded.train_step is not None,
        memory_source=steps.profiled.memory_source,
        **ranked,
        complete=True,
    )
