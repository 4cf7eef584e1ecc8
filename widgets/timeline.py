"""The timeline: one lane per CPU thread and per GPU stream, every event drawn by one item.

The view is a pyqtgraph scene like the charts': a time ruler (pyqtgraph's axis, `TimeAxisItem`)
over a `ViewBox` linked to the shared `TimeAxis`, lane labels in the gutter, a scroll bar in the
right margin. The lanes are one graphics item, `TimelineItem`: like pyqtgraph's BarGraphItem, one
item draws all shapes. It asks the level-of-detail index (`widgets.lod`) for what is visible in
the visible rows, paints it into one RGB32 buffer with numpy (a few array passes the size of the
visible pixels), and hands that to Qt as a single image; only then are the few things that need
Qt's text engine drawn on top (names inside events wide enough to hold them). So a frame costs
what the pixels cost whether the trace holds ten thousand events or ten million.

Lanes are grouped main thread / inter-op pool / autograd / other threads for CPU and by device
for GPU streams. Events are coloured by branch, and by kind on GPU lanes (`widgets.colors`).
Hover shows an event's details, click selects it (`eventSelected`), double-click zooms to it,
Ctrl+F finds events by name and highlights them. The wheel zooms and a drag pans (the ViewBox's),
W/S/A/D/0 as in every panel (`TimePanel`); Shift+wheel, or the wheel over the lane labels, scrolls
the lanes. Shift+drag selects a time range (shaded; `rangeSelected` in the trace's clock), Esc
clears it. Neutral colours follow the palette (`widgets.theme`), text the widget's font.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QKeySequence, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QToolButton,
    QToolTip,
    QWidget,
)

from branchscope.profiling.trace.analyses import branch_assignment
from branchscope.profiling.trace.flows import collective_peers, event_flows
from branchscope.profiling.trace.merge import rank_hosts
from branchscope.profiling.trace.model import ROLE_ORDER, Trace
from branchscope.widgets import colors
from branchscope.widgets.charts import GutterText, Strip, TimeAxisItem
from branchscope.widgets.event_info import describe_event, rows_to_html, rows_to_text
from branchscope.widgets.lod import Scratch, TimelineLod, pixel_spans, rasterize
from branchscope.widgets.theme import Theme, theme
from branchscope.widgets.time_axis import (
    GUTTER,
    RIGHT_MARGIN,
    TimeAxis,
    TimePanel,
    TimeViewBox,
    safe_paint,
)
from branchscope.widgets.trace_cache import derived
from branchscope.widgets.units import format_duration, time_ticks

RULER_H = 24
#: Height of a group header and of one nesting row, at least (more when the font needs it).
GROUP_H = 20
LANE_PAD = 6
ROW_H = 16
#: An event needs this many pixels before its name is drawn inside it.
LABEL_MIN_PX = 30
MAX_LABELS = 3000

_GROUP_TITLES = {
    "main": "main thread",
    "interop": "inter-op pool",
    "autograd": "autograd",
    "other": "other threads",
}
#: Extra lines appended below the painted rows, addressed by negative codes in the y map.
_BG_A, _BG_B, _SEP, _HEADER = -1, -2, -3, -4
#: The y of a row whose event names are not drawn (the other lanes of a summary lane).
_NO_LABEL = -(1 << 30)
#: A selected time range: its shade and edges (they read on light and dark lanes).
RANGE_FILL = QColor(61, 123, 217, 60)
RANGE_EDGE = QColor(61, 123, 217, 220)
#: Arrows from a launch to its kernel; the same collective on the other ranks.
FLOW_COLOR = QColor(214, 39, 40)
PEER_COLOR = QColor(148, 103, 189)


def _arrow_head(p: QPainter, start: QPointF, end: QPointF, color: QColor, size: float = 7.0) -> None:
    dx, dy = end.x() - start.x(), end.y() - start.y()
    length = float(np.hypot(dx, dy))
    if length < 1:
        return
    ux, uy = dx / length, dy / length
    left = QPointF(end.x() - size * ux + size * 0.5 * uy, end.y() - size * uy - size * 0.5 * ux)
    right = QPointF(end.x() - size * ux - size * 0.5 * uy, end.y() - size * uy + size * 0.5 * ux)
    p.setBrush(color)
    p.setPen(Qt.PenStyle.NoPen)
    p.drawPolygon(QPolygonF([end, left, right]))
    p.setBrush(Qt.BrushStyle.NoBrush)


def _rgb32(c: QColor) -> int:
    return 0xFF000000 | (c.red() << 16) | (c.green() << 8) | c.blue()


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor(*(round(x + (y - x) * t) for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True)))


@dataclass(frozen=True)
class Look:
    """The timeline's neutral colours for one `Theme` (event colours are `widgets.colors`')."""

    lane_bg: tuple[int, int]  # RGB32, alternating lanes
    separator: int  # RGB32, the line under a lane
    header: int  # RGB32, a group header's band across the lanes
    grid: int  # RGB32, grid lines on the lane background
    ruler_bg: QColor
    gutter: QColor
    gutter_line: QColor
    group_bg: QColor
    group_text: QColor
    lane_line: QColor
    text: QColor
    muted: QColor
    scroll_handle: QColor
    hover: QColor
    selected: QColor
    #: The event palette faded toward the lanes (what a search does not match), and where a label
    #: on it is dark.
    dimmed: np.ndarray
    dimmed_dark_text: np.ndarray

    @classmethod
    def of(cls, t: Theme) -> Look:
        if not t.dark:  # the house colours
            return cls(
                colors.LANE_BG, colors.SEPARATOR, 0xFFE8ECF0, 0xFFE6EAEE, QColor("#f7f8fa"), t.gutter,
                QColor("#cfd5dc"), QColor("#dde3e9"), QColor("#2c3640"), QColor("#d5dae0"), t.text,
                QColor("#77828d"), QColor("#b4bdc7"), QColor("#39424c"), QColor("#111111"),
                colors.DIMMED_PALETTE, np.ones(colors.PALETTE.size, dtype=bool),
            )  # fmt: skip
        bg, fg = t.background, t.text
        dimmed = colors.blend(colors.PALETTE, _rgb32(bg), 0.72)
        return cls(
            (_rgb32(bg), _rgb32(_mix(bg, fg, 0.04))), _rgb32(_mix(bg, fg, 0.16)), _rgb32(_mix(bg, fg, 0.10)),
            _rgb32(_mix(bg, fg, 0.09)), _mix(bg, fg, 0.03), t.gutter, _mix(t.gutter, fg, 0.2),
            _mix(t.gutter, fg, 0.12), fg, _mix(t.gutter, fg, 0.15), fg, t.muted, _mix(t.gutter, fg, 0.3),
            _mix(fg, bg, 0.2), fg, dimmed, colors.luminance(dimmed) > 0.55,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LaneRow:
    """Where a lane sits: `top`/`height` in content pixels (below the ruler, before scrolling)."""

    lane: int
    top: int
    height: int
    rows: range  # its rows in the level-of-detail index, one per nesting depth
    label: str


@dataclass(frozen=True, slots=True)
class GroupHeader:
    """A group's title band; a collapsed group's band is its one summary lane (`summary`: the top
    LOD row of each of its lanes, drawn over one another)."""

    title: str
    top: int
    key: tuple = ()
    height: int = GROUP_H
    collapsed: bool = False
    #: Whether a click on it collapses or expands it (CPU thread groups).
    collapsible: bool = False
    lanes: tuple[int, ...] = ()
    summary: tuple[int, ...] = ()


def group_of(trace: Trace, lane_index: int, multi_pid: bool, ranks: dict | None = None) -> tuple[tuple, str]:
    """Sort key and title of the group a lane is shown in.

    With several ranks (`ranks`: {rank: its title, "rank R" and its host where the trace says it}),
    each rank's groups come together, titled by rank instead of by pid.
    """
    lane = trace.lanes[lane_index]
    if ranks:
        rank = -1 if lane.rank is None else lane.rank
        prefix = f"{ranks.get(lane.rank, 'no rank')} · "
        if lane.kind == "gpu":
            return (rank, 1, lane.device, lane.pid), f"{prefix}GPU {lane.device}"
        return (rank, 0, lane.pid, ROLE_ORDER.index(lane.role)), f"{prefix}{_GROUP_TITLES.get(lane.role, lane.role)}"
    prefix = f"pid {lane.pid} · " if multi_pid else ""
    if lane.kind == "gpu":
        return (1, lane.device, lane.pid), f"{prefix}GPU {lane.device}"
    return (0, lane.pid, ROLE_ORDER.index(lane.role)), f"{prefix}{_GROUP_TITLES.get(lane.role, lane.role)}"


def rank_titles(trace: Trace) -> dict:
    """{rank: "rank R" or "rank R (host)"} when the trace's lanes belong to several ranks, else {}."""
    ranks = sorted({ln.rank for ln in trace.lanes if ln.rank is not None})
    if len(ranks) < 2:
        return {}
    hosts = rank_hosts(trace)
    return {r: f"rank {r}" + (f" ({hosts[r]})" if hosts.get(r) else "") for r in ranks}


#: Pause in typing after which Find highlights the matches.
FIND_DEBOUNCE_MS = 150


class FindBar(QFrame):
    """Ctrl+F: a name to look for, the number of matches, Enter for the next one."""

    def __init__(self, parent: TimelineView):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.edit = QLineEdit(self)
        self.edit.setPlaceholderText("Find events by name (Enter: next match)")
        self.edit.setClearButtonEnabled(True)
        self.count = QLabel("", self)
        close = QToolButton(self)
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(parent.close_find)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 3, 3, 3)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.count)
        lay.addWidget(close)
        self.edit.returnPressed.connect(parent._find_return)
        # Highlight while typing, once the typing pauses: a search builds an index of the matches.
        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(FIND_DEBOUNCE_MS)
        self.debounce.timeout.connect(lambda: parent.find(self.edit.text()))
        self.edit.textEdited.connect(lambda _text: self.debounce.start())
        self.setFixedWidth(360)
        self.hide()

    def keyPressEvent(self, event):  # noqa: N802 (Qt API)
        if event.key() == Qt.Key.Key_Escape:
            self.parent().close_find()
            return
        super().keyPressEvent(event)


def _derive(trace: Trace, branches):
    """What the timeline needs of a trace besides its columns: branches, colour keys, LOD index."""
    if branches is None:
        branches = branch_assignment(trace)
    slots = colors.branch_slots(trace, branches.names)
    keys = colors.event_color_keys(trace, np.asarray(branches.event_branch), slots)
    return branches, keys, TimelineLod(trace)


def prepare_trace(trace: Trace) -> None:
    """Build what the timeline shows of `trace` (branches, colour keys, the index), kept with the
    trace (`widgets.trace_cache`), so that `TimelineView.set_trace` finds it built. Creates no Qt
    object: a loader may call it in a worker thread before handing the trace to the window."""
    derived(trace, "timeline", lambda: _derive(trace, None))


class TimelineItem(pg.GraphicsObject):
    """The lanes: every event of every visible row, in one item (see the module docstring).

    It lives in the view's ViewBox, in the ViewBox's own pixels (not its data coordinates: the
    raster is made for exact pixel columns of the axis window), and paints through the view's
    `_paint_lanes`, which works in widget pixels.
    """

    def __init__(self, view: TimelineView):
        super().__init__()
        self.view = view
        self.setParentItem(view.vb)
        self.setZValue(10)  # over the ViewBox's (empty) data
        view.vb.sigResized.connect(lambda _vb: self.prepareGeometryChange())

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt API)
        return QRectF(0, 0, self.view.vb.width(), self.view.vb.height())

    @safe_paint
    def paint(self, p: QPainter, *args) -> None:
        p.translate(-GUTTER, -RULER_H)  # widget pixels
        self.view._paint_lanes(p)

    def mouseClickEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph API)
        """Left click selects (pyqtgraph tells a click from a drag); right click is the ViewBox's."""
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        ev.accept()
        if not ev.double():
            self.view.on_click(self.view.mapFromScene(ev.scenePos()))


class _GutterItem(pg.GraphicsWidget):
    """The lane labels left of the lanes (drawn by the view, cached in an image)."""

    def __init__(self, view: TimelineView):
        super().__init__()
        self.view = view
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setFixedWidth(GUTTER)
        self.setMinimumHeight(0)

    @safe_paint
    def paint(self, p: QPainter, *args) -> None:
        p.translate(0, -RULER_H)  # widget pixels
        self.view._draw_gutter_cached(p, self.view._image_height())


class _ScrollItem(pg.GraphicsWidget):
    """The scroll bar in the right margin (painted: a QScrollBar child would be repainted, at a
    cost of milliseconds, with every frame of the timeline). The view takes its mouse events."""

    def __init__(self, view: TimelineView):
        super().__init__()
        self.view = view
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setFixedWidth(RIGHT_MARGIN)
        self.setMinimumHeight(0)

    def paint(self, p: QPainter, *args) -> None:
        look = self.view.look
        p.fillRect(self.rect(), look.gutter)
        handle = self.view._scroll_handle()
        if handle is not None:
            p.fillRect(handle.translated(-(GUTTER + self.view.plot_width()), -RULER_H), look.scroll_handle)


class _Ruler(TimeAxisItem):
    """The time ruler over the lanes: pyqtgraph's axis with the timeline's ticks, on its band."""

    def __init__(self, view: TimelineView):
        super().__init__("top")
        self.view = view

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        super().apply_theme(colors, font)
        self.setTickPen(pg.mkPen(colors.muted))

    def paint(self, p, opt, widget):
        rect = self.mapRectFromParent(self.geometry())
        p.fillRect(rect, self.view.look.ruler_bg)
        super().paint(p, opt, widget)


class TimelineView(TimePanel):
    """Lanes of events over the shared time axis (see the module docstring)."""

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
        self.row_height = ROW_H
        self.group_h = GROUP_H
        #: Rows follow the font's height until `set_row_height` fixes them.
        self._auto_row_height = True
        self.look = Look.of(theme())
        #: The selected time range on the axis (ns from the axis' 0), or None.
        self._range: tuple[float, float] | None = None
        self._range_drag: float | None = None
        self.lane_rows: list[LaneRow] = []
        self.group_headers: list[GroupHeader] = []
        self.content_height = 0
        #: The height of every group expanded (what the timeline would like to have).
        self.full_height = 0
        #: Groups the user collapsed or expanded (group keys), and those collapsed for want of room.
        self._collapsed: set[tuple] = set()
        self._expanded: set[tuple] = set()
        self.auto_collapsed: set[tuple] = set()
        self._header_tops: list[int] = []
        self._layout_height = -1
        self.selected = -1
        #: The selected event's arrows (src, dst events), those of them drawn in the last frame,
        #: and the same collective on the other ranks.
        self.flow_arrows: list[tuple[int, int]] = []
        self.drawn_arrows: list[tuple[int, int]] = []
        self.peer_events: list[int] = []
        self.hovered_event = -1
        self.hover_text = ""
        #: Lane indices that had at least one pixel row on screen in the last paint.
        self.painted_lanes: list[int] = []
        self.matches = np.zeros(0, dtype=np.int64)
        self._match_lod: TimelineLod | None = None
        self._match_pos = -1
        self._match_text = ""
        self._keys = np.zeros(0, dtype=np.uint8)
        self._scroll = 0
        self._tops: list[int] = []
        self._label_font = QFont(self.font())
        self._label_fm = QFontMetrics(self._label_font)
        self._name_width: dict[int, int] = {}
        self._elided: dict[tuple[int, int], str] = {}
        self._scroll_drag: tuple[int, int] | None = None
        self._gutter_cache: tuple[tuple, QImage] | None = None
        self._scratch = Scratch()
        self._match_scratch = Scratch()
        #: The instant of the shown trace drawn at the axis' 0 (trace clock, ns), and where the
        #: trace's first event sits on the axis (the LOD index counts from there).
        self.origin_ns = 0
        self._shift = 0.0

        self.vb = TimeViewBox()
        self.vb.setYRange(0.0, 1.0, padding=0)
        self.vb.view_all = lambda: self.axis.reset()
        self.ruler = _Ruler(self)
        self.ruler.setHeight(RULER_H)
        self.ruler.setStyle(tickLength=-6, tickTextOffset=2)
        self.ruler.linkToView(self.vb)
        self.showing = GutterText(GUTTER)
        self.showing.setMaximumHeight(RULER_H)
        self.grid.addItem(self.showing, 0, 0)
        self.grid.addItem(self.ruler, 0, 1)
        self.grid.addItem(Strip(), 0, 2)
        self.grid.addItem(_GutterItem(self), 1, 0)
        self.grid.addItem(self.vb, 1, 1)
        self.grid.addItem(_ScrollItem(self), 1, 2)
        self.grid.layout.setRowFixedHeight(0, RULER_H)
        self.item = TimelineItem(self)
        self.link_view_box(self.vb)
        self.axis.changed.connect(self._axis_changed)
        self._find_bar = FindBar(self)
        self.setMinimumHeight(140)
        self.apply_theme()

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis.changed.disconnect(self._axis_changed)
        super().set_axis(axis)
        axis.changed.connect(self._axis_changed)
        self._axis_changed()

    def _axis_changed(self) -> None:
        self.showing.set_html(f"showing {format_duration(self.axis.hi - self.axis.lo)}")
        self.refresh()

    # ---- palette and font -------------------------------------------------------------------
    def apply_theme(self) -> None:
        """Take the palette's colours and the widget's font (the lane labels, event names, row
        heights); `TimePanel` calls it on palette and font changes."""
        if not hasattr(self, "_find_bar"):  # pyqtgraph's constructor
            return
        self.look = Look.of(theme())
        font = self.font()
        self._label_font = QFont(font)
        if font.pointSizeF() > 0:
            self._label_font.setPointSizeF(max(6.5, font.pointSizeF() * 0.82))
        else:
            self._label_font.setPixelSize(max(8, round(font.pixelSize() * 0.82)))
        self._label_fm = QFontMetrics(self._label_font)
        bold = QFont(font)
        bold.setBold(True)
        self.group_h = max(GROUP_H, QFontMetrics(bold).height() + 6)
        if self._auto_row_height:
            self.row_height = max(ROW_H, self._label_fm.height() + 4)
        self._name_width.clear()
        self._elided.clear()
        self._gutter_cache = None
        super().apply_theme()
        self._axis_changed()
        self._layout()
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
        if trace is not self.trace:
            self._collapsed, self._expanded = set(), set()
        self.trace = trace
        self.selected = self.hovered_event = -1
        self.flow_arrows, self.peer_events = [], []
        self.clear_range()
        self.matches = np.zeros(0, dtype=np.int64)
        self._match_lod = None
        self._name_width.clear()
        self._elided.clear()
        if trace is None:
            self.lod = None
            self.lane_rows, self.group_headers = [], []
            self._gutter_cache = None
            self.refresh()
            return
        self._keys, self.lod = keys, lod
        self.branch_names = list(branches.names)
        self.event_branch = np.asarray(branches.event_branch)
        start, end = trace.span()
        self.origin_ns = int(start) if origin_ns is None else int(origin_ns)
        self._shift = float(int(start) - self.origin_ns)
        if origin_ns is None:
            if not self.axis.covers(0.0, float(end - start)):
                self.axis.set_bounds(0.0, float(end - start))
            else:
                self.axis.reset()
        self._layout()
        self.refresh()

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
        self.row_height = max(4, int(pixels))
        self._layout()
        self.refresh()

    @property
    def lane_pad(self) -> int:
        return LANE_PAD if self.row_height >= 12 else 2

    def _groups(self, streams_first: bool) -> list[tuple[tuple, str, list[int]]]:
        """(key, title, lanes) of each group, in display order (GPU streams first if asked)."""
        trace = self.trace
        multi_pid = len({ln.pid for ln in trace.lanes if ln.kind == "cpu"}) > 1 or (
            len({ln.pid for ln in trace.lanes if ln.kind == "gpu"})
            > len({ln.device for ln in trace.lanes if ln.kind == "gpu"})
        )
        ranks = rank_titles(trace)
        grouped: dict[tuple, tuple[str, list[int]]] = {}
        for i in range(len(trace.lanes)):
            key, title = group_of(trace, i, multi_pid, ranks)
            grouped.setdefault(key, (title, []))[1].append(i)
        lanes = trace.lanes
        for _, members in grouped.values():
            members.sort(key=lambda i: (lanes[i].tid if lanes[i].kind == "gpu" else 0, i))

        def order(key: tuple) -> tuple:
            gpu = lanes[grouped[key][1][0]].kind == "gpu"
            return (0 if gpu else 1, key) if streams_first else (key,)

        return [(key, grouped[key][0], grouped[key][1]) for key in sorted(grouped, key=order)]

    def _lane_height(self, lane: int) -> int:
        return len(self.lod.rows_of_lane(lane)) * self.row_height + self.lane_pad

    @property
    def summary_height(self) -> int:
        """Height of a collapsed group: its title band holding its one summary lane."""
        return max(self.group_h, self.row_height + self.lane_pad)

    def _group_height(self, lanes: list[int], collapsed: bool) -> int:
        if collapsed:
            return self.summary_height
        return self.group_h + sum(self._lane_height(i) for i in lanes)

    def _layout(self) -> None:
        """Lay the groups out; GPU streams stay in view (see `auto_collapsed`)."""
        trace, lod = self.trace, self.lod
        self.lane_rows, self.group_headers = [], []
        self.auto_collapsed = set()
        if trace is None or lod is None:
            self.full_height = self.content_height = 0
            return
        groups = self._groups(streams_first=False)
        cpu = {key for key, _, lanes in groups if trace.lanes[lanes[0]].kind == "cpu"}
        collapsed = set(self._collapsed) & cpu
        self.full_height = sum(self._group_height(lanes, False) for _, _, lanes in groups)
        has_gpu = any(ln.kind == "gpu" for ln in trace.lanes)
        avail = self._image_height()
        if has_gpu and self.isVisible():

            def height(keys: set) -> int:
                return sum(self._group_height(lanes, key in keys) for key, _, lanes in groups)

            # Space is short: CPU groups the user did not open collapse, the tallest first, until
            # the streams fit; should they still not, the streams go first.
            auto = sorted(
                (g for g in groups if g[0] in cpu and g[0] not in collapsed and g[0] not in self._expanded),
                key=lambda g: -self._group_height(g[2], False),
            )
            for key, _, _ in auto:
                if height(collapsed) <= avail:
                    break
                collapsed.add(key)
                self.auto_collapsed.add(key)
            if height(collapsed) > avail:
                groups = self._groups(streams_first=True)
        y = 0
        for key, title, lanes in groups:
            n = len(lanes)
            unit = "streams" if trace.lanes[lanes[0]].kind == "gpu" else "threads"
            text = f"{title} · {n} {unit}" if n > 1 else title
            if key in collapsed:
                summary = tuple(lod.rows_of_lane(i)[0] for i in lanes if len(lod.rows_of_lane(i)))
                h = self.summary_height
                self.group_headers.append(GroupHeader(text, y, key, h, True, True, tuple(lanes), summary))
                y += h
                continue
            self.group_headers.append(GroupHeader(text, y, key, self.group_h, False, key in cpu, tuple(lanes)))
            y += self.group_h
            for i in lanes:
                rows = lod.rows_of_lane(i)
                h = len(rows) * self.row_height + self.lane_pad
                self.lane_rows.append(LaneRow(i, y, h, rows, self._lane_label(i, bool(rank_titles(trace)))))
                y += h
        self.content_height = y
        self._tops = [lr.top for lr in self.lane_rows]
        self._header_tops = [gh.top for gh in self.group_headers]
        self._layout_height = avail
        self._gutter_cache = None
        self._set_scroll(self._scroll)

    def _lane_label(self, i: int, ranked_groups: bool) -> str:
        """A lane's label; under a rank's group title it need not repeat the rank."""
        lane = self.trace.lanes[i]
        return replace(lane, rank=None).label if ranked_groups else lane.label

    def group_at(self, y: int) -> GroupHeader | None:
        """The group whose title band (a collapsed group: its summary lane) is at widget y."""
        cy = y - RULER_H + self._scroll
        if y < RULER_H or not self.group_headers:
            return None
        n = bisect.bisect_right(self._header_tops, cy) - 1
        if n < 0:
            return None
        gh = self.group_headers[n]
        return gh if cy < gh.top + gh.height else None

    def set_group_collapsed(self, key: tuple, collapsed: bool) -> None:
        """Collapse a CPU thread group to one summary lane, or expand it (the user's choice: kept
        while the trace is shown, whatever the space)."""
        self._collapsed.discard(key)
        self._expanded.discard(key)
        (self._collapsed if collapsed else self._expanded).add(key)
        self._layout()
        self.refresh()

    def toggle_group(self, gh: GroupHeader) -> None:
        if gh.collapsible:
            self.set_group_collapsed(gh.key, not gh.collapsed)

    # ---- geometry ---------------------------------------------------------------------------
    def _image_height(self) -> int:
        return max(1, self.height() - RULER_H)

    # Vertical scrolling is painted in the right margin (a QScrollBar child would be repainted,
    # at a cost of milliseconds, with every frame of the timeline).
    def max_scroll(self) -> int:
        return max(0, self.content_height - self._image_height())

    def _set_scroll(self, value: int) -> None:
        value = min(max(0, int(value)), self.max_scroll())
        if value != self._scroll:
            self._scroll = value
            self.refresh()

    def scroll_vertical(self, pixels: int) -> bool:
        if self.max_scroll() <= 0:
            return False
        self._set_scroll(self._scroll + pixels)
        return True

    def _scroll_handle(self) -> QRect | None:
        over = self.max_scroll()
        if over <= 0:
            return None
        h = self._image_height()
        handle = max(24, h * h // max(self.content_height, 1))
        y = RULER_H + (h - handle) * self._scroll // over
        return QRect(self.width() - RIGHT_MARGIN + 3, y, RIGHT_MARGIN - 6, handle)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        x = event.position().x()
        if event.button() == Qt.MouseButton.LeftButton and x < GUTTER:
            gh = self.group_at(int(event.position().y()))
            if gh is not None and gh.collapsible:  # a click on a group's title opens or folds it
                self.toggle_group(gh)
                event.accept()
                return
        if x >= GUTTER + self.plot_width() and self.max_scroll() > 0:
            y = int(event.position().y())
            handle = self._scroll_handle()
            if handle is not None and not (handle.top() <= y <= handle.bottom()):
                # Click on the track: jump so that the handle centres there.
                frac = (y - RULER_H - handle.height() / 2) / max(1, self._image_height() - handle.height())
                self._set_scroll(round(frac * self.max_scroll()))
            self._scroll_drag = (y, self._scroll)
            return
        if (
            event.button() == Qt.MouseButton.LeftButton
            and event.modifiers() & Qt.KeyboardModifier.ShiftModifier
            and GUTTER <= x < GUTTER + self.plot_width()
            and event.position().y() >= RULER_H
            and self.trace is not None
        ):
            # Shift+drag: a time range instead of a pan.
            self.clear_range()
            self._range_drag = self.t_of(x)
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.button() == Qt.MouseButton.LeftButton and event.position().x() < GUTTER + self.plot_width():
            self.on_double_click(event.position().toPoint())
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt API)
        dy = event.angleDelta().y()
        shift = event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        if dy and (shift or event.position().x() < GUTTER) and self.scroll_vertical(-dy // 2):
            event.accept()
            return
        super().wheelEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self._scroll_drag is not None:
            y0, s0 = self._scroll_drag
            handle = self._scroll_handle()
            track = max(1, self._image_height() - (handle.height() if handle else 0))
            self._set_scroll(s0 + (int(event.position().y()) - y0) * self.max_scroll() / track)
            return
        if self._range_drag is not None:
            self._drag_range_to(event.position().x())
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self._scroll_drag is not None:
            self._scroll_drag = None
            return
        if self._range_drag is not None:
            self._drag_range_to(event.position().x())
            self._range_drag = None
            if self._range is not None:
                self.rangeSelected.emit(*self.selected_range())
            return
        super().mouseReleaseEvent(event)

    # ---- range selection ----------------------------------------------------------------------
    def _drag_range_to(self, x: float) -> None:
        x = min(max(x, GUTTER), GUTTER + self.plot_width())
        a, b = sorted((self._range_drag, self.t_of(x)))
        # Less than a pixel wide is a shift+click: no range.
        self._range = (a, b) if b - a >= self.ns_per_px() else None
        self.refresh()

    def selected_range(self) -> tuple[int, int] | None:
        """The selected time range in the trace's own clock (start_ns, end_ns), or None."""
        if self._range is None:
            return None
        return (self.origin_ns + int(round(self._range[0])), self.origin_ns + int(round(self._range[1])))

    def select_range(self, start_ns: int, end_ns: int) -> None:
        """Select [start_ns, end_ns] of the trace's clock (shaded, as a Shift+drag would) and emit
        `rangeSelected`; an empty range clears the selection."""
        a, b = sorted((int(start_ns), int(end_ns)))
        if b <= a:
            self.clear_range()
            return
        self._range = (self.axis_time(a), self.axis_time(b))
        self.refresh()
        self.rangeSelected.emit(a, b)

    def clear_range(self) -> None:
        """Drop the selected range (emits `rangeCleared` if there was one)."""
        self._range_drag = None
        if self._range is not None:
            self._range = None
            self.refresh()
            self.rangeCleared.emit()

    def range_rect(self) -> QRect | None:
        """Where the selected range is shaded (widget coordinates, clipped to the lanes), or None."""
        if self._range is None:
            return None
        left, right = GUTTER, GUTTER + self.plot_width()
        x0 = min(max(self.x_of(self._range[0]), left), right)
        x1 = min(max(self.x_of(self._range[1]), left), right)
        if x1 - x0 < 1 and (x1 <= left or x0 >= right):
            return None
        return QRect(int(np.floor(x0)), RULER_H, max(1, int(np.ceil(x1 - x0))), self._image_height())

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if not hasattr(self, "_find_bar"):  # pyqtgraph resizes while the view is being made
            return
        self._gutter_cache = None
        if self._image_height() != self._layout_height and self.trace is not None:
            self._layout()  # room changed: the groups collapsed for want of it may change
        self._set_scroll(self._scroll)
        self._place_find_bar()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self.trace is not None:
            self._layout()

    def lane_rect(self, lane_index: int) -> QRect | None:
        """The lane's rectangle in widget coordinates (may lie outside the widget when scrolled)."""
        for lr in self.lane_rows:
            if lr.lane == lane_index:
                return QRect(GUTTER, RULER_H + lr.top - self._scroll, self.plot_width(), lr.height)
        gh = self.collapsed_group_of(lane_index)
        if gh is not None:  # folded into its group's summary lane
            return QRect(GUTTER, RULER_H + gh.top - self._scroll, self.plot_width(), gh.height)
        return None

    def collapsed_group_of(self, lane_index: int) -> GroupHeader | None:
        """The collapsed group a lane is folded into, or None."""
        for gh in self.group_headers:
            if gh.collapsed and lane_index in gh.lanes:
                return gh
        return None

    def _row_top(self, lr: LaneRow, k: int) -> int:
        """Widget y of the k-th row of a lane."""
        return RULER_H + lr.top - self._scroll + self.lane_pad // 2 + k * self.row_height

    def event_rect(self, i: int) -> QRect | None:
        """Where event `i` is drawn (widget coordinates), or None if its lane is not laid out."""
        if self.trace is None or self.lod is None:
            return None
        lane = int(self.trace.lane[i])
        for lr in self.lane_rows:
            if lr.lane == lane:
                k = min(int(self.trace.depth[i]), len(lr.rows) - 1)
                s = self.axis_time(self.trace.start_ns[i])
                # Clamped just outside the plot: an event far wider than the view (zoomed in on
                # it) would have x beyond the 32-bit range of a QRect.
                left, right = GUTTER - 2.0, GUTTER + self.plot_width() + 2.0
                x0 = min(max(self.x_of(s), left), right)
                x1 = min(max(self.x_of(s + float(self.trace.dur_ns[i])), left), right)
                return QRect(
                    int(np.floor(x0)),
                    self._row_top(lr, k),
                    max(1, int(np.ceil(x1 - x0))),
                    self.row_height - 1,
                )
        gh = self.collapsed_group_of(lane)
        if gh is not None:  # on its group's summary lane
            s = self.axis_time(self.trace.start_ns[i])
            left, right = GUTTER - 2.0, GUTTER + self.plot_width() + 2.0
            x0 = min(max(self.x_of(s), left), right)
            x1 = min(max(self.x_of(s + float(self.trace.dur_ns[i])), left), right)
            y = RULER_H + gh.top - self._scroll + (gh.height - self.row_height) // 2 + 1
            return QRect(int(np.floor(x0)), y, max(1, int(np.ceil(x1 - x0))), self.row_height - 1)
        return None

    # ---- painting ---------------------------------------------------------------------------
    def _visible_rows(self, img_h: int):
        """(rows, row_y, row_bg, y_map, painted, summaries) for what is on screen; y in image
        coordinates. A collapsed group's summary lane is line `len(rows) + s` of the y map (s: its
        place in `summaries`, each the positions in `rows` of the LOD rows it combines)."""
        y_map = np.full(img_h, _BG_A, dtype=np.int64)
        rows: list[int] = []
        row_y: list[int] = []
        row_bg: list[int] = []
        painted: list[int] = []
        summaries: list[list[int]] = []
        summary_y: list[tuple[int, int]] = []
        scroll = self._scroll
        rh = self.row_height
        for gh in self.group_headers:
            a, b = gh.top - scroll, gh.top - scroll + gh.height
            if b > 0 and a < img_h:
                y_map[max(a, 0) : min(b, img_h)] = _HEADER
                if gh.collapsed and gh.summary:
                    y = a + (gh.height - rh) // 2 + 1
                    members = []
                    for k, r in enumerate(gh.summary):
                        members.append(len(rows))
                        rows.append(r)
                        # Names only for the first lane's events (the ones drawn on top).
                        row_y.append(y if k == 0 else _NO_LABEL)
                        row_bg.append(self.look.header)
                    summaries.append(members)
                    summary_y.append((y, y + rh - 1))
                    painted.extend(gh.lanes)
        start = max(0, bisect.bisect_right(self._tops, scroll) - 1)
        for n, lr in enumerate(self.lane_rows[start:], start):
            a = lr.top - scroll
            if a >= img_h:
                break
            b = a + lr.height
            if b <= 0:
                continue
            code = _BG_A if n % 2 == 0 else _BG_B
            y_map[max(a, 0) : min(b, img_h)] = code
            if b - 1 < img_h and b - 1 >= 0:
                y_map[b - 1] = _SEP
            drew = False
            for k, r in enumerate(lr.rows):
                y = a + self.lane_pad // 2 + k * rh
                if y + rh <= 0 or y >= img_h:
                    continue
                y_map[max(y, 0) : min(y + rh - 1, img_h)] = len(rows)
                rows.append(r)
                row_y.append(y)
                row_bg.append(self.look.lane_bg[n % 2])
                drew = True
            if drew:
                painted.append(lr.lane)
        for s, (y0, y1) in enumerate(summary_y):
            y_map[max(y0, 0) : max(0, min(y1, img_h))] = len(rows) + s
        return rows, row_y, row_bg, y_map, painted, summaries

    def _paint_lanes(self, p: QPainter) -> None:
        """The lanes, in widget pixels (the plot area right of the gutter, below the ruler)."""
        w_px = self.plot_width()
        img_h = self._image_height()
        if self.trace is None or self.lod is None:
            self.painted_lanes = []
            p.setPen(self.look.muted)
            p.drawText(
                QRect(GUTTER, RULER_H, w_px, img_h),
                Qt.AlignmentFlag.AlignCenter,
                "Open a trace (File → Open trace…, or drop a file here) or run a model.",
            )
            return
        # The LOD index counts from the trace's first event, the axis from the panel's origin.
        lo, hi = self.axis.lo - self._shift, self.axis.hi - self._shift
        nspp = (hi - lo) / w_px
        rows, row_y, row_bg, y_map, painted, summaries = self._visible_rows(img_h)
        self.painted_lanes = painted
        n_rows = len(rows)
        n_lines = n_rows + len(summaries)
        rows_arr = np.asarray(rows, dtype=np.int64)
        find_on = self._match_lod is not None or self._match_text != ""
        vis = None
        # The painted rows, then one line of each colour the y map's negative codes stand for
        # (_BG_A, _BG_B, _SEP, _HEADER), in arrays kept from frame to frame.
        look = self.look
        extra = np.array([*look.lane_bg, look.separator, look.header], dtype=np.uint32)
        ext = self._scratch.get("ext", (n_lines + extra.size) * w_px, np.uint32).reshape(-1, w_px)
        ext[n_lines:] = extra[:, None]
        if n_rows:
            vis = self.lod.visible(rows_arr, lo, hi, nspp)
            x0, x1 = pixel_spans(vis.start_rel, vis.end_rel, lo, nspp, w_px)
            rep = vis.level.rep[vis.index]
            keys = self._keys[rep]
            palette = look.dimmed if find_on else colors.PALETTE
            lines, covered = rasterize(
                vis.row_pos, x0, x1, palette[keys], n_rows, w_px, np.asarray(row_bg, np.uint32),
                scratch=self._scratch, out=ext[:n_rows],
            )  # fmt: skip
            if self._match_lod is not None:
                mv = self._match_lod.visible(rows_arr, lo, hi, nspp)
                mx0, mx1 = pixel_spans(mv.start_rel, mv.end_rel, lo, nspp, w_px)
                hl = np.full(mx0.size, colors.PALETTE[colors.HIGHLIGHT_KEY], dtype=np.uint32)
                _, mcov = rasterize(mv.row_pos, mx0, mx1, hl, n_rows, w_px, 0, scratch=self._match_scratch)
                lines[mcov] = colors.PALETTE[colors.HIGHLIGHT_KEY]
            # A summary lane: at each pixel, the first of its lanes that has an event there.
            cols_all = np.arange(w_px)
            for s, members in enumerate(summaries):
                cov = covered[members]
                first = np.argmax(cov, axis=0)
                ext[n_rows + s] = np.where(cov.any(axis=0), lines[members][first, cols_all], look.header)
        idx = np.where(y_map >= 0, y_map, n_lines - 1 - y_map)
        img = np.take(
            ext,
            idx,
            axis=0,
            out=self._scratch.get("img", img_h * w_px, np.uint32).reshape(img_h, w_px),
            mode="clip",
        )
        # Grid lines where the ruler has its ticks.
        ticks, *_ = time_ticks(self.axis.lo, self.axis.hi, max(2, w_px // TimeAxisItem.TICK_PX))
        cols = np.array([int(round((t - self.axis.lo) / nspp)) for t in ticks], dtype=np.int64)
        cols = cols[(cols >= 0) & (cols < w_px)]
        if cols.size:
            sub = img[:, cols]
            sub[(sub == look.lane_bg[0]) | (sub == look.lane_bg[1])] = look.grid
            img[:, cols] = sub
        qimg = QImage(img.data, w_px, img_h, w_px * 4, QImage.Format.Format_RGB32)
        p.drawImage(GUTTER, RULER_H, qimg)
        del qimg
        if vis is not None and vis.index.size:
            self._draw_labels(p, vis, x0, x1, keys, row_y, find_on)
        self._draw_marks(p)

    def _draw_gutter_cached(self, p: QPainter, img_h: int) -> None:
        """Lane labels change only with scrolling or layout, so they are drawn once into an image."""
        dpr = self.devicePixelRatioF()
        key = (
            self._scroll,
            img_h,
            self.content_height,
            id(self.trace),
            self.row_height,
            dpr,
            len(self.lane_rows),
            tuple((gh.top, gh.collapsed) for gh in self.group_headers),
        )
        if self._gutter_cache is None or self._gutter_cache[0] != key:
            image = QImage(int(GUTTER * dpr), int(img_h * dpr), QImage.Format.Format_ARGB32_Premultiplied)
            image.setDevicePixelRatio(dpr)
            gp = QPainter(image)
            gp.translate(0, -RULER_H)
            self._draw_lane_labels(gp, img_h)
            gp.end()
            self._gutter_cache = (key, image)
        p.drawImage(0, RULER_H, self._gutter_cache[1])

    def _draw_labels(self, p: QPainter, vis, x0, x1, keys, row_y, find_on: bool) -> None:
        # Room for a name ends where the next item of the same row begins (rows can overlap when
        # a trace's events overlap without nesting).
        room = x1.copy()
        if x0.size > 1:
            same_row = vis.row_pos[1:] == vis.row_pos[:-1]
            room[:-1] = np.where(same_row, np.minimum(x1[:-1], x0[1:]), x1[:-1])
        width = room - x0
        cand = np.flatnonzero(width >= LABEL_MIN_PX)
        cand = cand[np.asarray(row_y, dtype=np.int64)[vis.row_pos[cand]] != _NO_LABEL]
        if cand.size == 0:
            return
        if not vis.raw:
            rep = vis.level.rep[vis.index[cand]]
            own = self.trace.dur_ns[rep]
            run = vis.end_rel[cand] - vis.start_rel[cand]
            cand = cand[own >= 0.8 * run]
        if cand.size > MAX_LABELS:
            cand = cand[:MAX_LABELS]
        p.setFont(self._label_font)
        fm = self._label_fm
        ascent = fm.ascent()
        rh = self.row_height
        if rh - 1 < fm.height() - 3:
            return
        dark, light = QColor("#1d2329"), QColor("#ffffff")
        reps = vis.level.rep[vis.index[cand]]
        name_ids = self.trace.name_id[reps]
        names = self.trace.names
        dark_text = (self.look.dimmed_dark_text if find_on else colors.DARK_TEXT)[keys[cand]]
        for c, nid, dk in zip(cand.tolist(), name_ids.tolist(), dark_text.tolist(), strict=True):
            avail = int(room[c] - x0[c]) - 6
            nw = self._name_width.get(nid)
            if nw is None:
                nw = fm.horizontalAdvance(names[nid])
                self._name_width[nid] = nw
            if nw <= avail:
                text = names[nid]
            else:
                bucket = (avail // 8) * 8
                if bucket < 18:
                    continue
                text = self._elided.get((nid, bucket))
                if text is None:
                    text = fm.elidedText(names[nid], Qt.TextElideMode.ElideRight, bucket)
                    self._elided[(nid, bucket)] = text
            p.setPen(dark if dk else light)
            y = RULER_H + row_y[int(vis.row_pos[c])] + (rh - 1 + ascent - fm.descent()) // 2
            p.drawText(GUTTER + int(x0[c]) + 3, y, text)

    def _draw_marks(self, p: QPainter) -> None:
        p.setClipRect(QRect(GUTTER, RULER_H, self.plot_width(), self._image_height()))
        p.setBrush(Qt.BrushStyle.NoBrush)
        self.drawn_arrows = []
        if self.hovered_event >= 0 and self.hovered_event != self.selected:
            r = self.event_rect(self.hovered_event)
            if r is not None:
                p.setPen(QPen(self.look.hover, 1))
                p.drawRect(r.adjusted(0, 0, -1, -1))
        if self.selected >= 0:
            r = self.event_rect(self.selected)
            self._draw_links(p, r)
            if r is not None:
                p.setPen(QPen(self.look.selected, 2))
                p.drawRect(r.adjusted(0, 0, -1, -1))
        r = self.range_rect()
        if r is not None:
            p.fillRect(r, RANGE_FILL)
            p.setPen(QPen(RANGE_EDGE, 1))
            p.drawLine(r.topLeft(), r.bottomLeft())
            p.drawLine(r.topRight(), r.bottomRight())
        p.setClipping(False)

    def _draw_links(self, p: QPainter, selected: QRect | None) -> None:
        """Arrows from launches to their kernels, and the same collective on other ranks outlined
        and joined to the selected one by a dashed line (where their start times differ)."""
        pen = QPen(FLOW_COLOR, 1.5)
        for src, dst in self.flow_arrows:
            a, b = self.event_rect(src), self.event_rect(dst)
            if a is None or b is None:
                continue
            start = QPointF(a.left(), a.bottom() if b.top() > a.top() else a.top())
            end = QPointF(b.left(), b.top() if b.top() > a.top() else b.bottom())
            p.setPen(pen)
            p.drawLine(start, end)
            _arrow_head(p, start, end, FLOW_COLOR)
            self.drawn_arrows.append((src, dst))
        if selected is None:
            return
        for e in self.peer_events:
            r = self.event_rect(e)
            if r is None:
                continue
            p.setPen(QPen(PEER_COLOR, 2))
            p.drawRect(r.adjusted(0, 0, -1, -1))
            p.setPen(QPen(PEER_COLOR, 1, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(selected.left(), selected.center().y()), QPointF(r.left(), r.center().y()))

    def _draw_lane_labels(self, p: QPainter, img_h: int) -> None:
        look = self.look
        p.fillRect(0, RULER_H, GUTTER, img_h, look.gutter)
        p.fillRect(GUTTER - 1, RULER_H, 1, img_h, look.gutter_line)
        fm = QFontMetrics(self.font())
        bold = QFont(self.font())
        bold.setBold(True)
        fmb = QFontMetrics(bold)
        scroll = self._scroll
        p.setFont(bold)
        p.setPen(look.group_text)
        for gh in self.group_headers:
            y = RULER_H + gh.top - scroll
            if y + gh.height < RULER_H or y > self.height():
                continue
            p.fillRect(0, y, GUTTER - 1, gh.height, look.group_bg)
            # A collapsible group says so: ▸ collapsed (click to open), ▾ open.
            mark = ("▸ " if gh.collapsed else "▾ ") if gh.collapsible else ""
            p.drawText(
                QRect(6, y, GUTTER - 12, gh.height),
                Qt.AlignmentFlag.AlignVCenter,
                fmb.elidedText(mark + gh.title, Qt.TextElideMode.ElideRight, GUTTER - 12),
            )
        p.setFont(self.font())
        for lr in self.lane_rows:
            y = RULER_H + lr.top - scroll
            if y + lr.height < RULER_H:
                continue
            if y > self.height():
                break
            p.fillRect(0, y + lr.height - 1, GUTTER - 1, 1, look.lane_line)
            p.setPen(look.text)
            text = fm.elidedText(lr.label, Qt.TextElideMode.ElideMiddle, GUTTER - 20)
            line_h = min(lr.height, fm.height() + 6)
            p.drawText(QRect(14, y + 1, GUTTER - 20, line_h), Qt.AlignmentFlag.AlignVCenter, text)
            if lr.height >= 2 * fm.height() + 6:
                p.setPen(look.muted)
                n = self.trace.lane_event_count(lr.lane)
                p.drawText(
                    QRect(14, y + line_h - 2, GUTTER - 20, fm.height() + 2),
                    Qt.AlignmentFlag.AlignVCenter,
                    f"{n:,} events",
                )

    # ---- hit testing, hover, selection ------------------------------------------------------
    def event_at(self, pos: QPoint) -> int:
        """The event drawn at a widget position (within 3 pixels), or -1."""
        if self.trace is None or self.lod is None:
            return -1
        x, y = pos.x(), pos.y()
        if x < GUTTER or x >= GUTTER + self.plot_width() or y < RULER_H:
            return -1
        gh = self.group_at(y)
        if gh is not None:
            if not gh.collapsed:
                return -1
            t, tol = self.t_of(x + 0.5) - self._shift, 3 * self.ns_per_px()
            for row in gh.summary:  # the lane drawn on top first
                i = self._hit(row, t, tol)
                if i >= 0:
                    return i
            return -1
        cy = y - RULER_H + self._scroll
        n = bisect.bisect_right(self._tops, cy) - 1
        if n < 0:
            return -1
        lr = self.lane_rows[n]
        if cy >= lr.top + lr.height:
            return -1
        k = (cy - lr.top - self.lane_pad // 2) // self.row_height
        if k < 0 or k >= len(lr.rows):
            return -1
        return self._hit(lr.rows.start + k, self.t_of(x + 0.5) - self._shift, 3 * self.ns_per_px())

    def _hit(self, row: int, t: float, tol: float) -> int:
        """The event of LOD row `row` at time `t` (ns from the trace's first event): the deepest one containing
        `t`, else the nearest within `tol`, else -1.

        The candidates are the row's raw events that start by t + tol and whose running-maximum end
        reaches t - tol; they are scanned backwards in growing chunks, since in a folded row (depths
        past the row cap share the last row) a parent can sit thousands of children before the
        cursor, and between two children only the parent contains it. Under nesting, the
        latest-starting event that contains `t` is the deepest, so the first chunk holding one
        settles it; within a chunk the shortest such event wins (events overlapping without
        nesting).
        """
        lod = self.lod
        level = lod.levels[0]
        dur = self.trace.dur_ns
        # Integer key arithmetic (a float key near 1e18 is off by hundreds of ns); exact times
        # from the trace.
        first, hi = lod.raw_range(row, t - tol, t + tol)
        near, near_d = -1, np.inf
        chunk = 256
        while hi > first:
            lo = max(first, hi - chunk)
            ev = level.rep[lo:hi]
            s = lod.raw_start_rel(ev).astype(np.float64)
            e = s + dur[ev]
            inside = np.flatnonzero((s <= t) & (t <= e))
            if inside.size:
                length = e[inside] - s[inside]
                # the shortest; among equals the latest-starting (the deepest)
                k = inside[inside.size - 1 - int(np.argmin(length[::-1]))]
                return int(ev[k])
            d = np.minimum(np.abs(t - s), np.abs(t - e))
            k = int(np.argmin(d))
            if d[k] < near_d:
                near, near_d = int(ev[k]), float(d[k])
            hi = lo
            chunk *= 4
        return near if near_d <= tol else -1

    def tooltip_rows(self, i: int) -> list[tuple[str, str]]:
        return describe_event(self.trace, i, self.branch_names, self.event_branch)

    def on_hover(self, pos: QPoint) -> None:
        i = self.event_at(pos)
        if i == self.hovered_event:
            return
        self.hovered_event = i
        if i >= 0:
            rows = self.tooltip_rows(i)
            self.hover_text = rows_to_text(rows)
            QToolTip.showText(self.mapToGlobal(pos), rows_to_html(rows), self)
        else:
            self.hover_text = ""
            QToolTip.hideText()
        self.eventHovered.emit(i)
        self.refresh()

    def leaveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self.hovered_event >= 0:
            self.hovered_event = -1
            self.hover_text = ""
            self.eventHovered.emit(-1)
            self.refresh()
        super().leaveEvent(event)

    def select_event(self, i: int) -> None:
        self.selected = int(i)
        self._links_of_selected()
        self.eventSelected.emit(self.selected)
        self.refresh()

    def _links_of_selected(self) -> None:
        """The arrows (`flow_arrows`: launch -> kernel, or a kernel's "launched by") and the same
        collective on the other ranks (`peer_events`) of the selected event."""
        i, trace = self.selected, self.trace
        self.flow_arrows, self.peer_events = [], []
        if i < 0 or trace is None:
            return
        ks = event_flows(trace, i)
        flows = trace.flows
        self.flow_arrows = [(int(flows.src[k]), int(flows.dst[k])) for k in ks.tolist()]
        self.peer_events = [e for e in collective_peers(trace, i).values() if e != i]

    def on_click(self, pos: QPoint) -> None:
        gh = self.group_at(pos.y())
        if gh is not None and gh.collapsed:  # a summary lane: a click opens its group
            self.toggle_group(gh)
            return
        self.select_event(self.event_at(pos))

    def on_double_click(self, pos: QPoint) -> None:
        i = self.event_at(pos)
        if i >= 0:
            self.select_event(i)
            self.zoom_to_event(i)

    def zoom_to_event(self, i: int) -> None:
        s = self.axis_time(self.trace.start_ns[i])
        d = float(self.trace.dur_ns[i])
        pad = max(0.1 * d, 500.0)
        self.axis.set_view(s - pad, s + d + pad)
        self.reveal_lane(int(self.trace.lane[i]))

    def reveal_lane(self, lane_index: int) -> None:
        gh = self.collapsed_group_of(lane_index)
        if gh is not None:
            h = self._image_height()
            if gh.top < self._scroll or gh.top + gh.height > self._scroll + h:
                self._set_scroll(gh.top - h // 3)
            return
        for lr in self.lane_rows:
            if lr.lane == lane_index:
                h = self._image_height()
                if lr.top < self._scroll or lr.top + lr.height > self._scroll + h:
                    self._set_scroll(lr.top - h // 3)
                return

    # ---- find -------------------------------------------------------------------------------
    def _place_find_bar(self) -> None:
        bar = self._find_bar
        bar.adjustSize()
        bar.move(max(GUTTER, self.width() - RIGHT_MARGIN - bar.width() - 8), RULER_H + 6)

    def open_find(self) -> None:
        self._place_find_bar()
        self._find_bar.show()
        self._find_bar.raise_()
        self._find_bar.edit.setFocus()
        self._find_bar.edit.selectAll()

    def close_find(self) -> None:
        self._find_bar.hide()
        self.find("")
        self.setFocus()

    def _find_return(self) -> None:
        self._find_bar.debounce.stop()
        text = self._find_bar.edit.text()
        if text != self._match_text:
            self.find(text)
        self.find_next()

    def find(self, text: str) -> int:
        """Highlight events whose name contains `text` (case-insensitive); returns the count."""
        self._match_text = text
        self._match_pos = -1
        if not text or self.trace is None:
            self._match_text = ""
            self.matches = np.zeros(0, dtype=np.int64)
            self._match_lod = None
            self._find_bar.count.setText("")
        else:
            self.matches = self.trace.find(text)
            self._match_lod = TimelineLod(self.trace, subset=self.matches) if self.matches.size else None
            n = int(self.matches.size)
            self._find_bar.count.setText(f"{n:,} match" + ("" if n == 1 else "es"))
        self.findChanged.emit(int(self.matches.size))
        self.refresh()
        return int(self.matches.size)

    def find_next(self) -> int:
        """Select and show the next match (in time order); returns its index or -1."""
        if self.matches.size == 0:
            return -1
        order = self.matches[np.argsort(self.trace.start_ns[self.matches], kind="stable")]
        self._match_pos = (self._match_pos + 1) % order.size
        i = int(order[self._match_pos])
        self.select_event(i)
        s = self.axis_time(self.trace.start_ns[i])
        d = float(self.trace.dur_ns[i])
        width = self.axis.hi - self.axis.lo
        if d > width * 0.8:
            self.zoom_to_event(i)
        else:
            self.axis.pan(s + d / 2 - (self.axis.lo + width / 2))
            self.reveal_lane(int(self.trace.lane[i]))
        self._find_bar.count.setText(f"{self._match_pos + 1:,} of {order.size:,}")
        return i

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.matches(QKeySequence.StandardKey.Find):
            self.open_find()
            event.accept()
            return
        if event.key() == Qt.Key.Key_Escape and (self._range is not None or self.selected >= 0):
            # One thing at a time: the range first, then the selected event.
            if self._range is not None:
                self.clear_range()
            else:
                self.select_event(-1)
            event.accept()
            return
        super().keyPressEvent(event)
