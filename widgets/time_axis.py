"""The one time axis every view shares, and the pyqtgraph view every panel is built on.

`TimeAxis` holds the visible window. Its times are float nanoseconds from an origin common to every
trace on screen: each panel maps its own trace's clock onto it with its own `origin_ns` (the
instant of its trace drawn at the axis' 0, by default the trace's first event; see
`widgets.panel`), subtracting in int64 first, since absolute trace clocks reach 1e18 ns where a
float64 cannot hold single nanoseconds. Two runs shown one above the other on one axis start
together, and a run twice as long is twice as wide.

`TimePanel` is the shared widget base, a pyqtgraph `GraphicsView`. Its plots are pyqtgraph
`ViewBox`es whose X range is kept equal to the axis window by an `AxisLink`, both ways: zooming
or panning any of them (wheel, drag, the ViewBox's context menu) moves the axis, and the axis
moves every ViewBox of every panel, so a given instant sits at the same x from top to bottom.
Every panel lays out a label gutter of `GUTTER` pixels on the left, the plot area, and a
`RIGHT_MARGIN` strip on the right (the timeline's scroll bar). Keys are Perfetto's: W/S zoom,
A/D pan, 0 or Home shows everything.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import wraps

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QKeyEvent, QMouseEvent, QPainter
from PySide6.QtWidgets import QToolTip, QWidget

from branchscope.widgets.theme import LIGHT, theme

GUTTER = 200
RIGHT_MARGIN = 14
#: Narrowest window one can zoom to.
MIN_WIDTH_NS = 50.0
#: ... and no narrower than this many float steps at the far end of the extent: past 2**53 ns
#: (104 days, as in a trace with one event at 0 and the rest at epoch times) a float time is good
#: to its ulp only, and a window a few ulps wide would draw events hundreds of pixels off.
MIN_WIDTH_ULPS = 2048
#: One notch of the mouse wheel scales the window by this much (pyqtgraph's ViewBox is set to it).
WHEEL_ZOOM = 0.8
#: The light palette's colours, for code that paints without asking `theme()` (see widgets/theme.py).
GUTTER_BG = LIGHT.gutter
AXIS_TEXT = QColor("#4a5560")
BACKGROUND = LIGHT.background


class TimeAxis(QObject):
    """The visible time window, shared by every view of a workspace (ns from the common origin)."""

    changed = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        #: The whole extent, [start_ns, end_ns] on the axis (what 0 / Home shows).
        self.start_ns = 0.0
        self.end_ns = 1.0
        self.lo = 0.0
        self.hi = 1.0
        self.min_width = MIN_WIDTH_NS

    @property
    def span_ns(self) -> float:
        return self.end_ns - self.start_ns

    # ---- bounds and window -----------------------------------------------------------------
    def set_bounds(self, start_ns: float, end_ns: float) -> None:
        """Make [start_ns, end_ns] (ns from the common origin) the whole extent and show all of it.

        A workspace showing several traces passes the union of their extents on the axis, e.g.
        (0, the longest span) when each trace's first event is at 0.
        """
        start = float(start_ns)
        end = max(float(end_ns), start + 1.0)
        self.start_ns, self.end_ns = start, end
        far = max(abs(start), abs(end), end - start)
        self.min_width = max(MIN_WIDTH_NS, MIN_WIDTH_ULPS * math.ulp(1.1 * far))
        self.lo, self.hi = start, end
        self.changed.emit()

    def covers(self, start_ns: float, end_ns: float) -> bool:
        """Whether the extent is exactly [start_ns, end_ns]."""
        return (self.start_ns, self.end_ns) == (float(start_ns), max(float(end_ns), float(start_ns) + 1.0))

    def set_view(self, lo: float, hi: float) -> None:
        """Show [lo, hi] (ns from the origin), kept within the extent plus a small margin."""
        width = max(float(hi) - float(lo), self.min_width)
        margin = 0.05 * self.span_ns
        max_width = self.span_ns + 2 * margin
        if width >= max_width:
            lo, width = self.start_ns - margin, max_width
        else:
            centre = (float(lo) + float(hi)) / 2
            lo = centre - width / 2
            lo = min(max(lo, self.start_ns - margin), self.end_ns + margin - width)
        if (lo, lo + width) != (self.lo, self.hi):
            self.lo, self.hi = lo, lo + width
            self.changed.emit()

    def reset(self) -> None:
        self.set_view(self.start_ns, self.end_ns)

    def zoom(self, factor: float, anchor: float | None = None) -> None:
        """Scale the window by `factor` (< 1 zooms in) keeping `anchor` (ns) where it is."""
        if anchor is None:
            anchor = (self.lo + self.hi) / 2
        width = max((self.hi - self.lo) * factor, self.min_width)
        frac = (anchor - self.lo) / (self.hi - self.lo) if self.hi > self.lo else 0.5
        lo = anchor - frac * width
        hi = lo + width
        margin = 0.05 * self.span_ns
        if width < self.span_ns + 2 * margin:  # keep the anchor fixed unless clamped at the edges
            lo = min(max(lo, self.start_ns - margin), self.end_ns + margin - width)
            hi = lo + width
        self.set_view(lo, hi)

    def pan(self, delta_ns: float) -> None:
        self.set_view(self.lo + delta_ns, self.hi + delta_ns)


class AxisLink(QObject):
    """Keeps a pyqtgraph ViewBox's X range equal to a `TimeAxis` window, both ways.

    The axis is the one model: a range the ViewBox gets from the mouse or its menu is handed to
    `TimeAxis.set_view` (which may clamp it), and every change of the axis is set on the ViewBox.
    A flag keeps the two from echoing each other.
    """

    def __init__(self, axis: TimeAxis, view_box: pg.ViewBox, parent: QObject):
        super().__init__(parent)
        self.axis = axis
        self.view_box = view_box
        self._busy = False
        view_box.sigXRangeChanged.connect(self._from_view)
        axis.changed.connect(self._from_axis)
        self._from_axis()

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis.changed.disconnect(self._from_axis)
        self.axis = axis
        axis.changed.connect(self._from_axis)
        self._from_axis()

    def close(self) -> None:
        """Stop following: the ViewBox keeps its range, the axis forgets it."""
        self.axis.changed.disconnect(self._from_axis)
        self.view_box.sigXRangeChanged.disconnect(self._from_view)
        self.setParent(None)

    def _from_axis(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.view_box.setXRange(self.axis.lo, self.axis.hi, padding=0)
        finally:
            self._busy = False

    def _from_view(self, _view_box, x_range) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.axis.set_view(float(x_range[0]), float(x_range[1]))
        finally:
            self._busy = False
        if tuple(self.view_box.viewRange()[0]) != (self.axis.lo, self.axis.hi):
            self._from_axis()  # the axis clamped what the ViewBox asked for


class TimeViewBox(pg.ViewBox):
    """A ViewBox that moves in time only: wheel zooms at the cursor, drag pans, a sideways wheel
    pans, a rectangle (its menu's 1-button mode) zooms to the times it spans; the Y range is the
    panel's to set. Its context menu (right click) has pyqtgraph's View All, which calls
    `view_all` (the panel shows the whole axis), and Export (PNG, SVG, CSV)."""

    def __init__(self, **kwargs):
        super().__init__(enableMenu=True, **kwargs)
        #: What View All does (the panel sets it); by default pyqtgraph's auto range.
        self.view_all: Callable[[], None] | None = None
        #: The Y range a chart wants: values up to this, and pixels of room above them.
        self.y_top: tuple[float, int] = (1.0, 0)
        self.setMouseEnabled(x=True, y=False)
        self.enableAutoRange(x=False, y=False)
        # pyqtgraph scales by 1.02 ** (delta * factor): one notch (delta 120) is WHEEL_ZOOM.
        self.state["wheelScaleFactor"] = math.log(WHEEL_ZOOM) / (120 * math.log(1.02))
        self.setDefaultPadding(0.0)

    # pyqtgraph maps the mouse through the ViewBox's transform, updated lazily before a paint; a
    # range set since the last paint (a new trace, another view's zoom) must be in it first.
    def mouseDragEvent(self, ev, axis=None):  # noqa: N802 (pyqtgraph API)
        self.updateMatrix()
        super().mouseDragEvent(ev, axis=axis)

    def autoRange(self, *args, **kwargs):  # noqa: N802 (pyqtgraph API)
        if self.view_all is not None:
            self.view_all()
        else:
            super().autoRange(*args, **kwargs)

    def showAxRect(self, ax, **kwargs):  # noqa: N802 (pyqtgraph API)
        """A rectangle dragged in 1-button mode: its times, not its values."""
        self.setXRange(ax.normalized().left(), ax.normalized().right(), padding=0)
        self.sigRangeChangedManually.emit(self.state["mouseEnabled"])

    def wheelEvent(self, ev, axis=None):  # noqa: N802 (Qt API)
        self.updateMatrix()
        if ev.orientation() == Qt.Orientation.Horizontal:
            lo, hi = self.viewRange()[0]
            shift = -ev.delta() / 120 * 0.1 * (hi - lo)
            self.setXRange(lo + shift, hi + shift, padding=0)
            ev.accept()
            return
        super().wheelEvent(ev, axis=0)


def safe_paint(paint: Callable) -> Callable:
    """Wrap a graphics item's `paint`: a failure is not raised through Qt (which would print half a
    message and carry on, or stop the whole scene from drawing); the item says it cannot draw and
    the error goes to `sys.excepthook`, which the window turns into a dialog (pytest-qt into a
    failed test)."""

    @wraps(paint)
    def wrapper(self, p: QPainter, *args):
        p.save()
        try:
            paint(self, p, *args)
        except Exception as exc:
            p.restore()
            p.save()
            rect = self.boundingRect()
            p.fillRect(rect, theme().background)
            p.setPen(QColor("#c0392b"))
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, f"cannot draw this view: {exc}")
            sys.excepthook(type(exc), exc, exc.__traceback__)
        finally:
            p.restore()

    return wrapper


_MOUSE_EVENTS = {
    QEvent.Type.MouseButtonPress,
    QEvent.Type.MouseButtonRelease,
    QEvent.Type.MouseButtonDblClick,
    QEvent.Type.MouseMove,
    QEvent.Type.Wheel,
}


#: What makes a panel take its colours and fonts again (a view with a style sheet, like pyqtgraph's,
#: may get only the application-wide event).
_LOOK_CHANGES = {
    QEvent.Type.PaletteChange,
    QEvent.Type.ApplicationPaletteChange,
    QEvent.Type.FontChange,
    QEvent.Type.ApplicationFontChange,
}


class TimePanel(pg.GraphicsView):
    """Base of the views drawn against the shared `TimeAxis` (see the module docstring).

    Subclasses put their items in `self.grid` (a pyqtgraph `GraphicsLayout` filling the view),
    link each ViewBox to the axis with `link_view_box`, and implement `describe_at` (the hover
    text at an instant) or `on_hover`. `_paint` draws over everything, in widget pixels.
    """

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, background=theme().background)
        self.axis = axis if axis is not None else TimeAxis(self)
        #: The items, in rows and columns (pyqtgraph's `GraphicsLayout`, filling the view).
        self.grid = pg.GraphicsLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(0)
        self.grid.layout.setColumnStretchFactor(1, 1)  # the plots take what the gutters leave
        self.setCentralItem(self.grid)
        self.links: list[AxisLink] = []
        self.hover_text = ""
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    # ---- the axis ---------------------------------------------------------------------------
    def link_view_box(self, view_box: pg.ViewBox) -> AxisLink:
        link = AxisLink(self.axis, view_box, self)
        self.links.append(link)
        return link

    def unlink_view_boxes(self) -> None:
        for link in self.links:
            link.close()
        self.links = []

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis = axis
        for link in self.links:
            link.set_axis(axis)
        self.viewport().update()

    # ---- geometry (widget pixels; every panel puts its plots at the same x) -----------------
    def plot_left(self) -> int:
        return GUTTER

    def plot_width(self) -> int:
        return max(1, self.width() - GUTTER - RIGHT_MARGIN)

    def ns_per_px(self) -> float:
        return (self.axis.hi - self.axis.lo) / self.plot_width()

    def x_of(self, t_rel: float) -> float:
        """Widget x of a time (ns on the axis)."""
        return GUTTER + (t_rel - self.axis.lo) / self.ns_per_px()

    def t_of(self, x: float) -> float:
        return self.axis.lo + (x - GUTTER) * self.ns_per_px()

    def refresh(self) -> None:
        """Repaint everything the view shows."""
        self.viewport().update()

    def render(self, target, *args, **kwargs):
        """`QWidget.render` onto a paint device (the widget as on screen), or, given a painter,
        `QGraphicsView.render` (the scene)."""
        if isinstance(target, QPainter):
            return super().render(target, *args, **kwargs)
        self.scene().prepareForPaint()
        return QWidget.render(self, target, *args, **kwargs)

    # ---- painting over the plots -------------------------------------------------------------
    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:  # noqa: N802 (Qt API)
        """Scene coordinates are widget pixels here (pyqtgraph maps the scene 1:1)."""
        super().drawForeground(painter, rect)
        painter.save()
        try:
            self._paint(painter)
        except Exception as exc:
            painter.restore()
            painter.save()
            painter.fillRect(self.rect(), theme().background)
            painter.setPen(QColor("#c0392b"))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, f"cannot draw this view: {exc}")
            sys.excepthook(type(exc), exc, exc.__traceback__)
        finally:
            painter.restore()

    def _paint(self, p: QPainter) -> None:
        """What the panel draws over its plots, in widget pixels (by default: nothing)."""

    def draw_message_line(self, p: QPainter, title: str, text: str) -> None:
        """One line: `title` in bold in the gutter, `text` in the plot area (a panel with no data)."""
        h = min(self.height(), QFontMetrics(self.font()).height() + 12)
        colors = theme()
        p.fillRect(0, 0, GUTTER, self.height(), colors.gutter)
        p.fillRect(GUTTER + self.plot_width(), 0, RIGHT_MARGIN, self.height(), colors.gutter)
        bold = QFont(self.font())
        bold.setBold(True)
        p.setFont(bold)
        p.setPen(colors.text)
        p.drawText(QRectF(8, 0, GUTTER - 12, h), Qt.AlignmentFlag.AlignVCenter, title)
        p.setFont(self.font())
        p.setPen(colors.muted)
        p.drawText(QRectF(GUTTER + 8, 0, self.plot_width() - 8, h), Qt.AlignmentFlag.AlignVCenter, text)

    # ---- palette and font ----------------------------------------------------------------------
    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() in _LOOK_CHANGES:
            self.apply_theme()

    def apply_theme(self) -> None:
        """Take the palette's colours and the widget's font: the background here, and every item
        of the scene that has an `apply_theme(theme, font)` (axes, gutter labels)."""
        if self.scene() is None:  # still in pyqtgraph's constructor
            return
        colors = theme()
        self.setBackground(colors.background)
        for item in self.scene().items():
            restyle = getattr(item, "apply_theme", None)
            if callable(restyle):
                restyle(colors, self.font())
        self.viewport().update()

    # ---- events -------------------------------------------------------------------------------
    def event(self, ev: QEvent) -> bool:
        # Mouse and wheel events sent to the view itself (QTest, accessibility tools) are handled
        # as if sent to its viewport, which covers the view exactly (no frame, no scroll bars).
        if ev.type() in _MOUSE_EVENTS:
            return self.viewportEvent(ev)
        return super().event(ev)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt API)
        super().mouseMoveEvent(event)
        if not event.buttons():
            self.on_hover(event.position().toPoint())

    def leaveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.hover_text = ""
        super().leaveEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt API)
        key = event.key()
        anchor = None
        pos = self.mapFromGlobal(self.cursor().pos())
        if self.rect().contains(pos) and GUTTER <= pos.x() < GUTTER + self.plot_width():
            anchor = self.t_of(pos.x())
        width = self.axis.hi - self.axis.lo
        if key == Qt.Key.Key_W:
            self.axis.zoom(0.7, anchor)
        elif key == Qt.Key.Key_S:
            self.axis.zoom(1 / 0.7, anchor)
        elif key == Qt.Key.Key_A:
            self.axis.pan(-0.15 * width)
        elif key == Qt.Key.Key_D:
            self.axis.pan(0.15 * width)
        elif key in (Qt.Key.Key_0, Qt.Key.Key_Home):
            self.axis.reset()
        else:
            super().keyPressEvent(event)
            return
        event.accept()

    # ---- hover ------------------------------------------------------------------------------
    def describe_at(self, t_rel: float) -> str:
        """What the view says at one instant (ns on the axis): the tooltip's text."""
        return ""

    def tip_at(self, pos: QPoint) -> str:
        """The tooltip at a widget position: what `describe_at` says at its instant, over the plots."""
        if not GUTTER <= pos.x() < GUTTER + self.plot_width():
            return ""
        return self.describe_at(self.t_of(pos.x()))

    def on_hover(self, pos: QPoint) -> None:
        text = self.tip_at(pos)
        self.hover_text = text
        if text:
            QToolTip.showText(self.mapToGlobal(pos), text, self)
        else:
            QToolTip.hideText()

    def viewportEvent(self, ev: QEvent) -> bool:  # noqa: N802 (Qt API)
        # Qt's tooltip event, once the mouse rests, goes to the scene, which finds no item with a
        # tooltip and hides the one shown on hover: the panel's own tooltip answers it instead.
        if ev.type() == QEvent.Type.ToolTip:
            text = self.tip_at(ev.pos())
            if text:
                QToolTip.showText(ev.globalPos(), text, self)
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(ev)
