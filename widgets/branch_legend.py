"""The branch legend: the shown run's branches grouped by region, each with its colour, name and total time.

A row's colour is the branch's colour on the timeline (both come from `colors.branch_slots`), its
time the sum of the branch's `branch: NAME` annotations in this run. Branches sit under their
region, named as the run named it (`Mixed_6a`; "region 1.2" in runs from before regions had
names) with how many branches it holds, in the model's order; a region nested in a branch sits
under that branch (the run info's `parent`). Each region folds; the regions the user folded stay
folded in the next run shown. A row shows what tells its branch from those beside it
and fits its column (which widens with the panel) as `legend_names` says: without the word its
siblings share ("3x3dbl_1"), wrapped; hover shows it in full. The times are milliseconds without
their unit (the "ms" header says it), so the names keep the panel's width. The filter
box above keeps the branches whose name, modules (`blocks.0.branch5x5_2` in `blocks.0: branch5x5_1
→ branch5x5_2`), region's name or id holds its text (and the branches and regions around them).
Clicking a branch emits `branchActivated` with its name (e.g. to find its events on the timeline).
Under the tree, a line says what discovery left out (assertions, chains with no tensor work,
branches too small beside their region's largest: `left_out_summary`), each with why on hover.
`fill_branch_tree` builds the same grouped rows for the details panel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QLineEdit,
    QStyle,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from branchscope.profiling.trace.labels import branch_label
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.prediction import ASSUMPTIONS, prediction_text, region_text
from branchscope.profiling.trace.ranges import branch_order, branch_totals
from branchscope.profiling.trace.records import left_out_text
from branchscope.widgets import colors
from branchscope.widgets.legend_names import compact_name, shown_names, wrapped
from branchscope.widgets.timeline_labels import KEPT_CHARACTERS, sibling_prefix

#: How many of the left-out entries the tooltip lists one by one.
LEFT_OUT_SHOWN = 40


def left_out_summary(trace: Trace | None) -> tuple[str, str]:
    """(line, tooltip) saying what discovery left out of the trace's run; ("", "") for nothing."""
    info = trace.run_info if trace is not None else None
    left = info.left_out if info is not None else ()
    if not left:
        return "", ""
    lines = [f"{x.name} ({x.ops} ops): {x.why}" if x.ops else f"{x.name}: {x.why}" for x in left[:LEFT_OUT_SHOWN]]
    if len(left) > LEFT_OUT_SHOWN:
        lines.append(f"… and {len(left) - LEFT_OUT_SHOWN} more (run.json's left_out)")
    return f"Left out: {left_out_text(left)}", "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LegendRow:
    """One branch as the legend shows it."""

    name: str
    color: str  # "#rrggbb", as on the timeline
    total_ns: int  # its annotations' durations summed (0: it did not run)
    depth: int  # 0 at the top, 1 inside another branch, ...
    parent: str | None
    #: Its region's id ("1", "1.2") and name (`Mixed_6a`); None for a branch the run info does not
    #: list, and the name None in runs from before regions had names.
    region: str | None = None
    region_name: str | None = None
    ops: int | None = None

    @property
    def group(self) -> str | None:
        """What its region is called in the legend: the region's name, else "region ID"."""
        if self.region is None:
            return None
        return self.region_name or f"region {self.region}"


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
    described = {b.name: b for b in info.branches} if info is not None else {}
    children: dict[str | None, list[str]] = {}
    for name in order:
        b = described.get(name)
        parent = b.parent if b is not None else None
        children.setdefault(parent if parent in color and parent != name else None, []).append(name)
    rows: list[LegendRow] = []
    seen: set[str] = set()

    def row(name: str, depth: int, parent: str | None) -> LegendRow:
        b = described.get(name)
        if b is None:
            return LegendRow(name, color[name], totals.get(name, 0), depth, parent)
        return LegendRow(
            name, color[name], totals.get(name, 0), depth, parent, b.region or None, b.region_name, b.ops
        )

    def visit(parent: str | None, depth: int) -> None:
        for name in children.get(parent, []):
            if name in seen:  # a cycle in an untrusted trace's run info
                continue
            seen.add(name)
            rows.append(row(name, depth, parent))
            visit(name, depth + 1)

    visit(None, 0)
    # Branches whose parent chain loops back never hang off the top: list them there.
    for name in order:
        if name not in seen:
            seen.add(name)
            rows.append(row(name, 0, None))
    return rows


def _headline(sentence: str) -> str:
    """The prediction's bounds alone ("The step could be at most 1.42× on 2 threads, 1.64× on 4"),
    so the legend keeps its height for the branches; the sentence goes on hover."""
    cut = min((k for k in (sentence.find(": "), sentence.find(" (")) if k >= 0), default=-1)
    return sentence if cut < 0 else sentence[:cut] + " (hover for why)"


def format_ms(ns: int) -> str:
    """A total in milliseconds with its unit, as the range panel shows it."""
    return f"{ms_figure(ns)} ms"


def ms_figure(ns: int) -> str:
    """A total in milliseconds without its unit ("190.82"), as the legend's "ms" column shows it."""
    ms = ns / 1e6
    return f"{ms:,.2f}" if ms >= 0.1 or ms == 0 else f"{ms:.3f}"


def _swatch(color: str, size: int) -> QIcon:
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.fillRect(1, 1, size - 2, size - 2, QColor(color))
    p.end()
    return QIcon(pix)


#: Item data: a branch row's name (UserRole), a region row's id (REGION_ROLE) and name (GROUP_ROLE),
#: a row's two texts (FORMS_ROLE: a branch's shown name and that without the word siblings share;
#: a region's title or the empty-state line twice), which `fit_branch_names` fits to its room.
REGION_ROLE = Qt.ItemDataRole.UserRole + 1
GROUP_ROLE = Qt.ItemDataRole.UserRole + 2
FORMS_ROLE = Qt.ItemDataRole.UserRole + 3


def fit_branch_names(tree: QTreeWidget) -> None:
    """Each row of `tree` with texts (FORMS_ROLE) shows the first where it fits its `text_room`,
    else the second (a branch's `compact_name`) where that keeps `KEPT_CHARACTERS`, in lines that
    fit (`wrapped`) where the tree's rows may differ in height; else Qt cuts it in its middle."""
    for item in tree_items(tree):
        forms = item.data(0, FORMS_ROLE)
        if not isinstance(forms, tuple):
            continue
        # a pixel spare: Qt's text layout may measure a line's glyphs wider than their advance
        room, fm = text_room(tree, item) - 1, QFontMetricsF(_font(tree, item))
        whole, compact = forms
        # the compact form where the name does not fit, unless it keeps too little of the name
        if _widest(whole, fm) > room and len(compact) >= min(KEPT_CHARACTERS, len(whole)):
            whole = compact
        text = whole
        if not tree.uniformRowHeights():
            text = wrapped(text, room, fm)
        if item.text(0) != text:
            item.setText(0, text)


def text_room(tree: QTreeWidget, item: QTreeWidgetItem) -> int:
    """How many pixels wide a line of `item`'s first column is drawn: its column (the row, where
    it spans the row) less its indentation, its swatch and the style's margins, as Qt lays out an
    item view's cell."""
    depth, up = 0, item.parent()
    while up is not None:
        depth, up = depth + 1, up.parent()
    width = tree.viewport().width() if item.isFirstColumnSpanned() else tree.columnWidth(0)
    margin = tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, tree) + 1
    icon = 0 if item.icon(0).isNull() else tree.iconSize().width() + 2 * margin
    return width - tree.indentation() * (depth + tree.rootIsDecorated()) - icon - 2 * margin


def _font(tree: QTreeWidget, item: QTreeWidgetItem) -> QFont:
    """The font `item`'s first column is drawn in: its own (a region's bold) over the tree's."""
    own = item.data(0, Qt.ItemDataRole.FontRole)
    return own.resolve(tree.font()) if isinstance(own, QFont) else tree.font()


def _widest(text: str, fm: QFontMetricsF) -> float:
    return max(fm.horizontalAdvance(line) for line in text.split("\n"))


def branch_tooltip(row: LegendRow, extra: str = "") -> str:
    """A branch's name in full, its region and ops (and `extra`, e.g. its time in this run)."""
    lines = [row.name + (f": {extra}" if extra else "")]
    if row.region is not None:
        lines.append(f"region {row.region}" + (f" ({row.region_name})" if row.region_name else ""))
    if row.ops is not None:
        lines.append(f"{row.ops} ops")
    return "\n".join(lines)


def search_text(row: LegendRow) -> str:
    """What the filter looks in for a branch (casefolded): its name, each module of its chain by its
    path (`blocks.0: branch5x5_1 → branch5x5_2` holds `blocks.0.branch5x5_2`), its region's name
    and id ("region 1.2")."""
    parts = [row.name]
    scope = ""  # the module a chain's steps run under (`blocks.0: a → b`: both in blocks.0)
    for step in row.name.split(" → "):
        head, sep, leaf = step.partition(": ")
        if sep:
            scope = head
            parts.append(f"{scope}.{leaf}")
        elif scope and "." not in step and step != "...":
            parts.append(f"{scope}.{step}")
    if row.group is not None:
        parts.append(row.group)
    if row.region is not None:
        parts.append(f"region {row.region}")
    return "\n".join(parts).casefold()


def region_title(group: str, count: int) -> str:
    """A region's row: its name and how many branches it holds."""
    return f"{group} · {count} branch{'es' * (count != 1)}"


def fill_branch_tree(
    tree: QTreeWidget, rows: list[LegendRow], second: Callable[[LegendRow], str], tooltip: Callable[[LegendRow], str]
) -> dict[str, QTreeWidgetItem]:
    """Fills `tree` with `rows` grouped by region: a bold row per region (its name and branch count;
    its id on hover), the region's branches under it with their swatch, name as `shown_names` has
    it (in full on hover) and `second(row)`, a nested region under its branch. Returns each
    branch's item by name."""
    tree.clear()
    size = max(8, tree.fontMetrics().height() - 4)
    tree.setIconSize(QSize(size, size))
    branch_items: dict[str, QTreeWidgetItem] = {}
    shown = shown_names(rows)
    shared = sibling_prefix(branch_label(name) for name in shown.values())
    groups: dict[tuple[str | None, str], QTreeWidgetItem] = {}
    members: dict[tuple[str | None, str], int] = {}
    for row in rows:
        if row.region is not None:
            key = (row.parent, row.region)
            members[key] = members.get(key, 0) + 1
    for row in rows:
        parent = branch_items.get(row.parent) if row.parent is not None else None
        if row.region is not None:
            key = (row.parent, row.region)
            group = groups.get(key)
            if group is None:
                title = region_title(row.group or "", members[key])
                group = QTreeWidgetItem([title, ""])
                group.setData(0, FORMS_ROLE, (title, title))
                group.setData(0, REGION_ROLE, row.region)
                group.setData(0, GROUP_ROLE, row.group)
                font = group.font(0)
                font.setBold(True)
                group.setFont(0, font)
                group.setFlags(Qt.ItemFlag.ItemIsEnabled)
                tip = f"region {row.region}" + (f": {row.region_name}" if row.region_name else "")
                tip += f"\n{members[key]} branches that can run at the same time"
                group.setToolTip(0, tip)
                if parent is not None:
                    parent.addChild(group)
                else:
                    tree.addTopLevelItem(group)
                groups[key] = group
            parent = group
        item = QTreeWidgetItem([shown[row.name], second(row)])
        item.setIcon(0, _swatch(row.color, size))
        item.setData(0, Qt.ItemDataRole.UserRole, row.name)
        item.setData(0, FORMS_ROLE, (shown[row.name], compact_name(shown[row.name], shared)))
        item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        tip = tooltip(row)
        item.setToolTip(0, tip)
        item.setToolTip(1, tip)
        if parent is not None:
            parent.addChild(item)
        else:
            tree.addTopLevelItem(item)
        branch_items[row.name] = item
    tree.expandAll()
    fit_branch_names(tree)
    return branch_items


def tree_items(tree: QTreeWidget) -> list[QTreeWidgetItem]:
    """Every item of `tree`, depth first in display order."""
    out: list[QTreeWidgetItem] = []
    stack = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount() - 1, -1, -1)]
    while stack:
        item = stack.pop()
        out.append(item)
        stack.extend(item.child(i) for i in range(item.childCount() - 1, -1, -1))
    return out


def _in_sight(item: QTreeWidgetItem | None) -> bool:
    while item is not None:
        if item.isHidden():
            return False
        item = item.parent()
    return True


def new_branch_tree(columns: tuple[str, ...], parent: QWidget | None = None) -> QTreeWidget:
    """A read-only tree for `fill_branch_tree`: the name column stretches and long names are cut in
    their middle, so both the module a name starts with and the one it ends with stay in sight."""
    tree = QTreeWidget(parent)
    tree.setColumnCount(len(columns))
    tree.setHeaderLabels(list(columns))
    tree.setRootIsDecorated(False)
    tree.setIndentation(12)
    tree.setUniformRowHeights(True)
    tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    header = tree.header()
    header.setStretchLastSection(False)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
    # the names refit once the header has settled (its stretch column moves as the other one fits)
    refit = QTimer(tree)
    refit.setSingleShot(True)
    refit.setInterval(0)
    refit.timeout.connect(lambda: fit_branch_names(tree))
    header.sectionResized.connect(refit.start)
    return tree


class BranchLegend(QWidget):
    """The legend widget (see the module docstring): a filter box over the tree; `set_trace(trace)` fills it."""

    #: The name of the branch whose row was clicked.
    branchActivated = Signal(str)

    COLUMNS = ("Branch", "ms")
    #: The time column's figure for a branch that did not run (its tooltip says so).
    NO_TIME = "–"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.trace: Trace | None = None
        self.rows: list[LegendRow] = []
        self.filter = QLineEdit(self)
        self.filter.setPlaceholderText("Filter branches")
        self.filter.setClearButtonEnabled(True)
        self.filter.setToolTip(
            "Show the branches whose name, modules (blocks.0.branch5x5_2) or region (its name, \"region 1.2\") hold this text"
        )
        self.tree = new_branch_tree(self.COLUMNS, self)
        self.tree.headerItem().setToolTip(1, "Each branch's total time in this run, in milliseconds")
        # a name or the empty-state line too long for the column wraps (rows as tall as their lines)
        self.tree.setUniformRowHeights(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.filter)
        layout.addWidget(self.tree, 1)
        #: What discovery left out of the shown run, counted by kind; each with why on hover.
        self.left_out = QLabel(self)
        self.left_out.setWordWrap(True)
        layout.addWidget(self.left_out)
        #: What the branches could give on k threads (`profiling/trace/prediction.py`): the bounds,
        #: the sentence on hover; each region's bound is in its row.
        self.prediction = QLabel(self)
        self.prediction.setWordWrap(True)
        layout.addWidget(self.prediction)
        self._items: dict[str, QTreeWidgetItem] = {}
        #: The regions the user folded (id, name): they stay folded in the next run shown, but
        #: while the filter has text, when every region holding a match opens.
        self._folded: set[tuple[str, str | None]] = set()
        self._folding = False  # the legend itself is opening or folding regions
        self.tree.setRootIsDecorated(True)  # each region folds (its arrow, or a double-click)
        self.tree.itemCollapsed.connect(lambda item: self._fold(item, True))
        self.tree.itemExpanded.connect(lambda item: self._fold(item, False))
        self.tree.itemClicked.connect(self._clicked)
        self.filter.textChanged.connect(self._apply_filter)
        self.set_trace(None)

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show the branches of `trace` (None: nothing); `origin_ns` is accepted for the panel
        protocol and unused (the legend has no time axis). The filter's text stays."""
        self.trace = trace
        self.rows = legend_rows(trace) if trace is not None else []
        line, tip = left_out_summary(trace)
        self.left_out.setText(line)
        self.left_out.setToolTip(tip)
        self.left_out.setVisible(bool(line))
        pred = self.trace.run_info.prediction if self.trace is not None and self.trace.run_info is not None else None
        sentence = "" if pred is None else f"The step {prediction_text(pred)}"
        self.prediction.setText(_headline(sentence))
        self.prediction.setToolTip(sentence)
        self.prediction.setVisible(pred is not None)
        self._fill()

    def has_data(self) -> bool:
        return bool(self.rows)

    @property
    def no_data_text(self) -> str:
        return "no branches in this trace"

    def item_of(self, name: str) -> QTreeWidgetItem | None:
        """The row of branch `name`, or None."""
        return self._items.get(name)

    def region_item(self, region: str) -> QTreeWidgetItem | None:
        """The group row of region `region` (its id, "1.2"), or None."""
        for item in tree_items(self.tree):
            if item.data(0, REGION_ROLE) == region:
                return item
        return None

    def shown_branches(self) -> list[str]:
        """The branches the filter leaves in sight, in the legend's order."""
        return [r.name for r in self.rows if r.name in self._items and _in_sight(self._items[r.name])]

    def _fill(self) -> None:
        if not self.rows:
            self.tree.clear()
            self._items = {}
            text = self.no_data_text if self.trace is not None else ""
            item = QTreeWidgetItem([text, ""])
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            item.setData(0, FORMS_ROLE, (text, text))
            self.tree.addTopLevelItem(item)
            item.setFirstColumnSpanned(True)  # the line has the row's width, and wraps in it
            fit_branch_names(self.tree)
            return

        def tooltip(row: LegendRow) -> str:
            summed = f"{format_ms(row.total_ns)} in this run (its branch annotations summed)"
            return branch_tooltip(row, summed if row.total_ns else "did not run in this run")

        self._folding = True  # filling opens every region: no fold of the user's
        try:
            self._items = fill_branch_tree(
                self.tree, self.rows, lambda r: ms_figure(r.total_ns) if r.total_ns else self.NO_TIME, tooltip
            )
        finally:
            self._folding = False
        self._show_region_bounds()
        self._apply_filter(self.filter.text())
        self.updateGeometry()

    def _show_region_bounds(self) -> None:
        """Each region's row says what its branches could give (its bound on 2 threads, a line
        under its title; the sentence on hover), from the run's prediction."""
        info = self.trace.run_info if self.trace is not None else None
        if info is None or info.prediction is None:
            return
        for region in info.prediction.regions:
            item = self.region_item(region.region)
            bound = region.bound_by_threads.get("2")
            if item is None or bound is None:
                continue
            # under its title, across the row: the "ms" column keeps the width of the branches' times
            text = f"{item.data(0, FORMS_ROLE)[0]}\n≤ {bound:.2f}× on 2 threads"
            item.setData(0, FORMS_ROLE, (text, text))
            item.setFirstColumnSpanned(True)
            item.setToolTip(0, item.toolTip(0) + f"\nits branches could give {region_text(region)} ({ASSUMPTIONS})")
        fit_branch_names(self.tree)

    def _apply_filter(self, text: str) -> None:
        """Hide the branches whose `search_text` (name, the modules of its chain, region's name and
        id) lacks `text` (any case), unless a branch nested in them matches; hide regions left with
        no branch in sight."""
        needle = text.strip().casefold()
        haystack = {r.name: search_text(r) for r in self.rows}

        def matches(name: str) -> bool:
            return needle in haystack[name]

        def visit(item: QTreeWidgetItem) -> bool:  # is anything under (or at) item in sight?
            shown_child = False
            for i in range(item.childCount()):
                shown_child = visit(item.child(i)) or shown_child
            name = item.data(0, Qt.ItemDataRole.UserRole)
            shown = shown_child or (isinstance(name, str) and name in haystack and matches(name))
            item.setHidden(not shown)
            return shown

        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            if top.flags() == Qt.ItemFlag.NoItemFlags:
                continue  # the "no branches" line
            visit(top)
        self._folding = True
        try:
            for item in tree_items(self.tree):
                key = self._region_key(item)
                if key is not None:
                    item.setExpanded(bool(needle) or key not in self._folded)
        finally:
            self._folding = False

    @staticmethod
    def _region_key(item: QTreeWidgetItem) -> tuple[str, str | None] | None:
        region = item.data(0, REGION_ROLE)
        return (region, item.data(0, GROUP_ROLE)) if isinstance(region, str) else None

    def _fold(self, item: QTreeWidgetItem, folded: bool) -> None:
        key = self._region_key(item)
        if key is None or self._folding or self.filter.text().strip():
            return
        if folded:
            self._folded.add(key)
        else:
            self._folded.discard(key)

    def folded_regions(self) -> list[str]:
        """The ids of the regions folded now, in the legend's order."""
        return [str(item.data(0, REGION_ROLE)) for item in tree_items(self.tree)
                if self._region_key(item) is not None and not item.isExpanded()]  # fmt: skip

    #: The most rows the size hint makes room for (more scroll).
    HINT_ROWS = 12

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        """Room for the filter and every row's lines (up to HINT_ROWS, region rows counted) under the
        header, so it sits compactly beside the timeline."""
        tree = self.tree
        row_h = tree.sizeHintForRow(0) if tree.topLevelItemCount() else tree.fontMetrics().height() + 4
        # each row as tall as it is laid out, else as its lines (a wrapped name has several)
        rows = sum(max(tree.visualItemRect(item).height(), row_h * (item.text(0).count("\n") + 1))
                   for item in tree_items(tree)[: self.HINT_ROWS])  # fmt: skip
        height = tree.header().sizeHint().height() + max(rows, row_h) + 2 * tree.frameWidth() + 4
        height += self.filter.sizeHint().height() + self.layout().spacing()
        return QSize(max(220, tree.sizeHint().width()), height)

    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() == QEvent.Type.FontChange and hasattr(self, "rows"):
            self._fill()  # swatches as tall as the text

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(name, str):
            self.branchActivated.emit(name)
