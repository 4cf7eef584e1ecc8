"""The runs and opened traces of a window, without Qt: what the runs list shows and what the
workspace draws.

An `Entry` is a finished run (its `RunSpec` and `run.json`), a run folder read from disk, or an
opened trace file (several rank files merged into one entry). `Runs` keeps them in order, with:

- the entry shown (`current`) and a cache of the loaded traces of the few most recently shown
  entries (`trace_cache`; the others are read from disk again when shown);
- the speedup of each run: the baseline's unprofiled median step ÷ this run's (run.json
  "unprofiled_steps_ms" through `StepStats`), and whether the two are within noise (their
  interquartile ranges overlap). Runs compare only with runs of their own model: each model's
  baseline is the one the user set (`set_baseline`), else its most recent sequential 1×1 run made
  in this window session. An entry read from disk (`Entry.from_disk`: a run kept from an earlier
  session, a folder opened) is a baseline only when the user sets it; a sweep cell's run compares
  only with a sequential 1×1 cell of its own sweep (`Entry.sweep`). Which run that is, and when it
  ran, is said in words (`baseline_text`, `header_text`), a change of baseline that moves other
  runs' speedups too (`add_baseline_listener`), and a run timed beside other work (run.json
  "load", `Entry.busy`) is never compared without saying "machine busy";
- the speedup of a fork or threads run M I×J in its parts, where the list holds sequential 1×J and
  M 1×J runs of its model (of its sweep, for a sweep cell): its plan × its threads
  (`profiling/trace/parts.py`, the latest listed of each; `parts`, said short in the speedup's cell:
  "1.67× (1.65× plan × 1.01× threads)", whole in `parts_text`).

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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from branchscope.profiling.run.modes import MODES
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.parts import PartRun, parts_sentence, parts_short, speedup_parts
from branchscope.profiling.trace.records import (
    BASELINE_MODE,
    CELL_FOLDER,
    RUN_JSON,
    RunRecord,
    SpeedupPartsRecord,
)
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.sources import Source, is_sweep_folder, open_source, read_sweep, run_folder
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
    #: Read from disk (a run kept from an earlier session, a folder or file opened), not run in
    #: this window: a baseline only when the user sets it.
    from_disk: bool = False
    #: The sweep folder of a sweep cell's run: it compares only with a sequential 1×1 cell of it.
    sweep: Path | None = None
    #: When it ran, in seconds since the epoch (an entry from disk: its run.json's or trace's time).
    when: float = field(default_factory=time.time)
    #: The folder it was opened as (a distributed run's: the one holding rank-R/), None if not known.
    folder: Path | None = None

    @classmethod
    def of_source(cls, source: Source) -> Entry:
        """The entry of what `sources.open_source` opened (its trace not loaded): from disk."""
        if not source.traces:
            raise TraceFormatError(f"{source.path}: is a {source.kind}, not a run or a trace")
        spec = RunSpec.from_record(source.run) if source.run is not None else None
        first, *more = source.traces
        folder = source.folder
        sweep = folder.parent if CELL_FOLDER.fullmatch(folder.name) and is_sweep_folder(folder.parent) else None
        when = None
        for path in (folder / RUN_JSON, first):
            try:
                when = path.stat().st_mtime
                break
            except OSError:
                continue
        return cls(
            source.label, first, spec=spec, run=source.run, more_paths=tuple(more), info=source.info,
            from_disk=True, sweep=Path(os.path.realpath(sweep)) if sweep is not None else None,
            when=when if when is not None else time.time(), folder=folder,
        )  # fmt: skip

    @property
    def busy(self) -> bool:
        """Other processes took more than about a fifth of the cores while it timed its steps."""
        load = self.run.load if self.run is not None else None
        return load is not None and load.busy is True

    @property
    def sequential_1x1(self) -> bool:
        """A sequential 1×1 run with unprofiled step times: what a default baseline is."""
        return self.mode == BASELINE_MODE and self.threads == (1, 1) and self.stats is not None

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
    def plan_by(self) -> str | None:
        """How a speedup's parts name its mode's plan: run.json's `plan_by`, else (a run.json of
        before it) the mode's own words from the registry."""
        if self.run is not None and self.run.plan_by:
            return self.run.plan_by
        mode = MODES.get(self.mode) if self.mode else None
        return None if mode is None else mode.plan_title

    def part_run(self) -> PartRun:
        """This entry as the parts finder reads it: runs count together within one model and sweep."""
        threads = self.threads
        run = self.run
        return PartRun(
            self.mode, threads[0] if threads else None, threads[1] if threads else None,
            None if self.stats is None else self.stats.median, model=f"{self.model_key}|{self.sweep}",
            cores=None if run is None else run.cores, ranks=self.nproc or 1, plan_by=self.plan_by,
            starved=run is not None and run.starved is True,
        )  # fmt: skip

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

    # ---- what the run controls say of it (`RunControls.follow`) -------------------------------
    @property
    def picker_item(self) -> tuple | None:
        """The model picker's item of its model: ("demo", name) or ("file", path, input shapes);
        None when neither a run.json nor the trace names a model."""
        spec = self.spec
        if spec is not None:
            if spec.options.demo is not None:
                return ("demo", spec.options.demo)
            if spec.options.model is not None:
                return ("file", str(spec.options.model), tuple(spec.options.input_shapes))
        for known in (self.run, self.info):
            if known is not None and known.source == "demo" and known.model and known.model.startswith("demo "):
                return ("demo", known.model[len("demo ") :])
        return None

    @property
    def steps(self) -> int | None:
        """Its profiled steps, when known (a run read from disk: when its run.json says)."""
        if self.run is not None and self.run.steps is not None and self.run.steps >= 1:
            return self.run.steps
        return self.spec.options.steps if self.spec is not None and not self.from_disk else None

    @property
    def nproc(self) -> int | None:
        """Its processes (ranks), when known: 1 for a run of one process."""
        if self.spec is not None:
            return self.spec.options.nproc
        if self.run is None:
            return None
        return self.run.nproc if self.run.nproc is not None and self.run.nproc >= 1 else 1

    def shown_text(self, number: int) -> str:
        """What the run controls say while it is shown (`number`: its row, counted from 1): "shown:
        #2 inception · fork · 2×1" for a run of this window; "opened from disk: runs/x —
        inception · fork · 2×1" for a run folder read from disk, with its model's label from
        run.json; "opened from disk: t.json — a trace file" for a trace without a run.json."""
        ranks = f" · {self.nproc} processes" if (self.nproc or 1) > 1 else ""
        if not self.from_disk and self.spec is not None:
            return f"shown: #{number} {self.title}{ranks}"
        folder = self.folder or self.trace_path.parent
        if self.run is not None:
            where = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
            return f"opened from disk: {where} — #{number} {self.title}{ranks}"
        names = [p.name for p in self.paths]
        if len(names) > 3:  # a folder of many rank traces: where, and how many
            return f"opened from disk: {len(names)} traces in {self.paths[0].parent.name or '.'}/ ({names[0]} … {names[-1]}) — #{number} {self.title}"
        return f"opened from disk: {', '.join(names)} — #{number} a trace file ({self.title})"


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
        #: Each sweep's default baseline: its sequential 1×1 cell listed last.
        self._sweep_defaults: dict[Path, Entry] = {}
        self._observers: list[RunsObserver] = []
        #: Told in words when a change moves the baseline of runs that had one (`add_baseline_listener`).
        self._baseline_listeners: list[Callable[[str], None]] = []
        #: Each entry's speedup in parts, worked out once per change of the list (None: not yet).
        self._parts: dict[Entry, SpeedupPartsRecord | None] | None = None

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

    def add_baseline_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(sentence)` whenever a change (a run listed or taken out, a baseline set or
        reset) moves the baseline of runs that were compared with another one, e.g. "speedups of
        3 runs now against #7 sequential 1×1 (before: #3)"."""
        self._baseline_listeners.append(listener)

    def append(self, entry: Entry) -> int:
        """List `entry` last; returns its index."""
        return self.extend([entry])

    def extend(self, entries: Sequence[Entry]) -> int:
        """List `entries` last, in one insertion; returns the index of the first (len(self) if none)."""
        k = len(self._entries)
        if not entries:
            return k
        before = self._baselines_now()
        for o in self._observers:
            o.rows_about_to_be_inserted(k, k + len(entries) - 1)
        self._entries.extend(entries)
        self._list_changed()
        for o in self._observers:
            o.rows_inserted()
        self._speedups_changed(before)
        return k

    def remove(self, k: int) -> Entry:
        """Take entry k out of the list (indices after it move up by one) and forget it: it is
        no longer the one shown, among the cached traces, or a baseline."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        before = self._baselines_now()
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
        self._speedups_changed(before)
        return entry

    def _list_changed(self) -> None:
        self._rows = {e: k for k, e in enumerate(self._entries)}
        self._defaults = None
        self._parts = None

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
        before = self._baselines_now()
        self._baselines[entry.model_key] = entry
        self._last_set = entry
        self._speedups_changed(before)

    def reset_baseline(self, k: int | None = None) -> None:
        """Back to the default baseline for entry k's model (k None: for every model)."""
        before = self._baselines_now()
        if k is None:
            self._baselines.clear()
        else:
            self._baselines.pop(self._entries[k].model_key, None)
        if self._last_set is not None and not any(b is self._last_set for b in self._baselines.values()):
            self._last_set = None
        self._speedups_changed(before)

    def has_set_baseline(self, k: int) -> bool:
        """Whether entry k's model has a baseline the user set."""
        return self._entries[k].model_key in self._baselines

    def _default_of(self, entry: Entry) -> Entry | None:
        if self._defaults is None:
            # the latest listed wins; never a run read from disk, unless it is a cell of the same sweep
            self._defaults = {
                e.model_key: e for e in self._entries if e.model_key is not None and e.sequential_1x1 and not e.from_disk
            }
            self._sweep_defaults = {e.sweep: e for e in self._entries if e.sweep is not None and e.sequential_1x1}
        if entry.sweep is not None:
            return self._sweep_defaults.get(entry.sweep)
        return self._defaults.get(entry.model_key)

    def _baseline_of(self, entry: Entry) -> Entry | None:
        set_by_user = self._baselines.get(entry.model_key)
        if entry.sweep is not None and (set_by_user is None or set_by_user.sweep != entry.sweep):
            return self._default_of(entry)  # a sweep cell: its own sweep's sequential 1×1 cell, or none
        return set_by_user if set_by_user is not None else self._default_of(entry)

    def default_baseline(self, k: int) -> int | None:
        """The most recent sequential 1×1 run of entry k's model with unprofiled step times, made
        in this session (a sweep cell's: its sweep's sequential 1×1 cell)."""
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
        if e.spec is None or e.sweep is not None or self._baseline_of(e) is not None:
            return None  # a sweep cell compares only with its own sweep's cell: a new run would not do
        return dataclasses.replace(e.spec, mode=BASELINE_MODE, interop=1, intra=1)

    def list_sweep_baseline(self, k: int) -> int | None:
        """For a sweep cell's entry k without its sweep's sequential 1×1 cell listed: list that
        cell's run (its trace not loaded), so k compares with its own sweep's baseline; returns its
        row (None: k is no sweep cell, its baseline is listed already, or the sweep has no complete
        sequential 1×1 cell)."""
        e = self._entries[k]
        if e.sweep is None or self._baseline_of(e) is not None:
            return None
        try:
            sweep = read_sweep(e.sweep)
        except (OSError, TraceFormatError):
            return None
        for cell in sweep.cells:
            if cell.mode == BASELINE_MODE and cell.interop == 1 and cell.intra == 1 and cell.run is not None:
                try:
                    base = entry_for_path(e.sweep / cell.run)  # CELL_FOLDER's shape, checked by read_sweep
                except (OSError, TraceFormatError):
                    return None
                if not base.sequential_1x1:
                    return None
                return self.append(base)
        return None

    # ---- the baseline in words ----------------------------------------------------------------
    def baseline_name(self, b: int) -> str:
        """How a row is named as a baseline: "#3 sequential 1×1"."""
        e = self._entries[b]
        name = f"#{b + 1} " + (e.mode or e.label)
        if e.threads:
            name += f" {e.threads[0]}×{e.threads[1]}"
        return name

    def baseline_text(self, k: int) -> str | None:
        """Which run entry k is compared with, when it ran and why that one, e.g. "#3 sequential
        1×1, run at 15:02 in this session (the model's latest sequential 1×1 run)"; None without one."""
        b = self.baseline_of(k)
        if b is None:
            return None
        base = self._entries[b]
        if self._baselines.get(base.model_key) is base:
            why = "set by you"
        elif base.sweep is not None:
            why = "its sweep's sequential 1×1 cell"
        else:
            why = "the model's latest sequential 1×1 run of this session"
        where = f"from disk ({base.trace_path.parent.name})" if base.from_disk else "in this session"
        return f"{self.baseline_name(b)}, run {when_text(base.when)} {where} ({why})"

    def no_baseline_text(self, k: int) -> str:
        """Why entry k has no baseline, and what would give it one."""
        e = self._entries[k]
        if e.sweep is not None:
            return f"no baseline: no sequential 1×1 cell of its sweep ({e.sweep.name}) is listed"
        old = [i for i, o in enumerate(self._entries) if o.from_disk and o.sequential_1x1 and o.model_key == e.model_key]
        if old:
            return (
                f"no baseline this session: {self.baseline_name(old[-1])} is from another session or from disk "
                "(right-click it, Set as baseline, to compare with it anyway)"
            )
        return "no baseline this session: no sequential 1×1 run of this model to compare with yet"

    def header_text(self) -> str:
        """What the speedup column's header says: the one baseline its speedups are against
        ("speedup vs #3 sequential 1×1"), that there are several, or that there is none."""
        bases = {self.baseline_of(k) for k in range(len(self._entries)) if self._entries[k].stats is not None}
        named = sorted(b for b in bases if b is not None)
        if not named:
            return "speedup (no baseline this session)" if bases else "speedup"
        if len(named) == 1 and None not in bases:
            return f"speedup vs {self.baseline_name(named[0])}"
        return "speedup vs " + ", ".join(self.baseline_name(b) for b in named) + (" (some: none)" if None in bases else "")

    def busy_comparison(self, k: int) -> bool:
        """Whether entry k is compared with its baseline while either ran beside other work."""
        e = self._entries[k]
        b = self._baseline_of(e)
        return b is not None and b is not e and (e.busy or b.busy)

    def speedup_text(self, k: int) -> str:
        """The speedup column's cell: "baseline", "1.43×", "1.43× (within noise)", "… machine busy", "–";
        a run with parts says them short first, with a baseline or without (they need none), where a
        narrow column still shows their start: "1.67× (1.65× plan × 1.01× threads)", "1.65× plan ×
        1.01× threads"."""
        s = self.speedup(k)
        parts = self.parts(k)
        if self.is_baseline(k):
            head, notes = "baseline", ["machine busy"] if self._entries[k].busy else []
        elif s is None:
            return "–" if parts is None else parts_short(parts)
        else:
            head = f"{s:.2f}×"
            notes = [n for n, on in (("within noise", self.within_noise(k)), ("machine busy", self.busy_comparison(k))) if on]
        if parts is not None:
            notes.insert(0, parts_short(parts))
        return head + (f" ({', '.join(notes)})" if notes else "")

    def parts(self, k: int) -> SpeedupPartsRecord | None:
        """Entry k's speedup in parts (see the module docstring), None where the list holds no
        sequential 1×J and M 1×J run for it (or it is no fork or threads I×J run, I ≥ 2)."""
        if self._parts is None:
            found = speedup_parts([e.part_run() for e in self._entries])
            self._parts = dict(zip(self._entries, found))
        return self._parts.get(self._entries[k])

    def parts_text(self, k: int) -> str | None:
        """Entry k's parts in a sentence naming the runs they come from: "fork 2×1 over sequential
        1×1, in parts: 1.67× = 1.65× from TorchScript's plan × 1.01× from 2 threads (#1 and #2)"."""
        parts = self.parts(k)
        if parts is None:
            return None
        e = self._entries[k]
        threads = e.threads or (None, None)
        rows = [x for x in (parts.sequential, parts.one_thread) if x is not None]
        return parts_sentence(e.mode, threads[0], threads[1], parts) + f" ({' and '.join(f'#{x + 1}' for x in rows)})"

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
            return f"{what}: median step {e.stats.median:.2f} ms; {self.no_baseline_text(k)}"
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
        line = f"{what}: {how} {name} (#{b + 1}), within noise: {'yes' if noise else 'no'}"
        if self.busy_comparison(k):
            busy = [x for x in (e, base) if x.busy]
            line += "; machine busy: " + "; ".join(
                ("this run's " if x is e else "the baseline's ") + load_words(x) for x in busy
            )
        return line

    def _baselines_now(self) -> dict[Entry, Entry]:
        """Each entry with step times compared with a baseline now (itself, for the baseline): its baseline."""
        now = {}
        for e in self._entries:
            b = self._baseline_of(e)
            if b is not None and e.stats is not None:
                now[e] = b
        return now

    def _speedups_changed(self, before: dict[Entry, Entry] | None = None) -> None:
        self._defaults = None
        if self._entries:
            for o in self._observers:
                o.rows_changed(0, len(self._entries) - 1)
        if before and self._baseline_listeners:
            sentence = self._moved_text(before)
            if sentence:
                for listener in self._baseline_listeners:
                    listener(sentence)

    def _moved_text(self, before: dict[Entry, Entry]) -> str | None:
        """The runs still listed whose baseline a change moved, in one sentence (None: none moved)."""
        moved: dict[Entry | None, list[Entry]] = {}
        for e, old in before.items():
            if self.index_of(e) < 0:
                continue
            new = self._baseline_of(e)
            if new is not old:
                moved.setdefault(new, []).append(e)
        if not moved:
            return None
        parts = []
        for new, entries in moved.items():
            olds = sorted({self.index_of(before[e]) for e in entries})
            was = ", ".join(f"#{o + 1}" if o >= 0 else "a run taken out" for o in olds)
            n = f"{len(entries)} run{'s' if len(entries) != 1 else ''}"
            if new is None:
                parts.append(f"{n} no longer compared (before: against {was})")
            else:
                parts.append(f"speedups of {n} now against {self.baseline_name(self.index_of(new))} (before: {was})")
        return "; ".join(parts)


def when_text(t: float, now: float | None = None) -> str:
    """"at 15:02" today, else "on 25 Nov at 14:10" (local time)."""
    now = time.time() if now is None else now
    local, today = time.localtime(t), time.localtime(now)
    if local[:3] == today[:3]:
        return time.strftime("at %H:%M", local)
    return time.strftime("on %d %b %Y at %H:%M", local)


def load_words(e: Entry) -> str:
    """What run.json says of the machine's load while entry `e` ran, in a few words."""
    load = e.run.load if e.run is not None else None
    if load is None:
        return "load not measured"
    return load.text().removeprefix("machine: ")


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
