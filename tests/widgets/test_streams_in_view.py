"""GPU streams stay in view: the public traces in a 1600×1000 window, CPU groups that fold, ranks."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, Qt

from branchscope.app.pages.run_page import RunPage
from branchscope.profiling import load_trace, merge_traces
from branchscope.profiling.trace.merge import as_ranks
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline import RULER_H, TimelineView
from tests.builders.public_traces import FACTS
from tests.gui_helpers import show

#: Every public trace, the two-rank job as its folder (its ranks merged).
PUBLIC = [name for name in FACTS if not name.startswith("hta_two_ranks/")] + ["hta_two_ranks"]


def _inside(view: TimelineView, lane: int) -> bool:
    r = view.lane_rect(lane)
    return r is not None and r.top() >= RULER_H and r.bottom() < view.height()


@pytest.mark.parametrize("name", PUBLIC)
def test_every_gpu_stream_is_in_view_in_a_1600x1000_window(name, shared_traces, window, qtbot):
    path = shared_traces / name
    paths = sorted(str(p) for p in path.iterdir()) if path.is_dir() else [str(path)]
    window.resize(1600, 1000)
    assert window.open_trace_files(paths) == len(paths)
    timeline = window.page(RunPage).workspace.panel("timeline")
    qtbot.waitUntil(lambda: timeline.trace is not None)
    trace = timeline.trace
    gpu = [ln.index for ln in trace.lanes if ln.kind == "gpu"]
    assert len(gpu) == {"hta_two_ranks": 10, "hta_gpu_6streams_rank0.json.gz": 6}.get(name, len(gpu))
    timeline.grab()
    qtbot.waitUntil(lambda: all(_inside(timeline, lane) for lane in gpu))
    # each stream is a lane of its own (not folded away), drawn in the last frame
    assert {lr.lane for lr in timeline.lane_rows} >= set(gpu)
    assert set(gpu) <= set(timeline.painted_lanes)
    # and the timeline itself lies inside the window
    top_left = timeline.mapTo(window, QPoint(0, 0))
    assert top_left.y() >= 0 and top_left.y() + timeline.height() <= window.height()


def test_empty_charts_take_one_line_each(shared_traces, window, qtbot):
    window.resize(1600, 1000)
    window.open_trace_files([str(shared_traces / "hta_gpu_6streams_rank0.json.gz")])
    row = window.page(RunPage).workspace.rows[0]
    qtbot.waitUntil(lambda: row.trace is not None)
    pool, memory = row.panel("pool"), row.panel("memory")
    assert not pool.has_data() and not memory.has_data()
    assert pool.height() <= 30 and memory.height() <= 30
    assert row.panel("timeline").height() > 800


@pytest.fixture
def two_ranks(shared_traces):
    folder = shared_traces / "hta_two_ranks"
    return merge_traces(as_ranks([load_trace(folder / f"rank-{r}.json.gz") for r in (0, 1)]))


def test_ranks_title_their_groups_and_lanes_do_not_repeat_the_rank(two_ranks, qtbot):
    view = TimelineView()
    view.set_trace(two_ranks)
    titles = [g.title for g in view.group_headers]
    assert titles == [
        "rank 0 · main thread", "rank 0 · other threads", "rank 0 · GPU 0 · 5 streams",
        "rank 1 · main thread", "rank 1 · other threads", "rank 1 · GPU 1 · 5 streams",
    ]  # fmt: skip
    assert all(not lr.label.startswith("rank") for lr in view.lane_rows)
    # every lane sits under its own rank's titles
    for lr in view.lane_rows:
        header = max((g for g in view.group_headers if g.top <= lr.top), key=lambda g: g.top)
        assert header.title.startswith(f"rank {two_ranks.lanes[lr.lane].rank} ")


def test_a_host_the_trace_names_is_in_its_ranks_titles(shared_traces, tmp_path, qtbot):
    import gzip

    traces = []
    for r in (0, 1):
        doc = json.loads(
            gzip.decompress((shared_traces / "hta_two_ranks" / f"rank-{r}.json.gz").read_bytes())
        )
        doc["distributedInfo"]["hostname"] = f"node{r + 7}"
        (tmp_path / f"r{r}.json").write_text(json.dumps(doc))
        traces.append(load_trace(tmp_path / f"r{r}.json"))
    view = TimelineView()
    view.set_trace(merge_traces(as_ranks(traces)))
    assert view.group_headers[0].title == "rank 0 (node7) · main thread"
    assert view.group_headers[-1].title == "rank 1 (node8) · GPU 1 · 5 streams"


def test_cpu_groups_fold_when_space_is_short_and_a_click_opens_or_folds_them(two_ranks, qtbot):
    view = TimelineView()
    view.set_trace(two_ranks)
    full = view.content_height
    show(qtbot, view, 1400, 600)
    gpu = [ln.index for ln in two_ranks.lanes if ln.kind == "gpu"]
    qtbot.waitUntil(lambda: all(_inside(view, lane) for lane in gpu))
    folded = [g for g in view.group_headers if g.collapsed]
    assert folded and all(g.collapsible for g in folded)
    assert view.content_height <= view.height() - RULER_H < full
    # a folded group is one summary lane, drawn from its threads' top rows
    view.grab()
    for g in folded:
        assert set(g.lanes) <= set(view.painted_lanes)
        assert g.height == view.summary_height
    # a click on its title opens it (the user's choice holds, even if the streams then scroll)
    g = folded[0]
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(20, RULER_H + g.top - view.scroll_y + 4))
    opened = next(h for h in view.group_headers if h.key == g.key)
    assert not opened.collapsed
    assert {lr.lane for lr in view.lane_rows} >= set(g.lanes)
    # and a second click folds it again
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(20, RULER_H + opened.top - view.scroll_y + 4))
    assert next(h for h in view.group_headers if h.key == g.key).collapsed
    # a click on a summary lane in the plot opens its group too
    g = next(h for h in view.group_headers if h.collapsed)
    view.on_click(QPoint(GUTTER + 50, RULER_H + g.top - view.scroll_y + g.height // 2))
    assert not next(h for h in view.group_headers if h.key == g.key).collapsed


def test_with_room_to_spare_nothing_folds(two_ranks, qtbot):
    view = TimelineView()
    view.set_trace(two_ranks)
    show(qtbot, view, 1400, view.full_height + RULER_H + 10)
    qtbot.waitUntil(lambda: view.lane_layout.avail == view.height() - RULER_H)
    assert not any(g.collapsed for g in view.group_headers)
    assert view.content_height == view.full_height


def test_hovering_a_summary_lane_finds_the_event_under_the_cursor(two_ranks, qtbot):
    view = TimelineView()
    view.set_trace(two_ranks)
    show(qtbot, view, 1400, 500)
    g = next(h for h in view.group_headers if h.collapsed and len(h.lanes) == 1)
    lane = g.lanes[0]
    sl = two_ranks.lane_slice(lane)
    i = sl.start + int((two_ranks.dur_ns[sl]).argmax())  # the lane's longest top event
    rect = view.event_rect(i)
    assert (
        rect is not None
        and g.top - view.scroll_y + RULER_H <= rect.top() < g.top - view.scroll_y + RULER_H + g.height
    )
    hit = view.event_at(rect.center())
    assert hit >= 0 and int(two_ranks.lane[hit]) == lane and int(two_ranks.depth[hit]) == 0


def test_the_summary_names_every_rank_file_and_the_ranks(two_ranks):
    from branchscope.widgets.details_panel import trace_summary_rows

    rows = dict(trace_summary_rows(two_ranks))
    assert rows["File"] == "rank-0.json.gz + rank-1.json.gz" and rows["Ranks"] == "0, 1"
