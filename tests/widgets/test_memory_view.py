"""The memory chart across devices: one scale per kind of device (GPUs of every rank together, the
CPU apart, in a band sized for its values), peaks and capacities as lines, reserved beside allocated
(pytest-qt, offscreen). Also the built traces the memory views' tests share."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.model import Lane, MemorySeries, build_trace
from branchscope.widgets.charts import BytesAxisItem, GutterText
from branchscope.widgets.memory_view import MemoryView, device_kind, device_rank, kind_scales
from branchscope.widgets.theme import dark_palette
from tests.gui_helpers import show

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: Where the built trace's clock starts (µs).
T0_US = 1_000_000
#: Each GPU's capacity in the built trace.
CAPACITY = 5 * GiB

#: The built 4-GPU trace's allocations, as nn.DataParallel leaves them: (device id (-1: the CPU),
#: op, thread, bytes, allocated at, freed at or None (never freed), all in µs from T0_US).
#: cuda:0 holds the scatter, the gather and the loss beside its replica's forward.
ALLOCATIONS = [
    (0, "aten::scatter", 1, 512 * MiB, 10, 90),
    (0, "replica forward", 1, 1 * GiB, 20, 70),
    (0, "aten::gather", 1, 1 * GiB, 50, 95),
    (0, "aten::nll_loss", 1, 768 * MiB, 60, 80),
    (1, "replica forward", 11, 1 * GiB, 20, 70),
    (1, "aten::empty", 11, 64 * MiB, 30, None),
    (2, "replica forward", 12, 1 * GiB, 20, 70),
    (2, "aten::empty", 12, 128 * MiB, 30, None),
    (3, "replica forward", 13, 1 * GiB, 20, 70),
    (-1, "aten::empty", 1, 8, 15, None),
]
#: Frees of memory allocated before profiling began: (device id, thread, bytes, at µs).
EARLY_FREES = [(1, 11, 256 * MiB, 5)]
#: Each device's peak in that trace.
PEAKS = {
    "cuda:0": 512 * MiB + 2 * GiB + 768 * MiB,
    "cuda:1": GiB + 64 * MiB,
    "cuda:2": GiB + 128 * MiB,
    "cuda:3": GiB,
    "cpu": 8,
}


def write_four_gpu_trace(path: Path) -> Path:
    """A Chrome trace of one DataParallel-like step over 4 GPUs: each allocation inside its op on
    its thread, `[memory]` events with Addr, Bytes, Total Allocated and Total Reserved, and each
    GPU's capacity in `deviceProperties` (gzipped for .gz)."""
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
        for tid, name in [(1, "main"), (11, "replica 1"), (12, "replica 2"), (13, "replica 3")]
    ]
    events.append(
        {"ph": "X", "cat": "user_annotation", "name": "step 1", "pid": 1, "tid": 1, "ts": T0_US, "dur": 100}
    )
    memory: list[tuple[float, int, int, int, int]] = []  # (ts, device, tid, addr, bytes)
    for k, (dev, op, tid, size, at, freed) in enumerate(ALLOCATIONS):
        end = at + 2
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": tid, "ts": T0_US + at, "dur": 2}
        )
        addr = 0x7F0000000000 + k * (1 << 32)
        memory.append((T0_US + at + 1, dev, tid, addr, size))
        if freed is not None:
            memory.append((T0_US + freed, dev, tid, addr, -size))
        assert end <= 100
    for dev, tid, size, at in EARLY_FREES:
        memory.append((T0_US + at, dev, tid, 0x7E0000000000, -size))
    memory.sort()
    totals = {dev: sum(size for d, _, size, _ in EARLY_FREES if d == dev) for dev in range(-1, 4)}
    reserved = dict.fromkeys(range(-1, 4), 0)
    for ts, dev, tid, addr, size in memory:
        totals[dev] += size
        if dev >= 0:  # the caching allocator's (the CPU's is 0)
            reserved[dev] = max(reserved[dev], -(-totals[dev] // (2 * MiB)) * 2 * MiB + 256 * MiB)
        args = {"Device Type": 0 if dev < 0 else 1, "Device Id": dev, "Addr": addr, "Bytes": size,
                "Total Allocated": totals[dev], "Total Reserved": reserved[dev]}  # fmt: skip
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "args": args,
            }
        )
    doc = {
        "traceEvents": events,
        "deviceProperties": [{"id": i, "name": "Test GPU", "totalGlobalMem": CAPACITY} for i in range(4)],
    }
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path


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
