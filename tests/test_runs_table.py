"""The runs list: the Qt table model over `Runs` and its view (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from branchscope.app.run_controller import RunSpec
from branchscope.app.runs import Entry, Runs
from branchscope.app.runs_table import RunsTableModel, RunsView


def _run(mode: str, median: float, interop: int = 1) -> Entry:
    spec = RunSpec(mode=mode, interop=interop, intra=1, steps=5, demo="inception")
    return Entry("inception", Path(f"/runs/{mode}/trace.json.gz"), spec=spec, run={"median_ms": median})


def _texts(model: RunsTableModel) -> list[list[str]]:
    return [[model.index(r, c).data() for c in range(model.columnCount())] for r in range(model.rowCount())]


def test_rows_show_what_the_runs_list_always_showed(qtbot):
    runs = Runs()
    model = RunsTableModel(runs)
    runs.append(_run("sequential", 40.0))
    runs.append(_run("fork", 20.0, interop=2))
    runs.append(Entry("a.json", Path("/t/a.json")))
    assert _texts(model) == [
        ["1", "inception · sequential", "1×1", "40.0 ms", "1.00×"],
        ["2", "inception · fork", "2×1", "20.0 ms", "2.00×"],
        ["3", "a.json", "file", "–", "–"],
    ]
    tip = Qt.ItemDataRole.ToolTipRole
    assert model.index(1, 1).data(tip) == "inception, fork, 5 steps\n/runs/fork/trace.json.gz"
    assert model.index(2, 1).data(tip) == "/t/a.json"
    header = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(5)]
    assert header == ["#", "run", "threads", "median", "speedup"]
    assert model.headerData(4, Qt.Orientation.Horizontal, tip).startswith("median step of the model's first")
    right = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    align = Qt.ItemDataRole.TextAlignmentRole
    assert [model.index(0, c).data(align) for c in range(5)] == [right, None, None, right, right]


def test_the_table_follows_the_runs_baseline_and_removals(qtbot):
    runs = Runs()
    model = RunsTableModel(runs)
    for mode, median in (("sequential", 40.0), ("fork", 20.0), ("fork", 10.0)):
        runs.append(_run(mode, median))
    with qtbot.waitSignal(model.dataChanged):
        runs.baseline = 1
    assert [row[4] for row in _texts(model)] == ["0.50×", "1.00×", "2.00×"]
    with qtbot.waitSignal(model.rowsRemoved):
        runs.remove(0)
    assert [row[0] for row in _texts(model)] == ["1", "2"]


def test_the_view_says_which_row_the_user_chose_but_not_rows_the_window_selects(qtbot):
    runs = Runs()
    model = RunsTableModel(runs)
    view = RunsView(model)
    qtbot.addWidget(view)
    for mode in ("sequential", "fork", "fork"):
        runs.append(_run(mode, 10.0))
    chosen: list[int] = []
    view.rowChosen.connect(chosen.append)
    view.select_row(2)
    assert view.current_row() == 2 and chosen == []
    view.setCurrentIndex(model.index(0, 1))  # as a click does
    assert chosen == [0]
    with view.quietly():
        runs.remove(0)
    assert chosen == [0]
    view.select_row(-1)
    assert view.current_row() == -1 and view.topLevelItemCount() == 2
