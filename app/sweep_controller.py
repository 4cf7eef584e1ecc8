"""Runs thread sweeps for the window: one `python -I -m branchscope.app.cli sweep ... --jsonl` process.

As RunController does for single runs: the sweep runs in its own process (which starts one worker per
cell), started with QProcess so the window stays responsive, and its JSON lines on stdout become
signals (`branchscope.profiling.run.sweep.run_sweep` documents the events). One sweep at a time:
starting one while another runs cancels the old one. Cancelling sends SIGTERM, on which the sweep
stops its running cell (killing that worker's group), marks the cells left "not run" in sweep.json
and exits; SIGKILL follows if it has not exited a few seconds later (the worker dies with it all the
same, and sweep.json still holds every finished cell). The sweep cancels itself when the window dies.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, QProcess, Signal

from branchscope.app.jsonl_process import CANCEL_GRACE_MS, JsonLinesProcess
from branchscope.profiling.run.protocol import python_command
from branchscope.profiling.run.sweep import SweepRequest
from branchscope.profiling.trace.records import (
    CellEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    ProgressEvent,
    SweepEvent,
    SweepRecord,
)

CLI_MODULE = "branchscope.app.cli"


@dataclass
class _Job:
    request: SweepRequest
    proc: JsonLinesProcess | None = None
    sweep: SweepRecord | None = None
    done: DoneEvent | None = None
    error: ErrorEvent | None = None
    canceled: bool = False


class SweepController(QObject):
    """Starts, follows and cancels a `branchscope sweep --jsonl` process (see the module docstring)."""

    #: The sweep began: sweep.json as first written (every cell "not run"), a SweepRecord.
    started = Signal(object)
    #: Cell `index` is at profiled step `step` of `of`.
    progress = Signal(int, int, int)
    #: A cell ended (done or failed): the sweep's `CellEvent` (index, of, folder, the cell's record, best).
    cellFinished = Signal(object)
    #: The sweep ran every cell and some finished: its folder.
    finished = Signal(str)
    #: The sweep failed (refused, or no cell ran): one line.
    failed = Signal(str)
    #: The sweep was cancelled and its process has ended; its folder keeps the finished cells.
    canceled = Signal(str)

    def __init__(self, parent: QObject | None = None, *, command: list[str] | None = None) -> None:
        super().__init__(parent)
        #: The program and leading arguments; the sweep's options follow. Tests point it elsewhere.
        self.command = list(command) if command else [*python_command(CLI_MODULE), "sweep"]
        self._job: _Job | None = None
        self._retired: list[_Job] = []
        #: The arguments of the last process started (program first).
        self.last_command: list[str] = []

    # ---- state ------------------------------------------------------------------------------
    def is_running(self) -> bool:
        return self._job is not None

    def active_processes(self) -> int:
        """Sweep processes not yet exited: the current one and cancelled ones still stopping."""
        jobs = ([self._job] if self._job else []) + self._retired
        return sum(1 for j in jobs if j.proc is not None and j.proc.running())

    @property
    def sweep(self) -> SweepRecord | None:
        """The current sweep's sweep.json as its events have told it so far."""
        return self._job.sweep if self._job else None

    # ---- control ----------------------------------------------------------------------------
    def start(self, request: SweepRequest) -> None:
        """Start a sweep; one already going is cancelled first."""
        if self._job is not None:
            self.cancel()
        command = [*self.command, *request.argv(), "--jsonl"]
        job = _Job(request)
        job.proc = JsonLinesProcess(
            command,
            lambda event: self._on_event(job, event),
            lambda code, status: self._on_finished(job, code, status),
            lambda reason: self._on_failed_to_start(job, reason),
            self,
        )
        self._job = job
        self.last_command = command
        job.proc.start()

    def cancel(self) -> None:
        """Stop the current sweep (SIGTERM, then SIGKILL after a grace period); `canceled` follows
        once its process has ended."""
        job = self._job
        if job is None:
            return
        self._job = None
        job.canceled = True
        self._retired.append(job)
        if job.proc is not None:
            job.proc.stop(CANCEL_GRACE_MS)

    def shutdown(self, wait_ms: int = 5000) -> None:
        """Cancel and wait for every sweep process (the window is closing)."""
        self.cancel()
        for job in list(self._retired):
            if job.proc is not None:
                job.proc.wait(wait_ms)

    # ---- process output ---------------------------------------------------------------------
    def _on_event(self, job: _Job, event: Event) -> None:
        current = job is self._job
        if isinstance(event, SweepEvent):
            job.sweep = event.sweep
            if current:
                self.started.emit(job.sweep)
        elif isinstance(event, ProgressEvent):
            if current:
                self.progress.emit(event.index or 0, event.step, event.of)
        elif isinstance(event, CellEvent):
            if job.sweep is not None and 0 <= event.index < len(job.sweep.cells):
                job.sweep.cells[event.index] = event.cell
                job.sweep.best = event.best
            if current:
                self.cellFinished.emit(event)
        elif isinstance(event, ErrorEvent):
            job.error = event
        elif isinstance(event, DoneEvent):
            job.done = event
            if event.sweep is not None:
                job.sweep = event.sweep

    def _on_finished(self, job: _Job, code: int, status: QProcess.ExitStatus) -> None:
        if job in self._retired:
            self._retired.remove(job)
        assert job.proc is not None
        job.proc.discard()
        out = str(job.request.out)
        if job.canceled:
            self.canceled.emit(out)
            return
        if job is not self._job:
            return
        self._job = None
        if job.done is not None:
            self.finished.emit(job.done.out or out)
            return
        if job.error is not None:
            self.failed.emit(job.error.message or "the sweep failed")
            return
        crashed = status == QProcess.ExitStatus.CrashExit
        message = "the sweep crashed" if crashed else f"the sweep exited with code {code}"
        last = [ln for ln in job.proc.stderr_text().splitlines() if ln.strip()]
        self.failed.emit(message + (f": {last[-1]}" if last else ""))

    def _on_failed_to_start(self, job: _Job, reason: str) -> None:
        if job is not self._job:
            return
        self._job = None
        if job.proc is not None:
            job.proc.discard()
        self.failed.emit(f"could not start the sweep ({self.command[0]}): {reason}")
