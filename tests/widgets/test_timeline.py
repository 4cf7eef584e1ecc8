"""The timeline, pool-usage and memory views on real and small traces (pytest-qt, offscreen)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.widgets import colors
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.pool_usage import PoolUsageView
from branchscope.widgets.time_axis import GUTTER, TimeAxis
from branchscope.widgets.timeline import RULER_H, TimelineView
from tests.builders.public_traces import FACTS
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show

#: Every public trace, one rank of the two-rank job.
PUBLIC = [name for name in FACTS if name != "hta_two_ranks/rank-1.json.gz"]


@pytest.fixture
def small_trace(tmp_path):
    return load_trace(write_small_trace(tmp_path / "small.json.gz", "fork"))


def _show(qtbot, view, w=1200, h=500):
    return show(qtbot, view, w, h)


def _render(view) -> np.ndarray:
    img = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    ptr = img.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint32, count=img.width() * img.height()).reshape(
        img.height(), img.width()
    )
    return arr.copy() | np.uint32(0xFF000000)


@pytest.mark.parametrize("name", PUBLIC)
def test_lanes_drawn_equal_the_trace_lanes_and_inspect_lanes(name, shared_traces, qtbot, capsys):
    from branchscope.app.cli import main as cli_main

    path = shared_traces / name
    trace = load_trace(path)
    view = TimelineView()
    view.set_trace(trace)
    _show(qtbot, view, 1400, view.content_height + RULER_H + 20)
    pixels = _render(view)
    # every lane of the trace was painted, once, and nothing else
    assert sorted(view.painted_lanes) == list(range(len(trace.lanes)))
    drawn = sorted(
        (trace.lanes[i].kind, trace.lanes[i].pid, trace.lanes[i].tid, trace.lane_event_count(i))
        for i in view.painted_lanes
    )
    assert cli_main(["inspect", str(path), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert drawn == sorted((ln["kind"], ln["pid"], ln["tid"], ln["events"]) for ln in inspected["lanes"])
    # and each lane with events shows event colours inside its rectangle
    event_colours = set(colors.PALETTE.tolist())
    for lane in range(len(trace.lanes)):
        r = view.lane_rect(lane)
        block = pixels[r.top() : r.bottom(), GUTTER : GUTTER + view.plot_width()]
        assert np.isin(block, list(event_colours)).any(), trace.lanes[lane]


def test_lanes_are_grouped_main_pool_then_gpu_by_device(shared_traces, qtbot):
    trace = load_trace(shared_traces / "hta_ns_resolution_fwdbwd.pt.trace.json.gz")
    view = TimelineView()
    view.set_trace(trace)
    roles = [trace.lanes[lr.lane].role for lr in view.lane_rows]
    assert roles == ["main", "autograd", "other", "stream"]
    assert [g.title for g in view.group_headers] == ["main thread", "autograd", "other threads", "GPU 0"]


def test_hover_shows_name_lane_start_duration_shapes_and_branch(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    i = int(
        next(
            k
            for k in range(len(small_trace))
            if small_trace.event_name(k) == "aten::mm"
            and small_trace.lanes[small_trace.lane[k]].role == "interop"
        )
    )
    view.zoom_to_event(i)
    r = view.event_rect(i)
    assert r is not None and r.width() > 20
    qtbot.mouseMove(view, QPoint(1, 1))  # the cursor may rest where an earlier test left it: no move there
    with qtbot.waitSignal(view.eventHovered, timeout=20_000) as sig:
        qtbot.mouseMove(view, r.center())
    assert sig.args == [i]
    text = view.hover_text
    assert "Name: aten::mm" in text
    assert "PTThreadPool" in text and "inter-op pool" in text
    assert "Duration: 700 µs" in text
    assert "Shapes: 64×128, 128×" in text
    branch = small_trace.event_name(
        int(
            next(
                k
                for k in range(len(small_trace))
                if small_trace.event_name(k).startswith("branch: ")
                and small_trace.lane[k] == small_trace.lane[i]
            )
        )
    )
    assert f"Branch: {branch.removeprefix('branch: ')}" in text
    assert "Start:" in text


def test_click_selects_and_emits_the_event_and_empty_space_clears(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    i = int(np.argmax(small_trace.dur_ns))
    r = view.event_rect(i)
    with qtbot.waitSignal(view.eventSelected) as sig:
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(r.left() + 5, r.center().y()))
    assert sig.args == [i]
    with qtbot.waitSignal(view.eventSelected) as sig:
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(GUTTER + 5, view.height() - 3))
    assert sig.args == [-1]


def test_double_click_zooms_to_the_event(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    i = int(next(k for k in range(len(small_trace)) if small_trace.event_name(k) == "aten::add"))
    r = view.event_rect(i)
    qtbot.mouseDClick(
        view, Qt.MouseButton.LeftButton, pos=QPoint(r.left() + max(1, r.width() // 2), r.center().y())
    )
    start, end = view.time_range()
    assert start <= small_trace.start_ns[i] and small_trace.end_ns[i] <= end
    assert end - start < 2 * small_trace.dur_ns[i]
    assert view.selected == i


def test_wheel_zooms_at_the_cursor_and_keys_zoom_and_pan(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    x = GUTTER + view.plot_width() // 3
    t_before = view.t_of(x)
    width_before = view.axis.hi - view.axis.lo
    ev = QWheelEvent(
        QPointF(x, 100),
        QPointF(view.mapToGlobal(QPoint(x, 100))),
        QPoint(0, 0),
        QPoint(0, 120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(view, ev)
    assert view.axis.hi - view.axis.lo < width_before * 0.9
    assert abs(view.t_of(x) - t_before) < view.ns_per_px()
    w = view.axis.hi - view.axis.lo
    qtbot.keyClick(view, Qt.Key.Key_W)
    assert view.axis.hi - view.axis.lo < w
    w = view.axis.hi - view.axis.lo
    lo = view.axis.lo
    qtbot.keyClick(view, Qt.Key.Key_D)
    assert view.axis.lo > lo
    qtbot.keyClick(view, Qt.Key.Key_A)
    assert view.axis.lo == pytest.approx(lo)
    qtbot.keyClick(view, Qt.Key.Key_S)
    assert view.axis.hi - view.axis.lo > w
    # drag pans: moving the mouse right shows earlier times
    lo = view.axis.lo
    y = view.height() - 5
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(x, y))
    qtbot.mouseMove(view, QPoint(x + 100, y))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(x + 100, y))
    assert view.axis.lo < lo


def test_ctrl_f_finds_events_by_name_and_highlights_them(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    qtbot.keyClick(view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert view._find_bar.isVisible()
    highlight = int(colors.PALETTE[colors.HIGHLIGHT_KEY])
    assert not (_render(view) == highlight).any()
    with qtbot.waitSignal(view.findChanged) as sig:
        qtbot.keyClicks(view._find_bar.edit, "MM")
        qtbot.keyClick(view._find_bar.edit, Qt.Key.Key_Return)
    expected = small_trace.find("mm")
    assert sig.args == [expected.size] and expected.size == 4
    assert view.selected in expected.tolist()
    assert (_render(view) == highlight).any()
    qtbot.keyClick(view._find_bar.edit, Qt.Key.Key_Escape)
    assert not view._find_bar.isVisible()
    assert not (_render(view) == highlight).any()


def test_find_highlights_while_typing(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    view.open_find()
    with qtbot.waitSignal(view.findChanged) as sig:
        qtbot.keyClicks(view._find_bar.edit, "mm")  # no Enter
    assert sig.args == [small_trace.find("mm").size]
    assert view.selected == -1  # typing highlights; only Enter jumps to a match


def test_set_time_range_uses_the_trace_clock(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    start, end = small_trace.span()
    view.set_time_range(start + 1000, start + 501_000)
    assert view.time_range() == (start + 1000, start + 501_000)
    assert view.x_of(1000) == pytest.approx(GUTTER)


def test_pool_usage_shows_busy_pool_threads_and_oversubscription(small_trace, qtbot):
    axis = TimeAxis()
    view = _show(qtbot, PoolUsageView(axis=axis), 1200, 260)
    view.set_trace(small_trace)
    assert view.occupancy.capacity == 2
    assert view.max_busy_pool_threads == 2
    # the OpenMP worker is an intra-op thread where the run lists it (`intra_tids`), else "other"
    omp = "intra" if small_trace.run_info.intra_tids else "other"
    assert len(view.threads) == 4 and {th.role for th in view.threads} == {"main", "interop", omp}
    # inter-op 2 busy x intra-op 1 on 2 cores: not oversubscribed
    assert not view.oversubscribed
    t_fork = (
        float(small_trace.start_ns[small_trace.find("branch: left")[0]] - small_trace.span()[0]) + 300_000
    )
    text = view.describe_at(t_fork)
    assert "inter-op pool: 2 of 2 threads busy" in text
    view.intra = 2
    assert view.oversubscribed


def test_memory_view_has_one_band_per_device_and_marks_the_peak(shared_traces, qtbot):
    trace = load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz")
    view = _show(qtbot, MemoryView(), 1200, 200)
    view.set_trace(trace)
    assert [m.device for m in view.series] == ["cpu", "cuda:1"]
    assert len(view.bands()) == 2
    peak = next(m for m in view.series if m.device == "cuda:1")
    assert peak.peak_bytes == 6_629_508_096
    assert "cuda:1: " in view.describe_at(float(peak.peak_ts_ns - view.origin_ns))
    assert "6.17 GiB" in view.describe_at(float(peak.peak_ts_ns - view.origin_ns))


def test_views_share_one_time_axis(small_trace, qtbot):
    axis = TimeAxis()
    tl, pool, mem = TimelineView(axis=axis), PoolUsageView(axis=axis), MemoryView(axis=axis)
    for v in (tl, pool, mem):
        _show(qtbot, v, 1000, 200)
        v.set_trace(small_trace)
    tl.set_time_range(small_trace.span()[0] + 100_000, small_trace.span()[0] + 900_000)
    assert pool.axis.lo == tl.axis.lo and mem.axis.hi == tl.axis.hi
    for t in (200_000.0, 555_555.0):
        assert pool.x_of(t) == tl.x_of(t) == mem.x_of(t)
    qtbot.keyClick(pool, Qt.Key.Key_W)  # navigating any view moves all
    assert tl.axis.hi - tl.axis.lo < 800_000


def test_showing_a_trace_again_reuses_its_index(qtbot, monkeypatch):
    import branchscope.widgets.timeline as tl
    from branchscope.profiling.trace.model import Lane, build_trace

    def ops(path: str, n: int):  # n events "op" on one thread
        zeros = np.zeros(n)
        start, dur = np.arange(n) * 10, np.full(n, 5)
        lanes = [Lane(0, "cpu", 1, 1, "main", "main")]
        return build_trace(path=path, start_ns=start, dur_ns=dur, lane=zeros, name_id=zeros, cat_id=zeros,
                           names=["op"], cats=["cpu_op"], lanes=lanes)  # fmt: skip

    trace, other = ops("t", 100), ops("u", 10)
    builds = []
    real = tl.TimelineLod
    monkeypatch.setattr(tl, "TimelineLod", lambda t: builds.append(t.path) or real(t))
    view = tl.TimelineView()
    qtbot.addWidget(view)
    view.set_trace(trace)
    view.set_trace(other)
    view.set_trace(trace)
    assert builds == ["t", "u"]
    assert view.lod is not None and view.trace is trace


def _lane_trace(path: str, n: int):
    from branchscope.profiling.trace.model import Lane, build_trace

    return build_trace(
        path=path, start_ns=np.arange(n) * 10, dur_ns=np.full(n, 5), lane=np.zeros(n),
        name_id=np.zeros(n), cat_id=np.zeros(n), names=["op"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip


def test_a_trace_the_views_no_longer_show_is_freed_with_what_they_derived(qtbot):
    import gc
    import weakref

    view, pool = TimelineView(), PoolUsageView()
    qtbot.addWidget(view)
    qtbot.addWidget(pool)
    trace = _lane_trace("t", 50)
    ref = weakref.ref(trace)
    for v in (view, pool):
        v.set_trace(trace)
        v.set_trace(_lane_trace("u", 5))
    del trace
    gc.collect()
    assert ref() is None  # the cache of derived data must not keep the window's evicted traces


def test_pool_usage_derives_a_trace_once(small_trace, qtbot, monkeypatch):
    import branchscope.widgets.pool_usage as pu

    builds = []
    real = pu.interop_occupancy
    monkeypatch.setattr(pu, "interop_occupancy", lambda t: builds.append(t.path) or real(t))
    other = _lane_trace("other", 5)
    pool = PoolUsageView()
    qtbot.addWidget(pool)
    pool.set_trace(small_trace)
    first = (pool.threads, pool.cpu_ymax, pool.occupancy)
    pool.set_trace(other)
    pool.set_trace(small_trace)
    assert builds == [small_trace.path, "other"]
    assert (pool.threads, pool.cpu_ymax, pool.occupancy) == first and pool.threads


def test_hover_between_children_of_a_long_parent_in_a_folded_row_finds_the_parent(qtbot):
    """Depths past the row cap share the last row: a parent there can have thousands of children
    between its start and the cursor, and between two of them only the parent is under it."""
    from branchscope.profiling.trace.model import Lane, build_trace
    from branchscope.widgets.lod import DEFAULT_ROW_CAP

    span, n_children, pitch, width = 1_000_000_000, 6000, 150_000, 100_000
    deep = DEFAULT_ROW_CAP - 1  # the parent's depth: the last row, where deeper events fold
    starts = [k for k in range(deep)] + [100] + [1000 + i * pitch for i in range(n_children)]
    durs = [span - 2 * k for k in range(deep)] + [span - 200] + [width] * n_children
    names = [0] * deep + [1] + [2] * n_children
    trace = build_trace(
        path="deep", start_ns=np.array(starts), dur_ns=np.array(durs), lane=np.zeros(len(starts)),
        name_id=np.array(names), cat_id=np.zeros(len(starts)), names=["outer", "step 1", "aten::op"],
        cats=["cpu_op"], lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip
    parent = int(np.flatnonzero(trace.name_id == 1)[0])
    assert int(trace.depth[parent]) == deep and int(trace.depth.max()) == deep + 1
    view = _show(qtbot, TimelineView(), 1200, 500)
    view.set_trace(trace)
    y = view.event_rect(parent).center().y()
    child = 1000 + 5000 * pitch  # the 5001st child's start
    for lo, hi in [(child - 500_000, child + 500_000), (0, span)]:  # zoomed in, and all of it
        view.set_time_range(lo, hi)
        gap = view.x_of(child + width + (pitch - width) / 2)  # between two children
        assert view.event_at(QPoint(int(gap), y)) == parent, (lo, hi)
    view.set_time_range(child - 500_000, child + 500_000)
    hit = view.event_at(QPoint(int(view.x_of(child + width / 2)), y))
    assert trace.event_name(hit) == "aten::op" and int(trace.start_ns[hit]) == child  # the deepest
    top = view.event_rect(int(np.flatnonzero(trace.depth == 0)[0])).center().y()
    assert trace.event_name(view.event_at(QPoint(int(view.x_of(child)), top))) == "outer"


def _jittery_cpu_trace(path: Path) -> Path:
    """Two sampled threads on 2 cores for 60 ms, one sample a millisecond: thread 1 at 100%;
    thread 2 alternating 0% / 200% (tick-quantised sampling) for 30 ms, then a steady 100%."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "work", "pid": 1, "tid": t, "ts": 0, "dur": 60_000}
        for t in (1, 2)
    ]
    for k in range(1, 61):
        for tid in (1, 2):
            pct = 100.0 if tid == 1 or k > 30 else (200.0 if k % 2 else 0.0)
            ev.append({"ph": "C", "cat": "cpu_sample", "name": f"thread {tid} (python)", "pid": 1,
                       "tid": tid, "ts": k * 1000, "args": {"cpu_pct": pct}})  # fmt: skip
    info = {"mode": "fork", "interop": 2, "intra": 1, "cores": 2, "main_tid": 1, "interop_tids": [2]}
    path.write_text(json.dumps({"traceEvents": ev, "branchscope": info}))
    return path


def test_cpu_per_thread_is_smoothed_over_samples_without_hiding_saturation(tmp_path, qtbot):
    from branchscope.widgets.series import column_mean_step

    trace = load_trace(_jittery_cpu_trace(tmp_path / "cpu.json"))
    pool = _show(qtbot, PoolUsageView(), 1200, 300)
    pool.set_trace(trace)
    assert len(pool.threads) == 2 and pool.cores == 2
    pool.axis.set_view(0.0, 60e6)  # about 60 µs a pixel: single samples span many columns
    edges = pool.axis.lo + np.arange(pool.plot_width() + 1) * pool.ns_per_px()
    mid = (edges[:-1] + edges[1:]) / 2
    jitter, steady = (mid > 5e6) & (mid < 25e6), (mid > 35e6) & (mid < 55e6)
    raw = sum(column_mean_step(th.t, th.v, edges, th.cum) for th in pool.threads)
    assert raw[jitter].max() >= 2.9  # unsmoothed, the stack pokes a core above the core line
    drawn = sum(pool.cpu_columns(edges))
    assert drawn[jitter].max() <= 2.0 + 1e-6 and drawn[jitter].min() >= 2.0 - 1e-6
    assert np.allclose(drawn[steady], 2.0)  # the steady saturation keeps its height
    assert pool.cpu_ymax <= 2.0 + 1e-6


# ---- range selection, branch colours, palette and font ------------------------------------------


def test_shift_drag_selects_a_time_range_in_the_trace_clock_and_esc_clears_it(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    lo_before = view.axis.lo
    y = view.height() - 20
    x0, x1 = GUTTER + 200, GUTTER + 500
    with qtbot.waitSignal(view.rangeSelected) as sig:
        qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, QPoint(x1, y))
        qtbot.mouseMove(view, QPoint(x0 + 60, y))
        qtbot.mouseMove(view, QPoint(x0, y))
        qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, QPoint(x0, y))
    start, end = sig.args
    assert view.axis.lo == lo_before  # a shift+drag selects; it does not pan
    # the instants under the two pixels, on the trace's own clock (first event + axis time)
    first = small_trace.span()[0]
    assert start == first + round(view.t_of(x0)) and end == first + round(view.t_of(x1))
    assert view.selected_range() == (start, end)
    # shaded: the lanes under the range are tinted, beside it they are not
    pixels = _render(view)
    r = view.range_rect()
    assert abs(r.left() - x0) <= 1 and abs(r.right() - x1) <= 1
    row = view.height() - 3
    inside, outside = pixels[row, (x0 + x1) // 2], pixels[row, x1 + 50]
    assert inside != outside
    assert outside == int(view.look.lane_bg[0]) or outside == int(view.look.lane_bg[1])
    with qtbot.waitSignal(view.rangeCleared):
        qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert view.selected_range() is None and view.range_rect() is None
    assert _render(view)[row, (x0 + x1) // 2] == outside


def test_a_plain_drag_still_pans_and_selects_no_range(small_trace, qtbot):
    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    qtbot.keyClick(view, Qt.Key.Key_W)
    lo, y, x = view.axis.lo, view.height() - 5, GUTTER + 300
    selected = []
    view.rangeSelected.connect(lambda a, b: selected.append((a, b)))
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(x, y))
    qtbot.mouseMove(view, QPoint(x + 100, y))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(x + 100, y))
    assert view.axis.lo < lo and selected == [] and view.selected_range() is None


def test_select_range_takes_trace_clock_times_that_are_too_big_for_an_int(small_trace, qtbot):
    from branchscope.profiling.trace.model import Lane, build_trace

    epoch = 1_700_000_000_000_000_000  # ns since 1970: beyond 32 bits
    trace = build_trace(
        path="epoch", start_ns=epoch + np.arange(10) * 1000, dur_ns=np.full(10, 500), lane=np.zeros(10),
        name_id=np.zeros(10), cat_id=np.zeros(10), names=["op"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )  # fmt: skip
    view = _show(qtbot, TimelineView())
    view.set_trace(trace)
    with qtbot.waitSignal(view.rangeSelected) as sig:
        view.select_range(epoch + 2500, epoch + 1200)
    assert sig.args == [epoch + 1200, epoch + 2500]
    assert view.selected_range() == (epoch + 1200, epoch + 2500)
    with qtbot.waitSignal(view.rangeCleared):
        view.set_trace(small_trace)  # another trace: the range meant the old one's clock
    assert view.selected_range() is None


def _branch_trace(order: list[str], info: bool):
    """Branches on pool lanes, their annotations (and one op inside each) in the given time order;
    "left.inner" nested inside "left" on the same lane."""
    from branchscope.profiling.trace.model import Lane, build_trace

    lanes = [Lane(0, "cpu", 1, 1, "main", "main"), Lane(1, "cpu", 1, 11, "pool", "interop"),
             Lane(2, "cpu", 1, 12, "pool", "interop")]  # fmt: skip
    lane_of = {"left": 1, "right": 2, "left.inner": 1, "solo": 2}
    events, names = [], []

    def add(lane, name, start, dur):
        if name not in names:
            names.append(name)
        events.append((lane, names.index(name), start, dur))

    for k, b in enumerate(order):
        t = k * 10_000
        dur = 2_000 if b == "left.inner" else 8_000
        if b == "left.inner":
            t = order.index("left") * 10_000 + 3_000
        add(lane_of[b], f"branch: {b}", t, dur)
        add(lane_of[b], f"op of {b}", t + 100, 1_000)
    meta = None
    if info:
        meta = {"branchscope": {"branches": [
            {"name": "left", "region": "1"}, {"name": "right", "region": "1"},
            {"name": "left.inner", "region": "1.1", "depth": 1, "parent": "left"},
            {"name": "solo", "region": "2"},
        ]}}  # fmt: skip
    return build_trace(
        path="branches", start_ns=np.array([e[2] for e in events]), dur_ns=np.array([e[3] for e in events]),
        lane=np.array([e[0] for e in events]), name_id=np.array([e[1] for e in events]),
        cat_id=np.zeros(len(events)), names=names, cats=["cpu_op"], lanes=lanes, metadata=meta,
    )  # fmt: skip


def _colour_of_branch_ops(qtbot, trace) -> dict[str, int]:
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_trace(trace)
    out = {}
    for i in range(len(trace)):
        name = trace.event_name(i)
        if name.startswith("op of "):
            out[name.removeprefix("op of ")] = int(colors.PALETTE[view.painter.keys[i]])
    return out


@pytest.mark.parametrize("info", [True, False])
def test_a_branch_has_the_same_colour_whatever_order_its_events_come_in(qtbot, info):
    first = _colour_of_branch_ops(qtbot, _branch_trace(["left", "right", "left.inner", "solo"], info))
    again = _colour_of_branch_ops(qtbot, _branch_trace(["solo", "right", "left", "left.inner"], info))
    assert first == again
    # nested "left.inner" keeps a colour of its own; "solo", alone in region 2, takes the palette's first
    assert len({first[b] for b in ("left", "right", "left.inner")}) == 3
    assert (first["solo"] == first["left"]) is info
    assert set(first.values()) <= {colors.hex_to_rgb32(h) for h in colors.BRANCH_HEX}
    trace = _branch_trace(["right", "left"], info)
    names = ["right", "left", "left.inner", "solo"] if info else ["right", "left"]
    slots = colors.branch_slots(trace, names)
    # the place within the region, by name (a nested region's after its region's); without run info, by name
    assert slots.tolist() == ([1, 0, 2, 0] if info else [1, 0])


def test_dark_palette_darkens_the_lanes_and_lightens_the_labels(small_trace, qtbot):
    from branchscope.widgets.theme import dark_palette

    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    light = _render(view)
    base = QApplication.palette()
    QApplication.setPalette(dark_palette())
    try:
        qtbot.waitUntil(lambda: view.look.text.lightness() > 128)
        dark = _render(view)

        def lightness(px):
            return ((px >> 16) & 0xFF).astype(float) * 0.3 + ((px >> 8) & 0xFF) * 0.59 + (px & 0xFF) * 0.11

        lanes = view.lane_rect(view.lane_rows[-1].lane)
        empty = (view.height() - 2, GUTTER + view.plot_width() - 30)  # below the events, right of them
        assert lightness(light[empty]) > 200 and lightness(dark[empty]) < 80
        # the gutter: dark background, and its label text (the brightest pixels) light
        gutter = dark[lanes.top() : lanes.bottom(), 2 : GUTTER - 4]
        assert np.median(lightness(gutter)) < 80 and lightness(gutter).max() > 170
    finally:
        QApplication.setPalette(base)
    qtbot.waitUntil(lambda: view.look.text.lightness() < 128)


def test_lane_labels_and_rows_follow_the_font(small_trace, qtbot):
    from PySide6.QtGui import QFont

    view = _show(qtbot, TimelineView())
    view.set_trace(small_trace)
    row, height, label = view.row_height, view.content_height, view.painter.label_font.pointSizeF()
    base = QApplication.font()
    big = QFont(base)
    big.setPointSizeF(base.pointSizeF() * 2)
    QApplication.setFont(big)
    try:
        qtbot.waitUntil(lambda: view.painter.label_font.pointSizeF() > label * 1.5)
        assert view.row_height > row and view.content_height > height
        assert view.painter.label_fm.height() <= view.row_height - 3  # names still fit in a row
    finally:
        QApplication.setFont(base)
    qtbot.waitUntil(lambda: view.row_height == row)
    view.set_row_height(30)  # a fixed height stays through font changes
    QApplication.setFont(big)
    try:
        qtbot.waitUntil(lambda: view.painter.label_font.pointSizeF() > label * 1.5)
        assert view.row_height == 30
    finally:
        QApplication.setFont(base)
