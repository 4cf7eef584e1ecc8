"""Memory per device: one allocated-bytes curve per device, one band under another on the shared
time axis, devices of one kind on one scale, each device's peak and capacity as lines.

Devices of one kind (every GPU, across ranks too: "rank1/cuda:1" after a merge) get bands with
the same y range and the same byte ticks, so a peak twice as large is drawn twice as high and an
imbalance reads at a glance. Bands beat one overlaid plot here: four GPUs whose curves follow the
same step pattern would hide one another, and a band per device keeps each device's peak label,
capacity line and reserved memory legible. The CPU (any kind not a GPU's) keeps a scale of its
own, in a band whose height follows its values (a few bytes get a thin band, not one as tall as
a 6 GiB GPU's). Reserved memory, where the trace has it, is drawn behind the allocated curve,
lighter. A device's capacity is a line when it is within reach of the scale (`CAPACITY_NEAR`
times the kind's highest value; `scale_to_capacity` forces it), and said in the gutter otherwise.

Each band is a pyqtgraph plot (`widgets.charts`) whose curves are `StepSeriesItem`s reduced to one
value per pixel column, the column's maximum, so no peak ever disappears. Zoom, pan, ticks and
export (PNG, SVG, CSV: right click, Export…) are pyqtgraph's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QWidget

from branchscope.profiling.trace.memory_source import recorded_by, why_none
from branchscope.profiling.trace.model import MemorySeries, Trace
from branchscope.widgets.charts import (
    BytesAxisItem,
    ChartPanel,
    GutterText,
    StepSeriesItem,
    line_label_opts,
    swatch,
)
from branchscope.widgets.series import column_max_step
from branchscope.widgets.theme import Theme, theme
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.units import format_bytes, format_offset

DEVICE_COLORS = ["#4e79a7", "#59a14f", "#e15759", "#b07aa1", "#f28e2b", "#76b7b2", "#9c755f", "#edc948"]
#: A band's height at least, and the height a full band asks for.
BAND_MIN = 46
BAND_HEIGHT = 72
#: Pixels above a band's top value, for the peak's label.
PEAK_HEADROOM = 20
#: A capacity up to this many times a kind's highest value is drawn on its scale.
CAPACITY_NEAR = 1.5
#: The thinnest band of a kind with small values, as a share of the tallest kind's band.
MIN_SHARE = 0.4
#: Bands thinner than this share have a two-line label.
THIN_SHARE = 0.6
#: The capacity line's colour.
CAPACITY_COLOR = "#d9534f"


def device_kind(device: str) -> str:
    """The kind of a device: cuda for "cuda:1" and "rank1/cuda:1", cpu for "cpu"."""
    return device.rsplit("/", 1)[-1].split(":", 1)[0]


def device_rank(m: MemorySeries) -> int | None:
    """The series' rank: its own field where the trace model has one, else a "rankR/" prefix."""
    rank = getattr(m, "rank", None)
    if rank is not None:
        return int(rank)
    head, sep, _ = m.device.partition("/")
    return int(head[4:]) if sep and head.startswith("rank") and head[4:].isdigit() else None


def _device_index(device: str) -> int:
    tail = device.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else -1


#: Devices drawn at most: a job of hundreds of ranks draws its heaviest (the Memory tab lists all);
#: a band per device made opening 256 ranks take a minute, and no band of them could be read.
MAX_BANDS = 16


def heaviest(series: list[MemorySeries], n: int) -> list[MemorySeries]:
    """The `n` series of the largest peaks (all of them when they are fewer)."""
    if len(series) <= n:
        return list(series)
    return sorted(series, key=lambda m: -int(m.peak_bytes))[:n]


def device_order(m: MemorySeries) -> tuple:
    """CPU first, then each kind of device by rank and index."""
    kind = device_kind(m.device)
    rank = device_rank(m)
    return (kind != "cpu", kind, -1 if rank is None else rank, _device_index(m.device), m.device)


def reserved_of(m: MemorySeries) -> np.ndarray | None:
    """The reserved bytes after each event, where the trace has them (not all 0, as on a CPU)."""
    reserved = getattr(m, "reserved_bytes", None)
    if reserved is None or len(reserved) != m.events or not np.any(reserved):
        return None
    return np.asarray(reserved)


def capacity_of(m: MemorySeries) -> int | None:
    capacity = getattr(m, "capacity_bytes", None)
    return int(capacity) if capacity else None


@dataclass(frozen=True)
class KindScale:
    """The y range shared by the bands of one kind of device, and the height of those bands."""

    kind: str
    #: The range's top (bytes): the highest peak or reserved value, or a capacity near it.
    top: float
    #: Whether the capacity lines fall within the range.
    capacity_on_scale: bool
    #: The bands' height as a share of the tallest kind's (1 for the kind with the largest values).
    share: float


def kind_scales(series: list[MemorySeries], to_capacity: bool = False) -> dict[str, KindScale]:
    """One scale per kind of device (see the module docstring): every device of a kind up to the
    same top; a kind's bands as tall as log2 of its top against the largest kind's allows."""
    values: dict[str, list[float]] = {}
    capacities: dict[str, list[int]] = {}
    for m in series:
        kind = device_kind(m.device)
        reserved = reserved_of(m)
        values.setdefault(kind, []).append(float(m.peak_bytes))
        if reserved is not None and reserved.size:
            values[kind].append(float(reserved.max()))
        capacity = capacity_of(m)
        if capacity is not None:
            capacities.setdefault(kind, []).append(capacity)
    tops: dict[str, tuple[float, bool]] = {}
    for kind, vals in values.items():
        top = max(max(vals), 1.0)
        caps = capacities.get(kind, [])
        on = bool(caps) and (to_capacity or max(caps) <= CAPACITY_NEAR * top)
        tops[kind] = (max(top, float(max(caps))) if on else top, on)
    largest = max((top for top, _ in tops.values()), default=1.0)
    return {
        kind: KindScale(kind, top, on, min(1.0, max(MIN_SHARE, math.log2(1 + top) / math.log2(1 + largest))))
        for kind, (top, on) in tops.items()
    }


def _label_opts(color: QColor | str, colors: Theme) -> dict:
    """An `InfiniteLine` label on a patch of the palette's background."""
    opts = line_label_opts(color)
    fill = QColor(colors.background)
    fill.setAlpha(225)
    opts["fill"] = pg.mkBrush(fill)
    return opts


class _Band:
    """One device: its plot, curves (allocated; reserved where known), peak and capacity lines, label."""

    def __init__(self, view: MemoryView, k: int, m: MemorySeries, start: int, shift: float, scale: KindScale):
        color = QColor(DEVICE_COLORS[k % len(DEVICE_COLORS)])
        fill = QColor(color)
        fill.setAlpha(70)
        self.color = color
        self.view, self.k = view, k
        self.series = m
        self.scale = scale
        #: The series' times in ns from the trace's first event (exact in int64, then float).
        self.t = np.asarray(m.ts_ns - start, dtype=np.float64)
        total = np.asarray(m.total_bytes, dtype=np.float64)
        self.peak_t = float(int(m.peak_ts_ns) - start)
        self.reserved = reserved_of(m)
        self.capacity = capacity_of(m)
        self.plot = view.make_plot(BytesAxisItem(), f"memory {m.device}")
        self.gutter = GutterText(html=self._gutter_html())
        t = self.t
        self.reserved_curve: StepSeriesItem | None = None
        if self.reserved is not None:
            reserved = np.asarray(self.reserved, dtype=np.float64)
            light = QColor(color).lighter(140)
            light_fill = QColor(color)
            light_fill.setAlpha(28)
            self.reserved_curve = StepSeriesItem(
                lambda e: column_max_step(t, reserved, e), (t, reserved), name=f"{m.device} reserved bytes",
                brush=light_fill, pen=pg.mkPen(light, width=1, style=Qt.PenStyle.DashLine),
                y_max=float(max(reserved.max(), 1)), shift=shift,
            )  # fmt: skip
            self.reserved_curve.setZValue(0)
        self.curve = StepSeriesItem(
            lambda e: column_max_step(t, total, e), (t, total), name=f"{m.device} allocated bytes",
            brush=fill, pen=pg.mkPen(color, width=1.5), y_max=float(max(m.peak_bytes, 1)), shift=shift,
        )  # fmt: skip
        self.curve.setZValue(1)
        # allocated first: the first columns of the CSV export
        self.plot.addItem(self.curve)
        if self.reserved_curve is not None:
            self.plot.addItem(self.reserved_curve)
        # The peak: a dotted line across the band at its value, a triangle pointing at it and its
        # size beside it (text: it exports to SVG).
        self.peak_line = pg.InfiniteLine(
            pos=float(m.peak_bytes),
            angle=0,
            movable=False,
            pen=pg.mkPen(color, width=1, style=Qt.PenStyle.DotLine),
        )
        self.peak_line.setZValue(2)
        self.plot.addItem(self.peak_line, ignoreBounds=True)
        self.capacity_line: pg.InfiniteLine | None = None
        if self.capacity is not None and scale.capacity_on_scale:
            self.capacity_line = pg.InfiniteLine(
                pos=float(self.capacity), angle=0, movable=False,
                pen=pg.mkPen(CAPACITY_COLOR, width=1.5, style=Qt.PenStyle.DashLine),
                label=f"capacity {format_bytes(self.capacity)}", labelOpts=_label_opts(CAPACITY_COLOR, theme()),
            )  # fmt: skip
            self.capacity_line.setZValue(4)
            self.plot.addItem(self.capacity_line, ignoreBounds=True)
        self._mark = f"<span style='color:{color.name()}'>▼</span>"
        self._text = f"peak {format_bytes(m.peak_bytes)}"
        self.label = pg.TextItem(anchor=(0, 1), color=theme().text)
        self.label.setZValue(5)
        self.plot.addItem(self.label, ignoreBounds=True)
        self._right: bool | None = None
        self._font: QFont | None = None
        self.set_shift(shift)
        view.set_y_top(self.plot, scale.top, PEAK_HEADROOM)

    def _gutter_html(self) -> str:
        m = self.series
        title = f"<b style='color:#1f2933'>{swatch(self.color, f'memory · {m.device}')}</b>"
        peak = f"peak {format_bytes(m.peak_bytes)}"
        if self.k == 0 and self.view.left_out:  # a job of many devices: its heaviest drawn (the peak is in the plot)
            peak = f"the {len(self.view.series)} heaviest of {len(self.view.series) + self.view.left_out} devices"
        if self.capacity is not None:
            peak += f" ({100 * m.peak_bytes / self.capacity:.0f}%)"
        if self.scale.share < THIN_SHARE:  # a thin band: room for two lines
            return f"{title}<br>{peak}"
        lines = [title, peak]
        if self.reserved is not None and self.reserved.size:
            lines.append(f"reserved ≤ {format_bytes(int(self.reserved.max()))}")
        if self.capacity is not None and not self.scale.capacity_on_scale:
            lines.append(f"capacity {format_bytes(self.capacity)}")
        if self.view.trace is not None and recorded_by(self.view.trace):  # not torch.profiler's own
            lines.append("recorded on each thread<br>by torch's legacy profiler")
        return "<br>".join(lines)

    def set_shift(self, shift: float) -> None:
        self.curve.set_shift(shift)
        if self.reserved_curve is not None:
            self.reserved_curve.set_shift(shift)
        self.label.setPos(self.peak_t + shift, float(self.series.peak_bytes))

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        self.label.setColor(colors.text)
        self.label.textItem.setFont(font)
        self._font = font
        self._right = None  # re-anchored for the new text size
        if self.capacity_line is not None:
            self.capacity_line.label.fill = _label_opts(CAPACITY_COLOR, colors)["fill"]
            self.capacity_line.label.textItem.setFont(font)
            self.capacity_line.label.update()

    def place_label(self) -> None:
        """The triangle over the peak, its size right of it, or left where it would not fit
        before the band's end."""
        vb = self.plot.vb
        lo, hi = vb.viewRange()[0]
        x = (self.label.pos().x() - lo) / (hi - lo) * vb.width() if hi > lo else 0.0
        char_w = 7 if self._font is None else max(7, self._font.pointSizeF() * 0.75)
        right = x + 8 + char_w * len(self._text) < vb.width()
        if right != self._right:
            self._right = right
            if right:
                self.label.setHtml(f"{self._mark} {self._text}")
            else:
                self.label.setHtml(f"{self._text} {self._mark}")
        # the triangle's middle on the peak (the text box has a few pixels of margin)
        width = self.label.boundingRect().width()
        edge = 9.0 / max(width, 1.0)
        self.label.setAnchor((edge, 0.92) if right else (1.0 - edge, 0.92))


class MemoryView(ChartPanel):
    """Allocated (and reserved) memory over time per device (see the module docstring)."""

    title = "memory"

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.series: list[MemorySeries] = []
        self._bands: list[_Band] = []
        #: The scale of each kind of device shown ("cpu", "cuda", …).
        self.scales: dict[str, KindScale] = {}
        #: Whether every known capacity is on its kind's scale, however far above the peaks.
        self.scale_to_capacity = False
        #: Where the trace's first event sits on the axis (ns).
        self._shift = 0.0
        self.empty_gutter = GutterText(html="<b style='color:#1f2933'>memory</b>")
        self.empty_plot = self.make_plot(BytesAxisItem(), "memory")
        self.empty_plot.getAxis("left").setTicks([[], []])  # no trace yet: no values to tick ("0.8 B")
        self.axis.changed.connect(self._place_labels)
        self.set_bands([(self.empty_gutter, self.empty_plot)])
        self.hold_height(80)

    def set_axis(self, axis: TimeAxis) -> None:
        self.axis.changed.disconnect(self._place_labels)
        super().set_axis(axis)
        axis.changed.connect(self._place_labels)

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, trace: Trace) -> None:
        """Nothing to build ahead: the curves are reduced per frame from the trace's own series."""

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show `trace` with its instant `origin_ns` (default: its first event) at the axis' 0."""
        self.trace = trace
        self.series = []
        self.left_out = 0
        self._bands = []
        self.scales = {}
        if trace is not None:
            self.origin_ns, self._shift = self._origin(trace, origin_ns)
            self.series = heaviest(trace.memory, MAX_BANDS)
            self.left_out = len(trace.memory) - len(self.series)
            if not self.left_out:  # every device: in device order; "the N heaviest": heaviest first
                self.series.sort(key=device_order)
            self.scales = kind_scales(self.series, self.scale_to_capacity)
            start = int(trace.span()[0])
            self._bands = [
                _Band(self, k, m, start, self._shift, self.scales[device_kind(m.device)])
                for k, m in enumerate(self.series)
            ]
        if self._bands:
            self.set_bands([(b.gutter, b.plot) for b in self._bands])
            self.hold_height(80)
        elif trace is not None:  # the one-line message
            self.set_bands([])
            self.hold_height(28)
        else:
            self.set_bands([(self.empty_gutter, self.empty_plot)])
            self.hold_height(80)
        layout = self.grid.layout
        for row, b in enumerate(self._bands):
            # a kind of small values gets a thinner band: rows share the height by these factors
            layout.setRowStretchFactor(row, max(1, round(100 * b.scale.share)))
            b.plot.setMinimumHeight(round(BAND_MIN * b.scale.share))
            b.plot.setPreferredHeight(round(BAND_HEIGHT * b.scale.share))
            b.plot.vb.sigResized.connect(lambda _vb: self._place_labels())
        self.apply_theme()
        self._place_labels()
        self.updateGeometry()

    def set_scale_to_capacity(self, on: bool) -> None:
        """Put every known capacity on its kind's scale (True), or only those near the peaks."""
        if on != self.scale_to_capacity:
            self.scale_to_capacity = on
            if self.trace is not None:
                self.set_trace(self.trace, self.origin_ns)

    def _place_labels(self) -> None:
        for b in self._bands:
            b.place_label()

    def apply_theme(self) -> None:
        super().apply_theme()
        for b in getattr(self, "_bands", ()):  # none yet while the base class is being built
            b.apply_theme(theme(), self.font())
        if getattr(self, "_bands", None):
            self._place_labels()

    def has_data(self) -> bool:
        return bool(self.series)

    @property
    def no_data_text(self) -> str:
        return why_none(self.trace) if self.trace is not None else "no trace shown"

    def wanted_height(self) -> int:
        """The height the bands ask for: a full band per device of the largest kind, thinner ones
        for the others."""
        return 10 + sum(max(BAND_MIN, round(BAND_HEIGHT * b.scale.share)) for b in self._bands)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(800, max(90, self.wanted_height()))

    def bands(self) -> list[QRectF]:
        """Each device's plot area, in widget pixels, top to bottom."""
        return self.band_rects()

    def device_y(self, device: str, value: float) -> float:
        """Widget y of `value` bytes in `device`'s band."""
        k = next(k for k, m in enumerate(self.series) if m.device == device)
        vb = self._bands[k].plot.vb
        vb.updateMatrix()
        # pyqtgraph maps its scene 1:1 onto the widget (scene y is widget y, unrounded)
        return float(vb.mapViewToScene(pg.Point(0.0, float(value))).y())

    # ---- hover ------------------------------------------------------------------------------
    def describe_at(self, t_rel: float) -> str:
        if self.trace is None:
            return ""
        lines = [f"at {format_offset(t_rel)}"]
        t = t_rel - self._shift
        for b in self._bands:
            m = b.series
            k = int(np.searchsorted(b.t, t, side="right")) - 1
            v = int(m.total_bytes[k]) if k >= 0 else 0
            line = f"{m.device}: {format_bytes(v)} allocated"
            if b.reserved is not None:
                line += f", {format_bytes(int(b.reserved[k]) if k >= 0 else 0)} reserved"
            lines.append(f"{line} (peak {format_bytes(m.peak_bytes)})")
        return "\n".join(lines)
