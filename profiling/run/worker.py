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
RANK, LOCAL_RANK, WORLD_SIZE from torch.distributed.run): see `_rank_main`. Its process group
(gloo on CPU, nccl on CUDA with rank r on cuda:(local rank)) is initialised before the model is
built; it writes into OUT/rank-R; it times exactly --steps unprofiled steps (ranks step together),
and every rank warms up the same number of steps: each warm-up step the ranks all-reduce whether
each has settled or hit a cap (one small collective between steps, on the default group, in the
same order on every rank), and stop together.
A model file's `train_step(model, inputs)`, when it has one, is each step (see LoadedModel.train_step).

Dying with the runner: before anything else the worker asks the kernel for SIGKILL when its parent
dies (PR_SET_PDEATHSIG) and checks its parent is still the runner ($BRANCHSCOPE_RUNNER_PID). Processes
the model starts would survive that, so a worker that leads its own process group (the runner starts
it so) forks a tiny reaper first: it waits, blocked in sigwait, for its own death signal, sent when
the worker dies, and then SIGKILLs every process carrying the run's token (those that left the group
too, see branchscope.profiling.run.processes) and the whole group. Being a separate single-threaded process, it
works even while the worker's main thread is stuck in native code. Before all that, the worker joins the
run's cgroup when the runner made one ($BRANCHSCOPE_RUN_CGROUP): what the model starts and that drops
both the group and the token is in it, and the cgroup's watchdog empties it when the runner dies.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

import msgspec

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.branch_pool import BranchPool, gil_enabled, python_version
from branchscope.profiling.run.cpu_sampler import ThreadCensus, read_thread_names, settle_interop_pool
from branchscope.profiling.run.folder import FAILURE_FILES, describe_os_error
from branchscope.profiling.run.modes import ModeUnavailable, mode_named
from branchscope.profiling.run.processes import (
    LAUNCHER_PID_ENV,
    join_run_cgroup,
    kill_processes_with_token,
    set_death_signal,
)
from branchscope.profiling.run.protocol import (
    EVENTS_DIR_ENV,
    EXIT_FAILED,
    EXIT_MODE,
    EXIT_OK,
    RANK_EVENTS,
    RANK_FOLDER,
    RANK_SAMPLING,
    RANK_SAMPLING_WAIT_S,
    RUN_TOKEN_ENV,
    RUNNER_PID_ENV,
    WORKER_MODULE,
    add_run_arguments,
    step_label,
)
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT as EXIT_BAD_MODEL
from branchscope.profiling.run.runner import write_json_atomic, write_record_atomic
from branchscope.profiling.run.steady import CAP_SECONDS, CAP_STEPS, run_warnings, warm_up
from branchscope.profiling.trace.prediction import (
    FROM_MEASURED,
    FROM_PROFILED,
    StepSamples,
    branch_times_from_trace,
    predict_from,
)
from branchscope.profiling.trace.records import (
    BASELINE_MODE,
    RUN_FORMAT,
    RUN_JSON,
    BranchRecord,
    BranchThreadRecord,
    EndedEvent,
    ErrorEvent,
    Event,
    ExitedEvent,
    FinishedEvent,
    HelloEvent,
    LeftOutRecord,
    PhaseEvent,
    PredictionRecord,
    ProgressEvent,
    RunRecord,
    TraceClock,
    encode_event,
    to_builtins,
)
from branchscope.profiling.trace.step_stats import StepStats

#: The timed (unprofiled) phase: at least --steps steps, and up to TIMED_MIN_STEPS of them unless
#: TIMED_BUDGET_S of timed steps have passed, at most TIMED_MAX_STEPS (see `timed_steps`).
TIMED_MIN_STEPS = 20
TIMED_BUDGET_S = 2.0
TIMED_MAX_STEPS = 200


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


class RunFailure(Exception):
    def __init__(self, exit_code: int, message: str, tb: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.tb = tb


def _die_with_parent() -> None:
    """SIGKILL this worker when the runner dies, and its process group with it (see the module docstring)."""
    join_run_cgroup()  # first: everything started from here on stays in the run's cgroup
    expected = os.environ.get(RUNNER_PID_ENV, "")
    if set_death_signal(signal.SIGKILL) and expected.isdigit() and os.getppid() != int(expected):
        os._exit(EXIT_FAILED)  # the runner died before the request took effect: nobody waits for this run
    if os.getpgrp() == os.getpid():  # leads its own group (never when run by hand in a shell's group)
        _start_group_reaper(os.getpid())


def _start_group_reaper(worker: int, also: tuple[str, ...] = (), ended: tuple[Path, int] | None = None) -> None:
    """Forks the reaper (single-threaded here: nothing has started a thread yet); `also`: the
    environment entries that, beside the run's token, mark the processes it kills (one rank's);
    `ended`: (events file, rank) where it says `{"event": "ended", "rank", "t"}` once `worker` is gone
    (how a rank whose watching process was killed is told apart from ranks stopped after it)."""
    if os.fork() != 0:
        return
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # never hold the runner's end of the protocol pipe open
        os.closerange(3, 1024)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        stopped = False
        if set_death_signal(signal.SIGTERM) and os.getppid() == worker:
            # The worker died (the kernel sends the death signal as from the dying parent: si_pid is
            # the worker's), or someone signalled the group to stop (the launcher: its pid).
            stopped = signal.sigwaitinfo({signal.SIGTERM}).si_pid != worker
        if ended is not None:
            with open(ended[0], "ab") as f:
                f.write(encode_event(EndedEvent(rank=ended[1], t=time.monotonic(), stopped=stopped)) + b"\n")
        token = os.environ.get(RUN_TOKEN_ENV)
        if token:  # what the model started and that left the group (a daemon)
            kill_processes_with_token(token, also=also)
        os.killpg(worker, signal.SIGKILL)  # the worker, what the model started, and this reaper
    except BaseException:  # noqa: BLE001 - the reaper must never return into the worker's code
        code = 1
    os._exit(code)


def _pool_tids_from_trace(trace: dict[str, Any]) -> list[int]:
    """Threads the profiler names PTThreadPool: the pool where /proc cannot tell (OpenMP workers
    never run profiled ops, so they are seldom among them)."""
    tids = set()
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "M" and ev.get("name") == "thread_name" and isinstance(ev.get("tid"), int):
            if "PTThreadPool" in str(ev.get("args", {}).get("name", "")):
                tids.add(ev["tid"])
    return sorted(tids)


def _name_threads(trace: dict[str, Any], names: dict[int, str]) -> None:
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


def _trace_clock(trace: dict[str, Any]) -> dict[str, Any]:
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


def _exported_trace(prof: Any, raw: Path) -> dict[str, Any]:
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


def _write_trace(path: Path, trace: dict[str, Any]) -> None:
    """Uncompressed JSON with "traceEvents" last, so the file ends with the array's `]}` (see the runner)."""
    ordered = {k: v for k, v in trace.items() if k != "traceEvents"}
    ordered["traceEvents"] = trace.get("traceEvents", [])
    write_json_atomic(path, ordered)


def _resolve_device(torch: Any, requested: str) -> str:
    """"cpu" or "cuda:N" (made the current CUDA device, so synchronize() and the like use it)."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested != "cuda" and not (requested.startswith("cuda:") and requested[5:].isdigit()):
        raise RunFailure(EXIT_BAD_MODEL, f"--device {requested!r} is not one of: auto, cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise RunFailure(EXIT_MODE, f"--device {requested} needs CUDA, and torch sees no CUDA device here")
    count = torch.cuda.device_count()
    index = int(requested[5:]) if ":" in requested else torch.cuda.current_device()
    if index >= count:
        raise RunFailure(
            EXIT_MODE, f"--device {requested}: torch sees only {count} CUDA device(s) here (cuda:0 to cuda:{count - 1})"
        )
    torch.cuda.set_device(index)
    return f"cuda:{index}"


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


class _Phases:
    """Seconds of each phase of a run, in the order they ran (run.json's "phase_seconds"): `end(NAME)`
    ends the phase that began where the previous one ended (or where this was made); a phase ended
    twice adds up."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._since = clock()

    def end(self, name: str) -> None:
        now = self.clock()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._since, 4)
        self._since = now


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed run (torch.distributed.run's RANK, LOCAL_RANK, WORLD_SIZE)."""

    rank: int
    local_rank: int
    world_size: int


def run(args: argparse.Namespace, proto: _Protocol, dist: RankInfo | None = None) -> RunRecord:
    phases = _Phases()
    import torch

    # First torch calls of the process: the inter-op pool size can be set only before it starts.
    torch.set_num_interop_threads(args.interop)
    torch.set_num_threads(args.intra)
    main_tid = threading.get_native_id()

    from branchscope.profiling.run.plans import start_intra_op_team

    # Which thread is which, taken as torch starts them (see ThreadCensus): the threads there now
    # (torch's pthreadpool among them) are other threads; then the main thread's OpenMP team; then,
    # where the plan forks, the inter-op pool, started by a fork that does no OpenMP work.
    mode = mode_named(args.mode)
    if mode.check is not None and (why := mode.check()):
        raise RunFailure(EXIT_MODE, why)
    census = ThreadCensus(main_tid, args.interop)
    start_intra_op_team(args.intra)
    census.note("intra")
    # threads mode's own pool measures the branches its threads run (see branch_pool); torch's cannot.
    pool: BranchPool | None = None
    if mode.start_pool is not None:
        started = mode.start_pool(args.interop)
        pool = started if isinstance(started, BranchPool) else None
        census.note("interop")
    phases.end("start")
    proto.emit(PhaseEvent(phase="load"))

    from branchscope.profiling.run.branches import find_branches
    from branchscope.profiling.run.model_source import (
        demo_info,
        user_traceback,
    )
    from branchscope.profiling.run.plans import max_abs_diff

    if dist is None:
        device = _resolve_device(torch, args.device)
    elif args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()):
        device = "cpu"
    else:  # rank r on cuda:(local rank)
        device = _resolve_device(torch, f"cuda:{dist.local_rank}")
    if mode.needs_cuda and not device.startswith("cuda"):
        raise RunFailure(EXIT_MODE, f"{mode.title} needs CUDA: this machine has no CUDA device torch can use")
    backend = None
    if dist is not None:  # before build_model(), so that a model file may use torch.distributed freely
        backend = "nccl" if device.startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend=backend)

    loaded = load_requested_model(args, device)
    census.note(main_named_are_intra=False)  # CUDA starts its threads here, named like the main thread
    phases.end("load")

    user_file = demo_info(args.demo).path if args.demo else Path(args.model)
    is_cuda = device.startswith("cuda") or any(t.is_cuda for t in loaded.tensors())

    # The chosen device (made current by _resolve_device), and any other the inputs live on (a demo
    # needing several GPUs puts them on cuda:0 whatever --device says).
    sync_devices = (
        sorted({torch.cuda.current_device()} | {t.device.index for t in loaded.tensors() if t.is_cuda})
        if is_cuda
        else []
    )

    def sync() -> None:
        for index in sync_devices:
            torch.cuda.synchronize(index)

    def call(fn: Any, what: str) -> Any:
        try:
            with torch.no_grad():
                return fn(*loaded.inputs, **loaded.kwargs)
        except (Exception, SystemExit) as exc:  # sys.exit() in the model is a model error like any other
            tb = user_traceback(exc, user_file) if user_file.suffix == ".py" else traceback.format_exc()
            if isinstance(exc, SystemExit):
                raise RunFailure(EXIT_BAD_MODEL, f"the model called sys.exit({exc.code!r}) while {what}", tb) from None
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RunFailure(EXIT_BAD_MODEL, f"the model raised {type(exc).__name__} while {what}: {first}", tb) from exc

    # The model's own forward first: a model that raises is a model error in every mode, before
    # branch discovery or a plan could fail on it for another reason.
    expected = call(loaded.model, "running its forward")
    phases.end("forward")
    analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs, grad=loaded.train_step is not None)
    phases.end("discovery")
    try:
        plan = mode.build_plan(loaded.model, analysis, device)
    except ModeUnavailable as exc:
        for name, text in exc.files.items():  # the runner keeps them in OUT/failed-run/
            if name in FAILURE_FILES:
                (args.out / name).write_text(text, encoding="utf-8")
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    if plan.source:
        (args.out / "plan.py").write_text(plan.source, encoding="utf-8")
    phases.end("plan")

    actual = call(plan, f"running the {args.mode} plan")
    sync()
    diff = max_abs_diff(expected, actual)
    del expected, actual
    phases.end("check")

    def train(what: str) -> None:
        """The file's train_step on the mode's module, with grad (see LoadedModel.train_step)."""
        try:
            with torch.enable_grad():
                loaded.train_step(plan.module, loaded.example)
        except (Exception, SystemExit) as exc:
            tb = user_traceback(exc, user_file) if user_file.suffix == ".py" else traceback.format_exc()
            if isinstance(exc, SystemExit):
                raise RunFailure(EXIT_BAD_MODEL, f"train_step called sys.exit({exc.code!r}) while {what}", tb) from None
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RunFailure(EXIT_BAD_MODEL, f"train_step raised {type(exc).__name__} while {what}: {first}", tb) from exc

    def one(what: str) -> Any:
        """One step; its output (None for a train_step), which the caller drops."""
        if loaded.train_step is not None:
            train(what)
            return None
        return call(plan, what)

    def warm() -> None:
        one("warming up")
        sync()

    def agree(settled_here: bool, cap_here: str | None) -> tuple[bool, str | None]:
        """Ranks warm up together (see steady.warm_up): stop when all settled or any hit a cap."""
        flags = torch.tensor(
            [not settled_here, cap_here == CAP_STEPS, cap_here == CAP_SECONDS], dtype=torch.int64, device=device
        )
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        unsettled, steps_cap, seconds_cap = (bool(x) for x in flags.tolist())
        return not unsettled, CAP_STEPS if steps_cap else CAP_SECONDS if seconds_cap else None

    proto.emit(PhaseEvent(phase="warmup"))
    warmup = warm_up(warm, args.warmup, agree=None if dist is None else agree)
    phases.end("warmup")

    def step() -> None:
        one("running a step")
        sync()

    proto.emit(PhaseEvent(phase="timing"))
    # Ranks step together (collectives): each times the same number of steps, never "as many as fit".
    unprofiled = timed_steps(step, args.steps) if dist is None else timed_steps(step, args.steps, budget_s=0.0)
    # OpenMP workers of pool threads started with the plan's first run (on CUDA, threads named like
    # the main thread are more likely CUDA's: its team started before the model was loaded).
    census.note(main_named_are_intra=not is_cuda)

    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda else [])
    steps_ms: list[float] = []
    phases.end("timing")  # with importing the profiler
    if pool is not None:
        pool.reset_times()
        pool.measuring = True  # each pool thread measures the branches it runs (see branch_pool)
    with profile(
        activities=activities, record_shapes=True, profile_memory=True, **profiler_threads(torch, mode)
    ) as prof:
        census.note("other")  # the profiler's own threads
        proto.emit(PhaseEvent(phase="profile"))  # after the profiler's (slow) start
        proto.wait_until_sampled()  # a rank of a distributed run: until the runner samples its threads
        for i in range(1, args.steps + 1):
            t0 = time.perf_counter()
            with record_function(step_label(i)):
                output = one(f"profiling step {i}")
                sync()
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
    census.note(main_named_are_intra=not is_cuda)
    if pool is not None:
        pool.measuring = False
    gil = gil_enabled()
    branch_threads = (
        [
            BranchThreadRecord(
                tid=t.tid,
                calls=t.calls,
                wall_ms=round(t.wall_ns / 1e6, 4),
                cpu_ms=round(t.cpu_ns / 1e6, 4),
                core_wait_ms=round(t.core_wait_ns / 1e6, 4),
                gil_wait_ms=round(t.gil_wait_ns / 1e6, 4),
            )
            for t in pool.times()
        ]
        if pool is not None and gil
        else None
    )
    phases.end("profile")
    proto.emit(PhaseEvent(phase="export"))  # the runner stops sampling the threads here

    # The prediction's sequential per-branch times: a sequential run's own profiled steps (from its
    # trace, below); any other mode measures the model's own forward here (`branch_timing`).
    measured = None
    if args.mode != BASELINE_MODE and analysis.regions:
        from branchscope.profiling.run.branch_timing import MAX_STEPS, MIN_STEPS, measure_branch_times

        def own_step() -> None:
            if loaded.train_step is None:
                call(loaded.model, "measuring its branches for the prediction")
                return
            with torch.enable_grad():
                loaded.train_step(loaded.model, loaded.example)

        n = min(MAX_STEPS, max(MIN_STEPS, args.steps))
        try:
            measured = measure_branch_times(loaded.model, analysis, own_step, n, sync)
        except Exception as exc:  # noqa: BLE001 - the run's results stand; the prediction is left out, said why
            analysis.notes.append(f"no prediction: measuring the branches failed: {type(exc).__name__}: {exc}".splitlines()[0])
        phases.end("prediction")

    trace = _exported_trace(prof, args.out / "trace.raw.json")
    census.note("other")

    threads = {**census.names, **read_thread_names()}
    _name_threads(trace, threads)
    interop, intra = census.interop_tids, census.intra_tids
    if not census.names:  # no /proc here: no census
        interop = _pool_tids_from_trace(trace)
    cores = usable_cores()
    branches = analysis.to_json()
    device_label = device if not is_cuda else f"{device} ({torch.cuda.get_device_name()})"
    trace["branchscope"] = {
        "mode": args.mode,
        "interop": args.interop,
        "intra": args.intra,
        "cores": cores,
        "device": device_label,
        "main_tid": main_tid,
        "interop_tids": interop,
        "intra_tids": intra,
        "branches": branches,
        "left_out": [x.to_json() for x in analysis.left_out],
        "model": loaded.label,
        "source": loaded.kind,
        "python": python_version(),
        "gil": gil,
    }
    if branch_threads is not None:
        trace["branchscope"]["branch_threads"] = [msgspec.to_builtins(t) for t in branch_threads]
    prediction = None
    if plan.marks is not None and plan.marks.unmatched_steps:
        analysis.notes.append(
            f"no prediction: the model's module calls did not match its graph's in {plan.marks.unmatched_steps} of "
            f"{plan.marks.steps} steps (its forward took another path), so its branch marks cannot be trusted"
        )
    else:
        prediction = _prediction(args.mode, branches, trace, measured)
    if prediction is not None:
        trace["branchscope"]["prediction"] = to_builtins(prediction)
    ranked: dict[str, Any] = {}
    if dist is not None:
        ranked = {"rank": dist.rank, "local_rank": dist.local_rank, "world_size": dist.world_size, "backend": backend}
        trace["branchscope"].update(ranked)
    _write_trace(args.out / "trace.json", trace)
    phases.end("export")

    profiled_stats, unprofiled_stats = StepStats.of(steps_ms), StepStats.of(unprofiled)
    assert profiled_stats is not None and unprofiled_stats is not None  # K >= 1 steps of each
    median, unprofiled_median = profiled_stats.median, unprofiled_stats.median
    return RunRecord(
        format=RUN_FORMAT,
        mode=args.mode,
        plan_by=mode.plan_title,
        interop=args.interop,
        intra=args.intra,
        cores=cores,
        device=device_label,
        torch=str(torch.__version__),
        python=python_version(),
        python_executable=sys.executable,
        gil=gil,
        branch_threads=branch_threads,
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
        warmup_steps=len(warmup.times_ms),
        warmup_steps_ms=[round(x, 4) for x in warmup.times_ms],
        warmup_settled=warmup.settled,
        warmup_cap=warmup.cap,
        phase_seconds=phases.seconds,
        tracer_seconds={tracer: round(s, 4) for tracer, s in analysis.tracer_seconds.items()},
        plan_build_seconds=None if plan.build_s is None else round(plan.build_s, 4),
        plan_compile_seconds=None if plan.compile_s is None else round(plan.compile_s, 4),
        warnings=run_warnings(warmup, unprofiled, steps_ms),
        branches=[BranchRecord(**b) for b in branches],
        regions=len({b["region"] for b in branches}),
        max_abs_diff=diff,
        main_tid=main_tid,
        interop_tids=interop,
        intra_tids=intra,
        threads_applied={"interop": torch.get_num_interop_threads(), "intra": torch.get_num_threads()},
        pid=os.getpid(),
        threads={str(tid): name for tid, name in sorted(threads.items())},
        fx_error=analysis.fx_error,
        tracer=analysis.tracer,
        tracer_errors=analysis.tracer_errors,
        notes=analysis.notes,
        left_out=[LeftOutRecord(**x.to_json()) for x in analysis.left_out],
        prediction=prediction,
        plan="plan.py" if plan.source else None,
        trace="trace.json.gz",
        trace_clock=TraceClock(**_trace_clock(trace)),
        train_step=loaded.train_step is not None,
        **ranked,
        complete=True,
    )


def load_requested_model(args: argparse.Namespace, device: str) -> Any:
    """The model the worker's arguments name (--demo or --model, a TorchScript archive's input
    shapes and dtype) on `device`, as a `model_source.LoadedModel`; what fails is a RunFailure
    (a demo this machine cannot run: exit 3; a bad model or its code raising: 2). Imports torch."""
    from branchscope.profiling.run.model_source import (
        DemoUnavailableError,
        ModelCodeError,
        ModelSourceError,
        ModelSpec,
        load_model,
        parse_input_shape,
    )

    try:
        spec = ModelSpec(
            demo=args.demo,
            path=args.model,
            input_shapes=tuple(parse_input_shape(s) for s in args.input_shapes),
            dtype=args.dtype,
        )
        return load_model(spec, device)
    except DemoUnavailableError as exc:
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    except ModelSourceError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc)) from exc
    except ModelCodeError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc), exc.model_traceback) from exc


def _prediction(mode: str, branches: list[dict[str, Any]], trace: dict[str, Any], measured: StepSamples | None) -> PredictionRecord | None:
    """The run's prediction (`profiling/trace/prediction.py`): from a sequential run's profiled
    steps (its branches' annotations in its trace), or from the unprofiled sequential steps
    `measured` in the worker for any other mode; None without branches or times."""
    if not branches:
        return None
    source = FROM_MEASURED
    if mode == BASELINE_MODE:
        measured = branch_times_from_trace(trace.get("traceEvents", []))
        source = FROM_PROFILED
    if measured is None or not measured.steps_ms:
        return None
    return predict_from([BranchRecord(**b) for b in branches], measured, source=source)


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
        _rank_main(argv)
    _die_with_parent()  # first: a runner killed from here on takes this worker with it
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


def _rank_main(argv: list[str] | None) -> None:
    """One rank of a distributed run, started by torch.distributed.run (never returns).

    This process (the one the launcher started, leading its own group) dies with the launcher and
    forks the rank's reaper as the worker does (it kills this rank's processes only: the token and
    RANK=R), then forks the rank's worker, which dies with it, and waits for it: its
    `{"event": "exited", "rank", "pid", "code", "t"}` (code: the exit status, -N for signal N) tells
    the runner how the rank ended, which a launcher cannot (it sees this process, not the worker).
    """
    rank = int(os.environ.get("RANK", "0"))
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if set_death_signal(signal.SIGKILL) and launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(EXIT_FAILED)  # the launcher died before the request took effect
    events = Path(os.environ[EVENTS_DIR_ENV]) / RANK_EVENTS.format(rank=rank)
    if os.getpgrp() == os.getpid():
        _start_group_reaper(os.getpid(), also=(f"RANK={rank}",), ended=(events, rank))
    watcher = os.getpid()
    child = os.fork()
    if child == 0:
        if set_death_signal(signal.SIGKILL) and os.getppid() != watcher:
            os._exit(EXIT_FAILED)
        _rank_worker(argv, events, rank)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        with open(events, "ab") as f:
            f.write(encode_event(ExitedEvent(rank=rank, pid=child, code=code, t=time.monotonic())) + b"\n")
    except OSError:
        pass
    os._exit(code if code >= 0 else 128 - code)


def _rank_worker(argv: list[str] | None, events: Path, rank: int) -> None:
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
