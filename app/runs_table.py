"""The runs list: a Qt table model over `app.runs.Runs`, and the view the window shows it in.

Columns: #, run (label and mode; its tooltip the spec and the trace path), threads (inter-op ×
intra-op, or "file"), median step, speedup against the baseline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtWidgets import QHeaderView, QTreeView, QWidget

from branchscope.app.runs import Runs

COLUMNS = ["#", "run", "threads", "median", "speedup"]
HEADER_TIPS = {
    2: "inter-op × intra-op threads",
    3: "median profiled step",
    4: "median step of the model's first sequential run ÷ this run's",
}
RIGHT_ALIGNED = (0, 3, 4)
VIEW_TIP = "speedup: median step of the model's first sequential run ÷ this run's"

_Index = QModelIndex | QPersistentModelIndex


class RunsTableModel(QAbstractTableModel):
    """`Runs` as rows (a `RunsObserver`: it follows every change of the runs)."""

    def __init__(self, runs: Runs, parent=None):
        super().__init__(parent)
        self.runs = runs
        runs.add_observer(self)

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
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(section)
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.runs):
            return None
        k, col = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(k, col)
        if role == Qt.ItemDataRole.ToolTipRole and col == 1:
            e = self.runs[k]
            if e.spec is None:
                return str(e.trace_path)
            return f"{e.label}, {e.spec.mode}, {e.spec.steps} steps\n{e.trace_path}"
        if role == Qt.ItemDataRole.TextAlignmentRole and col in RIGHT_ALIGNED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def text(self, k: int, col: int) -> str:
        """What row k shows in column `col`."""
        e = self.runs[k]
        if col == 0:
            return str(k + 1)
        if col == 1:
            return e.label if e.spec is None else f"{e.label} · {e.spec.mode}"
        if col == 2:
            return "file" if e.spec is None else f"{e.spec.interop}×{e.spec.intra}"
        if col == 3:
            m = e.median_ms
            return f"{m:.1f} ms" if m is not None else "–"
        if col == 4:
            s = self.runs.speedup(k)
            return f"{s:.2f}×" if s is not None else "–"
        return ""

    def row_texts(self, k: int) -> list[str]:
        return [self.text(k, c) for c in range(len(COLUMNS))]


class RunsView(QTreeView):
    """The runs list. `rowChosen(k)` when the user makes row k current (not on `select_row`)."""

    rowChosen = Signal(int)

    def __init__(self, model: RunsTableModel, parent: QWidget | None = None):
        super().__init__(parent)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setItemsExpandable(False)
        self.setModel(model)
        header = self.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.setToolTip(VIEW_TIP)
        self._quiet = False
        self.selectionModel().currentRowChanged.connect(self._on_current_row_changed)

    def _on_current_row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if not self._quiet and current.isValid():
            self.rowChosen.emit(current.row())

    @contextmanager
    def quietly(self) -> Iterator[None]:
        """No `rowChosen` meanwhile (rows removed, or made current by the window itself)."""
        quiet, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = quiet

    def select_row(self, k: int) -> None:
        """Make row k current (-1: none) without `rowChosen` (callers show entries themselves)."""
        with self.quietly():
            model = self.model()
            index = model.index(k, 0) if 0 <= k < model.rowCount() else QModelIndex()
            flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            self.selectionModel().setCurrentIndex(index, flags)

    def current_row(self) -> int:
        index = self.currentIndex()
        return index.row() if index.isValid() else -1

    def topLevelItemCount(self) -> int:  # noqa: N802 - the QTreeWidget name, for callers from before
        return self.model().rowCount()
