"""Tables beside the timeline: the ops of a selected time range, and the profiled steps.

Two tabs of sortable tables over `profiling.trace.ranges`: "Selected range" (per op and lane: count,
total and self time inside the range a Shift+drag on the timeline chose) and "Steps" (each profiled
step's duration and each branch's time within it, the branches in the legend's order). Double-click
a step to get `stepActivated(start_ns, end_ns)`, an op to get `opActivated(name)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, Signal
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
from branchscope.profiling.trace.ranges import OpRow, StepRow, branch_order, range_ops, step_table
from branchscope.widgets.branch_legend import format_ms

_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
_Index = QModelIndex | QPersistentModelIndex


class RowsModel(QAbstractTableModel):
    """Rows of texts with a sort key per cell (numbers sort as numbers); `sort` is Qt's."""

    def __init__(self, headers: Sequence[str], numeric: Sequence[bool], parent: Any = None):
        super().__init__(parent)
        self.headers = list(headers)
        self.numeric = list(numeric)
        self.texts: list[list[str]] = []
        self.keys: list[list[Any]] = []
        self.tips: list[list[str]] = []
        #: Row `r` of the table shows item `order[r]` of what `set_rows` was given.
        self.order: list[int] = []

    def set_rows(
        self, texts: list[list[str]], keys: list[list[Any]], tips: list[list[str]] | None = None
    ) -> None:
        self.beginResetModel()
        self.texts, self.keys = texts, keys
        self.tips = tips if tips is not None else [[""] * len(self.headers) for _ in texts]
        self.order = list(range(len(texts)))
        self.endResetModel()

    def set_headers(self, headers: Sequence[str], numeric: Sequence[bool]) -> None:
        self.beginResetModel()
        self.headers, self.numeric = list(headers), list(numeric)
        self.texts, self.keys, self.tips, self.order = [], [], [], []
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else len(self.texts)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else len(self.headers)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r, c = self.order[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.texts[r][c]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(_RIGHT if self.numeric[c] else _LEFT)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tips[r][c] or None
        if role == Qt.ItemDataRole.UserRole:
            return self.keys[r][c]
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.headers[section]
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(self.headers):
            return
        self.layoutAboutToBeChanged.emit()
        self.order.sort(key=lambda r: self.keys[r][column], reverse=order == Qt.SortOrder.DescendingOrder)
        self.layoutChanged.emit()

    def item(self, row: int) -> int:
        """What the table's row `row` shows: its index in the rows given to `set_rows`."""
        return self.order[row]


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
    return view


#: The numbers before the lane: they matter most, and a side panel is narrow.
RANGE_HEADERS = ("Op", "Total", "Self", "Count", "Lane")
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
        self.range_model = RowsModel(RANGE_HEADERS, (False, True, True, True, False), self)
        self.range_view = _table(self.range_model)
        self.steps_label = QLabel("")
        self.steps_label.setWordWrap(True)
        self.steps_model = RowsModel(("Step", "Duration"), (False, True), self)
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
        texts, keys, tips = [], [], []
        span = max(1, t1 - t0)
        for r in self.range_rows:
            texts.append([r.name, format_ms(r.total_ns), format_ms(r.self_ns), f"{r.count:,}", r.lane_label])
            keys.append([r.name.lower(), r.total_ns, r.self_ns, r.count, r.lane_label.lower()])
            share = f"{100 * r.total_ns / span:.1f}% of the range; self {100 * r.self_ns / span:.1f}%"
            tips.append([r.name, share, share, "", r.lane_label])
        self.range_model.set_rows(texts, keys, tips)
        self.range_view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
        self.range_view.resizeColumnsToContents()
        self.tabs.setCurrentIndex(0)

    def clear_range(self) -> None:
        self.range = None
        self.range_rows = []
        self.range_label.setText(RANGE_HINT)
        self.range_model.set_rows([], [])

    def _fill_steps(self) -> None:
        headers = ["Step", "Duration", *self.branches]
        self.steps_model.set_headers(headers, [False] + [True] * (len(headers) - 1))
        texts, keys, tips = [], [], []
        for k, r in enumerate(self.step_rows):
            times = [r.branch_ns.get(b, 0) for b in self.branches]
            texts.append([r.label, format_ms(r.dur_ns), *(format_ms(t) for t in times)])
            keys.append([k, r.dur_ns, *times])
            share = [
                f"{b}: {100 * t / max(1, r.dur_ns):.0f}% of the step" for b, t in zip(self.branches, times)
            ]
            tips.append([r.label, "", *share])
        self.steps_model.set_rows(texts, keys, tips)
        self.steps_view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
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
