"""The ranks of a job at a glance: one strip per rank, to find the slow and the heavy one.

Three plots share one rank axis (rank 0 at the top): a heat strip of ranks × steps (each cell the
rank's time for that step, one colour scale shown by the colour bar), each rank's busy share and
each rank's memory peak (bars). Each step's straggler (the slowest rank of that step, where it is
slower than the step's median) is outlined in red; the rank of the highest memory peak has its bar
in red and a ▲. Hovering says the rank, the step, its time and its excess over the step's median
(or the rank's busy share or peak); a click on any strip emits `rankActivated(rank)`.

Eight ranks read row by row (their labels on the axis); hundreds compress into the same height
(every k-th rank labelled) and the wheel zooms the rank axis, a drag scrolls it. The figures are
`profiling.trace.ranks.RankFigures`; nothing here reads events. A large job's overview shows
every rank while only some ranks' events are loaded (`profiling.trace.rank_job`): those are
labelled ● and the others say a click loads them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.ranks import RankFigures, rank_figures, worst_straggler
from branchscope.widgets.theme import theme
from branchscope.widgets.units import format_bytes, format_duration

COLORMAP = "viridis"
STRAGGLER_HEX = "#e15759"
BAR_HEX = "#4e79a7"
#: A rank's row height (px) while the ranks fit; more ranks than fit in `MAX_HEIGHT` compress.
ROW_PX = 20
MIN_HEIGHT = 150
MAX_HEIGHT = 330
#: The overview's height less its strips' (caption, titles, the step axis).
CHROME_PX = 80
#: A rank label's least room on the rank axis (px): every k-th rank is labelled when rows are thinner.
LABEL_PX = 15


def _ms(ns: float) -> str:
    return format_duration(int(round(ns)))


class RankOverview(QWidget):
    """See the module docstring. `set_trace(trace)` shows its ranks (hidden for fewer than two)."""

    rankActivated = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.PlainText)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(theme().background)
        self.graphics.setToolTip("")
        self.graphics.scene().sigMouseClicked.connect(self._on_click)
        self.graphics.scene().sigMouseMoved.connect(self._on_move)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addWidget(self.caption)
        layout.addWidget(self.graphics, 1)
        self.figures: RankFigures | None = None
        #: The ranks whose events are loaded, None for all (see `set_figures`).
        self.loaded: frozenset[int] | None = None
        self.heat = self._plot(0, "step time per step")
        self.busy_plot = self._plot(2, "busy")
        self.memory_plot = self._plot(3, "memory peak")
        self.busy_plot.setYLink(self.heat)
        self.memory_plot.setYLink(self.heat)
        for p in (self.busy_plot, self.memory_plot):
            p.hideAxis("left")
        self.graphics.ci.layout.setColumnStretchFactor(0, 6)
        self.graphics.ci.layout.setColumnStretchFactor(2, 1)
        self.graphics.ci.layout.setColumnStretchFactor(3, 1)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.heat.addItem(self.image)
        self.color_bar = pg.ColorBarItem(colorMap=pg.colormap.get(COLORMAP), interactive=False, width=12)
        self.color_bar.setImageItem(self.image)
        self.graphics.addItem(self.color_bar, row=0, col=1)
        self.busy_bars: pg.BarGraphItem | None = None
        self.memory_bars: pg.BarGraphItem | None = None
        #: The outlines of the stragglers' cells, and the heaviest rank's mark.
        self.straggler_marks: list[QGraphicsRectItem] = []
        self.heavy_mark: pg.TextItem | None = None
        self.hide()

    def _plot(self, col: int, title: str) -> pg.PlotItem:
        plot = self.graphics.addPlot(row=0, col=col)
        plot.setTitle(title, size="9pt")
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.getViewBox().setMouseEnabled(x=False, y=True)
        plot.getViewBox().invertY(True)
        plot.getAxis("bottom").setHeight(30)
        # Ticks are chosen here to fit (every k-th rank, a few values): draw every one given.
        for side in ("left", "bottom"):
            plot.getAxis(side).setStyle(textFillLimits=[(0, 1.0)], autoExpandTextSpace=True)
        return plot

    # ---- showing ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        """Show the ranks of `trace` (a merged job); hidden for a trace of fewer than two ranks."""
        figures = None if trace is None or len({ln.rank for ln in trace.lanes} - {None}) < 2 else rank_figures(trace)
        self.set_figures(figures)

    def set_figures(self, figures: RankFigures | None, loaded: Collection[int] | None = None) -> None:
        """Show `figures` (hidden for fewer than two ranks); `loaded`: the ranks whose events are
        loaded (a large job's ranks in view, `rank_job`), None when every rank's are."""
        self._clear()
        self.figures = figures if figures is not None and len(figures.ranks) >= 2 else None
        self.loaded = None if loaded is None else frozenset(loaded)
        if self.figures is None:
            self.hide()
            return
        f = self.figures
        n, steps = len(f.ranks), len(f.steps)
        times = np.where(f.step_ns >= 0, f.step_ns / 1e6, np.nan) if steps else np.full((n, 1), np.nan)
        finite = times[np.isfinite(times)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if hi <= lo:
            hi = lo + max(lo * 0.01, 1e-6)
        self.image.setImage(times, levels=(lo, hi), autoLevels=False)
        self.image.setRect(QRectF(0, 0, times.shape[1], n))
        self.color_bar.setLevels((lo, hi))
        self.color_bar.axis.setLabel("ms")
        pen = pg.mkPen(STRAGGLER_HEX, width=2)
        pen.setCosmetic(True)
        for s, (row, col) in zip(f.stragglers, f.straggler_cells()):
            if s.excess_ns <= 0:
                continue
            mark = QGraphicsRectItem(QRectF(col + 0.04, row + 0.06, 0.92, 0.88))
            mark.setPen(pen)
            mark.setZValue(10)
            self.heat.addItem(mark)
            self.straggler_marks.append(mark)
        ys = np.arange(n) + 0.5
        self.busy_bars = pg.BarGraphItem(x0=0, y=ys, height=0.8, width=f.busy * 100, brush=BAR_HEX, pen=None)
        self.busy_plot.addItem(self.busy_bars)
        self.busy_plot.setXRange(0, 100, padding=0)
        peaks = np.maximum(f.memory_peak, 0) / 2**20
        brushes = [pg.mkBrush(BAR_HEX) for _ in range(n)]
        heavy_row = None if f.heaviest is None else f.row(f.heaviest.rank)
        if heavy_row is not None:
            brushes[heavy_row] = pg.mkBrush(STRAGGLER_HEX)
            self.heavy_mark = pg.TextItem("▲", color=STRAGGLER_HEX, anchor=(0, 0.5))
            self.heavy_mark.setPos(float(peaks[heavy_row]), heavy_row + 0.5)
            self.memory_plot.addItem(self.heavy_mark)
        self.memory_bars = pg.BarGraphItem(x0=0, y=ys, height=0.8, width=peaks, brushes=brushes, pen=None)
        self.memory_plot.addItem(self.memory_bars)
        self.busy_plot.getAxis("bottom").setTicks([[(50, "50%")]])
        self.busy_plot.getAxis("bottom").setLabel("")
        top = float(peaks.max())
        if top > 0:
            self.memory_plot.setXRange(0, top * 1.25, padding=0)
            self.memory_plot.getAxis("bottom").setTicks([[(top, format_bytes(top * 2**20))]])
        else:
            self.memory_plot.setXRange(0, 1, padding=0)
            self.memory_plot.getAxis("bottom").setTicks([[(0.5, "no memory events")]])
        self._ticks()
        self.heat.getViewBox().setLimits(yMin=0, yMax=n, xMin=0, xMax=max(steps, 1))
        self.heat.setRange(xRange=(0, max(steps, 1)), yRange=(0, n), padding=0)
        self.caption.setText(self._caption())
        self.setMaximumHeight(self.planned_height())
        self.show()

    def planned_height(self) -> int:
        """The overview's height: `ROW_PX` a rank while that fits in `MAX_HEIGHT`, else compressed."""
        n = 0 if self.figures is None else len(self.figures.ranks)
        return max(MIN_HEIGHT, min(MAX_HEIGHT, CHROME_PX + ROW_PX * n))

    def _ticks(self) -> None:
        assert self.figures is not None
        f = self.figures
        rows_px = (self.planned_height() - CHROME_PX) / len(f.ranks)
        every = max(1, int(np.ceil(LABEL_PX / max(rows_px, 1e-3))))
        labels = self._loaded_labels(every)
        near = {round(y - 0.5) + d for y, _ in labels for d in range(1 - every, every)}
        labels += [
            (k + 0.5, f"rank {r}" if every == 1 else str(r))
            for k, r in enumerate(f.ranks)
            if k % every == 0 and k not in near
        ]
        labels.sort()
        left = self.heat.getAxis("left")
        left.setTicks([labels])
        # Wide enough for its longest label now (pyqtgraph widens it only after a paint that drops them).
        metrics = QFontMetrics(left.style["tickFont"] or self.font())
        left.setWidth(max(metrics.horizontalAdvance(text) for _, text in labels) + 14)
        step_every = max(1, int(np.ceil(len(f.steps) / 12)))
        self.heat.getAxis("bottom").setTicks(
            [[(k + 0.5, _short(s)) for k, s in enumerate(f.steps) if k % step_every == 0]]
        )

    def _loaded_labels(self, every: int) -> list[tuple[float, str]]:
        """The ranks whose events are loaded, each labelled ● (those closer than `every` rows to
        the one before share its label: "● 0, 1"); the other ranks are labelled where these are not."""
        assert self.figures is not None
        f = self.figures
        rows = [k for k, r in enumerate(f.ranks) if self.loaded is not None and r in self.loaded]
        groups: list[list[int]] = []
        for k in rows:
            if groups and k - groups[-1][-1] < every:
                groups[-1].append(k)
            else:
                groups.append([k])
        word = "rank " if every == 1 else ""
        return [(g[0] + 0.5, "● " + word + ", ".join(str(f.ranks[k]) for k in g)) for g in groups]

    def _caption(self) -> str:
        assert self.figures is not None
        f = self.figures
        parts = [f"{len(f.ranks)} ranks, {len(f.steps)} steps"]
        worst = worst_straggler(f)
        if worst is not None:
            parts.append(
                f"stragglers outlined (the slowest rank of each step); worst: rank {worst.rank} in {worst.step}, "
                f"{_ms(worst.step_ns)}, +{_ms(worst.excess_ns)} over the median"
            )
        if f.heaviest is not None:
            h = f.heaviest
            parts.append(
                f"▲ heaviest memory: rank {h.rank} ({h.device}), {format_bytes(h.peak_bytes)}, "
                f"+{format_bytes(int(h.excess_bytes))} over the median peak"
            )
        if self.loaded is None:
            parts.append("click a rank to show its lanes")
        else:
            shown = ", ".join(str(r) for r in sorted(self.loaded))
            parts.append(
                f"the events of {len(self.loaded)} of {len(f.ranks)} ranks loaded (● {shown}): "
                "click a rank to show its lanes, loading them if they are not"
            )
        return " · ".join(parts)

    def _clear(self) -> None:
        for mark in self.straggler_marks:
            self.heat.removeItem(mark)
        self.straggler_marks = []
        for plot, item in ((self.busy_plot, self.busy_bars), (self.memory_plot, self.memory_bars),
                           (self.memory_plot, self.heavy_mark)):  # fmt: skip
            if item is not None:
                plot.removeItem(item)
        self.busy_bars = self.memory_bars = None
        self.heavy_mark = None

    # ---- where ------------------------------------------------------------------------------
    def cell_at_scene(self, pos: QPointF) -> tuple[str, int, int] | None:
        """(plot "heat" | "busy" | "memory", row, step column) under a scene point, or None."""
        if self.figures is None:
            return None
        for name, plot in (("heat", self.heat), ("busy", self.busy_plot), ("memory", self.memory_plot)):
            vb = plot.getViewBox()
            if not vb.sceneBoundingRect().contains(pos):
                continue
            p = vb.mapSceneToView(pos)
            row, col = int(np.floor(p.y())), int(np.floor(p.x()))
            if not 0 <= row < len(self.figures.ranks):
                return None
            if name == "heat" and not 0 <= col < len(self.figures.steps):
                return None
            return name, row, col
        return None

    def rank_point(self, rank: int, step: int = 0) -> QPoint:
        """Where rank `rank`'s cell of step column `step` is, in the graphics view's viewport."""
        assert self.figures is not None
        row = self.figures.row(rank)
        scene = self.heat.getViewBox().mapViewToScene(QPointF(step + 0.5, row + 0.5))
        return self.graphics.mapFromScene(scene)

    def describe(self, where: tuple[str, int, int]) -> str:
        """What hovering `where` (see `cell_at_scene`) says."""
        assert self.figures is not None
        f = self.figures
        name, row, col = where
        text = self._figure_text(name, row, col)
        if self.loaded is not None and f.ranks[row] not in self.loaded:
            text += " · its events not loaded: click to load them"
        return text

    def _figure_text(self, name: str, row: int, col: int) -> str:
        f = self.figures
        assert f is not None
        rank = f.ranks[row]
        host = f" ({f.hosts[row]})" if f.hosts[row] else ""
        if name == "busy":
            return f"rank {rank}{host}: busy {f.busy[row] * 100:.1f}% of its span ({f.busy_of[row]})"
        if name == "memory":
            if f.memory_peak[row] < 0:
                return f"rank {rank}{host}: no memory events"
            text = f"rank {rank}{host}: memory peak {format_bytes(int(f.memory_peak[row]))}"
            if f.heaviest is not None and f.heaviest.rank == rank:
                text += f", the heaviest: +{format_bytes(int(f.heaviest.excess_bytes))} over the median peak"
            return text
        t = int(f.step_ns[row, col])
        if t < 0:
            return f"rank {rank}{host}, {f.steps[col]}: no such step"
        excess = float(f.excess_ns()[row, col])
        sign = "+" if excess >= 0 else "−"
        text = f"rank {rank}{host}, {f.steps[col]}: {_ms(t)}, {sign}{_ms(abs(excess))} against the step's median"
        if any(s.rank == rank and s.step == f.steps[col] and s.excess_ns > 0 for s in f.stragglers):
            text += " (the slowest rank of this step)"
        return text

    # ---- mouse ------------------------------------------------------------------------------
    def _on_move(self, pos: Any) -> None:
        where = self.cell_at_scene(pos)
        self.graphics.setToolTip("" if where is None else self.describe(where))

    def _on_click(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self.figures is None:
            return
        where = self.cell_at_scene(event.scenePos())
        if where is None:
            return
        event.accept()
        self.rankActivated.emit(self.figures.ranks[where[1]])


def _short(step: str) -> str:
    """'ProfilerStep#12' → '12', 'step 3' → '3'."""
    tail = step.rsplit("#", 1)[-1].rsplit(" ", 1)[-1]
    return tail if tail.isdigit() else step
