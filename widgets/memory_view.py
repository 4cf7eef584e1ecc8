"""Memory per device: one allocated-bytes curve per device, one under another on the shared time
axis, each with its own scale (bytes, ticked in KiB/MiB/GiB) and its peak marked.

Devices get their own band rather than one shared plot because their scales differ by orders of
magnitude (a few MB on the CPU, GBs on a GPU); lined up on one time axis they still read side by
side, and an imbalance between GPUs shows as one peak label far above the others. Each band is a
pyqtgraph plot (`widgets.charts`) whose curve is a `StepSeriesItem` reduced to one value per pixel
column, the column's maximum, so no peak ever disappears. Zoom, pan, ticks and export (PNG, SVG,
CSV: right click, Export…) are pyqtgraph's.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from branchscope.profiling.trace.model import MemorySeries, Trace
from branchscope.widgets.charts import BytesAxisItem, ChartPanel, GutterText, StepSeriesItem, swatch
from branchscope.widgets.series import column_max_step
from branchscope.widgets.theme import theme
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.units import format_bytes, format_offset

DEVICE_COLORS = ["#4e79a7", "#59a14f", "#e15759", "#b07aa1", "#f28e2b", "#76b7b2", "#9c755f", "#edc948"]
BAND_MIN = 46
#: Pixels above a band's peak, for its label.
PEAK_HEADROOM = 20


class _Band:
    """One device: its plot, curve, peak marker and label."""

    def __init__(self, view: MemoryView, k: int, m: MemorySeries, start: int, shift: float):
        color = QColor(DEVICE_COLORS[k % len(DEVICE_COLORS)])
        fill = QColor(color)
        fill.setAlpha(70)
        self.series = m
        #: The series' times in ns from the trace's first event (exact in int64, then float).
        self.t = np.asarray(m.ts_ns - start, dtype=np.float64)
        total = np.asarray(m.total_bytes, dtype=np.float64)
        self.peak_t = float(int(m.peak_ts_ns) - start)
        self.plot = view.make_plot(BytesAxisItem(), f"memory {m.device}")
        self.gutter = GutterText(
            html=f"<b style='color:#1f2933'>{swatch(color, f'memory · {m.device}')}</b>"
            f"<br>peak {format_bytes(m.peak_bytes)}"
        )
        t = self.t
        self.curve = StepSeriesItem(
            lambda e: column_max_step(t, total, e), (t, total), name=f"{m.device} allocated bytes",
            brush=fill, pen=pg.mkPen(color, width=1.5), y_max=float(max(m.peak_bytes, 1)), shift=shift,
        )  # fmt: skip
        # The peak: a triangle pointing at it and its size, beside it (text: it exports to SVG).
        self._mark = f"<span style='color:{color.name()}'>▼</span>"
        self._text = f"peak {format_bytes(m.peak_bytes)}"
        self.label = pg.TextItem(anchor=(0, 1), color=theme().text)
        self.label.setZValue(5)
        self.plot.addItem(self.curve)
        self.plot.addItem(self.label, ignoreBounds=True)
        self._right: bool | None = None
        self.set_shift(shift)
        view.set_y_top(self.plot, float(max(m.peak_bytes, 1)), PEAK_HEADROOM)

    def set_shift(self, shift: float) -> None:
        self.curve.set_shift(shift)
        self.label.setPos(self.peak_t + shift, float(self.series.peak_bytes))

    def place_label(self) -> None:
        """The triangle over the peak, its size right of it, or left where it would not fit
        before the band's end."""
        vb = self.plot.vb
        lo, hi = vb.viewRange()[0]
        x = (self.label.pos().x() - lo) / (hi - lo) * vb.width() if hi > lo else 0.0
        right = x + 8 + 7 * len(self._text) < vb.width()
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
    """Allocated memory over time per device (see the module docstring)."""

    title = "memory"

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.series: list[MemorySeries] = []
        self._bands: list[_Band] = []
        #: Where the trace's first event sits on the axis (ns).
        self._shift = 0.0
        self.empty_gutter = GutterText(html="<b style='color:#1f2933'>memory</b>")
        self.empty_plot = self.make_plot(BytesAxisItem(), "memory")
        self.axis.changed.connect(self._place_labels)
        self.setMinimumHeight(80)
        self.set_bands([(self.empty_gutter, self.empty_plot)])

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
        self._bands = []
        if trace is not None:
            self.origin_ns, self._shift = self._origin(trace, origin_ns)
            # CPU first, then GPUs in index order.
            self.series = sorted(
                trace.memory, key=lambda m: (m.device != "cpu", _device_index(m.device), m.device)
            )
            start = int(trace.span()[0])
            self._bands = [_Band(self, k, m, start, self._shift) for k, m in enumerate(self.series)]
        if self._bands:
            self.set_bands([(b.gutter, b.plot) for b in self._bands])
            self.setMinimumHeight(80)
        elif trace is not None:  # the one-line message
            self.set_bands([])
            self.setMinimumHeight(28)
        else:
            self.set_bands([(self.empty_gutter, self.empty_plot)])
            self.setMinimumHeight(80)
        for b in self._bands:
            b.plot.setMinimumHeight(BAND_MIN)
            b.plot.vb.sigResized.connect(lambda _vb: self._place_labels())
        self._place_labels()
        self.updateGeometry()

    def _place_labels(self) -> None:
        for b in self._bands:
            b.place_label()

    def apply_theme(self) -> None:
        super().apply_theme()
        for b in getattr(self, "_bands", ()):  # none yet while the base class is being built
            b.label.setColor(theme().text)

    def has_data(self) -> bool:
        return bool(self.series)

    @property
    def no_data_text(self) -> str:
        return "no memory events in this trace (profile with profile_memory=True to see them)"

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(800, max(90, 12 + max(1, len(self.series)) * 64))

    def bands(self) -> list[QRectF]:
        """Each device's plot area, in widget pixels, top to bottom."""
        return self.band_rects()

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
            lines.append(f"{m.device}: {format_bytes(v)} allocated (peak {format_bytes(m.peak_bytes)})")
        return "\n".join(lines)


def _device_index(device: str) -> int:
    tail = device.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else -1
