"""Issue 35, items 9 and 13: File → Open folder… and a folder dropped open a rank folder, a run folder
or a sweep folder through the window's loader as `branchscope open FOLDER` does; every file dialog
opens in the folder its kind last used; Ctrl+O works right after an error dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog

from branchscope.app.main_window import MainWindow
from branchscope.app.pages.sweep_page import SweepPage
from tests.builders.ranks import write_rank_job
from tests.builders.runs import write_run_folder, write_small_trace, write_sweep_folder


def _listed(window) -> list[tuple[str, frozenset]]:
    """The entries listed: their title and the ranks of their trace."""
    return [(e.title, e.trace.lane_rank_set if e.trace is not None else frozenset()) for e in window.run_list.entries]


def _as_the_command_line_opens(folder: Path, tmp_path: Path, qtbot) -> list[tuple[str, frozenset]]:
    """What `branchscope open FOLDER` lists (`open_trace_files`, as app/cmd_gui.py calls it)."""
    settings = QSettings(str(tmp_path / "cli.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, check_cuda=False, kept_runs=False)
    qtbot.addWidget(win)
    assert win.open_trace_files([str(folder)]) == 1
    listed = _listed(win)
    win.restore_application_look()
    return listed


def _drop(window, paths: list[Path]) -> bool:
    """Drag `paths` onto the window and drop them; True if the window took the drag."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    buttons, keys = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, buttons, keys)
    QApplication.sendEvent(window, enter)
    QApplication.sendEvent(window, QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, buttons, keys))
    return enter.isAccepted()


def _pick_folder(monkeypatch, folder: Path, asked: list[str]) -> None:
    """The folder dialog answers `folder`, noting the folder it opened in."""
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda _parent, _title, start="": (asked.append(start), str(folder))[1])


@pytest.mark.parametrize("how", ["dialog", "drop"])
def test_a_rank_folder_opens_as_one_job_as_branchscope_open_folder_does(how, window, qtbot, tmp_path, monkeypatch):
    job = write_rank_job(tmp_path / "job", ranks=4)
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        if how == "dialog":
            _pick_folder(monkeypatch, job, [])
            window.menus.open_folder_dialog()
        else:
            assert _drop(window, [job])
    assert _listed(window) == _as_the_command_line_opens(job, tmp_path, qtbot)
    assert _listed(window)[0][1] == {0, 1, 2, 3}  # every rank, in one entry
    assert window.message_box is None


@pytest.mark.parametrize("how", ["dialog", "drop"])
def test_a_run_folder_opens_with_its_run_json(how, window, qtbot, tmp_path, monkeypatch):
    run = write_run_folder(tmp_path / "fork-2x1", "fork", 2, 1, 20.0)
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        if how == "dialog":
            _pick_folder(monkeypatch, run, [])
            window.menus.open_folder_dialog()
        else:
            assert _drop(window, [run])
    assert _listed(window) == _as_the_command_line_opens(run, tmp_path, qtbot)
    assert window.run_list.entries[0].run is not None  # its run.json read: not a bare trace


def test_a_dropped_folder_named_like_a_model_opens_as_a_folder(window, qtbot, tmp_path):
    run = write_run_folder(tmp_path / "net.py", "fork", 2, 1, 20.0)
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        assert _drop(window, [run])
    assert len(window.run_list.entries) == 1 and not window.controller.is_running()


@pytest.mark.parametrize("how", ["dialog", "drop"])
def test_a_sweep_folder_opens_on_the_sweep_page(how, window, tmp_path, monkeypatch):
    sweep = write_sweep_folder(tmp_path / "sweep")
    if how == "dialog":
        _pick_folder(monkeypatch, sweep, [])
        window.menus.open_folder_dialog()
    else:
        assert _drop(window, [sweep])
    assert Path(window.page(SweepPage).folder) == sweep


def test_each_file_dialog_opens_in_the_folder_its_kind_used_last(window, tmp_path, monkeypatch):
    traces, folders, models, shots = (tmp_path / name for name in ("traces", "folders", "models", "shots"))
    for folder in (traces, folders, models, shots):
        folder.mkdir()
    trace = write_small_trace(traces / "t.json")
    starts: dict[str, list[str]] = {"trace": [], "folder": [], "model": [], "screenshot": []}
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        lambda _p, _t, start="", _f="": (starts["trace"].append(start), ([str(trace)], ""))[1])  # fmt: skip
    _pick_folder(monkeypatch, folders / "job", starts["folder"])
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda _p, _t, start="", _f="": (starts["model"].append(start), ("", ""))[1])  # fmt: skip
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda _p, _t, start="", _f="": (starts["screenshot"].append(start), (str(shots / "a.png"), ""))[1])  # fmt: skip
    monkeypatch.setattr(window, "open_in_background", lambda _paths: None)  # only the dialogs matter here
    monkeypatch.setattr(window.failures, "save_screenshot", lambda _path: True)
    (folders / "job").mkdir()

    for _ in range(2):
        window.menus.open_trace_dialog()
        window.menus.open_folder_dialog()
        window.menus._screenshot_dialog()
    assert starts["trace"] == ["", str(traces)]
    assert starts["folder"] == ["", str(folders)]  # beside the folder chosen: its siblings, one click away
    assert starts["screenshot"] == ["branchscope.png", str(shots / "branchscope.png")]

    # the next window remembers them; a model dialog cancelled leaves its folder as it was
    window.dialogs.remember("model", str(models / "net.py"))
    later = MainWindow(settings=window.settings, check_cuda=False, kept_runs=False)
    later.open_model_dialog()
    later.open_model_dialog()
    assert starts["model"] == [str(models)] * 2
    assert later.dialogs.start_folder("trace") == str(traces)
    later.deleteLater()


def test_ctrl_o_works_right_after_an_error_dialog(window, qtbot, monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *_a, **_k: (asked.append("open"), ([], ""))[1])
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    QTest.keyClick(window, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert asked == ["open"]

    box = window.show_error("Cannot open trace", "t.json: not a trace")
    qtbot.waitUntil(lambda: QApplication.activeWindow() is box)
    QTest.keyClick(box, Qt.Key.Key_Return)  # OK
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    QTest.keyClick(QApplication.focusWidget() or window, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert asked == ["open", "open"]  # the first Ctrl+O after the dialog, not the second
