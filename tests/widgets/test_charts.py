"""The charts as pyqtgraph plots on the shared time axis: where they draw, how they follow the axis
both ways, their value axes, export, the panel protocol, and traces of different runs lined up
from their own origins (pytest-qt, offscreen)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pyqtgraph as pg
import pytest
from pyqtgraph.exporters import CSVExporter, ImageExporter, SVGExporter
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, MemorySeries, build_trace
from branchscope.widgets.charts import BytesAxisItem, StepSeriesItem, TimeAxisItem, ValueAxisItem
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.panel import TracePanel
from branchscope.widgets.pool_usage import PoolUsageView
from branchscope.widgets.time_axis import GUTTER, TimeAxis
from branchscope.widgets.timeline import TimelineView
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show


@pytest.fixture
def small_trace(tmp_path):
    return load_trace(write_small_trace(tmp_path / "small.json.gz", "fork"))


def _show(qtbot, view, w=1200, h=300):
    return show(qtbot, view, w, h)


def _views(qtbot, trace, axis=None):
    axis = axis if axis is not None else TimeAxis()
    views = [
        _show(qtbot, TimelineView(axis=axis), 1200, 300),
        _show(qtbot, PoolUsageView(axis=axis), 1200, 260),
        _show(qtbot, MemoryView(axis=axis), 1200, 160),
    ]
    for v in views:
        v.set_trace(trace)
    return axis, views


def _view_boxes(view) -> list[pg.ViewBox]:
    return [view.vb] if isinstance(view, TimelineView) else [p.vb for p in view.plots]


def _x_in_widget(view, vb: pg.ViewBox, t: float) -> float:
    """Where pyqtgraph puts axis time `t` in `vb`, in the view's widget pixels."""
    # pyqtgraph maps its scene 1:1 onto the widget
    assert view.mapToScene(QPoint(0, 0)) == QPointF(0, 0) and view.mapToScene(QPoint(700, 50)) == QPointF(
        700, 50
    )
    vb.updateMatrix()
    return vb.mapViewToScene(QPointF(t, 0.0)).x()


def _pixels(view) -> np.ndarray:
    img = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    arr = np.frombuffer(img.constBits(), dtype=np.uint32, count=img.width() * img.height())
    return arr.reshape(img.height(), img.width()).copy() | np.uint32(0xFF000000)


def test_every_view_is_a_trace_panel_and_says_when_it_has_nothing_to_show(small_trace, qtbot):
    _, views = _views(qtbot, small_trace)
    for v in views:
        assert isinstance(v, TracePanel)
        assert v.trace is small_trace and v.has_data() and v.no_data_text
    lanes = [Lane(0, "cpu", 1, 1, "main", "main")]
    bare = build_trace(
        path="bare", start_ns=np.arange(5) * 10, dur_ns=np.full(5, 5), lane=np.zeros(5), name_id=np.zeros(5),
        cat_id=np.zeros(5), names=["op"], cats=["cpu_op"], lanes=lanes,
    )  # fmt: skip
    pool, memory = views[1], views[2]
    memory.prepare(bare)  # builds, shows nothing new
    assert memory.trace is small_trace and memory.plots
    blank = _pixels(memory)[:, GUTTER + 8 : GUTTER + 300]
    for v in (pool, memory):
        v.set_trace(bare)
        assert v.trace is bare and not v.has_data()
        assert v.plots == [] and v.minimumHeight() <= 30  # one line of room is enough
    said = _pixels(memory)[:28, GUTTER + 8 : GUTTER + 300]
    assert (said != 0xFFFFFFFF).sum() > 50  # the line is written
    assert not np.array_equal(said, blank[:28])
    assert "memory" in memory.no_data_text and "CPU samples" in pool.no_data_text


def test_every_plot_draws_where_the_timeline_does_and_follows_the_axis_both_ways(small_trace, qtbot):
    axis, views = _views(qtbot, small_trace)
    timeline, pool, memory = views
    boxes = [(v, vb) for v in views for vb in _view_boxes(v)]
    assert len(boxes) == 1 + 2 + len(small_trace.memory)
    axis.set_view(100_000.0, 900_000.0)
    for v, vb in boxes:  # pyqtgraph's own mapping puts an instant where x_of says, in every view
        assert tuple(vb.viewRange()[0]) == (axis.lo, axis.hi)
        for t in (100_000.0, 345_678.9, 900_000.0):
            assert _x_in_widget(v, vb, t) == pytest.approx(timeline.x_of(t), abs=1e-6)
    # zoom in one chart's ViewBox (what its wheel, drag and menu do): the axis, and so every view
    # box, follow, and the axis changes once (no echo between the views)
    changes = []
    axis.changed.connect(lambda: changes.append((axis.lo, axis.hi)))
    pool.plots[1].vb.setXRange(200_000.0, 300_000.0, padding=0)
    assert changes == [(200_000.0, 300_000.0)]
    for _v, vb in boxes:
        assert tuple(vb.viewRange()[0]) == (200_000.0, 300_000.0)
    # a range past the extent is clamped by the axis, and the view box that asked follows it
    changes.clear()
    memory.plots[0].vb.setXRange(-1e12, 1e12, padding=0)
    assert len(changes) == 1 and axis.hi - axis.lo < 2 * axis.span_ns
    for _v, vb in boxes:
        assert tuple(vb.viewRange()[0]) == (axis.lo, axis.hi)


def test_the_wheel_over_a_chart_zooms_every_view_at_the_cursor(small_trace, qtbot):
    axis, views = _views(qtbot, small_trace)
    timeline, pool, _ = views
    x, y = GUTTER + pool.plot_width() // 3, 60
    t_before, width_before = pool.t_of(x), axis.hi - axis.lo
    ev = QWheelEvent(
        QPointF(x, y), QPointF(pool.mapToGlobal(QPoint(x, y))), QPoint(0, 0), QPoint(0, 120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False,
    )  # fmt: skip
    QApplication.sendEvent(pool.viewport(), ev)
    assert axis.hi - axis.lo == pytest.approx(0.8 * width_before)
    assert abs(pool.t_of(x) - t_before) < pool.ns_per_px()
    assert tuple(timeline.vb.viewRange()[0]) == (axis.lo, axis.hi)
    lo, width = axis.lo, axis.hi - axis.lo
    sideways = QWheelEvent(
        QPointF(x, y), QPointF(pool.mapToGlobal(QPoint(x, y))), QPoint(0, 0), QPoint(-120, 0),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False,
    )  # fmt: skip
    QApplication.sendEvent(pool.viewport(), sideways)  # a sideways wheel pans: later times
    assert axis.lo == pytest.approx(lo + 0.1 * width) and axis.hi - axis.lo == pytest.approx(width)
    qtbot.keyClick(pool, Qt.Key.Key_0)  # and 0 shows everything again
    assert (axis.lo, axis.hi) == (0.0, axis.span_ns)


def test_value_axes_read_in_threads_cores_and_bytes(shared_traces, small_trace, qtbot):
    memory = _show(qtbot, MemoryView(), 1200, 200)
    memory.set_trace(load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz"))
    gpu = memory.plots[1]
    left = gpu.getAxis("left")
    assert isinstance(left, BytesAxisItem)
    y_top = gpu.vb.viewRange()[1][1]
    (step, ticks), *_ = left.tickValues(0.0, y_top, gpu.vb.height())
    labels = left.tickStrings(ticks, 1.0, step)
    assert labels[0] == "0" and all(s.endswith(" GiB") for s in labels[1:]) and len(labels) >= 2
    # no tick above the top of the GPUs' scale, the reserved peak (the room there is the label's)
    assert max(ticks) <= 12_782_141_440 and memory.scales["cuda"].top == 12_782_141_440
    assert left.tickStrings([3 << 20, 512 << 10], 1.0, 1.0) == ["3 MiB", "0.5 MiB"]
    pool = _show(qtbot, PoolUsageView(), 1200, 260)
    pool.set_trace(small_trace)
    threads, cores = (p.getAxis("left") for p in pool.plots)
    assert isinstance(threads, ValueAxisItem) and isinstance(cores, ValueAxisItem)
    (_, ticks), *_ = threads.tickValues(0.0, 2.3, 200)
    assert ticks == [0.0, 1.0, 2.0]  # whole threads only
    ruler = TimeAxisItem("top")
    (step, ticks), *_ = ruler.tickValues(0.0, 2_000_000.0, 880)
    assert ruler.tickStrings(ticks, 1.0, step)[:3] == ["0 µs", "500 µs", "1000 µs"]


def test_a_chart_exports_png_svg_and_its_series_as_csv_through_pyqtgraph(shared_traces, qtbot, tmp_path):
    trace = load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz")
    memory = _show(qtbot, MemoryView(), 1200, 200)
    memory.set_trace(trace)
    gpu = memory.plots[1]
    CSVExporter(gpu).export(str(tmp_path / "gpu.csv"))
    rows = list(csv.reader((tmp_path / "gpu.csv").open()))
    assert rows[0] == [
        "cuda:1 allocated bytes_x", "cuda:1 allocated bytes_y", "cuda:1 reserved bytes_x", "cuda:1 reserved bytes_y",
    ]  # fmt: skip
    series = next(m for m in trace.memory if m.device == "cuda:1")
    start = trace.span()[0]
    got = np.array([[float(v) for v in row] for row in rows[1:]])
    assert got.shape == (series.events, 4)  # the series as held, not its pixel columns
    assert np.allclose(got[:, 0], series.ts_ns - start) and np.array_equal(got[:, 1], series.total_bytes)
    assert np.array_equal(got[:, 3], series.reserved_bytes)
    ImageExporter(gpu).export(str(tmp_path / "gpu.png"))
    png = QImage(str(tmp_path / "gpu.png"))
    assert png.width() > 500 and png.height() > 20
    SVGExporter(gpu).export(str(tmp_path / "gpu.svg"))
    assert "<svg" in (tmp_path / "gpu.svg").read_text()
    # the right-click menu of every plot offers it
    assert "Export..." in [a.text() for a in memory.scene().contextMenu]
    assert gpu.vb.menuEnabled()


def test_the_chart_tooltip_says_what_is_under_the_cursor(small_trace, qtbot):
    pool = _show(qtbot, PoolUsageView(), 1200, 260)
    pool.set_trace(small_trace)
    t = float(small_trace.start_ns[small_trace.find("branch: left")[0]] - small_trace.span()[0]) + 300_000
    qtbot.mouseMove(pool, QPoint(round(pool.x_of(t)), 60))
    qtbot.waitUntil(lambda: "inter-op pool: 2 of 2 threads busy" in pool.hover_text)


def test_stacked_series_skip_a_hidden_one_and_export_their_own_samples(qtbot):
    t = np.array([0.0, 10.0, 20.0])
    below = StepSeriesItem(lambda e: np.full(e.size - 1, 1.0), (t, np.ones(3)), name="a")
    above = StepSeriesItem(lambda e: np.full(e.size - 1, 2.0), (t, 2 * np.ones(3)), name="b", below=below)
    edges = np.linspace(0.0, 20.0, 5)
    assert above.stacked(edges)[1].tolist() == [3.0] * 4
    below.setVisible(False)
    assert above.stacked(edges)[0].tolist() == [0.0] * 4 and above.stacked(edges)[1].tolist() == [2.0] * 4
    above.set_shift(100.0)
    assert above.getOriginalDataset()[0].tolist() == [100.0, 110.0, 120.0]


def _run(path: str, start: int, span: int, alloc_at: int) -> object:
    """A one-lane run of `span` ns from `start` (its own clock): a step over all of it, an op in
    it, and one allocation of 1 MiB at `alloc_at` ns in."""
    lanes = [Lane(0, "cpu", 1, 1, "main", "main")]
    memory = [MemorySeries("cpu", np.array([start + alloc_at]), np.array([1 << 20]), np.array([1 << 20]))]
    return build_trace(
        path=path, start_ns=np.array([start, start + span // 4]), dur_ns=np.array([span, span // 2]),
        lane=np.zeros(2), name_id=np.array([0, 1]), cat_id=np.zeros(2), names=["step 1", "aten::mm"],
        cats=["cpu_op"], lanes=lanes, memory=memory,
    )  # fmt: skip


def test_two_runs_from_their_own_origins_line_up_on_one_axis(qtbot):
    """Two runs of different clocks on one axis, each from its own origin: the same axis time is
    the same x in both, and the run twice as long is twice as wide."""
    span = 1_000_000
    a = _run("a", 5_000, span, alloc_at=100_000)
    b = _run("b", 1_700_000_000_000_000_000, 2 * span, alloc_at=200_000)  # epoch ns, twice as long
    axis = TimeAxis()
    tl_a, tl_b = (
        _show(qtbot, TimelineView(axis=axis), 1200, 120),
        _show(qtbot, TimelineView(axis=axis), 1200, 120),
    )
    mem_a, mem_b = (
        _show(qtbot, MemoryView(axis=axis), 1200, 100),
        _show(qtbot, MemoryView(axis=axis), 1200, 100),
    )
    late = 250_000  # b drawn a quarter of a millisecond after a
    for view, trace, origin in ((tl_a, a, 5_000), (tl_b, b, b.span()[0] - late)):
        view.set_trace(trace, origin_ns=origin)
    for view, trace, origin in ((mem_a, a, 5_000), (mem_b, b, b.span()[0] - late)):
        view.set_trace(trace, origin_ns=origin)
    assert (axis.start_ns, axis.end_ns) == (0.0, 1.0)  # given an origin, panels leave the bounds alone
    axis.set_bounds(0.0, late + 2 * span)  # what the workspace does: the union of the extents
    step_a, step_b = tl_a.event_rect(0), tl_b.event_rect(0)
    assert step_a.left() == math.floor(tl_a.x_of(0.0)) and step_b.left() == math.floor(tl_b.x_of(late))
    assert tl_a.x_of(12_345.0) == tl_b.x_of(12_345.0) == mem_a.x_of(12_345.0) == mem_b.x_of(12_345.0)
    assert abs(step_b.width() - 2 * step_a.width()) <= 2  # twice as long, twice as wide (to a pixel)
    assert tl_b.time_range() == (b.span()[0] - late, b.span()[0] - late + round(axis.hi))
    # the charts place a run's samples from its own origin too, through the same ViewBox mapping
    xs = []
    for view, t in ((mem_a, 100_000), (mem_b, late + 200_000)):
        curve = view._bands[0].curve
        assert curve.getOriginalDataset()[0].tolist() == [float(t)]
        xs.append(_x_in_widget(view, view.plots[0].vb, float(t)))
    assert xs == [
        pytest.approx(tl_a.x_of(100_000.0), abs=1e-6),
        pytest.approx(tl_b.x_of(late + 200_000.0), abs=1e-6),
    ]
    # pan in b's timeline: a's follows, the same instant still at the same x
    tl_b.vb.setXRange(late, late + span, padding=0)
    assert tuple(tl_a.vb.viewRange()[0]) == (late, late + span)
    assert tl_a.event_rect(0).left() <= tl_a.plot_left() and tl_b.event_rect(0).left() == round(
        tl_b.x_of(late)
    )


def test_the_timeline_is_one_item_in_a_linked_pyqtgraph_view(small_trace, qtbot):
    timeline = _show(qtbot, TimelineView(), 1200, 300)
    timeline.set_trace(small_trace)
    assert isinstance(timeline.item, pg.GraphicsObject) and timeline.item.parentItem() is timeline.vb
    assert isinstance(timeline.ruler, pg.AxisItem) and timeline.ruler.linkedView() is timeline.vb
    timeline.grab()
    assert timeline.painted_lanes
    # its ruler ticks where the charts draw their grid lines
    lo, hi = timeline.axis.lo, timeline.axis.hi
    (_, ticks), *_ = timeline.ruler.tickValues(lo, hi, timeline.plot_width())
    pool = PoolUsageView(axis=timeline.axis)
    _show(qtbot, pool, 1200, 260).set_trace(small_trace)
    (_, grid), *_ = pool.plots[0].getAxis("bottom").tickValues(lo, hi, pool.plot_width())
    assert ticks == grid


def _rank_run(path, rank: int, pid: int) -> str:
    """A run of ours as rank `rank`: main thread 7 and pool thread 8 (the same tids on every rank),
    both CPU-sampled."""
    import json

    events = [
        {"ph": "X", "name": "step 0", "pid": pid, "tid": 7, "ts": 0, "dur": 1000},
        {"ph": "X", "name": "aten::mm", "pid": pid, "tid": 8, "ts": 10, "dur": 500},
    ]
    for tid, pct in ((7, 100.0), (8, 50.0 + rank * 40)):
        events += [
            {"ph": "C", "cat": "cpu_sample", "name": f"thread {tid} (t{tid})", "pid": pid, "tid": tid, "ts": ts,
             "args": {"cpu_pct": pct, "wait_pct": 0.0}}
            for ts in range(0, 1001, 100)
        ]  # fmt: skip
    doc = {
        "distributedInfo": {"rank": rank, "world_size": 2},
        "branchscope": {"mode": "fork", "interop": 1, "intra": 1, "cores": 4, "main_tid": 7,
                        "interop_tids": [8], "intra_tids": []},
        "traceEvents": events,
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return str(path)


def test_threads_of_merged_ranks_never_mix_in_the_cpu_chart(tmp_path, qtbot):
    from branchscope.profiling import merge_traces
    from branchscope.profiling.trace.merge import as_ranks

    ranks = [load_trace(_rank_run(tmp_path / f"r{r}.json", r, 100 + r)) for r in (0, 1)]
    merged = merge_traces(as_ranks(ranks))
    pool = PoolUsageView()
    pool.set_trace(merged)
    # the same tids on both ranks: four threads, each its rank's, none added to another's
    assert sorted((th.rank, th.track.tid, th.role) for th in pool.threads) == [
        (0, 7, "main"), (0, 8, "interop"), (1, 7, "main"), (1, 8, "interop")
    ]  # fmt: skip
    assert {th.label for th in pool.threads} == {f"rank {r} · thread {t} (t{t})" for r in (0, 1) for t in (7, 8)}
    by = {(th.rank, th.track.tid): float(np.max(th.v)) for th in pool.threads}
    assert by[(0, 8)] == pytest.approx(0.5) and by[(1, 8)] == pytest.approx(0.9)


def test_threads_mode_with_the_gil_gets_a_band_of_the_branch_threads_waiting_for_it(qtbot, tmp_path):
    from branchscope.profiling.trace.analyses import gil_wait
    from branchscope.widgets.pool_usage import GIL_COLORS, GIL_TITLE

    trace = load_trace(write_small_trace(tmp_path / "threads.json", "threads"))
    pool = _show(qtbot, PoolUsageView(), 1200, 400)
    pool.set_trace(trace)
    assert [p.objectName() for p in pool.plots] == ["busy inter-op threads", "CPU use per OS thread", GIL_TITLE]
    assert [g.wait.tid for g in pool.gil_threads] == [11, 12]
    assert [g.color.name() for g in pool.gil_threads] == GIL_COLORS[:2]
    gutter = pool.gil_gutter.text.toPlainText()
    assert gutter.startswith(GIL_TITLE) and "thread 11 (BSThreadPool)" in gutter
    # threads mode's pool is a pool of Python threads, and the bands say so.
    assert pool.pool_gutter.text.toPlainText().startswith("Python pool")
    assert ("interop", "Python pool (2)") in pool.legend()
    assert pool.gil_line.isVisible() and pool.gil_line.value() == 2
    # The series exported as CSV are the analysis' own, on the axis.
    CSVExporter(pool.plots[2]).export(str(tmp_path / "gil.csv"))
    rows = list(csv.reader((tmp_path / "gil.csv").open()))
    assert rows[0][:2] == [f"thread 11 (BSThreadPool) (Python pool), {GIL_TITLE}_x", f"thread 11 (BSThreadPool) (Python pool), {GIL_TITLE}_y"]
    first = gil_wait(trace)[0].series
    got = np.array([[float(v) for v in row[:2]] for row in rows[1:]])
    assert np.allclose(got[:, 0], first.t_ns - trace.span()[0]) and np.allclose(got[:, 1], first.value)
    # Inside a branch: 40% of each branch thread's time, so 0.8 of a thread in all.
    t = float(trace.start_ns[trace.find("branch: left")[0]] - trace.span()[0]) + 400_000
    text = pool.describe_at(t)
    assert f"{GIL_TITLE}: 0.80 of 2 branch threads" in text and "Python pool: 2 of 2 threads busy" in text
    assert pool.wanted_height(900) == 300


def test_no_gil_band_without_the_gil_or_in_fork_mode(qtbot, tmp_path):
    pool = _show(qtbot, PoolUsageView(), 1200, 300)
    for name, mode, gil in (("free.json", "threads", False), ("fork.json", "fork", True)):
        pool.set_trace(load_trace(write_small_trace(tmp_path / name, mode, gil=gil)))
        assert pool.gil_threads == [] and len(pool.plots) == 2 and not pool.gil_line.isVisible()
        assert pool.gil_plot.items == [] or all(not isinstance(i, StepSeriesItem) for i in pool.gil_plot.items)
    assert pool.pool_gutter.text.toPlainText().startswith("inter-op pool")  # fork mode
