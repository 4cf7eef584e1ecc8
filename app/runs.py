"""The runs and opened traces of a window, without Qt: what the runs list shows and what the
workspace draws.

An `Entry` is a finished run (its `RunSpec` and `run.json`), a run folder read from disk, or an
opened trace file (several rank files merged into one entry). `Runs` keeps them in order, with:

- the entry shown (`current`) and a cache of the loaded traces of the few most recently shown
  entries (`trace_cache`; the others are read from disk again when shown); the traces of the
  entries compared (`mark_compared`) are kept while they are, then let go unless shown or cached;
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

The entries are `app/run_entry.py`'s; what the list says in words (`baseline_text`, `speedup_text`,
`summary_line`, ...) is `app/runs_words.py`'s, mixed into `Runs`; the runs kept on disk from
earlier sessions are listed by `app/runs_on_disk.py`.

Views follow a `Runs` through `RunsObserver` (the Qt table model in `app/runs_table.py` is one).
No Qt here, so it is tested without a display.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from branchscope.app.run_entry import Entry, RunSpec, entry_for_path
from branchscope.app.runs_words import RunsInWords
from branchscope.profiling.run.modes import BASELINE_MODE
from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.parts import speedup_parts
from branchscope.profiling.trace.sources import read_sweep
from branchscope.profiling.trace.step_stats import speedup as stats_speedup
from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord

if TYPE_CHECKING:
    from branchscope.profiling.trace.model import Trace

#: Traces kept in memory; older entries are read again from disk when shown.
TRACE_CACHE = 4


class RunsObserver(Protocol):
    """What follows a `Runs` (a Qt item model calls its begin/end methods from these)."""

    def rows_about_to_be_inserted(self, first: int, last: int) -> None: ...
    def rows_inserted(self) -> None: ...
    def rows_about_to_be_removed(self, first: int, last: int) -> None: ...
    def rows_removed(self) -> None: ...
    def rows_changed(self, first: int, last: int) -> None: ...


class Runs(RunsInWords):
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
        #: The entries compared now (the Compare page's): their traces are kept while they are (`mark_compared`).
        self._compared: list[Entry] = []
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
        self._compared = [e for e in self._compared if e is not entry]
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
        self._shown_order = order[-self.trace_cache :]
        self._let_go(order[: -self.trace_cache])

    def mark_compared(self, ks: Sequence[int]) -> None:
        """Entries `ks` are now the ones compared: keep their traces while they are; let go of the
        traces of those compared before that are now neither compared, shown nor kept by the cache."""
        before, self._compared = self._compared, [self._entries[k] for k in ks]
        self._let_go(before)

    def _let_go(self, entries: Sequence[Entry]) -> None:
        """Let go of the traces of `entries`, but not of those shown, compared or kept by the cache
        (read from disk again when wanted)."""
        kept = {id(e) for e in (*self._shown_order, *self._compared, self._current)}
        for e in entries:
            if id(e) not in kept:
                e.trace = None

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
            if traits_of(cell.mode).baseline and cell.interop == 1 and cell.intra == 1 and cell.run is not None:
                try:
                    base = entry_for_path(e.sweep / cell.run)  # CELL_FOLDER's shape, checked by read_sweep
                except (OSError, TraceFormatError):
                    return None
                if not base.sequential_1x1:
                    return None
                return self.append(base)
        return None

    def busy_comparison(self, k: int) -> bool:
        """Whether entry k is compared with its baseline while either ran beside other work."""
        e = self._entries[k]
        b = self._baseline_of(e)
        return b is not None and b is not e and (e.busy or b.busy)

    def parts(self, k: int) -> SpeedupPartsRecord | None:
        """Entry k's speedup in parts (see the module docstring), None where the list holds no
        sequential 1×J and M 1×J run for it (or it is no fork or threads I×J run, I ≥ 2)."""
        if self._parts is None:
            found = speedup_parts([e.part_run() for e in self._entries])
            self._parts = dict(zip(self._entries, found))
        return self._parts.get(self._entries[k])

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

