"""Thread-pool usage: is the inter-op pool busy, and is the machine oversubscribed?

Two charts on the shared time axis:

1. the inter-op pool: how many pool threads are busy at each instant (`analyses.interop_occupancy`,
   a step series) against the pool's size, drawn as a dashed line;
2. CPU per OS thread: the runner samples every OS thread of the worker (OpenMP intra-op workers
   too, which torch.profiler never shows) and stores the samples as `cpu_sample` counters; here
   they are stacked, in cores, under a line at the machine's core count. Inter-op x intra-op
   threads above the core count is oversubscription: the stack hits the core line while threads
   wait, and the view says so in red.

Each frame reduces every series to one value per pixel column (`widgets.series`), so the cost does
not grow with the number of samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QToolTip, QWidget

from branchscope.profiling.trace.analyses import StepSeries, cpu_sample_tracks, interop_occupancy
from branchscope.profiling.trace.model import CounterTrack, Trace
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.widgets.machine import usable_cores
from branchscope.widgets.paths import step_area_path, step_line_path
from branchscope.widgets.series import (
    column_max_step,
    column_mean_step,
    column_window_mean,
    counter_as_steps,
    step_integral,
)
from branchscope.widgets.time_axis import GUTTER, TimeAxis, TimePanel
from branchscope.widgets.trace_cache import derived
from branchscope.widgets.units import format_duration, value_ticks

POOL_COLOR = QColor("#f28e2b")
CORE_LINE = QColor("#c0392b")
ROLE_COLORS = {
    "main": ["#4e79a7"],
    "interop": ["#f28e2b", "#f5a55a", "#d9761a", "#f8c08a", "#c06414"],
    "other": ["#59a14f", "#7fbf74", "#3f8a36", "#a3d39a", "#2f6e28", "#8cc084"],
}
ROLE_TITLES = {"main": "main thread", "interop": "inter-op pool", "other": "intra-op / other"}


#: The CPU chart averages each thread over this many of its sampling intervals (a moving window
#: centred on each pixel column, widened to the column when zoomed out). Single samples jitter
#: (the kernel counts CPU time in ticks, so one interval can read 0% and the next 200%), which made
#: the stack jagged and poke above the core line. Two intervals smooth that, while a sustained
#: load, and so oversubscription (the stack held at the core line for a branch's length), keeps its
#: height: an average keeps the CPU time. More (4 = 8 ms at the 2 ms sampler) blurred the steps.
SMOOTH_SAMPLES = 2


class _Thread:
    """One sampled OS thread, ready to be reduced per pixel column."""

    def __init__(self, track: CounterTrack, role: str, origin: int, color: QColor):
        self.track = track
        self.role = role
        self.color = color
        t, v = counter_as_steps(track.ts_ns - origin, np.asarray(track.values, dtype=np.float64) / 100.0)
        self.t = t
        self.v = v
        self.cum = step_integral(t, v)
        #: Smoothing window (ns): SMOOTH_SAMPLES of this thread's median sampling interval.
        self.window = SMOOTH_SAMPLES * (float(np.median(np.diff(t))) if t.size > 1 else 0.0)

    @property
    def label(self) -> str:
        return self.track.name or f"thread {self.track.tid}"

    def columns(self, edges: np.ndarray) -> np.ndarray:
        """Cores in use per column [edges[k], edges[k+1]), smoothed over `window`."""
        return column_window_mean(self.t, self.v, edges, self.window, self.cum)


@dataclass(frozen=True)
class _PoolData:
    """What the view derives from one trace (cached with it: see `widgets.trace_cache`)."""

    cores_known: bool
    cores: int
    interop: int | None
    intra: int | None
    occupancy: StepSeries
    occ_t: np.ndarray
    occ_v: np.ndarray
    occ_cum: np.ndarray
    threads: list[_Thread]
    cpu_ymax: float


def _pool_data(trace: Trace) -> _PoolData:
    start, end = trace.span()
    info = trace.run_info or RunInfo()
    cores_known = info.cores is not None
    cores = info.cores if info.cores is not None else usable_cores()
    interop, intra = info.interop, info.intra
    occ = interop_occupancy(trace)
    occ_t = np.asarray(occ.t_ns - start, dtype=np.float64)
    occ_v = np.asarray(occ.value, dtype=np.float64)
    roles = {ln.tid: ln.role for ln in trace.lanes if ln.kind == "cpu"}
    if info.main_tid is not None:
        roles[info.main_tid] = "main"
    for tid in info.interop_tids:
        roles[tid] = "interop"
    order = {"main": 0, "interop": 1, "autograd": 2, "other": 3}
    by_role: dict[str, int] = {}
    rows = []
    for tr in cpu_sample_tracks(trace):
        role = roles.get(tr.tid, "other")
        role = role if role in ("main", "interop") else "other"
        rows.append((order.get(role, 3), tr.tid, tr, role))
    threads = []
    for _, _, tr, role in sorted(rows, key=lambda r: (r[0], r[1])):
        shades = ROLE_COLORS[role]
        k = by_role.get(role, 0)
        by_role[role] = k + 1
        threads.append(_Thread(tr, role, start, QColor(shades[k % len(shades)])))
    cpu_ymax = float(cores)
    if threads:
        edges = np.linspace(0.0, float(end - start), 2001)
        total = sum(th.columns(edges) for th in threads)
        cpu_ymax = max(cpu_ymax, float(np.max(total)))
    return _PoolData(
        cores_known, cores, interop, intra, occ, occ_t, occ_v, step_integral(occ_t, occ_v), threads, cpu_ymax
    )


class PoolUsageView(TimePanel):
    """Busy inter-op pool threads and per-thread CPU use (see the module docstring)."""

    def __init__(self, parent: QWidget | None = None, axis: TimeAxis | None = None):
        super().__init__(parent, axis)
        self.trace: Trace | None = None
        self.occupancy: StepSeries | None = None
        self.threads: list[_Thread] = []
        self.cores = usable_cores()
        self.interop: int | None = None
        self.intra: int | None = None
        self.cpu_ymax = 1.0
        #: Whether the core count is the trace's own (runs made by branchscope say it).
        self.cores_known = False
        self.hover_text = ""
        self._occ_t = np.zeros(0)
        self._occ_v = np.zeros(0)
        self._occ_cum = np.zeros(0)
        self.setMinimumHeight(170)

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, trace: Trace) -> None:
        """Build what showing `trace` takes, kept with the trace; raises with the view unchanged."""
        derived(trace, "pool_usage", lambda: _pool_data(trace))

    def set_trace(self, trace: Trace | None) -> None:
        # Derived once per trace (re-selecting a run in the list must be instant), and first: if
        # it raises, the view still shows what it showed.
        d = derived(trace, "pool_usage", lambda: _pool_data(trace)) if trace is not None else None
        self.trace = trace
        self.threads = []
        self.occupancy = None
        if trace is None:
            self.update()
            return
        start, end = trace.span()
        if (self.axis.origin_ns, self.axis.span_ns) != (start, float(max(end - start, 1))):
            self.axis.set_bounds(start, end)
        self.cores_known, self.cores, self.interop, self.intra = d.cores_known, d.cores, d.interop, d.intra
        self.occupancy = d.occupancy
        self._occ_t, self._occ_v, self._occ_cum = d.occ_t, d.occ_v, d.occ_cum
        self.threads = list(d.threads)
        self.cpu_ymax = d.cpu_ymax
        self.update()

    def cpu_columns(self, edges: np.ndarray) -> list[np.ndarray]:
        """Each sampled thread's cores in use per column of `edges` (ns from the axis origin), as
        drawn: smoothed over SMOOTH_SAMPLES sampling intervals, stacked in `threads` order."""
        return [th.columns(edges) for th in self.threads]

    @property
    def max_busy_pool_threads(self) -> int:
        return int(self._occ_v.max()) if self._occ_v.size else 0

    @property
    def oversubscribed(self) -> bool:
        """Busy pool threads, each running ops on `intra` threads, wanted more threads than cores.

        A big pool that stays idle (a sequential run) oversubscribes nothing, so the count is the
        most pool threads seen busy at once (at least the main thread's one), not the pool's size.
        """
        if self.intra is None:
            return False
        return max(1, self.max_busy_pool_threads) * self.intra > self.cores

    # ---- layout -----------------------------------------------------------------------------
    def _bands(self) -> tuple[QRect, QRect]:
        h = self.height()
        top_h = int((h - 12) * 0.42)
        a = QRect(GUTTER, 6, self.plot_width(), top_h)
        b = QRect(GUTTER, 6 + top_h + 10, self.plot_width(), h - top_h - 22)
        return a, b

    # ---- painting ---------------------------------------------------------------------------
    def _paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), QColor("#ffffff"))
        self.draw_grid(p, 0, self.height())
        band_a, band_b = self._bands()
        p.fillRect(0, band_a.bottom() + 5, self.width(), 1, QColor("#e3e7ec"))
        if self.trace is not None:
            p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            w = self.plot_width()
            edges = self.axis.lo + np.arange(w + 1, dtype=np.float64) * self.ns_per_px()
            x_edges = GUTTER + np.arange(w + 1, dtype=np.float64)
            p.setClipRect(QRect(GUTTER, 0, w, self.height()))
            self._paint_pool(p, band_a, edges, x_edges)
            self._paint_cpu(p, band_b, edges, x_edges)
            p.setClipping(False)
        self.draw_gutter(p, 0)
        p.fillRect(0, band_a.bottom() + 5, GUTTER, 1, QColor("#d5dae0"))
        self._paint_gutter(p, band_a, band_b)

    def _y(self, band: QRect, v: np.ndarray | float, vmax: float):
        return band.bottom() - np.asarray(v, dtype=np.float64) / vmax * (band.height() - 12)

    def _paint_pool(self, p: QPainter, band: QRect, edges, x_edges) -> None:
        cap = int(self.occupancy.capacity) if self.occupancy is not None else 0
        vmax = max(cap, float(self._occ_v.max()) if self._occ_v.size else 0.0, 1.0)
        if self._occ_t.size > 1:
            peak = column_max_step(self._occ_t, self._occ_v, edges)
            mean = column_mean_step(self._occ_t, self._occ_v, edges, self._occ_cum)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(242, 142, 43, 90))
            p.drawPath(step_area_path(x_edges, self._y(band, peak, vmax), float(band.bottom())))
            p.setBrush(POOL_COLOR)
            p.drawPath(step_area_path(x_edges, self._y(band, mean, vmax), float(band.bottom())))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.setPen(QPen(QColor("#c9ced4"), 1))
        p.drawLine(band.left(), band.bottom(), band.right(), band.bottom())
        if cap > 0:
            y = int(self._y(band, cap, vmax))
            p.setPen(QPen(QColor("#9c4a00"), 1.5, Qt.PenStyle.DashLine))
            p.drawLine(band.left(), y, band.right(), y)
            self._line_label(p, band, y, f"pool size {cap}", QColor("#9c4a00"))
        else:
            p.setPen(QColor("#77828d"))
            p.drawText(
                band.adjusted(8, 0, 0, 0),
                Qt.AlignmentFlag.AlignVCenter,
                "no inter-op pool threads in this trace",
            )

    def _paint_cpu(self, p: QPainter, band: QRect, edges, x_edges) -> None:
        vmax = max(self.cpu_ymax * 1.05, 1.0)
        show_cores = bool(self.threads) or self.cores_known
        if self.threads:
            base = np.zeros(edges.size - 1)
            p.setPen(Qt.PenStyle.NoPen)
            for th, v in zip(self.threads, self.cpu_columns(edges), strict=True):
                top = base + v
                p.setBrush(th.color)
                p.drawPath(step_area_path(x_edges, self._y(band, top, vmax), self._y(band, base, vmax)))
                base = top
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.setPen(QPen(QColor("#2f3a44"), 1))
            p.drawPath(step_line_path(x_edges, self._y(band, base, vmax)))
        else:
            p.setPen(QColor("#77828d"))
            p.drawText(
                band.adjusted(8, 0, 0, 0),
                Qt.AlignmentFlag.AlignVCenter,
                "no CPU samples in this trace (runs made by branchscope have them)",
            )
        p.setPen(QPen(QColor("#c9ced4"), 1))
        p.drawLine(band.left(), band.bottom(), band.right(), band.bottom())
        if show_cores:
            y = int(self._y(band, self.cores, vmax))
            p.setPen(QPen(CORE_LINE, 1.5, Qt.PenStyle.DashLine))
            p.drawLine(band.left(), y, band.right(), y)
            self._line_label(p, band, y, f"{self.cores} cores", CORE_LINE)
        if self.oversubscribed:
            f = QFont(self.font())
            f.setBold(True)
            p.setFont(f)
            busy = max(1, self.max_busy_pool_threads)
            text = (
                f"oversubscribed: {busy} busy thread{'s' if busy > 1 else ''} × intra-op {self.intra} = "
                f"{busy * self.intra} threads on {self.cores} cores"
            )
            fm = QFontMetrics(f)
            r = QRect(band.left() + 6, band.top() + 2, fm.horizontalAdvance(text) + 10, fm.height() + 4)
            p.fillRect(r, QColor(255, 255, 255, 210))
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, text)
            p.setFont(self.font())

    def _paint_gutter(self, p: QPainter, band_a: QRect, band_b: QRect) -> None:
        bold = QFont(self.font())
        bold.setBold(True)
        fm = QFontMetrics(self.font())
        lh = fm.height()
        # band A
        p.setFont(bold)
        p.setPen(QColor("#1f2933"))
        p.drawText(8, band_a.top() + lh, "inter-op pool")
        p.setFont(self.font())
        p.setPen(QColor("#5b6570"))
        cap = self.occupancy.capacity if self.occupancy is not None else 0
        if cap > 0 or self.max_busy_pool_threads > 0:
            p.drawText(8, band_a.top() + 2 * lh + 2, f"busy threads, pool of {cap}")
            if band_a.height() >= 4 * lh + 8:
                p.fillRect(8, band_a.top() + 2 * lh + 8, 10, 10, POOL_COLOR)
                p.drawText(22, band_a.top() + 3 * lh + 4, "mean per pixel")
                p.fillRect(8, band_a.top() + 3 * lh + 8, 10, 10, QColor(242, 142, 43, 90))
                p.drawText(22, band_a.top() + 4 * lh + 4, "peak per pixel")
        else:
            p.drawText(8, band_a.top() + 2 * lh + 2, "no pool in this trace")
        vmax_a = max(cap, float(self._occ_v.max()) if self._occ_v.size else 0.0, 1.0)
        self._y_ticks(p, band_a, vmax_a, lambda v: f"{v:g}", integer=True)
        # band B
        p.setFont(bold)
        p.setPen(QColor("#1f2933"))
        p.drawText(8, band_b.top() + lh, "CPU per OS thread")
        p.setFont(self.font())
        p.setPen(QColor("#5b6570"))
        p.drawText(8, band_b.top() + 2 * lh + 2, "cores in use, stacked")
        y = band_b.top() + 2 * lh + 8
        smooth = max((th.window for th in self.threads), default=0.0)
        if smooth > 0 and band_b.height() >= 8 * lh:
            p.drawText(8, y + lh - 4, f"each a mean over {format_duration(float(f'{smooth:.2g}'))}")
            y += lh + 2
        roles = [r for r in ("main", "interop", "other") if any(th.role == r for th in self.threads)]
        for role in roles:
            n = sum(1 for th in self.threads if th.role == role)
            p.fillRect(8, y, 10, 10, QColor(ROLE_COLORS[role][0]))
            p.drawText(22, y + 10, f"{ROLE_TITLES[role]} ({n})")
            y += lh + 1
        if self.interop is not None and self.intra is not None:
            p.setPen(CORE_LINE if self.oversubscribed else QColor("#5b6570"))
            p.drawText(8, y + 10, f"{self.interop} × {self.intra} threads, {self.cores} cores")
        self._y_ticks(p, band_b, max(self.cpu_ymax * 1.05, 1.0), lambda v: f"{v:g}")

    def _line_label(self, p: QPainter, band: QRect, y: int, text: str, color: QColor) -> None:
        """A label on a white patch just above a horizontal line, at the band's right end."""
        fm = QFontMetrics(self.font())
        w = fm.horizontalAdvance(text) + 8
        r = QRect(band.right() - w - 4, max(band.top(), y - fm.height() - 1), w, fm.height())
        p.fillRect(r, QColor(255, 255, 255, 225))
        p.setPen(color)
        p.drawText(r, Qt.AlignmentFlag.AlignCenter, text)

    def _y_ticks(self, p: QPainter, band: QRect, vmax: float, fmt, integer: bool = False) -> None:
        p.setPen(QColor("#77828d"))
        fm = QFontMetrics(self.font())
        ticks = value_ticks(vmax, max(1, band.height() // 28))
        if integer:
            ticks = [v for v in ticks if float(v).is_integer()] or [0.0]
        for v in ticks:
            y = int(self._y(band, v, vmax))
            text = fmt(v)
            p.drawText(GUTTER - 6 - fm.horizontalAdvance(text), y + fm.ascent() // 2 - 1, text)
            p.drawLine(GUTTER - 4, y, GUTTER - 1, y)

    # ---- hover ------------------------------------------------------------------------------
    def describe_at(self, t_rel: float) -> str:
        """What the charts say at one instant (the tooltip's text)."""
        if self.trace is None:
            return ""
        lines = []
        if self.occupancy is not None and self._occ_t.size:
            k = int(np.searchsorted(self._occ_t, t_rel, side="right")) - 1
            busy = int(self._occ_v[k]) if k >= 0 else 0
            lines.append(f"inter-op pool: {busy} of {self.occupancy.capacity} threads busy")
        total = 0.0
        parts = []
        for th in self.threads:
            k = int(np.searchsorted(th.t, t_rel, side="right")) - 1
            v = float(th.v[k]) if 0 <= k < th.v.size else 0.0
            total += v
            if v >= 0.01:
                parts.append(f"  {th.label}: {v * 100:.0f}%")
        if self.threads:
            lines.append(f"CPU: {total:.2f} of {self.cores} cores")
            lines.extend(parts[:16])
        return "\n".join(lines)

    def on_hover(self, pos: QPoint) -> None:
        if pos.x() < GUTTER or pos.x() >= GUTTER + self.plot_width() or self.trace is None:
            self.hover_text = ""
            QToolTip.hideText()
            return
        self.hover_text = self.describe_at(self.t_of(pos.x()))
        QToolTip.showText(self.mapToGlobal(pos), self.hover_text, self)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(800, 210)
