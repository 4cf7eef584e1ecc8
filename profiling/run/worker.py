"""One profiling run in a fresh process: `python -m branchscope.profiling.run.worker ARGS`.

A fresh process per run because `torch.set_num_interop_threads` can be called once per process,
before any inter-op work; so it and `torch.set_num_threads` are the first torch calls made here.
Then: check the mode can run with this torch (`Mode.check`: fork needs TorchScript), start the main
thread's OpenMP team and the mode's inter-op pool (fork: torch's; threads: a pool of Python threads,
`branch_pool`), noting which thread is which (`ThreadCensus`); load the model, run its own forward, find its branches (run.json's
"tracer": the tracer that found the graph, "tracer_errors": why those before it failed), build the mode's
plan, check the plan's outputs against the model's, warm up until the step times settle (at least
--warmup W steps, at most WARMUP_MAX_STEPS (200) or WARMUP_MAX_S (30 s) of them; W = 0: none; see
`branchscope.profiling.run.steady`), time at least K steps without the profiler (up to 20, or 2 s of
them: `timed_steps`), and profile K more, each inside `record_function("step N")` (threads mode: every thread profiled, and
each pool thread measuring its branches' time on a core, waiting for one and waiting for the GIL:
run.json's "branch_threads", absent where the interpreter runs without the GIL, "gil": false). run.json says how the warm-up went ("warmup_steps",
"warmup_steps_ms", "warmup_settled", "warmup_cap"), how long each phase took ("phase_seconds":
start, load, forward, discovery, plan, check, warmup, timing, profile, export; "tracer_seconds",
"plan_build_seconds", "plan_compile_seconds") and why its timings may not be steady ("warnings":
a warm-up stopped by a cap, timed steps still drifting, a profiler overhead below 0.95).

Results, in OUT (the run folder's staging folder, see branchscope.profiling.run.folder): OUT/trace.json (a Chrome
trace with a top-level "branchscope" object, and "traceEvents" as its last key so the runner can
append the CPU samples and compress it in one pass into trace.json.gz), OUT/run.json (a
`records.RunRecord`: timings, branches, thread ids, the trace's clock; written last, atomically,
with "complete": true),
OUT/plan.py (generated plans).

Protocol with the runner: JSON lines on the *original* stdout, the typed events of
`branchscope.profiling.trace.records` (PhaseEvent, ProgressEvent, ErrorEvent, FinishedEvent). The
worker points file descriptor 1 at stderr before loading anything, so whatever the model prints
cannot corrupt the protocol.
    {"event": "phase", "phase": "load" | "warmup" | "timing" | "profile" | "export"}
        (the runner samples threads between "profile" and "export")
    {"event": "progress", "step": i, "of": K}
    {"event": "error", "message": ..., "traceback": ..., "exit_code": n}
    {"event": "finished", "run": "OUT/run.json"}
Exit codes: 0 ok, 2 bad model or model code raised, 3 mode cannot run here, 1 anything else.

A forked TorchScript run may abort at interpreter exit ("terminate called without an active
exception") once its work is done, so the worker leaves with os._exit after flushing its results.

A rank of a distributed run ($BRANCHSCOPE_EVENTS_DIR set by the runner, the rank's place in
RANK, LOCAL_RANK, WORLD_SIZE from torch.distributed.run): see `worker_process.watch_rank`. Its process group
(gloo on CPU, nccl on CUDA with rank r on cuda:(local rank)) is initialised before the model is
built; it writes into OUT/rank-R; it times exactly --steps unprofiled steps (ranks step together),
and every rank warms up the same number of steps: each warm-up step the ranks all-reduce whether
each has settled or hit a cap (one small collective between steps, on the default group, in the
same order on every rank), and stop together.
A model file's `train_step(model, inputs)`, when it has one, is each step (see LoadedModel.train_step).
Dying with the runner, and a rank's watching process: `worker_process`.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TextIO

import msgspec

from branchscope.profiling.run.folder import describe_os_error, write_record_atomic
from branchscope.profiling.run.model_setup import (
    Phases,
    Planned,
    RankInfo,
    check,
    discovery,
    forward,
    load,
    plan,
    start,
)
from branchscope.profiling.run.profiled_steps import (
    StepTimes,
    measures_branches,
    prediction,
    profile,
    timing,
    warmup,
)
from branchscope.profiling.run.protocol import (
    EVENTS_DIR_ENV,
    EXIT_FAILED,
    EXIT_OK,
    RANK_FOLDER,
    RANK_SAMPLING,
    RANK_SAMPLING_WAIT_S,
    WORKER_MODULE,
    RunFailure,
    add_run_arguments,
)
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT as EXIT_BAD_MODEL
from branchscope.profiling.run.run_facts import RunSoFar, export
from branchscope.profiling.run.worker_process import die_with_parent, watch_rank
from branchscope.profiling.trace.events import (
    ErrorEvent,
    Event,
    FinishedEvent,
    HelloEvent,
    PhaseEvent,
    encode_event,
)
from branchscope.profiling.trace.records import RUN_JSON, RunRecord


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {WORKER_MODULE}", description="One branchscope profiling run.")
    add_run_arguments(p, worker=True)  # the runner's options, but those it enforces itself (--timeout)
    return p


class _Protocol:
    """The JSON-lines channel to the runner, on a private duplicate of the original stdout; for a
    rank of a distributed run, the rank's own events file (its events carry "rank" and "t", the
    monotonic clock, shared by the machine's processes)."""

    def __init__(self, events: Path | None = None, rank: int | None = None) -> None:
        if events is None:
            self.stream: TextIO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        else:
            self.stream = open(events, "a", buffering=1, encoding="utf-8")
        self.events, self.rank = events, rank
        os.dup2(2, 1)  # the model's prints (and torch's) go to stderr from now on
        sys.stdout = sys.stderr

    def wait_until_sampled(self) -> None:
        """A rank writing its events to a file: wait (at most `RANK_SAMPLING_WAIT_S`) until the
        runner says it samples this rank's threads (`RANK_SAMPLING`); at once otherwise."""
        if self.events is None or self.rank is None:
            return
        said = self.events.parent / RANK_SAMPLING.format(rank=self.rank)
        deadline = time.monotonic() + RANK_SAMPLING_WAIT_S
        while not said.exists() and time.monotonic() < deadline:
            time.sleep(0.001)

    def emit(self, event: Event) -> None:
        if self.rank is not None:
            event = msgspec.structs.replace(event, rank=self.rank, t=time.monotonic())
        self.stream.write(encode_event(event).decode("utf-8") + "\n")
        self.stream.flush()


def run(args: argparse.Namespace, proto: _Protocol, dist: RankInfo | None = None) -> RunRecord:
    """One run, phase by phase (each named as run.json's "phase_seconds" names it); the runner hears
    "load", "warmup", "timing", "profile" (from `profile`) and "export" as each begins."""
    phases = Phases()
    started = start(args)
    phases.end("start")
    proto.emit(PhaseEvent(phase="load"))
    model = load(args, started, dist)
    phases.end("load")
    expected = forward(model)
    phases.end("forward")
    analysis = discovery(model)
    phases.end("discovery")
    made = plan(args, started.mode, model, analysis)
    phases.end("plan")
    diff = check(args, model, made, expected)
    del expected
    phases.end("check")
    proto.emit(PhaseEvent(phase="warmup"))
    warm = warmup(args, model, made, dist)
    phases.end("warmup")
    proto.emit(PhaseEvent(phase="timing"))
    unprofiled = timing(args, started, model, made, dist)
    phases.end("timing")
    profiled = profile(args, proto, started, model, made)
    phases.end("profile")
    proto.emit(PhaseEvent(phase="export"))  # the runner stops sampling the threads here
    measured = None
    if measures_branches(started, analysis):
        measured = prediction(args, model, analysis)
        phases.end("prediction")
    steps = StepTimes(warm, unprofiled, profiled, measured)
    return export(RunSoFar(args, dist, started, model, Planned(analysis, made, diff), steps), phases)


def _as_failure(exc: BaseException) -> RunFailure:
    """What the runner is told of the exception that ended the run (call it inside the `except`)."""
    if isinstance(exc, RunFailure):
        return exc
    tb = traceback.format_exc()
    if isinstance(exc, OSError):  # writing the results (the model's own errors are RunFailures): a full disk
        # A full disk is said in one line: its traceback would only bury it.
        said = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        return RunFailure(
            EXIT_FAILED, f"could not write the results to --out: {describe_os_error(exc, with_file=False)}", None if said else tb
        )
    if isinstance(exc, SystemExit):  # the model called sys.exit() where we did not expect it (fx tracing, plans)
        return RunFailure(EXIT_BAD_MODEL, f"the model called sys.exit({exc.code!r})", tb)
    # A bug of ours, or torch failing: report it, never hang.
    return RunFailure(EXIT_FAILED, f"the worker failed: {type(exc).__name__}: {exc}".splitlines()[0], tb)


def main(argv: list[str] | None = None) -> int:
    if os.environ.get(EVENTS_DIR_ENV):
        watch_rank(lambda events, rank: _rank_worker(argv, events, rank))
    die_with_parent()  # first: a runner killed from here on takes this worker with it
    args = build_arg_parser().parse_args(argv)
    sys.dont_write_bytecode = True  # loading the user's model leaves no __pycache__ in their folder
    proto = _Protocol()
    faulthandler.enable()  # a crash in native code still leaves a Python stack in the log
    _run_and_exit(args, proto)  # leaves the process


def _run_and_exit(
    args: argparse.Namespace,
    proto: _Protocol,
    dist: RankInfo | None = None,
    produce: Callable[[], msgspec.Struct] | None = None,
    name: str = RUN_JSON,
) -> NoReturn:
    """Run, write run.json into args.out, tell the runner how it ended, and leave (never returns).
    `produce` and `name`: another worker's record and its file (the paired worker's)."""
    code = EXIT_OK
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        if produce is not None:
            result: msgspec.Struct = produce()
        else:
            result = run(args, proto, dist) if dist is not None else run(args, proto)
        write_record_atomic(args.out / name, result)
        proto.emit(FinishedEvent(run=str(args.out / name)))
    except (Exception, SystemExit) as exc:
        failure = _as_failure(exc)
        proto.emit(ErrorEvent(message=str(failure), traceback=failure.tb, exit_code=failure.exit_code))
        code = failure.exit_code
    sys.stderr.flush()
    proto.stream.flush()
    # Skip interpreter teardown: forked TorchScript may abort there after the results are written.
    os._exit(code)


def _rank_worker(argv: list[str] | None, events: Path, rank: int) -> NoReturn:
    """The worker of one rank: the single-process worker's run, into OUT/rank-R (never returns)."""
    args = build_arg_parser().parse_args(argv)
    sys.dont_write_bytecode = True
    dist = RankInfo(rank, int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
    proto = _Protocol(events, rank)
    proto.emit(HelloEvent(pid=os.getpid()))
    faulthandler.enable()
    args.out = args.out / RANK_FOLDER.format(rank=rank)
    _run_and_exit(args, proto, dist)


if __name__ == "__main__":
    main()
