"""The window's command line (`branchscope`, `branchscope open`, `--screenshot`), the no-torch rule of
the GUI process, and real runs through the real runner and worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QImage

from branchscope.app.main_window import MainWindow
from branchscope.app.pages.run_page import RunPage
from branchscope.app.run_controller import RunController
from tests.builders.runs import write_small_trace, write_sweep_folder
from tests.gui_helpers import FAKE_RUNNER, FIXTURES
from tests.paths import ROOT

_small_trace = write_small_trace


def _env(**changes) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(changes)
    return env


def _python(args, env=None, timeout=300):
    """`python ARGS` in the repository, its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env or _env(), capture_output=True, text=True, timeout=timeout
    )


def _branchscope(args, env=None, timeout=300):
    return _python(["-m", "branchscope.app", *args], env, timeout)


def test_screenshot_of_an_opened_sweep_folder_shows_its_heatmap_and_exits_0(tmp_path):
    # The heatmap's pyqtgraph items once crashed the interpreter's exit (139) after the picture.
    sweep = write_sweep_folder(tmp_path / "sweep")
    out = tmp_path / "sweep.png"
    proc = _branchscope(["open", str(sweep), "--screenshot", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert QImage(str(out)).size().toTuple() == (1600, 1000)


def test_open_refuses_a_folder_that_is_neither_a_run_nor_a_sweep(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    proc = _branchscope(["open", str(tmp_path), "--screenshot", str(tmp_path / "x.png")])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_screenshot_of_opened_traces_is_a_1600x1000_png_even_without_a_display(tmp_path):
    trace = _small_trace(tmp_path / "run.json.gz")
    out = tmp_path / "shot.png"
    proc = _branchscope(["open", str(trace), "--screenshot", str(out)])
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)


def test_without_a_display_the_window_says_so_in_one_line_and_how_to_get_a_screenshot(tmp_path):
    for args in ([], ["open", str(_small_trace(tmp_path / "t.json"))]):
        proc = _branchscope(args, timeout=60)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert "no display" in lines[0] and "--screenshot" in lines[0]


def test_open_with_a_broken_trace_and_screenshot_prints_the_readers_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = _branchscope(["open", str(bad), "--screenshot", str(tmp_path / "x.png")])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "bad.json" in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_the_gui_process_never_imports_torch(tmp_path):
    trace = _small_trace(tmp_path / "t.json.gz")
    code = f"""
import sys
from PySide6.QtWidgets import QApplication
from PySide6.QtCore import QSettings
app = QApplication([])
from branchscope.app.main_window import MainWindow
w = MainWindow(settings=QSettings({str(tmp_path / "s.ini")!r}, QSettings.Format.IniFormat))
w.show()
w.cuda.start()
assert w.open_trace_files([{str(trace)!r}]) == 1
from branchscope.app.pages.run_page import RunPage
for panel in ("timeline", "pool", "memory"):
    w.page(RunPage).workspace.panel(panel).repaint()
app.processEvents()
print("torch" in sys.modules, "branchscope.widgets.timeline" in sys.modules)
"""
    proc = _python(["-c", code], _env(QT_QPA_PLATFORM="offscreen"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


@pytest.fixture
def real_window(qtbot, tmp_path):
    controller = RunController(runs_dir=tmp_path / "runs")
    win = MainWindow(
        controller=controller,
        settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
        check_cuda=False,
    )
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    controller.shutdown()


@pytest.mark.slow
def test_end_to_end_a_tiny_demo_through_a_real_worker_shows_its_lanes(real_window, qtbot):
    win = real_window
    win.set_controls(demo="twin-mm", mode="sequential", interop=1, intra=1, steps=2)
    with qtbot.waitSignal(win.lifecycle.opened, timeout=240_000) as sig:
        win.start_run()
    result = sig.args[0]
    assert result.trace_path.exists() and result.run.mode == "sequential"
    trace = win.page(RunPage).timeline.trace
    assert trace is not None and trace.metadata["branchscope"]["interop"] == 1
    assert [ln.role for ln in trace.lanes_of("cpu")][0] == "main"
    lanes = list(range(len(trace.lanes)))
    qtbot.waitUntil(lambda: sorted(win.page(RunPage).timeline.painted_lanes) == lanes, timeout=5000)
    # marked when run.json says other processes took more than a fifth of the cores meanwhile
    busy = result.run.load is not None and result.run.load.busy is True
    assert [win.runs_table.index(0, c).data() for c in (1, 2)] == ["twin-mm", "sequential 1×1"]
    assert (win.runs_table.index(0, 1).data(Qt.ItemDataRole.DecorationRole) is not None) == busy
    assert win.page(RunPage).workspace.panel("pool").threads, "the runner's CPU samples are shown"
    assert "step" in " ".join(trace.names)


@pytest.mark.slow
def test_a_model_that_raises_shows_the_failure_dialog_with_its_traceback(real_window, qtbot):
    win = real_window
    win.set_controls(mode="sequential", interop=1, intra=1, steps=1)
    with qtbot.waitSignal(win.controller.failed, timeout=240_000):
        win.add_model_file(str(FIXTURES / "raising_model.py"))
    box = win.message_box
    assert box is not None and box.isVisible()
    assert "broken on purpose" in box.text()
    assert "build_model" in box.detailedText() and "Traceback" in box.detailedText()
    assert win.controls.progress.format() == "failed" and not win.controller.is_running()
    box.close()
    assert win.open_trace_files([str(_small_trace(Path(win.controller.runs_dir()) / "t.json"))]) == 1


@pytest.mark.slow
def test_screenshot_of_a_demo_run(tmp_path):
    out = tmp_path / "twin.png"
    proc = _branchscope(
        [
            "--demo",
            "twin-mm",
            "--mode",
            "fork",
            "--interop",
            "2",
            "--intra",
            "1",
            "--steps",
            "2",
            "--screenshot",
            str(out),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)




def _screenshot_in_process(monkeypatch, tmp_path, command: list[str]):
    """`branchscope --demo inception --screenshot OUT` in this process, its runner replaced."""
    import argparse

    import branchscope.app.main_window as main_window
    from branchscope.app import cmd_gui

    class Controller(RunController):
        def __init__(self, parent=None):
            super().__init__(parent, command=command, runs_dir=tmp_path / "runs")

    monkeypatch.setattr(main_window, "RunController", Controller)
    monkeypatch.setattr(
        main_window, "QSettings", lambda *a: QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    )
    out = tmp_path / "shot.png"
    args = argparse.Namespace(
        screenshot=out, demo="inception", mode="sequential", interop=1, intra=1, steps=2
    )
    return cmd_gui._run_window(args, traces=[]), out


# A missing program fails after QProcess.start() returns; an empty one fails inside it (Qt emits
# errorOccurred synchronously), which used to quit the wait loop before it ran: a 900 s hang. It
# runs in its own process so that a hang fails the test (the timeout) instead of stalling pytest.
_CANNOT_START = """
import argparse, sys
from pathlib import Path
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
import branchscope.app.main_window as main_window
from branchscope.app import cmd_gui
from branchscope.app.run_controller import RunController

tmp, program = Path(sys.argv[1]), sys.argv[2]

class Controller(RunController):
    def __init__(self, parent=None):
        super().__init__(parent, command=[program], runs_dir=tmp / "runs")

main_window.RunController = Controller
main_window.QSettings = lambda *a: QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat)
app = QApplication([])
args = argparse.Namespace(
    screenshot=tmp / "shot.png", demo="inception", mode="sequential", interop=1, intra=1, steps=2
)
sys.exit(cmd_gui._run_window(args, traces=[]))
"""


@pytest.mark.parametrize("program", ["missing", "empty"])
def test_screenshot_with_a_runner_that_cannot_start_exits_1_promptly(program, tmp_path):
    runner = str(tmp_path / "no-such-runner") if program == "missing" else ""
    proc = _python(["-c", _CANNOT_START, str(tmp_path), runner], _env(QT_QPA_PLATFORM="offscreen"), timeout=90)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the run failed: could not start the runner"), last
    assert not (tmp_path / "shot.png").exists()


@pytest.mark.timeout(120)
def test_screenshot_exits_1_when_the_runs_trace_cannot_be_read(qapp, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("BRANCHSCOPE_FAKE_TRACE", "broken")
    code, out = _screenshot_in_process(monkeypatch, tmp_path, FAKE_RUNNER)
    assert code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "trace.json.gz" in last, last
    assert not out.exists()


@pytest.mark.timeout(120)
def test_screenshot_of_a_successful_run_exits_0(qapp, monkeypatch, tmp_path, capsys):
    from branchscope.app import mode_check

    probed = []  # a picture offers every mode: no probe whose answer may come before or after it is drawn
    monkeypatch.setattr(mode_check.ModeCheck, "start", lambda self, python: probed.append(python))
    code, out = _screenshot_in_process(monkeypatch, tmp_path, FAKE_RUNNER)
    assert code == 0, capsys.readouterr().err
    assert (QImage(str(out)).width(), QImage(str(out)).height()) == (1600, 1000)
    assert probed == []


def test_open_zoom_step_draws_one_step_and_refuses_a_step_the_trace_lacks(tmp_path):
    """Issue 22, item 9: `open --screenshot --zoom-step N` for a picture of one step."""
    trace = _small_trace(tmp_path / "run.json.gz")
    out = tmp_path / "step.png"
    proc = _branchscope(["open", str(trace), "--zoom-step", "1", "--screenshot", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert QImage(str(out)).size().toTuple() == (1600, 1000)
    proc = _branchscope(["open", str(trace), "--zoom-step", "7", "--screenshot", str(tmp_path / "x.png")])
    assert proc.returncode == 2 and not (tmp_path / "x.png").exists()
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert line.endswith("has no profiled step 7 (its steps: step 0, step 1)")
