"""The Sweep tab says how long a sweep will take before Start (from its cells × passes and a run's
guessed time: an earlier run of the model, else its steps), and while it runs which cell and pass
runs and the time left, from the runs that finished (on a clock the test moves)."""

from __future__ import annotations

import sys

import pytest

from branchscope.app.runs import RunSpec
from branchscope.app.sweep_controller import SweepController
from branchscope.app.sweep_panel import SweepPanel
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.sweep_eta import duration_text, run_guess_s
from branchscope.profiling.trace.events import CellEvent
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sweep_records import DONE, CellRecord


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


#: Waits for its stdin to close: a sweep's process that says nothing (its events are the test's).
QUIET_SWEEP = [sys.executable, "-c", "import sys; sys.stdin.read()"]


@pytest.fixture
def clock(monkeypatch):
    now = Clock()
    monkeypatch.setattr("branchscope.profiling.run.sweep_eta.monotonic", now)
    return now


def _panel(qtbot, tmp_path, earlier=None):
    spec = RunSpec("sequential", 1, 1, options=RunOptions(demo="twin-mm", steps=5, warmup=3))
    folders = iter(tmp_path / f"sweep-{k}" for k in range(10))
    panel = SweepPanel(lambda: spec, lambda _label: next(folders), cores=2,
                       controller=SweepController(command=QUIET_SWEEP), earlier_run=lambda _spec: earlier)  # fmt: skip
    qtbot.addWidget(panel)
    panel.mode_boxes["threads"].setChecked(False)
    panel.interop_edit.setText("2")
    panel.intra_edit.setText("1,2")
    return panel


def test_before_start_the_tab_says_how_long_the_forms_sweep_will_take(qtbot, tmp_path):
    panel = _panel(qtbot, tmp_path)
    # sequential 1×1, 1×2, fork 2×1, 2×2: 4 cells × 3 passes
    guess = duration_text(12 * run_guess_s(5, 3))
    assert panel.estimate.text() == f"4 cells × 3 passes = 12 runs, {guess} (a guess until a cell finishes)"
    panel.passes_spin.setValue(1)
    panel.mode_boxes["fork"].setChecked(False)
    assert panel.estimate.text().startswith("2 cells, ")
    panel.intra_edit.setText("x")
    assert panel.estimate.text() == ""  # no sweep in the form: nothing to time
    assert list(tmp_path.iterdir()) == []  # timing the form makes no folder


def test_an_earlier_run_of_the_model_times_the_guess(qtbot, tmp_path):
    earlier = RunRecord(phase_seconds={"start": 20.0, "profile": 28.0})  # a slow model: about 50 s a run
    panel = _panel(qtbot, tmp_path, earlier)
    assert panel.estimate.text().startswith("4 cells × 3 passes = 12 runs, about 10 min")


def test_while_it_runs_the_tab_says_the_cell_the_pass_and_the_time_left_from_the_runs_that_finished(
    qtbot, tmp_path, clock
):
    panel = _panel(qtbot, tmp_path)
    panel.passes_spin.setValue(2)
    assert panel.start()
    c = panel.controller
    assert panel.status.text().startswith("sweeping 4 cells × 2 passes = 8 runs, ")
    assert panel.estimate.text().startswith("cell 1 of 4 · pass 1 of 2 · ") and "a guess" in panel.estimate.text()
    for index in range(4):  # pass 1: each run takes 60 s
        c.progress.emit(index, 1, 5)
        clock.t += 60.0
        cell = CellRecord(mode="fork", interop=2, intra=1, run="fork-2x1", status=DONE, unprofiled_median_ms=20.0)
        c.cellFinished.emit(CellEvent(index=index, of=4, out=str(panel.folder), folder="", cell=cell, sweep_pass=1,
                                      passes=2))  # fmt: skip
    c.progress.emit(0, 1, 5)  # pass 2 begins
    assert panel.estimate.text() == "cell 1 of 4 · pass 2 of 2 · about 4 min left"  # 4 runs of 60 s
    clock.t += 50.0
    panel._ticker.timeout.emit()  # the second's refresh: the running run's 50 s come off
    assert panel.estimate.text() == "cell 1 of 4 · pass 2 of 2 · about 3 min left"
    panel.controller.cancel()
    assert panel.clock is None and panel.estimate.text().startswith("4 cells × 2 passes = 8 runs, ")
    panel.shutdown()
