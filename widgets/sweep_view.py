"""A thread sweep as heatmaps: one plot per mode, inter-op threads across, intra-op threads up.

Each cell's colour is its unprofiled median step time (one colour scale for every mode, shown by the
colour bar) and its value is written in it. The best cell (lowest unprofiled median) and every cell
within noise of it (sweep.json's `ties`, `SweepRecord.tied`) have a thick outline and a ★, and the
tied cells are painted the best's colour: cells within noise of each other are never painted as
opposite ends of the scale (their own medians stay written in them). A mode without an inter-op pool
(sequential: `any_interop`) ran once per intra-op count, and its cell spans every inter-op column
("any (no inter-op pool)"), so the same configuration never shows as two colours. Oversubscribed
cells (more threads computing than the machine's cores, as the mode's traits count them:
`ModeTraits.threads`, inter-op × intra-op with a pool, intra-op alone without one) are
hatched, as the legend line says; a failed cell is grey and says "failed" (its message in the
tooltip); a cell not run (yet) is blank; a cell the sweep skipped because its mode cannot run under
its Python (fork without TorchScript: sweep.json's cell "not run" with the mode's line as its
error, `CellRecord.skipped`) is cross-hatched and says "skipped", the line in its tooltip. A cell starved of cores (sweep.json's `starved`: a pass got,
or was left, fewer cores than its threads could use) says "starved" under its time, and why in its
tooltip: the advice never names it the winner. A cell that ran while other processes took more
than about a fifth of the cores (sweep.json's `busy`) says "busy" under its time: its time is not
comparable with a quiet run's. Both have a dashed orange outline and a ⚠; the legend says in a few
words what they mean, its tooltip and the cell's in full. A cell's words are short ("★ 22.7 ms",
"⚠ busy") so that they fit a cell of three modes' plots at a projector's 1280×720.

Clicking a finished cell emits `cellChosen(run folder)`; clicking a second one after it also emits
`compareRequested(first, second)` (Esc forgets the first); double-clicking one `cellActivated`. `set_sweep(sweep, folder)` takes
sweep.json (a `records.SweepRecord`, from `sources.read_sweep` or the sweep's events) and may be
called again as cells arrive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QKeyEvent, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.sweep_records import CELL_FOLDER, DONE, FAILED, NOT_RUN, SweepRecord
from branchscope.widgets.theme import theme

COLORMAP = "viridis"
#: What a starved cell's tooltip and the legend say of it.
STARVED_TEXT = "starved: got fewer cores than its threads could use (its CPU time or the machine's load)"
#: What a busy cell's tooltip and the legend say of it.
BUSY_TEXT = (
    "busy machine: other processes took more than about a fifth of the cores while it ran, "
    "so its time is not comparable with a quiet run's: re-run it on a quiet machine"
)
#: A cell's load mark, starved first (a starved cell is never the advice's winner, whatever the
#: load): its legend words and its tooltip's line.
LOAD_MARKS = {
    "starved": ("starved of cores", f"⚠ {STARVED_TEXT}: never the advice's winner"),
    "busy": ("ran on a busy machine", f"⚠ {BUSY_TEXT}"),
}


def load_mark(starved: bool | None, busy: bool | None) -> str | None:
    """A cell's key in `LOAD_MARKS`: "starved" over "busy"; None for neither."""
    return "starved" if starved else "busy" if busy else None


#: The dashed outline of a cell starved of cores or run on a busy machine.
LOAD_HEX = "#f28e2b"
FAILED_HEX = "#9aa0a6"
NOT_RUN_HEX = "#ffffff"
#: The cross-hatch of a cell skipped because its mode cannot run here.
SKIPPED_HEX = "#9aa0a6"
BEST_HEX = "#e15759"
SELECTED_HEX = "#1f77b4"
HATCH_HEX = "#202020"
#: Axis lines and labels on the light palette (a dark one takes its text colour: `_axis_hex`).
AXIS_HEX = "#404040"


def _axis_hex() -> str:
    colors = theme()
    return colors.text.name() if colors.dark else AXIS_HEX


@dataclass
class SweepCellView:
    """A cell as shown: its place in sweep.json and in its mode's plot (x: inter-op, y: intra-op slot)."""

    index: int
    mode: str
    interop: int
    intra: int
    x: int
    y: int
    status: str
    median_ms: float | None
    folder: Path | None
    tooltip: str
    oversubscribed: bool
    #: Inter-op columns it spans (every one for a cell of a mode without an inter-op pool).
    width: int = 1
    #: Within noise of the best (the best included).
    tied: bool = False
    #: The value its colour shows: its median, or the best's when tied.
    color_ms: float | None = None
    #: Its mode has no inter-op pool: it stands for every inter-op count (sweep.json's `any_interop`).
    any_interop: bool = False
    #: A pass of it got fewer cores than its threads could use (sweep.json's `starved`).
    starved: bool = False
    #: A pass of it ran on a busy machine (sweep.json's `busy`).
    busy: bool = False
    #: Why the sweep skipped it (its mode cannot run under the sweep's Python), else None.
    skipped: str | None = None

    @property
    def load_word(self) -> str | None:
        """What its label says under its time of the machine's load: "starved", "busy", None."""
        return load_mark(self.starved, self.busy)


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def _rect_in(view_box: pg.ViewBox, rect: QRectF) -> QGraphicsRectItem:
    """A rectangle in the view box's data coordinates, made as a child of its item group so that Qt
    alone owns it: one made free and added afterwards was deleted twice at exit (a segfault)."""
    return QGraphicsRectItem(rect, view_box.childGroup)


class SweepView(QWidget):
    """Heatmaps of a sweep (see the module docstring)."""

    #: A finished cell was clicked: its run folder.
    cellChosen = Signal(str)
    #: A finished cell was double-clicked: its run folder (the window opens its run).
    cellActivated = Signal(str)
    #: A second finished cell was clicked after a first: both run folders, first first.
    compareRequested = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.PlainText)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground(theme().background)
        self.graphics.scene().sigMouseClicked.connect(self._on_click)
        self.graphics.scene().sigMouseMoved.connect(self._on_move)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.legend)
        layout.addWidget(self.graphics, 1)
        self.colormap = pg.colormap.get(COLORMAP)
        self.cells: list[SweepCellView] = []
        #: mode -> its PlotItem, in the sweep's order of modes.
        self.plots: dict[str, pg.PlotItem] = {}
        self.images: dict[str, pg.ImageItem] = {}
        self.color_bar: pg.ColorBarItem | None = None
        self.best_marker: QGraphicsRectItem | None = None
        #: The outlines of the other cells within noise of the best.
        self.tie_markers: list[QGraphicsRectItem] = []
        self.oversubscribed_marks: list[QGraphicsRectItem] = []
        #: The dashed outlines of the cells starved of cores or run on a busy machine.
        self.load_marks: list[QGraphicsRectItem] = []
        #: The cross-hatches of the cells skipped because their mode cannot run here.
        self.skipped_marks: list[QGraphicsRectItem] = []
        self.levels: tuple[float, float] | None = None
        self._selected: SweepCellView | None = None
        self._selection_mark: QGraphicsRectItem | None = None
        self._sweep = SweepRecord()
        self._folder: Path | None = None
        self.set_sweep(SweepRecord(), None)

    # ---- content ----------------------------------------------------------------------------
    @property
    def sweep(self) -> SweepRecord:
        """The sweep shown (sweep.json)."""
        return self._sweep

    def set_sweep(self, sweep: SweepRecord, folder: str | Path | None) -> None:
        """Shows `sweep` (sweep.json), its cells' run folders under `folder`."""
        self._sweep = sweep
        self._folder = Path(folder) if folder is not None else None
        selected = self._selected.index if self._selected is not None else None
        self._build()
        self._selected = None
        if selected is not None:
            again = next((c for c in self.cells if c.index == selected and c.folder is not None), None)
            if again is not None:
                self._select(again)

    def _cells_of(self, sweep: SweepRecord) -> list[SweepCellView]:
        entries = [
            (i, c) for i, c in enumerate(sweep.cells)
            if c.mode and c.interop is not None and c.interop >= 1 and c.intra is not None and c.intra >= 1
        ]  # fmt: skip
        interops = sorted({c.interop for _, c in entries if c.interop is not None and not c.any_interop})
        if not interops:
            interops = sorted({c.interop for _, c in entries if c.interop is not None})
        intras = sorted({c.intra for _, c in entries if c.intra is not None})
        cores = sweep.cores if sweep.cores is not None and sweep.cores >= 1 else None
        tied = set(sweep.tied())
        best_ms = sweep.cells[sweep.best].unprofiled_median_ms if sweep.best in tied and sweep.best is not None else None
        cells = []
        for i, c in entries:
            assert c.mode is not None and c.interop is not None and c.intra is not None
            status = c.status if c.status in (DONE, FAILED) else NOT_RUN
            median = c.unprofiled_median_ms if status == DONE else None
            folder = (
                self._folder / c.run
                if status == DONE and self._folder is not None and c.run and CELL_FOLDER.fullmatch(c.run)
                else None
            )
            traits = traits_of(c.mode, c.mode_traits)
            # what the mode computes with (sequential I×J: J threads); the record's flag without cores
            over = traits.oversubscribes(c.interop, c.intra, cores) if cores is not None else c.oversubscribed
            lines = [f"{c.mode}: {c.interop} inter-op × {c.intra} intra-op threads"]
            if c.any_interop:
                lines.append("no inter-op pool: one run stands for every inter-op count")
            if status == DONE:
                lines.append(f"unprofiled median {median:.3f} ms" if median is not None else "no unprofiled median")
                if c.pass_medians_ms and len(c.pass_medians_ms) > 1:
                    lines.append("passes' medians " + ", ".join(f"{m:.3f}" for m in c.pass_medians_ms) + " ms")
                if i in tied and len(tied) > 1:
                    lines.append("within noise of the best" if i != sweep.best else "best; others within noise of it")
                spread = c.unprofiled_spread_ms
                if spread is not None and len(spread) == 4:
                    lines.append("spread {:.3f} · {:.3f}–{:.3f} · {:.3f} ms (min · quartiles · max)".format(*spread))
                if c.median_ms is not None:
                    lines.append(f"profiled median {c.median_ms:.3f} ms")
                mark = load_mark(c.starved, c.busy)
                if mark is not None:
                    lines.append(LOAD_MARKS[mark][1])
            elif status == FAILED:
                lines.append(f"failed: {c.error or 'no message'}")
            elif c.skipped:
                lines.append(f"skipped: {c.skipped}")
            else:
                lines.append("not run")
            if over:
                lines.append(f"oversubscribed: {traits.threads(c.interop, c.intra)} threads > {cores or '?'} cores")
            if folder is not None:
                lines.append(str(folder))
            spans = c.any_interop or c.interop not in interops  # the second: only such cells in the sweep
            is_tied = i in tied and median is not None
            cells.append(
                SweepCellView(
                    i, c.mode, c.interop, c.intra, 0 if spans else interops.index(c.interop), intras.index(c.intra),
                    status, median, folder, "\n".join(lines), over,
                    width=len(interops) if spans else 1, tied=is_tied,
                    color_ms=best_ms if is_tied and best_ms is not None else median, any_interop=c.any_interop,
                    starved=c.starved and status == DONE, busy=bool(c.busy) and status == DONE, skipped=c.skipped,
                )  # fmt: skip
            )
        return cells

    def _build(self) -> None:
        self.graphics.clear()
        self.plots, self.images = {}, {}
        self.color_bar, self.best_marker, self._selection_mark = None, None, None
        self.oversubscribed_marks, self.tie_markers, self.load_marks, self.skipped_marks = [], [], [], []
        self.cells = cells = self._cells_of(self._sweep)
        best_index = self._sweep.best
        best = next((c for c in cells if c.index == best_index and c.status == "done" and c.median_ms is not None), None)
        medians = [c.color_ms for c in cells if c.color_ms is not None]
        if medians:
            lo, hi = min(medians), max(medians)
            self.levels = (lo, hi if hi > lo else lo + max(abs(lo) * 0.01, 1e-3))
        else:
            self.levels = None
        interops = sorted({c.interop for c in cells if c.width == 1}) or sorted({c.interop for c in cells})
        intras = sorted({c.intra for c in cells})
        modes = [m for m in dict.fromkeys(c.mode for c in cells)]
        for col, mode in enumerate(modes):
            self._build_plot(col, mode, [c for c in cells if c.mode == mode], interops, intras, best)
        if self.levels is not None and self.images:
            bar = pg.ColorBarItem(
                values=self.levels, colorMap=self.colormap, interactive=False, rounding=0.001
            )
            bar.setImageItem(list(self.images.values()))
            bar.axis.setPen(pg.mkPen(_axis_hex()))
            bar.axis.setTextPen(pg.mkPen(_axis_hex()))
            bar.axis.setLabel("unprofiled median (ms)", color=_axis_hex())
            self.graphics.addItem(bar, row=0, col=len(modes))
            self.color_bar = bar
        self.legend.setText(self._legend_text(cells, best))
        self.legend.setToolTip(self._legend_tip(cells))

    def _build_plot(
        self,
        col: int,
        mode: str,
        cells: list[SweepCellView],
        interops: list[int],
        intras: list[int],
        best: SweepCellView | None,
    ) -> None:
        plot = self.graphics.addPlot(row=0, col=col, title=f"<span style='color:{_axis_hex()}'>{mode}</span>")
        plot.setMenuEnabled(False)
        plot.hideButtons()
        vb = plot.getViewBox()
        vb.setMouseEnabled(False, False)
        vb.setAspectLocked(False)
        vb.setRange(xRange=(0, len(interops)), yRange=(0, len(intras)), padding=0)
        spanning = bool(cells) and all(c.any_interop for c in cells)
        for name, values, label in (("bottom", interops, "inter-op threads"), ("left", intras, "intra-op threads")):
            axis = plot.getAxis(name)
            if name == "bottom" and spanning:
                axis.setTicks([[(len(interops) / 2, "any (no inter-op pool)")], []])
            else:
                axis.setTicks([[(i + 0.5, str(v)) for i, v in enumerate(values)], []])
            axis.setLabel(label, color=_axis_hex())
            axis.setPen(pg.mkPen(_axis_hex()))
            axis.setTextPen(pg.mkPen(_axis_hex()))
        data = np.full((len(interops), len(intras)), np.nan)
        for c in cells:
            if c.color_ms is not None:
                data[c.x : c.x + c.width, c.y] = c.color_ms
        image = pg.ImageItem(axisOrder="col-major")
        if self.levels is not None:
            image.setImage(data, levels=self.levels, lut=self.colormap.getLookupTable(nPts=256), autoLevels=False)
        image.setRect(QRectF(0, 0, len(interops), len(intras)))
        plot.addItem(image)
        for c in cells:
            rect = QRectF(c.x, c.y, c.width, 1)
            if c.median_ms is None:
                fill = _rect_in(vb, rect)
                fill.setBrush(QBrush(QColor(FAILED_HEX if c.status == "failed" else NOT_RUN_HEX)))
                fill.setPen(QPen(Qt.PenStyle.NoPen))
            if c.skipped:
                cross = _rect_in(vb, rect)
                cross.setBrush(QBrush(QColor(SKIPPED_HEX), Qt.BrushStyle.DiagCrossPattern))
                cross.setPen(QPen(Qt.PenStyle.NoPen))
                self.skipped_marks.append(cross)
            if c.oversubscribed:
                hatch = _rect_in(vb, rect)
                hatch.setBrush(QBrush(QColor(HATCH_HEX), Qt.BrushStyle.BDiagPattern))
                hatch.setPen(QPen(Qt.PenStyle.NoPen))
                hatch.setOpacity(0.45)
                self.oversubscribed_marks.append(hatch)
            if c.median_ms is not None:
                text = f"{_ms(c.median_ms)} ms"
            else:
                text = "failed" if c.status == "failed" else "skipped" if c.skipped else "not run"
            if c is best or c.tied:
                text = "★ " + text
            if c.load_word:
                text += f"\n⚠ {c.load_word}"
                self.load_marks.append(self._load_mark(vb, rect))
            label = pg.TextItem(text, color=self._text_color(c), anchor=(0.5, 0.5))
            label.setPos(c.x + c.width / 2, c.y + 0.5)
            plot.addItem(label)
            if c is best or c.tied:
                pen = pg.mkPen(BEST_HEX, width=4)
                pen.setCosmetic(True)
                marker = _rect_in(vb, rect.adjusted(0.03, 0.03, -0.03, -0.03))
                marker.setPen(pen)
                marker.setBrush(QBrush(Qt.BrushStyle.NoBrush))
                marker.setZValue(10)
                if c is best:
                    self.best_marker = marker
                else:
                    self.tie_markers.append(marker)
        self.plots[mode] = plot
        self.images[mode] = image

    @staticmethod
    def _load_mark(vb: pg.ViewBox, rect: QRectF) -> QGraphicsRectItem:
        """The dashed outline of a cell starved of cores or run on a busy machine, inside the best's."""
        pen = pg.mkPen(LOAD_HEX, width=3, style=Qt.PenStyle.DashLine)
        pen.setCosmetic(True)
        mark = _rect_in(vb, rect.adjusted(0.08, 0.08, -0.08, -0.08))
        mark.setPen(pen)
        mark.setBrush(QBrush(Qt.BrushStyle.NoBrush))
        mark.setZValue(9)
        return mark

    def _text_color(self, cell: SweepCellView) -> QColor:
        if cell.color_ms is None or self.levels is None:
            return QColor("#202020")
        lo, hi = self.levels
        rgb = self.colormap.map((cell.color_ms - lo) / (hi - lo), mode="float")
        luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
        return QColor("#202020" if luminance > 0.5 else "#ffffff")

    def _legend_text(self, cells: list[SweepCellView], best: SweepCellView | None) -> str:
        if not cells:
            return "No sweep cells yet."
        parts = []
        done = sum(1 for c in cells if c.status == "done")
        parts.append(f"{done} of {len(cells)} cells ran")
        tied = [c for c in sorted(cells, key=lambda c: (c.median_ms or 0.0, c.index)) if c.tied and c is not best]
        if best is not None and best.median_ms is not None and tied:
            names = ", ".join(f"{c.mode} {c.interop}×{c.intra}" for c in [best, *tied])
            parts.append(f"★ best: {names} (within noise of each other; outlined, painted the best's colour)")
        elif best is not None and best.median_ms is not None:
            parts.append(f"★ best: {best.mode} {best.interop}×{best.intra}, {best.median_ms:.3f} ms (outlined)")
        if any(c.any_interop for c in cells):
            parts.append("a cell across every inter-op column: its mode has no inter-op pool, so it ran once")
        if any(c.oversubscribed for c in cells):
            cores = self._sweep.cores
            parts.append(f"hatched: oversubscribed, more threads computing than {cores or 'the'} cores")
        if any(c.status == "failed" for c in cells):
            parts.append("grey: failed (hover for why)")
        if any(c.skipped for c in cells):
            parts.append("cross-hatched: skipped, its mode cannot run here (hover for why)")
        marks = {c.load_word for c in cells}
        words = [said for mark, (said, _) in LOAD_MARKS.items() if mark in marks]
        if words:
            parts.append(f"⚠ dashed orange: {' or '.join(words)}, its time no claim (hover for why)")
        parts.append("click a cell to show its run, a second to compare the two, double-click to open it")
        return " · ".join(parts)

    @staticmethod
    def _legend_tip(cells: list[SweepCellView]) -> str:
        """What the legend's marks mean in full (its line says them in a few words)."""
        marks = {c.load_word for c in cells}
        tips = [tip for mark, (_, tip) in LOAD_MARKS.items() if mark in marks]
        tips.extend(dict.fromkeys(f"skipped: {c.skipped}" for c in cells if c.skipped))
        return "\n".join(tips)

    # ---- interaction ------------------------------------------------------------------------
    def cell_at_scene(self, pos: QPointF) -> SweepCellView | None:
        for mode, plot in self.plots.items():
            vb = plot.getViewBox()
            if not vb.sceneBoundingRect().contains(pos):
                continue
            p = vb.mapSceneToView(pos)
            x, y = math.floor(p.x()), math.floor(p.y())
            return next((c for c in self.cells if c.mode == mode and c.x <= x < c.x + c.width and c.y == y), None)
        return None

    def cell_center(self, index: int) -> QPoint:
        """Where cell `index` (of sweep.json) is, in the graphics view's viewport (for clicks)."""
        cell = next(c for c in self.cells if c.index == index)
        scene = self.plots[cell.mode].getViewBox().mapViewToScene(QPointF(cell.x + cell.width / 2, cell.y + 0.5))
        return self.graphics.mapFromScene(scene)

    def _on_click(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at_scene(event.scenePos())
        if cell is None or cell.folder is None:
            return
        event.accept()
        if event.double():  # the click before it chose the cell: now open its run
            self.cellActivated.emit(str(cell.folder))
            return
        first = self._selected
        self.cellChosen.emit(str(cell.folder))
        if first is not None and first.index != cell.index and first.folder is not None:
            self.clear_selection()
            self.compareRequested.emit(str(first.folder), str(cell.folder))
        else:
            self._select(cell)

    def _select(self, cell: SweepCellView) -> None:
        self.clear_selection()
        self._selected = cell
        pen = pg.mkPen(SELECTED_HEX, width=3, style=Qt.PenStyle.DashLine)
        pen.setCosmetic(True)
        mark = _rect_in(self.plots[cell.mode].getViewBox(), QRectF(cell.x + 0.1, cell.y + 0.1, cell.width - 0.2, 0.8))
        mark.setPen(pen)
        mark.setZValue(11)
        self._selection_mark = mark

    @property
    def selected(self) -> str | None:
        """The first cell's run folder while a second click would compare."""
        return str(self._selected.folder) if self._selected is not None and self._selected.folder else None

    def clear_selection(self) -> None:
        mark = self._selection_mark
        if mark is not None and mark.scene() is not None:
            mark.scene().removeItem(mark)  # back to Python, which deletes it
        self._selected, self._selection_mark = None, None

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and hasattr(self, "cells"):
            self.clear_selection()
            self.graphics.setBackground(theme().background)
            self._build()  # axes and titles in the palette's text colour

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape and self._selected is not None:
            self.clear_selection()
            event.accept()
            return
        super().keyPressEvent(event)

    def _on_move(self, pos: QPointF) -> None:
        cell = self.cell_at_scene(pos)
        self.graphics.setToolTip(cell.tooltip if cell is not None else "")
