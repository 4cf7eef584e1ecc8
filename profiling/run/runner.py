"""The profiling engine behind `branchscope profile` and the GUI: one worker process per run.

`run_profile(request, on_event)` checks the arguments, checks and locks the --out folder (see
branchscope.profiling.run.folder), spawns `python -I -m branchscope.profiling.run.worker` in a new process group writing into a
staging folder, forwards its progress, samples the CPU time of each of its OS threads while it
profiles, enforces the timeout, and merges the samples into trace.json.gz; only a complete run's
files are moved into OUT, run.json last. Whatever happens, every process of the run is killed before
it returns (its group, its cgroup where the system lets the runner make one, whatever carries the
run's token, orphans re-parented to the runner: see branchscope.profiling.run.processes), so nothing
is left running; the worker starts in the staging folder, whatever the caller's current folder.

The worker writes trace.json uncompressed, with "traceEvents" as its last key; the runner copies
it into trace.json.gz once, inserting the CPU-sample counter events before the array's closing
bracket, and removes trace.json: the trace is parsed once (in the worker) and compressed once.

Cancelling: `run_profile(..., cancel=flag)` polls `flag` while it waits for the worker; `main()`
(and `branchscope profile`) set it from SIGTERM/SIGINT with `stop_on_signals()`. A signal never
raises inside the engine, so the worker's group is always killed and temporary files always removed.
The worker dies with the runner even when the runner is SIGKILLed (see branchscope.profiling.run.worker; the
cgroup's watchdog then empties the run's cgroup), and a
runner started by the window ($BRANCHSCOPE_PARENT_PID) cancels its run when the window dies.

One supervisor (`_supervise`) follows a run of one worker or of N ranks (below) alike: `_OneWorker`
and `_Distributed` say only what differs (the process started, where the events come from, how a
failure is named, what OUT gets).

`python -m branchscope.profiling.run.runner ARGS [--jsonl]` is the same as a command; with --jsonl it prints one JSON
object per line for the GUI (which starts it with QProcess):
    {"event": "phase", "phase": "load" | "warmup" | "timing" | "profile" | "export"}   (as the worker starts each)
    {"event": "progress", "step": i, "of": K}
    {"event": "error", "message": ..., "traceback": ...}
    {"event": "done", "out": DIR, "run": {...run.json...}}    (only when the run succeeded)
Exit codes: 0 ok, 2 bad arguments or model, 3 mode cannot run, 4 worker died or timed out.

Distributed runs (`--nproc N`, N > 1): `python -m torch.distributed.run --nproc-per-node N
--standalone --local-addr 127.0.0.1 --max-restarts 0 --no-python` (made to die with the runner by
`branchscope.profiling.run.processes`, which execs it) starts N workers; GLOO_SOCKET_IFNAME=lo keeps
gloo on loopback. Each rank's worker appends its events to its own file in the staging folder (one
file per rank: lines never interleave) and is watched by the process the launcher started, which
reports its exit status or signal; the runner samples each rank's threads while it profiles, and the
first rank to fail names the failure (a rank killed by a signal before any rank exited with an
error, else the first to report an error): exit 2 for a model error, 4 for a death or --timeout.
OUT gets rank-R/trace.json.gz and rank-R/run.json per rank and a run.json listing the ranks (rank,
pid, device, their files) with the slowest rank's step times, step by step.

Multi-node runs (`--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`): the launcher meets the
other nodes' launchers in a c10d rendezvous instead of `--standalone` (on a loopback endpoint node 0
hosts its store and everything stays on 127.0.0.1); this node's global ranks are learnt from its
ranks' event files (c10d, not --node-rank, orders the nodes); OUT is shared by the nodes
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
import gzip
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import psutil

from branchscope.profiling.files import open_regular, read_json_object
from branchscope.profiling.run.cpu_sampler import ThreadCpuSampler
from branchscope.profiling.run.folder import RunFolder, RunFolderError, describe_os_error
from branchscope.profiling.run.interpreter import (
    TORCH_OLDEST,
    Interpreter,
    InterpreterError,
    torch_older_than_oldest,
)
from branchscope.profiling.run.interpreter import check as check_interpreter
from branchscope.profiling.run.interpreter import locate as locate_interpreter
from branchscope.profiling.run.interpreter import worker_command as interpreter_worker_command
from branchscope.profiling.run.machine_load import LoadMeter
from branchscope.profiling.run.model_source import ModelSourceError, ModelSpec, check_spec, parse_input_shape
from branchscope.profiling.run.modes import MODE_NAMES, MODES
from branchscope.profiling.run.nodes import NodeFailure, NodeFolder
from branchscope.profiling.run.options import RunOptions, is_loopback, parse_endpoint
from branchscope.profiling.run.processes import (
    PROCESSES_MODULE,
    Containment,
    stop_with_parent,
)
from branchscope.profiling.run.protocol import (
    EVENTS_DIR_ENV,
    EXIT_BAD_INPUT,
    EXIT_MODE,
    EXIT_OK,
    EXIT_WORKER,
    RANK_EVENTS,
    RANK_FOLDER,
    RANK_SAMPLING,
    RUN_TOKEN_ENV,
    RUNNER_MODULE,
    RUNNER_PID_ENV,
    WORKER_MODULE,
    RunRequest,
    add_run_arguments,
    error_line,
    python_command,
    request_from_args,
)
from branchscope.profiling.trace.gil import gil_line_of
from branchscope.profiling.trace.prediction import prediction_text
from branchscope.profiling.trace.records import (
    DEFAULT_TRACE,
    MAX_ANSWER_BYTES,
    RUN_FORMAT,
    RUN_JSON,
    DoneEvent,
    EndedEvent,
    ErrorEvent,
    Event,
    ExitedEvent,
    FinishedEvent,
    HelloEvent,
    PhaseEvent,
    ProgressEvent,
    RankRecord,
    RunRecord,
    TraceClock,
    decode_events,
    encode_event,
    encode_record,
    left_out_text,
    read_run_record,
)
from branchscope.profiling.trace.starved import STARVED_LINE
from branchscope.profiling.trace.step_stats import StepStats

#: --device values: auto (CUDA when available), cpu, cuda, cuda:N.
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")

#: Once the worker says it finished, how long it may take to exit before it is killed (results are safe).
_EXIT_GRACE_S = 10.0
#: CPU samples kept before the first and after the last traced event (µs).
_SAMPLE_MARGIN_US = 20_000.0


@dataclass
class RunResult:
    exit_code: int
    out: Path
    #: run.json when the run succeeded.
    run: RunRecord | None = None
    #: One line saying what went wrong (printed after "error: ").
    message: str | None = None
    #: The model's traceback, or the worker's crash report, to show above the message.
    traceback: str | None = None
    samples: int = 0
    notes: list[str] = field(default_factory=list)
    #: The signal that cancelled the run (see CancelFlag), if one did.
    cancelled_by: int | None = None
    #: The worker's Python (--python), as its probe found it; None: this process's own.
    interpreter: Interpreter | None = None
    #: What a worker other than the profiling one gave (`run_profile(layout=…)`: the paired worker's
    #: step times, a `records.PairedTimesRecord`); None for a profiling run.
    payload: msgspec.Struct | None = None
    #: When the rank that failed first failed (wall clock, `time.time()`): a multi-node run's nodes
    #: compare theirs to tell whose failure came first.
    failed_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


class RunError(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CancelFlag:
    """Set (from a signal handler or another thread) to stop a run; `run_profile` polls it."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def set(self, signum: int = signal.SIGTERM) -> None:
        self.signum = int(signum)

    def is_set(self) -> bool:
        return self.signum is not None


@contextmanager
def stop_on_signals(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[CancelFlag]:
    """Within the block, these signals set the flag instead of raising (main thread only)."""
    flag = CancelFlag()
    previous = {signum: signal.signal(signum, lambda num, _frame: flag.set(num)) for signum in signums}
    try:
        yield flag
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, gz: bool = False) -> None:
    """Writes `path` through `write(file)` into PATH.tmp, then renames it: readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with gzip.open(tmp, "wb", compresslevel=3) if gz else open(tmp, "wb") as f:
            write(f)  # type: ignore[arg-type]
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_record_atomic(path: Path, record: msgspec.Struct) -> None:
    """A record (run.json, sweep.json) as branchscope writes it (`records.encode_record`), atomically."""
    write_atomic(path, lambda f: f.write(encode_record(record)))


def write_json_atomic(path: Path, data: Any, indent: int | None = None) -> None:
    write_atomic(path, lambda f: f.write(json.dumps(data, indent=indent).encode("utf-8")))


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


def worker_command(req: RunRequest, out: Path) -> list[str]:
    """The worker's command line; it writes into `out` (the run folder's staging folder). Under
    --python's interpreter, through `interpreter.BOOTSTRAP` (branchscope is not installed there)."""
    argv = replace(req, out=out).argv(worker=True)
    if req.options.python is not None:
        return interpreter_worker_command(locate_interpreter(req.options.python), argv)
    return python_command(WORKER_MODULE) + argv


def _worker_python(req: RunRequest) -> str:
    """The Python the worker (and a distributed run's launcher) runs under."""
    return str(locate_interpreter(req.options.python)) if req.options.python is not None else sys.executable


def _worker_env(req: RunRequest, token: str) -> dict[str, str]:
    env = dict(os.environ)
    # OpenMP/MKL size their pools from these at start-up; numpy's BLAS pool is not torch's and would
    # only add idle threads to the samples.
    env["OMP_NUM_THREADS"] = str(req.intra)
    env["MKL_NUM_THREADS"] = str(req.intra)
    env["OPENBLAS_NUM_THREADS"] = "1"
    env[RUNNER_PID_ENV] = str(os.getpid())
    env[RUN_TOKEN_ENV] = token  # inherited by whatever the model starts (see branchscope.profiling.run.processes)
    return env


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class _LineReader:
    """JSON-line events from the worker's protocol pipe, read without ever blocking past a timeout.

    A process the model daemonised can hold the pipe's write end open long after the worker is gone,
    so the runner never waits for end-of-file: it reads what is there, and stops reading once the
    worker has exited and the pipe is drained.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.open = True
        self._buf = b""

    def read(self, timeout: float) -> list[Event]:
        """Events that arrive within `timeout` seconds (as soon as some do)."""
        if not self.open:
            time.sleep(timeout)
            return []
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        return self.drain() if ready else []

    def drain(self) -> list[Event]:
        """Everything readable now, without waiting."""
        while self.open:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.open = False
                self._buf += b"\n"
                break
            self._buf += chunk
            if len(self._buf) > MAX_ANSWER_BYTES and b"\n" not in self._buf:
                self._buf = b""
        *lines, self._buf = self._buf.split(b"\n")
        return decode_events(lines)


def _tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last lines of a log, reading at most its last `max_bytes` (a model may print gigabytes)."""
    try:
        with open(open_regular(path), "rb") as f:  # the model could leave a FIFO there: never blocks
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line read is probably cut
    return "\n".join(text[-lines:])


def why_incomplete(path: Path, complete: Callable[[dict[str, Any]], bool]) -> str:
    """Why a child's final record at `path` is no complete record (`complete` says of the object),
    in words that follow "…said it finished, but"."""
    try:
        obj = read_json_object(path, follow_symlinks=False)
    except (OSError, ValueError) as exc:  # missing, not a regular file, too large, not JSON, too deep
        return f"its final record is unreadable ({exc})"
    if not complete(obj):
        return f"its final record is malformed ({path}: no complete record of branchscope's)"
    return f"its final record changed while it was read ({path})"


def _complete_run(folder: Path) -> RunRecord | None:
    run = read_run_record(folder, follow_symlinks=False)
    return run if run is not None and run.complete else None


def _array_close(f: BinaryIO, size: int) -> tuple[int, bool]:
    """Offset of the `]` that closes "traceEvents" (the last key, so the file ends `]}`), and whether the array is empty."""
    f.seek(max(0, size - 256))
    tail = f.read()
    body = tail.rstrip()
    if not body.endswith(b"}") or not body[:-1].rstrip().endswith(b"]"):
        raise ValueError("the worker's trace.json does not end with its traceEvents array")
    body = body[:-1].rstrip()
    return size - len(tail) + len(body) - 1, body[:-1].rstrip().endswith(b"[")


def finish_trace(out: Path, sampler: ThreadCpuSampler, clock: TraceClock | None) -> int:
    """Writes OUT/trace.json.gz from the worker's OUT/trace.json plus the CPU samples; returns how many.

    `clock` is run.json's "trace_clock": the trace's baseTimeNanoseconds and the span of its events
    (µs), so the samples go on the trace's clock and only those over the profiled time (and a margin)
    are kept, without parsing the trace again. The events are inserted as text before the
    traceEvents array's closing bracket; the uncompressed trace.json is removed once the .gz exists.
    """
    src = out / "trace.json"
    clock = clock or TraceClock()
    base = clock.base_time_ns
    events = sampler.to_counter_events(int(base)) if base is not None else []
    lo, hi = clock.first_us, clock.last_us
    if lo is not None and hi is not None:
        events = [e for e in events if lo - _SAMPLE_MARGIN_US <= e["ts"] <= hi + _SAMPLE_MARGIN_US]
    with open(src, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        close, empty = _array_close(f, size)

        def write(gz: BinaryIO) -> None:
            f.seek(0)
            left = close
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    raise ValueError("trace.json changed while it was being compressed")
                gz.write(chunk)
                left -= len(chunk)
            if events:
                gz.write(b"" if empty else b", ")
                gz.write(", ".join(json.dumps(e) for e in events).encode("utf-8"))
            gz.write(f.read())  # "]}" and whatever followed

        write_atomic(out / "trace.json.gz", write, gz=True)
    src.unlink()
    return len(events)


def run_profile(
    req: RunRequest,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
    layout: Callable[[RunRequest, Path], _OneWorker] | None = None,
) -> RunResult:
    """Runs one profiling run to the end; never raises for a failed run (see RunResult.exit_code).

    `on_event` receives the worker's phase and progress events (`PhaseEvent`, `ProgressEvent`) as
    they come (a distributed run's: rank 0's).
    Once `cancel` is set the worker's group is killed and the result says so (exit code 128 + signal).
    The results reach `req.out` only when the run succeeded (see branchscope.profiling.run.folder).
    `layout`: another worker than the profiling one, started and supervised the same way (a
    `_OneWorker` subclass saying its command, its result and what it commits: `run/paired.py`).
    """
    out = Path(req.out)
    try:
        python = validate(req)
    except RunError as exc:
        return RunResult(exc.exit_code, out, message=str(exc))
    if cancel is not None and cancel.is_set():
        return _cancelled(out, cancel)
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
            chosen = _Distributed(req, folder.staging) if opts.nproc > 1 or multi else _OneWorker(req, folder.staging)
        if isinstance(folder, NodeFolder) and isinstance(chosen, _Distributed):
            chosen.nodes = folder
            chosen.cancel = cancel
        result = _supervise(folder, req, chosen, on_event, cancel)
        if isinstance(folder, NodeFolder) and not result.ok and result.cancelled_by is None:
            result.message = folder.failed(result.message or "the run failed", result.exit_code, failed_at=result.failed_at)
        result.interpreter = python
        if python is not None and result.ok:
            result.notes.append(f"the worker ran under {python.describe()}")
            if torch_older_than_oldest(python.torch):
                result.notes.append(f"torch {python.torch} is older than {TORCH_OLDEST}, the oldest branchscope is meant for")
        return result
    except OSError as exc:  # the disk filled up, the folder went away: the run fails, DIR stays as it was
        return RunResult(EXIT_WORKER, out, message=f"could not write the results to {out}: {describe_os_error(exc)}")
    finally:
        folder.close()


# ---------------------------------------------------------------- one supervisor for N ranks (1 included)


@dataclass
class _Rank:
    """One rank of a run (a single worker is rank 0) and what its events said."""

    rank: int
    pid: int | None = None
    phase: str | None = None
    sampler: ThreadCpuSampler | None = None
    error: ErrorEvent | None = None
    finished: bool = False
    #: Its exit status (or -signal) and when, once the rank's worker ended.
    exited: ExitedEvent | None = None
    #: When its first process (the one the launcher started) was gone, said by its reaper, and
    #: whether the reaper was woken by a signal to the rank's group (stopped by the launcher).
    ended: float | None = None
    stopped: bool = False
    #: The monotonic time of its first failure (an error, a death).
    failed_at: float | None = None


#: Once a rank failed, how long the others' events are still read (to tell the first failure).
_FAILURE_SETTLE_S = 1.0


class _OneWorker:
    """What differs between one worker and N ranks (`_Distributed` overrides it): the process the
    runner starts, where the ranks' events come from (one list per rank), what the runner says of the
    ranks itself, how a failure is named and what OUT gets. `_supervise` does the rest for both.

    `--nproc 1`: the process started is the worker, rank 0: its events come on its stdout (see
    `_LineReader`); its pid and exit status are the process's, said by the runner; OUT gets its files."""

    #: The process's stdout: a pipe for the events, or None (into the log).
    stdout: int | None = subprocess.PIPE

    def __init__(self, req: RunRequest, stage: Path) -> None:
        self.req, self.stage = req, stage
        self.nproc = req.options.nproc

    def command(self) -> list[str]:
        return worker_command(self.req, self.stage)

    def env(self, token: str) -> dict[str, str]:
        return _worker_env(self.req, token)

    def bind(self, ranks: list[_Rank]) -> None:
        """The ranks as the supervisor follows them (a multi-node run numbers them once the rendezvous has)."""

    def sampling(self, rank: _Rank) -> None:
        """The runner samples `rank`'s threads from now on (a worker on the pipe needs no word of it)."""

    def started(self, proc: subprocess.Popen[bytes]) -> list[list[Event]]:
        """Once the process runs: starts reading the events; returns what the runner knows of the
        ranks before they say anything."""
        assert proc.stdout is not None
        self.pipe, self.lines = proc.stdout, _LineReader(proc.stdout.fileno())
        return [[HelloEvent(pid=proc.pid)]]

    def read(self, timeout: float) -> list[list[Event]]:
        """The events that arrive within `timeout` seconds (as soon as some do, where that can be told)."""
        return [self.lines.read(timeout)]

    def drain(self) -> list[list[Event]]:
        """Every event there now, without waiting; then `close`."""
        return [self.lines.drain()]

    def close(self) -> None:
        self.pipe.close()

    def ended(self, proc: subprocess.Popen[bytes], t: float) -> list[list[Event]]:
        """What the runner knows of the ranks once the process it started has ended (at `t`, if it
        ended on its own)."""
        return [[ExitedEvent(pid=proc.pid, code=proc.returncode, t=t)]] if proc.returncode is not None else []

    def folder(self, rank: int) -> Path:
        """Where rank `rank` writes its results, in the staging folder."""
        return self.stage

    def name(self, rank: _Rank, *, pid: bool = False) -> str:
        return "the worker"

    def error_message(self, rank: _Rank, message: str) -> str:
        return message

    def timed_out(self, ranks: list[_Rank]) -> str:
        return f"the worker ran past --timeout {self.req.options.timeout:g} s and was stopped"

    def ended_early(self, proc: subprocess.Popen[bytes], ranks: list[_Rank], runs: list[RunRecord | None]) -> str:
        return f"the worker died ({_describe_exit(proc.returncode)}) before writing its results"

    def trace_failed(self, rank: _Rank, exc: ValueError) -> str:
        return f"could not write {Path(self.req.out) / DEFAULT_TRACE}: {exc}"

    def record(self, ranks: list[_Rank], runs: list[RunRecord]) -> RunRecord:
        """The run.json committed to OUT (last), once each rank's trace is written."""
        return runs[0]

    def result(self, rank: int) -> Any:
        """What rank `rank` left in its folder once it ended: its complete run.json, or None."""
        return _complete_run(self.folder(rank))

    def why_incomplete(self, rank: int) -> str:
        """Why `result(rank)` is None although the rank said it finished (its answer is malformed)."""
        return why_incomplete(self.folder(rank) / RUN_JSON, lambda obj: RunRecord.parse(obj).complete)

    def commit(
        self, folder: RunFolder, ranks: list[_Rank], results: list[Any], load: LoadMeter | None = None
    ) -> RunResult:
        """Every rank's `result` complete: OUT gets the run (`_commit`), with the machine's load."""
        return _commit(folder, self, ranks, results, load)


def _supervise(
    folder: RunFolder,
    req: RunRequest,
    layout: _OneWorker,
    on_event: Callable[[Event], None] | None,
    cancel: CancelFlag | None,
) -> RunResult:
    """Starts the run's process (`layout`: the worker, or the launcher of N ranks) and follows it to
    the end: rank 0's phases and steps go on to `on_event`, each rank's threads are sampled while it
    profiles (on a fixed schedule), the run stops at --timeout, when `cancel` is set, when its
    process ends, a second after a rank failed (the first to fail names the failure), or once every
    rank finished and had `_EXIT_GRACE_S` to exit; then every process of the run is stopped
    (`Containment.stop`), whatever happened, and a complete run's files are committed to OUT."""
    out, stage = folder.out, folder.staging
    assert stage is not None
    log_path = stage / "worker.log"
    contained = Containment()  # the process started and all it starts, stopped together (run/processes.py)
    load = LoadMeter()  # the load average now; the cores others use while the steps are timed
    proc = _spawn(contained, layout.command(), stage, layout.env(contained.token), layout.stdout, log_path)
    watch = _Watch(layout.nproc, on_event, load, proc.pid)
    layout.bind(watch.ranks)
    watch.on_sampling = layout.sampling
    interval = req.sample_interval_ms / 1000.0
    deadline = time.monotonic() + req.options.timeout
    next_tick = time.monotonic()
    ended_at: float | None = None
    timed_out = False
    try:
        watch.handle(layout.started(proc))
        while cancel is None or not cancel.is_set():
            watch.handle(layout.read(max(0.0, next_tick - time.monotonic()) if watch.sampling() else 0.05))
            if proc.poll() is not None:
                ended_at = time.monotonic()
                break
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if watch.first_failure is not None and now - watch.first_failure > _FAILURE_SETTLE_S:
                break
            if watch.finished_at is None and all(r.finished for r in watch.ranks):
                watch.finished_at = now
            if watch.finished_at is not None and now - watch.finished_at > _EXIT_GRACE_S:
                break  # results are on disk; a worker hangs in teardown
            sampling = watch.sampling()
            if sampling and now >= next_tick:
                for r in sampling:
                    assert r.sampler is not None
                    r.sampler.sample()
                # A fixed schedule, so a late tick does not shift the later ones; after a stall, start afresh.
                next_tick = max(next_tick + interval, time.monotonic() - interval)
    finally:
        contained.stop()
        watch.handle(layout.drain())  # what the ranks said before they ended (never waits)
        layout.close()
        watch.close()
    watch.refresh_names()
    watch.handle(layout.ended(proc, ended_at if ended_at is not None else time.monotonic()))
    ranks = watch.ranks

    if cancel is not None and cancel.is_set():
        return _cancelled(out, cancel)
    runs = [layout.result(r.rank) for r in ranks]
    complete = [run for run in runs if run is not None]
    if len(complete) == len(ranks):
        return layout.commit(folder, ranks, complete, load)
    # At a timeout the runner stops every rank itself: a rank that "failed" after that was stopped.
    failure = _first_failure(ranks, before=deadline if timed_out else float("inf"))
    if failure is not None:
        result = _rank_failure(out, layout, failure, log_path)
        if failure.failed_at is not None:
            result.failed_at = time.time() - (time.monotonic() - failure.failed_at)
        kept = folder.keep_failure(layout.folder(failure.rank), result.message or "")
        if kept:
            result.message = f"{result.message} — see {' and '.join(map(str, kept))}"
        return result
    said = [r for r, run in zip(ranks, runs, strict=True) if run is None and r.finished]
    if said and not timed_out:  # it said it finished: its final record is what is wrong
        message = f"{layout.name(said[0])} said it finished, but {layout.why_incomplete(said[0].rank)}"
    else:
        message = layout.timed_out(ranks) if timed_out else layout.ended_early(proc, ranks, runs)
    return RunResult(EXIT_WORKER, out, message=message, traceback=_tail(log_path) or None)


class _Watch:
    """The ranks of a run as their events tell them; rank 0's phases and steps go on to `on_event`."""

    def __init__(
        self, nproc: int, on_event: Callable[[Event], None] | None, load: LoadMeter | None = None, pid: int | None = None
    ) -> None:
        self.ranks = [_Rank(r) for r in range(nproc)]
        self.on_event = on_event
        #: Told when a rank's threads are sampled from its "profile" phase on (the layout says so to the rank).
        self.on_sampling: Callable[[_Rank], None] | None = None
        #: The load measured from rank 0's "timing" phase to its "export" (`pid`: the process started).
        self.load, self.pid = load, pid
        #: When the runner learned of the first failure, and when every rank had finished (monotonic).
        self.first_failure: float | None = None
        self.finished_at: float | None = None

    def sampling(self) -> list[_Rank]:
        """The ranks profiling now, whose threads are sampled."""
        return [r for r in self.ranks if r.phase == "profile" and r.sampler is not None]

    def handle(self, per_rank: list[list[Event]]) -> None:
        for rank, events in zip(self.ranks, per_rank, strict=False):
            for event in events:
                self._handle(rank, event)

    def _handle(self, rank: _Rank, event: Event) -> None:
        t = event.t if event.t is not None else time.monotonic()
        if isinstance(event, HelloEvent):
            rank.pid = event.pid
            try:
                rank.sampler = ThreadCpuSampler(rank.pid)
            except (OSError, psutil.Error):
                rank.sampler = None
        elif isinstance(event, PhaseEvent):
            rank.phase = event.phase or None
            if rank.phase == "profile" and rank.sampler is not None:
                rank.sampler.sample()
            if rank.phase == "profile" and self.on_sampling is not None:
                self.on_sampling(rank)
            if rank is self.ranks[0] and self.load is not None:
                if rank.phase == "timing":
                    self.load.begin(self.pid)
                elif rank.phase == "export":
                    self.load.end(self.pid)
            if rank is self.ranks[0] and self.on_event is not None and rank.phase:
                self.on_event(PhaseEvent(phase=rank.phase))
        elif isinstance(event, ProgressEvent):
            if rank is self.ranks[0] and self.on_event is not None:
                self.on_event(ProgressEvent(step=event.step, of=event.of))
        elif isinstance(event, ErrorEvent):
            rank.error = event
            rank.failed_at = rank.failed_at or t
        elif isinstance(event, FinishedEvent):
            rank.finished = True
        elif isinstance(event, ExitedEvent):
            rank.exited = event
            if event.code != 0 and not rank.finished:
                rank.failed_at = rank.failed_at or t
        elif isinstance(event, EndedEvent):  # the rank's first process is gone (its reaper says so)
            rank.ended = t
            rank.stopped = rank.stopped or event.stopped
            if rank.exited is None and not rank.finished:  # killed itself, before it could tell how
                rank.failed_at = rank.failed_at or t
        if rank.failed_at is not None and self.first_failure is None:
            self.first_failure = time.monotonic()

    def close(self) -> None:
        for rank in self.ranks:
            if rank.sampler is not None:
                rank.sampler.close()

    def refresh_names(self) -> None:
        """Each sampled thread's name as /proc last said it (threads rename themselves)."""
        for rank in self.ranks:
            if rank.sampler is not None:
                rank.sampler.refresh_names()


def _first_failure(ranks: list[_Rank], before: float = float("inf")) -> _Rank | None:
    """The rank whose failure came first (before `before`, on the monotonic clock): a rank killed
    by a signal before any rank exited with an error (the launcher signals the others only after
    one did), else the first to report an error, else the first that died."""
    failed = [r for r in ranks if r.failed_at is not None and r.failed_at < before]
    if not failed:
        return None
    exited_with_error = [
        r.exited.t if r.exited.t is not None else float("inf") for r in failed if r.exited and r.exited.code > 0
    ]
    first_exit = min(exited_with_error, default=float("inf"))
    killed = [(t, r.rank, r) for r in failed if (t := _killed_at(r)) is not None and t < first_exit]
    if killed:
        return min(killed, key=lambda k: k[:2])[2]
    raised = [r for r in failed if r.error is not None]
    if raised:
        return min(raised, key=lambda r: r.failed_at or 0.0)
    return min(failed, key=lambda r: (r.stopped, r.failed_at or 0.0))


def _killed_at(rank: _Rank) -> float | None:
    """When a rank was killed without reporting an error: its worker by a signal (the process the
    launcher started says which), or that process itself (its reaper says when, not how)."""
    if rank.error is not None or rank.stopped:  # stopped: the launcher stopped it after another failed
        return None
    if rank.exited is None:
        return rank.ended
    code, t = rank.exited.code, rank.exited.t
    return float(t) if code < 0 and t is not None else None


def _rank_failure(out: Path, layout: _OneWorker, rank: _Rank, log_path: Path) -> RunResult:
    if rank.error is not None:
        code = rank.error.exit_code or 1
        return RunResult(
            code if code in (EXIT_BAD_INPUT, EXIT_MODE) else EXIT_WORKER,
            out,
            message=layout.error_message(rank, rank.error.message or "the worker failed"),
            traceback=rank.error.traceback or None,
        )
    status = rank.exited.code if rank.exited else None
    how = _describe_exit(status) if isinstance(status, int) else "its process under the launcher was killed"
    return RunResult(
        EXIT_WORKER,
        out,
        message=f"{layout.name(rank, pid=True)} died ({how}) before writing its results",
        traceback=_tail(log_path) or None,
    )


def _commit(
    folder: RunFolder, layout: _OneWorker, ranks: list[_Rank], runs: list[RunRecord], load: LoadMeter | None = None
) -> RunResult:
    """Every rank's results complete: each rank's trace.json.gz written with its CPU samples, then
    the run folder committed (run.json last, with the machine's `load` and, when others were busy,
    its warning)."""
    result = RunResult(EXIT_OK, folder.out)
    failed = _finish_traces(folder.out, layout, ranks, runs, result)
    if failed is not None:
        return failed
    record = layout.record(ranks, runs)
    _add_load(record, load)
    result.run = folder.commit(record)
    return result


def _finish_traces(out: Path, layout: _OneWorker, ranks: list[_Rank], runs: list[RunRecord], result: RunResult) -> RunResult | None:
    """Each rank's trace.json.gz written with its CPU samples (counted in `result`, with a note for
    a rank that ended badly after its results); a failed result when one cannot be written."""
    for rank, run in zip(ranks, runs, strict=True):
        sampler = rank.sampler
        if sampler is None:  # never said hello: an empty sampler, so the trace is still compressed
            sampler = ThreadCpuSampler(os.getpid())
            sampler.close()
        try:
            result.samples += finish_trace(layout.folder(rank.rank), sampler, run.trace_clock)
        except ValueError as exc:
            return RunResult(EXIT_WORKER, out, message=layout.trace_failed(rank, exc))
        code = rank.exited.code if rank.exited else None
        if code not in (0, None, -signal.SIGKILL):
            result.notes.append(f"{layout.name(rank)} ended with {_describe_exit(code)} after writing complete results")
    return None


def _load_lines(run: RunRecord) -> list[str]:
    """The summary's lines of the machine's load, and whether the run was starved of cores."""
    lines = [] if run.load is None else [run.load.text()]
    return lines + ([STARVED_LINE] if run.starved else [])


def _add_load(record: RunRecord, load: LoadMeter | None) -> None:
    """The machine's load into `record`, with its warning when others were busy, and whether the
    run was starved of cores (`LoadMeter.starved`)."""
    if load is not None:
        record.load = load.record()
        record.starved = load.starved(record)
        warning = load.warning()
        if warning:
            record.warnings = [*(record.warnings or []), warning]


# ---------------------------------------------------------------- distributed runs (--nproc N)


def launcher_command(req: RunRequest, out: Path) -> list[str]:
    """torch.distributed.run starting N workers on this machine, rendezvous on loopback only, never
    restarted; made to die with this process (see branchscope.profiling.run.processes.exec_as_child).
    The shim runs under branchscope's Python; the launcher and its workers under the worker's (--python)."""
    opts = req.options
    if opts.nnodes > 1:
        rendezvous = _rendezvous_args(opts)
    else:
        rendezvous = ["--standalone", "--local-addr", "127.0.0.1"]
    launcher = python_command("torch.distributed.run", _worker_python(req)) + [
        "--nproc-per-node", str(opts.nproc), *rendezvous, "--max-restarts", "0", "--no-python", "--",
    ]  # fmt: skip
    return python_command(PROCESSES_MODULE) + [str(os.getpid()), "--"] + launcher + worker_command(req, out)


def _rendezvous_args(opts: RunOptions) -> list[str]:
    """A multi-node run's launcher options: torch.distributed.run's c10d rendezvous at
    --rdzv-endpoint, --nnodes nodes. On a loopback endpoint (every node on this machine) node 0
    hosts the rendezvous store and the nodes talk over 127.0.0.1 only; elsewhere torch decides
    (the store on the endpoint's host) and the nodes find each other on their own addresses."""
    assert opts.rdzv_endpoint is not None
    # No --node-rank: c10d ignores it (the rendezvous orders the nodes); it names this node's part of OUT.
    args = ["--nnodes", str(opts.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", opts.rdzv_endpoint]
    if _loopback(opts):
        args += ["--rdzv-conf", f"is_host={'true' if opts.node_rank == 0 else 'false'}", "--local-addr", "127.0.0.1"]
    return args


def _loopback(opts: RunOptions) -> bool:
    """A run whose ranks stay on this machine: one node, or every node meeting at a loopback address."""
    if opts.nnodes == 1:
        return True
    endpoint = parse_endpoint(opts.rdzv_endpoint or "")
    return endpoint is not None and is_loopback(endpoint[0])


#: A rank's events file in the staging folder (RANK_EVENTS), its global rank captured.
_RANK_EVENTS_NAME = re.compile(re.escape(RANK_EVENTS).replace(r"\{rank\}", "(0|[1-9][0-9]{0,5})"))


#: The most of a rank's events file read at once.
_EVENTS_READ = 4 << 20


class _EventFile:
    """The JSON-line events a rank appends to its own file (see the worker), read as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._buf = b""

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read(_EVENTS_READ)  # the rest on the next read: a rank may write gigabytes
        except OSError:
            return []
        self._offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        if len(self._buf) > MAX_ANSWER_BYTES:
            self._buf = b""  # no event is that long: dropped, like a line past the bound
        return decode_events(lines)


class _Distributed(_OneWorker):
    """`--nproc N`: the runner starts torch.distributed.run, which starts the N ranks; each rank's
    events come through its own file (a file cannot be waited on: `read` sleeps), the rank's own
    hello, the process watching its worker saying how it exited, its reaper when it was gone; OUT
    gets rank-R/ per rank and a run.json listing them."""

    stdout = None
    #: A multi-node run's: this node's share of OUT, and the run's cancel flag (node 0 waits for the others).
    nodes: NodeFolder | None = None
    cancel: CancelFlag | None = None

    def __init__(self, req: RunRequest, stage: Path) -> None:
        super().__init__(req, stage)
        self.nnodes, self.node = req.options.nnodes, req.options.node_rank
        self.host = socket.gethostname() if self.nnodes > 1 else None
        #: This node's first global rank: 0 on one machine; on several, known once its first rank's
        #: events file appears (the c10d rendezvous, not --node-rank, orders the nodes).
        self.first: int | None = 0 if self.nnodes == 1 else None
        self.deadline = time.monotonic() + req.options.timeout
        self.files: list[_EventFile] = []
        self._ranks: list[_Rank] = []

    def command(self) -> list[str]:
        return launcher_command(self.req, self.stage.resolve())

    def env(self, token: str) -> dict[str, str]:
        env = _worker_env(self.req, token)
        env[EVENTS_DIR_ENV] = str(self.stage.resolve())
        if _loopback(self.req.options):
            env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's connections stay on loopback too
        env.setdefault("TORCHELASTIC_ENABLE_FILE_TIMER", "0")
        return env

    def bind(self, ranks: list[_Rank]) -> None:
        self._ranks = ranks

    def sampling(self, rank: _Rank) -> None:
        """Tell the rank, which waits for it before its profiled steps (`RANK_SAMPLING`)."""
        try:
            (self.stage / RANK_SAMPLING.format(rank=rank.rank)).touch()
        except OSError:
            pass  # the rank goes on after its wait; only its samples may be fewer

    def started(self, proc: subprocess.Popen[bytes]) -> list[list[Event]]:
        self._number()
        return []

    def _number(self) -> None:
        """Once this node's first global rank is known: the ranks numbered, their events files."""
        if self.first is None:
            try:
                found = [int(m.group(1)) for name in os.listdir(self.stage) if (m := _RANK_EVENTS_NAME.fullmatch(name))]
            except OSError:
                found = []
            if not found:
                return
            self.first = min(found) - min(found) % self.nproc
            if self.nodes is not None:
                self.nodes.set_ranks(list(range(self.first, self.first + self.nproc)), self.nproc)
        if not self.files:
            for i, rank in enumerate(self._ranks):
                rank.rank = self.first + i
            self.files = [_EventFile(self.stage / RANK_EVENTS.format(rank=self.first + i)) for i in range(self.nproc)]

    def read(self, timeout: float) -> list[list[Event]]:
        if timeout > 0:
            time.sleep(timeout)
        return self.drain()

    def drain(self) -> list[list[Event]]:
        self._number()
        return [f.read() for f in self.files]

    def close(self) -> None:
        pass

    def ended(self, proc: subprocess.Popen[bytes], t: float) -> list[list[Event]]:
        return []  # the process that ended is the launcher: the ranks said how they ended

    def folder(self, rank: int) -> Path:
        return self.stage / RANK_FOLDER.format(rank=rank)

    def _on_node(self) -> str:
        """' on node 1 (host)' in a multi-node run, else nothing."""
        return f" on node {self.node} ({self.host})" if self.nnodes > 1 else ""

    def _rank_word(self, rank: _Rank) -> str:
        return f"rank {rank.rank}" if self.first is not None else f"local rank {rank.rank}"

    def name(self, rank: _Rank, *, pid: bool = False) -> str:
        return self._rank_word(rank) + self._on_node() + (f" (pid {rank.pid})" if pid and rank.pid else "")

    def error_message(self, rank: _Rank, message: str) -> str:
        return f"{self.name(rank)}: {message}"

    def timed_out(self, ranks: list[_Rank]) -> str:
        waiting = [r for r in ranks if not r.finished]
        if self.first is None:  # no rank of this node started: the nodes never all met
            return (
                f"the run ran past --timeout {self.req.options.timeout:g} s and was stopped; the rendezvous at "
                f"{self.req.options.rdzv_endpoint} had not brought the {self.nnodes} nodes together "
                f"(node {self.node}'s ranks never started)"
            )
        return (
            f"the run ran past --timeout {self.req.options.timeout:g} s and was stopped; rank(s) "
            f"{', '.join(str(r.rank) for r in waiting)}{self._on_node()} had not finished ("
            + ", ".join(f"{self._rank_word(r)}: {r.phase or 'starting'}" for r in waiting)
            + ")"
        )

    def ended_early(self, proc: subprocess.Popen[bytes], ranks: list[_Rank], runs: list[RunRecord | None]) -> str:
        missing = [str(r.rank) for r, run in zip(ranks, runs, strict=True) if run is None]
        which = "rank(s)" if self.first is not None else "local rank(s)"
        return (
            f"torch.distributed.run ended ({_describe_exit(proc.returncode)}) before {which} {', '.join(missing)}"
            f"{self._on_node()} wrote their results"
        )

    def trace_failed(self, rank: _Rank, exc: ValueError) -> str:
        return f"could not write {self.name(rank)}'s trace: {exc}"

    def record(self, ranks: list[_Rank], runs: list[RunRecord]) -> RunRecord:
        """The top-level run.json of this node's ranks (see `_ranks_record`); the ranks' event files are dropped."""
        for name in os.listdir(self.stage):
            if name.startswith(".rank-"):
                (self.stage / name).unlink()
        return _ranks_record(self.nproc, [(r.rank, run, self.node if self.nnodes > 1 else None, self.host) for r, run in zip(ranks, runs, strict=True)])

    def commit(
        self, folder: RunFolder, ranks: list[_Rank], results: list[Any], load: LoadMeter | None = None
    ) -> RunResult:
        """On one machine, `_commit`. A node of several: its ranks' traces written; a node other than 0
        leaves them for node 0 (`NodeFolder.done`); node 0 takes every other node's ranks as they
        come in (`NodeFolder.gather`, until --timeout) and commits the whole run."""
        if self.nodes is None:
            return _commit(folder, self, ranks, results, load)
        out = folder.out
        result = RunResult(EXIT_OK, out)
        failed = _finish_traces(out, self, ranks, results, result)
        if failed is not None:
            return failed
        own = self.record(ranks, results)
        mine = [r.rank for r in ranks]
        if self.node != 0:  # its part, not the run: node 0 writes run.json (`complete`) once all are in
            self.nodes.done(mine)
            result.run = msgspec.structs.replace(own, nnodes=self.nnodes, complete=False)
            return result
        cancel = self.cancel
        try:
            parts = self.nodes.gather(self.deadline, lambda: cancel is not None and cancel.is_set())
        except NodeFailure as exc:
            return RunResult(exc.exit_code, out, message=exc.message)
        if parts is None:
            assert cancel is not None
            return _cancelled(out, cancel)
        entries: list[tuple[int, RunRecord, int | None, str | None]]
        entries = [(r.rank, run, self.node, self.host) for r, run in zip(ranks, results, strict=True)]
        entries += [(rank, run, rec.node, rec.host) for rec, runs in parts for rank, run in runs]
        record = _ranks_record(self.nproc, sorted(entries, key=lambda e: e[0]))
        record.nnodes = self.nnodes
        _add_load(record, load)
        result.run = folder.commit(record)
        return result


#: What a distributed run's top-level run.json takes from its first rank's: the settings every rank
#: shares, and the warm-up (ranks warm up together: the same steps, settled or stopped alike; each
#: rank's own times are in its run.json).
_FIRST_RANKS = (
    "mode", "interop", "intra", "cores", "device", "torch", "model", "source", "input_shapes", "dtype", "steps",
    "warmup", "world_size", "backend", "train_step", "warmup_steps", "warmup_settled", "warmup_cap", "branches",
    "tracer",
)  # fmt: skip


def _ranks_record(nproc: int, entries: list[tuple[int, RunRecord, int | None, str | None]]) -> RunRecord:
    """A distributed run's top-level run.json from its ranks' (rank, run.json, node, host): the first
    rank's settings, the slowest rank's step times step by step, and the ranks (rank, pid, device,
    their files; their node and host in a multi-node run)."""
    ranks = [rank for rank, *_ in entries]
    runs = [run for _, run, *_ in entries]
    first = runs[0]
    steps = _per_step_max([run.steps_ms for run in runs])
    unprofiled = _per_step_max([run.unprofiled_steps_ms for run in runs])
    profiled_stats, unprofiled_stats = StepStats.of(steps), StepStats.of(unprofiled)
    return RunRecord(
        format=RUN_FORMAT,
        **{name: getattr(first, name) for name in _FIRST_RANKS},
        nproc=nproc,
        steps_ms=[round(x, 4) for x in steps],
        median_ms=round(profiled_stats.median, 4) if profiled_stats else None,
        unprofiled_steps=len(unprofiled),
        unprofiled_steps_ms=[round(x, 4) for x in unprofiled],
        unprofiled_median_ms=round(unprofiled_stats.median, 4) if unprofiled_stats else None,
        unprofiled_spread_ms=unprofiled_stats.rounded_spread(4) if unprofiled_stats else None,
        warnings=[f"rank {rank}: {w}" for rank, run in zip(ranks, runs, strict=True) for w in run.warnings or []],
        ranks=[
            RankRecord(
                rank=rank,
                pid=run.pid,
                device=run.device,
                run=f"{RANK_FOLDER.format(rank=rank)}/{RUN_JSON}",
                trace=f"{RANK_FOLDER.format(rank=rank)}/{DEFAULT_TRACE}",
                median_ms=run.median_ms,
                unprofiled_median_ms=run.unprofiled_median_ms,
                node=node,
                host=host,
            )
            for rank, run, node, host in entries
        ],
        trace=f"{RANK_FOLDER.format(rank=ranks[0])}/{DEFAULT_TRACE}",
        complete=True,
    )


def _per_step_max(series: list[list[float] | None]) -> list[float]:
    """Step by step, the slowest rank's time: a distributed step ends when its last rank does."""
    if not all(series):
        return []
    return [max(xs) for xs in zip(*series, strict=False)]



def _spawn(
    contained: Containment,
    command: list[str],
    stage: Path,
    env: dict[str, str],
    stdout: int | None,
    log_path: Path,
) -> subprocess.Popen[bytes]:
    """Starts the run's first process (the worker, or the launcher of a distributed run; `stdout`
    None: into the log too), `contained`: in a session and process group of its own, in the run's
    cgroup when there is one (it joins it itself before it starts anything, and is moved there too),
    and in the staging folder: the caller's current folder may have been deleted (`import torch`
    then aborts), and every path the process is given is absolute (`RunRequest.argv(worker=True)`)."""
    with open(log_path, "wb") as log:
        return contained.spawn(command, env=env, cwd=stage, stdout=log if stdout is None else stdout, stderr=log)


def _cancelled(out: Path, cancel: CancelFlag) -> RunResult:
    signum = cancel.signum or signal.SIGTERM
    return RunResult(
        128 + signum, out, message=f"cancelled by {_signal_name(-signum)}; the worker was stopped", cancelled_by=signum
    )


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by {_signal_name(returncode)}"
    return f"exit code {returncode}"


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
