"""Shared fixtures. Tests run headless: Qt uses the offscreen platform whatever the caller set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.paths import FIXTURES, SHARED_TRACES

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# CI shares a busy 2-core machine: a property test's examples may take any time to make, and that is
# never a failure (a test's own @settings add to this; one naming suppress_health_check adds too_slow).
settings.register_profile("busy-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("busy-machine")



@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs a test (or a window or CLI it starts) keeps go to a cache of the test's own, never the
    user's ~/.cache/branchscope, so a test neither reads nor prunes nor fills the real runs folder;
    and a window it starts in a new process keeps its settings (recent files) in a folder of the
    test's own, never the user's ~/.config/branchscope."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(autouse=True)
def _collect_garbage_in_the_gui_thread(request: pytest.FixtureRequest):
    """Qt tests run with Python's automatic cyclic collector off, and collect in this (the GUI)
    thread when they end, as the window does (pyqtgraph's GarbageCollector, see app/cmd_gui.py): a
    collection the trace loader's thread happened to start could destroy Qt objects of earlier
    tests' windows while this thread builds new ones."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    import gc

    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        # On, whatever a thread of the test found (the reader turns it off while it parses and back
        # on only if it found it on): every test starts with the collector on.
        gc.enable()


@pytest.fixture(autouse=True)
def _no_key_or_button_left_down(request: pytest.FixtureRequest):
    """A Qt test leaves no key modifier or mouse button down for the next: QTest's Ctrl+key click
    leaves the application's modifiers at Ctrl, and its double-click leaves the button down, until
    the next input event; a later test's plain click would then be a Ctrl+click (toggling a row of
    an extended selection) or its mouse move a drag."""
    yield
    if "qtbot" not in request.fixturenames:
        return
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QWidget

    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    modifiers, buttons = app.keyboardModifiers(), app.mouseButtons()
    if modifiers == Qt.KeyboardModifier.NoModifier and buttons == Qt.MouseButton.NoButton:
        return
    widget = QWidget()
    widget.show()
    QTest.keyRelease(widget, Qt.Key.Key_Control)  # a key event without modifiers: none are down
    for button in (Qt.MouseButton.LeftButton, Qt.MouseButton.RightButton, Qt.MouseButton.MiddleButton):
        if buttons & button:
            QTest.mouseRelease(widget, button)
    widget.close()
    widget.deleteLater()


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real traces torch writes now (a sequential MLP; TorchScript with fork), in their own process."""
    out = tmp_path_factory.mktemp("torch_traces")
    script = FIXTURES / "traces" / "write_torch_traces.py"
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture
def window(qtbot, tmp_path):
    """The main window, shown offscreen, running the fake runner (no torch) into tmp_path/runs."""
    from PySide6.QtCore import QSettings

    from branchscope.app.main_window import MainWindow
    from branchscope.app.run_controller import RunController
    from tests.gui_helpers import FAKE_RUNNER

    controller = RunController(command=FAKE_RUNNER, runs_dir=tmp_path / "runs")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    win.auto_baseline = False  # one run per request here; tests/app/test_compare_window.py turns it on
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.loader.cancel()
    assert win.loader.wait(120), "the trace loader's thread outlived its test"
    controller.shutdown()
    win.restore_application_look()  # the font and palette are the application's: the next test gets the defaults
