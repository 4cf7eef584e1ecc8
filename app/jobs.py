"""The window's child-process jobs, one at a time: the layer under `RunController` (a runner per run)
and the `CommandController`s, `SweepController` (a `branchscope sweep` per sweep) and
`SpeedupController` (a `branchscope speedup` per paired measurement). Each child is a
`JsonLinesProcess`; the controllers say only what their events mean and what their signals carry.

What a job does, the same for runs and sweeps:

- `started` is emitted by the `start` call, before the process starts: listeners see `started` first,
  then `failed` when the program cannot start. Starting a job while one is going cancels that one
  first (its `canceled` comes before the new job's `started`); a slot of `started` may cancel or
  replace the new job, which then never starts.
- The current job's events become the controller's signals; a cancelled job's events are dropped.
- A job that is not cancelled ends once its process has ended, read to its last line: `finished`
  (its done event) or `failed` (its error event; else a crash, or an exit without a done event, with
  the last line of its stderr; or a program that cannot start). A child exiting `EXIT_MODE` (the
  mode cannot run this model here: no branches, no CUDA) said all there is in its error line: its
  failure carries no details (no traceback for an expected outcome). `last_exit_code` is the exit
  code of the last job that ended (None: it crashed or never started).
- `cancel()` emits `canceled` at once, so the window reacts without waiting for the child, and
  the job is no longer current (`is_running()` is False, a new job may start). Its process gets
  SIGTERM (on which a runner stops its worker, and a sweep its cell, marking the cells left "not
  run") and SIGKILL `CANCEL_GRACE_MS` later if it is still there. It is kept until it has exited,
  then `stopped` (the same payload as `canceled`) says that nothing it started is left running and
  that what it wrote is final (a sweep's sweep.json). Every `canceled` is followed by one `stopped`.
- `active_processes()` counts the processes not yet exited: the current job's and cancelled ones
  still stopping; `shutdown(wait_ms)` cancels and waits for them all (the window is closing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QProcess

from branchscope.app.jsonl_process import CANCEL_GRACE_MS, JsonLinesProcess
from branchscope.profiling.run.protocol import EXIT_MODE, python_command
from branchscope.profiling.trace.events import DoneEvent, ErrorEvent, Event

#: What a `branchscope COMMAND` job runs: `python -I -m branchscope.app.cli COMMAND ...`.
CLI_MODULE = "branchscope.app.cli"


class Job:
    """One child process and what its events said so far."""

    def __init__(self, subject: Any, out: Path, command: list[str]) -> None:
        #: What was asked for (a RunSpec, a SweepRequest) and the folder its results go to.
        self.subject = subject
        self.out = out
        self.command = command
        self.proc: JsonLinesProcess | None = None
        self.done: DoneEvent | None = None
        self.error: ErrorEvent | None = None
        self.canceled = False
        #: The controller's own (a sweep's sweep.json as its events tell it).
        self.state: Any = None


class JobController(QObject):
    """Starts, follows and cancels one child at a time (see the module docstring).

    A controller declares the signals `started`, `canceled` and `stopped` (payloads its own) and
    `finished` and `failed`, and fills in the `_...` methods below that say what they carry."""

    #: The child, in messages: "the runner crashed", "could not start the runner (…)".
    program = "child"
    #: A job, in messages: "the run failed".
    noun = "job"

    def __init__(self, command: list[str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        #: The program and leading arguments; the job's arguments follow. Tests point it elsewhere.
        self.command = list(command)
        self._job: Job | None = None
        self._retired: list[Job] = []
        #: The arguments of the last process started (program first).
        self.last_command: list[str] = []
        #: The exit code of the last job that ended (None: it crashed or never started).
        self.last_exit_code: int | None = None

    # ---- state ------------------------------------------------------------------------------
    def is_running(self) -> bool:
        return self._job is not None

    def active_processes(self) -> int:
        """Child processes not yet exited: the current job's and cancelled ones still stopping."""
        jobs = ([self._job] if self._job else []) + self._retired
        return sum(1 for j in jobs if j.proc is not None and j.proc.running())

    # ---- control ----------------------------------------------------------------------------
    def _start(self, job: Job) -> None:
        """Start `job` (its command is the controller's program and the job's arguments); one
        already going is cancelled first."""
        self.cancel()
        job.proc = JsonLinesProcess(
            job.command,
            lambda event: self._on_event(job, event),
            lambda code, status: self._on_ended(job, code, status),
            lambda reason: self._on_failed_to_start(job, reason),
            self,
        )
        self._job = job
        self.last_command = job.command
        self._emit_started(job)
        if self._job is not job:  # a slot of `started` cancelled or replaced it: it never starts
            self._retire(job)
            return
        job.proc.start()

    def cancel(self) -> None:
        """Stop the current job: `canceled` now, `stopped` once its process has exited (SIGTERM, then
        SIGKILL after a grace period)."""
        job = self._job
        if job is None:
            return
        self._job = None
        job.canceled = True
        self._retired.append(job)
        assert job.proc is not None
        job.proc.stop(CANCEL_GRACE_MS)
        self._emit_canceled(job)

    def shutdown(self, wait_ms: int = 5000) -> None:
        """Cancel and wait for every child (the window is closing)."""
        self.cancel()
        for job in list(self._retired):
            if job.proc is not None:
                job.proc.wait(wait_ms)

    # ---- the child's output -----------------------------------------------------------------
    def _on_event(self, job: Job, event: Event) -> None:
        if job.canceled:
            return
        if isinstance(event, ErrorEvent):
            job.error = event
        elif isinstance(event, DoneEvent):
            job.done = event
        self._event(job, event)

    def _retire(self, job: Job) -> None:
        """A cancelled job's process has exited (or never started): `stopped`."""
        if job in self._retired:
            self._retired.remove(job)
        assert job.proc is not None
        job.proc.discard()
        self._emit_stopped(job)

    def _ended(self, job: Job) -> bool:
        """The child of `job` is gone: a cancelled job is retired, a current one stops being current
        (True: its outcome is to be said)."""
        if job.canceled:
            self._retire(job)
            return False
        assert job.proc is not None
        job.proc.discard()
        if job is not self._job:
            return False
        self._job = None
        return True

    def _on_ended(self, job: Job, code: int, status: QProcess.ExitStatus) -> None:
        if not self._ended(job):
            return
        assert job.proc is not None
        crashed = status == QProcess.ExitStatus.CrashExit
        self.last_exit_code = None if crashed else code
        if job.done is not None:
            self._emit_finished(job, job.done)
            return
        stderr = job.proc.stderr_text()
        if job.error is not None:
            details = "" if self.last_exit_code == EXIT_MODE else job.error.traceback or stderr
            self._emit_failed(job, job.error.message or f"the {self.noun} failed", details)
            return
        message = f"the {self.program} crashed" if crashed else f"the {self.program} exited with code {code}"
        last = [ln for ln in stderr.splitlines() if ln.strip()]
        self._emit_failed(job, message + (f": {last[-1]}" if last else ""), stderr)

    def _on_failed_to_start(self, job: Job, reason: str) -> None:
        if not self._ended(job):
            return
        self.last_exit_code = None
        self._emit_failed(job, f"could not start the {self.program} ({self.command[0]}): {reason}", "")

    # ---- what a controller says -------------------------------------------------------------
    def _event(self, job: Job, event: Event) -> None:
        """The current job's event (its error and done events are kept already)."""

    # A controller's `started`, `canceled` and `stopped` signals carry the job's subject unless it
    # says otherwise (the sweep's carry its folder).
    def _emit_started(self, job: Job) -> None:
        self.started.emit(job.subject)  # type: ignore[attr-defined]

    def _emit_canceled(self, job: Job) -> None:
        self.canceled.emit(job.subject)  # type: ignore[attr-defined]

    def _emit_stopped(self, job: Job) -> None:
        self.stopped.emit(job.subject)  # type: ignore[attr-defined]

    def _emit_finished(self, job: Job, done: DoneEvent) -> None:
        raise NotImplementedError

    def _emit_failed(self, job: Job, message: str, details: str) -> None:
        raise NotImplementedError


class CommandController(JobController):
    """A controller whose child is a `branchscope COMMAND ... --jsonl` process (a sweep, a paired
    measurement): `command` runs it unless the caller gives another (tests do)."""

    #: The command: "sweep", "speedup".
    cli_command = ""

    def __init__(self, parent: QObject | None = None, *, command: list[str] | None = None) -> None:
        super().__init__(list(command) if command else [*python_command(CLI_MODULE), self.cli_command], parent)
