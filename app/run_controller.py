"""Runs models for the window: one `python -m branchscope.profiling.run.runner ... --jsonl` process per run.

The window never imports torch: every run is a fresh runner process (which spawns the worker),
started with QProcess so the event loop keeps the window responsive. The runner reports on stdout
one JSON object per line (ARCHITECTURE.md, "Contracts"): phase, progress, error, and finally done
with the output folder and run.json's content; this controller turns those lines into signals.
`RunSpec` (what to run) lives in the Qt-free `app/runs.py` and is re-exported here.

One run at a time: starting a run while one is going cancels the old one. Cancelling sends
SIGTERM, on which the runner kills its worker's process group before exiting, and SIGKILL if the
runner has not exited a few seconds later.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Signal

from branchscope.app.jsonl_process import CANCEL_GRACE_MS, JsonLinesProcess
from branchscope.app.runs import (
    RUN_NAME,
    SESSION_NAME,
    Entry,
    RunSpec,
    runs_root,
    saved_runs,
    subfolders,
)
from branchscope.profiling.run.protocol import RUNNER_MODULE, python_command
from branchscope.profiling.trace.records import (
    DEFAULT_TRACE,
    DoneEvent,
    ErrorEvent,
    Event,
    PhaseEvent,
    ProgressEvent,
    RunRecord,
)

__all__ = ["CANCEL_GRACE_MS", "FinishedRun", "RunController", "RunSpec", "default_runs_dir", "prune_runs"]


@dataclass(frozen=True)
class FinishedRun:
    spec: RunSpec
    out: Path
    run: RunRecord

    @property
    def trace_path(self) -> Path:
        """The trace (a distributed run's: rank 0's)."""
        return self.paths[0]

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every trace of the run: one, or each rank's of a distributed run (run.json "ranks"), rank 0 first."""
        return tuple(self.out / name for name in self.run.trace_files() or [DEFAULT_TRACE])


@dataclass
class _Job:
    spec: RunSpec
    out: Path
    proc: JsonLinesProcess | None = None
    done: DoneEvent | None = None
    error: ErrorEvent | None = None
    progress: tuple[int, int] = (0, 0)
    canceled: bool = False
    notes: list[str] = field(default_factory=list)


#: Run folders kept in the default runs folder; older ones are removed when a window starts.
KEEP_RUNS = 40


def default_runs_dir() -> Path:
    """~/.cache/branchscope/runs/<time>-<pid> (`runs.runs_root`): one window's runs together, named
    so they sort by age."""
    return runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def prune_runs(session_dir: Path, keep: int) -> None:
    """Keep the newest `keep` run folders of earlier windows under the runs root; remove the rest.

    Only what branchscope made is ever removed: session folders right under the root named
    <YYYYmmdd-HHMMSS>-<pid> (as `default_runs_dir` names them), the run folders in them named
    <NNN>-<model>-<mode>-<threads> (as `RunController.start` names them), and session folders
    that this leaves empty. Anything else a user put under the runs root stays, symbolic links
    are never followed, and a folder that cannot be read or removed is skipped, never an error.
    """
    session_name, run_name = SESSION_NAME, RUN_NAME
    root = session_dir.parent
    # Sessions of windows still open are left alone: their runs are on screen (and reloaded
    # from disk when selected again).
    sessions = [d for d in subfolders(root, session_name) if d != session_dir and not _session_alive(d)]
    runs: list[tuple[float, Path]] = []
    for session in sessions:
        for run in subfolders(session, run_name):
            try:
                runs.append((run.lstat().st_mtime, run))
            except OSError:
                continue
    runs.sort(key=lambda r: r[0], reverse=True)
    for _, old in runs[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for session in sessions:
        try:
            session.rmdir()  # only when empty
        except OSError:
            pass


def _session_alive(session: Path) -> bool:
    """Whether the window that made `session` (named <time>-<pid>) may still be running."""
    pid = session.name.rsplit("-", 1)[-1]
    if not pid.isdigit() or int(pid) <= 1:
        return False
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


class RunController(QObject):
    """Starts, follows and cancels runner processes (see the module docstring)."""

    #: A run began (its RunSpec).
    started = Signal(object)
    #: The run entered a phase: "load", "warmup", "timing", "profile" or "export" (the runner's words).
    phase = Signal(str)
    #: Profiled step i of K finished.
    progress = Signal(int, int)
    #: The run succeeded (a FinishedRun).
    finished = Signal(object)
    #: The run failed: one-line message, then the details (the model's traceback, or stderr).
    failed = Signal(str, str)
    #: The run was cancelled (its RunSpec), by `cancel()` or by a newer run.
    canceled = Signal(object)

    def __init__(
        self, parent: QObject | None = None, *, command: list[str] | None = None, runs_dir: Path | None = None
    ):
        super().__init__(parent)
        #: The program and leading arguments; the run's arguments follow. Tests point it elsewhere.
        self.command = list(command) if command else python_command(RUNNER_MODULE)
        self._runs_dir = Path(runs_dir) if runs_dir else None
        self._job: _Job | None = None
        self._retired: list[_Job] = []
        self._count = 0
        #: The arguments of the last process started (program first).
        self.last_command: list[str] = []

    # ---- state ------------------------------------------------------------------------------
    def _session_dir(self) -> Path:
        """The runs folder, not made yet; the default one is named (and older runs pruned) once."""
        if self._runs_dir is None:
            self._runs_dir = default_runs_dir()
            prune_runs(self._runs_dir, keep=KEEP_RUNS)
        return self._runs_dir

    def runs_dir(self) -> Path:
        """Where runs write their trace and run.json.

        By default a per-user cache folder that keeps the most recent runs (so a trace shown in
        the window is still there after it closes) and prunes older ones (so runs do not pile up).
        Raises OSError, saying which folder and why, when it cannot be made or written to (a
        read-only cache folder, a file where a folder should be).
        """
        runs = self._session_dir()
        try:
            runs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(f"cannot create the runs folder {runs}: {exc.strerror or exc}") from exc
        if not os.access(runs, os.W_OK | os.X_OK):
            raise OSError(f"cannot write to the runs folder {runs}: permission denied")
        return runs

    def saved_runs(self) -> list[Entry]:
        """The complete runs kept from earlier windows (oldest first; `runs.saved_runs`), read from
        the runs root after pruning it; this window's own runs are not among them. Makes nothing."""
        session = self._session_dir()
        return saved_runs(session.parent, exclude=session)

    def new_folder(self, label: str) -> Path:
        """The path (not made) of this window's next run folder, `NNN-label` in the runs folder:
        a run's, or a sweep's (pruned like a run). Raises OSError as `runs_dir` does."""
        self._count += 1
        return self.runs_dir() / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self._count:03d}-{label}")

    def is_running(self) -> bool:
        return self._job is not None

    def active_processes(self) -> int:
        """Runner processes not yet exited: the current one and cancelled ones still stopping."""
        jobs = ([self._job] if self._job else []) + self._retired
        return sum(1 for j in jobs if j.proc is not None and j.proc.running())

    @property
    def current(self) -> RunSpec | None:
        return self._job.spec if self._job else None

    # ---- control ----------------------------------------------------------------------------
    def start(self, spec: RunSpec) -> None:
        """Start a run; one already going is cancelled first."""
        if self._job is not None:
            self.cancel()
        out = self.new_folder(f"{spec.model_label}-{spec.mode}-{spec.interop}x{spec.intra}")
        command = [*self.command, *spec.runner_arguments(out)]
        job = _Job(spec, out)
        job.proc = JsonLinesProcess(
            command,
            lambda event: self._on_event(job, event),
            lambda code, status: self._on_finished(job, code, status),
            lambda reason: self._on_failed_to_start(job, reason),
            self,
        )
        self._job = job
        self.last_command = command
        # `started` first: a program that cannot start fails inside start(), and listeners
        # must see started -> failed, never the reverse.
        self.started.emit(spec)
        if self._job is not job:  # a slot of `started` cancelled or replaced this run: never start it
            if job in self._retired:
                self._retired.remove(job)
            job.proc.discard()
            return
        job.proc.start()

    def cancel(self) -> None:
        """Stop the current run (SIGTERM, on which the runner kills its worker; SIGKILL after a grace period)."""
        job = self._job
        if job is None:
            return
        self._job = None
        job.canceled = True
        self._retired.append(job)
        if job.proc is not None:
            job.proc.stop(CANCEL_GRACE_MS)
        self.canceled.emit(job.spec)

    def shutdown(self, wait_ms: int = 5000) -> None:
        """Cancel and wait for every runner (the window is closing)."""
        self.cancel()
        for job in list(self._retired):
            if job.proc is not None:
                job.proc.wait(wait_ms)

    # ---- process output ---------------------------------------------------------------------
    def _on_event(self, job: _Job, event: Event) -> None:
        if isinstance(event, PhaseEvent):
            if job is self._job:
                self.phase.emit(event.phase)
        elif isinstance(event, ProgressEvent):
            job.progress = (event.step, event.of)
            if job is self._job:
                self.progress.emit(event.step, event.of)
        elif isinstance(event, ErrorEvent):
            job.error = event
        elif isinstance(event, DoneEvent):
            job.done = event

    def _on_finished(self, job: _Job, code: int, status: QProcess.ExitStatus) -> None:
        if job in self._retired:
            self._retired.remove(job)
        assert job.proc is not None
        job.proc.discard()
        if job.canceled or job is not self._job:
            return
        self._job = None
        if job.done is not None:
            out = Path(job.done.out or job.out)
            self.finished.emit(FinishedRun(job.spec, out, job.done.run or RunRecord()))
            return
        stderr = job.proc.stderr_text()
        if job.error is not None:
            message = job.error.message or "the run failed"
            details = job.error.traceback or stderr
        else:
            crashed = status == QProcess.ExitStatus.CrashExit
            message = "the runner crashed" if crashed else f"the runner exited with code {code}"
            last = [ln for ln in stderr.splitlines() if ln.strip()]
            if last:
                message += f": {last[-1]}"
            details = stderr
        self.failed.emit(message, details)

    def _on_failed_to_start(self, job: _Job, reason: str) -> None:
        if job is not self._job:
            return
        self._job = None
        if job.proc is not None:
            job.proc.discard()
        self.failed.emit(f"could not start the runner ({self.command[0]}): {reason}", "")
