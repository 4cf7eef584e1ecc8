"""pyqtgraph building blocks of the charts drawn against the shared time axis (thread-pool usage,
CPU per thread, memory per device).

A chart is a `ChartPanel`: rows of bands, each a label in the gutter (`GutterText`) beside a
pyqtgraph `PlotItem` whose left axis is a value axis (threads, cores, bytes) and whose ViewBox is
linked to the `TimeAxis` (see `widgets.time_axis`). Axis ticks, zoom and pan, and export (the
ViewBox's context menu: Export… as PNG, SVG or CSV) are pyqtgraph's.

A series is a `StepSeriesItem`, modelled on pyqtgraph's own items (one item, many shapes, cached
bounds): it holds a step series and draws it as filled steps of one value per pixel column, the
column's maximum or its time-weighted mean (`widgets.series`), computed when it is painted, so a
frame costs what the chart's width costs however many points the series holds. Items stack: each
may sit on the one `below` it (the CPU chart's threads). The CSV exporter takes each item's
original series, not its pixel columns.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (registers the exporters of the context menu's Export…)
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsTextItem, QSizePolicy, QWidget

from branchscope.widgets.theme import LIGHT, Theme, theme
from branchscope.widgets.time_axis import (
    GUTTER,
    RIGHT_MARGIN,
    TimeAxis,
    TimePanel,
    TimeViewBox,
    safe_paint,
)
from branchscope.widgets.units import byte_ticks, time_ticks, time_unit, value_ticks

_CLOSE = re.compile(r"\s*[Zz]")


def _svg_export_reads_closed_paths() -> None:
    """Let pyqtgraph's SVG export read closed paths.

    pyqtgraph 0.14.0 reads every path Qt writes into an SVG as "x,y" pairs and fails on the "Z"
    Qt 6 writes at the end of a closed one (every ViewBox's clip path, any filled shape), so the
    context menu's Export… as SVG failed on any plot: pyqtgraph issue #3495, fixed upstream (pull
    request #3458) after 0.14.0. Until a release has the fix, the exporter's coordinate pass gets
    the paths without their "Z", and the "Z" is put back after it.
    """
    module = sys.modules["pyqtgraph.exporters.SVGExporter"]
    original = module.correctCoordinates
    if getattr(original, "closed_paths_read", False):
        return

    def correct_coordinates(node, defs, item, options):
        closed = []
        for path in node.getElementsByTagName("path"):
            d = path.getAttribute("d")
            if _CLOSE.search(d):
                path.setAttribute("d", _CLOSE.sub("", d))
                closed.append(path)
        original(node, defs, item, options)
        for path in closed:
            path.setAttribute("d", path.getAttribute("d").rstrip() + " Z")

    correct_coordinates.closed_paths_read = True
    module.correctCoordinates = correct_coordinates


_svg_export_reads_closed_paths()

#: Width of a chart's value axis (tick labels), at the right end of the gutter.
AXIS_W = 54
#: Width of the band labels, the rest of the gutter.
LABEL_W = GUTTER - AXIS_W
#: Pixels below a band's 0.
FOOT_PX = 6
#: Pixels kept under a gutter label's last line.
GUTTER_TEXT_FOOT = 4
#: Pixels between two ticks of a value axis, at least.
VALUE_TICK_PX = 28
AXIS_LINE = LIGHT.axis_line
TICK_TEXT = QColor("#77828d")


def style_axis(axis: pg.AxisItem, colors: Theme, font: QFont | None) -> None:
    """An axis in the palette's colours and the view's font (tick labels included)."""
    axis.setPen(pg.mkPen(colors.axis_line))
    axis.setTextPen(pg.mkPen(colors.muted if colors.dark else TICK_TEXT))
    if font is not None:
        axis.setStyle(tickFont=font)


class TimeAxisItem(pg.AxisItem):
    """Time ticks (ns on the axis) at the places `units.time_ticks` picks, labelled in s/ms/µs/ns:
    the timeline's ruler, and the grid lines of every chart (the same lines top to bottom)."""

    #: Pixels per tick at most (the timeline's ruler labels need this much room).
    TICK_PX = 110

    def __init__(self, orientation: str = "top", **kwargs):
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)
        style_axis(self, theme(), None)

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        style_axis(self, colors, font)

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph API)
        ticks, *_ = time_ticks(float(minVal), float(maxVal), max(2, int(size // self.TICK_PX)))
        step = ticks[1] - ticks[0] if len(ticks) > 1 else float(maxVal - minVal)
        return [(step, ticks)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph API)
        unit, unit_scale, decimals = time_unit(float(spacing) if spacing > 0 else 1.0)
        return [f"{v / unit_scale:.{decimals}f} {unit}" for v in values]


def grid_axis() -> TimeAxisItem:
    """A bottom axis that draws only the time grid across its ViewBox (and the band's base line)."""
    axis = TimeAxisItem("bottom")
    axis.setStyle(showValues=False, tickLength=0)
    axis.setHeight(0)
    axis.setGrid(110)
    return axis


class ValueAxisItem(pg.AxisItem):
    """A left value axis from 0: round ticks (`units.value_ticks`) at least VALUE_TICK_PX apart,
    labelled by `fmt`, on the gutter's colour."""

    def __init__(self, fmt: Callable[[float], str] = lambda v: f"{v:g}", integer: bool = False):
        super().__init__("left")
        self.fmt = fmt
        self.integer = integer
        #: Ticks stop here (the headroom above it is for labels).
        self.v_max: float | None = None
        self.enableAutoSIPrefix(False)
        self.setWidth(AXIS_W)
        self.setStyle(tickLength=-3, tickTextOffset=2)
        style_axis(self, theme(), None)

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        style_axis(self, colors, font)

    def ticks_upto(self, hi: float, n: int) -> list[float]:
        ticks = value_ticks(min(hi, self.v_max) if self.v_max is not None else hi, n)
        if self.integer:
            ticks = [v for v in ticks if float(v).is_integer()] or [0.0]
        return ticks

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph API)
        ticks = [v for v in self.ticks_upto(float(maxVal), max(1, int(size // VALUE_TICK_PX))) if v >= minVal]
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        return [(step, ticks)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph API)
        return [self.fmt(v) for v in values]

    def paint(self, p, opt, widget):
        p.fillRect(self.mapRectFromParent(self.geometry()), theme().gutter)
        super().paint(p, opt, widget)


class BytesAxisItem(ValueAxisItem):
    """Bytes, ticked at round numbers of KiB, MiB or GiB."""

    def __init__(self):
        super().__init__()

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph API)
        hi = min(float(maxVal), self.v_max) if self.v_max is not None else float(maxVal)
        ticks, _unit, _size = byte_ticks(hi, max(1, int(size // VALUE_TICK_PX)))
        ticks = [v for v in ticks if v >= minVal]
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        return [(step, ticks)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph API)
        top = max((abs(v) for v in values), default=0.0)
        _, unit, size = byte_ticks(top, 1)
        return [f"{v / size:g} {unit}" if v else "0" for v in values]


class GutterText(pg.GraphicsWidget):
    """A band's label in the gutter: rich text (Qt's layout, wrapped to the gutter), on its colour."""

    def __init__(self, width: int = LABEL_W, html: str = ""):
        super().__init__()
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setFixedWidth(width)
        self.setMinimumHeight(0)
        self.text = QGraphicsTextItem(self)
        self.text.document().setDocumentMargin(0)
        self.text.setPos(6, 4)
        self.text.setTextWidth(width - 8)
        self.set_html(html)

    def set_html(self, html: str) -> None:
        self.html = html
        colors = theme()
        # Fixed colours inside `html` (a bold title's) are the light palette's text: the palette's instead.
        html = html.replace(LIGHT.text.name(), colors.text.name())
        self.text.setDefaultTextColor(colors.muted)
        self.text.setHtml(f"<div style='color:{colors.muted.name()}'>{html}</div>")
        # The band is never shorter than its label: the legend's last line is not cut off.
        self.setMinimumHeight(self.text_height())

    def text_height(self) -> int:
        """The height the label's lines take, wrapped to the gutter (its font's), with its margins."""
        return int(self.text.pos().y() + self.text.boundingRect().height()) + GUTTER_TEXT_FOOT

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        self.text.setFont(font)
        self.set_html(self.html)

    def paint(self, p, *args):
        p.fillRect(self.rect(), theme().gutter)


class Strip(pg.GraphicsWidget):
    """The gutter-coloured strip right of a chart (where the timeline has its scroll bar)."""

    def __init__(self, width: int = RIGHT_MARGIN):
        super().__init__()
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setFixedWidth(width)
        self.setMinimumHeight(0)

    def paint(self, p, *args):
        p.fillRect(self.rect(), theme().gutter)


def swatch(color: QColor | str, text: str) -> str:
    """A coloured square and a label, as rich text for a `GutterText`."""
    return f"<span style='color:{QColor(color).name()}'>■</span>&nbsp;{text}"


class StepSeriesItem(pg.GraphicsObject):
    """A step series drawn as filled steps, one value per pixel column (see the module docstring).

    `columns(edges)` reduces the series to the columns [edges[k], edges[k+1]) (edges on the
    series' own time scale); the item sits on the axis at `shift` ns from there (the panel's trace
    start minus its origin). `series` is what the CSV exporter writes (time, value). `below` is
    the item this one is stacked on, if any: its columns are this one's base, unless it is hidden.
    """

    def __init__(
        self,
        columns: Callable[[np.ndarray], np.ndarray],
        series: tuple[np.ndarray, np.ndarray],
        *,
        name: str,
        brush: QColor | None = None,
        pen: QPen | None = None,
        below: StepSeriesItem | None = None,
        y_max: float = 1.0,
        shift: float = 0.0,
    ):
        super().__init__()
        self._columns = columns
        self._t = np.asarray(series[0], dtype=np.float64)
        self._v = np.asarray(series[1], dtype=np.float64)
        self._name = name
        self.brush = QBrush(brush) if brush is not None else None
        self.pen = pen
        self.below = below
        self.y_max = float(y_max)
        self.shift = float(shift)
        self._cache: tuple | None = None
        self._bounds: QRectF | None = None
        # What pyqtgraph's legend samples read.
        self.opts = {
            "pen": pen,
            "fillLevel": 0.0 if brush is not None else None,
            "fillBrush": self.brush,
            "antialias": False,
            "symbol": None,
        }

    # ---- pyqtgraph's plot-data interface (CSV export, auto range) --------------------------
    def implements(self, interface=None):
        ints = ["plotData"]
        return ints if interface is None else interface in ints

    def name(self) -> str:
        return self._name

    def getOriginalDataset(self):  # noqa: N802 (pyqtgraph API)
        """The series as held (time in ns on the axis, value), not its pixel columns."""
        return self._t + self.shift, self._v

    def getData(self):  # noqa: N802 (pyqtgraph API)
        return self.getOriginalDataset()

    def dataBounds(self, ax, frac=1.0, orthoRange=None):  # noqa: N802, N803 (pyqtgraph API)
        if self._t.size == 0:
            return (None, None)
        if ax == 0:
            return (float(self._t[0]) + self.shift, float(self._t[-1]) + self.shift)
        return (0.0, self.y_max)

    def set_shift(self, shift: float) -> None:
        self.shift = float(shift)
        self._cache = None
        self.update()

    # ---- the columns ------------------------------------------------------------------------
    def _chain(self) -> tuple:
        """What a column cache depends on besides the edges: who is shown below."""
        return (self.isVisible(), self.below._chain() if self.below is not None else ())

    def stacked(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(base, top) of every column of `edges` (ns on the axis), as drawn."""
        key = (float(edges[0]), float(edges[-1]), int(edges.size), self.shift, self._chain())
        if self._cache is None or self._cache[0] != key:
            base = self.below.stacked(edges)[1] if self.below is not None else np.zeros(edges.size - 1)
            if self.isVisible() and self._t.size:
                top = base + self._columns(edges - self.shift)
            else:
                top = base
            self._cache = (key, base, top)
        return self._cache[1], self._cache[2]

    # ---- painting ---------------------------------------------------------------------------
    def viewRangeChanged(self):  # noqa: N802 (pyqtgraph API)
        self.prepareGeometryChange()
        self._bounds = None

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt API)
        # What the view shows: after its last point a series keeps its last value, so it may
        # draw anywhere in the view (pyqtgraph's InfiniteLine does the same).
        if self._bounds is None:
            vb = self.getViewBox()
            self._bounds = QRectF(vb.viewRect()) if vb is not None else QRectF()
        return self._bounds

    @safe_paint
    def paint(self, p: QPainter, *args) -> None:
        vb = self.getViewBox()
        if vb is None or self._t.size == 0:
            return
        (lo, hi), _ = vb.viewRange()
        n = max(1, int(round(vb.width())))
        edges = lo + np.arange(n + 1, dtype=np.float64) * ((hi - lo) / n)
        base, top = self.stacked(edges)
        xs = np.repeat(edges, 2)[1:-1]  # x0 x1 x1 x2 x2 ...
        tops = np.repeat(top, 2)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if self.brush is not None:
            # Along the tops, then back along the base: a polygon (a filled path is written to SVG
            # with a closing "Z" that pyqtgraph's SVG exporter cannot read).
            polygon = pg.functions.arrayToQPolygonF(
                np.concatenate([xs, xs[::-1]]), np.concatenate([tops, np.repeat(base, 2)[::-1]])
            )
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(self.brush)
            p.drawPolygon(polygon)
        if self.pen is not None:
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(self.pen)
            p.drawPath(pg.arrayToQPath(xs, tops, connect="all"))


class ChartPanel(TimePanel):
    """Base of the charts: bands of (gutter label, plot) on the shared axis, the panel protocol's
    `origin_ns` and one-line message when there is nothing to show (see `widgets.panel`)."""

    #: The panel's name, bold in the gutter of its one-line message.
    title = ""

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        #: The instant of the shown trace drawn at the axis' 0 (trace clock, ns).
        self.origin_ns = 0
        self.plots: list[pg.PlotItem] = []
        #: The gutter labels of the bands shown, and the least height asked for (`hold_height`).
        self.gutters: list[GutterText] = []
        self._floor = 0

    # ---- bands ------------------------------------------------------------------------------
    def make_plot(self, left: ValueAxisItem, name: str) -> pg.PlotItem:
        """A plot for one band: `left` its value axis, a time grid, a ViewBox linked to the axis."""
        vb = TimeViewBox(name=None)
        plot = pg.PlotItem(viewBox=vb, axisItems={"left": left, "bottom": grid_axis()}, name=None)
        plot.setObjectName(name)
        plot.getAxis("bottom").setZValue(-1)  # the grid under the series
        plot.hideButtons()
        plot.setMenuEnabled(False, enableViewBoxMenu=True)
        plot.layout.setContentsMargins(0, 0, 0, 0)
        plot.setMinimumHeight(0)
        vb.sigResized.connect(self._fit_y)
        vb.view_all = lambda: (self.axis.reset(), self._fit_y(vb))
        return plot

    def set_bands(self, bands: list[tuple[GutterText, pg.PlotItem]]) -> None:
        """Show these bands, top to bottom (none: the panel's one-line message)."""
        self.grid.clear()
        self.unlink_view_boxes()
        self.plots = []
        self.gutters = [gutter for gutter, _plot in bands]
        for row, (gutter, plot) in enumerate(bands):
            self.grid.addItem(gutter, row, 0)
            self.grid.addItem(plot, row, 1)
            self.grid.addItem(Strip(), row, 2)
            self.link_view_box(plot.vb)
            self.plots.append(plot)
        self.hold_height(self._floor)
        # Emptied, the layout shrank its widget to nothing: give it the view again.
        self.resizeEvent(None)
        self.refresh()

    def labels_height(self) -> int:
        """The height the bands' gutter labels take, one above the other."""
        return sum(gutter.text_height() for gutter in self.gutters)

    def hold_height(self, floor: int) -> None:
        """The panel's minimum height: `floor`, or its bands' labels' where they need more (a
        legend is never cut: a row of runs compared scrolls instead, `widgets/workspace.py`)."""
        self._floor = floor
        self.setMinimumHeight(max(floor, self.labels_height() if self.gutters else 0))

    def apply_theme(self) -> None:
        """As `TimePanel.apply_theme`; the labels' font changed their height, so the minimum follows."""
        super().apply_theme()
        labels = self.labels_height() if getattr(self, "gutters", None) else 0
        if labels > self.minimumHeight():  # only raised: a subclass may have set more itself
            self.setMinimumHeight(labels)

    def set_y_top(self, plot: pg.PlotItem, v_max: float, headroom_px: int = 12) -> None:
        """Y from 0 to `v_max`, with `headroom_px` pixels above it (labels of the lines there) and
        FOOT_PX below 0 (room for the 0 tick's label)."""
        plot.vb.y_top = (max(float(v_max), 1e-12), headroom_px)
        left = plot.getAxis("left")
        if isinstance(left, ValueAxisItem):
            left.v_max = float(v_max)
        self._fit_y(plot.vb)

    def _fit_y(self, vb: pg.ViewBox) -> None:
        v_max, headroom = vb.y_top
        room = vb.height() - headroom - FOOT_PX
        if room > vb.height() / 2:
            per_px = v_max / room
            vb.setYRange(-FOOT_PX * per_px, v_max + headroom * per_px, padding=0)
        else:  # too low for margins
            vb.setYRange(0.0, v_max, padding=0)

    def band_rects(self) -> list[QRectF]:
        """Each band's plot area, in widget pixels."""
        return [self.mapFromScene(p.vb.sceneBoundingRect()).boundingRect() for p in self.plots]

    # ---- the panel protocol -----------------------------------------------------------------
    def has_data(self) -> bool:
        raise NotImplementedError

    @property
    def no_data_text(self) -> str:
        raise NotImplementedError

    def _origin(self, trace, origin_ns: int | None) -> tuple[int, float]:
        """(origin, shift): the panel's origin (trace clock) and where the trace's first event
        sits on the axis. Shown alone (no origin given), the trace's extent becomes the axis'."""
        start, end = trace.span()
        origin = int(start) if origin_ns is None else int(origin_ns)
        if origin_ns is None and not self.axis.covers(0.0, float(end - start)):
            self.axis.set_bounds(0.0, float(end - start))
        return origin, float(int(start) - origin)

    def _paint(self, p: QPainter) -> None:
        if getattr(self, "trace", None) is not None and not self.has_data():
            self.draw_message_line(p, self.title, self.no_data_text)


def line_label_opts(color: QColor | str) -> dict:
    """Options of an `InfiniteLine` label: at the right end, just above the line, on a white patch."""
    return {
        "position": 0.985,
        "color": QColor(color),
        "fill": pg.mkBrush(255, 255, 255, 225),
        "anchors": [(1, 1), (1, 1)],
        "movable": False,
    }
