"""Paired measurements for the window: one `python -I -m branchscope.app.cli speedup ... --jsonl` process.

As the sweep controller does for sweeps (`app/jobs.py` says what every job of the window does): the
measurement runs in its own process, which starts its workers through the runner, so the window
stays responsive and a crashing model cannot take it down; its JSON lines become signals. One at a
time: starting one cancels the one going; `cancel()` emits `canceled` at once and `stopped` once
the process has exited (on SIGTERM it stops its worker); it cancels itself when the window dies.
"""

from __future__ import annotations

from PySide6.QtCore import Signal

from branchscope.app.jobs import CommandController, Job
from branchscope.profiling.run.paired import PairedRequest
from branchscope.profiling.trace.events import DoneEvent, Event, ProgressEvent


class SpeedupController(CommandController):
    """Starts, follows and cancels a `branchscope speedup --jsonl` process (see the module docstring)."""

    #: The measurement began: its PairedRequest.
    started = Signal(object)
    #: Round (or worker) `step` of `of` done.
    progress = Signal(int, int)
    #: It ended with a result: the `records.SpeedupRecord`.
    finished = Signal(object)
    #: It failed (bad arguments, the model, a worker): one line.
    failed = Signal(str)
    #: Cancelled, by `cancel()` or by a newer measurement (emitted at once; the request).
    canceled = Signal(object)
    #: A cancelled measurement's process has exited (the request): nothing it started is left running.
    stopped = Signal(object)

    program = "paired measurement"
    noun = "paired measurement"
    cli_command = "speedup"

    def start(self, request: PairedRequest) -> None:
        """Start measuring `request`; one already going is cancelled first."""
        self._start(Job(request, None, [*self.command, *request.argv(), "--jsonl"]))  # type: ignore[arg-type]

    def _event(self, job: Job, event: Event) -> None:
        if isinstance(event, ProgressEvent):
            self.progress.emit(event.step, event.of)

    def _emit_finished(self, job: Job, done: DoneEvent) -> None:
        if done.speedup is None:
            self.failed.emit("the paired measurement ended without a result")
            return
        self.finished.emit(done.speedup)

    def _emit_failed(self, job: Job, message: str, details: str) -> None:
        self.failed.emit(message)
