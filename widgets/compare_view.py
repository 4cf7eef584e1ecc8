"""Runs compared: their traces one above the other on one time scale, a summary and the op diff.

On the left, a `TraceWorkspace` with a row per run, each shown from its own origin (its first
profiled step) so every run starts at 0 and a shorter run is shorter on screen. On the right,
one above the other: the summary (one column per run: what ran, unprofiled step time and spread, speedup against
the baseline and whether it is within noise, parallelism, cores used, pool busy share, memory
peaks, what the branches could give and how far a fork or threads run got towards it: `compare.vs_prediction`) and the op diff (count, total and self time per run; click a header to sort). Above them, one
line says which way of using the cores served the model better where a sequential and a fork or threads run
of the same thread count are compared, or which run would tell (`profiling/trace/advice.py`). A run
starved of cores (`profiling/trace/starved.py`) is marked in its column's header and its "starved of
cores?" row, and the advice names no winner beside it; a run of the advice's pair that ran on a busy
machine (run.json's `load.busy`) is named at the advice's end ("… ran on a busy machine: re-run it on
a quiet one"). Under the advice, a fork or threads run M I×J
compared beside sequential 1×J and M 1×J of its model has its speedup in parts, one line each
(`profiling/trace/parts.py`: "run 2: fork 2×1 over sequential 1×1, in parts: 1.67× = 1.65× from
TorchScript's plan × 1.01× from 2 threads"), its summary column the short form ("1.65× plan × 1.01×
threads", the sentence in the tooltip), and its "measured ÷ could give" holds the bound against the
part from its threads.

A page too narrow for the runs' timelines (`TIMELINE_CHARS`) beside a summary whose columns and row
titles keep `COLUMN_CHARS` characters (a projector's 1280×720 in presentation size) puts the two
tables under the runs instead, as two tabs ("Summary", "Op diff"): `CompareView.arrange`, counted in
characters of the text, so it follows View → Larger text and Presentation size.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFontMetricsF, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QStyle,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from branchscope.profiling.trace.advice import from_summaries
from branchscope.profiling.trace.compare import (
    OpDiff,
    RunSummary,
    VsPrediction,
    compare_summaries,
    op_diff,
    summary_parts,
    vs_prediction,
)
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.parts import parts_sentence, parts_short
from branchscope.profiling.trace.prediction import bound_text, prediction_text
from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord
from branchscope.widgets.advice_label import AdviceLabel
from branchscope.widgets.splitter import MarkedSplitter
from branchscope.widgets.units import format_bytes
from branchscope.widgets.workspace import ShownTrace, TraceWorkspace

#: The role holding an op table cell's number, by which its column sorts.
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
NONE = "–"
#: What the parts' lines are, in their tooltip.
PARTS_TIP = (
    "A fork or threads run M I×J compared beside sequential 1×J and M 1×J of its model: its speedup over "
    "sequential 1×J is its plan (sequential 1×J ÷ M 1×J: what running the mode's plan on one thread changes) × "
    "its threads (M 1×J ÷ M I×J), from the runs' medians, unpaired (branchscope speedup, or Measure these two "
    "paired, measures them paired with intervals)"
)
#: The widest a summary column gets (pixels); longer text wraps. Where the runs' columns would not
#: fit the table's width they share it, none narrower than `MIN_SUMMARY_COLUMN` (then it scrolls).
MAX_SUMMARY_COLUMN = 190
MIN_SUMMARY_COLUMN = 90
#: The row titles (the vertical header) take at most this share of the summary table's width, at
#: least `MIN_ROW_TITLES` pixels: longer titles are elided (each says itself in its tooltip), so the
#: runs' columns keep their room in a narrow window.
ROW_TITLES_SHARE = 0.4
MIN_ROW_TITLES = 120
#: A summary column, and the row titles, keep at least this many characters of the text (a cell's
#: longer text wraps; a longer title is elided after them), whatever the text size.
COLUMN_CHARS = 12
#: Beside the tables the runs' timelines keep at least this many characters (their lanes' names and
#: a plot); a page narrower than that and a readable table puts the tables under the runs, in tabs.
TIMELINE_CHARS = 90
#: The runs' share of the page's height when the tables are under them.
RUNS_SHARE_STACKED = 0.55


def char_width(widget: QWidget) -> float:
    """The average character width of `widget`'s text, in pixels: sizes grow with the text size."""
    return QFontMetricsF(widget.font()).averageCharWidth()


def fitted_widths(natural: Sequence[int], avail: int, least: int = MIN_SUMMARY_COLUMN) -> list[int]:
    """Column widths for columns wanting `natural` pixels in `avail`: as wanted where they fit, else
    each a share of `avail` in proportion to its want, at least `least` (or its want, if smaller)."""
    total = sum(natural)
    if total <= avail or not natural:
        return list(natural)
    return [max(min(n, least), avail * n // total) for n in natural]


class FittedTable(QTableWidget):
    """A table whose columns share its width (their text wrapping) rather than scroll out of sight."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.natural: list[int] = []

    def least_column(self) -> int:
        """The narrowest a column (or the row titles) gets: `COLUMN_CHARS` characters of the text and
        an ellipsis besides the cell's or header's margins, never under `MIN_SUMMARY_COLUMN` pixels."""
        style = self.style()
        cell = 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self) + 1)
        header = 2 * style.pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, self)
        return max(MIN_SUMMARY_COLUMN, round((COLUMN_CHARS + 2) * char_width(self)) + max(cell, header))

    def least_width(self, columns: int) -> int:
        """The width a table of `columns` runs needs for its row titles and columns to keep their
        least (`least_column`)."""
        return max(MIN_ROW_TITLES, self.least_column()) + self._columns_least(columns)

    def _columns_least(self, columns: int) -> int:
        """What `columns` columns at their least take, with the frame and a vertical scroll bar."""
        chrome = 2 * self.frameWidth() + self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return columns * self.least_column() + chrome

    def fit_columns(self) -> None:
        """Columns as wide as their contents (up to `MAX_SUMMARY_COLUMN`, or `least_column` if
        wider), shrunk to the width."""
        self.resizeColumnsToContents()
        most = max(MAX_SUMMARY_COLUMN, self.least_column())
        self.natural = [min(self.columnWidth(k), most) for k in range(self.columnCount())]
        self._apply_widths()

    def _apply_widths(self) -> None:
        least = self.least_column()
        titles = min(int(self.width() * ROW_TITLES_SHARE), self.width() - self._columns_least(self.columnCount()))
        self.verticalHeader().setMaximumWidth(max(MIN_ROW_TITLES, least, titles))  # the columns keep their least first
        self.updateGeometries()  # the viewport's width follows the row titles'
        for k, w in enumerate(fitted_widths(self.natural, self.viewport().width(), least)):
            self.setColumnWidth(k, w)
        self.resizeRowsToContents()

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange and self.natural:
            self.fit_columns()  # the columns' least and their contents' widths follow the text

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if self.natural:
            self._apply_widths()


#: Summary rows: (title, tooltip). Parallelism and cores used are different measures.
SUMMARY_ROWS: list[tuple[str, str]] = [
    ("run", "what ran: model · mode · inter-op × intra-op threads (or the file name)"),
    ("mode", "how the branches were run"),
    ("threads (inter-op × intra-op)", "inter-op pool threads × intra-op threads"),
    ("unprofiled median", "median step time without the profiler: the honest number"),
    ("unprofiled spread [min q1–q3 max]", "step times without the profiler: min, quartiles, max"),
    ("speedup vs baseline", "the baseline's unprofiled median ÷ this run's: above 1, faster; \"machine busy\" where "
                            "other processes took more than a fifth of the cores while this run or the baseline ran"),
    ("within noise?", "whether the interquartile ranges of this run and the baseline overlap"),
    ("speedup in parts", "a fork or threads run M I×J beside sequential 1×J and M 1×J of its model: its speedup "
     "over sequential 1×J as its plan (sequential 1×J ÷ M 1×J) × its threads (M 1×J ÷ M I×J), from the medians; "
     "hover a cell for the sentence"),
    ("starved of cores?", "whether the run got, or the machine's load left it, fewer cores than its threads could "
     "use (under 0.8 × the fewer of its threads and the cores): its times name no winner"),
    ("parallelism (busy threads)", "threads busy computing on average inside the profiled steps, waits excluded"),
    ("cores used (CPU samples)", "CPU cores in use on average inside the profiled steps, from the CPU samples"),
    ("pool busy share", "share of the inter-op pool's thread time spent busy inside the profiled steps"),
    ("profiled median", "median step time under the profiler"),
    ("branches could give", "the bound on the speedup from the branch graph and sequential per-branch times: "
     "each region's branches list-scheduled longest first on k threads, the serial part as it is "
     "(no contention, no overhead assumed); hover a cell for the whole sentence"),
    ("measured ÷ could give", "a fork or threads run's speedup as a share of the bound on its inter-op threads: the "
     "part from its threads where its parts are known (\"its threads\"), else its speedup against a sequential "
     "baseline of the same intra-op threads"),
    ("the gap explained", "a fork or threads run's largest region: measured ÷ predicted ms, the delay from the fork "
     "to its first branch, its branches' time ÷ their sequential time, pool threads idle; hover for the sentence"),
]  # fmt: skip


def _num(x: float | None, fmt: str, unit: str = "") -> str:
    return NONE if x is None else format(x, fmt) + unit


def _gap_cell(s: RunSummary) -> str:
    """"6.00 / 4.00 ms, +0.50 ms, ×1.25, idle 1.00 ms": the region that lost most."""
    if s.gap is None or not s.gap.regions:
        return NONE
    r = max(s.gap.regions, key=lambda r: r.measured_ms - r.predicted_ms)
    stretch = "" if r.stretch is None else f", ×{r.stretch:.2f}"
    return f"{r.measured_ms:.2f} / {r.predicted_ms:.2f} ms, +{r.start_delay_ms:.2f} ms{stretch}, idle {r.idle_ms:.2f} ms"


def _could_give(s: RunSummary) -> str:
    """"≤ 1.46× [1.41–1.50] on 2, 1.71× [1.66–1.75] on 4" (a fork or threads run: on its inter-op
    threads alone), each bound with its interval where it has one."""
    pred = s.prediction
    if pred is None:
        return NONE
    if s.traits.branch_pool and s.interop is not None and str(s.interop) in pred.by_threads:
        return f"≤ {bound_text(pred, s.interop)} on {s.interop} threads"
    ks = sorted(int(k) for k in pred.by_threads if k.isdigit())
    return "≤ " + ", ".join(f"{bound_text(pred, k)} on {k}" for k in ks)


class CompareView(QWidget):
    """N runs compared (see the module docstring). `set_runs` shows them; `.workspace` is the rows."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.workspace = TraceWorkspace(self)
        self.summary_table = FittedTable(self)
        self.summary_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.summary_table.setWordWrap(True)
        self.summary_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for header in (self.summary_table.horizontalHeader(), self.summary_table.verticalHeader()):
            header.setTextElideMode(Qt.TextElideMode.ElideRight)  # cut with "…", whole in the tooltip
        self.ops_model = QStandardItemModel(self)
        self.ops_model.setSortRole(SORT_ROLE)
        self.ops_view = QTableView(self)
        self.ops_view.setModel(self.ops_model)
        self.ops_view.setSortingEnabled(True)
        self.ops_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.ops_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.ops_view.verticalHeader().hide()
        self.ops_view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.ops_view.horizontalHeader().setSortIndicatorShown(True)
        #: The tables one above the other, beside the runs (a wide page).
        self.tables = MarkedSplitter(Qt.Orientation.Vertical, self, "drag to share the height between the two tables")
        self.tables.addWidget(self.summary_table)
        self.tables.addWidget(self.ops_view)
        self.tables.setSizes([400, 600])
        #: The tables as two tabs, under the runs (a narrow page: `arrange`).
        self.table_tabs = QTabWidget(self)
        self.table_tabs.setDocumentMode(True)
        self.table_tabs.hide()
        self.splitter = MarkedSplitter(
            Qt.Orientation.Horizontal,
            self,
            "drag to share the room between the runs' timelines and the tables; double-click: back to the fitted sizes",
        )
        self.splitter.addWidget(self.workspace)
        self.splitter.addWidget(self.tables)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(0, False)
        self.splitter.setSizes([1000, 600])
        self.splitter.fitRequested.connect(self.refit)
        #: What the arrangement was last fitted for: (tables beside the runs, runs, character width).
        self._arranged: tuple[bool, int, float] | None = None
        #: Whether the split is fitted again when the splitter is resized (until the handle is dragged).
        self._fit_pending = False
        self.splitter.splitterMoved.connect(self._dragged)
        self.splitter.installEventFilter(self)
        #: Which way of using the cores served the model better (hidden when the runs do not tell).
        self.advice_label = AdviceLabel("run", self)
        #: Each parallel run's speedup in parts, one line each (hidden when no run has them).
        self.parts_label = QLabel("", self)
        self.parts_label.setWordWrap(True)
        self.parts_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.parts_label.setToolTip(PARTS_TIP)
        self.parts_label.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.advice_label)
        lay.addWidget(self.parts_label)
        lay.addWidget(self.splitter, 1)  # the lines above keep their height; the runs take the rest
        self.summaries: list[RunSummary] = []
        self.baseline = 0
        self.ops: list[OpDiff] = []
        #: Each run's speedup in parts (`compare.summary_parts`), None where it has none.
        self.parts: list[SpeedupPartsRecord | None] = []

    # ---- the arrangement ----------------------------------------------------------------------
    def tables_beside(self) -> bool:
        """Whether the tables are beside the runs (else under them, in tabs)."""
        return self.splitter.orientation() == Qt.Orientation.Horizontal

    def fits_beside(self) -> bool:
        """Whether the page has room for the runs' timelines (`TIMELINE_CHARS`) beside a summary
        whose columns and row titles keep `COLUMN_CHARS` characters."""
        least = self.summary_table.least_width(max(len(self.summaries), 2))
        return self.width() - self.splitter.handleWidth() - least >= TIMELINE_CHARS * char_width(self)

    def arrange(self) -> None:
        """The tables beside the runs where `fits_beside`, else under them as two tabs (a projector's
        1280×720 in presentation size); the split fitted again when that, the number of runs or the
        text size changed (a drag of the handle is kept otherwise)."""
        beside = self.fits_beside()
        key = (beside, len(self.summaries), char_width(self))
        if key == self._arranged:
            return
        if beside != self.tables_beside():
            self._move_tables(beside)
        self._arranged = key
        self.refit()

    def refit(self) -> None:
        """Fit the split now and whenever the splitter is resized, until the handle is dragged
        (a double-click on the handle comes here)."""
        self._fit_pending = True
        self.fit_split()

    def _move_tables(self, beside: bool) -> None:
        """The tables into the splitter beside the runs, or into tabs under them."""
        if beside:
            for table in (self.summary_table, self.ops_view):
                self.tables.addWidget(table)  # taken out of the tabs, which hid the one not in front
                table.show()
            self.splitter.replaceWidget(1, self.tables)
            self.table_tabs.hide()
        else:
            self.table_tabs.addTab(self.summary_table, "Summary")
            self.table_tabs.addTab(self.ops_view, "Op diff")
            self.splitter.replaceWidget(1, self.table_tabs)
            self.tables.hide()
        self.splitter.widget(1).show()
        self.splitter.setOrientation(Qt.Orientation.Horizontal if beside else Qt.Orientation.Vertical)
        self.splitter.setCollapsible(1, False)

    def fit_split(self) -> None:
        """Beside the runs, the tables get 3/8 of the width or the least a readable summary
        needs, whichever is more; under them, the runs get `RUNS_SHARE_STACKED` of the height."""
        if self.tables_beside():
            total = self.splitter.width() - self.splitter.handleWidth()
            tables = max(total * 3 // 8, self.summary_table.least_width(max(len(self.summaries), 2)))
        else:
            total = self.splitter.height() - self.splitter.handleWidth()
            tables = total - round(total * RUNS_SHARE_STACKED)
        self.splitter.setSizes([total - tables, tables])

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt API)
        """A split fitted while the splitter was hidden or not yet laid out is fitted again to its
        size once it has one (until the handle is dragged)."""
        if obj is self.splitter and event.type() == QEvent.Type.Resize and self._fit_pending:
            self.fit_split()
        return False

    def _dragged(self, _pos: int, _index: int) -> None:
        self._fit_pending = False

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self.arrange()

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self.arrange()

    def set_runs(
        self,
        traces: Sequence[Trace],
        summaries: Sequence[RunSummary],
        baseline: int,
        ops: Sequence[OpDiff] | None = None,
    ) -> None:
        """Show the runs (`summaries[k]` of `traces[k]`) against `summaries[baseline]`; `ops` is their
        `op_diff`, computed here when not given."""
        if len(traces) != len(summaries):
            raise ValueError(f"{len(traces)} traces but {len(summaries)} summaries")
        if summaries and not 0 <= baseline < len(summaries):
            raise IndexError(f"baseline {baseline} is not one of the {len(summaries)} runs")
        self.workspace.show_traces(
            [ShownTrace(t, origin_ns=s.origin_ns, title=s.label) for t, s in zip(traces, summaries)]
        )
        self.summaries = list(summaries)
        self.baseline = baseline
        self.ops = list(op_diff(traces) if ops is None else ops)
        self.advice_label.show_runs(from_summaries(self.summaries))
        self.parts = summary_parts(self.summaries)
        self.parts_label.setText("\n".join(self.parts_lines()))
        self.parts_label.setVisible(any(p is not None for p in self.parts))
        self._fill_summary()
        self._fill_ops()
        self.arrange()

    def parts_lines(self) -> list[str]:
        """"run 2: fork 2×1 over sequential 1×1, in parts: 1.67× = …", one per run with parts."""
        return [f"run {k}: {self._parts_sentence(k)}" for k, p in enumerate(self.parts) if p is not None]

    def _parts_sentence(self, k: int) -> str:
        s, parts = self.summaries[k], self.parts[k]
        return "" if parts is None else parts_sentence(s.mode, s.interop, s.intra, parts)

    def _vs_prediction(self, speedups: Sequence[float | None], k: int) -> VsPrediction | None:
        return vs_prediction(self.summaries, self.baseline, speedups, k, self.parts[k] if k < len(self.parts) else None)

    # ---- the summary --------------------------------------------------------------------------
    def summary_rows(self) -> list[tuple[str, list[str]]]:
        """The summary's rows as text: (title, one cell per run)."""
        runs = self.summaries
        if not runs:
            return []
        speedups, noise = compare_summaries(runs, self.baseline)
        rows: list[tuple[str, list[str]]] = []
        for title, _tip in SUMMARY_ROWS:
            cells = []
            for k, s in enumerate(runs):
                u = s.unprofiled
                vs = self._vs_prediction(speedups, k)
                parts = self.parts[k] if k < len(self.parts) else None
                cells.append({
                    "run": s.label,
                    "mode": s.mode or NONE,
                    "threads (inter-op × intra-op)": s.threads or NONE,
                    "unprofiled median": _num(None if u is None else u.median, ".2f", " ms"),
                    "unprofiled spread [min q1–q3 max]":
                        NONE if u is None else f"{u.min:.2f} [{u.q1:.2f}–{u.q3:.2f}] {u.max:.2f} ms",
                    "speedup vs baseline": ("baseline" if k == self.baseline else _num(speedups[k], ".2f", "×"))
                    + (" (machine busy)" if s.busy or (k != self.baseline and runs[self.baseline].busy) else ""),
                    "within noise?": NONE if k == self.baseline or noise[k] is None else ("yes" if noise[k] else "no"),
                    "speedup in parts": NONE if parts is None else parts_short(parts),
                    "starved of cores?": NONE if s.starved is None else ("yes" if s.starved else "no"),
                    "parallelism (busy threads)": _num(s.parallelism, ".2f"),
                    "cores used (CPU samples)": _num(s.cores_used, ".2f"),
                    "pool busy share": _num(None if s.pool_busy_share is None else 100 * s.pool_busy_share, ".0f", " %"),
                    "profiled median": _num(s.median_ms, ".2f", " ms"),
                    "branches could give": _could_give(s),
                    "measured ÷ could give": NONE if vs is None else f"{100 * vs.share:.0f} % of {vs.bound:.2f}×"
                    + (" (its threads)" if vs.over else ""),
                    "the gap explained": _gap_cell(s),
                }[title])  # fmt: skip
            rows.append((title, cells))
        devices = list(dict.fromkeys(d for s in runs for d in s.peak_bytes))
        for d in devices:
            rows.append(
                (
                    f"peak memory {d}",
                    [format_bytes(s.peak_bytes[d]) if d in s.peak_bytes else NONE for s in runs],
                )
            )
        return rows

    def _fill_summary(self) -> None:
        table = self.summary_table
        rows = self.summary_rows()
        tips = dict(SUMMARY_ROWS)
        table.clear()
        table.setRowCount(len(rows))
        table.setColumnCount(len(self.summaries))
        table.setHorizontalHeaderLabels([self.column_title(k) for k in range(len(self.summaries))])
        table.setVerticalHeaderLabels([title for title, _ in rows])
        for k in range(len(self.summaries)):
            table.horizontalHeaderItem(k).setToolTip(f"{self.column_title(k)}: {self.summaries[k].label}")
        for r, (title, cells) in enumerate(rows):
            tip = tips.get(title, "the highest total allocated on this device")
            table.verticalHeaderItem(r).setToolTip(f"{title}: {tip}")  # the title whole where it is elided
            for k, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(self._cell_tip(title, k, text))
                table.setItem(r, k, item)
        table.fit_columns()  # long labels wrap rather than widen a column out of sight

    def column_title(self, k: int) -> str:
        """"run 1", "run 0 (baseline)", "run 2 · starved"."""
        return f"run {k}" + (" (baseline)" if k == self.baseline else "") + (" · starved" if self.summaries[k].starved else "")

    def _cell_tip(self, title: str, k: int, text: str) -> str:
        """A summary cell's tooltip: its text, the prediction's whole sentence in its rows."""
        pred = self.summaries[k].prediction
        if title == "branches could give" and pred is not None:
            return prediction_text(pred)
        gap = self.summaries[k].gap
        if title == "the gap explained" and gap is not None:
            return gap.text()
        if title == "measured ÷ could give":
            speedups, _ = compare_summaries(self.summaries, self.baseline)
            vs = self._vs_prediction(speedups, k)
            if vs is not None:
                return vs.text()
        if title == "speedup in parts" and k < len(self.parts) and self.parts[k] is not None:
            return self._parts_sentence(k)
        return text

    # ---- the op diff --------------------------------------------------------------------------
    def _fill_ops(self) -> None:
        model = self.ops_model
        model.clear()
        n = len(self.summaries)
        headers = ["op", "Δ total ms"]
        for k in range(n):
            headers += [f"count {k}", f"total ms {k}", f"self ms {k}"]
        model.setHorizontalHeaderLabels(headers)
        for op in self.ops:
            row = [self._text_item(op.name), self._number_item(op.spread_us / 1000.0, ".3f")]
            for k in range(n):
                row += [
                    self._number_item(op.count[k], "d"),
                    self._number_item(op.total_us[k] / 1000.0, ".3f"),
                    self._number_item(op.self_us[k] / 1000.0, ".3f"),
                ]
            model.appendRow(row)
        self.ops_view.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
        self.ops_view.resizeColumnsToContents()

    @staticmethod
    def _text_item(text: str) -> QStandardItem:
        item = QStandardItem(text)
        item.setData(text, SORT_ROLE)
        item.setToolTip(text)
        return item

    @staticmethod
    def _number_item(value: float, fmt: str) -> QStandardItem:
        item = QStandardItem(format(value, fmt))
        item.setData(float(value), SORT_ROLE)
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return item
