"""Where the worker's Python cannot run fork (TorchScript missing, raising or disabled): the window
knows before any run, from that Python's probe (faked here), and greys fork out with the reason,
moves a fork choice to threads, unticks it in the Sweep tab, marks a sweep's skipped cells in the
heatmap, and runs the first run's lesson with threads (pytest-qt, offscreen; the fake runner, no
torch). The real probe and `branchscope sweep`/`speedup` with PYTORCH_JIT=0: the last tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.app import mode_check
from branchscope.app.mode_check import ModeCheck
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.app.run_controller import RunSpec
from branchscope.app.run_controls import RunControls
from branchscope.app.sweep_controller import SweepController
from branchscope.app.sweep_panel import SweepPanel
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.sweep import SWEEP_JSON, SweepRequest, load_sweep, new_sweep
from branchscope.profiling.trace.events import SweepEvent, encode_event
from branchscope.widgets.sweep_view import SweepView
from tests.app.test_panel_follows import _specs
from tests.app.test_run_controls import Demo
from tests.builders.runs import write_sweep_json
from tests.gui_helpers import show
from tests.paths import ROOT

#: fork's line where TorchScript is disabled (`fork.check`, as the probe reports it).
WHY = (
    "fork mode needs TorchScript, and TorchScript is disabled in this torch (torch.jit.script gives back the "
    "Python function: PYTORCH_JIT=0?) (torch 2.13.0+cpu): use threads mode (--mode threads), which runs the "
    "same branches on a pool of Python threads in eager PyTorch"
)


@pytest.fixture(autouse=True)
def no_answers_kept():
    mode_check.forget_answers()
    yield
    mode_check.forget_answers()


@pytest.fixture
def controls(qtbot):
    w = RunControls([Demo("twin-mm", "two matmuls")], cores=2)
    qtbot.addWidget(w)
    return w


def _item(controls: RunControls, mode: str):
    return controls.mode_combo.model().item(controls.mode_combo.findData(mode))


# ---- the run controls -----------------------------------------------------------------------------


def test_fork_is_greyed_out_with_the_reason_before_any_run_and_offered_again_when_it_can(controls):
    fork = _item(controls, "fork")
    assert fork.isEnabled() and fork.text() == "fork (inter-op pool)"
    controls.set_mode_problems({"fork": WHY})
    assert not fork.isEnabled() and fork.toolTip() == WHY
    assert fork.text() == "fork (inter-op pool) — cannot run here"
    assert WHY in controls.mode_combo.toolTip()
    assert all(_item(controls, m).isEnabled() for m in ("sequential", "threads"))
    assert controls.mode_reason("fork") == WHY and controls.mode_reason("threads") == ""
    controls.set_mode_problems({})
    assert fork.isEnabled() and fork.text() == "fork (inter-op pool)" and WHY not in controls.mode_combo.toolTip()


def test_a_chosen_fork_gives_way_to_threads_and_says_so(controls):
    controls.set_values(mode="fork", interop=2)
    controls.set_mode_problems({"fork": WHY})
    assert controls.spec().mode == "threads" and controls.spec().interop == 2
    assert controls.progress.format() == "fork cannot run here: threads chosen instead"
    assert controls.progress.toolTip() == WHY
    # a run shown later that was forked sets the controls to threads too: Run never runs what cannot run
    controls.follow("shown: #1 twin-mm · fork · 2×1", model=("demo", "twin-mm"), mode="fork")
    assert controls.spec().mode == "threads"


def test_an_answer_about_another_python_is_not_taken(controls, tmp_path):
    controls.set_values(python=str(tmp_path / "bin" / "python"))
    controls.set_mode_problems({"fork": WHY}, None)  # branchscope's own: not the Python named
    assert _item(controls, "fork").isEnabled()
    controls.set_mode_problems({"fork": WHY}, tmp_path / "bin" / "python")
    assert not _item(controls, "fork").isEnabled()


def test_the_cuda_and_torchscript_reasons_live_side_by_side(controls):
    controls.set_cuda_available(False, "no NVIDIA driver")
    controls.set_mode_problems({"fork": WHY})
    assert controls.mode_combo.toolTip() == f"multi-stream: needs CUDA: no NVIDIA driver\n{WHY}"
    controls.set_cuda_available(True, "")
    assert _item(controls, "streams").isEnabled() and not _item(controls, "fork").isEnabled()


# ---- the probe, off the GUI thread, once per Python --------------------------------------------


def _with_ask(ask):
    """ModeCheck's __init__ with `ask` as its way of asking (a fake probe)."""
    init = mode_check.ModeCheck.__init__

    def with_ask(self, parent=None, ask_=None):
        init(self, parent, ask=ask)

    return with_ask


def test_the_check_asks_each_python_once_off_the_gui_thread(qtbot):
    import threading

    asked = []

    def ask(python):
        asked.append((python, threading.current_thread() is threading.main_thread()))
        return {"fork": WHY} if python is None else {}

    check = ModeCheck(ask=ask)
    with qtbot.waitSignal(check.resolved) as said:
        check.start(None)
    assert said.args == [None, {"fork": WHY}] and asked == [(None, False)]
    with qtbot.waitSignal(check.resolved, timeout=100) as again:
        check.start(None)  # kept: said at once, not asked again
    assert again.args == [None, {"fork": WHY}] and len(asked) == 1
    other = Path("/opt/env/bin/python")
    with qtbot.waitSignal(check.resolved) as said:
        check.start(other)
    assert said.args == [other, {}]


def _slow_python(tmp_path: Path, problems: dict[str, str]) -> Path:
    """A fake Python that answers the probe two seconds late (having made `started` in its folder),
    saying `problems` of its modes."""
    answer = {
        "python": "3.11.9", "executable": "x", "torch": "2.13.0", "missing": {}, "gil": True,
        "versions": {"msgspec": "0.19.0", "psutil": "7.0.0", "numpy": "2.1.0"}, "mode_problems": problems,
    }  # fmt: skip
    path = tmp_path / "python"
    started = tmp_path / "started"
    path.write_text(f"#!/bin/sh\ntouch '{started}'\nsleep 2\ncat <<'EOF'\nbranchscope-probe: {json.dumps(answer)}\nEOF\n")
    path.chmod(0o755)
    return path


def test_the_probe_runs_in_a_child_so_the_windows_own_children_live_on(qtbot, tmp_path):
    """The probe is contained like a worker, its process a subreaper that kills every child it did
    not start: asked in the window's own process, it killed the runner of the window's first run.
    Asked through `mode_probe`'s child, a process the window starts meanwhile lives on."""
    from PySide6.QtCore import QProcess

    python = _slow_python(tmp_path, {"fork": WHY})
    check = ModeCheck()
    sleeper = QProcess()
    try:
        with qtbot.waitSignal(check.resolved, timeout=120_000) as said:
            check.start(python)
            qtbot.waitUntil((tmp_path / "started").exists, timeout=60_000)
            sleeper.start("sleep", ["600"])  # the window's runner, started while the probe asks
            assert sleeper.waitForStarted(30_000)
        assert said.args == [python, {"fork": WHY}]
        # still running (a probe's Containment in this process had killed it before it answered)
        assert not sleeper.waitForFinished(1000) and sleeper.state() == QProcess.ProcessState.Running
    finally:
        sleeper.kill()
        sleeper.waitForFinished(30_000)


def test_a_python_that_could_not_be_asked_offers_every_mode_and_is_asked_again(qtbot):
    answers = iter([None, {"fork": WHY}])  # not there yet (or a probe timed out), then there
    check = ModeCheck(ask=lambda python: next(answers))
    python = Path("/opt/env/bin/python")
    with qtbot.waitSignal(check.resolved) as said:
        check.start(python)
    assert said.args == [python, {}]
    with qtbot.waitSignal(check.resolved) as said:
        check.start(python)
    assert said.args == [python, {"fork": WHY}]


def test_the_window_greys_fork_out_in_the_controls_and_the_sweep_tab(window, qtbot):
    check = window.mode_check
    check.ask = lambda python: {"fork": WHY}
    with qtbot.waitSignal(check.resolved):
        check.start(window.controls.python())
    assert not _item(window.controls, "fork").isEnabled()
    box = window.page(SweepPage).mode_boxes["fork"]
    assert not box.isEnabled() and not box.isChecked() and box.toolTip() == WHY
    assert window.page(SweepPage).request().modes == ("sequential", "threads")


def test_the_window_asks_again_when_the_user_sets_another_python(qtbot, monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(mode_check.ModeCheck, "__init__", _with_ask(lambda python: asked.append(python) or {"fork": WHY}))
    controls = RunControls([Demo("twin-mm")], cores=2)
    qtbot.addWidget(controls)
    panel = SweepPanel(controls.spec, lambda _label: tmp_path, cores=2,
                       controller=SweepController(command=[sys.executable, "-c", "pass"]))  # fmt: skip
    qtbot.addWidget(panel)
    check = ModeCheck.for_window(controls, controls, panel, start=True)
    qtbot.waitUntil(lambda: asked == [None] and not _item(controls, "fork").isEnabled())
    python = tmp_path / "python"
    controls.python_edit.setText(str(python))
    with qtbot.waitSignal(check.resolved):
        controls.python_edit.editingFinished.emit()
    assert asked == [None, python] and not panel.mode_boxes["fork"].isEnabled()


# ---- the lesson --------------------------------------------------------------------------------


def test_the_first_runs_lesson_runs_threads_where_fork_cannot_run(window, qtbot):
    window.controls.set_mode_problems({"fork": WHY})
    messages = []
    window.statusBar().messageChanged.connect(messages.append)
    assert window.start_first_run()
    qtbot.waitUntil(lambda: len(window.run_list.entries) == 2 and not window.controller.is_running(), timeout=40_000)
    assert _specs(window) == [("sequential", 1, 1), ("threads", 2, 1)]
    said = [m for m in messages if "threads 2×1 too" in m]
    assert said and "running its branches on Python threads" in said[0] and f"(fork cannot run here: {WHY})" in said[0]
    assert window.lifecycle.lesson_pair == (window.run_list.entries[0], window.run_list.entries[1])
    assert window.runs.selected_rows() == [0, 1]


# ---- a sweep's skipped cells in the window --------------------------------------------------------


def _skipping_sweep(tmp_path: Path):
    request = SweepRequest(out=tmp_path / "sweep", modes=("sequential", "fork"), interop=(1, 2), intra=(1,),
                           options=RunOptions(demo="twin-mm"), passes=1)  # fmt: skip
    return request, new_sweep(request, 2, {"fork": WHY})


def test_the_heatmap_marks_a_skipped_cell_with_the_reason(qtbot, tmp_path):
    folder = write_sweep_json(tmp_path, [
        {"mode": "sequential", "interop": 1, "intra": 1, "unprofiled_median_ms": 20.0, "any_interop": True},
        {"mode": "fork", "interop": 1, "intra": 1, "status": "not run", "error": WHY, "exit_code": 3},
        {"mode": "fork", "interop": 2, "intra": 1, "status": "not run"},
    ], interop=[1, 2], intra=[1])  # fmt: skip
    view = show(qtbot, SweepView(), 900, 400)
    view.set_sweep(load_sweep(folder), folder)
    skipped, not_run = view.cells[1], view.cells[2]
    assert skipped.skipped == WHY and f"skipped: {WHY}" in skipped.tooltip
    assert not_run.skipped is None and "not run" in not_run.tooltip
    assert len(view.skipped_marks) == 1 and view.skipped_marks[0].rect().x() == 0.0
    texts = {item.toPlainText() for item in view.plots["fork"].items if hasattr(item, "toPlainText")}
    assert {"skipped", "not run"} <= texts
    assert "cross-hatched: skipped, its mode cannot run here (hover for why)" in view.legend.text()
    assert f"skipped: {WHY}" in view.legend.toolTip()


def test_a_sweep_that_skips_cells_says_so_and_counts_only_the_rest(qtbot, tmp_path):
    request, sweep = _skipping_sweep(tmp_path)
    line = encode_event(SweepEvent(out=str(request.out), sweep=sweep)).decode()
    script = f"import sys; print({line!r}, flush=True); sys.exit(3)"
    panel = SweepPanel(lambda: RunSpec("sequential", 1, 1, options=request.options), lambda _label: request.out,
                       cores=2, controller=SweepController(command=[sys.executable, "-c", script]))  # fmt: skip
    qtbot.addWidget(panel)
    panel.passes_spin.setValue(1)
    panel.interop_edit.setText("1,2")
    panel.intra_edit.setText("1")
    panel.mode_boxes["threads"].setChecked(False)
    with qtbot.waitSignal(panel.controller.cellsSkipped):
        assert panel.start()
    assert panel.status.text() == f"skipping 2 cells: {WHY}"
    assert panel.clock is not None and panel.clock.runs == 1  # sequential 1×1 alone
    assert [c.skipped for c in panel.view.cells] == [None, WHY, WHY]


# ---- the real probe and the real commands, with PYTORCH_JIT=0 ---------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTORCH_JIT": "0"}
    cmd = [sys.executable, "-m", "branchscope.app.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_real_sweep_with_pytorch_jit_0_skips_fork_before_any_worker(tmp_path):
    """Only fork asked for: the probe (one torch import) says why, and no worker starts."""
    out = tmp_path / "sweep"
    proc = _cli("sweep", "--demo", "twin-mm", "--modes", "fork", "--interop", "1,2", "--intra", "1",
                "--passes", "1", "--steps", "1", "--out", str(out))  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.splitlines()
    skipped = [line for line in lines if line.startswith("skipped fork ")]
    assert [line.split(":")[0] for line in skipped] == ["skipped fork 1×1", "skipped fork 2×1"]
    assert all("fork mode needs TorchScript, and TorchScript is disabled" in line and "use threads mode" in line for line in skipped)
    assert lines[-1].startswith("error: no cell ran: fork mode needs TorchScript")
    data = json.loads((out / SWEEP_JSON).read_text())
    assert [(c["status"], c["exit_code"]) for c in data["cells"]] == [("not run", 3), ("not run", 3)]
    assert sorted(p.name for p in out.iterdir()) == [SWEEP_JSON]  # no cell folder: nothing ran


def test_a_real_speedup_with_pytorch_jit_0_leaves_fork_out(tmp_path):
    proc = _cli("speedup", "--demo", "twin-mm", "--configs", "sequential:1x1,fork:2x1")
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("skipped fork:2x1: fork mode needs TorchScript, and TorchScript is disabled")
    assert lines[-1].startswith("error: nothing left to measure against the baseline: fork mode needs TorchScript")
