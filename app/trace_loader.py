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
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Qt, Signal

from branchscope.profiling.trace.model import LoadCancelled, Trace, TraceFormatError
from branchscope.widgets.load_progress import LoadProgress
from branchscope.widgets.timeline import prepare_trace

Paths = Sequence[str | os.PathLike[str]]
#: `load(paths, progress)` -> a Trace; `progress(phase, fraction) -> bool` as in the reader.
LoadFunction = Callable[[Paths, Callable[[str, float], bool]], Trace]

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
        self._bridge = _Bridge(self)
        queued = Qt.ConnectionType.QueuedConnection
        self._bridge.progress.connect(self._on_progress, queued)
        self._bridge.loaded.connect(self._on_loaded, queued)
        self._bridge.failed.connect(self._on_failed, queued)
        self._bridge.cancelled.connect(self._on_cancelled, queued)

    # ---- API ----------------------------------------------------------------------------------
    def start(self, paths: Paths, *, load: LoadFunction | None = None) -> None:
        """Load `paths` (with `load` instead of the loader's own, if given). A load under way is
        abandoned: it stops at its next progress call and says nothing more."""
        if self._stop is not None:
            self._stop.set()
        self._job += 1
        stop = threading.Event()
        self._stop = stop
        self._thread = threading.Thread(
            target=self._work,
            args=(self._job, list(paths), load or self._load, stop),
            name=f"branchscope-load-{self._job}",
            daemon=True,  # never keeps the application from quitting
        )
        self.started.emit(list(paths))
        self._thread.start()

    def cancel(self) -> None:
        """Stop the load under way at its next progress call; `cancelled` follows once it stopped."""
        if self._stop is not None:
            self._stop.set()

    def is_loading(self) -> bool:
        """Whether a load was started and has not yet said how it ended."""
        return self._stop is not None

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

        try:
            trace = load(paths, report)
            for k, build in enumerate(self._prepare):
                if stop.is_set():
                    raise LoadCancelled("loading stopped before the index")
                emit("progress", "index", overall.index(k / len(self._prepare)))
                build(trace)
            if stop.is_set():
                raise LoadCancelled("loading stopped after the index")
            emit("progress", "index", overall.index(1.0))
        except LoadCancelled:
            emit("cancelled")
        except (TraceFormatError, OSError) as exc:
            emit("failed", str(exc))
        except Exception as exc:  # a bug in a view's preparation must not take the window down
            emit("failed", f"{', '.join(str(p) for p in paths)}: {type(exc).__name__}: {exc}")
        else:
            emit("loaded", trace)

    # ---- in the GUI thread ----------------------------------------------------------------------
    def _on_progress(self, job: int, phase: str, fraction: float) -> None:
        stop = self._stop
        if job == self._job and stop is not None and not stop.is_set():
            self.progress.emit(phase, fraction)

    def _on_loaded(self, job: int, trace: object) -> None:
        self._end(job, self.loaded, trace)

    def _on_failed(self, job: int, message: str) -> None:
        self._end(job, self.failed, message)

    def _on_cancelled(self, job: int) -> None:
        self._end(job, self.cancelled)

    def _end(self, job: int, signal, *args) -> None:
        """The load's one last word; once cancelled, whatever its worker ended with is `cancelled`."""
        stop = self._stop
        if job != self._job or stop is None:
            return  # an abandoned load
        self._stop = None
        if stop.is_set():
            self.cancelled.emit()
        else:
            signal.emit(*args)


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
