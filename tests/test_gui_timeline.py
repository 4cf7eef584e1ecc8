"""The timeline, pool-usage and memory views on real and small traces (pytest-qt, offscreen)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from profiling import load_trace
from widgets import colors
from widgets.memory_view import MemoryView
from widgets.pool_usage import PoolUsageView
from widgets.time_axis import GUTTER, TimeAxis
from widgets.timeline import RULER_H, TimelineView

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gui"
PUBLIC = [
    "hta_amd_mi250_relative_ts.json.gz",
    "hta_cpu_only.pt.trace.json.gz",
    "hta_event_sync_multi_stream.json.gz",
    "hta_gpu_6streams_rank0.json.gz",
    "hta_gpu_memory_2streams.json.gz",
    "hta_ns_resolution_fwdbwd.pt.trace.json.gz",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz",
    "hta_two_ranks/rank-0.json.gz",
]


def _small_trace_module():
    spec = importlib.util.spec_from_file_location("small_trace", FIXTURES / "small_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def small_trace(tmp_path):
    path = _small_trace_module().write(tmp_path / "small.json.gz", "fork")
    return load_trace(path)


def _show(qtbot, view, w=1200, h=500):
    qtbot.addWidget(view)
    view.resize(w, h)
    view.show()
    qtbot.waitExposed(view)
    return view


def _render(view) -> np.ndarray:
    img = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    ptr = img.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint32, count=img.width() * img.height()).reshape(
        img.height(), img.width()
    )
    return arr.copy() | np.uint32(0xFF000000)


@pytest.mark.parametrize("name", PUBLIC)
def test_lanes_drawn_equal_the_trace_lanes_and_inspect_lanes(name, shared_traces, qtbot, capsys):
    from app.cli import main as cli_main

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
    with qtbot.waitSignal(view.eventHovered, timeout=2000) as sig:
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
    assert len(view.threads) == 4 and {th.role for th in view.threads} == {"main", "interop", "other"}
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
    assert "cuda:1: " in view.describe_at(float(peak.peak_ts_ns - view.axis.origin_ns))
    assert "6.17 GiB" in view.describe_at(float(peak.peak_ts_ns - view.axis.origin_ns))


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
    import widgets.timeline as tl
    from profiling.trace_model import Lane, build_trace

    trace = build_trace(
        path="t", start_ns=np.arange(100) * 10, dur_ns=np.full(100, 5), lane=np.zeros(100),
        name_id=np.zeros(100), cat_id=np.zeros(100), names=["op"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )
    other = build_trace(
        path="u", start_ns=np.arange(10) * 10, dur_ns=np.full(10, 5), lane=np.zeros(10),
        name_id=np.zeros(10), cat_id=np.zeros(10), names=["op"], cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )
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
