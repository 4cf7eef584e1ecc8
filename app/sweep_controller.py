"""Runs thread sweeps for the window: one `python -I -m branchscope.app.cli sweep ... --jsonl` process.

As RunController does for single runs: the sweep runs in its own process (which starts one worker per
cell), started with QProcess so the window stays responsive, and its JSON lines on stdout become
signals (`branchscope.profiling.run.sweep.run_sweep` documents the events). One sweep at a time, as
`app/jobs.py` says for every job of the window: starting one while another runs cancels the old one;
`cancel()` emits `canceled` at once, and `stopped` once the sweep's process has exited: on SIGTERM
it stops its running cell (killing that worker's group), marks the cells left "not run" in
sweep.json and exits; SIGKILL follows if it is still there a few seconds later (the worker dies
with it all the same, and sweep.json still holds every finished cell). The sweep cancels itself
when the window dies.
"""

from __future__ import annotations

from PySide6.QtCore import Signal

from branchscope.app.jobs import CommandController, Job
from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.sweep import SweepRequest, new_sweep
from branchscope.profiling.trace.events import CellEvent, DoneEvent, Event, ProgressEvent, SweepEvent
from branchscope.profiling.trace.sweep_records import SweepRecord


class SweepController(CommandController):
    """Starts, follows and cancels a `branchscope sweep --jsonl` process (see the module docstring
    and `app/jobs.py`)."""

    #: The sweep began: its sweep.json before any cell ran (every cell "not run"), a SweepRecord.
    started = Signal(object)
    #: Cell `index` is at profiled step `step` of `of`.
    progress = Signal(int, int, int)
    #: A cell ended (done or failed): the sweep's `CellEvent` (index, of, folder, the cell's record, best).
    cellFinished = Signal(object)
    #: The sweep skips cells whose mode cannot run under its Python (fork without TorchScript):
    #: sweep.json as first written, those cells marked (`CellRecord.skipped`).
    cellsSkipped = Signal(object)
    #: The sweep ran every cell and some finished: its folder.
    finished = Signal(str)
    #: The sweep failed (refused, or no cell ran): one line.
    failed = Signal(str)
    #: The sweep was cancelled (its folder), by `cancel()` or by a newer sweep: emitted at once.
    canceled = Signal(str)
    #: A cancelled sweep's process has exited (its folder): its sweep.json is final, keeping the
    #: finished cells and marking the others "not run".
    stopped = Signal(str)

    program = "sweep"
    noun = "sweep"
    cli_command = "sweep"

    @property
    def sweep(self) -> SweepRecord | None:
        """The current sweep's sweep.json as its events have told it so far."""
        return self._job.state if self._job else None

    def start(self, request: SweepRequest) -> None:
        """Start a sweep; one already going is cancelled first."""
        job = Job(request, request.out, [*self.command, *request.argv(), "--jsonl"])
        job.state = new_sweep(request, usable_cores())
        self._start(job)

    # ---- what the sweep says ----------------------------------------------------------------
    def _event(self, job: Job, event: Event) -> None:
        if isinstance(event, SweepEvent):
            job.state = event.sweep  # sweep.json as the sweep first wrote it
            if any(c.skipped for c in event.sweep.cells):
                self.cellsSkipped.emit(event.sweep)
        elif isinstance(event, ProgressEvent):
            self.progress.emit(event.index or 0, event.step, event.of)
        elif isinstance(event, CellEvent):
            sweep = job.state
            if 0 <= event.index < len(sweep.cells):
                sweep.cells[event.index] = event.cell
                sweep.best = event.best
                sweep.ties = event.ties
            self.cellFinished.emit(event)
        elif isinstance(event, DoneEvent) and event.sweep is not None:
            job.state = event.sweep

    def _emit_started(self, job: Job) -> None:
        self.started.emit(job.state)

    def _emit_canceled(self, job: Job) -> None:
        self.canceled.emit(str(job.out))

    def _emit_stopped(self, job: Job) -> None:
        self.stopped.emit(str(job.out))

    def _emit_finished(self, job: Job, done: DoneEvent) -> None:
        self.finished.emit(done.out or str(job.out))

    def _emit_failed(self, job: Job, message: str, details: str) -> None:
        self.failed.emit(message)
