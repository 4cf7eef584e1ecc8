"""Tables beside the timeline: the ops of a selected time range, and the profiled steps.

Two tabs of sortable tables over `profiling.trace.ranges`: "Selected range" (per op and lane: count,
total and self time inside the range a Shift+drag on the timeline chose; an op or a kernel named as
its timeline block says it, `op_label`, whole on hover) and "Steps" (each profiled
step's duration and each branch's time within it, the branches in the legend's order). Double-click
a step to get `stepActivated(start_ns, end_ns)`, an op to get `opActivated(name)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QEvent, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.natural import natural_key
from branchscope.profiling.trace.ranges import OpRow, StepRow, branch_order, range_ops, step_table
from branchscope.widgets.branch_legend import format_ms
from branchscope.widgets.timeline_labels import bare_function

_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
_Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Column:
    """A table column: its header, how a value is shown (values are formatted only when a row is
    on screen: a range can hold tens of thousands of rows), and whether it is a number."""

    header: str
    fmt: Callable[[Any], str] = str
    numeric: bool = False
    #: What a value sorts by (default: numbers as they are, texts by `natural_key`).
    key: Callable[[Any], Any] | None = None


class RowsModel(QAbstractTableModel):
    """Rows of values under `Column`s; Qt's `sort` orders them by each column's key."""

    def __init__(self, columns: Sequence[Column], parent: Any = None):
        super().__init__(parent)
        self.columns = list(columns)
        self.values: list[Sequence[Any]] = []
        self.tip: Callable[[int, int], str] | None = None
        #: Row `r` of the table shows item `order[r]` of what `set_rows` was given.
        self.order: list[int] = []

    def set_rows(self, values: list[Sequence[Any]], tip: Callable[[int, int], str] | None = None) -> None:
        """The rows' values, one per column; `tip(item, column)` gives a cell's tooltip."""
        self.beginResetModel()
        self.values, self.tip = values, tip
        self.order = list(range(len(values)))
        self.endResetModel()

    def set_columns(self, columns: Sequence[Column]) -> None:
        self.beginResetModel()
        self.columns = list(columns)
        self.values, self.tip, self.order = [], None, []
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else len(self.values)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else len(self.columns)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r, c = self.order[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.columns[c].fmt(self.values[r][c])
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(_RIGHT if self.columns[c].numeric else _LEFT)
        if role == Qt.ItemDataRole.ToolTipRole:
            return (self.tip(r, c) if self.tip is not None else "") or None
        if role == Qt.ItemDataRole.UserRole:
            return self.values[r][c]
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:  # noqa: N802 (Qt API)
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section].header
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(self.columns):
            return
        self.layoutAboutToBeChanged.emit()
        col = self.columns[column]
        by = (
            col.key
            if col.key is not None
            else (lambda v: v)
            if col.numeric
            else (lambda v: natural_key(str(v)))
        )
        self.order.sort(
            key=lambda r: by(self.values[r][column]), reverse=order == Qt.SortOrder.DescendingOrder
        )
        self.layoutChanged.emit()

    def item(self, row: int) -> int:
        """What the table's row `row` shows: its index in the rows given to `set_rows`."""
        return self.order[row]


#: The most of the table's width a name column takes when fitted: the numbers beside it stay in view
#: (a long op or branch name is cut in its middle, whole in its tooltip).
NAME_SHARE = 0.45


def _fit_columns(view: QTableView) -> None:
    """Columns fitted to their contents, the first (the names) never wider than NAME_SHARE of the view."""
    view.resizeColumnsToContents()
    cap = max(80, int(view.viewport().width() * NAME_SHARE))
    if view.columnWidth(0) > cap:
        view.setColumnWidth(0, cap)


def _table(model: RowsModel) -> QTableView:
    view = QTableView()
    view.setModel(model)
    view.setSortingEnabled(True)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.setAlternatingRowColors(True)
    view.verticalHeader().setVisible(False)
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    view.horizontalHeader().setStretchLastSection(True)
    view.setWordWrap(False)
    view.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # both ends of "branch: a -> … -> z" tell apart
    view.horizontalHeader().setResizeContentsPrecision(200)  # fit columns to the first rows, not all
    return view


def op_label(name: str) -> str:
    """An op's or a kernel's name as the Op column shows it: as its timeline block says it
    (`bare_function`: `void permute_pooled_embs_kernel<float>(…)` → `permute_pooled_embs_kernel`),
    the whole name on hover; a name with nothing left of it stays whole."""
    return bare_function(name) or name


#: The numbers before the lane: they matter most, and a side panel is narrow. Ops sort by what
#: their rows say.
RANGE_COLUMNS = (
    Column("Op", op_label, key=lambda name: natural_key(op_label(name))),
    Column("Total", format_ms, True),
    Column("Self", format_ms, True),
    Column("Count", "{:,}".format, True),
    Column("Lane"),
)
RANGE_HINT = "Shift+drag on the timeline to select a time range."


class RangePanel(QWidget):
    """The two tables (see the module docstring). `set_trace(trace)`, then `set_range(t0, t1)`."""

    #: A step's row was double-clicked: its interval in the trace's clock.
    stepActivated = Signal("qint64", "qint64")
    #: An op's row was double-clicked: its name.
    opActivated = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.trace: Trace | None = None
        self.range: tuple[int, int] | None = None
        self.range_rows: list[OpRow] = []
        self.step_rows: list[StepRow] = []
        self.branches: list[str] = []
        self.range_label = QLabel(RANGE_HINT)
        self.range_label.setWordWrap(True)
        self.range_model = RowsModel(RANGE_COLUMNS, self)
        self.range_view = _table(self.range_model)
        self.steps_label = QLabel("")
        self.steps_label.setWordWrap(True)
        self.steps_model = RowsModel((), self)
        self.steps_view = _table(self.steps_model)
        self.tabs = QTabWidget(self)
        for label, view, title in (
            (self.range_label, self.range_view, "Selected range"),
            (self.steps_label, self.steps_view, "Steps"),
        ):
            page = QWidget()
            lay = QVBoxLayout(page)
            lay.setContentsMargins(4, 4, 4, 4)
            lay.addWidget(label)
            lay.addWidget(view, 1)
            self.tabs.addTab(page, title)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.tabs)
        self.range_view.doubleClicked.connect(self._op_double_clicked)
        self.steps_view.doubleClicked.connect(self._step_double_clicked)
        self.set_trace(None)

    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() == QEvent.Type.FontChange and hasattr(self, "steps_view"):
            for view in (self.range_view, self.steps_view):
                view.resizeColumnsToContents()  # the columns were fitted to the old font

    # ---- data -------------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show `trace`'s steps and clear the range (`origin_ns`: the panel protocol's, unused)."""
        self.trace = trace
        self.branches = branch_order(trace) if trace is not None else []
        self.step_rows = step_table(trace) if trace is not None else []
        self._fill_steps()
        self.clear_range()

    def has_data(self) -> bool:
        return self.trace is not None and len(self.trace) > 0

    @property
    def no_data_text(self) -> str:
        return "no events in this trace"

    def set_range(self, start_ns: int, end_ns: int) -> None:
        """Tabulate the ops of [start_ns, end_ns) of the trace's clock and show that tab."""
        if self.trace is None:
            return
        t0, t1 = sorted((int(start_ns), int(end_ns)))
        self.range = (t0, t1)
        self.range_rows = range_ops(self.trace, t0, t1)
        first = self.trace.span()[0]
        self.range_label.setText(
            f"{format_ms(t1 - t0)} selected, from {format_ms(t0 - first)} to {format_ms(t1 - first)} "
            f"after the trace's first event: {len(self.range_rows):,} ops × lanes."
        )
        span = max(1, t1 - t0)
        rows = self.range_rows

        def tip(item: int, column: int) -> str:
            r = rows[item]
            if column in (1, 2):
                return f"{100 * r.total_ns / span:.1f}% of the range; self {100 * r.self_ns / span:.1f}%"
            return r.name if column == 0 else r.lane_label if column == 4 else ""

        self.range_model.set_rows([(r.name, r.total_ns, r.self_ns, r.count, r.lane_label) for r in rows], tip)
        self.range_view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
        _fit_columns(self.range_view)
        self.tabs.setCurrentIndex(0)

    def clear_range(self) -> None:
        self.range = None
        self.range_rows = []
        self.range_label.setText(RANGE_HINT)
        self.range_model.set_rows([])

    def _fill_steps(self) -> None:
        branches = self.branches
        self.steps_model.set_columns(
            [
                Column("Step"),
                Column("Duration", format_ms, True),
                *(Column(b, format_ms, True) for b in branches),
            ]
        )
        rows = self.step_rows

        def tip(item: int, column: int) -> str:
            r = rows[item]
            if column < 2:
                return r.label if column == 0 else ""
            b = branches[column - 2]
            return f"{b}: {100 * r.branch_ns.get(b, 0) / max(1, r.dur_ns):.0f}% of the step"

        self.steps_model.set_rows(
            [(r.label, r.dur_ns, *(r.branch_ns.get(b, 0) for b in branches)) for r in rows], tip
        )
        self.steps_view.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # time order
        self.steps_view.resizeColumnsToContents()
        if self.trace is None:
            self.steps_label.setText("")
        elif not self.step_rows:
            self.steps_label.setText('No profiled steps ("step N" annotations) in this trace.')
        else:
            self.steps_label.setText(
                f"{len(self.step_rows)} profiled steps; branch columns: each branch's annotations within the step."
            )

    def _op_double_clicked(self, index: QModelIndex) -> None:
        self.opActivated.emit(self.range_rows[self.range_model.item(index.row())].name)

    def _step_double_clicked(self, index: QModelIndex) -> None:
        r = self.step_rows[self.steps_model.item(index.row())]
        self.stepActivated.emit(r.start_ns, r.start_ns + r.dur_ns)
