"""The range panel: the selected range's ops and the steps table, filled, sortable, and fed by the
timeline's Shift+drag."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt

from branchscope.profiling import load_trace
from branchscope.profiling.trace.ranges import range_ops
from branchscope.widgets.range_panel import RANGE_HINT, RangePanel
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline import TimelineView
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show


@pytest.fixture
def small_trace(tmp_path):
    return load_trace(write_small_trace(tmp_path / "small.json.gz", "fork"))


def _column(model, c):
    return [model.data(model.index(r, c)) for r in range(model.rowCount())]


def test_steps_tab_lists_each_step_with_its_duration_and_branch_times(small_trace, qtbot):
    panel = show(qtbot, RangePanel(), 700, 300)
    panel.set_trace(small_trace)
    m = panel.steps_model
    assert [m.headerData(c, Qt.Orientation.Horizontal) for c in range(m.columnCount())] == [
        "Step",
        "Duration",
        "left",
        "right",
    ]
    # small_trace (fork): steps of 1000 µs, each branch annotated 800 µs inside every step
    assert [_column(m, c) for c in range(4)] == [
        ["step 0", "step 1"],
        ["1.00 ms", "1.00 ms"],
        ["0.80 ms", "0.80 ms"],
        ["0.80 ms", "0.80 ms"],
    ]
    assert "80% of the step" in m.data(m.index(0, 2), Qt.ItemDataRole.ToolTipRole)
    assert panel.range_label.text() == RANGE_HINT and panel.range_model.rowCount() == 0


def test_set_range_fills_the_range_tab_sorted_by_total_and_sortable_by_any_column(small_trace, qtbot):
    panel = show(qtbot, RangePanel(), 700, 300)
    panel.set_trace(small_trace)
    panel.tabs.setCurrentIndex(1)
    first = small_trace.span()[0]
    t0, t1 = first + 100_000, first + 1_700_000
    panel.set_range(t1, t0)
    assert panel.tabs.currentIndex() == 0 and panel.range == (t0, t1)
    expected = range_ops(small_trace, t0, t1)
    m = panel.range_model
    assert m.rowCount() == len(expected) > 3
    assert [m.headerData(c, Qt.Orientation.Horizontal) for c in range(5)] == [
        "Op",
        "Total",
        "Self",
        "Count",
        "Lane",
    ]
    totals = [m.data(m.index(r, 1), Qt.ItemDataRole.UserRole) for r in range(m.rowCount())]
    assert totals == sorted(totals, reverse=True) == sorted((r.total_ns for r in expected), reverse=True)
    assert "1.60 ms selected" in panel.range_label.text()
    panel.range_view.sortByColumn(3, Qt.SortOrder.AscendingOrder)  # the header's click
    counts = [m.data(m.index(r, 3), Qt.ItemDataRole.UserRole) for r in range(m.rowCount())]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    names = _column(m, 0)
    panel.range_view.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    assert _column(m, 0) == sorted(names, key=str.lower, reverse=True)
    # a row's texts stay together when sorted
    row = next(r for r in range(m.rowCount()) if m.data(m.index(r, 0)) == "forward")
    fwd = next(r for r in expected if r.name == "forward")
    assert m.data(m.index(row, 3)) == f"{fwd.count:,}" and m.data(m.index(row, 4)) == fwd.lane_label
    assert m.data(m.index(row, 1)) == f"{fwd.total_ns / 1e6:.2f} ms"
    panel.clear_range()
    assert m.rowCount() == 0 and panel.range is None


def test_a_shift_drag_on_the_timeline_fills_the_panel(small_trace, qtbot):
    view = show(qtbot, TimelineView(), 1200, 500)
    panel = show(qtbot, RangePanel(), 700, 300)
    view.set_trace(small_trace)
    panel.set_trace(small_trace)
    view.rangeSelected.connect(panel.set_range)
    view.rangeCleared.connect(panel.clear_range)
    y = view.height() - 20
    with qtbot.waitSignal(view.rangeSelected) as sig:
        qtbot.mousePress(
            view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, QPoint(GUTTER + 100, y)
        )
        qtbot.mouseMove(view, QPoint(GUTTER + 600, y))
        qtbot.mouseRelease(
            view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, QPoint(GUTTER + 600, y)
        )
    assert panel.range == tuple(sig.args)
    assert panel.range_rows == range_ops(small_trace, *sig.args) and panel.range_rows
    qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert panel.range is None and panel.range_model.rowCount() == 0


def test_double_clicking_a_step_or_an_op_emits_it(small_trace, qtbot):
    panel = show(qtbot, RangePanel(), 700, 300)
    panel.set_trace(small_trace)
    panel.tabs.setCurrentIndex(1)
    qtbot.waitExposed(panel.steps_view)
    steps = panel.steps_view
    steps.sortByColumn(0, Qt.SortOrder.DescendingOrder)  # "step 1" first
    pos = steps.visualRect(panel.steps_model.index(0, 0)).center()
    with qtbot.waitSignal(panel.stepActivated) as sig:
        # a view takes a double click on the row its press went to: press first, as a mouse does
        qtbot.mouseClick(steps.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        qtbot.mouseDClick(steps.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    step = next(r for r in panel.step_rows if r.label == "step 1")
    assert sig.args == [step.start_ns, step.start_ns + step.dur_ns]
    first = small_trace.span()[0]
    panel.set_range(first, first + 3_000_000)
    qtbot.waitExposed(panel.range_view)
    pos = panel.range_view.visualRect(panel.range_model.index(0, 0)).center()
    with qtbot.waitSignal(panel.opActivated) as sig:
        qtbot.mouseClick(panel.range_view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
        qtbot.mouseDClick(panel.range_view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert sig.args == [panel.range_model.data(panel.range_model.index(0, 0), Qt.ItemDataRole.UserRole)]


def test_a_trace_without_steps_says_so(qtbot):
    import numpy as np

    from branchscope.profiling.trace.model import Lane, build_trace

    trace = build_trace(
        path="bare", start_ns=np.array([0, 50]), dur_ns=np.array([100, 10]), lane=np.array([0, 0]),
        name_id=np.array([0, 1]), cat_id=np.array([0, 0]), names=["aten::mm", "aten::add"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip
    panel = show(qtbot, RangePanel(), 500, 200)
    panel.set_trace(trace)
    assert panel.steps_model.rowCount() == 0 and "No profiled steps" in panel.steps_label.text()
    panel.set_range(0, 80)
    assert {(r.name, r.total_ns, r.self_ns) for r in panel.range_rows} == {
        ("aten::mm", 80, 70),
        ("aten::add", 10, 10),
    }


def test_steps_sort_in_number_order_and_ops_by_name_without_case(qtbot):
    import numpy as np

    from branchscope.profiling.trace.model import Lane, build_trace

    names = ["step 10", "step 2", "step 9", "b", "A"]
    trace = build_trace(
        path="steps", start_ns=np.array([0, 100, 200, 0, 0]), dur_ns=np.array([100, 100, 100, 5, 7]),
        lane=np.array([0, 0, 0, 1, 1]), name_id=np.arange(5), cat_id=np.zeros(5), names=names, cats=["x"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main"), Lane(1, "cpu", 1, 2, "other", "other")],
    )  # fmt: skip
    panel = show(qtbot, RangePanel(), 500, 200)
    panel.set_trace(trace)
    assert _column(panel.steps_model, 0) == ["step 10", "step 2", "step 9"]  # time order
    panel.steps_view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert _column(panel.steps_model, 0) == ["step 2", "step 9", "step 10"]
    panel.set_range(0, 300)
    panel.range_view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert _column(panel.range_model, 0) == ["A", "b", "step 2", "step 9", "step 10"]


def test_a_long_op_name_leaves_the_numbers_in_view(small_trace, qtbot):
    """Issue 22, item 7: the range table showed only its Op column when a name was long."""
    k = small_trace.names.index("aten::add")
    small_trace.names[k] = "aten::add" + "_and_a_very_long_tail" * 12
    panel = show(qtbot, RangePanel(), 700, 300)
    panel.set_trace(small_trace)
    start, end = small_trace.span()
    panel.set_range(start, end)
    view, model = panel.range_view, panel.range_model
    width = view.viewport().width()
    assert view.columnWidth(0) <= width * 0.5
    assert sum(view.columnWidth(c) for c in range(model.columnCount() - 1)) < width  # the others in view
    row = next(r for r in range(model.rowCount()) if model.data(model.index(r, 0)).startswith("add_and"))
    assert model.data(model.index(row, 0), Qt.ItemDataRole.ToolTipRole) == small_trace.names[k]  # whole on hover


def test_the_op_column_says_a_kernel_as_its_timeline_block_does_and_the_whole_name_on_hover(qtbot):
    """Issue 35: the Op column cut a kernel's name in its middle ("void permute_pooled_e…t*, long,
    long, long)"); it shows the name without return type, namespaces, templates and arguments."""
    import numpy as np

    from branchscope.profiling.trace.model import Lane, build_trace

    kernel = "void fbgemm_gpu::permute_pooled_embs_kernel<float>(float const*, long const*, long const*, float*, long, long, long)"
    names = [kernel, "aten::mm", "branch: a -> b"]
    trace = build_trace(
        path="kernels", start_ns=np.array([0, 0, 0]), dur_ns=np.array([30, 20, 10]), lane=np.array([0, 1, 1]),
        name_id=np.arange(3), cat_id=np.zeros(3), names=names, cats=["x"],
        lanes=[Lane(0, "gpu", 1, 7, "stream 7", "stream 7"), Lane(1, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip
    panel = show(qtbot, RangePanel(), 500, 200)
    panel.set_trace(trace)
    panel.set_range(0, 100)
    m = panel.range_model
    assert _column(m, 0) == ["permute_pooled_embs_kernel", "mm", "branch: a -> b"]  # by total
    assert [m.data(m.index(r, 0), Qt.ItemDataRole.ToolTipRole) for r in range(3)] == names
    # a label fits where the whole name was cut in its middle
    view = panel.range_view
    assert view.fontMetrics().horizontalAdvance(_column(m, 0)[0]) <= view.columnWidth(0)
    # ops sort by what their rows say
    view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert _column(m, 0) == ["branch: a -> b", "mm", "permute_pooled_embs_kernel"]
