"""The window's lesson on one screen: the baseline run it adds, the one-line summary, runs compared
side by side, the sweep tab, the branch legend and the range panel (fake runner, no torch)."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.profiling.trace.run_info import step_label
from tests.builders.runs import write_run_folder as _run_folder
from tests.builders.runs import write_small_trace, write_sweep_folder


def test_a_run_without_its_sequential_1x1_baseline_runs_it_too_and_the_summary_line_compares(window, qtbot):
    window.auto_baseline = True
    window.set_controls(demo="inception", mode="fork", interop=2, intra=1)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()
    # the fork run is listed, and the model's sequential 1×1 run follows by itself
    qtbot.waitUntil(lambda: window.runs_table.rowCount() == 2, timeout=20_000)
    specs = [(e.spec.mode, e.spec.interop, e.spec.intra) for e in window.run_list.entries]
    assert specs == [("fork", 2, 1), ("sequential", 1, 1)]
    assert window.run_list.speedup(0) == 2.0  # the fake runner: sequential 40 ms, fork 20 ms
    window.show_entry(0)
    line = window.page(RunPage).summary_line.whole_text()
    assert "2 branches on 2 inter-op threads" in line and "2.00× faster than sequential 1×1" in line
    assert "within noise: no" in line
    # a third run of the same model finds its baseline: nothing more is started
    window.set_controls(mode="fork", interop=1, intra=1)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()
    assert not window.controller.is_running() and window.runs_table.rowCount() == 3


def test_selected_runs_show_side_by_side_on_one_scale_with_their_summary(window, qtbot, tmp_path):
    seq = _run_folder(tmp_path / "seq", "sequential", 1, 1, 40.0)
    fork = _run_folder(tmp_path / "fork", "fork", 2, 1, 20.0)
    assert window.open_trace_files([str(seq), str(fork)]) == 2
    assert [e.title for e in window.run_list.entries] == ["inception · sequential · 1×1", "inception · fork · 2×1"]
    assert not window.compare_button.isEnabled()
    window.runs.selectAll()
    assert window.compare_button.isEnabled()
    window.compare_button.click()
    assert window.tabs.currentWidget() is window.page(ComparePage)
    assert not window.side_panel.isVisible()  # the compare view gets the room of the run's side panels
    rows = window.page(ComparePage).workspace.shown
    assert len(rows) == 2
    # aligned at their first profiled step, and the sequential run is longer on screen
    for shown in rows:
        first = shown.trace.find(step_label(0))[0]
        assert shown.origin == int(shown.trace.start_ns[first])
    (_, seq_end), (_, fork_end) = (r.extent() for r in rows)
    assert seq_end > fork_end
    summary = dict(window.page(ComparePage).summary_rows())
    assert summary["speedup vs baseline"][1] == "2.00×"  # the sequential 1×1 run is the baseline


def test_the_sweep_tab_shows_a_cells_run_on_a_click_and_compares_two(window, qtbot, tmp_path):
    sweep_dir = write_sweep_folder(tmp_path / "sweep")
    a, b = sweep_dir / "sequential-1x1", sweep_dir / "fork-2x1"
    panel = window.page(SweepPage)
    assert panel.open_sweep(sweep_dir)
    assert "fastest: fork 2×1" in panel.status.text()
    # a sweep opened from disk names its model and says where it came from
    assert panel.status.text().startswith("inception: fastest: fork 2×1") and f"from disk: {sweep_dir}" in panel.status.text()
    # a click shows the cell's run and keeps the heatmap in front, for a second click to compare
    panel.view.cellChosen.emit(str(b))
    assert window.tabs.currentWidget() is panel and window.run_list[window.run_list.current].trace_path.parent == b
    assert "shown on the Run tab (double-click the cell to go there)" in panel.status.text()
    # a double-click opens the run
    panel.view.cellActivated.emit(str(b))
    assert window.tabs.currentIndex() == 0 and window.run_list[window.run_list.current].trace_path.parent == b
    panel.view.compareRequested.emit(str(a), str(b))
    assert window.tabs.currentWidget() is window.page(ComparePage)
    assert len(window.page(ComparePage).workspace.shown) == 2
    assert window.runs_table.rowCount() == 2  # the cell shown first was not listed twice


def test_opening_a_sweep_folder_shows_its_heatmap_in_the_sweep_tab(window, tmp_path):
    sweep_dir = tmp_path / "sweep"
    a = _run_folder(sweep_dir / "fork-1x1", "fork", 1, 1, 30.0)
    cell = {"mode": "fork", "interop": 1, "intra": 1, "run": a.name, "status": "done",
            "median_ms": 30.0, "unprofiled_median_ms": 30.0, "unprofiled_spread_ms": [30.0] * 4}  # fmt: skip
    (sweep_dir / "sweep.json").write_text(json.dumps({"sweep": 1, "cores": 2, "cells": [cell], "best": 0}))
    assert window.open_trace_files([str(sweep_dir)]) == 1
    assert window.tabs.currentWidget() is window.page(SweepPage)
    assert len(window.page(SweepPage).view.cells) == 1 and window.runs_table.rowCount() == 0


def test_a_sweep_folder_that_is_not_one_says_so(window, tmp_path):
    assert not window.page(SweepPage).open_sweep(tmp_path)
    assert "sweep.json" in window.page(SweepPage).status.text()


def test_the_legend_lists_the_branches_and_a_shift_drag_range_fills_the_range_panel(window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_small_trace(tmp_path / "t.json", "fork"))]) == 1
    assert window.side_panel.legend.item_of("left") is not None and window.side_panel.legend.item_of("right") is not None
    trace = window.page(RunPage).timeline.trace
    start, end = trace.span()
    window.page(RunPage).timeline.select_range(start, end)
    assert window.side_panel.tabs.currentWidget() is window.side_panel.ranges
    names = {r.name for r in window.side_panel.ranges.range_rows}
    assert "aten::add" in names and window.side_panel.ranges.range_model.rowCount() == len(window.side_panel.ranges.range_rows)


def test_a_model_fx_cannot_trace_says_why_above_the_timeline(window, tmp_path):
    fx_error = "torch.fx could not trace Net: TraceError: symbolically traced variables cannot be used as inputs to control flow"
    folder = _run_folder(tmp_path / "run", "sequential", 1, 1, 40.0, fx_error=fx_error)
    assert window.open_trace_files([str(folder)]) == 1
    assert "No branches: torch.fx could not trace Net" in window.page(RunPage).summary_line.whole_text()


def test_branches_found_through_torch_export_say_so_and_why_fx_failed(window, tmp_path):
    folder = _run_folder(tmp_path / "run", "fork", 2, 1, 20.0, tracer="torch.export (non-strict)",
                         tracer_errors={"torch.fx": "torch.fx could not trace BertModel: TypeError: 'Proxy' object"})  # fmt: skip
    assert window.open_trace_files([str(folder)]) == 1
    text = window.page(RunPage).summary_line.whole_text()
    assert "Branches found through torch.export (non-strict); torch.fx could not trace BertModel: TypeError" in text


def test_a_run_whose_timings_were_not_steady_says_so_with_its_warnings_in_the_tooltip(window, tmp_path):
    warnings = ["warm-up reached its cap of 200 steps after 200 steps without settling", "profiler overhead ×0.07: …"]
    steady = _run_folder(tmp_path / "steady", "sequential", 1, 1, 40.0, warnings=[])
    unsteady = _run_folder(tmp_path / "unsteady", "fork", 2, 1, 20.0, warnings=warnings)
    assert window.open_trace_files([str(unsteady)]) == 1
    assert "⚠ 2 warnings" in window.page(RunPage).summary_line.whole_text()
    tip = window.page(RunPage).summary_line.toolTip()
    assert tip.endswith("\n⚠ " + warnings[0] + "\n⚠ " + warnings[1])  # under the whole header
    assert window.open_trace_files([str(steady)]) == 1  # the next run shown has none: nothing left of them
    assert "warning" not in window.page(RunPage).summary_line.whole_text()
    assert "⚠" not in window.page(RunPage).summary_line.toolTip()


def test_a_threads_run_says_its_branch_threads_wait_for_the_gil_under_the_summary(window, tmp_path):
    figures = [{"tid": t, "calls": 20, "wall_ms": 100.0, "cpu_ms": 58.0, "core_wait_ms": 6.0, "gil_wait_ms": 36.0}
               for t in (11, 12)]  # fmt: skip
    folder = _run_folder(tmp_path / "threads", "threads", 2, 1, 20.0, python="3.11.7", gil=True, branch_threads=figures)
    assert window.open_trace_files([str(folder)]) == 1
    text = window.page(RunPage).summary_line.whole_text()
    assert "2 branches on 2 Python threads" in text
    assert ("branch threads: 58% computing, 6% waiting for a core, 36% waiting for the GIL "
            "(2 threads, 40 branch calls, Python 3.11.7)") in text  # fmt: skip
    # A trace opened alone says it from its own branchscope object.
    free = write_small_trace(tmp_path / "free.json", "threads", gil=False)
    assert window.open_trace_files([str(free)]) == 1
    assert "free-threaded Python 3.13.1: no GIL" in window.page(RunPage).summary_line.whole_text()
    assert window.open_trace_files([str(write_small_trace(tmp_path / "fork.json", "fork"))]) == 1
    assert "GIL" not in window.page(RunPage).summary_line.whole_text()


def test_a_sweep_cell_opened_in_the_window_compares_with_its_own_sweeps_sequential_1x1(window, tmp_path):
    from branchscope.app.runs import Entry, RunSpec
    from branchscope.profiling.run.options import RunOptions
    from branchscope.profiling.trace.records import RunRecord

    # this session's sequential 1×1 run of the same model, at 80 ms: a cell must not compare with it
    spec = RunSpec("sequential", 1, 1, RunOptions(demo="inception"))
    window.run_list.append(Entry("inception", tmp_path / "t.json", spec=spec, run=RunRecord.parse({"unprofiled_steps_ms": [80.0] * 3})))
    sweep_dir = write_sweep_folder(tmp_path / "sweep")
    window.page(SweepPage).view.cellChosen.emit(str(sweep_dir / "fork-2x1"))
    rows = {window.run_list[k].trace_path.parent.name: k for k in range(len(window.run_list))}
    cell, base = rows["fork-2x1"], rows["sequential-1x1"]  # its sweep's baseline listed beside it
    assert window.run_list.baseline_of(cell) == base and window.runs_table.text(cell, 3) == "2.00×"
    tip = window.runs_table.tooltip(cell, 3)
    assert tip.startswith(f"2.00× vs #{base + 1} sequential 1×1") and "its sweep's sequential 1×1 cell" in tip


def test_a_new_baseline_that_moves_the_listed_speedups_says_so_in_the_status_bar(window, tmp_path):
    from branchscope.app.runs import Entry, RunSpec
    from branchscope.profiling.run.options import RunOptions
    from branchscope.profiling.trace.records import RunRecord

    def entry(mode: str, interop: int, ms: float) -> Entry:
        spec = RunSpec(mode, interop, 1, RunOptions(demo="inception"))
        return Entry("inception", tmp_path / f"{mode}.json", spec=spec, run=RunRecord.parse({"unprofiled_steps_ms": [ms] * 3}))

    window.run_list.extend([entry("sequential", 1, 40.0), entry("fork", 2, 20.0)])
    window.run_list.append(entry("sequential", 1, 30.0))
    assert window.statusBar().currentMessage() == "speedups of 2 runs now against #3 sequential 1×1 (before: #1)"
    assert window.runs_table.headerData(3, Qt.Orientation.Horizontal) == "speedup vs #3 sequential 1×1"


def test_a_run_with_a_prediction_says_what_its_branches_could_give_under_the_summary(window, tmp_path):
    prediction = {"by_threads": {"2": 1.46, "4": 1.46}, "step_ms": 40.0, "serial_ms": 2.0, "from": "x",
                  "regions": [{"region": "1", "branches": 2, "work_ms": 38.0, "longest_branch": "left",
                               "longest_branch_ms": 25.0, "bound_by_threads": {"2": 1.52, "4": 1.52}}]}  # fmt: skip
    folder = _run_folder(tmp_path / "predicted", "fork", 2, 1, 20.0, prediction=prediction)
    assert window.open_trace_files([str(folder)]) == 1
    text = window.page(RunPage).summary_line.whole_text()
    assert "Prediction: could be at most 1.46× on 2 threads, 1.46× on 4: left alone is 66% of region 1" in text
    assert "no contention, no overhead assumed" in text
    plain = _run_folder(tmp_path / "plain", "fork", 2, 1, 20.0)  # an earlier run: none
    assert window.open_trace_files([str(plain)]) == 1
    assert "Prediction" not in window.page(RunPage).summary_line.whole_text()
