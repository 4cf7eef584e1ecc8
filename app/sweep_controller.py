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

import json
import os
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from branchscope.app.run_controller import CANCEL_GRACE_MS
from branchscope.profiling.run.protocol import PARENT_PID_ENV, python_command
from branchscope.profiling.run.sweep import SweepRequest

CLI_MODULE = "branchscope.app.cli"


@dataclass
class _Job:
    request: SweepRequest
    process: QProcess
    stdout: bytes = b""
    stderr: bytes = b""
    sweep: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    canceled: bool = False


class SweepController(QObject):
    """Starts, follows and cancels a `branchscope sweep --jsonl` process (see the module docstring)."""

    #: The sweep began: sweep.json as first written (every cell "not run").
    started = Signal(dict)
    #: Cell `index` is at profiled step `step` of `of`.
    progress = Signal(int, int, int)
    #: A cell ended (done or failed): the sweep's "cell" event (index, of, folder, the cell's record, best).
    cellFinished = Signal(dict)
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
        return sum(1 for j in jobs if j.process.state() != QProcess.ProcessState.NotRunning)

    @property
    def sweep(self) -> dict[str, Any] | None:
        """The current sweep's sweep.json as its events have told it so far."""
        return self._job.sweep if self._job else None

    # ---- control ----------------------------------------------------------------------------
    def start(self, request: SweepRequest) -> None:
        """Start a sweep; one already going is cancelled first."""
        if self._job is not None:
            self.cancel()
        proc = QProcess(self)
        args = [*self.command[1:], *request.argv(), "--jsonl"]
        proc.setProgram(self.command[0])
        proc.setArguments(args)
        env = QProcessEnvironment.systemEnvironment()
        env.insert(PARENT_PID_ENV, str(os.getpid()))  # the sweep cancels itself when the window dies
        proc.setProcessEnvironment(env)
        job = _Job(request, proc)
        proc.readyReadStandardOutput.connect(lambda: self._read_stdout(job))
        proc.readyReadStandardError.connect(lambda: self._read_stderr(job))
        proc.finished.connect(lambda code, status: self._on_finished(job, code, status))
        proc.errorOccurred.connect(lambda err: self._on_error(job, err))
        self._job = job
        self.last_command = [self.command[0], *args]
        proc.start()

    def cancel(self) -> None:
        """Stop the current sweep (SIGTERM, then SIGKILL after a grace period); `canceled` follows
        once its process has ended."""
        job = self._job
        if job is None:
            return
        self._job = None
        job.canceled = True
        self._retired.append(job)
        proc = job.process
        if proc.state() != QProcess.ProcessState.NotRunning:
            proc.terminate()
            QTimer.singleShot(CANCEL_GRACE_MS, proc, lambda: self._kill_if_running(job))

    def _kill_if_running(self, job: _Job) -> None:
        if job.process.state() != QProcess.ProcessState.NotRunning:
            job.process.kill()

    def shutdown(self, wait_ms: int = 5000) -> None:
        """Cancel and wait for every sweep process (the window is closing)."""
        self.cancel()
        for job in list(self._retired):
            if job.process.state() != QProcess.ProcessState.NotRunning:
                if not job.process.waitForFinished(wait_ms):
                    job.process.kill()
                    job.process.waitForFinished(1000)

    # ---- process output ---------------------------------------------------------------------
    def _read_stdout(self, job: _Job) -> None:
        job.stdout += bytes(job.process.readAllStandardOutput())
        *lines, job.stdout = job.stdout.split(b"\n")
        for line in lines:
            self._handle_line(job, line)

    def _read_stderr(self, job: _Job) -> None:
        job.stderr += bytes(job.process.readAllStandardError())
        if len(job.stderr) > 256_000:
            job.stderr = job.stderr[-128_000:]

    def _handle_line(self, job: _Job, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"{"):
            return
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("event")
        current = job is self._job
        if kind == "sweep" and isinstance(event.get("sweep"), dict):
            job.sweep = event["sweep"]
            if current:
                self.started.emit(job.sweep)
        elif kind == "progress":
            if current:
                self.progress.emit(int(event.get("index") or 0), int(event.get("step") or 0), int(event.get("of") or 0))
        elif kind == "cell":
            index = event.get("index")
            if job.sweep is not None and isinstance(index, int) and 0 <= index < len(job.sweep.get("cells", [])):
                keys = job.sweep["cells"][index].keys()
                job.sweep["cells"][index] = {k: event.get(k) for k in keys}
                job.sweep["best"] = event.get("best")
            if current:
                self.cellFinished.emit(event)
        elif kind == "error":
            job.error = event
        elif kind == "done":
            job.done = event
            if isinstance(event.get("sweep"), dict):
                job.sweep = event["sweep"]

    def _on_finished(self, job: _Job, code: int, status: QProcess.ExitStatus) -> None:
        self._read_stdout(job)
        if job.stdout:
            self._handle_line(job, job.stdout)
            job.stdout = b""
        self._read_stderr(job)
        if job in self._retired:
            self._retired.remove(job)
        job.process.deleteLater()
        out = str(job.request.out)
        if job.canceled:
            self.canceled.emit(out)
            return
        if job is not self._job:
            return
        self._job = None
        if job.done is not None:
            self.finished.emit(str(job.done.get("out") or out))
            return
        if job.error is not None:
            self.failed.emit(str(job.error.get("message") or "the sweep failed"))
            return
        crashed = status == QProcess.ExitStatus.CrashExit
        message = "the sweep crashed" if crashed else f"the sweep exited with code {code}"
        last = [ln for ln in job.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        self.failed.emit(message + (f": {last[-1]}" if last else ""))

    def _on_error(self, job: _Job, error: QProcess.ProcessError) -> None:
        if error != QProcess.ProcessError.FailedToStart or job is not self._job:
            return  # other errors are followed by finished()
        self._job = None
        job.process.deleteLater()
        self.failed.emit(f"could not start the sweep ({self.command[0]}): {job.process.errorString()}")

