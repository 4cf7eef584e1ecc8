"""The branch legend: colours as on the timeline, totals from the branch annotations, branches grouped
by region with nested ones under their branch, names in full on hover, the filter; and the details
panel's branch list."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.profiling.trace.prediction import predict, prediction_text
from branchscope.profiling.trace.records import BranchRecord, to_builtins
from branchscope.widgets import colors
from branchscope.widgets.branch_legend import BranchLegend, legend_rows
from branchscope.widgets.timeline import TimelineView
from tests.builders.events import trace_of
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show

LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "PTThreadPool", "interop"),
    Lane(2, "cpu", 1, 12, "PTThreadPool", "interop"),
]
INFO = {
    "branches": [
        {"name": "b", "region": "1", "region_name": "blocks", "ops": 4},
        {"name": "a", "region": "1", "region_name": "blocks", "ops": 9},
        # a run from before regions had names: the group says "region 1.1"
        {"name": "a.x", "region": "1.1", "depth": 1, "parent": "a"},
        {"name": "a.y", "region": "1.1", "depth": 1, "parent": "a"},
        {"name": "never", "region": "2", "region_name": "head"},
    ]
}
# (lane, name, start, dur): b runs before a; a.x and a.y nested inside a; two steps
EVENTS = [
    (2, "branch: b", 0, 3_000_000),
    (1, "branch: a", 500_000, 4_000_000),
    (1, "branch: a.x", 600_000, 1_000_000),
    (1, "branch: a.y", 2_000_000, 1_500_000),
    (1, "aten::mm", 2_100_000, 100_000),
    (2, "branch: b", 5_000_000, 1_000_000),
]


def _trace():
    return trace_of(EVENTS, LANES, cat="user_annotation", path="nested", metadata={"branchscope": INFO})


def test_rows_nest_under_their_parent_with_totals_and_the_timelines_colours(qtbot):
    trace = _trace()
    rows = legend_rows(trace)
    assert [(r.name, r.depth, r.parent) for r in rows] == [
        ("a", 0, None),
        ("a.x", 1, "a"),
        ("a.y", 1, "a"),
        ("b", 0, None),
        ("never", 0, None),
    ]
    assert {r.name: r.total_ns for r in rows} == {
        "a": 4_000_000,
        "a.x": 1_000_000,
        "a.y": 1_500_000,
        "b": 4_000_000,
        "never": 0,
    }
    # nested branches keep their own colours; "never", alone in region 2, takes the palette's first
    assert len({r.color for r in rows if r.name != "never"}) == 4
    assert {r.name: r.color for r in rows}["never"] == {r.name: r.color for r in rows}["a"]
    # each colour is the one the timeline paints that branch's events in
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_trace(trace)
    by_name = {r.name: colors.hex_to_rgb32(r.color) for r in rows}
    mm = int(np.flatnonzero(trace.name_id == trace.names.index("aten::mm"))[0])
    assert int(colors.PALETTE[view.painter.keys[mm]]) == by_name["a.y"]
    b = int(np.flatnonzero(trace.name_id == trace.names.index("branch: b"))[0])
    assert int(colors.PALETTE[view.painter.keys[b]]) == by_name["b"]


def test_the_widget_groups_branches_by_region_shows_swatch_name_and_ms_indented_and_emits_clicks(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 240)
    legend.set_trace(_trace())
    tree = legend.tree
    # one row per region at the top (its name, else "region ID"), the branches under it
    assert legend.has_data() and tree.topLevelItemCount() == 2
    blocks, head = legend.region_item("1"), legend.region_item("2")
    assert (blocks.text(0), head.text(0)) == ("blocks · 2 branches", "head · 1 branch")
    a, ax = legend.item_of("a"), legend.item_of("a.x")
    assert a.parent() is blocks and legend.item_of("b").parent() is blocks and legend.item_of("never").parent() is head
    # a nested region sits under the branch it runs in
    nested = legend.region_item("1.1")
    assert nested.text(0) == "region 1.1 · 2 branches" and nested.parent() is a and ax.parent() is nested
    assert [nested.child(i).text(0) for i in range(nested.childCount())] == ["a.x", "a.y"]
    assert (a.text(1), ax.text(1), legend.item_of("never").text(1)) == ("4.00", "1.00", "–")
    # the nested row is drawn indented, its swatch the branch's colour
    assert tree.visualItemRect(ax).left() >= tree.visualItemRect(a).left() + tree.indentation()
    icon = ax.icon(0).pixmap(tree.iconSize()).toImage()
    centre = icon.pixelColor(icon.width() // 2, icon.height() // 2).name()
    assert centre == next(r.color for r in legend.rows if r.name == "a.x")
    with qtbot.waitSignal(legend.branchActivated) as sig:
        qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualItemRect(legend.item_of("b")).center())
    assert sig.args == ["b"]
    # a region's row is no branch: clicking it emits nothing
    with qtbot.assertNotEmitted(legend.branchActivated):
        qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualItemRect(blocks).center())


LONG = "text_model.encoder.layers.11.self_attn.q_proj"


def _long_named_trace():
    info = {
        "branches": [
            {"name": LONG, "region": "1", "region_name": "text_model.encoder.layers.11.self_attn", "ops": 3},
            {"name": LONG.replace("q_proj", "k_proj"), "region": "1", "region_name": "text_model.encoder.layers.11.self_attn"},
        ]
    }  # fmt: skip
    return build_trace(
        path="long", start_ns=np.array([0]), dur_ns=np.array([1_000_000]), lane=np.array([0]),
        name_id=np.array([0]), cat_id=np.zeros(1), names=[f"branch: {LONG}"], cats=["user_annotation"],
        lanes=LANES[:1], metadata={"branchscope": info},
    )  # fmt: skip


def _hover_tooltip(qtbot, tree, item):
    """What hovering `item` shows: a tooltip event at its row, as Qt sends one after the mouse rests."""
    QToolTip.hideText()
    qtbot.waitUntil(lambda: not QToolTip.isVisible())
    pos = tree.visualItemRect(item).center()
    QApplication.sendEvent(tree.viewport(), QHelpEvent(QEvent.Type.ToolTip, pos, tree.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible)
    return QToolTip.text()


def test_a_long_name_is_cut_in_its_middle_and_shown_in_full_on_hover(qtbot):
    legend = show(qtbot, BranchLegend(), 230, 200)
    legend.set_trace(_long_named_trace())
    tree = legend.tree
    item = legend.item_of(LONG)
    width = tree.visualItemRect(item).width()
    assert tree.fontMetrics().horizontalAdvance(LONG) > width  # too long for its column
    assert tree.textElideMode() == Qt.TextElideMode.ElideMiddle  # "text_mod…q_proj": both ends in sight
    tip = _hover_tooltip(qtbot, tree, item)
    assert tip.splitlines() == [
        f"{LONG}: 1.00 ms in this run (its branch annotations summed)",
        "region 1 (text_model.encoder.layers.11.self_attn)",
        "3 ops",
    ]
    assert "region 1: text_model.encoder.layers.11.self_attn" in _hover_tooltip(qtbot, tree, legend.region_item("1"))


def test_the_filter_shows_the_matching_branches_and_hides_the_rest(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 300)
    legend.set_trace(_trace())
    assert legend.shown_branches() == ["a", "a.x", "a.y", "b", "never"]
    qtbot.keyClicks(legend.filter, "NEV")  # any case
    assert legend.shown_branches() == ["never"]
    assert legend.region_item("1").isHidden() and not legend.region_item("2").isHidden()
    # a nested branch that matches keeps the branch and the regions it sits in in sight
    legend.filter.setText("a.y")
    assert legend.shown_branches() == ["a", "a.y"]
    assert not legend.region_item("1").isHidden() and not legend.region_item("1.1").isHidden()
    assert legend.region_item("2").isHidden()
    # a region's name matches its branches
    legend.filter.setText("blocks")
    assert legend.shown_branches() == ["a", "b"]
    legend.filter.setText("region 1.1")
    assert legend.shown_branches() == ["a", "a.x", "a.y"]
    # nothing matches: nothing in sight; a new trace keeps the filter
    legend.filter.setText("zzz")
    assert legend.shown_branches() == []
    legend.filter.setText("head")
    legend.set_trace(_trace())
    assert legend.filter.text() == "head" and legend.shown_branches() == ["never"]
    legend.filter.clear()
    assert legend.shown_branches() == ["a", "a.x", "a.y", "b", "never"]


def test_a_run_trace_lists_its_branches_and_a_trace_without_any_says_so(tmp_path, qtbot):
    legend = show(qtbot, BranchLegend(), 320, 200)
    trace = load_trace(write_small_trace(tmp_path / "t.json", "fork"))
    legend.set_trace(trace)
    # small_trace: two steps, each branch annotated for 800 µs a step
    assert [(r.name, r.total_ns) for r in legend.rows] == [("left", 1_600_000), ("right", 1_600_000)]
    assert legend.item_of("left").text(1) == "1.60"  # milliseconds: the column header says the unit
    # grouped under their region, which has no name in this trace
    assert legend.item_of("left").parent() is legend.region_item("0") and legend.region_item("0").text(0) == "region 0 · 2 branches"
    bare = build_trace(
        path="bare", start_ns=np.array([0]), dur_ns=np.array([10]), lane=np.array([0]), name_id=np.array([0]),
        cat_id=np.array([0]), names=["aten::mm"], cats=["cpu_op"], lanes=LANES[:1],
    )  # fmt: skip
    legend.set_trace(bare)
    assert not legend.has_data()
    assert legend.tree.topLevelItem(0).text(0) == "no branches in this trace"


def test_the_details_panel_lists_the_branches_one_per_row_by_region_and_follows_the_palette(qtbot):
    from branchscope.widgets.details_panel import DetailsPanel
    from branchscope.widgets.theme import LIGHT, dark_palette, theme

    details = show(qtbot, DetailsPanel(), 300, 400)
    trace = _trace()
    details.set_trace(trace)
    assert ("Branches", "5 in 3 regions") in details.rows
    # one row per branch, in the legend's order, each under its region's row
    tree = details.branches
    assert tree.isVisible() and details.branch_names() == [r.name for r in legend_rows(trace)]
    assert [tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount())] == ["blocks · 2 branches", "head · 1 branch"]
    blocks = tree.topLevelItem(0)
    assert [blocks.child(i).text(0) for i in range(blocks.childCount())] == ["a", "b"]
    assert [(blocks.child(i).text(1)) for i in range(blocks.childCount())] == ["9", "4"]  # ops
    a = blocks.child(0)
    assert a.child(0).text(0) == "region 1.1 · 2 branches" and [a.child(0).child(i).text(0) for i in range(2)] == ["a.x", "a.y"]
    # every row in sight without scrolling the list (the panel scrolls), names in full on hover
    last = a.child(0).child(1)
    assert tree.visualItemRect(last).bottom() <= tree.viewport().height()
    assert _hover_tooltip(qtbot, tree, a).splitlines() == ["a", "region 1 (blocks)", "9 ops"]
    assert LIGHT.muted.name() in details.body.text()
    base = QApplication.palette()
    QApplication.setPalette(dark_palette())
    try:
        dark_muted = theme().muted.name()
        assert dark_muted != LIGHT.muted.name()
        qtbot.waitUntil(lambda: dark_muted in details.body.text())
        details.show_event(trace, 0)
        qtbot.waitUntil(lambda: details.title.text() == "Event")
        assert not tree.isVisible()  # an event's details, without the branch list
    finally:
        redrawn = []
        real = details.show_event
        details.show_event = lambda *a: redrawn.append(a[:2]) or real(*a)
        QApplication.setPalette(base)
    # the palette change redraws the event shown
    qtbot.waitUntil(lambda: bool(redrawn) and all(r == (trace, 0) for r in redrawn))
    assert details.title.text() == "Event" and ("Name", trace.event_name(0)) in details.rows
    details.show_event(trace, -1)  # back to the summary: the list again
    assert tree.isVisible() and details.branch_names() == ["a", "a.x", "a.y", "b", "never"]
    details.set_trace(None)
    assert not tree.isVisible() and details.branch_names() == []


def test_the_size_hint_makes_room_for_the_rows(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 400)
    legend.set_trace(_trace())
    last = legend.tree.visualItemRect(legend.item_of("never"))
    # every row, region rows too, fits in the hinted height (below the filter and the header)
    assert legend.tree.geometry().top() + legend.tree.header().height() + last.bottom() <= legend.sizeHint().height()
    assert legend.sizeHint().height() < 400


def test_a_branch_the_run_info_does_not_list_stands_at_the_top_outside_any_region(qtbot):
    names = ["branch: a", "branch: stray"]
    trace = build_trace(
        path="stray", start_ns=np.array([0, 10]), dur_ns=np.array([5, 5]), lane=np.array([0, 0]),
        name_id=np.array([0, 1]), cat_id=np.zeros(2), names=names, cats=["user_annotation"], lanes=LANES[:1],
        metadata={"branchscope": {"branches": [{"name": "a", "region": "1", "region_name": "block"}]}},
    )  # fmt: skip
    legend = show(qtbot, BranchLegend(), 320, 200)
    legend.set_trace(trace)
    assert legend.item_of("a").parent() is legend.region_item("1")
    assert legend.item_of("stray").parent() is None
    assert [legend.tree.topLevelItem(i).text(0) for i in range(2)] == ["block · 1 branch", "stray"]


def test_the_legend_says_what_discovery_left_out_and_why_on_hover(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 240)
    legend.set_trace(_trace())
    assert legend.left_out.isHidden()  # nothing left out: no line
    info = {
        **INFO,
        "left_out": [
            {"name": "stem.bn: eq → _assert", "ops": 3, "kind": "assertion", "why": "an assertion: no work"},
            {"name": "blocks.0.bn: eq → _assert", "ops": 3, "kind": "assertion", "why": "an assertion: no work"},
            {"name": "downsample", "ops": 1, "kind": "small", "why": "under 1% of the largest branch's work"},
            {"name": 7, "kind": "small"},  # untrusted data: an entry without a name is skipped
        ],
    }
    trace = _trace()
    trace.metadata["branchscope"] = info  # before run_info is first read (a cached property)
    legend.set_trace(trace)
    assert not legend.left_out.isHidden()
    assert legend.left_out.text() == "Left out: 2 assertions, 1 branch too small beside its region's largest"
    tip = legend.left_out.toolTip().splitlines()
    assert tip[0] == "stem.bn: eq → _assert (3 ops): an assertion: no work" and len(tip) == 3
    legend.set_trace(None)
    assert legend.left_out.isHidden()


def test_each_region_says_what_its_branches_could_give(qtbot):
    # a (4 ms, of which region 1.1: a.x and a.y, 1.5 ms each) and b (4 ms); "never" has no time.
    branches = [BranchRecord(**b) for b in INFO["branches"]]
    pred = predict(branches, {"a": 4.0, "b": 4.0, "a.x": 1.5, "a.y": 1.5}, 9.0, source="test")
    assert pred is not None
    trace = build_trace(
        path="predicted", start_ns=np.zeros(0, dtype=np.int64), dur_ns=np.zeros(0, dtype=np.int64),
        lane=np.zeros(0, dtype=np.int64), name_id=np.zeros(0, dtype=np.int64), cat_id=np.zeros(0, dtype=np.int64),
        names=[], cats=[], lanes=LANES, metadata={"branchscope": {**INFO, "prediction": to_builtins(pred)}},
    )  # fmt: skip
    legend = show(qtbot, BranchLegend(), 400, 600)
    legend.set_trace(trace)
    blocks, nested = legend.region_item("1"), legend.region_item("1.1")
    assert blocks is not None and nested is not None
    # region 1 on 2 threads: a takes 1 + 1.5 = 2.5 ms beside b's 4: 8 / 4 = 2×; region 1.1: 3 / 1.5
    # the bound is a line under the region's title, across the row (the Total column stays narrow)
    assert blocks.text(0).endswith("\n≤ 2.00× on 2 threads") and nested.text(0).endswith("\n≤ 2.00× on 2 threads")
    assert blocks.isFirstColumnSpanned() and blocks.text(1) == ""
    assert "no contention, no overhead assumed" in blocks.toolTip(0)
    assert legend.prediction.isVisibleTo(legend)
    # the bounds in a line, so the branches keep the legend's height; the sentence on hover
    sentence = "The step " + prediction_text(pred)
    assert legend.prediction.toolTip() == sentence
    assert legend.prediction.text() == sentence.split(": ")[0] + " (hover for why)"
    assert legend.prediction.text() == "The step could be at most 1.80× on 2 threads, 1.80× on 4 (hover for why)"
    legend.set_trace(_trace())  # a run without a prediction
    assert not legend.prediction.isVisibleTo(legend)
    assert legend.region_item("1").text(1) == ""
