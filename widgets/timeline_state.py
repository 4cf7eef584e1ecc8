"""What the user picked on the timeline, without Qt: the selected event and its flows, the hovered
event, the selected time range, and Find's query with its matches.

Like the selection and search managers of Perfetto's UI, this is kept apart from the view that
draws it: the view (`widgets.timeline`) changes it in answer to the mouse and the keys, is told of
every change (`subscribe`) and repaints, and its painter reads it. Numpy, the trace engine and the
level-of-detail index only, so it is tested without Qt (`tests/widgets/test_timeline_state.py`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from branchscope.profiling.trace.flows import collective_peers, event_flows
from branchscope.profiling.trace.model import Trace
from branchscope.widgets.lod import TimelineLod

#: What changed, as told to the listeners.
SELECTED = "selected"  # the selected event (and so its flows)
HOVERED = "hovered"  # the event under the mouse
RANGE = "range"  # the selected time range, while it is being chosen or once chosen
RANGE_CLEARED = "range cleared"  # there was a selected range and it is gone
FOUND = "found"  # Find's query, and so its matches


class FindState:
    """Find: the query, the events whose name holds it, and which of them was shown last."""

    def __init__(self) -> None:
        self.query = ""
        #: The matching events (indices into the trace), and their own LOD index to draw them.
        self.matches = np.zeros(0, dtype=np.int64)
        self.lod: TimelineLod | None = None
        #: The match shown last by `next` (a place in time order), -1 before the first.
        self.pos = -1
        self._order: np.ndarray | None = None

    @property
    def active(self) -> bool:
        """Whether a search is on (the events it does not match are drawn faded), matching
        something or not."""
        return self.lod is not None or self.query != ""

    @property
    def count(self) -> int:
        return int(self.matches.size)

    def search(self, trace: Trace | None, text: str) -> int:
        """Look for events whose name contains `text` (case-insensitive; "" clears the search);
        returns the number of matches."""
        self.query = text
        self.pos = -1
        self._order = None
        if not text or trace is None:
            self.query = ""
            self.matches = np.zeros(0, dtype=np.int64)
            self.lod = None
        else:
            self.matches = trace.find(text)
            self.lod = TimelineLod(trace, subset=self.matches) if self.matches.size else None
        return self.count

    def forget_matches(self) -> None:
        """Drop the matches (another trace is shown) but keep the query, as the find bar does:
        the events are drawn faded until the next search."""
        self.matches = np.zeros(0, dtype=np.int64)
        self.lod = None
        self._order = None

    def next(self, trace: Trace) -> int:
        """The next match in time order (after the last, the first again), or -1 if none."""
        if self.matches.size == 0:
            return -1
        if self._order is None:
            self._order = self.matches[np.argsort(trace.start_ns[self.matches], kind="stable")]
        self.pos = (self.pos + 1) % self._order.size
        return int(self._order[self.pos])


class TimelineState:
    """The timeline's selection, hover, range and Find (see the module docstring).

    Times of the range are ns on the view's time axis (`TimeAxis`), as the view draws them.
    Listeners (`subscribe`) are called with what changed: `SELECTED`, `HOVERED`, `RANGE`,
    `RANGE_CLEARED` or `FOUND`.
    """

    def __init__(self) -> None:
        #: The selected event, or -1.
        self.selected = -1
        #: The event under the mouse, or -1.
        self.hovered = -1
        #: The selected event's arrows (src, dst events) and the same collective on other ranks.
        self.flow_arrows: list[tuple[int, int]] = []
        self.peer_events: list[int] = []
        #: The selected time range (start, end on the axis, start < end), or None; and where a
        #: drag choosing one began.
        self.range: tuple[float, float] | None = None
        self.range_anchor: float | None = None
        self.find = FindState()
        self._listeners: list[Callable[[str], None]] = []

    def subscribe(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def _changed(self, what: str) -> None:
        for listener in self._listeners:
            listener(what)

    def reset(self) -> None:
        """Another trace is shown: nothing of it is selected, hovered or matched (the listeners
        hear only of a range that is cleared: it meant the old trace's clock)."""
        self.selected = self.hovered = -1
        self.flow_arrows, self.peer_events = [], []
        self.clear_range()
        self.find.forget_matches()

    # ---- the selected and the hovered event ---------------------------------------------
    def select(self, trace: Trace | None, i: int) -> None:
        """Select event `i` of `trace` (-1: none), with its flows."""
        self.selected = int(i)
        self.flow_arrows, self.peer_events = links_of(trace, self.selected)
        self._changed(SELECTED)

    def hover(self, i: int) -> bool:
        """The mouse is over event `i` (-1: none); whether that changed anything."""
        if i == self.hovered:
            return False
        self.hovered = int(i)
        self._changed(HOVERED)
        return True

    # ---- the selected time range --------------------------------------------------------
    def begin_range(self, t: float) -> None:
        """A drag choosing a range begins at `t` (the range before it is cleared)."""
        self.clear_range()
        self.range_anchor = t

    def drag_range(self, t: float, min_width: float) -> None:
        """The drag reached `t`: the range is from where it began to `t`, none if narrower than
        `min_width` (a click)."""
        a, b = sorted((self.range_anchor, t))
        self.range = (a, b) if b - a >= min_width else None
        self._changed(RANGE)

    def end_range(self) -> tuple[float, float] | None:
        """The drag ended: the range it chose, or None."""
        self.range_anchor = None
        return self.range

    def set_range(self, start: float, end: float) -> None:
        self.range = (start, end)
        self._changed(RANGE)

    def clear_range(self) -> None:
        """Drop the selected range (tells the listeners if there was one) and any drag."""
        self.range_anchor = None
        if self.range is not None:
            self.range = None
            self._changed(RANGE_CLEARED)

    # ---- find ----------------------------------------------------------------------------
    def search(self, trace: Trace | None, text: str) -> int:
        """Find events whose name contains `text` ("" clears it); returns the number of matches."""
        n = self.find.search(trace, text)
        self._changed(FOUND)
        return n


def links_of(trace: Trace | None, i: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The arrows of event `i` (launch -> kernel, or a kernel's "launched by") and the same
    collective on the other ranks; nothing for -1."""
    if i < 0 or trace is None:
        return [], []
    ks = event_flows(trace, i)
    flows = trace.flows
    arrows = [(int(flows.src[k]), int(flows.dst[k])) for k in ks.tolist()]
    peers = [e for e in collective_peers(trace, i).values() if e != i]
    return arrows, peers
