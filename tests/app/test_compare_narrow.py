"""The Compare page at a projector's 1280×720 in presentation size (issue 35, item 12): where the page
has no room for the runs' timelines beside a readable summary, the summary and the op diff go under
the runs, as two tabs, and every cell and header of the summary shows at least 12 of its characters
or all of them; at 1920×1080 in the normal size the tables stay beside the runs (pytest-qt, offscreen)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QHeaderView, QStyle, QTableView

from branchscope.app.pages.compare_page import ComparePage
from tests.builders.runs import write_timed_run

#: What a label keeps at least: its first 12 characters, or all of them.
LEAST_CHARS = 12
RUNS = [("sequential", 1, 1), ("fork", 2, 1), ("threads", 2, 1), ("sequential", 1, 2)]


@pytest.fixture
def runs(tmp_path):
    """Four run folders of the inception demo: their summary holds long cells ("inception ·
    sequential · 1×1", spreads with their quartiles, the bounds on the speedup)."""
    return [
        str(write_timed_run(tmp_path / f"{k}-{mode}", mode, interop, intra, [40.0 - k, 41.0 - k, 45.0 - k]))
        for k, (mode, interop, intra) in enumerate(RUNS)
    ]


def _compared(window, qtbot, runs, size, presentation):
    """The Compare page of `runs` in a window of `size`, in presentation size or not, laid out."""
    window.menus.set_presentation(presentation, remember=False)
    window.resize(*size)
    qtbot.waitUntil(lambda: window.size().toTuple() == size and not window.columns._fit_timer.isActive())
    assert window.open_trace_files(runs) == len(runs)
    assert window.compare_entries(list(range(len(runs))))
    for _ in range(3):
        QApplication.processEvents()
    window.grab()
    return window.page(ComparePage)


def _shown_chars(fm: QFontMetrics, text: str, width: int) -> int:
    """How many of `text`'s characters one line `width` pixels wide shows (elided with "…" past them)."""
    if fm.horizontalAdvance(text) <= width:
        return len(text)
    return len(fm.elidedText(text, Qt.TextElideMode.ElideRight, width).removesuffix("…"))


def _cut_headers(header: QHeaderView, texts: list[str]) -> list[str]:
    """The header's labels that show fewer than LEAST_CHARS characters (and not all of them)."""
    fm = QFontMetrics(header.font())
    margin = 2 * header.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, header)
    cut = []
    for k, text in enumerate(texts):
        width = header.sectionSize(k) if header.orientation() == Qt.Orientation.Horizontal else header.width()
        shown = _shown_chars(fm, text, width - margin)
        if shown < min(len(text), LEAST_CHARS):
            cut.append(f"{text!r} shows {shown}")
    return cut


def _cut_cells(table: QTableView) -> list[str]:
    """The cells whose column is too narrow for LEAST_CHARS of their characters, or whose row is
    too short for their text wrapped to the column."""
    model = table.model()
    fm = QFontMetrics(table.font())
    margin = 2 * (table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1)
    cut = []
    for r in range(model.rowCount()):
        for c in range(model.columnCount()):
            text = str(model.index(r, c).data())
            width = table.columnWidth(c) - 1 - margin  # the grid's line and the text's margins
            wrapped = fm.boundingRect(QRect(0, 0, width, 10_000), Qt.TextFlag.TextWordWrap | Qt.TextFlag.TextWrapAnywhere, text)
            if fm.horizontalAdvance(text[:LEAST_CHARS]) > width or wrapped.height() > table.rowHeight(r):
                cut.append(f"{text!r} in {table.columnWidth(c)}×{table.rowHeight(r)}")
    return cut


def _labels(table: QTableView, orientation: Qt.Orientation) -> list[str]:
    model = table.model()
    n = model.columnCount() if orientation == Qt.Orientation.Horizontal else model.rowCount()
    return [str(model.headerData(k, orientation)) for k in range(n)]


def _assert_readable(page: ComparePage) -> None:
    summary = page.summary_table
    assert _cut_headers(summary.horizontalHeader(), _labels(summary, Qt.Orientation.Horizontal)) == []
    assert _cut_headers(summary.verticalHeader(), _labels(summary, Qt.Orientation.Vertical)) == []
    assert _cut_cells(summary) == []
    ops = page.ops_view
    assert _cut_headers(ops.horizontalHeader(), _labels(ops, Qt.Orientation.Horizontal)) == []
    assert _cut_cells(ops) == []


@pytest.mark.parametrize("n", [3, 4])
def test_at_1280x720_in_presentation_size_the_tables_go_under_the_runs_every_label_readable(window, qtbot, runs, n):
    page = _compared(window, qtbot, runs[:n], (1280, 720), presentation=True)
    assert window.size().toTuple() == (1280, 720)  # the window keeps its size
    assert not page.tables_beside()  # the summary got ~280 px beside the runs: "sequent…", "run 0 (b…"
    assert page.table_tabs.isVisible() and page.table_tabs.indexOf(page.summary_table) >= 0
    tabs, runs_area = page.table_tabs.geometry(), page.workspace.geometry()
    assert tabs.top() >= runs_area.bottom() and tabs.width() == runs_area.width()  # under the runs, as wide
    assert runs_area.height() >= 0.4 * page.splitter.height()  # the runs keep room for their timelines
    _assert_readable(page)
    page.table_tabs.setCurrentWidget(page.ops_view)  # the op diff is a tab away
    assert page.ops_view.isVisible() and not page.summary_table.isVisible()


def test_at_1920x1080_in_the_normal_size_the_tables_stay_beside_the_runs(window, qtbot, runs):
    page = _compared(window, qtbot, runs[:3], (1920, 1080), presentation=False)
    assert page.tables_beside() and page.tables.isVisible() and not page.table_tabs.isVisible()
    summary, runs_area = page.summary_table, page.workspace
    assert summary.mapTo(page, summary.rect().topLeft()).x() > runs_area.geometry().right()
    assert page.ops_view.isVisible()  # both tables in sight, one above the other
    assert page.workspace.width() >= 1.5 * page.tables.width()  # the runs keep the larger share
    _assert_readable(page)


def test_presentation_size_on_and_off_moves_the_tables_under_the_runs_and_back(window, qtbot, runs):
    page = _compared(window, qtbot, runs[:3], (1600, 1000), presentation=False)
    assert page.tables_beside()
    window.menus.set_presentation(True, remember=False)
    qtbot.waitUntil(lambda: not page.tables_beside())
    assert page.table_tabs.count() == 2
    window.menus.set_presentation(False, remember=False)
    qtbot.waitUntil(page.tables_beside)
    assert [page.tables.widget(k) for k in range(page.tables.count())] == [page.summary_table, page.ops_view]
    assert page.table_tabs.count() == 0 and page.summary_table.isVisible()
