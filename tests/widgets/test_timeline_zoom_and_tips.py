"""Zoom to the selection (F or Z, as Perfetto's F), the events' tooltips (issue 35, item 11), the
timeline before its first trace and long names in the details panel (item 13)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QFont, QHelpEvent, QMouseEvent, QTextDocument, QTextOption
from PySide6.QtWidgets import QApplication, QToolTip

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets.details_panel import DetailsPanel
from branchscope.widgets.event_info import breakable
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline import NOTHING_SELECTED, TimelineView
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show

#: A CUDA kernel's name as CUPTI writes it: longer than any panel, and one word to Qt's labels.
KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
)
GEMM = "ampere_sgemm_128x64_nn_splitK_reduce_kernel_with_a_name_longer_than_any_panel_is_wide_at_all"


@pytest.fixture
def view(qtbot, tmp_path) -> TimelineView:
    view = show(qtbot, TimelineView(), 1200, 500)
    view.set_trace(load_trace(write_small_trace(tmp_path / "small.json.gz", "fork")))
    view.setFocus()
    return view


def _a_wide_event(view: TimelineView) -> int:
    """An event drawn at least 6 pixels wide inside the lanes."""
    for i in range(len(view.trace)):
        r = view.event_rect(i)
        if r is not None and r.width() >= 6 and GUTTER < r.left() and r.top() > 0 and r.bottom() < view.height():
            return i
    raise AssertionError("no event wide enough to hover")


@pytest.mark.parametrize("key", [Qt.Key.Key_F, Qt.Key.Key_Z])
def test_f_or_z_zooms_to_the_selected_range_else_the_selected_event(view, qtbot, key):
    first = view.trace.span()[0]
    a, b = first + 1_000, first + 3_000
    view.select_range(a, b)
    qtbot.keyClick(view, key)
    lo, hi = view.time_range()
    assert abs(lo - a) <= 1 and abs(hi - b) <= 1
    # no range, an event selected: the view zooms to it (as a double-click does)
    view.clear_range()
    qtbot.keyClick(view, Qt.Key.Key_0)
    i = _a_wide_event(view)
    view.select_event(i)
    qtbot.keyClick(view, key)
    lo, hi = view.time_range()
    start, dur = int(view.trace.start_ns[i]), int(view.trace.dur_ns[i])
    assert lo <= start and start + dur <= hi and hi - lo <= max(1.2 * dur, dur + 1_000) + 2


def test_zooming_with_nothing_selected_changes_nothing_and_says_how_to_select(view, qtbot):
    before = view.time_range()
    assert not view.zoom_to_selection()
    qtbot.keyClick(view, Qt.Key.Key_F)
    assert view.time_range() == before
    assert QToolTip.isVisible() and QToolTip.text() == NOTHING_SELECTED


def _hover(view: TimelineView, pos: QPoint) -> None:
    glob = QPointF(view.mapToGlobal(pos))
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(pos), glob, Qt.MouseButton.NoButton,
                       Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)  # fmt: skip
    QApplication.sendEvent(view.viewport(), move)


def test_an_events_tooltip_stays_when_the_mouse_rests_and_says_name_duration_lane(view, qtbot):
    i = _a_wide_event(view)
    pos = view.event_rect(i).center()
    _hover(view, pos)
    assert view.state.hovered == i and QToolTip.isVisible()
    # The mouse rests: Qt sends a tooltip event, which the scene answered by hiding the tooltip
    # (it has no item with a tooltip of its own), 300 ms later.
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, pos, view.mapToGlobal(pos)))
    qtbot.wait(400)
    assert QToolTip.isVisible()
    tip = QToolTip.text().replace("\u200b", "")  # long words' break points (event_info.breakable)
    lane = view.trace.lanes[int(view.trace.lane[i])].label
    assert view.trace.event_name(i).split(": ")[-1] in tip and "Duration" in tip and lane in tip
    # over nothing the tooltip goes
    empty = QPoint(GUTTER + view.plot_width() - 2, view.height() - 2)
    assert view.event_at(empty) < 0
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, empty, view.mapToGlobal(empty)))
    qtbot.waitUntil(lambda: not QToolTip.isVisible())


def _trace_with_args(tmp_path):
    args = {"Input Dims": [[8, 64]], "note": "x" * 300, "External id": 7, "Sequence number": 3,
            "Fwd thread id": 1, "Ev Idx": 12, "Record function id": 0}  # fmt: skip
    events = [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 100, "pid": 1, "tid": 1, "args": args},
        {"ph": "X", "name": "aten::add", "cat": "cpu_op", "ts": 200, "dur": 100, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return load_trace(path)


def test_the_tooltip_shows_a_few_args_each_cut_short(qtbot, tmp_path):
    view = show(qtbot, TimelineView(), 1200, 300)
    view.set_trace(_trace_with_args(tmp_path))
    i = view.trace.find("aten::mm")[0]
    tip = view.tip_at(view.event_rect(i).center())
    assert "aten::mm" in tip and "External id" in tip and "Sequence number" in tip
    assert "Ev Idx" not in tip and "… and 2 more args" in tip  # four of the six, then how many more
    assert "x" * 59 + "…" in tip and "x" * 60 not in tip  # one line each
    assert "Input Dims" not in tip and "8×64" in tip  # the shapes have their own row


def _widest_line(html: str, font: QFont, width: int) -> float:
    """How wide the widest line of `html` is laid out as a word-wrapping QLabel lays it out."""
    doc = QTextDocument()
    doc.setDefaultFont(font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)  # QLabel's: at spaces only
    doc.setDefaultTextOption(option)
    doc.setHtml(html)
    doc.setTextWidth(width)
    layout, block, widest = doc.documentLayout(), doc.begin(), 0.0
    while block.isValid():
        lines, x = block.layout(), layout.blockBoundingRect(block).x()
        for k in range(lines.lineCount()):
            line = lines.lineAt(k)
            widest = max(widest, x + line.x() + line.naturalTextWidth())
        block = block.next()
    return widest


@pytest.mark.parametrize("name", [KERNEL, GEMM])
def test_the_details_panel_wraps_a_long_kernel_name_whole(qtbot, name):
    trace = build_trace(
        path="k", start_ns=np.array([0]), dur_ns=np.array([5]), lane=np.zeros(1), name_id=np.zeros(1),
        cat_id=np.zeros(1), names=[name], cats=["kernel"], lanes=[Lane(0, "gpu", 0, 7, "stream 7", "stream")],
    )  # fmt: skip
    panel = show(qtbot, DetailsPanel(), 300, 600)
    panel.show_event(trace, 0)
    assert dict(panel.rows)["Name"] == name  # the rows say it as the trace does
    html, width = panel.body.text(), panel.body.width()
    assert _widest_line(html, panel.body.font(), width) <= width  # nothing runs past the panel's edge
    shown = QTextDocument()
    shown.setHtml(html)
    assert name in shown.toPlainText().replace("\u200b", "")  # all of it, in one piece


def test_breakable_adds_break_points_to_long_words_only():
    assert breakable("aten::mm") == "aten::mm" and breakable("5 ns") == "5 ns"
    assert breakable("at::native::vectorized_kernel").replace("\u200b", "") == "at::native::vectorized_kernel"
    assert breakable("at::native::vectorized_kernel").count("\u200b") == 3
    assert breakable("trailing_underscore_") == "trailing_\u200bunderscore_"


def test_an_empty_timeline_shows_no_placeholder_span_or_ticks(qtbot, tmp_path):
    view = show(qtbot, TimelineView(), 1200, 300)
    assert "ns" not in view.showing.html and view.ruler.tickValues(0.0, 1.0, 800) == []
    view.set_trace(load_trace(write_small_trace(tmp_path / "small.json.gz", "fork")))
    assert view.showing.html.startswith("showing") and view.ruler.tickValues(view.axis.lo, view.axis.hi, 800)
    view.set_trace(None)
    assert view.showing.html == "" and view.ruler.tickValues(0.0, 1.0, 800) == []


def test_a_threads_runs_pool_thread_is_named_as_the_mode_names_its_pool(tmp_path):
    from branchscope.widgets.event_info import describe_event

    trace = load_trace(write_small_trace(tmp_path / "threads.json.gz", "threads"))
    pool = next(i for i in range(len(trace)) if trace.lanes[int(trace.lane[i])].role == "interop")
    lane = dict(describe_event(trace, pool))["Lane"]
    assert lane.endswith("· Python pool") and "inter-op" not in lane
