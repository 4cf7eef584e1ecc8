"""The timeline's scene items: the lanes (`TimelineItem`), the lane labels (`GutterItem`), the
scroll bar (`ScrollItem`) and the time ruler (`Ruler`) of `TimelineView`'s pyqtgraph grid.

Each paints through the view's `TimelinePainter` (`timeline_painter`), in widget pixels; the items
themselves only place what it draws.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFont, QPainter
from PySide6.QtWidgets import QSizePolicy

from branchscope.widgets.charts import TimeAxisItem
from branchscope.widgets.theme import Theme
from branchscope.widgets.time_axis import GUTTER, RIGHT_MARGIN, TimePanel, safe_paint
from branchscope.widgets.timeline_painter import RULER_H


class TimelineItem(pg.GraphicsObject):
    """The lanes: every event of every visible row, in one item (`timeline_painter`'s docstring).

    It lives in the view's ViewBox, in the ViewBox's own pixels (not its data coordinates: the
    raster is made for exact pixel columns of the axis window), and paints through the view's
    painter, which works in widget pixels. A left click goes to the view's `on_click`.
    """

    def __init__(self, view: TimePanel):
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
        self.view.painter.paint_lanes(p)

    def mouseClickEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph API)
        """Left click selects (pyqtgraph tells a click from a drag); right click is the ViewBox's."""
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        ev.accept()
        if not ev.double():
            self.view.on_click(self.view.mapFromScene(ev.scenePos()))


class _Band(pg.GraphicsWidget):
    """A column of the view's grid as tall as the lanes and `width` pixels wide."""

    def __init__(self, view: TimePanel, width: int):
        super().__init__()
        self.view = view
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setFixedWidth(width)
        self.setMinimumHeight(0)


class GutterItem(_Band):
    """The lane labels left of the lanes (drawn by the view's painter, cached in an image)."""

    def __init__(self, view: TimePanel):
        super().__init__(view, GUTTER)

    @safe_paint
    def paint(self, p: QPainter, *args) -> None:
        p.translate(0, -RULER_H)  # widget pixels
        self.view.painter.paint_gutter(p)


class ScrollItem(_Band):
    """The scroll bar in the right margin (painted: a QScrollBar child would be repainted, at a
    cost of milliseconds, with every frame of the timeline). The view takes its mouse events."""

    def __init__(self, view: TimePanel):
        super().__init__(view, RIGHT_MARGIN)

    def paint(self, p: QPainter, *args) -> None:
        self.view.painter.paint_scroll_bar(p, self.rect())


class Ruler(TimeAxisItem):
    """The time ruler over the lanes: pyqtgraph's axis with the timeline's ticks, on its band."""

    def __init__(self, view: TimePanel):
        super().__init__("top")
        self.view = view

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        super().apply_theme(colors, font)
        self.setTickPen(pg.mkPen(colors.muted))

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph API)
        if not self.view.has_data():  # before the first trace: no ticks over nothing ("0.2 ns")
            return []
        return super().tickValues(minVal, maxVal, size)

    def paint(self, p, opt, widget):
        rect = self.mapRectFromParent(self.geometry())
        p.fillRect(rect, self.view.painter.look.ruler_bg)
        super().paint(p, opt, widget)
