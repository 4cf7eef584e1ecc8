"""The runs and opened traces of a window, without Qt: what the runs list shows and what the
workspace draws.

An `Entry` is a finished run (its `RunSpec` and `run.json`) or an opened trace file (several rank
files merged into one entry). `Runs` keeps them in order, with:

- the entry shown (`current`) and a cache of the loaded traces of the few most recently shown
  entries (`trace_cache`; the others are read from disk again when shown);
- the speedup of each run: the baseline's median step ÷ this run's. The baseline is explicit and
  settable (`baseline`); unset, each run's baseline is its model's first sequential run.

Views follow it through `RunsObserver` (the Qt table model in `app/runs_table.py` is one).
No Qt here, so it is tested without a display.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # RunSpec lives beside the (Qt) run controller; only its fields are used here
    from branchscope.app.run_controller import RunSpec
    from branchscope.profiling.trace.model import Trace

#: Traces kept in memory; older entries are read again from disk when shown.
TRACE_CACHE = 4


@dataclass(eq=False)
class Entry:
    """A row of the runs list: a finished run, or a trace file that was opened."""

    label: str
    trace_path: Path
    spec: RunSpec | None = None
    run: dict[str, Any] | None = None
    #: The loaded trace, or None when it is not among the traces kept in memory.
    trace: Trace | None = None
    #: Further rank files merged with `trace_path` into one trace.
    more_paths: tuple[Path, ...] = ()

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file this entry's trace is read from."""
        return (self.trace_path, *self.more_paths)

    @property
    def median_ms(self) -> float | None:
        m = (self.run or {}).get("median_ms")
        return float(m) if isinstance(m, (int, float)) else None

    @property
    def title(self) -> str:
        """How the window's title names it."""
        s = self.spec
        return self.label if s is None else f"{self.label} · {s.mode} · {s.interop}×{s.intra}"


class RunsObserver(Protocol):
    """What follows a `Runs` (a Qt item model calls its begin/end methods from these)."""

    def rows_about_to_be_inserted(self, first: int, last: int) -> None: ...
    def rows_inserted(self) -> None: ...
    def rows_about_to_be_removed(self, first: int, last: int) -> None: ...
    def rows_removed(self) -> None: ...
    def rows_changed(self, first: int, last: int) -> None: ...


class Runs:
    """The entries in list order (see the module docstring)."""

    def __init__(self, trace_cache: int = TRACE_CACHE):
        if trace_cache < 1:
            raise ValueError(f"trace_cache must be at least 1, not {trace_cache}")
        self.trace_cache = trace_cache
        self._entries: list[Entry] = []
        #: Index of the entry shown, -1 if none.
        self.current = -1
        #: Entry indices, least recently shown first (the cache evicts from the front).
        self._shown_order: list[int] = []
        self._baseline: int | None = None
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

    def add_observer(self, observer: RunsObserver) -> None:
        self._observers.append(observer)

    def append(self, entry: Entry) -> int:
        """List `entry` last; returns its index."""
        k = len(self._entries)
        for o in self._observers:
            o.rows_about_to_be_inserted(k, k)
        self._entries.append(entry)
        for o in self._observers:
            o.rows_inserted()
        self._speedups_changed()
        return k

    def remove(self, k: int) -> Entry:
        """Take entry k out of the list (indices after it move up by one)."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        for o in self._observers:
            o.rows_about_to_be_removed(k, k)
        entry = self._entries.pop(k)

        def moved(i: int) -> int:
            return i - 1 if i > k else i

        self._shown_order = [moved(i) for i in self._shown_order if i != k]
        self.current = -1 if self.current == k else moved(self.current)
        if self._baseline is not None:
            self._baseline = None if self._baseline == k else moved(self._baseline)
        for o in self._observers:
            o.rows_removed()
        self._speedups_changed()
        return entry

    # ---- shown entry and trace cache --------------------------------------------------------
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
        self.current = k
        self._shown_order = [i for i in self._shown_order if i != k] + [k]
        for i in self._shown_order[: -self.trace_cache]:
            self._entries[i].trace = None
        self._shown_order = self._shown_order[-self.trace_cache :]

    @property
    def cached(self) -> list[int]:
        """Entries whose traces are kept, least recently shown first."""
        return list(self._shown_order)

    # ---- baseline and speedup ---------------------------------------------------------------
    @property
    def baseline(self) -> int | None:
        """The entry every speedup is measured against; None: each run's model's first sequential run."""
        return self._baseline

    @baseline.setter
    def baseline(self, k: int | None) -> None:
        if k is not None and not 0 <= k < len(self._entries):
            raise IndexError(k)
        if k != self._baseline:
            self._baseline = k
            self._speedups_changed()

    def baseline_of(self, k: int) -> int | None:
        """The entry that entry k's speedup compares with, or None."""
        if self._baseline is not None:
            return self._baseline
        e = self._entries[k]
        if e.spec is None:
            return None
        for b, other in enumerate(self._entries):
            if (
                other.spec is not None
                and other.spec.model_key == e.spec.model_key
                and other.spec.mode == "sequential"
            ):
                return b
        return None

    def speedup(self, k: int) -> float | None:
        """The baseline's median step ÷ entry k's median step (None where either is unknown)."""
        e = self._entries[k]
        if e.median_ms is None or e.median_ms <= 0:
            return None
        b = self.baseline_of(k)
        if b is None:
            return None
        base = self._entries[b].median_ms
        return base / e.median_ms if base else None

    def _speedups_changed(self) -> None:
        if self._entries:
            for o in self._observers:
                o.rows_changed(0, len(self._entries) - 1)
