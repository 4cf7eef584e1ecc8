"""The one time axis every view shares, and the base widget that maps it to pixels.

`TimeAxis` holds the visible window of the trace's clock; every view (timeline, thread-pool usage,
memory) draws through it and navigates through it, so zooming or panning any of them moves all of
them, and a given instant sits at the same x from top to bottom. Times inside the axis are float
nanoseconds relative to `origin_ns` (the trace's first event): absolute trace clocks reach 1e18 ns,
where a float64 cannot hold single nanoseconds.

`TimePanel` is the shared widget base: a label gutter of `GUTTER` pixels on the left, the plot
area, a `RIGHT_MARGIN` strip on the right (the timeline's scroll bar), and Perfetto's navigation:
wheel zooms at the cursor, drag pans, W/S zoom, A/D pan, 0 or Home shows everything.
"""

from __future__ import annotations

import math
import sys

from PySide6.QtCore import QObject, QPoint, QRect, Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QMouseEvent, QPainter, QPen, QWheelEvent
from PySide6.QtWidgets import QWidget

from branchscope.widgets.units import time_ticks

GUTTER = 200
RIGHT_MARGIN = 14
#: Narrowest window one can zoom to.
MIN_WIDTH_NS = 50.0
#: ... and no narrower than this many float steps at the far end of the trace: past 2**53 ns
#: (104 days, as in a trace with one event at 0 and the rest at epoch times) a float time is good
#: to its ulp only, and a window a few ulps wide would draw events hundreds of pixels off.
MIN_WIDTH_ULPS = 2048
GUTTER_BG = QColor("#eef1f4")
GRID = QColor("#e3e7ec")
AXIS_TEXT = QColor("#4a5560")


class TimeAxis(QObject):
    """The visible time window, shared by all views of one trace."""

    changed = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.origin_ns = 0
        self.span_ns = 0.0
        self.lo = 0.0
        self.hi = 1.0
        self.min_width = MIN_WIDTH_NS

    # ---- bounds and window -----------------------------------------------------------------
    def set_bounds(self, start_ns: int, end_ns: int) -> None:
        """Make [start_ns, end_ns] (trace clock) the whole extent and show all of it."""
        self.origin_ns = int(start_ns)
        self.span_ns = float(max(int(end_ns) - int(start_ns), 1))
        self.min_width = max(MIN_WIDTH_NS, MIN_WIDTH_ULPS * math.ulp(1.1 * self.span_ns))
        self.lo, self.hi = 0.0, self.span_ns
        self.changed.emit()

    def set_view(self, lo: float, hi: float) -> None:
        """Show [lo, hi] (ns from the origin), kept within the extent plus a small margin."""
        width = max(float(hi) - float(lo), self.min_width)
        margin = 0.05 * self.span_ns
        max_width = self.span_ns + 2 * margin
        if width >= max_width:
            lo, width = -margin, max_width
        else:
            centre = (float(lo) + float(hi)) / 2
            lo = centre - width / 2
            lo = min(max(lo, -margin), self.span_ns + margin - width)
        if (lo, lo + width) != (self.lo, self.hi):
            self.lo, self.hi = lo, lo + width
            self.changed.emit()

    def set_view_abs(self, start_ns: int, end_ns: int) -> None:
        self.set_view(float(int(start_ns) - self.origin_ns), float(int(end_ns) - self.origin_ns))

    def view_abs(self) -> tuple[int, int]:
        return (self.origin_ns + int(round(self.lo)), self.origin_ns + int(round(self.hi)))

    def reset(self) -> None:
        self.set_view(0.0, self.span_ns)

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
            lo = min(max(lo, -margin), self.span_ns + margin - width)
            hi = lo + width
        self.set_view(lo, hi)

    def pan(self, delta_ns: float) -> None:
        self.set_view(self.lo + delta_ns, self.hi + delta_ns)


class TimePanel(QWidget):
    """Base of the views drawn against the shared `TimeAxis` (see the module docstring)."""

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent)
        self.axis = axis if axis is not None else TimeAxis(self)
        self.axis.changed.connect(self.update)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMouseTracking(True)
        self._press: QPoint | None = None
        self._press_view = (0.0, 0.0)
        self._dragging = False

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis.changed.disconnect(self.update)
        self.axis = axis
        axis.changed.connect(self.update)
        self.update()

    # ---- painting ---------------------------------------------------------------------------
    def paintEvent(self, event) -> None:  # noqa: N802 (Qt API)
        """Every panel paints in `_paint`; the painter is always ended, even if painting fails.

        A failure is not raised through Qt (which would print half a message and carry on): the
        panel says it cannot draw, and the error goes to `sys.excepthook`, which the window turns
        into a dialog (pytest-qt into a failed test).
        """
        p = QPainter(self)
        try:
            self._paint(p)
        except Exception as exc:
            p.resetTransform()
            p.setClipping(False)
            p.fillRect(self.rect(), QColor("#ffffff"))
            p.setPen(QColor("#c0392b"))
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, f"cannot draw this view: {exc}")
            sys.excepthook(type(exc), exc, exc.__traceback__)
        finally:
            p.end()

    def _paint(self, p: QPainter) -> None:
        raise NotImplementedError

    # ---- geometry ---------------------------------------------------------------------------
    def plot_left(self) -> int:
        return GUTTER

    def plot_width(self) -> int:
        return max(1, self.width() - GUTTER - RIGHT_MARGIN)

    def ns_per_px(self) -> float:
        return (self.axis.hi - self.axis.lo) / self.plot_width()

    def x_of(self, t_rel: float) -> float:
        """Widget x of a time (ns from the axis origin)."""
        return GUTTER + (t_rel - self.axis.lo) / self.ns_per_px()

    def t_of(self, x: float) -> float:
        return self.axis.lo + (x - GUTTER) * self.ns_per_px()

    def plot_rect(self, top: int = 0, bottom: int = 0) -> QRect:
        return QRect(GUTTER, top, self.plot_width(), max(0, self.height() - top - bottom))

    # ---- drawing helpers --------------------------------------------------------------------
    def draw_grid(self, p: QPainter, top: int, bottom: int) -> None:
        """Vertical lines at the time ticks, between y=top and y=bottom."""
        ticks, *_ = time_ticks(self.axis.lo, self.axis.hi, max(2, self.plot_width() // 110))
        p.setPen(QPen(GRID, 1))
        right = GUTTER + self.plot_width()
        for t in ticks:
            x = int(round(self.x_of(t)))
            if GUTTER <= x < right:
                p.drawLine(x, top, x, bottom)

    def draw_gutter(self, p: QPainter, top: int = 0) -> None:
        p.fillRect(0, top, GUTTER, self.height() - top, GUTTER_BG)
        p.fillRect(GUTTER - 1, top, 1, self.height() - top, QColor("#cfd5dc"))
        p.fillRect(GUTTER + self.plot_width(), top, RIGHT_MARGIN, self.height() - top, GUTTER_BG)

    # ---- navigation (Perfetto-like) ---------------------------------------------------------
    def scroll_vertical(self, pixels: int) -> bool:
        """Views with more content than height scroll here; returns whether it scrolled."""
        return False

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt API)
        dy = event.angleDelta().y()
        dx = event.angleDelta().x()
        x = event.position().x()
        mods = event.modifiers()
        if dy and (mods & Qt.KeyboardModifier.ShiftModifier or x < GUTTER):
            if self.scroll_vertical(-dy // 2):
                event.accept()
                return
        if dx and not dy:
            self.axis.pan(-dx / 120 * 0.1 * (self.axis.hi - self.axis.lo))
        elif dy:
            anchor = self.t_of(min(max(x, GUTTER), GUTTER + self.plot_width()))
            self.axis.zoom(0.8 ** (dy / 120), anchor)
        event.accept()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position().toPoint()
            self._press_view = (self.axis.lo, self.axis.hi)
            self._dragging = False
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._press is not None and event.buttons() & Qt.MouseButton.LeftButton:
            dx = event.position().x() - self._press.x()
            if self._dragging or abs(dx) > 3:
                self._dragging = True
                lo, hi = self._press_view
                shift = -dx * (hi - lo) / self.plot_width()
                self.axis.set_view(lo + shift, hi + shift)
                self.setCursor(Qt.CursorShape.ClosedHandCursor)
        else:
            self.on_hover(event.position().toPoint())
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton and self._press is not None:
            if not self._dragging:
                self.on_click(event.position().toPoint())
            self._press = None
            self._dragging = False
            self.unsetCursor()
        super().mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self.on_double_click(event.position().toPoint())

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        key = event.key()
        anchor = None
        pos = self.mapFromGlobal(self.cursor().pos())
        if self.rect().contains(pos) and pos.x() >= GUTTER:
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

    # hooks for subclasses
    def on_hover(self, pos: QPoint) -> None:
        pass

    def on_click(self, pos: QPoint) -> None:
        pass

    def on_double_click(self, pos: QPoint) -> None:
        pass
