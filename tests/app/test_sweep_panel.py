"""The sweep heatmap (widgets/sweep_view.py) on a synthetic sweep.json, and the sweep controller
(app/sweep_controller.py) running the real `branchscope sweep --jsonl`."""

from __future__ import annotations

import json
import math
import signal
import sys
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest
from PySide6.QtCore import QPointF, Qt

from branchscope.app.sweep_controller import SweepController
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.sweep import SWEEP_JSON, SweepRequest, load_sweep
from branchscope.profiling.trace.events import CellEvent
from branchscope.profiling.trace.records import lenient
from branchscope.profiling.trace.sweep_records import CellRecord, SweepRecord
from branchscope.widgets.sweep_view import SweepView
from tests.builders.runs import write_sweep_json
from tests.gui_helpers import show
from tests.paths import MODELS
from tests.processes import wait_until


def cell(mode, interop, intra, ms=None, status="done", over=False, error=None):
    return {
        "mode": mode, "interop": interop, "intra": intra, "run": f"{mode}-{interop}x{intra}",
        "status": status, "oversubscribed": over, "median_ms": None if ms is None else ms * 1.3,
        "unprofiled_median_ms": ms, "unprofiled_spread_ms": None if ms is None else [ms - 1, ms - 0.5, ms + 0.5, ms + 2],
        "error": error, "exit_code": 0 if status == "done" else None,
    }  # fmt: skip


SYNTHETIC = {
    "sweep": 1, "cores": 2, "modes": ["sequential", "fork"], "interop": [1, 2], "intra": [1, 2], "best": 5,
    "cells": [
        cell("sequential", 1, 1, 20.0), cell("sequential", 1, 2, 18.0),
        cell("sequential", 2, 1, 21.0), cell("sequential", 2, 2, 25.0, over=True),
        cell("fork", 1, 1, 19.0), cell("fork", 2, 1, 11.0),
        cell("fork", 1, 2, None, status="failed", error="the worker died (killed by SIGKILL)"),
        cell("fork", 2, 2, None, status="not run", over=True),
    ],
}  # fmt: skip


@pytest.fixture
def sweep_folder(tmp_path) -> Path:
    (tmp_path / SWEEP_JSON).write_text(json.dumps(SYNTHETIC))
    return tmp_path


@pytest.fixture
def view(qtbot, sweep_folder) -> SweepView:
    v = SweepView()
    v.set_sweep(load_sweep(sweep_folder), sweep_folder)
    return show(qtbot, v, 900, 400)


def click(qtbot, view: SweepView, index: int) -> None:
    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=view.cell_center(index))


def test_heatmap_per_mode_with_labelled_axes_values_and_one_colour_scale(view):
    assert list(view.plots) == ["sequential", "fork"]
    for plot in view.plots.values():
        assert plot.getAxis("bottom").labelText == "inter-op threads"
        assert plot.getAxis("left").labelText == "intra-op threads"
        assert plot.getAxis("bottom")._tickLevels[0] == [(0.5, "1"), (1.5, "2")]
    # x: inter-op, y: intra-op; failed and not-run cells have no colour
    seq, fork = view.images["sequential"].image, view.images["fork"].image
    assert seq.tolist() == [[20.0, 18.0], [21.0, 25.0]]
    assert fork[0, 0] == 19.0 and fork[1, 0] == 11.0 and np.isnan(fork[0, 1]) and np.isnan(fork[1, 1])
    assert view.levels == (11.0, 25.0) and view.color_bar is not None
    for image in view.images.values():
        assert tuple(image.levels) == (11.0, 25.0)  # one scale for every mode
    texts = {(item.pos().x(), item.pos().y(), item.toPlainText()) for plot in view.plots.values()
             for item in plot.items if hasattr(item, "toPlainText")}  # fmt: skip
    assert (0.5, 1.5, "18.0 ms") in texts and (1.5, 0.5, "★ 11.0 ms") in texts
    assert (0.5, 1.5, "failed") in texts and (1.5, 1.5, "not run") in texts


def test_best_and_oversubscribed_cells_are_marked_and_the_legend_says_so(view):
    best = view.best_marker
    assert best is not None and best.scene() is view.graphics.scene()
    assert best.parentItem() is view.plots["fork"].getViewBox().childGroup
    assert best.rect().contains(1.5, 0.5) and not best.rect().contains(0.5, 0.5)
    # fork 2×2 computes with 4 threads on 2 cores; sequential 2×2 with 2 (its inter-op pool idle), so
    # only fork's is hatched, whatever sweep.json's flag says
    marks = view.oversubscribed_marks
    assert [(m.rect().x(), m.rect().y()) for m in marks] == [(1.0, 1.0)]
    assert [m.parentItem() for m in marks] == [view.plots["fork"].getViewBox().childGroup]
    assert all(m.brush().style() == Qt.BrushStyle.BDiagPattern for m in marks)
    text = view.legend.text()
    assert "★ best: fork 2×1, 11.000 ms (outlined)" in text
    assert "hatched: oversubscribed, more threads computing than 2 cores" in text
    sequential_2x2 = view.cells[3]
    assert not sequential_2x2.oversubscribed and "oversubscribed:" not in sequential_2x2.tooltip
    assert "oversubscribed: 4 threads > 2 cores" in view.cells[7].tooltip
    assert "grey: failed" in text and "6 of 8 cells ran" in text
    failed = view.cells[6]
    assert "failed: the worker died (killed by SIGKILL)" in failed.tooltip


def test_a_click_chooses_a_cell_and_a_second_click_compares(qtbot, view, sweep_folder):
    with qtbot.waitSignal(view.cellChosen) as chosen:
        click(qtbot, view, 1)
    assert chosen.args == [str(sweep_folder / "sequential-1x2")]
    assert view.selected == str(sweep_folder / "sequential-1x2")
    with qtbot.waitSignal(view.compareRequested) as compared:
        click(qtbot, view, 5)
    assert compared.args == [str(sweep_folder / "sequential-1x2"), str(sweep_folder / "fork-2x1")]
    assert view.selected is None  # the next click starts afresh
    with qtbot.waitSignal(view.cellChosen) as chosen:
        click(qtbot, view, 4)
    assert chosen.args == [str(sweep_folder / "fork-1x1")]


def test_failed_cells_are_not_chosen_and_escape_forgets_the_first_click(qtbot, view):
    chosen: list[str] = []
    compared: list[tuple[str, str]] = []
    view.cellChosen.connect(chosen.append)
    view.compareRequested.connect(lambda a, b: compared.append((a, b)))
    click(qtbot, view, 6)  # failed
    click(qtbot, view, 7)  # not run
    assert chosen == [] and view.selected is None
    click(qtbot, view, 0)
    assert len(chosen) == 1 and view.selected is not None
    qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert view.selected is None
    click(qtbot, view, 0)
    click(qtbot, view, 0)  # the same cell twice: nothing to compare
    assert compared == [] and len(chosen) == 3


def test_cells_arriving_update_the_view(qtbot, sweep_folder):
    view = show(qtbot, SweepView(), 600, 300)
    assert view.plots == {} and view.legend.text() == "No sweep cells yet."
    data = SweepRecord.parse(json.loads(json.dumps(SYNTHETIC)))
    for c in data.cells:
        c.status, c.unprofiled_median_ms = "not run", None
    data.best = None
    view.set_sweep(data, sweep_folder)
    assert view.best_marker is None and view.color_bar is None and "0 of 8 cells ran" in view.legend.text()
    data.cells[0] = lenient(CellRecord, cell("sequential", 1, 1, 20.0))
    data.best = 0
    view.set_sweep(data, sweep_folder)
    assert view.best_marker is not None and view.best_marker.rect().contains(0.5, 0.5)
    assert view.images["sequential"].image[0, 0] == 20.0 and math.isnan(view.images["sequential"].image[1, 0])
    assert view.cells[0].folder == sweep_folder / "sequential-1x1" and view.cells[1].folder is None


# ---- passes, ties and a mode without an inter-op pool -------------------------------------------

def tied_cell(mode, interop, intra, ms, spread, passes, **kw):
    return {"mode": mode, "interop": interop, "intra": intra, "unprofiled_median_ms": ms, "median_ms": None if ms is None else ms * 1.3,
            "unprofiled_spread_ms": spread, "pass_medians_ms": passes, "any_interop": mode == "sequential", **kw}


#: A sweep of 3 passes as `branchscope sweep` now writes it: sequential once per intra-op count
#: (across both inter-op columns); fork 2×1 best, sequential 1×2 within noise of it (quartiles overlap).
TIED_CELLS = [
    tied_cell("sequential", 1, 1, 47.8, [45.0, 47.0, 49.0, 52.0], [47.0, 47.8, 60.0]),
    tied_cell("sequential", 1, 2, 26.0, [25.0, 25.5, 26.5, 28.0], [25.8, 26.0, 26.3]),
    tied_cell("fork", 1, 1, 60.0, [58.0, 59.0, 61.0, 62.0], [59.0, 60.0, 61.0]),
    tied_cell("fork", 2, 1, 25.0, [24.0, 24.5, 26.0, 27.0], [24.8, 25.0, 25.5]),
    tied_cell("fork", 1, 2, 40.0, [39.0, 39.5, 40.5, 41.0], [39.8, 40.0, 40.2]),
    tied_cell("fork", 2, 2, None, None, None, status="not run", oversubscribed=True),
]


@pytest.fixture
def tied_folder(tmp_path) -> Path:
    return write_sweep_json(tmp_path / "tied", TIED_CELLS, passes=3, modes=["sequential", "fork"], interop=[1, 2],
                            intra=[1, 2], complete=True)  # fmt: skip


def _texts(view: SweepView, mode: str) -> set[tuple[float, float, str]]:
    plot = view.plots[mode]
    return {(i.pos().x(), i.pos().y(), i.toPlainText()) for i in plot.items if hasattr(i, "toPlainText")}


def test_every_tied_cell_is_marked_and_painted_as_the_best(qtbot, tied_folder):
    view = show(qtbot, SweepView(), 900, 400)
    view.set_sweep(load_sweep(tied_folder), tied_folder)
    assert view.sweep.ties == [3, 1]
    best = view.best_marker
    assert best is not None and best.parentItem() is view.plots["fork"].getViewBox().childGroup
    assert best.rect().contains(1.5, 0.5) and not best.rect().contains(0.5, 0.5)
    [tie] = view.tie_markers  # sequential 1×2, across both inter-op columns
    assert tie.parentItem() is view.plots["sequential"].getViewBox().childGroup and tie.scene() is view.graphics.scene()
    assert tie.rect().contains(0.5, 1.5) and tie.rect().contains(1.5, 1.5) and not tie.rect().contains(0.5, 0.5)
    # Within noise of the best: the best's colour (its own median written in it), never the other end of the scale.
    seq, fork = view.images["sequential"].image, view.images["fork"].image
    assert seq[:, 1].tolist() == [25.0, 25.0] and seq[:, 0].tolist() == [47.8, 47.8]
    assert fork[1, 0] == 25.0 and fork[0, 0] == 60.0
    assert view.levels == (25.0, 60.0)
    assert (1.0, 1.5, "★ 26.0 ms") in _texts(view, "sequential") and (1.0, 0.5, "47.8 ms") in _texts(view, "sequential")
    assert (1.5, 0.5, "★ 25.0 ms") in _texts(view, "fork") and (0.5, 1.5, "40.0 ms") in _texts(view, "fork")
    text = view.legend.text()
    assert "★ best: fork 2×1, sequential 1×2 (within noise of each other; outlined, painted the best's colour)" in text
    assert "a cell across every inter-op column: its mode has no inter-op pool, so it ran once" in text
    tooltip = next(c for c in view.cells if c.index == 1).tooltip
    assert "within noise of the best" in tooltip and "passes' medians 25.800, 26.000, 26.300 ms" in tooltip


def test_a_mode_without_an_inter_op_pool_spans_every_inter_op_column(qtbot, tied_folder):
    view = show(qtbot, SweepView(), 900, 400)
    view.set_sweep(load_sweep(tied_folder), tied_folder)
    assert view.plots["sequential"].getAxis("bottom")._tickLevels[0] == [(1.0, "any (no inter-op pool)")]
    assert view.plots["fork"].getAxis("bottom")._tickLevels[0] == [(0.5, "1"), (1.5, "2")]
    seq11 = next(c for c in view.cells if c.index == 0)
    assert (seq11.x, seq11.width, "no inter-op pool: one run stands for every inter-op count" in seq11.tooltip) == (0, 2, True)
    vb = view.plots["sequential"].getViewBox()
    for x in (0.5, 1.5):  # a click on either column is the one cell
        pos = view.graphics.mapFromScene(vb.mapViewToScene(QPointF(x, 0.5)))
        with qtbot.waitSignal(view.cellChosen) as chosen:
            qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        assert chosen.args == [str(tied_folder / "sequential-1x1")]
        qtbot.keyClick(view, Qt.Key.Key_Escape)


def test_all_cells_within_noise_are_one_colour(qtbot, tmp_path):
    cells = [tied_cell("sequential", 1, 1, 47.8, [45.0, 47.0, 49.0, 52.0], [47.0, 47.8, 60.0]),
             tied_cell("fork", 2, 1, 46.0, [40.0, 44.0, 52.0, 60.0], [44.0, 46.0, 55.0])]  # fmt: skip
    folder = write_sweep_json(tmp_path / "s", cells, passes=3)
    view = show(qtbot, SweepView(), 600, 300)
    view.set_sweep(load_sweep(folder), folder)
    values = [v for image in view.images.values() for v in image.image.ravel().tolist() if not math.isnan(v)]
    assert set(values) == {46.0} and len(view.tie_markers) == 1


def test_the_panel_says_every_tied_cell_is_best(qtbot, tied_folder):
    from branchscope.app.runs import RunSpec
    from branchscope.app.sweep_panel import SweepPanel

    panel = SweepPanel(lambda: RunSpec("sequential", 1, 1, options=RunOptions(demo="twin-mm")), lambda _l: tied_folder,
                       cores=2, controller=SweepController(command=[sys.executable, "-c", "pass"]))  # fmt: skip
    qtbot.addWidget(panel)
    assert panel.open_sweep(tied_folder)
    assert panel.status.text() == f"best: fork 2×1, sequential 1×2 (within noise of each other) · from disk: {tied_folder}"
    assert panel.passes_spin.value() == 3 and panel.request().passes == 3
    panel.passes_spin.setValue(1)
    assert panel.request().passes == 1


# ---- the panel over a stand-in sweep (no torch) ------------------------------------------------

#: Writes sweep.json (two cells, not run) and says a step; on SIGTERM, as `branchscope sweep` does,
#: marks the first cell done and the sweep cancelled in sweep.json, and exits.
FAKE_SWEEP = """
import json, signal, sys, time
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
def cell(intra, status, ms=None):
    return {"mode": "sequential", "interop": 1, "intra": intra, "run": f"sequential-1x{intra}", "status": status,
            "oversubscribed": False, "unprofiled_median_ms": ms, "median_ms": ms}
def write(cells, cancelled=None):
    data = {"sweep": 1, "cores": 2, "modes": ["sequential"], "interop": [1], "intra": [1, 2], "cells": cells,
            "cancelled": cancelled, "complete": False}
    (out / "sweep.json").write_text(json.dumps(data))
def stop(*_):
    write([cell(1, "done", 5.0), cell(2, "not run")], "SIGTERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
write([cell(1, "not run"), cell(2, "not run")])
print(json.dumps({"event": "progress", "index": 0, "step": 1, "of": 2}), flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def panel(qtbot, tmp_path):
    from branchscope.app.runs import RunSpec
    from branchscope.app.sweep_panel import SweepPanel

    script = tmp_path / "fake_sweep.py"
    script.write_text(FAKE_SWEEP)
    folders = iter(tmp_path / f"sweep-{k}" for k in range(10))
    controller = SweepController(command=[sys.executable, str(script)])
    p = SweepPanel(lambda: RunSpec("sequential", 1, 1, options=RunOptions(demo="twin-mm")), lambda _label: next(folders),
                   cores=2, controller=controller)  # fmt: skip
    qtbot.addWidget(p)
    assert [m for m, box in p.mode_boxes.items() if box.isChecked()] == ["sequential", "fork", "threads"]
    p.mode_boxes["fork"].setChecked(False)
    p.mode_boxes["threads"].setChecked(False)
    p.interop_edit.setText("1")
    p.intra_edit.setText("1,2")
    yield p
    p.shutdown()
    assert controller.active_processes() == 0


def test_cancel_frees_the_panel_at_once_and_shows_the_sweep_once_its_process_stopped(qtbot, panel, tmp_path):
    c = panel.controller
    with qtbot.waitSignal(c.progress, timeout=30_000):
        assert panel.start()
    assert not panel.start_button.isEnabled() and panel.cancel_button.isEnabled()
    assert [cell.status for cell in panel.view.sweep.cells] == ["not run", "not run"]  # from `started`
    with qtbot.waitSignal(c.stopped, timeout=30_000) as stopped:
        panel.cancel_button.click()
        # At once: another sweep may start while this one's process stops.
        assert panel.start_button.isEnabled() and not panel.cancel_button.isEnabled()
        assert panel.status.text().startswith("cancelling;")
    assert stopped.args == [str(tmp_path / "sweep-0")]
    # Then sweep.json as the stopped sweep left it.
    assert panel.status.text() == f"cancelled; the finished cells are kept in {tmp_path / 'sweep-0'}"
    assert panel.view.sweep.cancelled == "SIGTERM"
    assert [cell.status for cell in panel.view.sweep.cells] == ["done", "not run"]


@pytest.mark.parametrize("program", ["missing", "empty"])
def test_a_sweep_that_cannot_start_says_so_and_the_panel_stays_usable(qtbot, panel, tmp_path, program):
    # "empty": Qt fails inside QProcess.start(), before the panel's start() returns; "missing": just after.
    fake = panel.controller.command
    panel.controller.command = [str(tmp_path / "no-such-sweep")] if program == "missing" else [""]
    failed: list[str] = []
    panel.controller.failed.connect(failed.append)
    panel.start()
    qtbot.waitUntil(lambda: bool(failed))
    assert panel.status.text().startswith("sweep failed: could not start the sweep")
    assert panel.start_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.controller.command = fake  # the next sweep starts
    with qtbot.waitSignal(panel.controller.progress, timeout=30_000):
        assert panel.start()
    assert panel.status.text().startswith("sweeping 2 cells × 3 passes = 6 runs, ") and panel.cancel_button.isEnabled()


def test_a_sweep_started_while_the_cancelled_one_stops_is_left_alone(qtbot, panel, tmp_path):
    c = panel.controller
    with qtbot.waitSignal(c.progress, timeout=30_000):
        panel.start()
    with qtbot.waitSignal(c.stopped, timeout=30_000) as stopped:
        panel.cancel_button.click()
        assert panel.start()  # before the first sweep's process has ended
    assert stopped.args == [str(tmp_path / "sweep-0")]
    assert c.is_running() and panel.folder == tmp_path / "sweep-1"
    assert panel.status.text().startswith("sweeping 2 cells × 3 passes = 6 runs, ") and panel.cancel_button.isEnabled()
    assert panel.view.sweep.cancelled is None


# ---- the controller: real sweeps (torch workers, seconds each) ---------------------------------

def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in (p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def controller(qtbot):
    c = SweepController()
    yield c
    c.shutdown()
    assert c.active_processes() == 0


@pytest.mark.slow
def test_controller_runs_a_sweep_and_reports_each_cell(qtbot, controller, tmp_path):
    out = tmp_path / "sweep"
    cells: list[CellEvent] = []
    controller.cellFinished.connect(cells.append)
    request = SweepRequest(out=out, modes=("sequential", "streams"), interop=(1,), intra=(1,), options=RunOptions(demo="twin-mm", steps=2, warmup=1), passes=1)
    with qtbot.waitSignal(controller.started, timeout=60_000) as started:
        controller.start(request)
    assert [c.status for c in started.args[0].cells] == ["not run", "not run"]
    assert controller.last_command[1:4] == ["-I", "-m", "branchscope.app.cli"]
    with qtbot.waitSignal(controller.finished, timeout=240_000) as finished:
        pass
    assert finished.args == [str(out)]
    assert [(c.index, c.cell.status, c.folder) for c in cells] == [
        (0, "done", str(out / "sequential-1x1")), (1, "failed", str(out / "streams-1x1")),
    ]  # fmt: skip
    assert cells[1].cell.exit_code == 3 and cells[0].best == 0
    assert load_sweep(out).cells[0].unprofiled_median_ms == cells[0].cell.unprofiled_median_ms
    assert controller.active_processes() == 0 and not controller.is_running()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_controller_cancel_keeps_finished_cells_and_leaves_nothing_running(qtbot, controller, tmp_path, monkeypatch):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("BRANCHSCOPE_TEST_MARKER", marker)  # QProcess passes the environment on
    model = MODELS / "hangs_with_two.py"
    out = tmp_path / "sweep"
    request = SweepRequest(out=out, modes=("sequential",), interop=(1,), intra=(1, 2), options=RunOptions(model=model, steps=2, warmup=1))
    failed: list[str] = []
    controller.failed.connect(failed.append)
    with qtbot.waitSignal(controller.cellFinished, timeout=240_000) as first:
        controller.start(request)
    assert first.args[0].cell.status == "done", first.args[0].cell.error
    wait_until(lambda: _with_marker(marker), 120, "the second cell's model to hang")
    canceled: list[str] = []
    controller.canceled.connect(canceled.append)
    with qtbot.waitSignal(controller.stopped, timeout=60_000) as stopped:
        controller.cancel()
        assert canceled == [str(out)] and not controller.is_running()  # at once, the process still stopping
    assert stopped.args == [str(out)] and canceled == [str(out)] and failed == []
    data = load_sweep(out)
    assert [c.status for c in data.cells] == ["done", "not run"]
    assert data.cancelled == signal.Signals(signal.SIGTERM).name and data.best == 0
    assert controller.active_processes() == 0
    wait_until(lambda: not _with_marker(marker), 30, "the hanging model's child to end")


def test_a_double_click_on_a_cell_activates_it(qtbot, view, sweep_folder):
    port, at = view.graphics.viewport(), view.cell_center(1)
    with qtbot.waitSignal(view.cellActivated) as activated:  # as Qt delivers one: click, double-click, release
        qtbot.mouseClick(port, Qt.MouseButton.LeftButton, pos=at)
        qtbot.mouseDClick(port, Qt.MouseButton.LeftButton, pos=at)
        qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=at)
    assert activated.args == [str(sweep_folder / "sequential-1x2")]
    assert "double-click to open it" in view.legend.text()
