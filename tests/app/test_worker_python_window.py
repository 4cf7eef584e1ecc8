"""The worker's Python (--python) in the window: the run controls' setting reaches every run and sweep
the window starts, is kept for the next window, and empty means branchscope's own (pytest-qt, the
fake runner: no worker runs)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from branchscope.app.pages.sweep_page import SweepPage
from branchscope.app.run_controls import RunControls
from branchscope.profiling.run.protocol import add_run_arguments, request_from_args
from branchscope.profiling.run.sweep import add_sweep_arguments, sweep_request_from_args


def _value_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_python_setting_reaches_the_run_request(window, qtbot, tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    controls: RunControls = window.controls
    controls.python_edit.setFocus()
    qtbot.keyClicks(controls.python_edit, str(python))
    # Leaving the line (Return) keeps it and starts nothing, as any other change; Run runs with it.
    with qtbot.assertNotEmitted(window.controller.started, wait=800):
        qtbot.keyClick(controls.python_edit, Qt.Key.Key_Return)
    assert window.settings.value("workerPython") == str(python)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        controls.run_button.click()
    args = window.controller.last_command
    assert _value_after(args, "--python") == str(python)
    # What the runner reads back from those arguments (the fake runner parsed them too).
    import argparse

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    parser.add_argument("--jsonl", action="store_true")
    request = request_from_args(parser.parse_args(args[2:]))
    assert request.options.python == python
    # A sweep of the window's model takes it too.
    sweep = window.page(SweepPage).request()
    assert sweep.options.python == python
    sweep_parser = argparse.ArgumentParser()
    add_sweep_arguments(sweep_parser)
    assert sweep_request_from_args(sweep_parser.parse_args(sweep.argv())).options.python == python
    # Kept for the next window.
    assert window.settings.value("workerPython") == str(python)


def test_an_empty_python_is_branchscopes_own(window, qtbot):
    window.set_controls(python="")
    assert window.current_spec().options.python is None
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    assert "--python" not in window.controller.last_command


def test_set_values_expands_the_home_folder_and_asks_for_no_run(window, qtbot):
    with qtbot.assertNotEmitted(window.controls.runRequested, wait=100):
        window.set_controls(python="~/envs/torch/bin/python")
    assert window.current_spec().options.python == Path.home() / "envs/torch/bin/python"
    # A different Python is another torch: its runs have baselines of their own.
    assert window.current_spec().model_key != window.current_spec().options.replace(python=None).model_key


def test_the_file_chooser_sets_it_and_asks_for_no_run(window, qtbot, tmp_path, monkeypatch):
    chosen = tmp_path / "venv" / "bin" / "python3"
    monkeypatch.setattr("branchscope.app.run_controls.QFileDialog.getOpenFileName", lambda *a, **k: (str(chosen), ""))
    with qtbot.assertNotEmitted(window.controls.runRequested, wait=800):
        window.controls.python_button.click()
    assert window.current_spec().options.python == chosen and window.settings.value("workerPython") == str(chosen)
    assert window.controls.python_edit.text() == str(chosen)
