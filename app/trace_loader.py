"""Loading traces off the GUI thread, with progress and Cancel.

`TraceLoader.start(paths)` reads the files in a worker thread through `load_traces(paths,
progress=...)` (merged as ranks when several), then builds what the views need at load (the
timeline's branches, colours and level-of-detail index, kept with the trace by
`widgets.trace_cache`), so that showing the trace afterwards is instant. Meanwhile the window's
event loop runs: the worker talks to it only through queued signals.

Signals (all in the GUI thread): `progress(phase, fraction)`, `fraction` of the whole load (0..1,
never decreasing within a load; `phase` is the reader's "reading", "parsing", "events", "memory",
"lanes", then "index"); then exactly one of `loaded(trace)`, `failed(message)` or `cancelled()`.
`cancel()` stops the worker at its next progress call; from then on the load says nothing but
`cancelled`. `widgets.load_progress.LoadProgress` shows a load (`connect_progress`).

It is the window's one loader: opened files, folders and drops (`read_sources`), a finished run
(`read_run`), one more rank of a large job (`rank_loader`), the runs the Compare page compares
(`entries_loader`) all load through `start`, each with
what to do once it is read (`done`, `failed`); the command line and tests wait for a load
(`load_now`, the same reading on their thread). This is the only module of the window that calls
the trace engine's openers (`profiling/trace/opening.py`, `rank_job`, `merge`).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from branchscope.app.run_entry import Entry
from branchscope.profiling.trace.model import LoadCancelled, Trace, TraceFormatError
from branchscope.widgets.load_progress import LoadProgress
from branchscope.widgets.timeline import prepare_trace

Paths = Sequence[str | os.PathLike[str]]
#: `progress(phase, fraction) -> bool`, as in the reader: False cancels.
Progress = Callable[[str, float], bool]
#: `load(paths, progress)` -> what was read (a Trace, unless the load says otherwise).
LoadFunction = Callable[[Paths, Progress], Any]
#: What to do in the GUI thread with what a load read (`done`), or with why it failed (`failed`).
Done = Callable[[Any], Any]
Failed = Callable[[str], Any]
#: What to do in the GUI thread when the user cancelled the load (a finished run's, say so).
Cancelled = Callable[[], Any]

#: The reader's phases in order, with their rough share of one file's load time.
READER_PHASES = {"reading": 0.1, "parsing": 0.15, "events": 0.5, "memory": 0.05, "lanes": 0.2}
#: Share of the whole load taken by building what the views need ("index").
INDEX_SHARE = 0.08


#: The phase of files read by the pool (`profiling.trace.merge.FILES_PHASE`; this module leaves the
#: profiling engine unimported until a load starts).
FILES_PHASE = "files"


def _load_traces(paths: Paths, progress: Callable[[str, float], bool]) -> Trace:
    from branchscope.profiling.trace.merge import load_traces

    return load_traces(paths, progress=progress)


class _Overall:
    """Maps the reader's (phase, fraction within it), file after file, to a fraction of the whole."""

    def __init__(self, n_files: int):
        self.n_files = max(n_files, 1)
        self.file = 0
        self.last_rank = -1
        self.value = 0.0
        self._starts = dict(zip(READER_PHASES, itertools.accumulate([0.0, *READER_PHASES.values()])))

    def reader(self, phase: str, fraction: float) -> float:
        if phase == FILES_PHASE:  # files read by the pool: files done of all, the reading share
            self._raise((1 - INDEX_SHARE) * min(max(fraction, 0.0), 1.0))
        elif phase in READER_PHASES:
            rank = list(READER_PHASES).index(phase)
            if rank < self.last_rank:  # phases start over: the next file
                self.file = min(self.file + 1, self.n_files - 1)
            self.last_rank = rank
            within = self._starts[phase] + READER_PHASES[phase] * min(max(fraction, 0.0), 1.0)
            self._raise((1 - INDEX_SHARE) * (self.file + within) / self.n_files)
        return self.value

    def index(self, fraction: float) -> float:
        self._raise(1 - INDEX_SHARE + INDEX_SHARE * min(max(fraction, 0.0), 1.0))
        return self.value

    def _raise(self, value: float) -> None:
        self.value = max(self.value, min(value, 1.0))


class _Bridge(QObject):
    """Carries the worker's news to the GUI thread; every signal names its load."""

    progress = Signal(int, str, float)
    loaded = Signal(int, object)
    failed = Signal(int, str)
    cancelled = Signal(int)


class TraceLoader(QObject):
    """Loads traces in a worker thread; one load at a time (see the module docstring)."""

    #: A load began: the paths given to `start` (a list).
    started = Signal(object)
    progress = Signal(str, float)
    loaded = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        load: LoadFunction | None = None,
        prepare: Sequence[Callable[[Trace], None]] = (prepare_trace,),
    ):
        super().__init__(parent)
        self._load = load or _load_traces
        self._prepare = tuple(prepare)
        self._job = 0
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        #: The load under way's `done` and `failed` (`start`), and whether it is kept.
        self._then: tuple[Done | None, Failed | None, Cancelled | None] = (None, None, None)
        self._kept = False
        #: Loads started while a kept one was under way, each waiting its turn (`start`'s arguments).
        self._waiting: list[tuple[list, LoadFunction, Done | None, Failed | None, Cancelled | None, bool]] = []
        self._bridge = _Bridge(self)
        queued = Qt.ConnectionType.QueuedConnection
        self._bridge.progress.connect(self._on_progress, queued)
        self._bridge.loaded.connect(self._on_loaded, queued)
        self._bridge.failed.connect(self._on_failed, queued)
        self._bridge.cancelled.connect(self._on_cancelled, queued)

    # ---- API ----------------------------------------------------------------------------------
    def start(
        self,
        paths: Paths,
        *,
        load: LoadFunction | None = None,
        done: Done | None = None,
        failed: Failed | None = None,
        cancelled: Cancelled | None = None,
        keep: bool = False,
    ) -> None:
        """Load `paths` (with `load` instead of the loader's own, if given); once read, `done(what
        was read)` (or `failed(message)`) in the GUI thread, then the signal; once the user cancelled
        it, the signal, then `cancelled()`. A load under way is
        abandoned: it stops at its next progress call and says nothing more. A load to `keep` (a
        finished run's trace, never dropped) is never abandoned: started while another is under
        way, it waits its turn, as does a load started while a kept one is under way (replacing
        any other waiting load that is not kept)."""
        job = (list(paths), load or self._load, done, failed, cancelled, keep)
        if self._stop is not None and (keep or self._kept):
            self._waiting = [w for w in self._waiting if w[5]] + [job]
            return
        if self._stop is not None:
            self._stop.set()
        self._begin(*job)

    def _begin(
        self, paths: list, load: LoadFunction, done: Done | None, failed: Failed | None, cancelled: Cancelled | None, keep: bool
    ) -> None:
        self._job += 1
        stop = threading.Event()
        self._stop = stop
        self._then, self._kept = (done, failed, cancelled), keep
        self._thread = threading.Thread(
            target=self._work,
            args=(self._job, paths, load, stop),
            name=f"branchscope-load-{self._job}",
            daemon=True,  # never keeps the application from quitting
        )
        self.started.emit(paths)
        self._thread.start()

    def load_now(self, paths: Paths, *, load: LoadFunction, done: Done, failed: Failed) -> Any:
        """Read `paths` as `start` does, on this thread (the command line and tests wait for what
        they open), leaving a load under way alone; what `done` or `failed` returns."""
        outcome, value = self._read(list(paths), load, None, lambda _phase, _fraction: True)
        return done(value) if outcome == "loaded" else failed(value)

    def cancel(self) -> None:
        """Stop the load under way at its next progress call; `cancelled` follows once it stopped."""
        if self._stop is not None:
            self._stop.set()

    def is_loading(self) -> bool:
        """Whether a load was started and has not yet said how it ended."""
        return self._stop is not None or bool(self._waiting)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the last load's worker has ended (for shutdown and tests); True if it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    # ---- the worker thread ----------------------------------------------------------------------
    def _work(self, job: int, paths: list, load: LoadFunction, stop: threading.Event) -> None:
        overall = _Overall(len(paths))
        bridge = self._bridge

        def emit(signal_name: str, *args) -> None:
            try:
                getattr(bridge, signal_name).emit(job, *args)
            except RuntimeError:  # the loader was deleted: nobody is listening
                stop.set()

        def report(phase: str, fraction: float) -> bool:
            if stop.is_set():
                return False
            emit("progress", phase, overall.reader(phase, fraction))
            return True

        def index(fraction: float) -> bool:
            emit("progress", "index", overall.index(fraction))
            return not stop.is_set()

        outcome, value = self._read(paths, load, index, report)
        emit(outcome, *([] if outcome == "cancelled" else [value]))

    def _read(
        self, paths: list, load: LoadFunction, index: Callable[[float], bool] | None, report: Progress
    ) -> tuple[str, Any]:
        """("loaded", what was read), ("failed", why) or ("cancelled", None); `index(fraction)`
        says how far the views' preparation is, False from it stopping the load."""
        try:
            trace = load(paths, report)
            for k, build in enumerate(self._prepare):
                if index is not None and not index(k / len(self._prepare)):
                    raise LoadCancelled("loading stopped before the index")
                build(trace)
            if index is not None and not index(1.0):
                raise LoadCancelled("loading stopped after the index")
        except LoadCancelled:
            return "cancelled", None
        except (TraceFormatError, OSError) as exc:
            return "failed", str(exc)
        except Exception as exc:  # a bug in a view's preparation must not take the window down
            return "failed", f"{', '.join(str(p) for p in paths)}: {type(exc).__name__}: {exc}"
        return "loaded", trace

    # ---- in the GUI thread ----------------------------------------------------------------------
    def _on_progress(self, job: int, phase: str, fraction: float) -> None:
        stop = self._stop
        if job == self._job and stop is not None and not stop.is_set():
            self.progress.emit(phase, fraction)

    def _on_loaded(self, job: int, trace: object) -> None:
        self._end(job, self.loaded, 0, trace)

    def _on_failed(self, job: int, message: str) -> None:
        self._end(job, self.failed, 1, message)

    def _on_cancelled(self, job: int) -> None:
        self._end(job, self.cancelled, None)

    def _end(self, job: int, signal, then: int | None, *args) -> None:
        """The load's one last word (its `done` or `failed` first); once cancelled, whatever its
        worker ended with is `cancelled`."""
        stop = self._stop
        if job != self._job or stop is None:
            return  # an abandoned load
        self._stop = None
        callbacks, self._then = self._then, (None, None, None)
        if stop.is_set():
            self.cancelled.emit()
            if callbacks[2] is not None:  # after the signal: what the load's own caller says is the last word
                callbacks[2]()
        else:
            call = callbacks[then] if then is not None else None
            if call is not None:
                call(*args)
            signal.emit(*args)
        if self._waiting and self._stop is None:  # the next load's turn
            self._begin(*self._waiting.pop(0))


def describe_paths(paths: Sequence[str | os.PathLike[str]]) -> str:
    """What a load is of, in a few words: the file's name, or the first one's and how many more."""
    names = [os.path.basename(os.fspath(p).rstrip("/\\")) or os.fspath(p) for p in paths]
    if len(names) <= 1:
        return names[0] if names else ""
    return f"{names[0]} and {len(names) - 1} more"


def connect_progress(loader: TraceLoader, widget: LoadProgress) -> None:
    """Show every load of `loader` in `widget` (which appears only when a load takes a while);
    Cancel in the widget cancels the load. Call once."""
    loader.started.connect(lambda paths: widget.begin(describe_paths(paths)))
    loader.progress.connect(widget.set_progress)
    loader.loaded.connect(widget.finish)
    loader.failed.connect(widget.finish)
    loader.cancelled.connect(widget.finish)
    widget.cancelRequested.connect(loader.cancel)


# ---- what the window loads ---------------------------------------------------------------------
def _prepare(trace: Trace) -> None:
    """Build what the views need ahead of time (the timeline's index); showing the trace prepares
    whatever is missing, and says what went wrong."""
    try:
        prepare_trace(trace)
    except Exception:  # noqa: BLE001 - the view says what went wrong when it is shown
        pass


@dataclass
class Opened:
    """What `read_sources` read: the entries to list (their traces loaded, ranks of one job
    joined), each with how many of the paths it holds; what to keep among the recent files (each
    path as named: a folder, a file; rank files of one whole folder, that folder); and one message
    per path that could not be read."""

    entries: list[tuple[Entry, int]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def read_sources(paths: Paths, progress: Progress) -> Opened:
    """Read trace files, run folders, folders of ranks and snapshots, each with its entry (labelled
    by model, mode and threads, its medians when a run.json names it), gathered and joined as
    `profiling.trace.opening` gathers and joins them (rank files of a large job picked one by one
    open as their folder does), the timeline's index built."""
    from branchscope.profiling.trace.opening import gather, join_opened, read_source, recalled_as
    from branchscope.profiling.trace.sources import open_source

    opened = Opened()
    sources = []
    for path in paths:
        try:
            sources.append(open_source(path))
        except (TraceFormatError, OSError) as exc:
            opened.errors.append(str(exc))
    read: list[tuple[Entry, int, Trace]] = []
    for members, source in gather(sources, progress):
        try:
            entry = Entry.of_source(source)
            read.append((entry, len(members), read_source(entry.paths, progress)))
        except (TraceFormatError, OSError) as exc:
            opened.errors.append(str(exc))
            continue
        opened.files += [str(p) for p in recalled_as(source, [sources[k].path for k in members])]
    for joined in join_opened([(entry.trace_path, trace) for entry, _, trace in read]):
        entry = read[joined.members[0]][0]
        if joined.ranks:
            more = tuple(read[i][0].trace_path for i in joined.members[1:])
            entry = Entry(joined.label, entry.trace_path, trace=joined.trace, more_paths=more, from_disk=True)
        entry.trace = joined.trace
        _prepare(joined.trace)
        opened.entries.append((entry, sum(read[i][1] for i in joined.members)))
    return opened


def read_run(paths: Paths, progress: Progress | None = None) -> Trace:
    """A run's trace, with what the views need built: every rank of a distributed run (of a large
    one, those in view). A finished run's, an entry chosen whose trace was let go, and an entry
    shown again (`Runs.load`, without progress)."""
    from branchscope.profiling.trace.opening import read_source

    trace = read_source(paths, progress)
    _prepare(trace)
    return trace


def read_whole(paths: Sequence[Path], progress: Progress | None = None) -> Trace:
    """An entry's trace with every rank loaded, whatever the job's size (the Compare page's)."""
    from branchscope.profiling.trace.merge import load_traces

    return load_traces(paths, progress=progress)


def entries_loader(groups: Sequence[Sequence[Path]]) -> tuple[list[Path], LoadFunction]:
    """How to read several entries' traces in one load (the Compare page's): every entry's paths
    one after the other (what the load is of, for `TraceLoader.start`), and the load, which
    returns the traces in the order of `groups`, each whole (`read_whole`) with what the views
    need built; its progress goes entry by entry over the whole load."""

    def load(_paths: Paths, progress: Progress) -> list[Trace]:
        traces = []
        for k, group in enumerate(groups):
            within = _Overall(len(group))

            def report(phase: str, fraction: float, k: int = k, within: _Overall = within) -> bool:
                done = within.reader(phase, fraction) / (1 - INDEX_SHARE)
                return progress(FILES_PHASE, (k + done) / len(groups))

            trace = read_whole(group, report)
            _prepare(trace)
            traces.append(trace)
        return traces

    return [p for group in groups for p in group], load


def rank_loader(trace: Trace | None, rank: int) -> tuple[Path, LoadFunction] | None:
    """How to read the large job `trace` shows some ranks of again with rank `rank` in view (the
    least recently wanted rank let go past `rank_job.IN_VIEW`): its file and the load; None when
    `trace` is of no such job or the job has no such rank."""
    from branchscope.profiling.trace.rank_job import job_of

    job = job_of(trace)
    if job is None or rank not in job.ranks:
        return None
    view = job.wanted(rank)

    def load(_paths: Paths, progress: Progress) -> Trace:
        loaded = job.load(view, progress=progress)
        _prepare(loaded)
        return loaded

    return job.path_of(rank), load
