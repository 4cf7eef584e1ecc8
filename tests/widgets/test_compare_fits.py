"""Compare is the lesson (issue 22, item 2): at 1600×1000 each run's lanes are in view, deep lanes
folded rather than scrolled away, lane names kept while scrolling, the summary table fitted to its
columns, and splitter handles that can be seen (pytest-qt, offscreen)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics

from branchscope.profiling import load_trace
from branchscope.profiling.trace.compare import summarize
from branchscope.widgets.compare_view import CompareView, fitted_widths
from branchscope.widgets.splitter import MarkedHandle
from branchscope.widgets.theme import theme
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline import TimelineView
from branchscope.widgets.timeline_labels import gutter_text
from branchscope.widgets.timeline_layout import FOLD_MIN_ROWS, LaneRow, TimelineLayout
from branchscope.widgets.timeline_painter import RULER_H, lane_area_height
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show

#: Nested ops under each branch's matrix product: a pool lane of 16 rows, as a real ATen call stack
#: (conv2d → convolution → _convolution → mkldnn_convolution …) makes it.
DEPTH = 14


def _deep_run(path, mode: str):
    """The small trace of a run in `mode`, each branch's `aten::mm` holding a chain of DEPTH nested ops."""
    doc = json.loads(write_small_trace(path, mode).read_text())
    extra = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("name") == "aten::mm":
            for j in range(1, DEPTH + 1):
                extra.append({**e, "name": f"aten::level{j}", "ts": e["ts"] + j, "dur": e["dur"] - 2 * j, "args": {}})
    doc["traceEvents"] += extra
    path.write_text(json.dumps(doc))
    return load_trace(path)


@pytest.fixture
def view(qtbot):
    return show(qtbot, CompareView(), 1600, 1000)


@pytest.fixture
def deep(tmp_path):
    return _deep_run(tmp_path / "sequential.json", "sequential"), _deep_run(tmp_path / "fork.json", "fork")


def _compare(view, qtbot, traces, names):
    view.set_runs(list(traces), [summarize(t, None, n) for t, n in zip(traces, names)], 0)
    qtbot.waitUntil(lambda: all(row.panel("timeline").lane_layout.avail > 0 for row in view.workspace.rows))
    view.grab()  # painted once: which lanes are on screen


def test_each_runs_lanes_are_in_view_folded_not_scrolled_away(view, qtbot, deep):
    """Unfolded, the fork run's two pool lanes of 16 rows each need more than its row has: they were
    scrolled out of sight; now deep rows fold into the last rows and every lane is on screen."""
    _compare(view, qtbot, deep, ["sequential.json", "fork.json"])
    for row, trace in zip(view.workspace.rows, deep):
        timeline = row.panel("timeline")
        layout = timeline.lane_layout
        assert layout.full_height > lane_area_height(timeline)  # would not fit unfolded
        assert layout.content_height <= lane_area_height(timeline)
        assert timeline.scroll_y == 0 and timeline.max_scroll() == 0
        assert sorted(lr.lane for lr in layout.lane_rows) == list(range(len(trace.lanes)))
        assert sorted(timeline.painted_lanes) == list(range(len(trace.lanes)))
        folded = [lr for lr in layout.lane_rows if lr.folded]
        assert folded and all(lr.drawn >= FOLD_MIN_ROWS for lr in folded)
    fork = view.workspace.rows[1].panel("timeline")
    pool = [lr for lr in fork.lane_layout.lane_rows if fork.trace.lanes[lr.lane].role == "interop"]
    assert len(pool) == 2


def test_an_event_in_a_folded_row_is_drawn_and_hit_there(view, qtbot, deep):
    _compare(view, qtbot, deep, ["sequential.json", "fork.json"])
    timeline = view.workspace.rows[1].panel("timeline")
    trace = timeline.trace
    deepest = max(range(len(trace)), key=lambda i: int(trace.depth[i]))
    lr = timeline.lane_layout.lane_row(int(trace.lane[deepest]))
    assert lr is not None and lr.folded and trace.depth[deepest] >= lr.drawn
    last_row_top = lr.top + timeline.lane_layout.lane_pad // 2 + (lr.drawn - 1) * timeline.row_height
    rect = timeline.event_rect(deepest)
    assert rect is not None and rect.top() == RULER_H + last_row_top - timeline.scroll_y
    # the folded row holds the deeper rows: a hit there tries them, the shallowest (drawn on top) first
    assert timeline.lane_layout.rows_at(last_row_top + 2) == tuple(range(lr.rows.start + lr.drawn - 1, lr.rows.stop))
    timeline.zoom_to_event(deepest)
    rect = timeline.event_rect(deepest)
    assert timeline.event_at(rect.center()) in {deepest, *_ancestors(trace, deepest)}


def _ancestors(trace, i: int) -> list[int]:
    out = []
    while trace.parent[i] >= 0:
        i = int(trace.parent[i])
        out.append(i)
    return out


def test_a_single_run_is_not_folded(qtbot, deep):
    view = show(qtbot, CompareView(), 1600, 1000)
    seq = deep[0]
    view.set_runs([seq], [summarize(seq, None, "sequential.json")], 0)
    qtbot.waitUntil(lambda: view.workspace.rows[0].panel("timeline").lane_layout.avail > 0)
    layout = view.workspace.rows[0].panel("timeline").lane_layout
    assert not layout.fold_to_fit and all(not lr.folded for lr in layout.lane_rows)


def test_a_lane_label_stays_in_sight_while_its_lane_is():
    lr = LaneRow(0, 100, 300, range(0, 18), "thread 7 (PTThreadPool)")
    assert TimelineLayout.label_top(lr, 0, 30) == 100  # at the lane's top
    assert TimelineLayout.label_top(lr, 250, 30) == 0  # its top scrolled away: at the area's top
    assert TimelineLayout.label_top(lr, 380, 30) == 100 + 300 - 380 - 30  # leaves with the lane's end


def test_scrolled_through_a_tall_lane_its_name_is_drawn_at_the_top(qtbot, deep):
    """The gutter's top holds the label's text (dark pixels) with the lane's top scrolled away."""
    view = show(qtbot, TimelineView(), 900, 300)
    view.set_trace(deep[1])
    lr = max(view.lane_rows, key=lambda r: r.height)
    view._set_scroll(lr.top + 40)
    assert view.scroll_y == lr.top + 40
    image = view.grab().toImage()
    band = [image.pixelColor(x, y).lightness() for y in range(RULER_H + 2, RULER_H + 16) for x in range(14, 120)]
    assert min(band) < 110  # text, not the gutter's plain colour


def test_fitted_widths_share_the_width_in_proportion():
    assert fitted_widths([100, 150], 400) == [100, 150]
    assert fitted_widths([190, 190, 190], 420) == [140, 140, 140]
    assert fitted_widths([190, 190, 190], 120) == [90, 90, 90]  # never below the least: then it scrolls


def test_the_summary_table_shows_every_runs_column(view, qtbot, tmp_path):
    traces = [_deep_run(tmp_path / f"{m}{k}.json", m) for k, m in enumerate(["sequential", "fork", "threads"])]
    _compare(view, qtbot, traces, ["a very long run name number one.json", "fork run.json", "threads.json"])
    table = view.summary_table
    total = sum(table.columnWidth(k) for k in range(table.columnCount()))
    assert table.columnCount() == 3 and total <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0


def test_splitter_handles_are_marked_and_a_double_click_fits_again(view, qtbot, deep):
    _compare(view, qtbot, deep, ["sequential.json", "fork.json"])
    row = view.workspace.rows[1]
    handle = row.splitter.handle(1)
    assert isinstance(handle, MarkedHandle) and "drag" in handle.toolTip()
    image = handle.grab().toImage()
    grip = handle.grip_rect()
    colors = {image.pixelColor(x, grip.top()).name() for x in range(grip.left(), grip.right())}
    assert QColor(theme().gutter).name() not in colors  # a grip drawn across the band
    fitted = row.splitter.sizes()
    row.splitter.moveSplitter(fitted[0] - 150, 1)  # the lanes squeezed by a drag
    assert row.splitter.sizes() != fitted
    middle = QPoint(handle.width() // 2, handle.height() // 2)
    qtbot.mouseDClick(handle, Qt.MouseButton.LeftButton, pos=middle)
    assert row.splitter.sizes() == fitted
    # QTest leaves the button down after a double-click: later tests' mouse moves would be drags
    qtbot.mouseRelease(handle, Qt.MouseButton.LeftButton, pos=middle)


def test_a_cut_lane_label_keeps_the_thread_id_and_a_group_its_count(qtbot):
    """Issue 22, item 6: at larger text lane names read "thread 23…ython3.8": the id, which tells
    two threads apart, was cut; a group's title lost its count first."""
    font = QFont()
    font.setPointSizeF(font.pointSizeF() * 2)
    fm = QFontMetrics(font)
    label = "thread 23456 (python3.8)"
    width = fm.horizontalAdvance(label) - 10
    cut = gutter_text(label, fm, width)
    assert cut.startswith("thread 23456 (") and cut.endswith("…)") and fm.horizontalAdvance(cut) <= width
    title = "rank 0 · inter-op pool · 2 threads"
    width = fm.horizontalAdvance(title) - 10
    cut = gutter_text(title, fm, width)
    assert cut.endswith("… · 2 threads") and fm.horizontalAdvance(cut) <= width
    assert gutter_text("main", fm, 500) == "main"
    # Too narrow for both: the group's name before its count (issue 35: "Pytho… · 2 threads").
    title = "Python pool · 2 threads"
    width = fm.horizontalAdvance("Python pool · 2 thr")
    assert gutter_text(title, fm, width) == "Python pool"


def test_hovering_the_gutter_names_the_lane_whole(qtbot, deep):
    view = show(qtbot, TimelineView(), 900, 600)
    view.set_trace(deep[1])
    lr = view.lane_rows[-1]
    tip = view.gutter_tip(QPoint(20, RULER_H + lr.top - view.scroll_y + 3))
    assert tip.startswith(lr.label + "\n") and "events" in tip
    gh = view.group_headers[0]
    assert view.gutter_tip(QPoint(20, RULER_H + gh.top + 3)) == gh.title
    assert view.gutter_tip(QPoint(GUTTER + 20, RULER_H + lr.top + 3)) == ""
