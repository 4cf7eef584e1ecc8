"""The trace workspace: traces one above the other on one time axis, all or nothing, its layout,
and new panels as one line (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QWidget

from branchscope.profiling import load_trace
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.workspace import (
    EMPTY_HEIGHT,
    PANELS,
    PanelKind,
    ShownTrace,
    TraceWorkspace,
    row_sizes,
)
from tests.builders.runs import write_small_trace


def _small_trace(path: Path, mode: str):
    return load_trace(write_small_trace(path, mode))


@pytest.fixture
def traces(tmp_path):
    """A forked run and a longer sequential one of the same model."""
    fork = _small_trace(tmp_path / "fork.json", "fork")
    return fork, _small_trace(tmp_path / "sequential.json", "sequential")


@pytest.fixture
def workspace(qtbot):
    ws = TraceWorkspace()
    qtbot.addWidget(ws)
    ws.resize(1200, 1400)  # room for every lane of both small traces
    ws.show()
    qtbot.waitExposed(ws)
    return ws


def _span(trace) -> int:
    start, end = trace.span()
    return end - start


def test_two_traces_are_shown_one_above_the_other_on_one_axis(workspace, traces, qtbot):
    fork, seq = traces
    assert _span(seq) > _span(fork)
    workspace.show_traces([ShownTrace(fork, title="fork"), ShownTrace(seq, title="sequential")])
    top, bottom = workspace.rows
    assert workspace.traces == [fork, seq]
    for row, trace in ((top, fork), (bottom, seq)):
        assert [panel.trace for panel in row.panels] == [trace] * len(PANELS)
        assert all(panel.axis is workspace.axis for panel in row.panels)
        assert row.isVisible() and row.title.isVisible()
    assert (top.title.text(), bottom.title.text()) == ("fork", "sequential")
    assert bottom.geometry().top() >= top.geometry().bottom()  # one above the other
    assert top.height() > 300 and bottom.height() > 300
    # One scale: the axis spans the longer trace, each counted from its first event, all of it shown.
    assert workspace.axis.span_ns == _span(seq)
    assert (workspace.axis.lo, workspace.axis.hi) == (0.0, float(_span(seq)))
    lanes = [list(range(len(t.lanes))) for t in (fork, seq)]
    qtbot.waitUntil(lambda: [sorted(r.panel("timeline").painted_lanes) for r in workspace.rows] == lanes)
    # Zooming one row zooms both: they draw through the one axis.
    workspace.axis.zoom(0.5)
    assert workspace.panel("pool", 1).axis.hi - workspace.panel("pool", 1).axis.lo < _span(seq)


def test_showing_one_trace_again_drops_the_second_row(workspace, traces, qtbot):
    fork, seq = traces
    first_row = workspace.rows[0]
    workspace.show_traces([fork, seq])
    workspace.show_traces([seq])
    assert workspace.rows == [first_row] and workspace.traces == [seq]
    assert not first_row.title.isVisible()
    # Laid out for the whole height (not the half it had): as if it had been shown alone.
    alone = TraceWorkspace()
    qtbot.addWidget(alone)
    alone.resize(workspace.size())
    alone.show()
    alone.show_traces([seq])
    assert first_row.splitter.sizes() == alone.rows[0].splitter.sizes()
    assert workspace.axis.span_ns == _span(seq)


def test_a_panel_that_fails_while_showing_leaves_the_workspace_as_it_was(workspace, traces, monkeypatch):
    fork, seq = traces
    workspace.show_traces([fork])
    workspace.axis.set_view(1000.0, 5000.0)
    before = workspace.snapshot()
    real = MemoryView.set_trace

    def fail_on_sequential(self, trace, *args, **kwargs):
        if trace is not None and "sequential" in trace.path:
            raise RuntimeError("memory view broke")
        real(self, trace, *args, **kwargs)

    monkeypatch.setattr(MemoryView, "set_trace", fail_on_sequential)
    with pytest.raises(RuntimeError, match="memory view broke"):
        workspace.show_traces([fork, seq])
    assert len(workspace.rows) == 1 and workspace.traces == [fork]
    assert [panel.trace for panel in workspace.rows[0].panels] == [fork] * len(PANELS)
    assert (workspace.axis.lo, workspace.axis.hi) == (1000.0, 5000.0)
    assert workspace.snapshot() == before
    workspace.grab()  # and it still draws


def test_restore_goes_back_to_the_traces_axis_and_view_of_a_snapshot(workspace, traces):
    fork, seq = traces
    workspace.show_traces([fork])
    workspace.axis.set_view(1000.0, 5000.0)
    before = workspace.snapshot()
    workspace.show_traces([seq, fork])
    workspace.restore(before)  # as the window does when a view outside the workspace fails
    assert len(workspace.rows) == 1 and workspace.traces == [fork]
    assert workspace.axis.span_ns == _span(fork)
    assert (workspace.axis.lo, workspace.axis.hi) == (1000.0, 5000.0)
    assert workspace.snapshot() == before


def test_a_trace_a_panel_cannot_prepare_changes_nothing(workspace, traces, monkeypatch):
    import branchscope.widgets.timeline as timeline

    fork, seq = traces
    workspace.show_traces([fork])
    lod = workspace.panel("timeline").lod
    real = timeline._derive

    def fail_on_sequential(trace, *args):
        if "sequential" in trace.path:
            raise ValueError("cannot index it")
        return real(trace, *args)

    monkeypatch.setattr(timeline, "_derive", fail_on_sequential)
    with pytest.raises(ValueError, match="cannot index it"):
        workspace.show_traces([fork, seq])
    assert len(workspace.rows) == 1 and workspace.traces == [fork]
    assert workspace.panel("timeline").lod is lod


def test_an_event_clicked_in_a_row_says_which_row(workspace, traces, qtbot):
    fork, seq = traces
    workspace.show_traces([fork, seq])
    i = int(seq.find("aten::add")[0])
    with qtbot.waitSignal(workspace.eventSelected) as sig:
        workspace.panel("timeline", 1).select_event(i)
    assert sig.args == [1, i]


class Marks(QWidget):
    """The least a panel is (widgets/panel.py): it remembers what it was told."""

    def __init__(self, axis: TimeAxis):
        super().__init__()
        self.axis = axis
        self.trace = None
        self.origin_ns = None
        self.prepared: list = []

    def prepare(self, trace) -> None:
        self.prepared.append(trace)

    def set_trace(self, trace, origin_ns=None) -> None:
        self.trace, self.origin_ns = trace, origin_ns

    def has_data(self) -> bool:
        return self.trace is not None and bool(self.trace.memory)

    @property
    def no_data_text(self) -> str:
        return "no marks"


def test_a_new_panel_is_one_line_and_every_row_gets_one(qtbot, traces):
    fork, seq = traces
    kinds = [*PANELS, PanelKind("marks", Marks, lambda _p, _h: 50, empty=20, share=0.5)]
    ws = TraceWorkspace(kinds=kinds)
    qtbot.addWidget(ws)
    ws.show_traces([fork, seq])
    assert [ws.panel("marks", r).trace for r in (0, 1)] == [fork, seq]
    assert [ws.panel("marks", r).prepared for r in (0, 1)] == [[fork], [seq]]
    assert all(ws.panel("marks", r).axis is ws.axis for r in (0, 1))
    assert all(row.splitter.count() == len(kinds) for row in ws.rows)


def test_each_trace_is_shown_from_its_own_origin(qtbot, traces):
    fork, seq = traces
    ws = TraceWorkspace(kinds=[PanelKind("marks", Marks, lambda _p, _h: 50, main=True)])
    qtbot.addWidget(ws)
    start = fork.span()[0]
    ws.show_traces([ShownTrace(fork), ShownTrace(seq, origin_ns=start + 1000)])
    assert [ws.panel("marks", r).origin_ns for r in (0, 1)] == [start, start + 1000]
    # The axis holds both: the sequential run from 1 µs before its origin to its end.
    assert ws.axis.span_ns == max(_span(fork), _span(seq) - 1000) + 1000


def _expected_sizes(total, has_pool, has_memory, memory_series, content_height, pool_bands=2):
    """The row's layout: the timeline what its lanes need (at most what the charts' minimums
    leave: their wanted heights, or their compact ones, 110 and 60, where the lanes need more), a
    chart without data one line (EMPTY_HEIGHT), the charts with data the rest, 60:40."""
    pool_min = (
        (max(200, total // 4) if pool_bands == 2 else max(110, total // 8)) if has_pool else EMPTY_HEIGHT
    )
    mem_min = max(80, min(72 * max(1, memory_series) + 10, total // 3)) if has_memory else EMPTY_HEIGHT
    need = content_height + 40
    if (has_pool or has_memory) and need > total - mem_min - pool_min:  # charts squeezed first
        pool_min = min(pool_min, 110) if has_pool else pool_min
        mem_min = min(mem_min, 60) if has_memory else mem_min
    timeline = max(120, min(need, total - mem_min - pool_min))
    rest = total - timeline
    if has_pool and has_memory:
        pool = max(pool_min, int(rest * 0.6))
        return [timeline, pool, rest - pool]
    if has_pool:
        return [timeline, rest - mem_min, mem_min]
    if has_memory:
        return [timeline, pool_min, rest - pool_min]
    return [total - pool_min - mem_min, pool_min, mem_min]


@pytest.mark.parametrize("total", [400, 900, 1400])
@pytest.mark.parametrize("content_height", [0, 150, 600, 5000])
@pytest.mark.parametrize(("has_pool", "has_memory", "series", "pool_bands"), [
    (True, True, 1, 2), (True, True, 4, 2), (True, True, 1, 1), (True, False, 0, 2), (True, False, 0, 1),
    (False, True, 2, 2), (False, False, 0, 2)])  # fmt: skip
def test_row_layout_gives_the_timeline_its_lanes_and_empty_charts_one_line(
    total, content_height, has_pool, has_memory, series, pool_bands
):
    trace = SimpleNamespace(memory=[object()] * series)
    panels = [
        SimpleNamespace(trace=trace, full_height=content_height, has_data=lambda: True),
        SimpleNamespace(trace=trace, has_data=lambda: has_pool,
                        wanted_height=lambda h: max(200, h // 4) if pool_bands == 2 else max(110, h // 8)),
        SimpleNamespace(trace=trace, has_data=lambda: has_memory,
                        wanted_height=lambda: 72 * max(1, series) + 10),
    ]  # fmt: skip
    assert row_sizes(PANELS, panels, total) == _expected_sizes(
        total, has_pool, has_memory, series, content_height, pool_bands
    )


def test_charts_with_nothing_to_show_keep_one_line_of_room(workspace, tmp_path):
    bare = tmp_path / "bare.json"  # one thread, no pool, no CPU samples, no memory
    bare.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}')
    workspace.show_traces([load_trace(bare)])
    row = workspace.rows[0]
    sizes = row.splitter.sizes()
    assert sizes[0] > 600  # the timeline takes the room
    assert [row.panel("pool").height(), row.panel("memory").height()] == [
        max(p.minimumHeight(), k.empty) for p, k in zip(row.panels[1:], PANELS[1:])
    ]


def _rank(tmp_path, rank: int, step_us: int, peak: int) -> Path:
    import json

    events = [
        {"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "pid": 10 + rank, "tid": 1,
         "ts": n * 2000, "dur": step_us}
        for n in range(3)
    ] + [
        {"ph": "i", "name": "[memory]", "pid": 10 + rank, "tid": 1, "ts": 5 + k, "s": "t",
         "args": {"Device Type": 1, "Device Id": rank, "Bytes": b, "Total Allocated": t, "Addr": 64}}
        for k, (b, t) in enumerate(((peak, peak), (-peak, 0)))
    ]  # fmt: skip
    path = tmp_path / f"rank-{rank}.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 3}, "traceEvents": events}))
    return path


def test_several_ranks_get_a_summary_line_where_a_slow_or_heavy_rank_stands_out(workspace, tmp_path):
    from branchscope.profiling import merge_traces
    from branchscope.profiling.trace.merge import as_ranks

    ranks = [
        load_trace(_rank(tmp_path, r, s, m))
        for r, s, m in ((0, 1000, 8 << 20), (1, 1000, 2 << 20), (2, 1500, 2 << 20))
    ]
    workspace.show_traces([merge_traces(as_ranks(ranks))])
    bar = workspace.rank_bar
    # One trace of several ranks: the rank overview (tests/widgets/test_rank_overview.py) in the line's place.
    assert workspace.rank_overview.isVisible() and not bar.isVisible()
    assert [r.rank for r in bar.ranks] == [0, 1, 2]
    assert [r.step_ns for r in bar.ranks] == [1_000_000, 1_000_000, 1_500_000]
    assert bar.standouts == {(2, "step"), (0, "memory")}  # the slow rank, the heavy rank
    assert "rank 2" in bar.text() and "#c0392b" in bar.text()
    workspace.show_traces([ranks[0]])  # one rank: no line
    assert not bar.isVisible() and bar.ranks == [] and not workspace.rank_overview.isVisible()


def test_balanced_ranks_have_nothing_that_stands_out(workspace, tmp_path):
    from branchscope.profiling import merge_traces
    from branchscope.profiling.trace.merge import as_ranks

    ranks = [load_trace(_rank(tmp_path, r, 1000 + 10 * r, 4 << 20)) for r in range(3)]
    workspace.show_traces([merge_traces(as_ranks(ranks))])
    assert workspace.rank_overview.isVisible() and workspace.rank_bar.standouts == set()


def test_rows_compared_share_the_height_by_what_their_lanes_need():
    """Issue 22, item 2: a fork run's pool lanes were scrolled out of sight in a row as short as the
    sequential run's; rows now get heights by need, and a chart is squeezed before a lane is."""
    from branchscope.widgets.workspace import row_need, row_shares

    assert row_shares([200, 400], 1000) == [400, 600]  # each its need, the rest shared evenly
    assert row_shares([300, 900], 600) == [150, 450]  # short of room: in proportion to need
    trace = SimpleNamespace(memory=[object()])

    def panels(lanes_px: int, folded_px: int) -> list:
        return [
            SimpleNamespace(trace=trace, full_height=lanes_px, folded_height=folded_px, has_data=lambda: True),
            SimpleNamespace(trace=trace, has_data=lambda: True, wanted_height=lambda h: max(200, h // 4),
                            minimumHeight=lambda: 170),
            SimpleNamespace(trace=trace, has_data=lambda: True, wanted_height=lambda: 82, minimumHeight=lambda: 80),
        ]  # fmt: skip

    seq, fork = panels(150, 150), panels(380, 260)
    # a row asks for its lanes folded to their least rows (every lane in sight), its charts' least
    assert row_need(PANELS, seq, 450) == 190 + 170 + 80 and row_need(PANELS, fork, 450) == 300 + 170 + 80
    # in a short row the timeline takes its lanes' height before the charts their full one
    assert row_sizes(PANELS, fork, 680) == [420, 170, 90]
