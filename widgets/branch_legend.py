"""The branch legend: one row per branch of the shown run, its colour, name and total time.

A row's colour is the branch's colour on the timeline (both come from `colors.branch_slots`), its
time the sum of the branch's `branch: NAME` annotations in this run. Nested branches sit indented
under the branch they run inside (the run info's `parent`). Clicking a row emits `branchActivated`
with the branch's name (e.g. to find its events on the timeline).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTreeWidget, QTreeWidgetItem, QWidget

from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.ranges import branch_order, branch_totals
from branchscope.widgets import colors


@dataclass(frozen=True, slots=True)
class LegendRow:
    """One branch as the legend shows it."""

    name: str
    color: str  # "#rrggbb", as on the timeline
    total_ns: int  # its annotations' durations summed (0: it did not run)
    depth: int  # 0 at the top, 1 inside another branch, ...
    parent: str | None


def legend_rows(trace: Trace) -> list[LegendRow]:
    """The trace's branches in the model's order (`branch_order`), each followed by the branches
    nested in it."""
    order = branch_order(trace)
    if not order:
        return []
    slots = colors.branch_slots(trace, order)
    color = {name: colors.branch_color(int(s)) for name, s in zip(order, slots.tolist(), strict=True)}
    totals = branch_totals(trace)
    info = trace.run_info
    parent_of = {b.name: b.parent for b in info.branches} if info is not None else {}
    children: dict[str | None, list[str]] = {}
    for name in order:
        parent = parent_of.get(name)
        children.setdefault(parent if parent in color and parent != name else None, []).append(name)
    rows: list[LegendRow] = []
    seen: set[str] = set()

    def visit(parent: str | None, depth: int) -> None:
        for name in children.get(parent, []):
            if name in seen:  # a cycle in an untrusted trace's run info
                continue
            seen.add(name)
            rows.append(LegendRow(name, color[name], totals.get(name, 0), depth, parent))
            visit(name, depth + 1)

    visit(None, 0)
    # Branches whose parent chain loops back never hang off the top: list them there.
    for name in order:
        if name not in seen:
            seen.add(name)
            rows.append(LegendRow(name, color[name], totals.get(name, 0), 0, None))
    return rows


def format_ms(ns: int) -> str:
    """A total in milliseconds, as the legend and the range panel show it."""
    ms = ns / 1e6
    return f"{ms:,.2f} ms" if ms >= 0.1 or ms == 0 else f"{ms:.3f} ms"


def _swatch(color: str, size: int) -> QIcon:
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.fillRect(1, 1, size - 2, size - 2, QColor(color))
    p.end()
    return QIcon(pix)


class BranchLegend(QTreeWidget):
    """The legend widget (see the module docstring); `set_trace(trace)` fills it."""

    #: The name of the branch whose row was clicked.
    branchActivated = Signal(str)

    COLUMNS = ("Branch", "Total")

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.trace: Trace | None = None
        self.rows: list[LegendRow] = []
        self.setColumnCount(len(self.COLUMNS))
        self.setHeaderLabels(list(self.COLUMNS))
        self.setRootIsDecorated(False)
        self.setIndentation(14)
        self.setUniformRowHeights(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.itemClicked.connect(self._clicked)
        self.set_trace(None)

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show the branches of `trace` (None: nothing); `origin_ns` is accepted for the panel
        protocol and unused (the legend has no time axis)."""
        self.trace = trace
        self.rows = legend_rows(trace) if trace is not None else []
        self._fill()

    def has_data(self) -> bool:
        return bool(self.rows)

    @property
    def no_data_text(self) -> str:
        return "no branches in this trace"

    def item_of(self, name: str) -> QTreeWidgetItem | None:
        """The row of branch `name`, or None."""
        for item in self._items():
            if item.data(0, Qt.ItemDataRole.UserRole) == name:
                return item
        return None

    def _items(self) -> list[QTreeWidgetItem]:
        out: list[QTreeWidgetItem] = []
        stack = [self.topLevelItem(i) for i in range(self.topLevelItemCount() - 1, -1, -1)]
        while stack:
            item = stack.pop()
            out.append(item)
            stack.extend(item.child(i) for i in range(item.childCount() - 1, -1, -1))
        return out

    def _fill(self) -> None:
        self.clear()
        if not self.rows:
            item = QTreeWidgetItem([self.no_data_text if self.trace is not None else "", ""])
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.addTopLevelItem(item)
            return
        size = max(8, self.fontMetrics().height() - 4)
        self.setIconSize(QSize(size, size))
        items: dict[str, QTreeWidgetItem] = {}
        info = self.trace.run_info if self.trace is not None else None
        described = {b.name: b for b in info.branches} if info is not None else {}
        for row in self.rows:
            total = format_ms(row.total_ns) if row.total_ns else "did not run"
            item = QTreeWidgetItem([row.name, total])
            item.setIcon(0, _swatch(row.color, size))
            item.setData(0, Qt.ItemDataRole.UserRole, row.name)
            item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            b = described.get(row.name)
            tip = f"{row.name}: {total} in this run (its branch annotations summed)"
            if b is not None:
                tip += f"\nregion {b.region}" + (f", {b.ops} ops" if b.ops is not None else "")
            item.setToolTip(0, tip)
            item.setToolTip(1, tip)
            parent = items.get(row.parent) if row.parent is not None else None
            if parent is not None:
                parent.addChild(item)
            else:
                self.addTopLevelItem(item)
            items[row.name] = item
        self.expandAll()
        self.updateGeometry()

    #: The most rows the size hint makes room for (more scroll).
    HINT_ROWS = 12

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        """Room for every row (up to HINT_ROWS) under the header, so it sits compactly beside the timeline."""
        rows = max(1, min(len(self.rows), self.HINT_ROWS))
        row_h = self.sizeHintForRow(0) if self.topLevelItemCount() else self.fontMetrics().height() + 4
        height = self.header().sizeHint().height() + rows * row_h + 2 * self.frameWidth() + 4
        return QSize(max(220, super().sizeHint().width()), height)

    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() == QEvent.Type.FontChange and hasattr(self, "rows"):
            self._fill()  # swatches as tall as the text

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(name, str):
            self.branchActivated.emit(name)
