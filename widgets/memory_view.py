"""Memory per device: one allocated-bytes curve per device, one under another on the shared time
axis, each with its own scale and its peak marked.

Devices get their own band rather than one shared plot because their scales differ by orders of
magnitude (a few MB on the CPU, GBs on a GPU); lined up on one time axis they still read side by
side, and an imbalance between GPUs shows as one peak label far above the others. The curve is
reduced to one value per pixel column (the column's maximum, so no peak ever disappears).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QPointF, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QToolTip, QWidget

from branchscope.profiling.trace.model import MemorySeries, Trace
from branchscope.widgets.paths import step_area_path, step_line_path
from branchscope.widgets.series import column_max_step
from branchscope.widgets.time_axis import GUTTER, TimeAxis, TimePanel
from branchscope.widgets.units import format_bytes, format_offset

DEVICE_COLORS = ["#4e79a7", "#59a14f", "#e15759", "#b07aa1", "#f28e2b", "#76b7b2", "#9c755f", "#edc948"]
BAND_MIN = 46


class MemoryView(TimePanel):
    """Allocated memory over time per device (see the module docstring)."""

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.series: list[MemorySeries] = []
        self.hover_text = ""
        self.setMinimumHeight(80)

    def set_trace(self, trace: Trace | None) -> None:
        self.trace = trace
        self.series = []
        if trace is not None:
            start, end = trace.span()
            if (self.axis.origin_ns, self.axis.span_ns) != (start, float(max(end - start, 1))):
                self.axis.set_bounds(start, end)
            # CPU first, then GPUs in index order.
            self.series = sorted(
                trace.memory, key=lambda m: (m.device != "cpu", _device_index(m.device), m.device)
            )
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(800, max(90, 12 + max(1, len(self.series)) * 64))

    def bands(self) -> list[QRect]:
        n = max(1, len(self.series))
        h = max(BAND_MIN, (self.height() - 8) // n)
        return [QRect(GUTTER, 4 + k * h, self.plot_width(), h) for k in range(n)]

    # ---- painting ---------------------------------------------------------------------------
    def _paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), QColor("#ffffff"))
        self.draw_grid(p, 0, self.height())
        bands = self.bands()
        w = self.plot_width()
        if self.trace is not None and self.series:
            edges = self.axis.lo + np.arange(w + 1, dtype=np.float64) * self.ns_per_px()
            x_edges = GUTTER + np.arange(w + 1, dtype=np.float64)
            origin = self.axis.origin_ns
            p.setClipRect(QRect(GUTTER, 0, w, self.height()))
            for k, (band, m) in enumerate(zip(bands, self.series, strict=False)):
                color = QColor(DEVICE_COLORS[k % len(DEVICE_COLORS)])
                peak = max(m.peak_bytes, 1)
                top_y = band.top() + 16
                scale = (band.bottom() - 3 - top_y) / peak

                def y_of(v, band=band, scale=scale):
                    return band.bottom() - 3 - np.asarray(v, dtype=np.float64) * scale

                t = np.asarray(m.ts_ns - origin, dtype=np.float64)
                col = column_max_step(t, m.total_bytes, edges)
                fill = QColor(color)
                fill.setAlpha(70)
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(fill)
                p.drawPath(step_area_path(x_edges, y_of(col), float(band.bottom() - 3)))
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(QPen(color, 1.5))
                p.drawPath(step_line_path(x_edges, y_of(col)))
                # the peak
                px = self.x_of(float(m.peak_ts_ns - origin))
                py = float(y_of(m.peak_bytes))
                if GUTTER - 8 <= px <= GUTTER + w + 8:
                    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
                    p.setPen(QPen(QColor("#1f2933"), 1))
                    p.setBrush(color)
                    tri = QPolygonF([QPointF(px, py - 1), QPointF(px - 5, py - 9), QPointF(px + 5, py - 9)])
                    p.drawPolygon(tri)
                    p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
                    label = f"peak {format_bytes(m.peak_bytes)}"
                    fm = QFontMetrics(self.font())
                    lw = fm.horizontalAdvance(label)
                    lx = int(px + 8) if px + 8 + lw < GUTTER + w - 4 else int(px - 8 - lw)
                    lx = max(lx, GUTTER + 2)
                    p.setPen(QColor("#1f2933"))
                    p.drawText(lx, int(band.top() + fm.ascent() + 1), label)
                p.setPen(QPen(QColor("#c9ced4"), 1))
                p.drawLine(band.left(), band.bottom() - 3, band.right(), band.bottom() - 3)
            p.setClipping(False)
        elif self.trace is not None:
            p.setPen(QColor("#77828d"))
            p.drawText(
                self.plot_rect().adjusted(8, 0, 0, 0),
                Qt.AlignmentFlag.AlignVCenter,
                "no memory events in this trace (profile with profile_memory=True to see them)",
            )
        self.draw_gutter(p, 0)
        self._paint_gutter(p, bands)

    def _paint_gutter(self, p: QPainter, bands: list[QRect]) -> None:
        bold = QFont(self.font())
        bold.setBold(True)
        fm = QFontMetrics(self.font())
        if not self.series:
            p.setFont(bold)
            p.setPen(QColor("#1f2933"))
            p.drawText(8, 4 + fm.height(), "memory")
            p.setFont(self.font())
            return
        for k, (band, m) in enumerate(zip(bands, self.series, strict=False)):
            if k:
                p.fillRect(0, band.top(), self.width(), 1, QColor("#e3e7ec"))
            color = QColor(DEVICE_COLORS[k % len(DEVICE_COLORS)])
            p.fillRect(8, band.top() + 5, 10, 10, color)
            p.setFont(bold)
            p.setPen(QColor("#1f2933"))
            p.drawText(22, band.top() + fm.ascent() + 3, f"memory · {m.device}")
            p.setFont(self.font())
            p.setPen(QColor("#5b6570"))
            if band.height() >= 2 * fm.height() + 6:
                p.drawText(
                    22, band.top() + fm.height() + fm.ascent() + 4, f"peak {format_bytes(m.peak_bytes)}"
                )

    # ---- hover ------------------------------------------------------------------------------
    def describe_at(self, t_rel: float) -> str:
        if self.trace is None:
            return ""
        lines = [f"at {format_offset(t_rel)}"]
        origin = self.axis.origin_ns
        for m in self.series:
            k = int(np.searchsorted(m.ts_ns, origin + t_rel, side="right")) - 1
            v = int(m.total_bytes[k]) if k >= 0 else 0
            lines.append(f"{m.device}: {format_bytes(v)} allocated (peak {format_bytes(m.peak_bytes)})")
        return "\n".join(lines)

    def on_hover(self, pos: QPoint) -> None:
        if pos.x() < GUTTER or pos.x() >= GUTTER + self.plot_width() or not self.series:
            self.hover_text = ""
            QToolTip.hideText()
            return
        self.hover_text = self.describe_at(self.t_of(pos.x()))
        QToolTip.showText(self.mapToGlobal(pos), self.hover_text, self)


def _device_index(device: str) -> int:
    tail = device.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else -1
