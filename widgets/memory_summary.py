"""The memory imbalance summary: each device's peak as a bar beside the others', in words the device
of the largest peak, then the heaviest device of each kind against the lightest (two devices) or
the median one (more), and what was live at a device's peak, grouped by op (or, for a snapshot, by
allocation site), largest first.

Bars of one kind of device share a plot (and so a scale: the heaviest GPU's bar is as much taller
as its peak is larger); each kind gets its own plot, so 8 B of CPU memory are not drawn beside
6 GiB of GPU memory. The median peak of a kind of three devices or more is a dashed line across its
bars. Clicking a bar chooses that device (`deviceChosen`), whose peak the table then shows (by
default the device of the largest peak); clicking a row of the table says where (`whereActivated`, the
op's name, for `TimelineView.find`) and which events hold that memory (`eventsActivated`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from branchscope.profiling.trace.memory import (
    BEFORE_PROFILING,
    NO_OP,
    UNEXPLAINED,
    DeviceMemory,
    Imbalance,
    MemoryAnalysis,
    device_type_of,
    heaviest,
    imbalance_of,
    missed_frees_line,
)
from branchscope.profiling.trace.memory_source import recorded_by, why_none
from branchscope.profiling.trace.natural import natural_key
from branchscope.profiling.trace.rank_job import job_of
from branchscope.widgets.charts import BytesAxisItem, style_axis
from branchscope.widgets.memory_table import NOT_LOADED
from branchscope.widgets.memory_view import DEVICE_COLORS, device_order
from branchscope.widgets.theme import Theme, theme
from branchscope.widgets.units import format_bytes, format_offset

#: Bar width, in slots of 1.
BAR_WIDTH = 0.6
#: Rows that name no op (nothing to find in the timeline), shown muted.
_NOT_AN_OP = (NO_OP, BEFORE_PROFILING, UNEXPLAINED)
#: What the table's rows hold besides their text.
WHERE_ROLE = Qt.ItemDataRole.UserRole + 1


def _kind_name(kind: str) -> str:
    return {"cuda": "GPU", "hip": "GPU", "cpu": "CPU"}.get(kind, kind)


def imbalance_words(imbalance: Imbalance) -> str:
    """One sentence: how far the heaviest device of a kind is above the others (two devices: the
    lightest, "rank 0 holds 5.0× rank 1"; more: the median one)."""
    return imbalance.words(lambda b: format_bytes(int(round(b))))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def job_devices(analysis: MemoryAnalysis) -> list[DeviceMemory]:
    """The devices the bars show, in rank order: the analysis's, and for a large job of which only
    the ranks in view are loaded (`rank_job`) every other rank's too, with the peak the job's
    figures hold (what was live at it is not known until its rank is loaded: `at_peak` is empty)."""
    job = job_of(analysis.trace)
    loaded = {d.rank for d in analysis.devices}
    if job is None or loaded >= set(job.ranks):
        return list(analysis.devices)
    f = job.figures
    others = [
        DeviceMemory(
            device=f"rank{r}/{device}", rank=r, peak_bytes=peak, peak_ns=-1, reserved_peak_bytes=None,
            capacity_bytes=None, allocations=0, frees=0, at_peak=(),
        )  # fmt: skip
        for r, peaks in zip(f.ranks, f.peaks)
        if r not in loaded
        for device, peak in peaks.items()
    ]
    return sorted([*analysis.devices, *others], key=lambda d: natural_key(d.device))


def loaded_words(analysis: MemoryAnalysis, devices: list[DeviceMemory]) -> str:
    """For a large job not loaded whole: which ranks' allocations are known; else nothing."""
    ranks = sorted({d.rank for d in devices if d.rank is not None})
    loaded = sorted({d.rank for d in analysis.devices if d.rank is not None})
    if len(loaded) == len(ranks):
        return ""
    return (
        f"Ranks {', '.join(map(str, loaded))} of {len(ranks)} are loaded: the others' bars are the job's peaks, "
        "and a click on one loads its rank."
    )


def headline(analysis: MemoryAnalysis, devices: list[DeviceMemory] | None = None) -> str:
    """The summary's words: the device of the largest peak first, then each kind's imbalance (the
    kind of the largest peak first), then what the profiler missed; over `devices` (a large job's
    every rank, `job_devices`; default: the analysis's)."""
    shown = analysis.devices if devices is None else devices
    main = heaviest(shown)
    if main is None:
        return why_none(analysis.trace)
    kind = _kind_name(device_type_of(main.device))
    capacity = f" of {format_bytes(main.capacity_bytes)}" if main.capacity_bytes else ""
    name = main.label if main.plain_device == "cpu" else f"{kind} {main.label}"
    sentences = [f"Largest peak: {name}, {format_bytes(main.peak_bytes)}{capacity}."]
    for i in imbalance_of(shown):  # "Rank 0 holds …" starts a sentence; a device's name keeps its case
        words = imbalance_words(i)
        sentences.append("R" + words[1:] if words.startswith("rank ") else words)
    sentences += [
        _sentence(missed_frees_line(d.freed_unseen, d.label)) for d in analysis.devices if d.freed_unseen
    ]
    return " ".join([*sentences, loaded_words(analysis, shown)]).strip()


def bar_tip(d: DeviceMemory) -> str:
    """A bar's tooltip: the device's full name and its peak (of its reserved peak too, where known)."""
    reserved = f", reserved {format_bytes(d.reserved_peak_bytes)}" if d.reserved_peak_bytes is not None else ""
    unknown = " (its rank is not loaded: a click loads it)" if d.peak_ns < 0 else ""
    return f"{d.device}: peak {format_bytes(d.peak_bytes)}{reserved}{unknown}"


#: Label steps of the bars' axis: every bar's name, or every 2nd, 5th, 10th, … (a timeline's ticks).
_LABEL_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
#: Pixels between two of the axis's labels at least.
LABEL_GAP_PX = 12


def label_step(names: Sequence[str], width_of: Callable[[str], float], px_per_bar: float) -> int:
    """Name every k-th bar, the smallest k of `_LABEL_STEPS` whose labels fit side by side (the
    widest name plus `LABEL_GAP_PX` within k bars' width): 32 ranks' names never overlap."""
    need = max((width_of(n) for n in names), default=0.0) + LABEL_GAP_PX
    return next((k for k in _LABEL_STEPS if k * px_per_bar >= need), _LABEL_STEPS[-1])


class _CategoryAxis(pg.AxisItem):
    """A bottom axis under bars 0, 1, 2, …: every k-th bar's name, as many as fit without
    overlapping (`label_step`), a tick under every bar, in the palette's colours. Every bar's full
    name and peak is in the tooltip of the axis under it and of the bar."""

    def __init__(self, names: Sequence[str], tips: Sequence[str]):
        super().__init__("bottom")
        self.names, self.tips = list(names), list(tips)
        #: Every `step`-th bar is named (set each time the axis is laid out).
        self.step = 1
        self.setStyle(maxTextLevel=0)  # the ticks under unnamed bars carry no text
        style_axis(self, theme(), None)
        self._let_ends_out()
        self.setAcceptHoverEvents(True)

    def apply_theme(self, colors: Theme, font: QFont) -> None:
        style_axis(self, colors, font)
        self._let_ends_out()

    def _metrics(self) -> QFontMetricsF:
        return QFontMetricsF(self.style["tickFont"] or self.font())

    def _let_ends_out(self) -> None:
        """The first and last bars' names, centred under them, may reach past the axis's ends by
        half a name (pyqtgraph hides a name that does not fit in the axis: rank0's would go)."""
        widest = max((self._metrics().horizontalAdvance(n) for n in self.names), default=0.0)
        self.setStyle(hideOverlappingLabels=int(widest / 2) + 2)

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph API)
        n = len(self.names)
        px_per_bar = size / max(float(maxVal - minVal), 1e-9)
        self.step = label_step(self.names, self._metrics().horizontalAdvance, px_per_bar)
        named = [float(i) for i in range(0, n, self.step)]
        return [(float(self.step), named), (1.0, [float(i) for i in range(n) if i % self.step])]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph API)
        return [self.names[int(round(v))] if 0 <= int(round(v)) < len(self.names) else "" for v in values]

    def hoverEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph API)
        view = self.linkedView()
        if ev.isExit() or view is None:
            self.setToolTip("")
            return
        k = int(round(view.mapSceneToView(ev.scenePos()).x()))
        self.setToolTip(self.tips[k] if 0 <= k < len(self.tips) else "")


class _Bars(pg.BarGraphItem):
    """One kind's bars; a click on one calls `chosen(index)`; its tooltip is `tips[index]`."""

    def __init__(self, chosen, tips: Sequence[str], **opts):
        super().__init__(**opts)
        self._chosen = chosen
        self.tips = list(tips)
        self.setAcceptHoverEvents(True)

    def _bar_at(self, x: float, y: float) -> int | None:
        k = int(round(x))
        heights = self.opts["height"]
        if 0 <= k < len(heights) and abs(x - k) <= BAR_WIDTH / 2 and 0 <= y <= heights[k]:
            return k
        return None

    def mouseClickEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph API)
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        k = self._bar_at(ev.pos().x(), ev.pos().y())
        if k is not None:
            ev.accept()
            self._chosen(k)

    def hoverEvent(self, ev) -> None:  # noqa: N802 (pyqtgraph API)
        k = None if ev.isExit() else self._bar_at(ev.pos().x(), ev.pos().y())
        self.setToolTip("" if k is None else self.tips[k])


class MemorySummary(QWidget):
    """Peaks side by side, the imbalance in words, and what was live at a device's peak (see the
    module docstring).

    `deviceChosen(device)`: a bar was clicked (`device` as in `Trace.memory`).
    `whereActivated(where)`: a row was clicked: the op (or allocation site) holding that memory.
    `eventsActivated(events)`: the same row's enclosing ops (indices into the trace's events).
    """

    deviceChosen = Signal(str)
    whereActivated = Signal(str)
    eventsActivated = Signal(list)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.analysis: MemoryAnalysis | None = None
        #: The device whose peak the table shows.
        self.device: str | None = None
        #: Each plot's devices, left to right, by kind.
        self.kinds: dict[str, list[DeviceMemory]] = {}
        #: Every device with a bar, in rank order (a large job's every rank: `job_devices`).
        self.devices: list[DeviceMemory] = []
        self.plots: dict[str, pg.PlotItem] = {}
        self.bars: dict[str, _Bars] = {}
        self.median_lines: dict[str, pg.InfiniteLine] = {}
        self._colors: dict[str, QColor] = {}
        self.words = QLabel(self)
        self.words.setWordWrap(True)
        self.words.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chart = pg.GraphicsLayoutWidget(self)
        self.chart.ci.setContentsMargins(4, 4, 4, 4)
        self.chart.setMinimumHeight(140)
        self.caption = QLabel(self)
        self.caption.setWordWrap(True)
        self.table = QTableWidget(0, 4, self)
        self.table.setHorizontalHeaderLabels(["op", "bytes", "allocations", "share of peak"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 3):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.cellClicked.connect(lambda row, _col: self._activate(row))
        self.table.cellActivated.connect(lambda row, _col: self._activate(row))
        lower = QWidget(self)
        lower_lay = QVBoxLayout(lower)
        lower_lay.setContentsMargins(0, 0, 0, 0)
        lower_lay.addWidget(self.caption)
        lower_lay.addWidget(self.table, 1)
        split = QSplitter(Qt.Orientation.Vertical, self)
        split.setChildrenCollapsible(False)
        split.addWidget(self.chart)
        split.addWidget(lower)
        split.setSizes([220, 260])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.words)
        lay.addWidget(split, 1)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self.set_analysis(None)

    # ---- data -------------------------------------------------------------------------------
    def set_analysis(self, analysis: MemoryAnalysis | None) -> None:
        """Show `analysis` (None: nothing), its heaviest device's peak in the table."""
        self.analysis = analysis
        self.chart.ci.clear()
        self.kinds, self.plots, self.bars, self.median_lines = {}, {}, {}, {}
        self.devices = job_devices(analysis) if analysis is not None else []
        devices = sorted(self.devices, key=device_order)
        self._colors = {
            d.device: QColor(DEVICE_COLORS[k % len(DEVICE_COLORS)]) for k, d in enumerate(devices)
        }
        for d in devices:
            self.kinds.setdefault(device_type_of(d.device), []).append(d)
        # kinds with an imbalance first (the GPUs), then the others
        imbalanced = [i.device_type for i in imbalance_of(self.devices)]
        order = sorted(self.kinds, key=lambda k: (k not in imbalanced, k == "cpu", k))
        for col, kind in enumerate(order):
            self._add_plot(col, kind, self.kinds[kind])
            self.chart.ci.layout.setColumnStretchFactor(col, max(1, len(self.kinds[kind])))
        if analysis is None or not devices:
            self.words.setText(why_none(analysis.trace) if analysis is not None else "")
            self.device = None
            self._fill_table()
            return
        source = recorded_by(analysis.trace)
        self.words.setText(headline(analysis, self.devices) + (f" Memory: {source}." if source else ""))
        self.apply_theme()
        self.set_device(self.default_device())

    def default_device(self) -> str | None:
        """The device of the largest peak (the heaviest of the largest kind's imbalance)."""
        main = heaviest(self.devices)
        return None if main is None else main.device

    def _add_plot(self, col: int, kind: str, devices: list[DeviceMemory]) -> None:
        names = [d.device for d in devices]
        tips = [bar_tip(d) for d in devices]
        plot = self.chart.ci.addPlot(
            row=0, col=col, axisItems={"left": BytesAxisItem(), "bottom": _CategoryAxis(names, tips)}
        )
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.setMouseEnabled(x=False, y=False)
        plot.setTitle(f"peak per {_kind_name(kind)}")
        x = np.arange(len(devices), dtype=float)
        peaks = np.array([d.peak_bytes for d in devices], dtype=float)
        reserved = [d.reserved_peak_bytes for d in devices]
        if any(r is not None for r in reserved):  # reserved peaks behind, lighter
            light = []
            for d in devices:
                c = QColor(self._colors[d.device])
                c.setAlpha(60)
                light.append(pg.mkBrush(c))
            behind = pg.BarGraphItem(
                x=x, height=np.array([r or 0 for r in reserved], dtype=float), width=BAR_WIDTH + 0.2,
                brushes=light, pen=pg.mkPen(None),
            )  # fmt: skip
            plot.addItem(behind)
        bars = _Bars(
            lambda k, names=names: self._choose(names[k]), tips,
            x=x, height=peaks, width=BAR_WIDTH, brushes=[self._brush(d) for d in devices],
            pen=pg.mkPen(None),
        )  # fmt: skip
        plot.addItem(bars)
        top = max(float(peaks.max()), *(float(r) for r in reserved if r is not None), 1.0)
        plot.setYRange(0, top * 1.12, padding=0)
        plot.setXRange(-0.6, len(devices) - 0.4, padding=0)
        left = plot.getAxis("left")
        left.v_max = top
        if len(devices) >= 3:  # of two, the median is their mean: the words compare them directly
            line = pg.InfiniteLine(
                pos=self._median_of(devices), angle=0, movable=False,
                pen=pg.mkPen(theme().muted, width=1, style=Qt.PenStyle.DashLine),
                label="median", labelOpts={"position": 0.02, "color": theme().muted, "anchors": [(0, 1), (0, 1)]},
            )  # fmt: skip
            plot.addItem(line, ignoreBounds=True)
            self.median_lines[kind] = line
        self.plots[kind] = plot
        self.bars[kind] = bars

    def _brush(self, d: DeviceMemory) -> QBrush:
        """A bar's fill: its device's colour, paler for a rank not loaded (`job_devices`)."""
        c = QColor(self._colors[d.device])
        if d.peak_ns < 0:
            c.setAlpha(110)
        return pg.mkBrush(c)

    @staticmethod
    def _median_of(devices: list[DeviceMemory]) -> float:
        return float(np.median([d.peak_bytes for d in devices]))

    def _choose(self, device: str) -> None:
        self.set_device(device)
        self.deviceChosen.emit(device)

    def set_device(self, device: str | None) -> None:
        """Show what was live at `device`'s peak in the table, and outline its bar."""
        self.device = device
        self._outline()
        self._fill_table()

    def _outline(self) -> None:
        for kind, bars in self.bars.items():
            names = [d.device for d in self.kinds[kind]]
            pens = [pg.mkPen(theme().text, width=2) if n == self.device else pg.mkPen(None) for n in names]
            bars.setOpts(pens=pens)

    def bar_center(self, device: str) -> tuple[float, float]:
        """Where `device`'s bar is, halfway up, in the chart's widget pixels (for a click)."""
        for kind, devices in self.kinds.items():
            for k, d in enumerate(devices):
                if d.device == device:
                    vb = self.plots[kind].vb
                    vb.updateMatrix()
                    p = self.chart.mapFromScene(vb.mapViewToScene(pg.Point(float(k), d.peak_bytes / 2)))
                    return float(p.x()), float(p.y())
        raise KeyError(device)

    # ---- the table --------------------------------------------------------------------------
    def _fill_table(self) -> None:
        self.table.setRowCount(0)
        d = next((d for d in self.devices if d.device == self.device), None)
        if d is None or self.analysis is None:
            self.caption.setText("")
            return
        if d.peak_ns < 0:
            self.caption.setText(f"{d.device} peaks at {format_bytes(d.peak_bytes)}; {NOT_LOADED}")
            return
        t = format_offset(d.peak_ns - int(self.analysis.trace.span()[0]))
        if not d.at_peak:
            self.caption.setText(
                f"{d.device} peaks at {format_bytes(d.peak_bytes)} ({t}); its events carry no addresses, "
                "so what was live then is unknown"
            )
            return
        series = self.analysis.series.get(d.device)
        by = "allocation site" if series is not None and series.site_id is not None else "op"
        self.table.setHorizontalHeaderLabels([by, "bytes", "allocations", "share of peak"])
        self.caption.setText(
            f"live at {d.device}'s peak, {format_bytes(d.peak_bytes)} at {t}, by {by}, largest first"
        )
        self.table.setRowCount(len(d.at_peak))
        for row, group in enumerate(d.at_peak):
            share = group.bytes / d.peak_bytes if d.peak_bytes else 0.0
            cells = [group.where, format_bytes(group.bytes), str(group.allocations), f"{100 * share:.0f}%"]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setData(WHERE_ROLE, group.where)
                if group.where in _NOT_AN_OP:
                    item.setForeground(theme().muted)
                self.table.setItem(row, col, item)

    def rows(self) -> list[tuple[str, int, int]]:
        """The table's (where, bytes, allocations), top to bottom."""
        d = self.analysis.device(self.device) if self.analysis is not None and self.device else None
        return [] if d is None else [(g.where, g.bytes, g.allocations) for g in d.at_peak]

    def _activate(self, row: int) -> None:
        item = self.table.item(row, 0)
        if item is None or self.analysis is None or self.device is None:
            return
        where = str(item.data(WHERE_ROLE))
        if where in _NOT_AN_OP:  # no op to find
            return
        events = sorted(
            {a.event for a in self.analysis.live_at_peak(self.device) if a.where == where and a.event >= 0}
        )
        self.whereActivated.emit(where)
        self.eventsActivated.emit(events)

    # ---- palette and font -------------------------------------------------------------------
    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() in (
            QEvent.Type.PaletteChange,
            QEvent.Type.ApplicationPaletteChange,
            QEvent.Type.FontChange,
            QEvent.Type.ApplicationFontChange,
        ):
            self.apply_theme()

    def apply_theme(self) -> None:
        """The chart in the palette's colours and the widget's font (the Qt widgets follow alone)."""
        colors = theme()
        self.chart.setBackground(colors.background)
        font = self.font()
        for plot in self.plots.values():
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                restyle = getattr(axis, "apply_theme", None)
                if callable(restyle):
                    restyle(colors, font)
            plot.titleLabel.setText(
                plot.titleLabel.text, color=colors.text.name(), size=f"{font.pointSizeF():g}pt"
            )
        for line in self.median_lines.values():
            line.setPen(pg.mkPen(colors.muted, width=1, style=Qt.PenStyle.DashLine))
            line.label.setColor(colors.muted)
            line.label.textItem.setFont(font)
        self._outline()
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.text() in _NOT_AN_OP:
                for col in range(self.table.columnCount()):
                    self.table.item(row, col).setForeground(colors.muted)
