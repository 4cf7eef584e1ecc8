"""The workbench window: controls start runs through the run controller, results become entries,
failures show a dialog and the window carries on (pytest-qt, offscreen, a fake runner)."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from branchscope.app.main_window import MainWindow
from branchscope.app.pages.run_page import RunPage
from branchscope.app.run_controller import RunController, RunSpec
from branchscope.profiling import TraceFormatError, load_trace
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest, add_run_arguments, request_from_args
from tests.builders.runs import write_small_trace
from tests.gui_helpers import FAKE_RUNNER


def _args(win) -> list[str]:
    return win.controller.last_command


def _value_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _row(win, k: int) -> list[str]:
    """What row k of the runs list shows, column by column."""
    return [win.runs_table.index(k, c).data() for c in range(win.runs_table.columnCount())]


def test_a_slider_release_starts_nothing_and_run_runs_with_the_right_arguments(window, qtbot):
    slider = window.controls.interop_slider
    assert (slider.minimum(), slider.maximum()) == (1, 4)  # 1 to 2x the cores
    window.controls.intra_slider.setValue(1)
    with qtbot.assertNotEmitted(window.controller.started, wait=800):
        slider.setSliderDown(True)
        slider.setValue(3)
        assert window.controls.interop_label.text() == "3"
        slider.setSliderDown(False)  # the release
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    args = _args(window)
    assert args[:2] == FAKE_RUNNER
    assert _value_after(args, "--demo") == "inception"
    assert _value_after(args, "--mode") == "sequential"
    assert _value_after(args, "--interop") == "3"
    assert _value_after(args, "--intra") == "1"
    assert _value_after(args, "--steps") == "5"
    assert "--jsonl" in args and Path(_value_after(args, "--out")).parent == window.controller.runs_dir()
    # the finished run is listed and shown
    assert window.runs_table.rowCount() == 1
    assert _row(window, 0) == ["1", "inception", "sequential 3×1", "–", "40.0 ms (IQR 40.0–40.0, 2 steps)"]
    assert window.page(RunPage).timeline.trace is window.run_list.entries[0].trace
    lanes = list(range(len(window.run_list.entries[0].trace.lanes)))
    qtbot.waitUntil(lambda: sorted(window.page(RunPage).timeline.painted_lanes) == lanes)


def test_changing_the_mode_starts_nothing_and_speedup_compares_with_the_first_sequential_run(window, qtbot):
    window.set_controls(interop=1, intra=1)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    with qtbot.assertNotEmitted(window.controller.started, wait=800):
        window.controls.mode_combo.setCurrentIndex(1)
        window.controls.mode_combo.activated.emit(1)  # as a choice in the popup does
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    assert _value_after(_args(window), "--mode") == "fork"
    assert _row(window, 1)[1:3] == ["inception", "fork 1×1"]
    assert _row(window, 1)[3] == "2.00×"  # 40 ms sequential / 20 ms fork
    # selecting the first run shows it again
    with qtbot.waitSignal(window.entryShown) as sig:
        window.runs.setCurrentIndex(window.runs_table.index(0, 0))
    assert sig.args == [0]
    assert window.page(RunPage).timeline.trace is window.run_list.entries[0].trace


def test_an_explicit_baseline_changes_the_listed_speedups(window, qtbot):
    window.set_controls(interop=1, intra=1)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()  # sequential: 40 ms
    window.set_controls(mode="fork")
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()  # fork: 20 ms
    assert [_row(window, k)[3] for k in range(2)] == ["baseline", "2.00×"]
    window.run_list.baseline = 1  # what "set as baseline" will do
    assert [_row(window, k)[3] for k in range(2)] == ["0.50×", "baseline"]
    assert window.run_list.speedup(0) == 0.5


def test_progress_shows_and_cancel_stops_the_run(window, qtbot):
    window.controls.steps_spin.setValue(500)  # the fake runner then waits until it is stopped
    with qtbot.waitSignal(window.controller.progress, timeout=20_000) as sig:
        window.controls.run_button.click()
    assert sig.args == [1, 500]
    assert window.controls.cancel_button.isEnabled()
    assert window.controls.progress.value() == 1 and window.controls.progress.maximum() == 500
    assert window.controller.active_processes() == 1
    with qtbot.waitSignal(window.controller.canceled):
        window.controls.cancel_button.click()
    qtbot.waitUntil(lambda: window.controller.active_processes() == 0, timeout=10_000)
    assert not window.controller.is_running()
    assert not window.controls.cancel_button.isEnabled()
    assert window.controls.progress.format() == "cancelled"


def test_a_new_run_cancels_the_one_going(window, qtbot):
    controller = window.controller
    finished, canceled = [], []
    controller.finished.connect(finished.append)
    controller.canceled.connect(canceled.append)
    window.controls.steps_spin.setValue(500)
    with qtbot.waitSignal(controller.progress, timeout=20_000):
        window.controls.run_button.click()
    window.controls.steps_spin.setValue(2)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    qtbot.waitUntil(lambda: controller.active_processes() == 0, timeout=10_000)
    assert [s.options.steps for s in canceled] == [500]
    assert [r.spec.options.steps for r in finished] == [2]
    assert window.runs_table.rowCount() == 1


def test_a_failed_run_shows_the_message_and_traceback_and_the_window_keeps_working(window, qtbot, tmp_path):
    window.controls.model_combo.addItem("demo: raising", ("demo", "raising"))
    window.controls.model_combo.setCurrentIndex(window.controls.model_combo.count() - 1)
    with qtbot.waitSignal(window.controller.failed, timeout=20_000):
        window.controls.run_button.click()
    box = window.message_box
    assert isinstance(box, QMessageBox) and box.isVisible()
    assert "broken on purpose" in box.text()
    assert "Traceback" in box.detailedText() and "build_model" in box.detailedText()
    assert window.controls.progress.format() == "failed"
    box.close()
    # still usable: the next run works
    window.set_controls(demo="inception")
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    assert window.runs_table.rowCount() == 1


def test_a_broken_trace_shows_the_readers_message(window, tmp_path):
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": '))
    with pytest.raises(TraceFormatError) as err:
        load_trace(bad)
    assert window.open_trace_files([str(bad)]) == 0
    assert window.message_box is not None and window.message_box.text() == str(err.value)
    assert window.runs_table.rowCount() == 0


def test_open_trace_files_and_recent_files(window, qtbot, tmp_path):
    a = write_small_trace(tmp_path / "a.json", "fork")
    b = write_small_trace(tmp_path / "b.json.gz", "sequential")
    assert window.open_trace_files([str(a), str(b)]) == 2
    assert window.run_list.current == 1
    # labelled by what ran (the file's stem and the mode from its branchscope object), not "a.json"
    assert [_row(window, k)[1:3] for k in range(2)] == [["a", "fork 2×1"], ["b", "sequential 2×1"]]
    assert window.menus.recent_files()[:2] == [str(b), str(a)]
    assert [act.text() for act in window.menus.recent_menu.actions()][:2] == [str(b), str(a)]
    # drag and drop opens traces too, read off the GUI thread (TraceLoader)
    with qtbot.waitSignal(window.loader.loaded, timeout=20_000):
        assert _drop(window, [a])
    assert window.runs_table.rowCount() == 3


def test_multi_stream_is_disabled_with_the_reason_without_cuda(window):
    window.cuda.resolved.emit(False, "multi-stream needs CUDA: no NVIDIA driver on this machine")
    item = window.controls.mode_combo.model().item(window.controls.mode_combo.findData("streams"))
    assert not item.isEnabled()
    assert "needs CUDA" in item.toolTip()  # the check itself runs without torch (tests/app/test_cli_window.py)


def test_clicking_an_event_shows_it_in_the_details_panel(window, qtbot, tmp_path):
    window.open_trace_files([str(write_small_trace(tmp_path / "a.json", "fork"))])
    trace = window.page(RunPage).timeline.trace
    i = int(trace.find("aten::add")[0])
    window.page(RunPage).timeline.select_event(i)
    assert ("Name", "aten::add") in window.side_panel.details.rows
    assert ("Shapes", "64×256, 64×256, –") in window.side_panel.details.rows
    window.page(RunPage).timeline.select_event(-1)
    assert window.side_panel.details.title.text() == "Trace"


def test_run_spec_arguments_for_a_torchscript_file():
    spec = RunSpec(mode="fork", interop=2, intra=1, options=RunOptions(steps=3, model=Path("/m/net.pt"), input_shapes=("8x3", "8x4")))
    args = spec.runner_arguments(Path("/o"))
    assert args[:12] == ["--model", "/m/net.pt", "--mode", "fork", "--interop", "2", "--intra", "1",
                         "--steps", "3", "--warmup", "3"]  # fmt: skip
    assert args[-1] == "--jsonl"
    # The runner's own parser reads back exactly the request the window meant.
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    parser.add_argument("--jsonl", action="store_true")
    assert request_from_args(parser.parse_args(args)) == RunRequest(mode="fork", interop=2, intra=1, out=Path("/o"), options=RunOptions(model=Path("/m/net.pt"), steps=3, input_shapes=("8x3", "8x4")))


def test_rank_files_open_merged_side_by_side(window, shared_traces):
    ranks = [str(shared_traces / "hta_two_ranks" / f"rank-{r}.json.gz") for r in (0, 1)]
    assert window.open_trace_files(ranks) == 2
    entry = window.run_list.entries[-1]
    assert entry.label == "ranks 0, 1"
    assert {ln.rank for ln in entry.trace.lanes} == {0, 1}
    # Dropped from the cache and shown again, it reloads both ranks.
    entry.trace = None
    window.show_entry(len(window.run_list.entries) - 1)
    assert len(entry.trace) == 4810 + 4675


def test_a_runner_that_cannot_start_fails_after_started_and_the_window_stays_usable(qtbot, tmp_path):
    controller = RunController(command=[str(tmp_path / "no-such-program")], runs_dir=tmp_path / "runs")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    qtbot.addWidget(win)
    order: list[str] = []
    controller.started.connect(lambda _spec: order.append("started"))
    controller.failed.connect(lambda _m, _d: order.append("failed"))
    win.start_run()
    qtbot.waitUntil(lambda: "failed" in order)
    assert order == ["started", "failed"]
    assert not controller.is_running()
    assert win.message_box is not None and "could not start" in win.message_box.text()


def test_dropped_torchscript_archive_is_a_model_not_a_trace(tmp_path):
    import zipfile

    from branchscope.app.main_window import is_model_file

    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("model/data.pkl", b"x")
    trace = tmp_path / "trace.json.gz"
    trace.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "m.py").write_text("def build_model(): ...\n")
    assert is_model_file(str(archive)) and is_model_file(str(tmp_path / "m.py"))
    assert not is_model_file(str(trace))


def _tiny_traces(tmp_path, n: int) -> list[str]:
    paths = []
    for k in range(n):
        p = tmp_path / f"t{k}.json"
        event = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": k, "dur": 1}
        p.write_text(json.dumps({"traceEvents": [event]}))
        paths.append(str(p))
    return paths


def test_trace_cache_evicts_the_least_recently_shown(window, tmp_path):
    from branchscope.app.runs import TRACE_CACHE

    paths = _tiny_traces(tmp_path, TRACE_CACHE + 1)
    window.open_trace_files(paths[:TRACE_CACHE])  # entries 0..3, shown in that order
    first = window.run_list.entries[0].trace
    window.show_entry(0)  # now entry 1 is the least recently shown
    window.open_trace_files(paths[TRACE_CACHE:])  # a fifth entry: one trace must go
    cached = [k for k, e in enumerate(window.run_list.entries) if e.trace is not None]
    assert cached == [0, *range(2, TRACE_CACHE + 1)]
    assert window.run_list.entries[0].trace is first  # kept, not read again


def test_an_entry_chosen_whose_trace_was_let_go_is_read_by_the_loader_then_shown(window, qtbot, tmp_path):
    from branchscope.app.runs import TRACE_CACHE

    paths = _tiny_traces(tmp_path, TRACE_CACHE + 1)
    window.open_trace_files(paths)  # entry 0's trace let go for the fifth
    assert window.run_list.entries[0].trace is None and window.run_list.current == TRACE_CACHE
    started = []
    window.loader.started.connect(started.append)
    with qtbot.waitSignal(window.entryShown, timeout=20_000) as shown:
        window.runs.rowChosen.emit(0)  # the user's click: read off the GUI thread, not in the click
        assert window.run_list.current == TRACE_CACHE  # nothing shown until it is read
    assert shown.args == [0] and [list(map(str, p)) for p in started] == [[paths[0]]]
    assert window.run_list.current == 0 and window.run_list.entries[0].trace is not None


def test_an_entry_chosen_whose_file_has_gone_says_so_and_keeps_what_is_shown(window, qtbot, tmp_path):
    from branchscope.app.runs import TRACE_CACHE

    paths = _tiny_traces(tmp_path, TRACE_CACHE + 1)
    window.open_trace_files(paths)
    Path(paths[0]).unlink()
    window.runs.rowChosen.emit(0)
    qtbot.waitUntil(lambda: window.message_box is not None and window.message_box.isVisible(), timeout=20_000)
    assert "Cannot open trace" in window.message_box.windowTitle() or paths[0] in window.message_box.text()
    window.message_box.close()
    assert window.run_list.current == TRACE_CACHE and window.runs.currentIndex().row() == TRACE_CACHE


@pytest.mark.parametrize("program", ["missing", "empty"])
def test_a_runner_that_cannot_start_shows_the_failure_and_the_window_stays_usable(program, qtbot, tmp_path):
    # "empty": Qt fails inside QProcess.start(), before it returns; "missing": just after.
    runner = [str(tmp_path / "no-such-runner")] if program == "missing" else [""]
    controller = RunController(command=runner, runs_dir=tmp_path / "runs")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    win.auto_baseline = False
    qtbot.addWidget(win)
    win.show()
    failed = []
    controller.failed.connect(lambda m, _d: failed.append(m))
    win.controls.run_button.click()
    qtbot.waitUntil(lambda: bool(failed))
    assert win.controls.progress.format() == "failed"
    assert not win.controls.cancel_button.isEnabled() and not controller.is_running()
    assert win.message_box is not None and win.message_box.isVisible()
    assert "could not start" in win.message_box.text()
    win.message_box.close()
    controller.command = FAKE_RUNNER  # the next run works
    with qtbot.waitSignal(win.lifecycle.opened, timeout=20_000):
        win.controls.run_button.click()
    assert win.runs_table.rowCount() == 1 and win.controls.progress.format() == "done"
    controller.shutdown()


def _drop(win, paths) -> bool:
    """Drag `paths` onto the window and drop them; True if the window accepted the drag."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    drop = QDropEvent(
        QPoint(10, 10).toPointF(),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    enter = QDragEnterEvent(
        QPoint(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(win, enter)
    QApplication.sendEvent(win, drop)
    return enter.isAccepted()


@pytest.mark.parametrize("name", ["net.zip", "net.pt"])
def test_a_dropped_torchscript_archive_runs_as_a_model_and_a_dropped_trace_opens(
    name, window, qtbot, tmp_path, monkeypatch
):
    import zipfile

    import branchscope.app.main_window as main_window

    archive = tmp_path / name
    with zipfile.ZipFile(archive, "w") as z:  # TorchScript archives are zip files
        z.writestr("net/data.pkl", b"x")
    trace = _tiny_traces(tmp_path, 1)[0]
    asked = []
    monkeypatch.setattr(
        main_window.QInputDialog, "getText", lambda *a, **k: (asked.append(a[1]), ("8x3", True))[1]
    )
    # the trace is read off the GUI thread while the model runs: wait for both, listed in the order they end
    with qtbot.waitSignals([window.lifecycle.opened, window.loader.loaded], timeout=20_000):
        _drop(window, [archive, trace])
    assert asked == ["TorchScript inputs"]
    args = _args(window)
    assert _value_after(args, "--model") == str(archive) and _value_after(args, "--input-shape") == "8x3"
    assert window.controls.model_combo.currentData() == ("file", str(archive), ("8x3",))
    labels = [_row(window, k)[1] for k in range(window.runs_table.rowCount())]
    assert sorted(labels) == sorted(["t0", name])  # a plain trace: its name without .json
    assert window.message_box is None  # nothing was opened as a trace by mistake


def test_the_core_count_is_the_cpus_this_process_may_use(qtbot, tmp_path, monkeypatch):
    import os

    from branchscope.widgets.pool_usage import PoolUsageView

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(
        controller=RunController(command=FAKE_RUNNER, runs_dir=tmp_path / "runs"),
        settings=settings,
        check_cuda=False,
    )
    qtbot.addWidget(win)
    assert win.cores == 3
    assert win.controls.interop_slider.maximum() == 6 and win.controls.intra_slider.maximum() == 6
    win.set_controls(mode="fork")
    win.controls.interop_slider.setValue(2)
    win.controls.intra_slider.setValue(2)
    assert "on 3 cores" in win.controls.threads_hint.text() and "oversubscribed" in win.controls.threads_hint.text()
    assert PoolUsageView().cores == 3  # traces that do not say their cores: this machine's


def test_opening_from_the_window_reads_off_the_gui_thread_and_can_be_cancelled(window, qtbot, tmp_path):
    from tests.builders.runs import write_small_trace

    trace = write_small_trace(tmp_path / "t.json")
    with qtbot.waitSignal(window.loader.loaded, timeout=20_000):
        window.open_in_background([str(trace)])
    assert window.runs_table.rowCount() == 1
    # a cancelled read lists nothing
    with qtbot.waitSignal(window.loader.cancelled, timeout=20_000):
        window.open_in_background([str(trace)])
        window.loader.cancel()
    assert window.runs_table.rowCount() == 1
