"""The timeline: one lane per CPU thread and per GPU stream, every event drawn by one item.

Taken apart as Perfetto's UI is: `TimelineView` here is the Qt widget (scrolling, signals; what
the mouse and keys do is `TimelineInput`, `timeline_input`, mixed into it; the find bar is
`timeline_find`'s); where the groups and lanes go is `TimelineLayout` (`timeline_layout`, no
Qt); what the user picked (the selected event and its flows, the hovered event, a time range,
Find's matches) is `TimelineState` (`timeline_state`, no Qt), which tells the view of every
change; `TimelinePainter` (`timeline_painter`) draws the layout marked as the state says, and the
scene's items (`TimelineItem`: every event in one item, the lane labels, the scroll bar, the
ruler) paint through it.

Hover shows an event's details (a tooltip), click selects it (`eventSelected`), double-click zooms
to it, F or Z zooms to the selected range or event (Perfetto's F), Ctrl+F finds events by name and
highlights them. The wheel zooms and a drag pans (the ViewBox's), W/S/A/D/0 as in every panel
(`TimePanel`); Shift+wheel, or the wheel over the lane labels, scrolls
the lanes. Shift+drag selects a time range (shaded; `rangeSelected` in the trace's clock), Esc
clears it. A click on a CPU group's title (or on its summary lane) folds or opens it.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QRect, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QWidget

from branchscope.profiling.trace.analyses import branch_assignment
from branchscope.profiling.trace.model import Trace
from branchscope.widgets import colors
from branchscope.widgets.charts import GutterText, Strip
from branchscope.widgets.lod import TimelineLod
from branchscope.widgets.theme import theme
from branchscope.widgets.time_axis import GUTTER, RIGHT_MARGIN, TimeAxis, TimePanel, TimeViewBox
from branchscope.widgets.timeline_find import FindBar
from branchscope.widgets.timeline_input import NOTHING_SELECTED, TimelineInput
from branchscope.widgets.timeline_items import GutterItem, Ruler, ScrollItem, TimelineItem
from branchscope.widgets.timeline_layout import (
    GROUP_H,
    LANE_PAD,
    ROW_H,
    GroupHeader,
    LaneRow,
    TimelineLayout,
    group_of,
    hit_row,
    rank_titles,
)
from branchscope.widgets.timeline_painter import (
    FLOW_COLOR,
    PEER_COLOR,
    RANGE_EDGE,
    RANGE_FILL,
    RULER_H,
    Look,
    TimelinePainter,
    lane_area_height,
)
from branchscope.widgets.timeline_state import FOUND, HOVERED, RANGE_CLEARED, SELECTED, TimelineState
from branchscope.widgets.trace_cache import derived
from branchscope.widgets.units import format_duration

__all__ = [
    "FLOW_COLOR", "GROUP_H", "LANE_PAD", "PEER_COLOR", "RANGE_EDGE", "RANGE_FILL", "ROW_H", "RULER_H",
    "NOTHING_SELECTED", "GroupHeader", "LaneRow", "Look", "TimelineItem", "TimelineView", "group_of",
    "prepare_trace", "rank_titles", "zoom_to_selection_in",
]  # fmt: skip


def _derive(trace: Trace, branches):
    """What the timeline needs of a trace besides its columns: branches, colour keys, LOD index."""
    if branches is None:
        branches = branch_assignment(trace)
    slots = colors.branch_slots(trace, branches.names)
    keys = colors.event_color_keys(trace, np.asarray(branches.event_branch), slots)
    return branches, keys, TimelineLod(trace)


def zoom_to_selection_in(page: QWidget) -> str:
    """Zoom a timeline of `page` to its selection: the one with the keyboard focus, else the first
    with a selected range, else the first with a selected event (the Compare page's timelines share
    one axis, so all follow). Returns what happened, for the status bar."""
    views = [v for v in page.findChildren(TimelineView) if v.isVisible()]
    candidates = [v for v in views if v.hasFocus()]
    candidates += [v for v in views if v.state.range is not None] + [v for v in views if v.selected >= 0]
    if any(v.zoom_to_selection() for v in candidates):
        return "Zoomed to the selection (0 shows everything again)"
    return NOTHING_SELECTED


def prepare_trace(trace: Trace) -> None:
    """Build what the timeline shows of `trace` (branches, colour keys, the index), kept with the
    trace (`widgets.trace_cache`), so that `TimelineView.set_trace` finds it built. Creates no Qt
    object: a loader may call it in a worker thread before handing the trace to the window."""
    derived(trace, "timeline", lambda: _derive(trace, None))


class TimelineView(TimelineInput, TimePanel):
    """Lanes of events over the shared time axis (see the module docstring).

    `lane_layout` places the lanes, `state` holds the selection, hover, range and Find, `painter`
    draws them; the view turns mouse and keys into changes of those and emits its signals.
    """

    #: The selected event's index, or -1 when the selection is cleared.
    eventSelected = Signal(int)
    #: The event under the mouse, or -1.
    eventHovered = Signal(int)
    #: Number of find matches (0 when the search is cleared).
    findChanged = Signal(int)
    #: A time range chosen with Shift+drag: (start_ns, end_ns) in the trace's own clock, start < end.
    rangeSelected = Signal("qint64", "qint64")
    #: The selected range was cleared (Esc, or another trace shown).
    rangeCleared = Signal()

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.lod: TimelineLod | None = None
        self.branch_names: list[str] = []
        self.event_branch: np.ndarray | None = None
        #: The instant of the shown trace drawn at the axis' 0 (trace clock, ns), and where the
        #: trace's first event sits on the axis (the LOD index counts from there).
        self.origin_ns = 0
        self._shift = 0.0
        self.lane_layout = TimelineLayout()
        self.state = TimelineState()
        self.state.subscribe(self._state_changed)
        self.painter = TimelinePainter(self, self.lane_layout, self.state, theme())
        #: Rows follow the font's height until `set_row_height` fixes them.
        self._auto_row_height = True
        #: How far the lanes are scrolled (content pixels), and a drag of the scroll bar's handle.
        self.scroll_y = 0
        self._scroll_drag: tuple[int, int] | None = None

        self.vb = TimeViewBox()
        self.vb.setYRange(0.0, 1.0, padding=0)
        self.vb.view_all = lambda: self.axis.reset()
        self.ruler = Ruler(self)
        self.ruler.setHeight(RULER_H)
        self.ruler.setStyle(tickLength=-6, tickTextOffset=2)
        self.ruler.linkToView(self.vb)
        self.showing = GutterText(GUTTER)
        self.showing.setMaximumHeight(RULER_H)
        self.grid.addItem(self.showing, 0, 0)
        self.grid.addItem(self.ruler, 0, 1)
        self.grid.addItem(Strip(), 0, 2)
        self.grid.addItem(GutterItem(self), 1, 0)
        self.grid.addItem(self.vb, 1, 1)
        self.grid.addItem(ScrollItem(self), 1, 2)
        self.grid.layout.setRowFixedHeight(0, RULER_H)
        self.item = TimelineItem(self)
        self.link_view_box(self.vb)
        self.axis.changed.connect(self._axis_changed)
        self._find_bar = FindBar(self)
        self.setMinimumHeight(140)
        self.apply_theme()

    # ---- what other views read (kept where it lives: layout, state, painter) ---------------
    @property
    def look(self) -> Look:
        return self.painter.look

    @property
    def row_height(self) -> int:
        return self.lane_layout.row_height

    @property
    def summary_height(self) -> int:
        return self.lane_layout.summary_height

    @property
    def lane_rows(self) -> list[LaneRow]:
        return self.lane_layout.lane_rows

    @property
    def group_headers(self) -> list[GroupHeader]:
        return self.lane_layout.group_headers

    @property
    def content_height(self) -> int:
        return self.lane_layout.content_height

    @property
    def full_height(self) -> int:
        """The height of every group expanded (what the timeline would like to have)."""
        return self.lane_layout.full_height

    @property
    def folded_height(self) -> int:
        """The least that shows every lane: each folded to `FOLD_MIN_ROWS` rows."""
        return self.lane_layout.folded_height

    def set_fold_to_fit(self, on: bool) -> None:
        """Fold deep rows so that every lane fits the view's height (the rows of a comparison:
        each run's pool threads in sight), or show every row and scroll."""
        if self.lane_layout.fold_to_fit != on:
            self.lane_layout.fold_to_fit = on
            self._relayout()
            self.refresh()

    @property
    def selected(self) -> int:
        return self.state.selected

    @property
    def flow_arrows(self) -> list[tuple[int, int]]:
        return self.state.flow_arrows

    @property
    def peer_events(self) -> list[int]:
        return self.state.peer_events

    @property
    def painted_lanes(self) -> list[int]:
        return self.painter.painted_lanes

    @property
    def drawn_arrows(self) -> list[tuple[int, int]]:
        return self.painter.drawn_arrows

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis.changed.disconnect(self._axis_changed)
        super().set_axis(axis)
        axis.changed.connect(self._axis_changed)
        self._axis_changed()

    def _axis_changed(self) -> None:
        # Before the first trace the axis' span is a placeholder: no "showing 1 ns" over nothing.
        span = format_duration(self.axis.hi - self.axis.lo)
        self.showing.set_html(f"showing {span}" if self.has_data() else "")
        self.refresh()

    def _data_changed(self) -> None:
        """A trace (or none) is shown: the ruler's ticks and the span shown appear or go."""
        self.ruler.picture = None
        self.ruler.update()
        self._axis_changed()

    def _state_changed(self, what: str) -> None:
        """The state changed: tell whoever listens, and repaint."""
        if what == SELECTED:
            self.eventSelected.emit(self.state.selected)
        elif what == HOVERED:
            self.eventHovered.emit(self.state.hovered)
        elif what == FOUND:
            find = self.state.find
            n = find.count
            self._find_bar.count.setText(f"{n:,} match" + ("" if n == 1 else "es") if find.query else "")
            self.findChanged.emit(n)
        self.refresh()
        if what == RANGE_CLEARED:
            self.rangeCleared.emit()

    # ---- palette and font -------------------------------------------------------------------
    def apply_theme(self) -> None:
        """Take the palette's colours and the widget's font (the lane labels, event names, row
        heights); `TimePanel` calls it on palette and font changes."""
        if not hasattr(self, "_find_bar"):  # pyqtgraph's constructor
            return
        font = self.font()
        self.painter.apply_theme(theme(), font)
        bold = QFont(font)
        bold.setBold(True)
        self.lane_layout.group_h = max(GROUP_H, QFontMetrics(bold).height() + 6)
        if self._auto_row_height:
            self.lane_layout.row_height = max(ROW_H, self.painter.label_fm.height() + 4)
        super().apply_theme()
        self._axis_changed()
        self._relayout()
        self.refresh()

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, trace: Trace) -> None:
        """Build what showing `trace` takes (branches, colours, the index), kept with the trace.

        Raises if it cannot be built, and then nothing about the view has changed.
        """
        prepare_trace(trace)

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None, *, branches=None) -> None:
        """Show `trace` with its instant `origin_ns` (default: its first event) at the axis' 0;
        `branches` is a `branchscope.profiling.trace.analyses.BranchAssignment` (computed if None).

        What can fail is built first: if it raises, the view still shows what it showed. Shown
        alone (no origin given), the trace's extent becomes the axis' and all of it is shown.
        """
        if trace is not None:
            if branches is None:
                # Built once per trace: re-selecting a run in the list must be instant.
                branches, keys, lod = derived(trace, "timeline", lambda: _derive(trace, None))
            else:
                branches, keys, lod = _derive(trace, branches)
        self.trace = trace
        self.state.reset()
        if trace is None:
            self.lod = None
            self.lane_layout.set_trace(None)
            self.painter.set_trace(None, None, np.zeros(0, dtype=np.uint8), 0.0)
            self._data_changed()
            return
        self.lod = lod
        self.branch_names = list(branches.names)
        self.event_branch = np.asarray(branches.event_branch)
        start, end = trace.span()
        self.origin_ns = int(start) if origin_ns is None else int(origin_ns)
        self._shift = float(int(start) - self.origin_ns)
        self.lane_layout.set_trace(trace, [lod.rows_of_lane(i) for i in range(len(trace.lanes))])
        self.painter.set_trace(trace, lod, keys, self._shift)
        if origin_ns is None:
            if not self.axis.covers(0.0, float(end - start)):
                self.axis.set_bounds(0.0, float(end - start))
            else:
                self.axis.reset()
        self._relayout()
        self._data_changed()

    def has_data(self) -> bool:
        return self.trace is not None and len(self.trace) > 0

    @property
    def no_data_text(self) -> str:
        return "no events in this trace"

    def axis_time(self, t_ns: int) -> float:
        """Where an instant of the trace's clock sits on the axis (ns)."""
        return float(int(t_ns) - self.origin_ns)

    def set_time_range(self, start_ns: int, end_ns: int) -> None:
        """Show [start_ns, end_ns] of the trace's clock (the clock of `Trace.span()`)."""
        self.axis.set_view(self.axis_time(start_ns), self.axis_time(end_ns))

    def time_range(self) -> tuple[int, int]:
        return (self.origin_ns + int(round(self.axis.lo)), self.origin_ns + int(round(self.axis.hi)))

    def set_row_height(self, pixels: int) -> None:
        """Height of one nesting row (fixed from now on: no longer the font's); below 12 pixels
        lanes are packed tighter too."""
        self._auto_row_height = False
        self.lane_layout.row_height = max(4, int(pixels))
        self._relayout()
        self.refresh()

    # ---- layout -----------------------------------------------------------------------------
    def _relayout(self) -> None:
        """Lay the groups out for the lanes' height; GPU streams stay in view once shown."""
        if self.trace is None or self.lod is None:
            self.lane_layout.set_trace(None)
        self.lane_layout.update(lane_area_height(self), fit=self.isVisible())
        self.painter.forget_gutter()
        self._set_scroll(self.scroll_y)

    def group_at(self, y: int) -> GroupHeader | None:
        """The group whose title band (a collapsed group: its summary lane) is at widget y."""
        if y < RULER_H:
            return None
        return self.lane_layout.group_at(y - RULER_H + self.scroll_y)

    def set_group_collapsed(self, key: tuple, collapsed: bool) -> None:
        """Collapse a CPU thread group to one summary lane, or expand it (the user's choice: kept
        while the trace is shown, whatever the space)."""
        self.lane_layout.set_collapsed(key, collapsed)
        self._relayout()
        self.refresh()

    # ---- geometry (widget pixels) -----------------------------------------------------------
    # Vertical scrolling is painted in the right margin (a QScrollBar child would be repainted,
    # at a cost of milliseconds, with every frame of the timeline).
    def max_scroll(self) -> int:
        return self.lane_layout.max_scroll(lane_area_height(self))

    def _set_scroll(self, value: float) -> None:
        value = self.lane_layout.clamp_scroll(value, lane_area_height(self))
        if value != self.scroll_y:
            self.scroll_y = value
            self.refresh()

    def scroll_vertical(self, pixels: int) -> bool:
        if self.max_scroll() <= 0:
            return False
        self._set_scroll(self.scroll_y + pixels)
        return True

    def scroll_handle(self) -> QRect | None:
        """The scroll bar's handle (widget coordinates), or None when the lanes fit."""
        handle = self.lane_layout.scroll_handle(self.scroll_y, lane_area_height(self))
        if handle is None:
            return None
        y, length = handle
        return QRect(self.width() - RIGHT_MARGIN + 3, RULER_H + y, RIGHT_MARGIN - 6, length)

    def lane_rect(self, lane_index: int) -> QRect | None:
        """The lane's rectangle in widget coordinates (may lie outside the widget when scrolled);
        a lane folded into its group's summary lane: that one's."""
        extent = self.lane_layout.lane_extent(lane_index)
        if extent is None:
            return None
        top, height = extent
        return QRect(GUTTER, RULER_H + top - self.scroll_y, self.plot_width(), height)

    def event_rect(self, i: int) -> QRect | None:
        """Where event `i` is drawn (widget coordinates), or None if its lane is not laid out."""
        if self.trace is None or self.lod is None:
            return None
        top = self.lane_layout.event_row_top(int(self.trace.lane[i]), int(self.trace.depth[i]))
        if top is None:
            return None
        s = self.axis_time(self.trace.start_ns[i])
        # Clamped just outside the plot: an event far wider than the view (zoomed in on it)
        # would have x beyond the 32-bit range of a QRect.
        left, right = GUTTER - 2.0, GUTTER + self.plot_width() + 2.0
        x0 = min(max(self.x_of(s), left), right)
        x1 = min(max(self.x_of(s + float(self.trace.dur_ns[i])), left), right)
        y = RULER_H + top - self.scroll_y
        return QRect(int(np.floor(x0)), y, max(1, int(np.ceil(x1 - x0))), self.row_height - 1)

    def range_rect(self) -> QRect | None:
        """Where the selected range is shaded (widget coordinates, clipped to the lanes), or None."""
        r = self.state.range
        if r is None:
            return None
        left, right = GUTTER, GUTTER + self.plot_width()
        x0 = min(max(self.x_of(r[0]), left), right)
        x1 = min(max(self.x_of(r[1]), left), right)
        if x1 - x0 < 1 and (x1 <= left or x0 >= right):
            return None
        return QRect(int(np.floor(x0)), RULER_H, max(1, int(np.ceil(x1 - x0))), lane_area_height(self))

    def event_at(self, pos: QPoint) -> int:
        """The event drawn at a widget position (within 3 pixels), or -1."""
        if self.trace is None or self.lod is None:
            return -1
        x, y = pos.x(), pos.y()
        if x < GUTTER or x >= GUTTER + self.plot_width() or y < RULER_H:
            return -1
        rows = self.lane_layout.rows_at(y - RULER_H + self.scroll_y)
        if not rows:
            return -1
        t, tol = self.t_of(x + 0.5) - self._shift, 3 * self.ns_per_px()
        for row in rows:  # a summary lane: the lane drawn on top first
            i = hit_row(self.lod, self.trace.dur_ns, row, t, tol)
            if i >= 0:
                return i
        return -1

    # ---- size and visibility (the mouse and keys: `TimelineInput`) --------------------------
    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if not hasattr(self, "_find_bar"):  # pyqtgraph resizes while the view is being made
            return
        self.painter.forget_gutter()
        if lane_area_height(self) != self.lane_layout.avail and self.trace is not None:
            self._relayout()  # room changed: the groups collapsed for want of it may change
        self._set_scroll(self.scroll_y)
        self._find_bar.place()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self.trace is not None:
            self._relayout()

    # ---- range selection ----------------------------------------------------------------------
    def selected_range(self) -> tuple[int, int] | None:
        """The selected time range in the trace's own clock (start_ns, end_ns), or None."""
        r = self.state.range
        if r is None:
            return None
        return (self.origin_ns + int(round(r[0])), self.origin_ns + int(round(r[1])))

    def select_range(self, start_ns: int, end_ns: int) -> None:
        """Select [start_ns, end_ns] of the trace's clock (shaded, as a Shift+drag would) and emit
        `rangeSelected`; an empty range clears the selection."""
        a, b = sorted((int(start_ns), int(end_ns)))
        if b <= a:
            self.clear_range()
            return
        self.state.set_range(self.axis_time(a), self.axis_time(b))
        self.rangeSelected.emit(a, b)

    def clear_range(self) -> None:
        """Drop the selected range (emits `rangeCleared` if there was one)."""
        self.state.clear_range()

    # ---- selection --------------------------------------------------------------------------
    def select_event(self, i: int) -> None:
        """Select event `i` (-1: none) with its flows, and emit `eventSelected`."""
        self.state.select(self.trace, i)

    def zoom_to_selection(self) -> bool:
        """Show the selected time range (Shift+drag) across the view, else the selected event
        (as Perfetto's F does); False, and nothing changes, when nothing is selected."""
        r = self.state.range
        if r is not None:
            self.axis.set_view(*r)
            return True
        if self.trace is not None and self.selected >= 0:
            self.zoom_to_event(self.selected)
            return True
        return False

    def zoom_to_event(self, i: int) -> None:
        s = self.axis_time(self.trace.start_ns[i])
        d = float(self.trace.dur_ns[i])
        pad = max(0.1 * d, 500.0)
        self.axis.set_view(s - pad, s + d + pad)
        self.reveal_lane(int(self.trace.lane[i]))

    def reveal_lane(self, lane_index: int) -> None:
        """Scroll the lane (or the summary lane it is folded into) into view, if it is not."""
        self._set_scroll(self.lane_layout.reveal(lane_index, self.scroll_y, lane_area_height(self)))

    # ---- find -------------------------------------------------------------------------------
    def open_find(self) -> None:
        self._find_bar.place()
        self._find_bar.show()
        self._find_bar.raise_()
        self._find_bar.edit.setFocus()
        self._find_bar.edit.selectAll()

    def close_find(self) -> None:
        self._find_bar.hide()
        self.find("")
        self.setFocus()

    def find(self, text: str) -> int:
        """Highlight events whose name contains `text` (case-insensitive); returns the count."""
        return self.state.search(self.trace, text)

    def find_next(self) -> int:
        """Select and show the next match (in time order); returns its index or -1."""
        find = self.state.find
        i = find.next(self.trace)
        if i < 0:
            return -1
        self.select_event(i)
        s = self.axis_time(self.trace.start_ns[i])
        d = float(self.trace.dur_ns[i])
        width = self.axis.hi - self.axis.lo
        if d > width * 0.8:
            self.zoom_to_event(i)
        else:
            self.axis.pan(s + d / 2 - (self.axis.lo + width / 2))
            self.reveal_lane(int(self.trace.lane[i]))
        self._find_bar.count.setText(f"{find.pos + 1:,} of {find.count:,}")
        return i
