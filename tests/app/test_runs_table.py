"""The runs list: the Qt table model over `Runs` and its view (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt

from branchscope.app.run_controller import RunSpec
from branchscope.app.runs import Entry, Runs
from branchscope.app.runs_table import RunsTableModel, RunsView, step_text
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.step_stats import StepStats


def _run(mode: str, steps_ms: list[float] | None, interop: int = 1, demo: str = "inception") -> Entry:
    spec = RunSpec(mode=mode, interop=interop, intra=1, options=RunOptions(steps=5, demo=demo))
    run = {"median_ms": 99.0} | ({"unprofiled_steps_ms": steps_ms} if steps_ms is not None else {})
    return Entry(demo, Path(f"/runs/{mode}-{interop}/trace.json.gz"), spec=spec, run=RunRecord.parse(run))


def _texts(model: RunsTableModel) -> list[list[str]]:
    return [[model.index(r, c).data() for c in range(model.columnCount())] for r in range(model.rowCount())]


SEQ = [39.0, 40.0, 40.0, 41.0, 42.0]  # median 40, IQR 40–41
FORK = [19.0, 20.0, 20.0, 21.0, 22.0]  # median 20: twice as fast, clearly
NOISY = [36.0, 38.0, 39.0, 40.0, 41.0]  # median 39, IQR 38–40: overlaps the baseline's


@pytest.fixture
def listed(qtbot):
    runs = Runs()
    model = RunsTableModel(runs)
    view = RunsView(model)
    qtbot.addWidget(view)
    runs.append(_run("sequential", SEQ))
    runs.append(_run("fork", FORK, interop=2))
    runs.append(_run("fork", NOISY, interop=4))
    runs.append(Entry("a.json", Path("/t/a.json")))
    return runs, model, view


def test_rows_show_unprofiled_medians_with_their_spread_and_honest_speedups(listed):
    runs, model, _view = listed
    runs.append(_run("fork", None, interop=3))  # an old run: only its profiled median
    assert _texts(model) == [
        ["1", "inception", "sequential 1×1", "baseline", "40.0 ms (IQR 40.0–41.0, 5 steps)"],
        ["2", "inception", "fork 2×1", "2.00×", "20.0 ms (IQR 20.0–21.0, 5 steps)"],
        ["3", "inception", "fork 4×1", "1.03×", "39.0 ms (IQR 38.0–40.0, 5 steps)"],
        ["4", "a.json", "file", "–", "–"],
        ["5", "inception", "fork 3×1", "–", "99.0 ms profiled"],
    ]
    tip = Qt.ItemDataRole.ToolTipRole
    assert model.index(1, 1).data(tip) == "inception, fork, 5 steps\n/runs/fork-2/trace.json.gz"
    assert model.index(3, 1).data(tip) == "/t/a.json"
    assert model.index(1, 3).data(tip).startswith("2.00× vs #1 sequential 1×1, run at ")
    assert "in this session (the model's latest sequential 1×1 run of this session)" in model.index(1, 3).data(tip)
    assert "within noise" in model.index(2, 3).data(tip) and "within noise" not in model.index(1, 3).data(tip)
    grey = Qt.ItemDataRole.ForegroundRole  # within noise: the number greyed, why in its tooltip
    assert model.index(2, 3).data(grey) is not None and model.index(1, 3).data(grey) is None
    assert "no steps timed without the profiler" in model.index(4, 4).data(tip)
    bold = Qt.ItemDataRole.FontRole
    assert [bool(model.index(k, 2).data(bold) and model.index(k, 2).data(bold).bold()) for k in range(5)] == [
        True, False, False, False, False,
    ]  # fmt: skip
    header = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(5)]
    assert header == ["#", "run", "mode", "speedup vs #1 sequential 1×1", "median step"]
    assert "sequential 1×1" in model.headerData(3, Qt.Orientation.Horizontal, tip)
    right = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    align = Qt.ItemDataRole.TextAlignmentRole
    assert [model.index(0, c).data(align) for c in range(5)] == [right, None, None, right, right]


def test_step_text_keeps_three_significant_digits():
    assert step_text(StepStats.of([12.34, 11.9, 12.8, 12.3])) == "12.3 ms (IQR 12.2–12.5, 4 steps)"
    assert step_text(StepStats.of([0.5123])) == "0.512 ms (IQR 0.512–0.512, 1 step)"
    assert step_text(StepStats.of([250.0, 260.0])) == "255 ms (IQR 252–258, 2 steps)"


def test_the_table_follows_the_set_baseline_and_removals(listed, qtbot):
    runs, model, view = listed
    with qtbot.waitSignal(model.dataChanged):
        view.set_baseline_row(1)
    assert [row[3] for row in _texts(model)[:3]] == ["0.50×", "baseline", "0.51×"]
    view.reset_baseline_row(1)
    assert [row[3] for row in _texts(model)[:3]] == ["baseline", "2.00×", "1.03×"]
    with qtbot.waitSignal(model.rowsRemoved):
        runs.remove(0)
    assert [row[0] for row in _texts(model)] == ["1", "2", "3"]
    assert _texts(model)[0][3] == "–"
    assert "no sequential 1×1 run of this model" in model.index(0, 3).data(Qt.ItemDataRole.ToolTipRole)


def test_the_context_menu_sets_the_baseline_and_runs_a_missing_one(listed, qtbot):
    runs, model, view = listed
    menu = view.context_menu(2)
    actions = {a.text(): a for a in menu.actions() if a.text()}
    assert not actions["Use the default baseline (sequential 1×1)"].isEnabled()
    assert "Run the sequential 1×1 baseline" not in actions  # this model has one
    actions["Set as baseline"].trigger()
    assert runs.baseline_of(0) == 2 and _texts(model)[2][3] == "baseline"
    again = {a.text(): a for a in view.context_menu(2).actions() if a.text()}
    assert again["Set as baseline"].isChecked() and not again["Set as baseline"].isEnabled()
    again["Use the default baseline (sequential 1×1)"].trigger()
    assert runs.baseline_of(2) == 0
    # a model without a sequential 1×1 run: the menu offers to run it
    runs.append(_run("fork", FORK, interop=2, demo="lstm"))
    lstm = {a.text(): a for a in view.context_menu(4).actions() if a.text()}
    with qtbot.waitSignal(view.baselineRunRequested) as sig:
        lstm["Run the sequential 1×1 baseline"].trigger()
    assert sig.args == [RunSpec("sequential", 1, 1, options=RunOptions(steps=5, demo="lstm"))]


def test_the_view_says_which_row_the_user_chose_but_not_rows_the_window_selects(listed):
    runs, model, view = listed
    chosen: list[int] = []
    view.rowChosen.connect(chosen.append)
    view.select_row(2)
    assert view.current_row() == 2 and view.selected_rows() == [2] and chosen == []
    view.setCurrentIndex(model.index(0, 1))  # as a click does
    assert chosen == [0] and view.selected_rows() == [0]
    with view.quietly():
        runs.remove(0)
    assert chosen == [0]
    view.select_row(-1)
    assert view.current_row() == -1 and view.selected_rows() == [] and view.topLevelItemCount() == 3


def test_several_selected_rows_are_compared_not_chosen(listed, qtbot):
    _runs, model, view = listed
    view.show()
    qtbot.waitExposed(view)
    chosen: list[int] = []
    view.rowChosen.connect(chosen.append)
    assert not view.compare_selected()  # nothing selected
    menu_compare = [a for a in view.context_menu(-1).actions() if a.text().startswith("Compare")][0]
    assert not menu_compare.isEnabled()

    def click(row: int, modifier=Qt.KeyboardModifier.NoModifier) -> None:
        rect = view.visualRect(model.index(row, 1))
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())

    click(0)
    click(2, Qt.KeyboardModifier.ControlModifier)
    click(3, Qt.KeyboardModifier.ControlModifier)
    assert view.selected_rows() == [0, 2, 3] and chosen == [0]  # one row chosen; adding rows chooses none
    menu_compare = [a for a in view.context_menu(2).actions() if a.text().startswith("Compare")][0]
    assert menu_compare.text() == "Compare selected (3)" and menu_compare.isEnabled()
    with qtbot.waitSignal(view.compareRequested) as sig:
        menu_compare.trigger()
    assert sig.args == [[0, 2, 3]]
    click(3)  # a plain click: one row again, chosen as before
    assert view.selected_rows() == [3] and chosen == [0, 3]
    click(1, Qt.KeyboardModifier.ShiftModifier)  # a range from 3 to 1
    assert view.selected_rows() == [1, 2, 3] and chosen == [0, 3]
    with qtbot.waitSignal(view.compareRequested) as sig:
        assert view.compare_selected()
    assert sig.args == [[1, 2, 3]]
    view.select_row(1)
    view.selectionModel().select(
        model.index(0, 0), QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    )
    assert view.selected_rows() == [0, 1] and chosen == [0, 3]


def test_the_speedup_column_names_its_baseline_and_says_when_it_moves(listed, qtbot):
    runs, model, _view = listed
    tip, header = Qt.ItemDataRole.ToolTipRole, Qt.Orientation.Horizontal
    assert model.headerData(3, header) == "speedup vs #1 sequential 1×1"
    assert model.index(1, 3).data(tip).startswith("2.00× vs #1 sequential 1×1, run at ")
    # a newer sequential 1×1 run moves every speedup: the header follows and the move is said once
    with qtbot.waitSignal(model.baselineMoved) as moved, qtbot.waitSignal(model.headerDataChanged):
        runs.append(_run("sequential", [19.0, 20.0, 20.0, 21.0, 22.0]))
    assert moved.args == ["speedups of 3 runs now against #5 sequential 1×1 (before: #1)"]
    assert model.headerData(3, header) == "speedup vs #5 sequential 1×1"
    assert model.index(1, 3).data() == "1.00×" and "within noise" in model.index(1, 3).data(tip)


def test_a_busy_run_is_marked_in_the_list_and_beside_its_speedup(qtbot):
    runs = Runs()
    model = RunsTableModel(runs)
    load = {"cores": 2, "others_cores": 0.8, "busy": True, "loadavg_start": 2.0, "loadavg_end": 2.5}
    busy = _run("fork", FORK, interop=2)
    busy.run = RunRecord.parse({"unprofiled_steps_ms": FORK, "load": load})
    runs.extend([_run("sequential", SEQ), busy])
    tip = Qt.ItemDataRole.ToolTipRole
    # a mark, not words eating the name: "machine busy" and the load in its tooltip
    assert model.index(1, 1).data() == "inception" == model.index(0, 1).data()
    icon = Qt.ItemDataRole.DecorationRole
    assert model.index(1, 1).data(icon) is not None and model.index(0, 1).data(icon) is None
    assert model.index(1, 1).data(tip).startswith("machine busy")
    assert "other processes used 0.80 of 2 cores" in model.index(1, 1).data(tip)
    assert model.index(1, 3).data() == "2.00×"
    assert "machine busy: other processes took more than about a fifth" in model.index(1, 3).data(tip)


def _busy(entry: Entry) -> Entry:
    load = {"cores": 2, "others_cores": 0.8, "busy": True, "loadavg_start": 2.0, "loadavg_end": 2.5}
    entry.run = RunRecord.parse({"unprofiled_steps_ms": entry.run.unprofiled_steps_ms if entry.run else [], "load": load})
    return entry


def _room(view: RunsView, col: int) -> int:
    """The pixels a cell's text has in column `col` (the column less the style's text margins)."""
    from PySide6.QtWidgets import QStyle

    return view.columnWidth(col) - 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)


def _cell_fm(view: RunsView, k: int):
    from PySide6.QtGui import QFontMetrics

    font = view.model().index(k, 1).data(Qt.ItemDataRole.FontRole)
    return QFontMetrics(font if font is not None else view.font())


def _tooltip_at(view: RunsView, k: int, col: int, qtbot) -> str:
    """The tooltip a hover over cell (k, col) shows."""
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    QToolTip.hideText()
    pos = view.visualRect(view.model().index(k, col)).center()
    view.viewportEvent(QHelpEvent(QEvent.Type.ToolTip, pos, view.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible)
    return QToolTip.text()


@pytest.mark.parametrize("size", [(1600, 1000), (1280, 720)])
def test_each_row_says_model_mode_and_threads_whole_and_a_cut_cell_is_whole_in_its_tooltip(window, qtbot, size):
    """Issue 35, item 4: names cut to "incepti…ne busy", fork and threads both "2×1", speedups "0.96× (…)"."""
    from branchscope.app.runs_table import NAME_CHARS

    window.resize(*size)
    view = window.runs
    long_model = "inception_v3_from_a_folder_of_my_own_models"
    window.run_list.extend([
        _run("sequential", SEQ), _busy(_run("fork", FORK, interop=2)), _run("threads", NOISY, interop=2),
        _run("fork", FORK, interop=2, demo="inception_v3"), Entry("a.json", Path("/t/a.json")),  # no baseline
    ])  # fmt: skip
    qtbot.waitUntil(lambda: view.viewport().width() > 0)
    rows = [[view.shown_text(k, c) for c in range(5)] for k in range(5)]
    # model, mode and threads, and the speedup, whole
    assert [r[1:4] for r in rows] == [
        ["inception", "sequential 1×1", "baseline"], ["inception", "fork 2×1", "2.00×"],
        ["inception", "threads 2×1", "1.03×"], ["inception_v3", "fork 2×1", "–"], ["a.json", "file", "–"],
    ]  # fmt: skip
    assert rows[1] != rows[2]
    assert sum(view.columnWidth(c) for c in range(5)) <= view.viewport().width()  # no sideways scrolling
    assert view.cell_tooltip(view.model().index(0, 1)) == view.model().index(0, 1).data(Qt.ItemDataRole.ToolTipRole)
    # a name that cannot fit keeps NAME_CHARS characters, its start and its end; the mode stays whole
    window.run_list.append(_busy(_run("fork", FORK, interop=2, demo=long_model)))
    rows.append([view.shown_text(5, c) for c in range(5)])
    head, tail = rows[5][1].split("…")
    assert len(head) + len(tail) >= NAME_CHARS and long_model.startswith(head) and long_model.endswith(tail)
    assert rows[5][2] == "fork 2×1"
    assert _tooltip_at(view, 5, 1, qtbot).startswith(long_model + "\nmachine busy")
    # the median step shows its value at least; cut, it is whole in its tooltip
    for k in range(6):
        whole, shown = view.model().index(k, 4).data(), rows[k][4]
        assert shown == whole or whole.startswith(shown), (shown, whole)
        if shown != whole:
            assert view.cell_tooltip(view.model().index(k, 4)).startswith(whole)
    assert _tooltip_at(view, 2, 3, qtbot).startswith("1.03× vs #1 sequential 1×1") and "within noise" in QToolTip_text()
    # the speedup's header: its first word in view, the whole in its tooltip
    header = view.model().headerData(3, Qt.Orientation.Horizontal)
    assert view.header().fontMetrics().horizontalAdvance("speedup") < view.columnWidth(3)
    assert view.model().headerData(3, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole).startswith(header + ": ")
    # every column within the list, a vertical scroll bar too (at 1280×720 it costs the list a few pixels)
    window.run_list.remove(5)
    if size[0] < 1600:
        return
    wide = view.viewport().width()
    window.run_list.extend([_run("fork", FORK, interop=2) for _ in range(60)])
    qtbot.waitUntil(lambda: view.viewport().width() < wide)
    assert sum(view.columnWidth(c) for c in range(5)) <= view.viewport().width()
    assert view.horizontalScrollBar().maximum() == 0


def QToolTip_text() -> str:  # noqa: N802
    from PySide6.QtWidgets import QToolTip

    return QToolTip.text()


def test_a_narrow_runs_list_keeps_the_names_and_scrolls_sideways(window, qtbot):
    from branchscope.app.runs_table import NAME_CHARS

    view = window.runs
    window.run_list.extend([_run("sequential", SEQ), _run("fork", FORK, interop=2), _run("threads", NOISY, interop=2)])
    split = window.centralWidget()
    split.setSizes([1, 1400, 300])  # the left panel as narrow as it goes
    qtbot.waitUntil(lambda: view.viewport().width() < 300)
    fm = _cell_fm(view, 1)
    chars = min(NAME_CHARS, len("inception"))
    assert fm.horizontalAdvance("inception"[:chars]) <= _room(view, 1)
    assert view.horizontalScrollBar().maximum() > 0  # the columns right of it are scrolled to
    wide = view.viewport().width()
    split.setSizes([600, 700, 300])  # as wide as it goes: the names, then the speedups whole
    qtbot.waitUntil(lambda: view.viewport().width() > wide + 100)
    assert [view.shown_text(k, c) for k in range(3) for c in range(4)] == [
        view.model().index(k, c).data() for k in range(3) for c in range(4)
    ]
    assert view.horizontalScrollBar().maximum() == 0


def test_the_columns_follow_larger_text(window, qtbot):
    view = window.runs
    window.run_list.extend([_run("sequential", SEQ), _run("fork", FORK, interop=2)])
    before = [view.columnWidth(c) for c in range(5)]
    window.menus.scale_text(2)
    # the columns are measured again in the larger font: wider, the names still shown whole or NAME_CHARS long
    qtbot.waitUntil(lambda: view.columnWidth(2) > before[2])
    fm = _cell_fm(view, 1)
    assert fm.horizontalAdvance("inception") <= _room(view, 1)
    assert view.shown_text(1, 1) == "inception" and view.shown_text(1, 2) == "fork 2×1"
