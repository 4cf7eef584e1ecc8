"""View → Zoom to selection (F or Z) in the window: the Run page's timeline and each run's on the
Compare page go to the selected range, and with nothing selected the status bar says how to
select (issue 35, item 11)."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.run_page import RunPage
from branchscope.widgets.timeline import NOTHING_SELECTED, TimelineView
from tests.builders.runs import write_run_folder, write_small_trace


def _zoom_action(window):
    view_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    return next(a for a in view_menu.actions() if a.text() == "&Zoom to selection")


def test_the_view_menu_zooms_the_run_pages_timeline_to_the_selected_range(window, tmp_path):
    assert window.open_trace_files([str(write_small_trace(tmp_path / "t.json", "fork"))]) == 1
    action = _zoom_action(window)
    assert {k.toString() for k in action.shortcuts()} == {QKeySequence("F").toString(), QKeySequence("Z").toString()}
    timeline = window.page(RunPage).timeline
    before = timeline.time_range()
    action.trigger()  # nothing selected: nothing moves, and the status bar says how to select
    assert timeline.time_range() == before and window.statusBar().currentMessage() == NOTHING_SELECTED
    first = timeline.trace.span()[0]
    timeline.select_range(first + 1_000, first + 2_500)
    action.trigger()
    lo, hi = timeline.time_range()
    assert abs(lo - (first + 1_000)) <= 1 and abs(hi - (first + 2_500)) <= 1
    assert window.statusBar().currentMessage() != NOTHING_SELECTED


def test_on_the_compare_page_each_runs_timeline_zooms_to_its_selection(window, tmp_path):
    seq = write_run_folder(tmp_path / "seq", "sequential", 1, 1, 40.0)
    fork = write_run_folder(tmp_path / "fork", "fork", 2, 1, 20.0)
    assert window.open_trace_files([str(seq), str(fork)]) == 2
    window.runs.selectAll()
    window.compare_button.click()
    page = window.page(ComparePage)
    timelines = [v for v in page.findChildren(TimelineView) if v.isVisible()]
    assert len(timelines) == 2
    second = timelines[1]
    first_ns = second.trace.span()[0]
    second.select_range(first_ns + 2_000, first_ns + 6_000)
    _zoom_action(window).trigger()
    lo, hi = second.time_range()
    assert abs(lo - (first_ns + 2_000)) <= 1 and abs(hi - (first_ns + 6_000)) <= 1
    assert timelines[0].axis is second.axis  # the other run follows: one time axis


def test_f_and_z_belong_to_the_pages_not_to_a_focused_control(window, qtbot, tmp_path):
    """F typed in the Mode list picks fork (the list's own type-ahead) and zooms nothing; F with
    the timeline focused zooms to its selection."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    assert window.open_trace_files([str(write_small_trace(tmp_path / "t.json", "fork"))]) == 1
    window.activateWindow()
    timeline = window.page(RunPage).timeline
    first = timeline.trace.span()[0]
    timeline.select_range(first + 1_000, first + 2_500)
    before = timeline.time_range()
    combo = window.controls.mode_combo
    window.controls.set_values(mode="sequential")
    combo.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is combo)
    qtbot.keyClick(combo, Qt.Key.Key_F)
    assert combo.currentText().startswith("fork") and timeline.time_range() == before
    timeline.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is timeline)
    qtbot.keyClick(timeline, Qt.Key.Key_F)
    lo, hi = timeline.time_range()
    assert abs(lo - (first + 1_000)) <= 1 and abs(hi - (first + 2_500)) <= 1
