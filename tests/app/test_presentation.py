"""Issue 35, items 12 and 13: View → Presentation size (text of at least 16 px, every tab and panel
usable at a projector's 1280×720 and at 1920×1080, kept for the next window, `--presentation` on the
command line); larger text widens the left panel instead of squeezing the runs list; the status bar
says what is true now, its messages do not stay."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QFontInfo, QFontMetricsF
from PySide6.QtWidgets import QApplication

from branchscope.app import status_line
from branchscope.app.main_window import NAVIGATION_HINT, MainWindow
from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.run_page import RunPage
from branchscope.app.window_layout import CENTRE_CHARS, RUNS_LINES, column_widths
from tests.builders.memory import write_four_gpu_trace


def _chars(widget) -> float:
    """How many average characters of the application's text `widget` is wide."""
    return widget.width() / QFontMetricsF(QApplication.font()).averageCharWidth()


def _settled(window, qtbot, size: tuple[int, int]) -> None:
    window.resize(*size)
    qtbot.waitUntil(lambda: window.size().toTuple() == size and not window.columns._fit_timer.isActive())
    QApplication.processEvents()


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_presentation_size_gives_16px_text_and_every_tab_and_panel_usable(size, window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_four_gpu_trace(tmp_path / "dp.json"))]) == 1  # events and memory
    window.menus.presentation_action.trigger()
    _settled(window, qtbot, size)
    assert QFontInfo(QApplication.font()).pixelSize() >= 16
    assert window.size().toTuple() == size  # nothing made the window taller or wider than the screen
    for k in range(window.tabs.count()):
        assert window.tabs.isTabEnabled(k) and window.tabs.isTabVisible(k)
        assert window.tabs.tabBar().rect().contains(window.tabs.tabBar().tabRect(k))  # no tab scrolled away
        window.tabs.setCurrentIndex(k)
        page = window.tabs.currentWidget()
        _settled(window, qtbot, size)
        assert page.isVisible() and _chars(page) >= CENTRE_CHARS - 1
    window.tabs.setCurrentWidget(window.page(RunPage))
    _settled(window, qtbot, size)
    # the runs list keeps its lines and the run column its names; the side panels keep room
    line = QFontMetricsF(QApplication.font()).lineSpacing()
    assert window.runs.isVisible() and window.runs.parentWidget().height() >= (RUNS_LINES - 0.5) * line
    assert _chars(window.runs) >= 40  # a run's name, its mode and threads, its speedup and median
    assert window.side_panel.isVisible() and _chars(window.side_panel) >= 20
    left = window.columns.controls_area
    assert left.width() >= window.controls.minimumSizeHint().width()  # the controls are never cut off at the side


def test_presentation_size_is_kept_for_the_next_window_and_off_goes_back(window, qtbot, tmp_path):
    normal = QFontInfo(QApplication.font()).pixelSize()
    window.menus.presentation_action.trigger()
    assert QFontInfo(QApplication.font()).pixelSize() >= 16 > normal
    window.restore_application_look()  # as when the window closed
    later = MainWindow(settings=QSettings(window.settings.fileName(), QSettings.Format.IniFormat), check_cuda=False, kept_runs=False)
    qtbot.addWidget(later)
    assert later.menus.presentation_action.isChecked()
    later.menus.presentation_action.trigger()  # off
    assert QFontInfo(QApplication.font()).pixelSize() == normal
    assert str(later.settings.value("presentationSize")).lower() == "false"


def test_the_command_lines_presentation_is_this_windows_only(window):
    window.menus.set_presentation(True, remember=False)
    assert window.menus.presentation_action.isChecked() and QFontInfo(QApplication.font()).pixelSize() >= 16
    assert window.settings.value("presentationSize") is None


def test_larger_text_widens_the_left_panel_instead_of_squeezing_the_runs_list(window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_four_gpu_trace(tmp_path / "dp.json"))]) == 1
    _settled(window, qtbot, (1600, 1000))
    before = _chars(window.runs)
    left_before = window.columns.left.width()
    window.menus.scale_text(3)
    qtbot.waitUntil(lambda: window.columns.left.width() > left_before * 1.3)
    assert _chars(window.runs) >= before - 3  # about as many characters as before (squeezed: 37 of 63)


def test_the_pages_keep_their_room_first_then_the_side_panels_give_way_then_the_left_panel():
    char_w = 8.0
    assert column_widths(1920, char_w) == [544, 992, 384]  # as liked: 68 and 48 characters
    assert column_widths(1272, char_w, (408, 635, 224)) == [413, 635, 224]
    assert column_widths(1000, char_w, (400, 560, 200)) == [400, 600, 0]  # the side panels shut


def test_the_status_bar_says_what_is_true_now_and_its_messages_go(window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(status_line, "MESSAGE_MS", 50)
    bar = window.statusBar()
    assert bar.currentMessage() == "" and window.status.steady.text() == ""  # nothing to navigate yet
    assert window.open_trace_files([str(write_four_gpu_trace(tmp_path / "dp.json"))]) == 1
    assert window.status.text_shown() == NAVIGATION_HINT  # the Run page shows a trace
    bar.showMessage("running inception fork with inter-op 2 × intra-op 1…")
    assert window.status.text_shown().startswith("running")
    qtbot.waitUntil(lambda: bar.currentMessage() == "", timeout=5_000)  # it went, without being replaced
    assert window.status.text_shown() == NAVIGATION_HINT
    window.show_page(window.page(ComparePage))
    assert window.status.text_shown() == ""  # the timeline's keys do nothing there
