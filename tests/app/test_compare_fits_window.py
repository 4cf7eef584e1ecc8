"""Runs compared fit the window (issue 35, items 2, 3 and 13): three or four runs at 1920×1080 and at a
projector's 1280×720 leave the window the size it was set, every lane of every run in its timeline
and the last run reachable by scrolling the compare view; chart legends are not cut; the summary's
columns keep their room; the Compare tab follows the runs list's selection; `--screenshot` writes the
`--size` it says, without Qt's propagateSizeHints warning (pytest-qt, offscreen)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from branchscope.app.pages.compare_page import PICK_NONE, PICK_ONE, ComparePage
from branchscope.app.pages.run_page import RunPage
from branchscope.app.screenshot_size import SIZE_HINT_WARNING
from tests.builders.runs import write_small_trace
from tests.gui_helpers import select_rows
from tests.paths import ROOT

MODES = ["threads", "fork", "sequential", "threads"]


@pytest.fixture
def traces(tmp_path):
    """Four small traces: threads (a GIL band under its pool: the tallest charts), fork (two pool lanes), sequential, threads."""
    return [str(write_small_trace(tmp_path / f"{k}-{mode}.json", mode)) for k, mode in enumerate(MODES)]


def _opened(window, qtbot, traces, size):
    window.resize(*size)
    qtbot.waitUntil(lambda: window.size().toTuple() == size)
    assert window.open_trace_files(traces) == len(traces)
    return window.page(ComparePage)


def _laid_out(window):
    """Let the posted layout requests run (a window whose content asks for more grows then), then draw."""
    for _ in range(3):
        QApplication.processEvents()
    window.grab()


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720)])
@pytest.mark.parametrize("n", [3, 4])
def test_comparing_three_or_four_runs_keeps_the_window_its_size_with_every_lane_reachable(window, qtbot, traces, size, n):
    page = _opened(window, qtbot, traces[:n], size)
    assert window.compare_entries(list(range(n)))
    qtbot.waitUntil(lambda: all(r.panel("timeline").lane_layout.avail > 0 for r in page.workspace.rows))
    _laid_out(window)
    assert window.size().toTuple() == size  # it grew to 1600×1252 with three runs, 1920×1360 maximised
    workspace = page.workspace
    assert len(workspace.rows) == n
    for row, path in zip(workspace.rows, traces):
        timeline = row.panel("timeline")
        assert row.trace.path == path
        # every lane has its row in the timeline, none scrolled out of sight inside it
        assert sorted(lr.lane for lr in timeline.lane_layout.lane_rows) == list(range(len(row.trace.lanes)))
        assert timeline.max_scroll() == 0
    # the rows scroll inside the compare view: its scroll bar reaches the last run's last panel
    bar = workspace.scroll.verticalScrollBar()
    bar.setValue(bar.maximum())
    last = workspace.rows[-1]
    bottom = last.mapTo(workspace.scroll.viewport(), QPoint(0, last.height())).y()
    assert 0 < bottom <= workspace.scroll.viewport().height()


def test_no_chart_legend_is_cut_in_runs_compared_at_1280x720(window, qtbot, traces):
    page = _opened(window, qtbot, traces[:3], (1280, 720))
    window.compare_entries([0, 1, 2])
    _laid_out(window)
    for row in page.workspace.rows:
        for name in ("pool", "memory"):
            chart = row.panel(name)
            for gutter in chart.gutters:
                assert gutter.geometry().height() >= gutter.text_height(), (name, gutter.html)
        assert row.panel("pool").height() >= row.panel("pool").labels_height()


def test_the_run_page_keeps_the_window_its_size_at_1280x720(window, qtbot, traces):
    _opened(window, qtbot, traces[1:2], (1280, 720))
    window.show_page(window.page(RunPage))
    _laid_out(window)
    assert window.size().toTuple() == (1280, 720)
    pool = window.page(RunPage).workspace.rows[0].panel("pool")
    assert all(g.geometry().height() >= g.text_height() for g in pool.gutters)


def test_the_summary_columns_keep_their_room_beside_long_row_titles(window, qtbot, traces):
    page = _opened(window, qtbot, traces[:3], (1280, 720))
    window.compare_entries([0, 1, 2])
    _laid_out(window)
    table = page.summary_table
    assert table.verticalHeader().width() <= max(120, table.width() * 0.4) + 1
    assert all(table.columnWidth(k) >= 90 for k in range(table.columnCount()))
    assert "baseline" in table.horizontalHeaderItem(0).toolTip()


def test_the_compare_tab_follows_the_selection_and_says_how_to_pick_runs(window, qtbot, traces):
    page = _opened(window, qtbot, traces[:3], (1600, 1000))
    assert not page.compared and page.pick_label.isVisibleTo(page)
    assert page.pick_label.text() == PICK_ONE  # the last trace opened is selected
    select_rows(window, [])
    assert page.pick_label.text() == PICK_NONE
    select_rows(window, [0, 2])  # the Run page in front: nothing read until the Compare tab is
    assert page.compared == []
    window.show_page(page)
    qtbot.waitUntil(lambda: page.compared == [0, 2])
    assert [r.trace.path for r in page.workspace.rows] == [traces[0], traces[2]]
    assert page.splitter.isVisible() and not page.pick_label.isVisible()
    select_rows(window, [0, 1, 2])  # in front: compared at once, no button pressed
    assert page.compared == [0, 1, 2] and len(page.workspace.rows) == 3
    assert window.compare_button.isEnabled()  # the button stays
    select_rows(window, [1])  # one row: what is compared stays
    assert page.compared == [0, 1, 2]


def _branchscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "branchscope.app", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _png_size(path) -> tuple[int, int]:
    return QImage(str(path)).size().toTuple()


def test_open_screenshot_of_three_runs_compared_is_the_size_asked(traces, tmp_path):
    out = tmp_path / "compare.png"
    proc = _branchscope("open", *traces[:3], "--tab", "compare", "--screenshot", str(out), "--size", "1280x720")
    assert proc.returncode == 0, proc.stderr
    assert _png_size(out) == (1280, 720)
    assert f"wrote {out} (1280x720)" in proc.stdout
    assert SIZE_HINT_WARNING not in proc.stderr


def test_compare_screenshot_of_four_runs_is_the_size_asked(traces, tmp_path):
    out = tmp_path / "compare.png"
    proc = _branchscope("compare", *traces, "--screenshot", str(out), "--size", "1920x1080")
    assert proc.returncode == 0, proc.stderr
    assert _png_size(out) == (1920, 1080)  # four runs wrote 1600×1677 for 1600×1000
    assert f"wrote {out} (1920x1080)" in proc.stdout
    assert SIZE_HINT_WARNING not in proc.stderr


@pytest.mark.parametrize("command", ["open", "compare"])
@pytest.mark.parametrize("size", ["1920", "axb", "10x10", "99999x1080"])
def test_a_bad_size_is_one_error_line_and_exit_2(traces, tmp_path, command, size):
    proc = _branchscope(command, *traces[:2], "--screenshot", str(tmp_path / "x.png"), "--size", size)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --size"), proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_the_message_filter_drops_the_size_hint_warning_alone():
    code = (
        "from PySide6.QtCore import qWarning\n"
        "from branchscope.app.screenshot_size import SIZE_HINT_WARNING, drop_offscreen_size_hint_warning\n"
        "drop_offscreen_size_hint_warning()\n"
        "qWarning(SIZE_HINT_WARNING)\n"
        "qWarning('another warning')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert SIZE_HINT_WARNING not in proc.stderr
    assert "another warning" in proc.stderr  # other warnings are not hidden
