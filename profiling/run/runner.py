"""The profiling engine behind `branchscope profile` and the GUI: one worker process per run.

`run_profile(request, on_event)` checks the arguments (`validate`), checks and locks the --out
folder (branchscope.profiling.run.folder; a multi-node run's shared OUT: .nodes), and hands the run
to its supervisor. The run's seams are modules of their own:

- branchscope.profiling.run.launch: what a run starts, `python -I -m branchscope.profiling.run.worker`
  (or torch.distributed.run for N ranks), its command line and environment;
- branchscope.profiling.run.supervise: `supervise` starts it in a new process group writing into a
  staging folder, forwards its progress, samples the CPU time of each of its OS threads while it
  profiles, enforces the timeout and the cancel, names the first failure, and kills every process of
  the run before it returns (its group, its cgroup where the system lets the runner make one,
  whatever carries the run's token, orphans re-parented to the runner: see
  branchscope.profiling.run.processes), so nothing is left running; `OneWorker` and
  branchscope.profiling.run.distributed's `Distributed` say only what differs;
- branchscope.profiling.run.finish: the CPU samples inserted into trace.json's events as it is
  gzipped once;
- branchscope.profiling.run.commit: only a complete run's files are moved into OUT, run.json last; a
  failed run's files are kept in OUT/failed-run/, the earlier results intact;
- branchscope.profiling.run.outcome: `RunResult`, `RunError`.

Cancelling: `run_profile(..., cancel=flag)` polls `flag` while it waits for the worker; `main()`
(and `branchscope profile`) set it from SIGTERM/SIGINT with `stop_on_signals()`. A signal never
raises inside the engine, so the worker's group is always killed and temporary files always removed.
The worker dies with the runner even when the runner is SIGKILLed (see branchscope.profiling.run.worker; the
cgroup's watchdog then empties the run's cgroup), and a
runner started by the window ($BRANCHSCOPE_PARENT_PID) cancels its run when the window dies.

`python -m branchscope.profiling.run.runner ARGS [--jsonl]` is the same as a command; with --jsonl it prints one JSON
object per line for the GUI (which starts it with QProcess):
    {"event": "phase", "phase": "load" | "warmup" | "timing" | "profile" | "export"}   (as the worker starts each)
    {"event": "progress", "step": i, "of": K}
    {"event": "error", "message": ..., "traceback": ...}
    {"event": "done", "out": DIR, "run": {...run.json...}}    (only when the run succeeded)
Exit codes: 0 ok, 2 bad arguments or model, 3 mode cannot run, 4 worker died or timed out.

Distributed runs (`--nproc N`, N > 1): `python -m torch.distributed.run --nproc-per-node N
--standalone --local-addr 127.0.0.1 --max-restarts 0 --no-python` starts N workers; GLOO_SOCKET_IFNAME=lo
keeps gloo on loopback. The runner samples each rank's threads while it profiles, and the
first rank to fail names the failure (a rank killed by a signal before any rank exited with an
error, else the first to report an error): exit 2 for a model error, 4 for a death or --timeout.
OUT gets rank-R/trace.json.gz and rank-R/run.json per rank and a run.json listing the ranks (rank,
pid, device, their files) with the slowest rank's step times, step by step.

Multi-node runs (`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`): the launcher meets the
other nodes' launchers in a c10d rendezvous instead of `--standalone` (on a loopback endpoint node 0
hosts its store and everything stays on 127.0.0.1); OUT is shared by the nodes
(`branchscope.profiling.run.nodes`): node 0 commits the run once every node's ranks are in, and a
failure names its rank and node, another node's first where it came first.

`--python PATH` runs the worker (and a distributed run's launcher and ranks) under another
interpreter, the user's environment, without branchscope installed there: `validate` probes it
first (`branchscope.profiling.run.interpreter`), so a Python without torch or without what the worker
imports is refused in one line, exit 2, before OUT is touched.

No torch here: the GUI process and the CLI import this module and must stay light.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from branchscope.profiling.run.distributed import Distributed
from branchscope.profiling.run.folder import RunFolder, RunFolderError, describe_os_error
from branchscope.profiling.run.interpreter import (
    TORCH_OLDEST,
    Interpreter,
    InterpreterError,
    torch_older_than_oldest,
    untested_torch_warning,
)
from branchscope.profiling.run.interpreter import check as check_interpreter
from branchscope.profiling.run.model_source import ModelSourceError, ModelSpec, check_spec, parse_input_shape
from branchscope.profiling.run.modes import MODE_NAMES, MODES
from branchscope.profiling.run.nodes import NodeFolder
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.outcome import RunError, RunResult, cancelled
from branchscope.profiling.run.processes import CancelFlag, stop_on_signals, stop_with_parent
from branchscope.profiling.run.protocol import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_WORKER,
    RUNNER_MODULE,
    RunRequest,
    add_run_arguments,
    error_line,
    request_from_args,
)
from branchscope.profiling.run.supervise import OneWorker, supervise
from branchscope.profiling.trace.events import DoneEvent, ErrorEvent, Event, encode_event
from branchscope.profiling.trace.gil import gil_line_of
from branchscope.profiling.trace.prediction import prediction_text
from branchscope.profiling.trace.records import DEFAULT_TRACE, RUN_JSON, RunRecord, left_out_text
from branchscope.profiling.trace.starved import STARVED_LINE

#: --device values: auto (CUDA when available), cpu, cuda, cuda:N.
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def validate(req: RunRequest) -> Interpreter | None:
    """Argument checks that need no torch in this process; raises RunError(2) with a one-line
    message. With --python, that interpreter is probed (`interpreter.check`: once per process) and
    returned; None: the worker runs under this process's Python."""
    if req.mode not in MODES:
        raise RunError(EXIT_BAD_INPUT, f"--mode {req.mode!r} is not one of: {', '.join(MODE_NAMES)}")
    for name, value in (("--interop", req.interop), ("--intra", req.intra)):
        if value < 1:
            raise RunError(EXIT_BAD_INPUT, f"{name} must be at least 1, not {value}")
    opts = req.options
    problem = opts.problem()
    if problem:
        raise RunError(EXIT_BAD_INPUT, problem)
    if not DEVICE_PATTERN.fullmatch(opts.device):
        raise RunError(EXIT_BAD_INPUT, f"--device {opts.device!r} is not one of: auto, cpu, cuda, cuda:N")
    if not 0 < req.sample_interval_ms <= 2.0:
        raise RunError(EXIT_BAD_INPUT, "the CPU sample interval must be more than 0 and at most 2 ms")
    try:
        shapes = tuple(parse_input_shape(s) for s in opts.input_shapes)
        check_spec(ModelSpec(opts.demo, opts.model, shapes, opts.dtype))
    except ModelSourceError as exc:
        raise RunError(EXIT_BAD_INPUT, str(exc)) from None
    if opts.python is None:
        return None
    try:
        return check_interpreter(opts.python)
    except InterpreterError as exc:
        raise RunError(EXIT_BAD_INPUT, str(exc)) from None


def untested_torch(options: RunOptions) -> str | None:
    """The warning line for a worker's torch newer than the newest tested (see
    `interpreter.untested_torch_warning`), or None: --python's torch as its probe says (kept for the
    process, so the run's own validation does not ask again; a --python the probe refuses is left
    to that validation's error), else this environment's, read from its metadata without importing
    it. `sweep` and `speedup` say it once before their runs; a run's run.json carries it (commit.py)."""
    if options.python is not None:
        try:
            version: str | None = check_interpreter(options.python).torch
        except InterpreterError:
            return None
    else:
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None
    return untested_torch_warning(version)


def _with_untested_torch(message: str, options: RunOptions) -> str:
    """A failed run's message, with the worker's torch named where it is newer than the newest tested:
    the likeliest cause a user cannot see (a successful run's run.json carries it as a warning)."""
    warning = untested_torch(options)
    return f"{message} ({warning})" if warning else message


def warn_untested_torch(options: RunOptions, stream: Any = None) -> None:
    """`warning: …` on stderr when the worker's torch is newer than the newest tested (`untested_torch`)."""
    warning = untested_torch(options)
    if warning:
        print(f"warning: {warning}", file=stream or sys.stderr, flush=True)


def run_profile(
    req: RunRequest,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
    layout: Callable[[RunRequest, Path], OneWorker] | None = None,
) -> RunResult:
    """Runs one profiling run to the end; never raises for a failed run (see RunResult.exit_code).

    `on_event` receives the worker's phase and progress events (`PhaseEvent`, `ProgressEvent`) as
    they come (a distributed run's: rank 0's).
    Once `cancel` is set the worker's group is killed and the result says so (exit code 128 + signal).
    The results reach `req.out` only when the run succeeded (see branchscope.profiling.run.folder).
    `layout`: another worker than the profiling one, started and supervised the same way (a
    `OneWorker` subclass saying its command, its result and what it commits: `run/paired.py`).
    """
    out = Path(req.out)
    try:
        python = validate(req)
    except RunError as exc:
        return RunResult(exc.exit_code, out, message=str(exc))
    if cancel is not None and cancel.is_set():
        return cancelled(out, cancel)
    opts = req.options
    multi = opts.nnodes > 1
    folder = (
        NodeFolder(out, opts.node_rank, opts.nnodes, overwrite=req.overwrite, endpoint=opts.rdzv_endpoint)
        if multi
        else RunFolder(out, overwrite=req.overwrite)
    )
    try:
        folder.open()
    except RunFolderError as exc:
        return RunResult(EXIT_BAD_INPUT, out, message=str(exc))
    try:
        assert folder.staging is not None
        if layout is not None:
            chosen = layout(req, folder.staging)
        else:
            chosen = Distributed(req, folder.staging) if opts.nproc > 1 or multi else OneWorker(req, folder.staging)
        if isinstance(folder, NodeFolder) and isinstance(chosen, Distributed):
            chosen.nodes = folder
            chosen.cancel = cancel
        result = supervise(folder, req, chosen, on_event, cancel)
        if isinstance(folder, NodeFolder) and not result.ok and result.cancelled_by is None:
            result.message = folder.failed(result.message or "the run failed", result.exit_code, failed_at=result.failed_at)
        result.interpreter = python
        if not result.ok and result.cancelled_by is None:
            result.message = _with_untested_torch(result.message or "the run failed", opts)
        if python is not None and result.ok:
            result.notes.append(f"the worker ran under {python.describe()}")
            if torch_older_than_oldest(python.torch):
                result.notes.append(f"torch {python.torch} is older than {TORCH_OLDEST}, the oldest branchscope is meant for")
        return result
    except OSError as exc:  # the disk filled up, the folder went away: the run fails, DIR stays as it was
        return RunResult(EXIT_WORKER, out, message=f"could not write the results to {out}: {describe_os_error(exc)}")
    finally:
        folder.close()


def _load_lines(run: RunRecord) -> list[str]:
    """The summary's lines of the machine's load, and whether the run was starved of cores."""
    lines = [] if run.load is None else [run.load.text()]
    return lines + ([STARVED_LINE] if run.starved else [])


# ---------------------------------------------------------------- summary and command line


def format_summary(run: RunRecord, out: Path) -> str:
    """A few lines for the terminal: what ran, how long a step took, the branches, where the files are."""
    if run.distributed:
        return _format_ranks_summary(run, out)
    lines = [
        f"{run.model}: {run.mode} mode, {run.interop} inter-op × {run.intra} intra-op "
        f"threads on {run.device} ({run.cores} cores, torch {run.torch})",
        f"step time: median {run.median_ms or 0:.2f} ms profiled over {run.steps} steps, "
        f"{run.unprofiled_median_ms or 0:.2f} ms unprofiled over {_unprofiled_steps(run)} steps"
        f"{_spread_text(run)} (profiler overhead ×{run.profiler_overhead or 0:.2f})",
        f"outputs vs the model: max abs diff {run.max_abs_diff}",
    ]
    branches = run.branches or []
    if branches:
        regions = {b.region for b in branches}
        # Each failure reads "<tracer> could not …" already.
        failed = run.tracer_errors or {}
        how = f" (graph from {run.tracer}" + "".join(f"; {v}" for v in failed.values()) + ")" if run.tracer else ""
        lines.append(f"branches: {len(branches)} in {len(regions)} region(s){how}")
        for b in branches:
            indent = "  " * (1 + b.depth)
            lines.append(f"{indent}[{b.region}] {b.name} ({b.ops} ops)")
    elif run.fx_error:
        lines.append(f"branches: none found ({run.fx_error})")
    else:
        lines.append("branches: none found")
    if run.left_out:
        lines.append(f"left out: {left_out_text(run.left_out)}")
    if run.prediction is not None:  # what the branches could give (profiling/trace/prediction.py)
        lines.append(f"prediction: {prediction_text(run.prediction)}")
    lines += [f"note: {note}" for note in run.notes or []]  # what discovery and the prediction could not do
    lines.append(
        f"threads: main {run.main_tid}, inter-op pool {run.interop_tids}, intra-op (OpenMP) workers {run.intra_tids}"
    )
    gil = gil_line_of(run)  # threads mode: the branch threads' wait for the GIL, or that there was none
    if gil:
        lines.append(gil)
    phases = format_phases(run)
    if phases:
        lines.append(phases)
    lines += _load_lines(run)
    lines.append(f"wrote {out / DEFAULT_TRACE} and {out / RUN_JSON}")
    return "\n".join(lines)


def format_phases(run: RunRecord) -> str | None:
    """One line: the seconds each of the worker's phases took (run.json's "phase_seconds"), with
    discovery's per tracer, the plan's build and compile, and how the warm-up ended; None for a run
    from before they were recorded."""
    if not run.phase_seconds:
        return None
    details: dict[str, str] = {}
    if run.tracer_seconds:
        details["discovery"] = ", ".join(f"{t} {s:.2f}" for t, s in run.tracer_seconds.items())
    steps = (("build", run.plan_build_seconds), ("compile", run.plan_compile_seconds))
    plan = [f"{what} {s:.2f}" for what, s in steps if s is not None]
    if plan:
        details["plan"] = ", ".join(plan)
    if run.warmup_settled is None:
        details["warmup"] = "none"
    else:
        how = "settled" if run.warmup_settled else f"stopped by its {run.warmup_cap or '?'} cap, not settled"
        details["warmup"] = f"{run.warmup_steps} steps, {how}"
    parts = [f"{name} {s:.2f}" + (f" ({details[name]})" if name in details else "") for name, s in run.phase_seconds.items()]
    return "phases (s): " + ", ".join(parts)


def _format_ranks_summary(run: RunRecord, out: Path) -> str:
    ranks = run.ranks or []
    lines = [
        f"{run.model}: {run.mode} mode, {run.interop} inter-op × {run.intra} intra-op "
        f"threads, {len(ranks)} ranks ({run.backend})"
        + (f" on node {ranks[0].node} of {run.nnodes}" if run.nnodes and not run.complete and ranks else "")
        + (f" on {run.nnodes} nodes" if run.nnodes and run.complete else "")
        + f" on {run.device} ({run.cores} cores, "
        f"torch {run.torch})" + (", train_step" if run.train_step else ""),
        f"step time (the slowest rank's, step by step): median {run.median_ms or 0:.2f} ms profiled over "
        f"{run.steps} steps, {run.unprofiled_median_ms or 0:.2f} ms unprofiled over "
        f"{_unprofiled_steps(run)} steps{_spread_text(run)}",
    ]
    for r in ranks:
        lines.append(
            f"  rank {r.rank} (pid {r.pid}, {r.device}"
            + (f", node {r.node} on {r.host}" if r.node is not None else "")
            + f"): median {r.median_ms or 0:.2f} ms "
            f"profiled, {r.unprofiled_median_ms or 0:.2f} ms unprofiled"
        )
    lines += _load_lines(run)
    if run.complete:
        lines.append(f"wrote {out / RUN_JSON} and, per rank, {out / 'rank-R'}/{DEFAULT_TRACE} and {RUN_JSON}")
    else:  # a node other than 0 of a multi-node run: its part waits for node 0
        lines.append(f"left these ranks' files in {out} for node 0, which writes {out / RUN_JSON} once every node's ranks are in")
    return "\n".join(lines)


def _unprofiled_steps(run: RunRecord) -> int | None:
    times = run.unprofiled_steps_ms
    return run.unprofiled_steps or (len(times) if times else run.steps)


def _spread_text(run: RunRecord) -> str:
    spread = run.unprofiled_spread_ms
    if spread is None or len(spread) != 4:
        return ""
    return f", half of them {spread[1]:.2f}–{spread[2]:.2f} ms (all {spread[0]:.2f}–{spread[3]:.2f})"


def print_failure(result: RunResult, stream: Any = None) -> None:
    """The model's traceback (or the worker's crash report), then one last line `error: ...`."""
    stream = stream or sys.stderr
    if result.traceback:
        stream.write(result.traceback.rstrip("\n") + "\n")
    stream.write(error_line(result.message) + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {RUNNER_MODULE}", description="Profile one model run in a fresh worker.")
    add_run_arguments(p)
    p.add_argument("--jsonl", action="store_true", help="print JSON lines (progress, error, done) for the GUI")
    args = p.parse_args(argv)

    def emit(event: Event) -> None:
        if args.jsonl:
            try:
                print(encode_event(event).decode("utf-8"), flush=True)
            except OSError:  # the window is gone (a broken pipe): the run goes on to its cleanup
                pass

    with stop_on_signals() as cancel:  # SIGTERM (the GUI's cancel) and SIGINT stop the run, never raise
        stop_with_parent(cancel)  # the window's run stops when the window dies
        result = run_profile(request_from_args(args), emit, cancel)
    if result.ok:
        assert result.run is not None
        if args.jsonl:
            emit(DoneEvent(out=str(result.out), run=result.run))
        else:
            print(format_summary(result.run, result.out))
            for warning in result.run.warnings or []:
                print(f"warning: {warning}")
            for note in result.notes:
                print(f"note: {note}")
        return EXIT_OK
    if args.jsonl:
        emit(ErrorEvent(message=result.message or "the run failed", traceback=result.traceback))
    print_failure(result)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
