"""The memory chart across devices: one scale per kind of device (GPUs of every rank together, the
CPU apart, in a band sized for its values), peaks and capacities as lines, reserved beside allocated
(pytest-qt, offscreen). Also the built traces the memory views' tests share."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, MemorySeries, build_trace
from branchscope.widgets.charts import BytesAxisItem, GutterText
from branchscope.widgets.memory_view import MemoryView, device_kind, device_rank, kind_scales
from branchscope.widgets.theme import dark_palette
from tests.builders.memory import PEAKS, GiB, KiB, MiB, write_four_gpu_trace
from tests.gui_helpers import show


def _series(device: str, peak: int, *, reserved: bool = False, capacity: int | None = None,
            rank: int | None = None) -> MemorySeries:  # fmt: skip
    """One device's series: up to `peak` and back down, 20 events over 1 ms from t=1000 ns."""
    t = np.linspace(1_000, 1_001_000, 20).astype(np.int64)
    total = (np.concatenate([np.linspace(0.1, 1.0, 10), np.linspace(0.8, 0.1, 10)]) * peak).astype(np.int64)
    total[9] = peak
    kwargs = {"reserved_bytes": np.maximum.accumulate(total) + peak // 4} if reserved else {}
    return MemorySeries(
        device, t, np.diff(total, prepend=0), total, capacity_bytes=capacity, rank=rank, **kwargs
    )


def _trace(memory: list[MemorySeries]):
    lanes = [Lane(0, "cpu", 1, 1, "main", "main")]
    return build_trace(
        path="built", start_ns=np.array([0]), dur_ns=np.array([1_002_000]), lane=np.zeros(1),
        name_id=np.array([0]), cat_id=np.zeros(1), names=["step 1"], cats=["cpu_op"], lanes=lanes, memory=memory,
    )  # fmt: skip


def _view(qtbot, trace, w=1200, h=420) -> MemoryView:
    view = show(qtbot, MemoryView(), w, h)
    view.set_trace(trace)
    QApplication.processEvents()
    return view


def _band(view: MemoryView, device: str) -> int:
    return next(k for k, m in enumerate(view.series) if m.device == device)


def _drawn_height(view: MemoryView, device: str, value: float) -> float:
    """Pixels from `device`'s 0 up to `value` in its band."""
    return view.device_y(device, 0.0) - view.device_y(device, value)


def _ticks(view: MemoryView, device: str) -> list[float]:
    plot = view.plots[_band(view, device)]
    axis = plot.getAxis("left")
    (_, ticks), *_ = axis.tickValues(*plot.vb.viewRange()[1], plot.vb.height())
    return ticks


def test_gpus_share_one_scale_so_a_larger_peak_is_drawn_higher(qtbot):
    """80 KiB and 64 KiB on two GPUs: one y range and the same ticks, the 80 KiB peak 5/4 as high."""
    view = _view(qtbot, _trace([_series("cuda:0", 80 * KiB), _series("cuda:1", 64 * KiB)]))
    a, b = (view.plots[_band(view, d)] for d in ("cuda:0", "cuda:1"))
    assert a.vb.viewRange()[1] == pytest.approx(b.vb.viewRange()[1])
    assert isinstance(a.getAxis("left"), BytesAxisItem)
    assert _ticks(view, "cuda:0") == _ticks(view, "cuda:1") and len(_ticks(view, "cuda:0")) >= 2
    high, low = _drawn_height(view, "cuda:0", 80 * KiB), _drawn_height(view, "cuda:1", 64 * KiB)
    assert low > 20 and high == pytest.approx(low * 80 / 64, rel=0.03)
    # each peak is marked: a line at its value and its label
    for k, peak in ((_band(view, "cuda:0"), 80 * KiB), (_band(view, "cuda:1"), 64 * KiB)):
        assert view._bands[k].peak_line.value() == peak
        assert "peak" in view._bands[k].label.toPlainText()


def test_ranks_gpus_are_on_the_scale_of_the_others_and_ordered_by_rank(qtbot):
    series = [
        _series("rank1/cuda:1", 2 * GiB, rank=1),
        _series("rank0/cuda:0", 6 * GiB, rank=0),
        _series("rank0/cpu", 4 * MiB, rank=0),
    ]
    assert [device_kind(m.device) for m in series] == ["cuda", "cuda", "cpu"]
    assert device_rank(_series("rank3/cuda:0", 1)) == 3 and device_rank(_series("cuda:0", 1)) is None
    view = _view(qtbot, _trace(series))
    assert [m.device for m in view.series] == ["rank0/cpu", "rank0/cuda:0", "rank1/cuda:1"]
    assert view.plots[1].vb.viewRange()[1] == pytest.approx(view.plots[2].vb.viewRange()[1])
    assert _drawn_height(view, "rank0/cuda:0", 6 * GiB) == pytest.approx(
        3 * _drawn_height(view, "rank1/cuda:1", 2 * GiB), rel=0.03
    )


def test_the_cpu_keeps_its_own_scale_in_a_thinner_band(qtbot):
    """8 B on the CPU beside 6 GiB on GPUs: its own y range (its peak reaches its band's top) in a
    band thinner than a GPU's."""
    view = _view(qtbot, _trace([_series("cpu", 8), _series("cuda:0", 6 * GiB), _series("cuda:1", 3 * GiB)]))
    cpu, gpu = view.bands()[_band(view, "cpu")], view.bands()[_band(view, "cuda:0")]
    assert cpu.height() < 0.6 * gpu.height()
    assert cpu.height() >= 30  # still room for its two-line label
    assert view.scales["cpu"].top == 8 and view.scales["cuda"].top == 6 * GiB
    assert view.plots[_band(view, "cpu")].getAxis("left").v_max == 8
    # the CPU alone is a full band
    alone = kind_scales([_series("cpu", 8)])
    assert alone["cpu"].share == 1.0


def test_reserved_is_drawn_beside_allocated_and_on_the_scale(qtbot):
    view = _view(qtbot, _trace([_series("cuda:0", 4 * GiB, reserved=True), _series("cuda:1", 2 * GiB)]))
    band0, band1 = view._bands[_band(view, "cuda:0")], view._bands[_band(view, "cuda:1")]
    assert band0.reserved_curve is not None and band1.reserved_curve is None
    assert band0.reserved_curve.name() == "cuda:0 reserved bytes"
    top = float(band0.reserved.max())
    assert top == 5 * GiB and view.scales["cuda"].top == top
    # lighter: the allocated fill is more opaque than the reserved one, and drawn over it
    assert band0.reserved_curve.brush.color().alpha() < band0.curve.brush.color().alpha()
    assert band0.reserved_curve.zValue() < band0.curve.zValue()
    assert "reserved ≤ 5 GiB" in band0.gutter.html and "reserved" not in band1.gutter.html
    t = float(band0.t[9]) + view._shift + 1
    assert "cuda:0: 4 GiB allocated, 5 GiB reserved" in view.describe_at(t)


def test_capacity_is_a_line_when_near_the_peaks_and_words_when_far(qtbot):
    near = _view(
        qtbot,
        _trace([_series("cuda:0", 6 * GiB, capacity=8 * GiB), _series("cuda:1", 2 * GiB, capacity=8 * GiB)]),
    )
    line = near._bands[0].capacity_line
    assert line is not None and line.value() == 8 * GiB and "capacity 8 GiB" in line.label.toPlainText()
    assert near.scales["cuda"].top == 8 * GiB  # on the scale, with the peaks below it
    assert near.device_y("cuda:0", 8 * GiB) < near.device_y("cuda:0", 6 * GiB)
    assert "peak 6 GiB (75%)" in near._bands[0].gutter.html
    far = _view(qtbot, _trace([_series("cuda:0", 1 * GiB, capacity=80 * GiB)]))
    assert far._bands[0].capacity_line is None and far.scales["cuda"].top == 1 * GiB
    assert "capacity 80 GiB" in far._bands[0].gutter.html
    far.set_scale_to_capacity(True)
    assert far._bands[0].capacity_line is not None and far.scales["cuda"].top == 80 * GiB


def test_a_built_four_gpu_trace_reads_in_bytes_and_follows_the_dark_palette(qtbot, tmp_path):
    trace = load_trace(write_four_gpu_trace(tmp_path / "four.json.gz"))
    assert {m.device: m.peak_bytes for m in trace.memory} == PEAKS
    view = _view(qtbot, trace, 1200, 520)
    assert [m.device for m in view.series] == ["cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    heights = {d: _drawn_height(view, d, PEAKS[d]) for d in ("cuda:0", "cuda:1", "cuda:2", "cuda:3")}
    assert heights["cuda:0"] > 2.5 * heights["cuda:1"] > heights["cuda:3"]
    assert heights["cuda:2"] > heights["cuda:1"] > heights["cuda:3"]
    assert len({tuple(_ticks(view, d)) for d in heights}) == 1
    assert all(b.capacity_line is not None for b in view._bands[1:])  # 5 GiB: near the 3.5 GiB reserved
    assert view._bands[0].reserved is None and all(b.reserved is not None for b in view._bands[1:])
    assert view.bands()[0].height() < 0.6 * view.bands()[1].height()  # 8 B: a thin band
    view.grab().save(str(tmp_path / "light.png"))
    app = QApplication.instance()
    before = app.palette()
    try:
        app.setPalette(dark_palette())
        qtbot.waitUntil(lambda: view.backgroundBrush().color().lightness() < 80)
        assert all(b.label.textItem.defaultTextColor().lightness() > 128 for b in view._bands)
        labels = [i for i in view.scene().items() if isinstance(i, GutterText)]
        assert labels and all(lab.text.defaultTextColor().lightness() > 128 for lab in labels)
        patch = view._bands[1].capacity_line.label.fill.color()
        assert patch.lightness() < 80  # the capacity label sits on a dark patch
        view.grab().save(str(tmp_path / "dark.png"))
    finally:
        app.setPalette(before)


def test_labels_take_the_views_font(qtbot):
    view = _view(qtbot, _trace([_series("cuda:0", 6 * GiB, capacity=8 * GiB)]))
    font = view.font()
    font.setPointSizeF(font.pointSizeF() * 1.5)
    view.setFont(font)
    qtbot.waitUntil(lambda: view._bands[0].label.textItem.font().pointSizeF() == font.pointSizeF())
    assert view._bands[0].capacity_line.label.textItem.font().pointSizeF() == font.pointSizeF()
    axis = view.plots[0].getAxis("left")
    assert isinstance(axis, pg.AxisItem) and axis.style["tickFont"].pointSizeF() == font.pointSizeF()


def test_a_job_of_many_devices_draws_its_heaviest_and_says_so(qtbot):
    """256 ranks made a band per device (a minute to open, none readable): the view draws the
    `MAX_BANDS` heaviest, heaviest first (a list of "the 16 heaviest" reads down from the
    heaviest), and its first band says how many there are."""
    from branchscope.widgets.memory_view import MAX_BANDS  # noqa: PLC0415

    peaks = [(k * 37) % 41 + 1 for k in range(40)]  # MiB, all distinct
    trace = _trace([_series(f"cuda:{k}", peaks[k] * MiB, rank=k) for k in range(40)])
    view = _view(qtbot, trace)
    shown = [int(m.device.split(":")[1]) for m in view.series]
    heaviest = sorted(range(40), key=lambda k: -peaks[k])[:MAX_BANDS]
    assert len(shown) == MAX_BANDS and shown == heaviest
    assert f"the {MAX_BANDS} heaviest of 40 devices" in view._bands[0].gutter.html
    assert "heaviest of" not in view._bands[1].gutter.html
    few = _view(qtbot, _trace([_series(f"cuda:{k}", (k + 1) * MiB) for k in range(3)]))
    assert len(few.series) == 3 and "heaviest of" not in few._bands[0].gutter.html


def test_the_empty_chart_before_any_trace_ticks_no_values(qtbot) -> None:
    from PySide6.QtGui import QImage, QPainter

    view = _view(qtbot, None)
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = view.plots[0].getAxis("left").generateDrawSpecs(painter)
    finally:
        painter.end()
    assert specs is not None and specs[2] == []  # no tick text: no "0.8 B" on an axis of nothing


def test_the_chart_keeps_its_least_height_before_and_after_a_trace(qtbot) -> None:
    """80 px, or its labels' height where more: set_bands' own floor must not undo it (it left 22)."""
    from branchscope.widgets.memory_view import MemoryView

    view = MemoryView()
    qtbot.addWidget(view)
    assert view.minimumHeight() >= 80
    view.set_trace(None)
    assert view.minimumHeight() >= 80


def test_a_trace_without_memory_says_why_from_what_it_says_of_itself(qtbot, tmp_path) -> None:
    from branchscope.profiling.trace.memory_source import NONE_RECORDED, WITHOUT_PROFILE_MEMORY
    from tests.builders.memory import op, write_trace

    for top, words in (({"profile_memory": 1}, NONE_RECORDED), ({"profile_memory": 0}, WITHOUT_PROFILE_MEMORY)):
        trace = load_trace(write_trace(tmp_path / "t.json", [op("a", 1, 0, 10)], **top))
        view = _view(qtbot, trace)
        assert not view.has_data() and view.no_data_text == words
    assert "profile with profile_memory=True" not in NONE_RECORDED  # profiled with it: never told to



def test_memory_recorded_per_thread_says_so_in_the_chart(qtbot, tmp_path) -> None:
    from tests.builders.memory import mem, op, write_trace

    source = "allocator events of the main thread and each pool thread, recorded per thread"
    events = [op("a", 1, 0, 10), mem(2, 64, 64, addr=None, device_type=0), mem(5, -64, 0, addr=None, device_type=0)]
    trace = load_trace(write_trace(tmp_path / "t.json", events, branchscope={"mode": "threads", "memory_source": source}))
    view = _view(qtbot, trace)
    assert "legacy profiler" in view._bands[0].gutter.html
    plain = _view(qtbot, load_trace(write_trace(tmp_path / "p.json", events)))
    assert "legacy profiler" not in plain._bands[0].gutter.html
