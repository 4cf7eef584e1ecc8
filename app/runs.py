"""The runs and opened traces of a window, without Qt: what the runs list shows and what the
workspace draws.

An `Entry` is a finished run (its `RunSpec` and `run.json`), a run folder read from disk, or an
opened trace file (several rank files merged into one entry). `Runs` keeps them in order, with:

- the entry shown (`current`) and a cache of the loaded traces of the few most recently shown
  entries (`trace_cache`; the others are read from disk again when shown);
- the speedup of each run: the baseline's unprofiled median step ÷ this run's (run.json
  "unprofiled_steps_ms" through `StepStats`), and whether the two are within noise (their
  interquartile ranges overlap). Runs compare only with runs of their own model: each model's
  baseline is the one the user set (`set_baseline`), else its most recent sequential 1×1 run.

Runs persist: `saved_runs(root)` lists the complete runs under the runs root (the sessions that
`run_controller.default_runs_dir` makes), `entry_for_path(path)` makes the entry of a run folder or
trace file opened from disk, labelled from its run.json or the trace's "branchscope" object.

Views follow a `Runs` through `RunsObserver` (the Qt table model in `app/runs_table.py` is one).
No Qt here, so it is tested without a display.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from branchscope.profiling.run.modes import MODES
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import BASELINE_MODE, RUN_JSON, RunRecord
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.sources import Source, open_source, run_folder
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.step_stats import speedup as stats_speedup

if TYPE_CHECKING:
    from branchscope.profiling.trace.model import Trace

#: Traces kept in memory; older entries are read again from disk when shown.
TRACE_CACHE = 4
#: Session folders under the runs root (`default_runs_dir`) and run folders in them (`RunController.start`).
SESSION_NAME = re.compile(r"\d{8}-\d{6}-\d+")
RUN_NAME = re.compile(r"\d{3,}-[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RunSpec:
    """What to run: a mode and thread counts, and the model and how it runs (`RunOptions`: the
    runner's arguments, as `branchscope profile` and the sweep take them)."""

    mode: str
    interop: int
    intra: int
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def model_key(self) -> str:
        """Identifies the model across runs (runs compare only with runs of one model)."""
        return self.options.model_key

    @property
    def model_label(self) -> str:
        return self.options.model_label

    def request(self, out: Path) -> RunRequest:
        """The runner's request for this run, writing into `out`."""
        return RunRequest(mode=self.mode, interop=self.interop, intra=self.intra, out=out, options=self.options)

    def runner_arguments(self, out: Path) -> list[str]:
        return self.request(out).argv() + ["--jsonl"]

    @classmethod
    def from_record(cls, run: RunRecord) -> RunSpec | None:
        """The spec that would repeat a run.json's run; None when it does not say enough (a
        TorchScript archive is repeatable only when run.json lists its input shapes)."""
        options = RunOptions.from_record(run)
        if options is None or run.mode is None or run.interop is None or run.intra is None:
            return None
        return cls(run.mode, run.interop, run.intra, options)


@dataclass(eq=False)
class Entry:
    """A row of the runs list: a finished run, or a trace file that was opened."""

    label: str
    trace_path: Path
    spec: RunSpec | None = None
    run: RunRecord | None = None
    #: The loaded trace, or None when it is not among the traces kept in memory.
    trace: Trace | None = None
    #: Further rank files merged with `trace_path` into one trace.
    more_paths: tuple[Path, ...] = ()
    #: The trace's "branchscope" object, for a trace opened without its run.json.
    info: RunInfo | None = None
    _stats: tuple[object, StepStats | None] | None = field(default=None, repr=False)

    @classmethod
    def of_source(cls, source: Source) -> Entry:
        """The entry of what `sources.open_source` opened (its trace not loaded)."""
        if not source.traces:
            raise TraceFormatError(f"{source.path}: is a {source.kind}, not a run or a trace")
        spec = RunSpec.from_record(source.run) if source.run is not None else None
        first, *more = source.traces
        return cls(source.label, first, spec=spec, run=source.run, more_paths=tuple(more), info=source.info)

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file this entry's trace is read from."""
        return (self.trace_path, *self.more_paths)

    @property
    def median_ms(self) -> float | None:
        """The median profiled step (run.json "median_ms"); `stats` holds the unprofiled steps."""
        return self.run.median_ms if self.run is not None else None

    @property
    def stats(self) -> StepStats | None:
        """Median and spread of the unprofiled steps (the honest numbers); None without a run.json."""
        if self._stats is None or self._stats[0] is not self.run:
            self._stats = (self.run, self.run.unprofiled_stats if self.run is not None else None)
        return self._stats[1]

    @property
    def mode(self) -> str | None:
        if self.spec is not None:
            return self.spec.mode
        if self.run is not None and self.run.mode is not None:
            return self.run.mode
        return self.info.mode if self.info is not None else None

    @property
    def threads(self) -> tuple[int, int] | None:
        """(inter-op, intra-op) threads, when known."""
        if self.spec is not None:
            return self.spec.interop, self.spec.intra
        for known in (self.run, self.info):
            if known is not None and known.interop is not None and known.intra is not None:
                return known.interop, known.intra
        return None

    @property
    def model_key(self) -> str | None:
        """Which model ran (`RunSpec.model_key`); None for a trace that does not say."""
        if self.spec is not None:
            return self.spec.model_key
        if self.run is None or not self.run.model:
            return None
        if self.run.demo is not None:
            return f"demo:{self.run.demo}"
        return f"file:{os.path.abspath(self.run.model)}"

    @property
    def branch_count(self) -> int:
        """The branches the run found (run.json's, else the trace's own list)."""
        if self.run is not None and self.run.branches is not None:
            return len(self.run.branches)
        info = self.info or (self.trace.run_info if self.trace is not None else None)
        return len(info.branches) if info is not None else 0

    @property
    def title(self) -> str:
        """How the window's title and the runs list name it: model · mode · threads."""
        parts = [self.label]
        if self.mode:
            parts.append(self.mode)
        if self.threads:
            parts.append(f"{self.threads[0]}×{self.threads[1]}")
        return " · ".join(parts)


class RunsObserver(Protocol):
    """What follows a `Runs` (a Qt item model calls its begin/end methods from these)."""

    def rows_about_to_be_inserted(self, first: int, last: int) -> None: ...
    def rows_inserted(self) -> None: ...
    def rows_about_to_be_removed(self, first: int, last: int) -> None: ...
    def rows_removed(self) -> None: ...
    def rows_changed(self, first: int, last: int) -> None: ...


class Runs:
    """The entries in list order (see the module docstring).

    What it remembers about entries (the one shown, the traces kept, the baselines) it holds as the
    `Entry` objects themselves, so taking an entry out renumbers nothing: it is only forgotten. The
    index-based methods (`current`, `baseline_of(k)`, `cached`, ...) are for the list's rows.
    """

    def __init__(self, trace_cache: int = TRACE_CACHE):
        if trace_cache < 1:
            raise ValueError(f"trace_cache must be at least 1, not {trace_cache}")
        self.trace_cache = trace_cache
        self._entries: list[Entry] = []
        #: Each entry's row (entries hash by identity), made again whenever the list changes.
        self._rows: dict[Entry, int] = {}
        #: The entry shown, None if none.
        self._current: Entry | None = None
        #: The entries whose traces are kept, least recently shown first (the cache evicts from the front).
        self._shown_order: list[Entry] = []
        #: The baselines the user set: model key -> entry; and the one set last.
        self._baselines: dict[str | None, Entry] = {}
        self._last_set: Entry | None = None
        #: Each model's default baseline, worked out once per change of the list.
        self._defaults: dict[str | None, Entry] | None = None
        self._observers: list[RunsObserver] = []

    # ---- the list ---------------------------------------------------------------------------
    @property
    def entries(self) -> list[Entry]:
        """The entries themselves, in order (change them through `Runs`, not this list)."""
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, k: int) -> Entry:
        return self._entries[k]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def index_of(self, entry: Entry | None) -> int:
        """The row of `entry` (the object itself, not an equal one); -1 for None or an entry not listed."""
        if entry is None:
            return -1
        k = self._rows.get(entry, -1)
        if 0 <= k < len(self._entries) and self._entries[k] is entry:
            return k
        # the list was changed behind our back (see `entries`): look for it
        return next((i for i, e in enumerate(self._entries) if e is entry), -1)

    def add_observer(self, observer: RunsObserver) -> None:
        self._observers.append(observer)

    def append(self, entry: Entry) -> int:
        """List `entry` last; returns its index."""
        return self.extend([entry])

    def extend(self, entries: Sequence[Entry]) -> int:
        """List `entries` last, in one insertion; returns the index of the first (len(self) if none)."""
        k = len(self._entries)
        if not entries:
            return k
        for o in self._observers:
            o.rows_about_to_be_inserted(k, k + len(entries) - 1)
        self._entries.extend(entries)
        self._list_changed()
        for o in self._observers:
            o.rows_inserted()
        self._speedups_changed()
        return k

    def remove(self, k: int) -> Entry:
        """Take entry k out of the list (indices after it move up by one) and forget it: it is
        no longer the one shown, among the cached traces, or a baseline."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        for o in self._observers:
            o.rows_about_to_be_removed(k, k)
        entry = self._entries.pop(k)
        self._list_changed()
        if self._current is entry:
            self._current = None
        self._shown_order = [e for e in self._shown_order if e is not entry]
        self._baselines = {key: b for key, b in self._baselines.items() if b is not entry}
        if self._last_set is entry:
            self._last_set = None
        for o in self._observers:
            o.rows_removed()
        self._speedups_changed()
        return entry

    def _list_changed(self) -> None:
        self._rows = {e: k for k, e in enumerate(self._entries)}
        self._defaults = None

    # ---- shown entry and trace cache --------------------------------------------------------
    @property
    def current(self) -> int:
        """Index of the entry shown, -1 if none."""
        return self.index_of(self._current)

    @property
    def current_entry(self) -> Entry | None:
        """The entry shown, None if none."""
        return self._current

    def load(self, k: int, read: Callable[[Sequence[Path]], Trace]) -> tuple[Trace, bool]:
        """Entry k's trace, read with `read(paths)` if it is not in memory; and whether it was read.

        Raises what `read` raises, with the entry unchanged.
        """
        e = self._entries[k]
        if e.trace is not None:
            return e.trace, False
        e.trace = read(e.paths)
        return e.trace, True

    def mark_shown(self, k: int) -> None:
        """Entry k is now the one shown: keep its trace, and those of the few shown before it."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        entry = self._entries[k]
        self._current = entry
        order = [e for e in self._shown_order if e is not entry] + [entry]
        for e in order[: -self.trace_cache]:
            e.trace = None
        self._shown_order = order[-self.trace_cache :]

    @property
    def cached(self) -> list[int]:
        """Entries whose traces are kept, least recently shown first."""
        return [self.index_of(e) for e in self._shown_order]

    # ---- baseline and speedup ---------------------------------------------------------------
    @property
    def baseline(self) -> int | None:
        """The baseline the user set last (None: none set; each model then has its default).

        Setting k makes k its model's baseline (`set_baseline`); setting None drops every set baseline.
        """
        return None if self._last_set is None else self.index_of(self._last_set)

    @baseline.setter
    def baseline(self, k: int | None) -> None:
        if k is None:
            self.reset_baseline()
        else:
            self.set_baseline(k)

    def set_baseline(self, k: int) -> None:
        """Entry k becomes what every run of its model is compared with."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        entry = self._entries[k]
        self._baselines[entry.model_key] = entry
        self._last_set = entry
        self._speedups_changed()

    def reset_baseline(self, k: int | None = None) -> None:
        """Back to the default baseline for entry k's model (k None: for every model)."""
        if k is None:
            self._baselines.clear()
        else:
            self._baselines.pop(self._entries[k].model_key, None)
        if self._last_set is not None and not any(b is self._last_set for b in self._baselines.values()):
            self._last_set = None
        self._speedups_changed()

    def has_set_baseline(self, k: int) -> bool:
        """Whether entry k's model has a baseline the user set."""
        return self._entries[k].model_key in self._baselines

    def _default_of(self, entry: Entry) -> Entry | None:
        if self._defaults is None:
            self._defaults = {
                e.model_key: e  # the latest wins
                for e in self._entries
                if e.model_key is not None and e.mode == BASELINE_MODE and e.threads == (1, 1) and e.stats is not None
            }
        return self._defaults.get(entry.model_key)

    def _baseline_of(self, entry: Entry) -> Entry | None:
        set_by_user = self._baselines.get(entry.model_key)
        return set_by_user if set_by_user is not None else self._default_of(entry)

    def default_baseline(self, k: int) -> int | None:
        """The most recent sequential 1×1 run of entry k's model with unprofiled step times."""
        b = self._default_of(self._entries[k])
        return None if b is None else self.index_of(b)

    def baseline_of(self, k: int) -> int | None:
        """The entry that entry k is compared with, or None."""
        b = self._baseline_of(self._entries[k])
        return None if b is None else self.index_of(b)

    def is_baseline(self, k: int) -> bool:
        e = self._entries[k]
        return self._baseline_of(e) is e

    def speedup(self, k: int) -> float | None:
        """The baseline's unprofiled median step ÷ entry k's (None where either is unknown)."""
        e = self._entries[k]
        base = self._baseline_of(e)
        if base is None:
            return None
        return stats_speedup(base.stats, e.stats)

    def within_noise(self, k: int) -> bool | None:
        """Whether entry k and its baseline's interquartile ranges overlap (None: no comparison)."""
        e = self._entries[k]
        b = self._baseline_of(e)
        if b is None or b is e:
            return None
        base, this = b.stats, e.stats
        if base is None or this is None:
            return None
        return this.within_noise(base)

    def missing_baseline(self, k: int) -> RunSpec | None:
        """The sequential 1×1 run that entry k's model lacks to compare with (its other settings
        kept), or None: it has a baseline, or entry k is no run the window can repeat."""
        e = self._entries[k]
        if e.spec is None or self._baseline_of(e) is not None:
            return None
        return dataclasses.replace(e.spec, mode=BASELINE_MODE, interop=1, intra=1)

    def summary_line(self, k: int) -> str:
        """Entry k in one sentence a class follows: what ran on what, and how it compares with
        its baseline, e.g. "4 branches on 2 inter-op threads: 1.90× faster than sequential 1×1,
        within noise: no"."""
        e = self._entries[k]
        n = e.branch_count
        what = f"{n} branch{'es' if n != 1 else ''}" if n else "the model"
        threads = e.threads
        mode = MODES.get(e.mode) if e.mode else None
        if mode is not None and (n or mode.name != BASELINE_MODE) and (threads or "{interop}" not in mode.runs_as):
            what += " " + mode.runs_text(threads[0] if threads else 1)
        elif e.mode and mode is None:
            what += f" ({e.mode})"
        if threads:
            what += f", {threads[1]} intra-op thread{'s' if threads[1] != 1 else ''} each"
        b = self.baseline_of(k)
        if e.stats is None:
            if e.run is None and not n:  # a trace from elsewhere
                return "a trace opened from disk: its own step times without the profiler are not in it, so no speedup"
            return f"{what}: no step times without the profiler in this run, so no speedup"
        if b is None:
            return f"{what}: median step {e.stats.median:.2f} ms; no sequential 1×1 run of this model to compare with yet"
        if b == k:
            return f"{what}: median step {e.stats.median:.2f} ms, the baseline of this model's speedups"
        base = self._entries[b]
        name = base.mode or base.label
        if base.threads:
            name += f" {base.threads[0]}×{base.threads[1]}"
        s = self.speedup(k)
        if s is None:
            return what
        how = f"{s:.2f}× faster than" if s >= 1 else f"{1 / s:.2f}× slower than"
        noise = self.within_noise(k)
        return f"{what}: {how} {name}, within noise: {'yes' if noise else 'no'}"

    def _speedups_changed(self) -> None:
        self._defaults = None
        if self._entries:
            for o in self._observers:
                o.rows_changed(0, len(self._entries) - 1)


# ---- runs from disk -------------------------------------------------------------------------
def runs_root() -> Path:
    """~/.cache/branchscope/runs, where each window's session folder goes.

    $XDG_CACHE_HOME counts only when it is an absolute path (the XDG rule).
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "branchscope" / "runs"


def subfolders(parent: Path, name: re.Pattern[str]) -> list[Path]:
    """The folders right in `parent` whose names match `name` (links never followed; [] if unreadable)."""
    try:
        with os.scandir(parent) as entries:
            return [
                Path(e.path) for e in entries if name.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def saved_runs(root: Path, *, exclude: Path | None = None) -> list[Entry]:
    """The complete runs kept under the runs root, oldest first, as entries (traces not loaded).

    Reads session folders named as `default_runs_dir` names them and the run folders in them
    (`exclude`: a session left out, e.g. the window's own); folders without a complete run.json
    and its trace are skipped, links are never followed, and nothing is written.
    """
    found: list[tuple[float, str, Entry]] = []
    for session in subfolders(Path(root), SESSION_NAME):
        if exclude is not None and session == Path(exclude):
            continue
        for folder in subfolders(session, RUN_NAME):
            try:
                entry = Entry.of_source(run_folder(folder))  # only a complete run: run.json read once
                when = (folder / RUN_JSON).stat().st_mtime
            except (OSError, TraceFormatError):
                continue
            found.append((when, str(folder), entry))
    found.sort(key=lambda f: (f[0], f[1]))
    return [e for _, _, e in found]


def entry_for_path(path: str | os.PathLike[str]) -> Entry:
    """The entry of a run folder, a distributed run's folder, a folder of rank traces or a trace
    file opened from disk (`sources.open_source`; its trace not loaded). Raises `TraceFormatError`
    (the message names the path) for what is none of these, a sweep folder included."""
    return Entry.of_source(open_source(path))
