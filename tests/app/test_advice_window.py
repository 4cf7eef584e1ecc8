"""Advice in the window: the Compare page and the Sweep tab say in one line which way of using the
cores (intra-op threads, or forking the branches) served the model better, from runs of the same
thread count (profiling/trace/advice.py), or which run would tell; nothing when the runs are of one
way. Fake runner and a stand-in sweep, no torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.profiling.trace.sweep_records import SWEEP_JSON
from tests.builders.runs import ADVICE_SEQ_WINS, write_advice_runs

SEQ_WINS = f"Advice: {ADVICE_SEQ_WINS}"


@pytest.fixture
def folders(tmp_path) -> dict[str, Path]:
    return write_advice_runs(tmp_path)


def _compare(window, paths: list[Path]):
    assert window.open_trace_files([str(p) for p in paths]) == len(paths)
    window.runs.selectAll()
    window.compare_button.click()
    assert window.tabs.currentWidget() is window.page(ComparePage)
    return window.page(ComparePage).advice_label


def test_the_compare_page_says_which_way_of_using_the_cores_served_the_model_better(window, folders):
    label = _compare(window, [folders["seq 1x1"], folders["fork 2x1"], folders["seq 1x2"]])
    assert label.isVisible() and label.text() == SEQ_WINS


def test_the_compare_page_says_which_run_would_tell_for_fork_against_sequential_1x1(window, folders):
    label = _compare(window, [folders["seq 1x1"], folders["fork 2x1"]])
    assert label.isVisible()
    assert "fork 2×1 computes with 2 threads, the sequential run here with 1" in label.text()
    assert "sequential 1×2 beside it would tell" in label.text()


def test_the_compare_page_says_nothing_for_runs_of_one_way(window, folders):
    label = _compare(window, [folders["seq 1x1"], folders["seq 1x2"]])
    assert not label.isVisible() and label.text() == ""


def _cell(mode, interop, intra, ms, status="done"):
    return {"mode": mode, "interop": interop, "intra": intra, "run": f"{mode}-{interop}x{intra}", "status": status,
            "oversubscribed": False, "median_ms": ms, "unprofiled_median_ms": ms,
            "unprofiled_spread_ms": None if ms is None else [ms - 1.0, ms - 0.5, ms + 0.5, ms + 1.0]}  # fmt: skip


def _sweep(cells: list[dict]) -> dict:
    return {"sweep": 2, "cores": 2, "modes": ["sequential", "fork"], "interop": [1, 2], "intra": [1, 2],
            "complete": True, "cells": cells}  # fmt: skip


def test_a_sweep_opened_in_the_window_shows_its_advice_in_the_sweep_tab(window, tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    cells = [_cell("sequential", 1, 1, 70.0), _cell("sequential", 1, 2, 41.0), _cell("fork", 2, 1, 48.0)]
    (folder / SWEEP_JSON).write_text(json.dumps(_sweep(cells)))
    panel = window.page(SweepPage)
    assert panel.open_sweeps([str(folder)]) == ([], 1)  # as File > Open does: the Sweep tab in front
    assert window.tabs.currentWidget() is panel
    assert panel.advice.isVisible() and panel.advice.text() == SEQ_WINS
    # A sweep of one way only says nothing.
    other = tmp_path / "other"
    other.mkdir()
    (other / SWEEP_JSON).write_text(json.dumps(_sweep(cells[:2])))
    assert panel.open_sweeps([str(other)]) == ([], 1)
    assert panel.advice.isHidden() and panel.advice.text() == ""


#: `branchscope sweep --jsonl` standing in: sweep.json's cells one by one as cell events (sequential
#: 1×1, fork 2×1, sequential 1×2), then sweep.json and "done".
FAKE_SWEEP = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
CELLS = json.loads(sys.argv[1])
def not_run(c):
    return dict(c, status="not run", median_ms=None, unprofiled_median_ms=None, unprofiled_spread_ms=None)
sweep = {"sweep": 2, "cores": 2, "modes": ["sequential", "fork"], "interop": [1, 2], "intra": [1, 2],
         "complete": False, "cells": [not_run(c) for c in CELLS]}
print(json.dumps({"event": "sweep", "out": str(out), "sweep": sweep}), flush=True)
for i, c in enumerate(CELLS):
    sweep["cells"][i] = c
    print(json.dumps({"event": "cell", "index": i, "of": len(CELLS), "out": str(out), "folder": str(out / c["run"]),
                      "cell": c, "best": None}), flush=True)
sweep["complete"] = True
(out / "sweep.json").write_text(json.dumps(sweep))
print(json.dumps({"event": "done", "out": str(out), "sweep": sweep}), flush=True)
"""


def test_the_sweep_panels_advice_follows_the_cells_as_they_finish(qtbot, tmp_path):
    from branchscope.app.runs import RunSpec
    from branchscope.app.sweep_controller import SweepController
    from branchscope.app.sweep_panel import SweepPanel
    from branchscope.profiling.run.options import RunOptions

    cells = [_cell("sequential", 1, 1, 70.0), _cell("fork", 2, 1, 48.0), _cell("sequential", 1, 2, 41.0)]
    script = tmp_path / "fake_sweep.py"
    script.write_text(FAKE_SWEEP)
    controller = SweepController(command=[sys.executable, str(script), json.dumps(cells)])
    panel = SweepPanel(lambda: RunSpec("sequential", 1, 1, options=RunOptions(demo="twin-mm")),
                       lambda _label: tmp_path / "sweep", cores=2, controller=controller)  # fmt: skip
    qtbot.addWidget(panel)
    seen: list[str] = []
    controller.cellFinished.connect(lambda _event: seen.append(panel.advice.text()))  # after the panel's own slot
    with qtbot.waitSignal(controller.finished, timeout=30_000):
        assert panel.start()
    qtbot.waitUntil(lambda: panel.start_button.isEnabled())
    assert not panel.advice.isHidden()
    assert seen[0] == ""  # sequential 1×1 alone
    assert "sequential 1×2 beside it would tell" in seen[1]  # fork 2×1 beside sequential 1×1
    assert seen[2] == SEQ_WINS
    assert panel.advice.text() == SEQ_WINS and panel.status.text().startswith("done: fastest: sequential 1×2")
    panel.shutdown()


def test_the_sweep_tab_marks_a_starved_cell_and_its_advice_names_no_winner(window, tmp_path):
    import pyqtgraph as pg

    folder = tmp_path / "busy"
    folder.mkdir()
    cells = [_cell("sequential", 1, 2, 222.7), {**_cell("threads", 2, 1, 49.5), "starved": True}]
    (folder / SWEEP_JSON).write_text(json.dumps({**_sweep(cells), "sweep": 3}))
    panel = window.page(SweepPage)
    assert panel.open_sweeps([str(folder)]) == ([], 1)
    assert panel.status.text().startswith("fastest: threads 2×1 (starved of cores), 49.50 ms")
    text = panel.advice.text()
    assert panel.advice.isVisible() and text.startswith("Advice: on 2 cores, threads 2×1 (49.5 ms) and sequential 1×2")
    assert "threads 2×1 got fewer cores than its threads could use" in text and "4.50" not in text
    assert "branchscope speedup --configs sequential:1x2,threads:2x1" in text
    assert panel.advice.advice is not None and panel.advice.advice.winner is None
    assert panel.advice.toolTip().endswith(panel.advice.advice.reason)
    # The heatmap: the starved cell says so in its text and its tooltip, the legend says what it means.
    view = panel.view
    starved = next(c for c in view.cells if c.mode == "threads")
    assert starved.starved and "starved: got fewer cores than its threads could use" in starved.tooltip
    assert not next(c for c in view.cells if c.mode == "sequential").starved
    texts = [i.textItem.toPlainText() for i in view.plots["threads"].items if isinstance(i, pg.TextItem)]
    assert texts == ["★ 49.5 ms\n⚠ starved"] and len(view.load_marks) == 1
    assert "⚠ dashed orange: starved of cores, its time no claim" in view.legend.text()


def test_the_compare_page_marks_a_starved_run_and_its_header_names_no_winner(window, tmp_path):
    from tests.builders.runs import write_timed_run

    seq = write_timed_run(tmp_path / "seq12", "sequential", 1, 2, [221.0, 222.0, 222.7, 223.0, 224.0], starved=False)
    thr = write_timed_run(tmp_path / "thr21", "threads", 2, 1, [49.0, 49.2, 49.5, 49.8, 50.0], starved=True)
    label = _compare(window, [seq, thr])
    assert label.isVisible() and "name no winner: threads 2×1 got fewer cores" in label.text()
    view = window.page(ComparePage)
    table = view.summary_table
    assert [table.horizontalHeaderItem(k).text() for k in range(2)] == ["run 0 (baseline)", "run 1 · starved"]
    rows = {table.verticalHeaderItem(r).text(): r for r in range(table.rowCount())}
    assert [table.item(rows["starved of cores?"], k).text() for k in range(2)] == ["no", "yes"]
