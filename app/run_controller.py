"""Runs models for the window: one `python -m branchscope.profiling.run.runner ... --jsonl` process per run.

The window never imports torch: every run is a fresh runner process (which spawns the worker),
started with QProcess so the event loop keeps the window responsive. The runner reports on stdout
one JSON object per line (docs/formats.md, "The JSON-line events"): phase, progress, error, and finally done
with the output folder and run.json's content; this controller turns those lines into signals.
`RunSpec` (what to run) lives in the Qt-free `app/run_entry.py` and is re-exported here.

One run at a time, as `app/jobs.py` says for every job of the window: starting a run while one is
going cancels the old one; `cancel()` emits `canceled` at once and `stopped` once the runner has
exited (SIGTERM, on which the runner kills its worker's process group before exiting; SIGKILL if
it is still there a few seconds later).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from branchscope.app.jobs import Job, JobController
from branchscope.app.jsonl_process import CANCEL_GRACE_MS
from branchscope.app.run_entry import Entry, RunSpec
from branchscope.app.runs_on_disk import RUN_NAME, SESSION_NAME, runs_root, saved_runs, subfolders
from branchscope.profiling.files import read_regular
from branchscope.profiling.run.folder import names_text, remove_if_all_ours
from branchscope.profiling.run.protocol import RUNNER_MODULE, python_command
from branchscope.profiling.trace.events import DoneEvent, Event, PhaseEvent, ProgressEvent
from branchscope.profiling.trace.records import DEFAULT_TRACE, RunRecord

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


#: Run folders kept in the default runs folder; older ones are removed when a window starts.
KEEP_RUNS = 40


def default_runs_dir() -> Path:
    """~/.cache/branchscope/runs/<time>-<pid> (`runs_on_disk.runs_root`): one window's runs together, named
    so they sort by age."""
    return runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


#: In the runs root, written by branchscope: the run folders pruning kept because they hold files
#: branchscope did not write, one a line, so that each is said once.
KEPT_NOTE = ".branchscope-kept"


def prune_runs(session_dir: Path, keep: int) -> list[tuple[Path, list[str]]]:
    """Keep the newest `keep` run folders of earlier windows under the runs root; remove the rest.

    Only what branchscope made is ever removed: session folders right under the root named
    <YYYYmmdd-HHMMSS>-<pid> (as `default_runs_dir` names them), the run folders in them named
    <NNN>-<model>-<mode>-<threads> (as `RunController.start` names them) when everything in them
    is branchscope's by their manifest (`folder.remove_if_all_ours`: a folder holding a user's
    file stays whole), and session folders that this leaves empty. Anything else a user put under
    the runs root stays, symbolic links are never followed, and a folder that cannot be read or
    removed is skipped, never an error. Returns the folders kept for holding files branchscope did
    not write (with those files) that no earlier pruning has said (`KEPT_NOTE`).
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
    kept = [(old, foreign) for _, old in runs[keep:] if (foreign := remove_if_all_ours(old))]
    for session in sessions:
        try:
            session.rmdir()  # only when empty
        except OSError:
            pass
    return _not_said_before(root, kept)


def _not_said_before(root: Path, kept: list[tuple[Path, list[str]]]) -> list[tuple[Path, list[str]]]:
    """`kept` less the folders KEPT_NOTE lists; KEPT_NOTE rewritten to list those kept now."""
    note = root / KEPT_NOTE
    try:
        said = set(read_regular(note, 1 << 20, follow_symlinks=False).decode("utf-8", "replace").splitlines())
    except OSError:
        said = set()
    names = [str(folder.relative_to(root)) for folder, _ in kept]
    if kept or said:
        try:
            tmp = root / f".{KEPT_NOTE}.tmp"
            tmp.write_text("".join(f"{n}\n" for n in names))
            os.replace(tmp, note)
        except OSError:
            pass
    return [k for k, name in zip(kept, names, strict=True) if name not in said]


def kept_text(kept: list[tuple[Path, list[str]]]) -> str:
    """One line saying which old run folders pruning kept and why."""
    first, foreign = kept[0]
    more = f" (and {len(kept) - 1} more folder{'s' if len(kept) > 2 else ''})" if len(kept) > 1 else ""
    return f"kept the old run folder {first}{more}: it holds files branchscope did not write ({names_text(foreign, 3)})"


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


class RunController(JobController):
    """Starts, follows and cancels runner processes (see the module docstring and `app/jobs.py`)."""

    #: A run began (its RunSpec); its runner starts next.
    started = Signal(object)
    #: The run entered a phase: "load", "warmup", "timing", "profile" or "export" (the runner's words).
    phase = Signal(str)
    #: Profiled step i of K finished.
    progress = Signal(int, int)
    #: The run succeeded (a FinishedRun).
    finished = Signal(object)
    #: The run failed: one-line message, then the details (the model's traceback, or stderr).
    failed = Signal(str, str)
    #: The run was cancelled (its RunSpec), by `cancel()` or by a newer run: emitted at once.
    canceled = Signal(object)
    #: A cancelled run's runner has exited (its RunSpec): nothing of the run is left running.
    stopped = Signal(object)
    #: Pruning kept old run folders that hold files branchscope did not write: one line saying so.
    keptFolders = Signal(str)

    program = "runner"
    noun = "run"

    def __init__(
        self, parent: QObject | None = None, *, command: list[str] | None = None, runs_dir: Path | None = None
    ):
        super().__init__(list(command) if command else python_command(RUNNER_MODULE), parent)
        self._runs_dir = Path(runs_dir) if runs_dir else None
        self._count = 0
        self.kept_notice: str | None = None

    # ---- state ------------------------------------------------------------------------------
    def _session_dir(self) -> Path:
        """The runs folder, not made yet; the default one is named (and older runs pruned) once."""
        if self._runs_dir is None:
            self._runs_dir = default_runs_dir()
            kept = prune_runs(self._runs_dir, keep=KEEP_RUNS)
            if kept:
                #: The line said when pruning kept folders (the window shows it once it is up).
                self.kept_notice = kept_text(kept)
                print(f"branchscope: {self.kept_notice}", file=sys.stderr)
                self.keptFolders.emit(self.kept_notice)
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
        """The complete runs kept from earlier windows (oldest first; `runs_on_disk.saved_runs`), read from
        the runs root after pruning it; this window's own runs are not among them. Makes nothing."""
        session = self._session_dir()
        return saved_runs(session.parent, exclude=session)

    def new_folder(self, label: str) -> Path:
        """The path (not made) of this window's next run folder, `NNN-label` in the runs folder:
        a run's, or a sweep's (pruned like a run). Raises OSError as `runs_dir` does."""
        self._count += 1
        return self.runs_dir() / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self._count:03d}-{label}")

    @property
    def current(self) -> RunSpec | None:
        return self._job.subject if self._job else None

    # ---- control ----------------------------------------------------------------------------
    def start(self, spec: RunSpec) -> None:
        """Start a run; one already going is cancelled first (then OSError, as `new_folder` raises it)."""
        self.cancel()
        out = self.new_folder(f"{spec.model_label}-{spec.mode}-{spec.interop}x{spec.intra}")
        self._start(Job(spec, out, [*self.command, *spec.runner_arguments(out)]))

    # ---- what the runner says ---------------------------------------------------------------
    def _event(self, job: Job, event: Event) -> None:
        if isinstance(event, PhaseEvent):
            self.phase.emit(event.phase)
        elif isinstance(event, ProgressEvent):
            self.progress.emit(event.step, event.of)

    def _emit_finished(self, job: Job, done: DoneEvent) -> None:
        self.finished.emit(FinishedRun(job.subject, Path(done.out or job.out), done.run or RunRecord()))

    def _emit_failed(self, job: Job, message: str, details: str) -> None:
        self.failed.emit(message, details)
