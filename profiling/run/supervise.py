"""Supervising a run: `supervise` starts the run's first process and follows it to the end, for
one worker (`OneWorker`) and for N ranks (`branchscope.profiling.run.distributed.Distributed`) alike;
the layout says only what differs (the process started, where the events come from, how a failure
is named, what OUT gets).

While the run goes on, the supervisor forwards rank 0's phases and steps, samples the CPU time of
each rank's OS threads while it profiles (on a fixed schedule), and stops the run at --timeout, on
cancel, when its process ends, a second after a rank failed (the first to fail names the failure:
`first_to_fail`), or once every rank finished and had `_EXIT_GRACE_S` to exit. Whatever happened,
every process of the run is then stopped (`processes.Containment`: its group, its cgroup, whatever
carries the run's token, orphans), and a complete run is committed (branchscope.profiling.run.commit).

`--nproc 1`: the process started is the worker, rank 0: its events come on its stdout
(`_LineReader`, never blocking: a process the model daemonised may hold the pipe open).

No torch here.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from branchscope.profiling.files import open_regular, read_json_object
from branchscope.profiling.run.commit import commit_run, keep_failure
from branchscope.profiling.run.cpu_sampler import ThreadCpuSampler
from branchscope.profiling.run.folder import RunFolder
from branchscope.profiling.run.launch import worker_command, worker_env
from branchscope.profiling.run.machine_load import LoadMeter
from branchscope.profiling.run.outcome import RunResult, cancelled, describe_exit
from branchscope.profiling.run.processes import CancelFlag, Containment
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_MODE, EXIT_WORKER, RunRequest
from branchscope.profiling.trace.events import (
    EndedEvent,
    ErrorEvent,
    Event,
    ExitedEvent,
    FinishedEvent,
    HelloEvent,
    PhaseEvent,
    ProgressEvent,
    decode_events,
)
from branchscope.profiling.trace.records import (
    DEFAULT_TRACE,
    MAX_ANSWER_BYTES,
    RUN_JSON,
    RunRecord,
    read_run_record,
)

#: Once the worker says it finished, how long it may take to exit before it is killed (results are safe).
_EXIT_GRACE_S = 10.0
#: Once a rank failed, how long the others' events are still read (to tell the first failure).
_FAILURE_SETTLE_S = 1.0


@dataclass
class Rank:
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


class OneWorker:
    """What differs between one worker and N ranks (`Distributed` overrides it): the process the
    runner starts, where the ranks' events come from (one list per rank), what the runner says of the
    ranks itself, how a failure is named and what OUT gets. `supervise` does the rest for both.

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
        return worker_env(self.req, token)

    def bind(self, ranks: list[Rank]) -> None:
        """The ranks as the supervisor follows them (a multi-node run numbers them once the rendezvous has)."""

    def sampling(self, rank: Rank) -> None:
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

    def name(self, rank: Rank, *, pid: bool = False) -> str:
        return "the worker"

    def error_message(self, rank: Rank, message: str) -> str:
        return message

    def timed_out(self, ranks: list[Rank]) -> str:
        return f"the worker ran past --timeout {self.req.options.timeout:g} s and was stopped"

    def ended_early(self, proc: subprocess.Popen[bytes], ranks: list[Rank], runs: list[RunRecord | None]) -> str:
        return f"the worker died ({describe_exit(proc.returncode)}) before writing its results"

    def trace_failed(self, rank: Rank, exc: ValueError) -> str:
        return f"could not write {Path(self.req.out) / DEFAULT_TRACE}: {exc}"

    def record(self, ranks: list[Rank], runs: list[RunRecord]) -> RunRecord:
        """The run.json committed to OUT (last), once each rank's trace is written."""
        return runs[0]

    def result(self, rank: int) -> Any:
        """What rank `rank` left in its folder once it ended: its complete run.json, or None."""
        return complete_run(self.folder(rank))

    def why_incomplete(self, rank: int) -> str:
        """Why `result(rank)` is None although the rank said it finished (its answer is malformed)."""
        return why_incomplete(self.folder(rank) / RUN_JSON, lambda obj: RunRecord.parse(obj).complete)

    def commit(
        self, folder: RunFolder, ranks: list[Rank], results: list[Any], load: LoadMeter | None = None
    ) -> RunResult:
        """Every rank's `result` complete: OUT gets the run (`_commit`), with the machine's load."""
        return commit_run(folder, self, ranks, results, load)


def supervise(
    folder: RunFolder,
    req: RunRequest,
    layout: OneWorker,
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
        return cancelled(out, cancel)
    runs = [layout.result(r.rank) for r in ranks]
    complete = [run for run in runs if run is not None]
    if len(complete) == len(ranks):
        return layout.commit(folder, ranks, complete, load)
    # At a timeout the runner stops every rank itself: a rank that "failed" after that was stopped.
    failure = first_to_fail(ranks, before=deadline if timed_out else float("inf"))
    if failure is not None:
        result = _rank_failure(out, layout, failure, log_path)
        if failure.failed_at is not None:
            result.failed_at = time.time() - (time.monotonic() - failure.failed_at)
        keep_failure(folder, layout.folder(failure.rank), result)
        return result
    said = [r for r, run in zip(ranks, runs, strict=True) if run is None and r.finished]
    if said and not timed_out:  # it said it finished: its final record is what is wrong
        message = f"{layout.name(said[0])} said it finished, but {layout.why_incomplete(said[0].rank)}"
    else:
        message = layout.timed_out(ranks) if timed_out else layout.ended_early(proc, ranks, runs)
    return RunResult(EXIT_WORKER, out, message=message, traceback=log_tail(log_path) or None)


class _Watch:
    """The ranks of a run as their events tell them; rank 0's phases and steps go on to `on_event`."""

    def __init__(
        self, nproc: int, on_event: Callable[[Event], None] | None, load: LoadMeter | None = None, pid: int | None = None
    ) -> None:
        self.ranks = [Rank(r) for r in range(nproc)]
        self.on_event = on_event
        #: Told when a rank's threads are sampled from its "profile" phase on (the layout says so to the rank).
        self.on_sampling: Callable[[Rank], None] | None = None
        #: The load measured from rank 0's "timing" phase to its "export" (`pid`: the process started).
        self.load, self.pid = load, pid
        #: When the runner learned of the first failure, and when every rank had finished (monotonic).
        self.first_failure: float | None = None
        self.finished_at: float | None = None

    def sampling(self) -> list[Rank]:
        """The ranks profiling now, whose threads are sampled."""
        return [r for r in self.ranks if r.phase == "profile" and r.sampler is not None]

    def handle(self, per_rank: list[list[Event]]) -> None:
        for rank, events in zip(self.ranks, per_rank, strict=False):
            for event in events:
                self._handle(rank, event)

    def _handle(self, rank: Rank, event: Event) -> None:
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


def first_to_fail(ranks: list[Rank], before: float = float("inf")) -> Rank | None:
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


def _killed_at(rank: Rank) -> float | None:
    """When a rank was killed without reporting an error: its worker by a signal (the process the
    launcher started says which), or that process itself (its reaper says when, not how)."""
    if rank.error is not None or rank.stopped:  # stopped: the launcher stopped it after another failed
        return None
    if rank.exited is None:
        return rank.ended
    code, t = rank.exited.code, rank.exited.t
    return float(t) if code < 0 and t is not None else None


def _rank_failure(out: Path, layout: OneWorker, rank: Rank, log_path: Path) -> RunResult:
    if rank.error is not None:
        code = rank.error.exit_code or 1
        return RunResult(
            code if code in (EXIT_BAD_INPUT, EXIT_MODE) else EXIT_WORKER,
            out,
            message=layout.error_message(rank, rank.error.message or "the worker failed"),
            traceback=rank.error.traceback or None,
        )
    status = rank.exited.code if rank.exited else None
    how = describe_exit(status) if isinstance(status, int) else "its process under the launcher was killed"
    return RunResult(
        EXIT_WORKER,
        out,
        message=f"{layout.name(rank, pid=True)} died ({how}) before writing its results",
        traceback=log_tail(log_path) or None,
    )


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


def log_tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
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


def complete_run(folder: Path) -> RunRecord | None:
    run = read_run_record(folder, follow_symlinks=False)
    return run if run is not None and run.complete else None


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

