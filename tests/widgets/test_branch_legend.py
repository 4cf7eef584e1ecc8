"""The branch legend: colours as on the timeline, totals from the branch annotations, nesting."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets import colors
from branchscope.widgets.branch_legend import BranchLegend, legend_rows
from branchscope.widgets.timeline import TimelineView
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show

LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "PTThreadPool", "interop"),
    Lane(2, "cpu", 1, 12, "PTThreadPool", "interop"),
]
INFO = {
    "branches": [
        {"name": "b", "region": "1"},
        {"name": "a", "region": "1"},
        {"name": "a.x", "region": "1.1", "depth": 1, "parent": "a"},
        {"name": "a.y", "region": "1.1", "depth": 1, "parent": "a"},
        {"name": "never", "region": "2"},
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
    names = sorted({e[1] for e in EVENTS})
    return build_trace(
        path="nested", start_ns=np.array([e[2] for e in EVENTS]), dur_ns=np.array([e[3] for e in EVENTS]),
        lane=np.array([e[0] for e in EVENTS]), name_id=np.array([names.index(e[1]) for e in EVENTS]),
        cat_id=np.zeros(len(EVENTS)), names=names, cats=["user_annotation"], lanes=LANES,
        metadata={"branchscope": INFO},
    )  # fmt: skip


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
    assert len({r.color for r in rows}) == 5  # nested branches keep their own colours
    # each colour is the one the timeline paints that branch's events in
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_trace(trace)
    by_name = {r.name: colors.hex_to_rgb32(r.color) for r in rows}
    mm = int(np.flatnonzero(trace.name_id == trace.names.index("aten::mm"))[0])
    assert int(colors.PALETTE[view.painter.keys[mm]]) == by_name["a.y"]
    b = int(np.flatnonzero(trace.name_id == trace.names.index("branch: b"))[0])
    assert int(colors.PALETTE[view.painter.keys[b]]) == by_name["b"]


def test_the_widget_shows_swatch_name_and_ms_indented_and_emits_clicks(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 240)
    legend.set_trace(_trace())
    assert legend.has_data() and legend.topLevelItemCount() == 3  # a, b, never
    a, ax = legend.item_of("a"), legend.item_of("a.x")
    assert ax.parent() is a
    assert (a.text(1), ax.text(1), legend.item_of("never").text(1)) == ("4.00 ms", "1.00 ms", "did not run")
    # the nested row is drawn indented, its swatch the branch's colour
    assert legend.visualItemRect(ax).left() >= legend.visualItemRect(a).left() + legend.indentation()
    icon = ax.icon(0).pixmap(legend.iconSize()).toImage()
    centre = icon.pixelColor(icon.width() // 2, icon.height() // 2).name()
    assert centre == next(r.color for r in legend.rows if r.name == "a.x")
    with qtbot.waitSignal(legend.branchActivated) as sig:
        qtbot.mouseClick(
            legend.viewport(),
            Qt.MouseButton.LeftButton,
            pos=legend.visualItemRect(legend.item_of("b")).center(),
        )
    assert sig.args == ["b"]


def test_a_run_trace_lists_its_branches_and_a_trace_without_any_says_so(tmp_path, qtbot):
    legend = show(qtbot, BranchLegend(), 320, 200)
    trace = load_trace(write_small_trace(tmp_path / "t.json", "fork"))
    legend.set_trace(trace)
    # small_trace: two steps, each branch annotated for 800 µs a step
    assert [(r.name, r.total_ns) for r in legend.rows] == [("left", 1_600_000), ("right", 1_600_000)]
    assert legend.item_of("left").text(1) == "1.60 ms"
    bare = build_trace(
        path="bare", start_ns=np.array([0]), dur_ns=np.array([10]), lane=np.array([0]), name_id=np.array([0]),
        cat_id=np.array([0]), names=["aten::mm"], cats=["cpu_op"], lanes=LANES[:1],
    )  # fmt: skip
    legend.set_trace(bare)
    assert not legend.has_data()
    assert legend.topLevelItem(0).text(0) == "no branches in this trace"


def test_the_details_summary_lists_the_branches_in_the_legends_order_and_follows_the_palette(qtbot):
    from PySide6.QtWidgets import QApplication

    from branchscope.widgets.details_panel import DetailsPanel
    from branchscope.widgets.theme import LIGHT, dark_palette, theme

    details = show(qtbot, DetailsPanel(), 300, 300)
    trace = _trace()
    details.set_trace(trace)
    assert ("Branches", ", ".join(r.name for r in legend_rows(trace))) in details.rows
    assert ("Branches", "a, a.x, a.y, b, never") in details.rows
    assert LIGHT.muted.name() in details.body.text()
    base = QApplication.palette()
    QApplication.setPalette(dark_palette())
    try:
        dark_muted = theme().muted.name()
        assert dark_muted != LIGHT.muted.name()
        qtbot.waitUntil(lambda: dark_muted in details.body.text())
        details.show_event(trace, 0)
        qtbot.waitUntil(lambda: details.title.text() == "Event")
    finally:
        redrawn = []
        real = details.show_event
        details.show_event = lambda *a: redrawn.append(a[:2]) or real(*a)
        QApplication.setPalette(base)
    # the palette change redraws the event shown
    qtbot.waitUntil(lambda: bool(redrawn) and all(r == (trace, 0) for r in redrawn))
    assert details.title.text() == "Event" and ("Name", trace.event_name(0)) in details.rows


def test_the_size_hint_makes_room_for_the_rows(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 400)
    legend.set_trace(_trace())
    last = legend.visualItemRect(legend.item_of("never"))
    # every row fits in the hinted height (below the header, inside the frame)
    assert legend.header().height() + last.bottom() <= legend.sizeHint().height()
    assert legend.sizeHint().height() < 400
