"""The runs list: a Qt table model over `app.runs.Runs`, and the view the window shows it in.

Columns: #, run (the model; a warning mark when other processes took more than about a fifth of
the cores while it timed its steps, "machine busy" and the load in its tooltip, with the spec and
the trace path), mode (the mode and inter-op × intra-op threads, "fork 2×1", "threads 2×1",
"sequential 1×1": rows of one model differ there, never cut; "file" for a trace that does not say),
speedup against the model's baseline ("baseline" on that row, which is bold; the number alone,
greyed where the two runs' interquartile ranges overlap: its notes, within noise, machine busy and
a fork or threads run's parts, are in the cell's tooltip), median step (unprofiled, with its
interquartile range and step count). The speedup header names the baseline ("speedup vs #3
sequential 1×1", or "no baseline this session"), each cell's tooltip names its own and when it
ran, and a change that moves other runs' baseline is said once (`baselineMoved`, which the window
shows in its status bar).

The view selects several rows (extended selection): one row chosen is `rowChosen(k)`, as before;
"Compare selected" (context menu, or `compare_selected()`) is `compareRequested(rows)`. Its context
menu also sets a row as its model's baseline, goes back to the default baseline, and asks for the
sequential 1×1 run a model lacks (`baselineRunRequested(spec)`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction, QContextMenuEvent, QFont, QHelpEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHeaderView,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolTip,
    QTreeView,
    QWidget,
)

from branchscope.app.run_entry import Entry
from branchscope.app.runs import Runs
from branchscope.app.runs_words import load_words
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.widgets.theme import theme

COLUMNS = ["#", "run", "mode", "speedup", "median step"]
NAME, MODE, SPEEDUP, STEP = 1, 2, 3, 4
#: Columns whose cells, when cut, show their value and "(…)" for the notes in parentheses.
SHORTENED = (SPEEDUP, STEP)
#: The run column keeps room for this many characters (of the view's font, on average) before the
#: speedup and the median step get more than their short form.
NAME_CHARS = 12
#: A header longer than this many characters may be cut after its first word.
SHORT_HEADER = 8
SPEEDUP_RULE = (
    "the baseline's median unprofiled step ÷ this run's; the baseline is the model's latest sequential 1×1 "
    "run made in this window (a sweep cell's: its sweep's sequential 1×1 cell) unless you set one "
    "(right-click a row: a run from an earlier session counts only when you set it)"
)
HEADER_TIPS = {
    MODE: "the mode, then its inter-op × intra-op threads",
    SPEEDUP: SPEEDUP_RULE,
    STEP: "median step timed without the profiler, with its interquartile range (half the steps fall in it)",
}
RIGHT_ALIGNED = (0, 3, 4)
VIEW_TIP = f"speedup: {SPEEDUP_RULE}"
NOISE_TIP = (
    "within noise: the two runs' interquartile ranges overlap, so the difference of their medians "
    "is smaller than their step-to-step variation (the speedup is greyed)"
)

BUSY_TIP = (
    "machine busy: other processes took more than about a fifth of the cores while this run or its "
    "baseline timed its steps, so the two times are not comparable"
)

#: Under a run's parts in its speedup's tooltip.
PARTS_TIP = (
    "parts: sequential 1×J ÷ M 1×J is its plan, M 1×J ÷ M I×J its threads; from the listed runs' medians, "
    "unpaired (Compare, then Measure these two paired, or branchscope speedup, measures them paired)"
)

_Index = QModelIndex | QPersistentModelIndex


def ms(value: float, like: float | None = None) -> str:
    """Milliseconds with three significant digits (or as many decimals as `like` would get)."""
    ref = abs(value if like is None else like)
    decimals = 0 if ref >= 100 else 1 if ref >= 10 else 2 if ref >= 1 else 3
    return f"{value:.{decimals}f}"


def short_text(text: str) -> str:
    """A cell where the whole does not fit: its value, what it says in parentheses left to the
    tooltip (a median step's spread and count: "40.0 ms"). A speedup's cell is its number alone
    already, its notes in its tooltip."""
    return text.partition(" (")[0]


def mode_text(e: Entry) -> str:
    """The mode column's cell: "fork 2×1", "sequential 1×1"; "file" when neither is known."""
    threads = f"{e.threads[0]}×{e.threads[1]}" if e.threads else ""
    return " ".join(x for x in (e.mode, threads) if x) or "file"


def step_text(stats: StepStats) -> str:
    """'12.3 ms (IQR 11.9–12.8, 20 steps)'."""
    m = stats.median
    steps = f"{stats.n} step{'s' if stats.n != 1 else ''}"
    return f"{ms(m)} ms (IQR {ms(stats.q1, m)}–{ms(stats.q3, m)}, {steps})"


class RunsTableModel(QAbstractTableModel):
    """`Runs` as rows (a `RunsObserver`: it follows every change of the runs)."""

    #: A change moved the baseline of runs compared with another one: the sentence saying so.
    baselineMoved = Signal(str)

    def __init__(self, runs: Runs, parent=None):
        super().__init__(parent)
        self.runs = runs
        runs.add_observer(self)
        runs.add_baseline_listener(self.baselineMoved.emit)

    # ---- RunsObserver -----------------------------------------------------------------------
    def rows_about_to_be_inserted(self, first: int, last: int) -> None:
        self.beginInsertRows(QModelIndex(), first, last)

    def rows_inserted(self) -> None:
        self.endInsertRows()

    def rows_about_to_be_removed(self, first: int, last: int) -> None:
        self.beginRemoveRows(QModelIndex(), first, last)

    def rows_removed(self) -> None:
        self.endRemoveRows()

    def rows_changed(self, first: int, last: int) -> None:
        self.dataChanged.emit(self.index(first, 0), self.index(last, len(COLUMNS) - 1))
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, SPEEDUP, SPEEDUP)

    # ---- QAbstractTableModel ----------------------------------------------------------------
    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802 (Qt API)
        return 0 if parent.isValid() else len(self.runs)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802 (Qt API)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:  # noqa: N802
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.runs.header_text() if section == SPEEDUP else COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:  # the speedup's header, cut, is whole in its tooltip
            return f"{self.runs.header_text()}: {SPEEDUP_RULE}" if section == SPEEDUP else HEADER_TIPS.get(section)
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.runs):
            return None
        k, col = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(k, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tooltip(k, col)
        if role == Qt.ItemDataRole.FontRole and self.runs.is_baseline(k):
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.DecorationRole and col == NAME and self.runs[k].busy:
            return QApplication.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)
        if role == Qt.ItemDataRole.ForegroundRole and col == SPEEDUP and self.runs.within_noise(k):
            return theme().muted
        if role == Qt.ItemDataRole.TextAlignmentRole and col in RIGHT_ALIGNED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def text(self, k: int, col: int) -> str:
        """What row k shows in column `col`."""
        e = self.runs[k]
        if col == 0:
            return str(k + 1)
        if col == NAME:
            return e.label
        if col == MODE:
            return mode_text(e)
        if col == STEP:
            if e.stats is not None:
                return step_text(e.stats)
            m = e.median_ms
            return f"{ms(m)} ms profiled" if m is not None else "–"
        if col == SPEEDUP:  # the number; its notes are in its tooltip
            return self.runs.speedup_text(k).partition(" (")[0]
        return ""

    def tooltip(self, k: int, col: int) -> str | None:
        e = self.runs[k]
        if col in (NAME, MODE):
            tip = str(e.trace_path) if e.spec is None else f"{e.label}, {e.spec.mode}, {e.spec.options.steps} steps\n{e.trace_path}"
            if e.run is not None and e.run.load is not None:
                tip += "\n" + e.run.load.text()
            return f"machine busy while it timed its steps: times not comparable with a quiet run's\n{tip}" if e.busy else tip
        if col == STEP:
            if e.stats is not None:
                s = e.stats
                return (
                    f"{s.n} steps timed without the profiler: median {ms(s.median)} ms, "
                    f"min {ms(s.min, s.median)}, quartiles {ms(s.q1, s.median)}–{ms(s.q3, s.median)}, "
                    f"max {ms(s.max, s.median)} ms"
                )
            if e.median_ms is not None:
                return "median profiled step: this run has no steps timed without the profiler"
            return None
        if col == SPEEDUP:
            parts = self.runs.parts_text(k)
            tip = self._speedup_tip(k)
            return tip if parts is None else f"{tip}\n{parts}\n{PARTS_TIP}"
        return None

    def _speedup_tip(self, k: int) -> str:
        b = self.runs.baseline_of(k)
        e = self.runs[k]
        if e.stats is None:
            return "no speedup: this entry has no steps timed without the profiler"
        if b is None:
            why = self.runs.no_baseline_text(k)
            return why if "right-click" in why else why + " (right-click a row to set one, or to run one)"
        said = self.runs.baseline_text(k)
        if b == k:
            return f"the baseline: {said}"
        base = self.runs[b]
        if base.stats is None:
            return f"no speedup: #{b + 1} has no steps timed without the profiler"
        s = self.runs.speedup(k)
        tip = (
            f"{s:.2f}× vs {said}: {ms(base.stats.median)} ms ÷ this run's {ms(e.stats.median)} ms"
            if s is not None
            else f"vs {said}"
        )
        if self.runs.within_noise(k):
            tip += "\n" + NOISE_TIP
        if self.runs.busy_comparison(k):
            tip += "\n" + BUSY_TIP + "".join(
                f"\n{who}: {load_words(x)}" for who, x in (("this run", e), ("the baseline", base)) if x.busy
            )
        return tip

    def row_texts(self, k: int) -> list[str]:
        return [self.text(k, c) for c in range(len(COLUMNS))]


def _text_room(option: QStyleOptionViewItem, widget: QWidget | None) -> int:
    """The pixels a cell's text has in `option.rect` (the style's text rectangle less its margins,
    where the style elides it)."""
    style = widget.style() if widget is not None else None
    if style is None:
        return option.rect.width()
    rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, widget)
    margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget) + 1
    return rect.width() - 2 * margin


class RunsDelegate(QStyledItemDelegate):
    """The runs list's cells: the run's name cut in the middle (its model and its mode stay in
    view), a speedup or a median step cut to its value ("1.03× (…)"), and a cut cell's whole text
    in its tooltip, over what the model's tooltip says."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: _Index) -> None:  # noqa: N802 (Qt API)
        super().initStyleOption(option, index)
        if index.column() == NAME:
            option.textElideMode = Qt.TextElideMode.ElideMiddle
        elif index.column() in SHORTENED and option.fontMetrics.horizontalAdvance(option.text) > _text_room(
            option, option.widget
        ):
            option.text = short_text(option.text)

    def helpEvent(self, event: QHelpEvent, view: QAbstractItemView, option: QStyleOptionViewItem, index: _Index) -> bool:  # noqa: N802
        if event is None or event.type() != QEvent.Type.ToolTip or not isinstance(view, RunsView):
            return super().helpEvent(event, view, option, index)
        tip = view.cell_tooltip(index)
        if tip:
            QToolTip.showText(event.globalPos(), tip, view)
        else:
            QToolTip.hideText()
            event.ignore()
        return True


class RunsView(QTreeView):
    """The runs list (see the module docstring). `rowChosen(k)` when the user makes row k the one
    selected row (not on `select_row`)."""

    rowChosen = Signal(int)
    #: Compare these rows (two or more, in list order).
    compareRequested = Signal(list)
    #: Run this `RunSpec`: the sequential 1×1 baseline a model lacks.
    baselineRunRequested = Signal(object)

    def __init__(self, model: RunsTableModel, parent: QWidget | None = None):
        super().__init__(parent)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setItemsExpandable(False)
        self.setModel(model)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setItemDelegate(RunsDelegate(self))
        header = self.header()
        # The columns are sized by `fit_columns` whenever the view's width, the rows or the font
        # change: the run's name first, the others to their contents or their short form.
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header.setMinimumSectionSize(16)
        header.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setToolTip(VIEW_TIP)
        self._quiet = False
        self.selectionModel().selectionChanged.connect(self._on_selection_changed)
        for changed in (model.rowsInserted, model.rowsRemoved, model.modelReset, model.layoutChanged):
            changed.connect(self.fit_columns)
        model.dataChanged.connect(self.fit_columns)
        model.headerDataChanged.connect(self.fit_columns)
        self.fit_columns()

    # ---- columns that fit --------------------------------------------------------------------
    def _option(self, index: QModelIndex) -> QStyleOptionViewItem:
        """The style option `index`'s cell is painted with (its rectangle where it is now)."""
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        option.rect = self.visualRect(index)
        self.itemDelegate().initStyleOption(option, index)
        return option

    def _cell_width(self, index: QModelIndex, text: str) -> int:
        """The width a cell needs to show `text` whole, margins included."""
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        QStyledItemDelegate.initStyleOption(self.itemDelegate(), option, index)
        margin = self.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self) + 1
        mark = 0  # a row's mark (machine busy) beside its text
        if option.features & QStyleOptionViewItem.ViewItemFeature.HasDecoration:
            mark = option.decorationSize.width() + 2 * margin
        return option.fontMetrics.horizontalAdvance(text) + 2 * margin + 4 + mark  # + what eliding rounds

    def _name_width(self, index: QModelIndex, n: int) -> int:
        """The width a name's cell needs to show n characters of it, cut in the middle as the view
        cuts it ("incept…models"), its mark and margins included."""
        text = index.data() or ""
        return self._cell_width(index, text if len(text) <= n else f"{text[: (n + 1) // 2]}…{text[-(n // 2):]}") + 2

    def _header_width(self, text: str) -> int:
        margin = self.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, self.header())
        return self.header().fontMetrics().horizontalAdvance(text) + 2 * margin + 2

    def column_widths(self, width: int) -> list[int]:
        """The columns' widths in `width` pixels: each gets its least first (#, threads and the
        headers of one word whole; the run's name `NAME_CHARS` of its characters, or all of it; a median
        step its short form, "40.0 ms"), then the name all it needs, the speedup
        and the median step theirs, and the name what is left. Where the least does not fit,
        the list scrolls sideways."""
        model = self.model()
        n = len(COLUMNS)
        rows = range(model.rowCount())
        full = [max([self._cell_width(model.index(r, c), model.index(r, c).data() or "") for r in rows], default=0) for c in range(n)]
        short = [max([self._cell_width(model.index(r, c), short_text(model.index(r, c).data() or "")) for r in rows], default=0) for c in range(n)]
        heads = [str(model.headerData(c, Qt.Orientation.Horizontal) or "") for c in range(n)]
        # a long header keeps its first word whole ("speedup…"), the rest in its tooltip
        head_least = [self._header_width(h if len(h) <= SHORT_HEADER else h.split(" ")[0] + "…") for h in heads]
        head_full = [self._header_width(h) for h in heads]
        # NAME_CHARS characters of the name, on average, in its row's font (the baseline's is bold)
        name_least = max([self._name_width(model.index(r, NAME), NAME_CHARS) for r in rows], default=0)
        least = [max(full[c], head_full[c]) for c in range(n)]
        least[NAME] = max(head_full[NAME], min(full[NAME], name_least))
        for c in SHORTENED:
            least[c] = max(short[c], head_least[c])
        widths = list(least)
        left = width - sum(widths)
        for c in (NAME, SPEEDUP, STEP):  # then each up to all it needs, in this order
            more = max(0, min(left, max(full[c], least[c]) - widths[c]))
            widths[c] += more
            left -= more
        for c in SHORTENED:  # a header whole where there is room
            more = max(0, min(left, head_full[c] - widths[c]))
            widths[c] += more
            left -= more
        widths[NAME] += max(0, left)
        return widths

    def fit_columns(self, *_args: Any) -> None:
        """Size the columns to the viewport's width (`column_widths`)."""
        header = self.header()
        for c, w in enumerate(self.column_widths(self.viewport().width())):
            if header.sectionSize(c) != w:
                header.resizeSection(c, w)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self.fit_columns()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self.fit_columns()

    def shown_text(self, row: int, col: int) -> str:
        """What the cell shows in the width its column has now (elided as the style elides it)."""
        index = self.model().index(row, col)
        option = self._option(index)
        return option.fontMetrics.elidedText(option.text, option.textElideMode, _text_room(option, self))

    def cell_tooltip(self, index: _Index) -> str | None:
        """A cell's tooltip: its whole text where the cell shows less, then the model's tooltip."""
        if not index.isValid():
            return None
        whole = index.data(Qt.ItemDataRole.DisplayRole) or ""
        tip = index.data(Qt.ItemDataRole.ToolTipRole)
        if whole and self.shown_text(index.row(), index.column()) != whole:
            return whole if not tip else f"{whole}\n{tip}"
        return tip

    @property
    def runs(self) -> Runs:
        model = self.model()
        assert isinstance(model, RunsTableModel)
        return model.runs

    def _on_selection_changed(self, _selected: QItemSelection, _deselected: QItemSelection) -> None:
        rows = self.selected_rows()
        if not self._quiet and len(rows) == 1:
            self.rowChosen.emit(rows[0])

    @contextmanager
    def quietly(self) -> Iterator[None]:
        """No `rowChosen` meanwhile (rows removed, or made current by the window itself)."""
        quiet, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = quiet

    def select_row(self, k: int) -> None:
        """Make row k current and the only one selected (-1: none) without `rowChosen` (callers
        show entries themselves)."""
        with self.quietly():
            model = self.model()
            index = model.index(k, 0) if 0 <= k < model.rowCount() else QModelIndex()
            flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            self.selectionModel().setCurrentIndex(index, flags)
            if not index.isValid():
                self.selectionModel().clearSelection()

    def current_row(self) -> int:
        index = self.currentIndex()
        return index.row() if index.isValid() else -1

    def selected_rows(self) -> list[int]:
        """The selected rows, in list order."""
        return sorted(i.row() for i in self.selectionModel().selectedRows())

    def topLevelItemCount(self) -> int:  # noqa: N802 - the QTreeWidget name, for callers from before
        return self.model().rowCount()

    # ---- actions ----------------------------------------------------------------------------
    def compare_selected(self) -> bool:
        """`compareRequested(rows)` when two or more rows are selected; False otherwise."""
        rows = self.selected_rows()
        if len(rows) < 2:
            return False
        self.compareRequested.emit(rows)
        return True

    def set_baseline_row(self, k: int) -> None:
        """Row k becomes the baseline of its model's runs."""
        self.runs.set_baseline(k)

    def reset_baseline_row(self, k: int) -> None:
        """Row k's model goes back to its default baseline (its sequential 1×1 run)."""
        self.runs.reset_baseline(k)

    def run_missing_baseline(self, k: int) -> bool:
        """`baselineRunRequested(spec)` with the sequential 1×1 run row k's model lacks; False if none."""
        spec = self.runs.missing_baseline(k)
        if spec is None:
            return False
        self.baselineRunRequested.emit(spec)
        return True

    def context_menu(self, k: int) -> QMenu:
        """The menu for row k (-1: no row): baseline actions, and comparing the selected rows."""
        menu = QMenu(self)
        runs = self.runs
        if 0 <= k < len(runs):
            act = QAction("Set as baseline", menu)
            act.setCheckable(True)
            act.setChecked(runs.is_baseline(k))
            act.setEnabled(not runs.is_baseline(k))
            act.setToolTip("compare every run of this model with this one")
            act.triggered.connect(lambda _checked=False: self.set_baseline_row(k))
            menu.addAction(act)
            act = QAction("Use the default baseline (sequential 1×1)", menu)
            act.setEnabled(runs.has_set_baseline(k))
            act.triggered.connect(lambda _checked=False: self.reset_baseline_row(k))
            menu.addAction(act)
            if runs.missing_baseline(k) is not None:
                act = QAction("Run the sequential 1×1 baseline", menu)
                act.triggered.connect(lambda _checked=False: self.run_missing_baseline(k))
                menu.addAction(act)
            menu.addSeparator()
        n = len(self.selected_rows())
        act = QAction(f"Compare selected ({n})" if n >= 2 else "Compare selected", menu)
        act.setEnabled(n >= 2)
        act.setToolTip("select two or more rows (Ctrl- or Shift-click) to compare them")
        act.triggered.connect(lambda _checked=False: self.compare_selected())
        menu.addAction(act)
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 (Qt API)
        index = self.indexAt(event.pos())
        menu = self.context_menu(index.row() if index.isValid() else -1)
        # popup, not exec: no nested event loop, which nothing in Python could interrupt
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(event.globalPos())
