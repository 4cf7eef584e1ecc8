"""What the window shows, as a model the views follow (the way napari's views follow their layers):
the entry shown and its trace, the time range selected in it, and the entry's baseline. No Qt: the
pages and side panels subscribe to its events, and the window only changes the model.

- `trace_changing(trace, entry)`: `trace` (of `entry`) is about to be shown. Showing is all or
  nothing: a view that cannot show it raises and leaves itself as it was; one that shows it returns
  how to go back (or None: nothing to undo). Should one raise, those before it go back, newest
  first, and every view shows what it showed before (`Shown.show` raises again);
- `entry_changed(entry)`: `entry` is now the one shown; again when what the runs list knows of it
  changes (a new baseline changes how it compares: `Shown.runs_changed`);
- `range_selected(start_ns, end_ns)`: a time range was selected in the shown trace (on its own clock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from branchscope.app.run_entry import Entry
from branchscope.app.runs import Runs
from branchscope.profiling.trace.model import Trace

#: What a `trace_changing` subscriber returns: how to go back to what it showed before (None: nothing to undo).
Undo = Callable[[], None] | None


class Event:
    """Callbacks called in the order they connected, with what the event carries."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[..., Any]] = []

    def connect(self, callback: Callable[..., Any]) -> None:
        self.callbacks.append(callback)

    def disconnect(self, callback: Callable[..., Any]) -> None:
        self.callbacks.remove(callback)

    def emit(self, *args: Any) -> None:
        for callback in list(self.callbacks):
            callback(*args)


class Shown:
    """The entry shown of `runs`, its trace and the range selected (see the module docstring)."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.entry: Entry | None = None
        self.trace: Trace | None = None
        #: The time range selected in the shown trace (start_ns, end_ns), None when none is.
        self.range: tuple[int, int] | None = None
        self.trace_changing = Event()
        self.entry_changed = Event()
        self.range_selected = Event()

    @property
    def baseline(self) -> Entry | None:
        """The entry the shown one compares with (`Runs.baseline_of`), None when it has none."""
        k = self.runs.index_of(self.entry)
        b = self.runs.baseline_of(k) if k >= 0 else None
        return None if b is None else self.runs[b]

    def show(self, trace: Trace, entry: Entry) -> None:
        """Every view shows `trace`, or none does (and the view's error is raised)."""
        undo: list[Callable[[], None]] = []
        try:
            for view in list(self.trace_changing.callbacks):
                back = view(trace, entry)  # if it raises, that view is as it was
                if back is not None:
                    undo.append(back)
        except Exception:
            try:
                for back in reversed(undo):
                    back()
            except Exception:  # pragma: no cover - what was there before was shown without error
                pass
            raise
        self.trace, self.entry, self.range = trace, entry, None

    def entry_is_shown(self) -> None:
        """Tell the views which entry is shown (after `show`)."""
        if self.entry is not None:
            self.entry_changed.emit(self.entry)

    def runs_changed(self) -> None:
        """What the runs list knows of the entries changed (a baseline, a speedup): said again."""
        self.entry = self.runs.current_entry
        self.entry_is_shown()

    def select_range(self, start_ns: int, end_ns: int) -> None:
        self.range = (start_ns, end_ns)
        self.range_selected.emit(start_ns, end_ns)
