"""The window's command line (`branchscope`, `branchscope open`, `--screenshot`), the no-torch rule of
the GUI process, and real runs through the real runner and worker."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QImage

from app.main_window import MainWindow
from app.run_controller import RunController

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gui"


def _small_trace(path: Path, mode: str = "fork") -> Path:
    spec = importlib.util.spec_from_file_location("small_trace", FIXTURES / "small_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write(path, mode)


def _env(**changes) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(changes)
    return env


def _branchscope(args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
from app.main_window import MainWindow
w = MainWindow(settings=QSettings({str(tmp_path / "s.ini")!r}, QSettings.Format.IniFormat))
w.show()
w.cuda.start()
assert w.open_trace_files([{str(trace)!r}]) == 1
w.timeline.repaint(); w.pool.repaint(); w.memory.repaint()
app.processEvents()
print("torch" in sys.modules, "widgets.timeline" in sys.modules)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_env(QT_QPA_PLATFORM="offscreen"),
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    with qtbot.waitSignal(win.controller.finished, timeout=240_000) as sig:
        win.start_run()
    result = sig.args[0]
    assert result.trace_path.exists() and result.run["mode"] == "sequential"
    trace = win.timeline.trace
    assert trace is not None and trace.metadata["branchscope"]["interop"] == 1
    assert [ln.role for ln in trace.lanes_of("cpu")][0] == "main"
    lanes = list(range(len(trace.lanes)))
    qtbot.waitUntil(lambda: sorted(win.timeline.painted_lanes) == lanes, timeout=5000)
    assert win.runs.topLevelItem(0).text(1) == "twin-mm · sequential"
    assert win.pool.threads, "the runner's CPU samples are shown"
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
    assert win.progress.format() == "failed" and not win.controller.is_running()
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
