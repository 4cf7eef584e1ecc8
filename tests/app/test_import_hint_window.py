"""The window's failure dialog for a model whose import fails on a module PYTHONPATH holds says what the
CLI says (`model_source.import_hint`, tests/run/test_import_hint.py): the worker runs isolated, and how
to make the module importable. One real worker, which fails at the import, before any step."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from branchscope.app.main_window import MainWindow
from branchscope.app.run_controller import RunController


@pytest.mark.slow
def test_the_failure_dialog_says_the_worker_runs_isolated(qtbot, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "bs_window_only_on_pythonpath.py").write_text("VALUE = 1\n")
    model = tmp_path / "model.py"
    model.write_text("import bs_window_only_on_pythonpath\n\ndef build_model():\n    pass\n\ndef example_inputs():\n    return ()\n")
    monkeypatch.setenv("PYTHONPATH", str(lib))  # the window's environment, which its runner and worker inherit
    controller = RunController(runs_dir=tmp_path / "runs")
    win = MainWindow(controller=controller, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                     check_cuda=False)  # fmt: skip
    qtbot.addWidget(win)
    try:
        win.set_controls(mode="sequential", interop=1, intra=1, steps=1)
        with qtbot.waitSignal(win.controller.failed, timeout=240_000):
            win.add_model_file(str(model))
        box = win.message_box
        assert box is not None
        text = box.text()
        assert text.startswith("importing model.py raised ModuleNotFoundError: No module named 'bs_window_only_on_pythonpath'")
        assert f"bs_window_only_on_pythonpath is on PYTHONPATH ({lib}), but the worker runs isolated (python -I" in text
        assert "--python" in text and f"sys.path.insert(0, {str(lib)!r})" in text
        box.close()
    finally:
        controller.shutdown()
