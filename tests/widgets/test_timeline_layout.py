"""The timeline's layout (widgets.timeline_layout), without Qt: groups and their titles, folding,
rows and their y positions, what is on screen for a scroll offset, lookups by y and by lane."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets.lod import TimelineLod
from branchscope.widgets.timeline_layout import (
    BG_A,
    BG_B,
    FOLD_MIN_ROWS,
    HEADER,
    NO_LABEL,
    SEP,
    SHADE_A,
    SHADE_B,
    SHADE_HEADER,
    GroupHeader,
    LaneRow,
    TimelineLayout,
    hit_row,
    lane_groups,
    rank_titles,
)
from tests.paths import ROOT

QT = ("PySide6", "shiboken6", "pyqtgraph")


def _trace(lanes: list[Lane]):
    """One event per lane (the layout reads the lanes, not the events)."""
    n = len(lanes)
    return build_trace(
        path="layout", start_ns=np.arange(n) * 100, dur_ns=np.full(n, 50), lane=np.arange(n),
        name_id=np.zeros(n), cat_id=np.zeros(n), names=["op"], cats=["cpu_op"], lanes=lanes,
    )  # fmt: skip


#: main thread (3 rows), two inter-op threads (1 and 2 rows), two streams of GPU 0 (listed out of
#: stream order: stream 20, then stream 7).
LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "pool", "interop"),
    Lane(2, "cpu", 1, 12, "pool", "interop"),
    Lane(3, "gpu", 0, 20, "stream 20", "stream", 0),
    Lane(4, "gpu", 0, 7, "stream 7", "stream", 0),
]
ROWS = [range(0, 3), range(3, 4), range(4, 6), range(6, 7), range(7, 8)]
MAIN, POOL, GPU = (0, 1, 0), (0, 1, 1), (1, 0, 0)


@pytest.fixture
def layout() -> TimelineLayout:
    lay = TimelineLayout()
    lay.set_trace(_trace(LANES), ROWS)
    assert (lay.row_height, lay.group_h, lay.lane_pad, lay.summary_height) == (16, 20, 6, 22)
    return lay


def test_the_layout_modules_and_their_use_import_no_qt():
    """In a process of its own (pytest-qt imports Qt into this one): lay a trace out, look at what
    is visible, hit an event, select, range, find; no Qt module is loaded."""
    code = """
import sys
import numpy as np
from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets.lod import TimelineLod
from branchscope.widgets.timeline_layout import TimelineLayout, hit_row
from branchscope.widgets.timeline_state import TimelineState
trace = build_trace(path="t", start_ns=np.array([0, 10]), dur_ns=np.array([100, 20]), lane=np.zeros(2),
                    name_id=np.array([0, 1]), cat_id=np.zeros(2), names=["a", "b"], cats=["cpu_op"],
                    lanes=[Lane(0, "cpu", 1, 1, "main", "main")])
lod = TimelineLod(trace)
lay = TimelineLayout()
lay.set_trace(trace, [lod.rows_of_lane(0)])
lay.update(100)
lay.visible(0, 100)
assert hit_row(lod, trace.dur_ns, lay.rows_at(lay.lane_rows[0].top + 4)[0], 50, 1) == 0
state = TimelineState()
state.select(trace, 0)
state.set_range(0.0, 5.0)
assert state.search(trace, "b") == 1 and state.find.next(trace) == 1
print(sorted(m for m in sys.modules if m.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert not any(name.split(".")[0] in QT for name in _this_modules_imports())


def _this_modules_imports() -> list[str]:
    """The modules this test file imports at its top (it must run without Qt too)."""
    import ast

    tree = ast.parse(open(__file__, encoding="utf-8").read())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


# ---- groups and titles -------------------------------------------------------------------------


def test_groups_come_main_pool_then_gpu_with_streams_in_stream_order():
    trace = _trace(LANES)
    assert lane_groups(trace) == [
        (MAIN, "main thread", [0]), (POOL, "inter-op pool", [1, 2]), (GPU, "GPU 0", [4, 3]),
    ]  # fmt: skip
    assert [g[0] for g in lane_groups(trace, streams_first=True)] == [GPU, MAIN, POOL]


def test_several_processes_name_their_pid_and_ranks_name_their_rank():
    lanes = [Lane(0, "cpu", 1, 1, "main", "main"), Lane(1, "cpu", 2, 5, "main", "main")]
    assert [g[1] for g in lane_groups(_trace(lanes))] == ["pid 1 · main thread", "pid 2 · main thread"]
    ranked = [
        Lane(0, "cpu", 1, 1, "main", "main", rank=0), Lane(1, "gpu", 1, 7, "s", "stream", 0, rank=0),
        Lane(2, "cpu", 2, 1, "main", "main", rank=1), Lane(3, "gpu", 2, 7, "s", "stream", 1, rank=1),
    ]  # fmt: skip
    trace = _trace(ranked)
    assert rank_titles(trace) == {0: "rank 0", 1: "rank 1"}
    assert rank_titles(_trace(LANES)) == {}
    lay = TimelineLayout()
    lay.set_trace(trace, [range(i, i + 1) for i in range(4)])
    lay.update(1000)
    assert [g.title for g in lay.group_headers] == [
        "rank 0 · main thread", "rank 0 · GPU 0", "rank 1 · main thread", "rank 1 · GPU 1",
    ]  # fmt: skip
    # under its rank's title a lane does not repeat the rank (alone, its label says it)
    assert [lr.label for lr in lay.lane_rows] == ["main", "GPU 0 stream 7", "main", "GPU 1 stream 7"]
    assert ranked[0].label == "rank 0 · main"


# ---- laying out ----------------------------------------------------------------------------------


def test_everything_expanded_stacks_titles_and_lanes(layout):
    layout.update(1000)
    assert layout.group_headers == [
        GroupHeader("main thread", 0, MAIN, 20, False, True, (0,)),
        GroupHeader("inter-op pool · 2 threads", 74, POOL, 20, False, True, (1, 2)),
        GroupHeader("GPU 0 · 2 streams", 154, GPU, 20, False, False, (4, 3)),
    ]
    assert layout.lane_rows == [
        LaneRow(0, 20, 3 * 16 + 6, range(0, 3), "main"),
        LaneRow(1, 94, 22, range(3, 4), "pool"),
        LaneRow(2, 116, 38, range(4, 6), "pool"),
        LaneRow(4, 174, 22, range(7, 8), "GPU 0 stream 7"),
        LaneRow(3, 196, 22, range(6, 7), "GPU 0 stream 20"),
    ]
    assert layout.content_height == layout.full_height == 218
    assert layout.auto_collapsed == set() and layout.avail == 1000


def test_short_of_room_the_tallest_cpu_groups_fold_until_the_streams_fit(layout):
    layout.update(218)  # room for everything
    assert not any(g.collapsed for g in layout.group_headers)
    layout.update(200)  # the pool (80 px) folds first: 74 + 22 + 64
    assert layout.auto_collapsed == {POOL} and layout.content_height == 160
    pool = layout.group_headers[1]
    assert pool == GroupHeader("inter-op pool · 2 threads", 74, POOL, 22, True, True, (1, 2), (3, 4))
    assert [lr.lane for lr in layout.lane_rows] == [0, 4, 3]
    layout.update(120)  # then the main thread
    assert layout.auto_collapsed == {POOL, MAIN} and layout.content_height == 108
    assert layout.full_height == 218  # what it would like to have
    layout.update(100)  # still too tall: the streams go first
    assert [g.key for g in layout.group_headers] == [GPU, MAIN, POOL]
    assert [(g.top, g.height) for g in layout.group_headers] == [(0, 20), (64, 22), (86, 22)]
    layout.update(100, fit=False)  # not on screen: nothing folds
    assert not any(g.collapsed for g in layout.group_headers) and layout.content_height == 218


def test_the_users_folding_holds_whatever_the_room_until_another_trace(layout):
    layout.set_collapsed(POOL, False)  # opened: never folded for room
    layout.update(200)
    assert layout.auto_collapsed == {MAIN} and not layout.group_headers[1].collapsed
    layout.set_collapsed(MAIN, True)
    layout.update(1000)
    assert [g.collapsed for g in layout.group_headers] == [True, False, False]
    layout.set_trace(layout.trace, ROWS)  # the same trace again: kept
    layout.update(1000)
    assert layout.group_headers[0].collapsed
    layout.set_trace(_trace(LANES), ROWS)  # another one: forgotten
    layout.update(1000)
    assert not any(g.collapsed for g in layout.group_headers)
    layout.set_trace(None)
    assert layout.lane_rows == [] and layout.group_headers == [] and layout.rows_at(30) == ()


def test_small_rows_pack_lanes_tighter(layout):
    layout.row_height = 6
    assert layout.lane_pad == 2 and layout.summary_height == 20
    layout.update(1000)
    assert layout.lane_rows[0] == LaneRow(0, 20, 3 * 6 + 2, range(0, 3), "main")


# ---- lookups -------------------------------------------------------------------------------------


def test_y_finds_groups_lanes_and_rows(layout):
    layout.update(1000)
    main, pool, gpu = layout.group_headers
    assert layout.group_at(0) is main and layout.group_at(19) is main
    assert layout.group_at(20) is None and layout.group_at(74) is pool and layout.group_at(300) is None
    assert layout.group_at(-1) is None
    # the main thread's rows start below half the lane padding, 16 px each
    assert layout.rows_at(22) == () and layout.rows_at(23) == (0,) and layout.rows_at(38) == (0,)
    assert layout.rows_at(39) == (1,) and layout.rows_at(55) == (2,) and layout.rows_at(71) == ()
    assert layout.rows_at(5) == ()  # a title band
    assert layout.rows_at(199) == (6,) and layout.rows_at(217) == () and layout.rows_at(218) == ()


def test_a_folded_lane_is_found_on_its_groups_summary_lane(layout):
    layout.update(200)
    pool = layout.group_headers[1]
    assert layout.rows_at(pool.top + 5) == (3, 4)  # the lane drawn on top first
    assert layout.lane_row(2) is None and layout.collapsed_group_of(2) is pool
    assert layout.lane_extent(2) == (74, 22)
    # an event of a folded lane is drawn in the summary lane, centred in the band
    assert layout.event_row_top(2, 3) == 74 + (22 - 16) // 2 + 1
    assert layout.collapsed_group_of(0) is None and layout.lane_row(0).top == 20


def test_an_event_is_drawn_in_the_row_of_its_depth(layout):
    layout.update(1000)
    assert layout.lane_extent(2) == (116, 38)
    assert layout.event_row_top(0, 0) == 20 + 3
    assert layout.event_row_top(0, 1) == 20 + 3 + 16
    assert layout.event_row_top(0, 9) == 20 + 3 + 32  # depths past the last row share it
    assert layout.event_row_top(1, 0) == 97
    assert layout.lane_extent(99) is None and layout.event_row_top(99, 0) is None


# ---- scrolling -----------------------------------------------------------------------------------


def test_scrolling_stays_in_bounds_and_reveals_a_lane(layout):
    layout.update(1000, fit=False)
    assert layout.max_scroll(100) == 118 and layout.max_scroll(500) == 0
    assert layout.clamp_scroll(-5, 100) == 0 and layout.clamp_scroll(500, 100) == 118
    assert layout.clamp_scroll(50.7, 100) == 50
    assert layout.scroll_handle(0, 500) is None
    assert layout.scroll_handle(0, 100) == (0, 45)  # 100 * 100 // 218
    assert layout.scroll_handle(118, 100) == (55, 45)
    assert layout.scroll_handle(0, 10) == (0, 24)  # never shorter than 24 px
    assert layout.reveal(0, 0, 100) == 0  # in view already
    assert layout.reveal(3, 0, 100) == 196 - 100 // 3  # a third of the way down


# ---- what is on screen ---------------------------------------------------------------------------


def test_visible_rows_map_each_pixel_line(layout):
    layout.update(1000)
    v = layout.visible(0, 80)
    assert (v.rows, v.row_y, v.row_shade) == ([0, 1, 2], [23, 39, 55], [SHADE_A] * 3)
    assert v.painted == [0] and v.summaries == []
    expected = np.full(80, BG_A)
    expected[0:20] = HEADER
    expected[23:38], expected[39:54], expected[55:70] = 0, 1, 2  # 15 lines a row, one line apart
    expected[73] = SEP
    expected[74:80] = HEADER
    assert v.y_map.tolist() == expected.tolist()


def test_visible_rows_when_scrolled(layout):
    layout.update(1000)
    v = layout.visible(100, 80)
    assert v.rows == [3, 4, 5, 7] and v.row_y == [-3, 19, 35, 77]
    assert v.row_shade == [SHADE_B, SHADE_A, SHADE_A, SHADE_B]  # alternating by lane
    assert v.painted == [1, 2, 4]
    assert v.y_map[:12].tolist() == [0] * 12  # a row cut by the top edge
    assert v.y_map[12:15].tolist() == [BG_B] * 3 and v.y_map[15] == SEP
    assert v.y_map[54:74].tolist() == [HEADER] * 20 and v.y_map[77:].tolist() == [3] * 3


def test_a_summary_lane_combines_the_top_rows_of_its_lanes(layout):
    layout.update(200)
    v = layout.visible(0, 200)
    # the summary's rows first (names only on the first), then the lanes'
    assert v.rows[:2] == [3, 4] and v.row_y[:2] == [78, NO_LABEL] and v.row_shade[:2] == [SHADE_HEADER] * 2
    assert v.summaries == [[0, 1]]
    assert v.rows[2:] == [0, 1, 2, 7, 6] and v.row_y[2:] == [23, 39, 55, 119, 141]
    assert v.painted == [1, 2, 0, 4, 3]
    n = len(v.rows)
    assert v.y_map[74:78].tolist() == [HEADER] * 4 and v.y_map[78:93].tolist() == [n] * 15
    assert v.y_map[93:116].tolist() == [HEADER] * 23


def test_every_lane_is_painted_once_when_all_fit(layout):
    layout.update(1000)
    v = layout.visible(0, layout.content_height)
    assert sorted(v.painted) == [0, 1, 2, 3, 4] and sorted(v.rows) == list(range(8))
    assert layout.visible(layout.content_height, 50).painted == []


# ---- hit testing in a row ------------------------------------------------------------------------


def test_a_hit_finds_the_event_containing_the_time_else_the_nearest_within_tolerance():
    trace = build_trace(
        path="hit", start_ns=np.array([0, 100, 500]), dur_ns=np.array([1000, 100, 100]), lane=np.zeros(3),
        name_id=np.zeros(3), cat_id=np.zeros(3), names=["op"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip
    lod = TimelineLod(trace)
    top, children = lod.rows_of_lane(0)
    dur = trace.dur_ns
    assert hit_row(lod, dur, top, 550, 10) == 0
    assert hit_row(lod, dur, children, 550, 10) == 2
    assert hit_row(lod, dur, children, 150, 10) == 1
    assert hit_row(lod, dur, children, 300, 10) == -1  # between the children, too far from both
    assert hit_row(lod, dur, children, 300, 150) == 1  # the nearer end (200) within 150
    assert hit_row(lod, dur, top, 5000, 10) == -1


# ---- folding deep rows to fit (the rows of a comparison) -----------------------------------------

#: main thread 3 rows, two inter-op threads of 6 rows each (an ATen call stack under each branch).
DEEP_ROWS = [range(0, 3), range(3, 9), range(9, 15)]


@pytest.fixture
def deep() -> TimelineLayout:
    lay = TimelineLayout()
    lay.set_trace(_trace(LANES[:3]), DEEP_ROWS)
    lay.fold_to_fit = True
    return lay


def test_lanes_fold_their_deepest_rows_only_when_short_of_room(deep):
    deep.update(1000)
    assert deep.row_cap is None and [lr.drawn for lr in deep.lane_rows] == [3, 6, 6]
    full = deep.content_height
    assert full == 2 * 20 + (3 * 16 + 6) + 2 * (6 * 16 + 6)
    deep.update(full - 1)  # one pixel short: the pool lanes give a row each, the main thread none
    assert deep.row_cap == 5 and [lr.drawn for lr in deep.lane_rows] == [3, 5, 5]
    assert [lr.folded for lr in deep.lane_rows] == [0, 1, 1] and deep.content_height == full - 32
    deep.update(10)  # no room: folded to the least, and the rest scrolls
    assert deep.row_cap == FOLD_MIN_ROWS and [lr.drawn for lr in deep.lane_rows] == [3, 3, 3]
    deep.fold_to_fit = False
    deep.update(10)
    assert deep.row_cap is None and deep.content_height == full
    assert deep.folded_height == 2 * 20 + 3 * (3 * 16 + 6)


def test_a_folded_row_draws_the_deeper_rows_in_it_and_finds_them(deep):
    deep.update(2 * 20 + 3 * (3 * 16 + 6))  # room for 3 rows a lane
    pool = deep.lane_rows[1]
    assert pool.rows == range(3, 9) and pool.drawn == 3
    last = pool.top + deep.lane_pad // 2 + 2 * deep.row_height
    # an event at depth 5 is drawn in the last row, which a hit tries shallowest first
    assert deep.event_row_top(1, 5) == deep.event_row_top(1, 2) == last
    assert deep.rows_at(last + 1) == (5, 6, 7, 8)
    assert deep.rows_at(last - deep.row_height + 1) == (4,)
    vis = deep.visible(0, deep.content_height)
    folded = [m for m in vis.summaries if [vis.rows[k] for k in m] == [5, 6, 7, 8]]
    assert len(folded) == 1
    members = folded[0]
    s = vis.summaries.index(members)
    # on its lane's background, the shallowest row's names drawn, the deeper ones' not
    assert vis.summary_shade[s] == SHADE_B and [vis.row_y[k] for k in members][1:] == [NO_LABEL] * 3
    assert vis.row_y[members[0]] == last
    assert (vis.y_map[last : last + deep.row_height - 1] == len(vis.rows) + s).all()


def test_no_folding_leaves_lanes_as_they_were(layout):
    layout.fold_to_fit = True
    layout.update(1000)
    assert all(lr.shown == -1 and lr.drawn == len(lr.rows) and not lr.folded for lr in layout.lane_rows)
