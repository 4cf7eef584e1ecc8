"""The memory events of one device in a time range, one row per allocation: the op (or allocation
site) that made it, its size, when it was allocated and freed (from the shown origin), and its
lifetime. An allocation the profile never saw freed, a free whose allocation came before profiling
began, and an allocation freed where the profiler missed it (its address allocated again) are
flagged: a tinted row that says which. The caption counts the allocations alive at some time in the
range and the most of them alive at once (never their sum: that can pass the device's peak). Every column sorts (by value, not by
its text); clicking a row says which op holds the memory (`whereActivated`, `eventActivated`).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from branchscope.profiling.trace.memory import Allocation, AllocationColumns, MemoryAnalysis
from branchscope.widgets.units import format_bytes, format_duration, format_offset

COLUMNS = ["op", "bytes", "allocated at", "freed at", "lifetime", "note"]
#: A flagged row's tint: readable under light and dark text alike.
FLAG_TINT = QColor(232, 163, 61, 70)
NEVER_FREED = "never freed in the profile"
BEFORE = "freed, allocated before profiling"
FREED_UNSEEN = "freed where the profiler missed it: by this time at the latest (its address reused)"
#: A device of a large job's rank whose events are not loaded (`rank_job`): nothing to list yet.
NOT_LOADED = "its rank is not loaded, so what it allocated is not known yet: a click on its bar loads it"


def note_of(a: Allocation) -> str:
    if a.alloc_ns is None:
        return BEFORE
    if a.freed_unseen:
        return FREED_UNSEEN
    if a.free_ns is None:
        return NEVER_FREED
    return ""


class AllocationModel(QAbstractTableModel):
    """Allocations as rows (see the module docstring); times shown from `origin_ns`.

    Rows are numbers into the analysis's columns (`MemoryAnalysis.rows_in_range`): a row's
    `Allocation` is built only when the view asks for it, and sorting is one numpy argsort over
    the columns, so a range of a million allocations shows and sorts in a blink."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.analysis: MemoryAnalysis | None = None
        self.device = ""
        self.order = np.zeros(0, dtype=np.int64)  # shown rows, top to bottom
        self.origin_ns = 0
        self.where_title = "op"
        self._built: dict[int, Allocation] = {}

    def set_rows(
        self, analysis: MemoryAnalysis | None, device: str, rows: np.ndarray, origin_ns: int, where_title: str = "op"
    ) -> None:
        self.beginResetModel()
        self.analysis, self.device = analysis, device
        self.order = np.asarray(rows, dtype=np.int64)
        self.origin_ns = int(origin_ns)
        self.where_title = where_title
        self._built = {}
        self.endResetModel()

    def allocation(self, r: int) -> Allocation:
        """The allocation shown on row r."""
        row = int(self.order[r])
        a = self._built.get(row)
        if a is None:
            assert self.analysis is not None
            if len(self._built) > 4096:  # only what was on screen lately
                self._built.clear()
            a = self._built[row] = self.analysis.allocation(self.device, row)
        return a

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort by a column's values (not its text), exact to the ns; ties keep their order, and
        the selection stays on its allocations."""
        cols = self.analysis.columns(self.device) if self.analysis is not None else None
        if cols is None or self.order.size < 2:
            return
        key = self._sort_key(cols, self.order, column)
        if order == Qt.SortOrder.DescendingOrder:  # ranks, negated: stable, and no int64 overflow
            key = -np.unique(key, return_inverse=True)[1].reshape(-1)
        perm = np.argsort(key, kind="stable")
        self.layoutAboutToBeChanged.emit()
        self.order = self.order[perm]
        moved_to = np.empty_like(perm)
        moved_to[perm] = np.arange(perm.size)
        before = self.persistentIndexList()
        self.changePersistentIndexList(before, [self.index(int(moved_to[i.row()]), i.column()) for i in before])
        self.layoutChanged.emit()

    def _sort_key(self, cols: AllocationColumns, rows: np.ndarray, column: int) -> np.ndarray:
        """int64 keys: times stay exact (as float64, ns since the epoch resolve only 256 ns)."""
        before, never = cols.alloc_idx[rows] < 0, cols.free_idx[rows] < 0
        if column == 0:  # by name, case-insensitive: the rank of each name among the analysis's
            assert self.analysis is not None
            lowered = [w.lower() for w in self.analysis.wheres]
            rank = np.empty(len(lowered), dtype=np.int64)
            rank[sorted(range(len(lowered)), key=lowered.__getitem__)] = np.arange(len(lowered))
            return rank[cols.where_id[rows]]
        if column == 1:
            return cols.bytes[rows]
        if column == 2:  # allocated before profiling: int64's least, first
            return cols.alloc_ns[rows]
        if column == 3:  # never freed: int64's greatest, last
            return cols.free_ns[rows]
        if column == 4:
            lifetime = cols.free_ns[rows] - np.where(before | never, 0, cols.alloc_ns[rows])
            return np.where(before | never, np.iinfo(np.int64).max, lifetime)
        # The note, in the order of its text: none, then BEFORE, then FREED_UNSEEN, then NEVER_FREED.
        return np.where(before, 1, np.where(never, 3, np.where(cols.freed_unseen[rows], 2, 0)))

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else int(self.order.size)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008 (Qt API)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802 (Qt API)
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.where_title if section == 0 else COLUMNS[section]
        return None

    def _offset(self, t: int | None, missing: str) -> str:
        return missing if t is None else format_offset(t - self.origin_ns)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        a = self.allocation(index.row())
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return a.where
            if col == 1:
                return format_bytes(a.bytes)
            if col == 2:
                return self._offset(a.alloc_ns, "before profiling")
            if col == 3:
                return self._offset(a.free_ns, "never freed")
            if col == 4:
                return "—" if a.lifetime_ns is None else format_duration(a.lifetime_ns)
            return note_of(a)
        if role == Qt.ItemDataRole.BackgroundRole and note_of(a):
            return FLAG_TINT
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (1, 2, 3, 4):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole and col == 0 and a.addr is not None:
            return f"{a.where}\naddress 0x{a.addr:x}"
        return None


class MemoryTable(QWidget):
    """A device's allocations in a time range (see the module docstring).

    `whereActivated(where)`: a row was clicked: the op (or site) that allocated it.
    `eventActivated(event)`: the same, as the enclosing op's index in the trace (rows with one).
    """

    whereActivated = Signal(str)
    eventActivated = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.analysis: MemoryAnalysis | None = None
        self.device: str | None = None
        self.caption = QLabel(self)
        self.caption.setWordWrap(True)
        self.model = AllocationModel(self)
        self.view = QTableView(self)
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)  # the header's clicks call `AllocationModel.sort`
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.verticalHeader().hide()
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.view.clicked.connect(self._activate)
        self.view.activated.connect(self._activate)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.caption)
        lay.addWidget(self.view, 1)
        self.set_analysis(None, None)

    def set_analysis(
        self,
        analysis: MemoryAnalysis | None,
        device: str | None,
        t0_ns: int | None = None,
        t1_ns: int | None = None,
        origin_ns: int | None = None,
    ) -> None:
        """Show `device`'s allocations alive in [t0_ns, t1_ns] (the trace's clock; None: its whole
        span), times from `origin_ns` (default: the trace's first event)."""
        self.analysis, self.device = analysis, device
        if analysis is None or device is None or device not in analysis.series:
            self.model.set_rows(None, "", np.zeros(0, dtype=np.int64), 0)
            self.caption.setText("" if analysis is None or device is None else f"{device}: {NOT_LOADED}")
            return
        start, end = analysis.trace.span()
        lo = int(start) if t0_ns is None else int(t0_ns)
        hi = int(end) if t1_ns is None else int(t1_ns)
        origin = int(start) if origin_ns is None else int(origin_ns)
        series = analysis.series.get(device)
        sites = series is not None and series.site_id is not None
        rows = analysis.rows_in_range(device, lo, hi)
        self.model.set_rows(analysis, device, rows, origin, "allocation site" if sites else "op")
        self.view.sortByColumn(2, Qt.SortOrder.AscendingOrder)
        cols = analysis.columns(device)
        n = int(rows.size)
        # Alive at some time in the range is not alive at once: their sum can be far above the peak.
        most = analysis.most_live_in_range(device, lo, hi)
        held = analysis.peak_in_range(device, lo, hi)
        at_once = (
            f", at most {format_bytes(most[0])} of them at once ({format_offset(most[1] - origin)})"
            if most is not None and n
            else ""
        )
        if at_once and held is not None and held[0] > most[0]:  # memory from before profiling, or missed frees
            at_once += f"; the device's total peaks at {format_bytes(held[0])} in the range"
        words = [
            f"{device}, {format_offset(lo - origin)} to {format_offset(hi - origin)}:",
            f"{n} allocation{'s' if n != 1 else ''} alive at some time{at_once}",
        ]
        before = int(np.count_nonzero(cols.alloc_idx[rows] < 0)) if cols else 0
        never = int(np.count_nonzero((cols.alloc_idx[rows] >= 0) & (cols.free_idx[rows] < 0))) if cols else 0
        unseen = int(np.count_nonzero(cols.freed_unseen[rows])) if cols else 0
        if never:
            words.append(f"· {never} never freed")
        if before:
            words.append(f"· {before} allocated before profiling")
        if unseen:
            words.append(f"· {unseen} freed where the profiler missed it")
        if series is not None and not series.has_addr:
            words = [f"{device}: its events carry no addresses, so allocations cannot be paired with frees"]
        self.caption.setText(" ".join(words))

    def rows(self) -> list[Allocation]:
        """The allocations as shown, top to bottom (sorted as the view is)."""
        return [self.model.allocation(r) for r in range(self.model.rowCount())]

    def flagged(self) -> list[tuple[Allocation, str]]:
        """The flagged rows, top to bottom, with what their note says."""
        return [(a, note_of(a)) for a in self.rows() if note_of(a)]

    def _activate(self, index: QModelIndex) -> None:
        if not index.isValid():
            return
        a = self.model.allocation(index.row())
        self.whereActivated.emit(a.where)
        if a.event >= 0:
            self.eventActivated.emit(a.event)
