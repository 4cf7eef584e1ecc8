"""The memory imbalance summary on a built 4-GPU trace: peaks as bars on one scale per kind, the
heaviest device's excess over the median in words, what was live at its peak by op, clicks on bars
and rows (pytest-qt, offscreen)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import analyze_memory
from branchscope.profiling.trace.model import MemorySeries, build_trace
from branchscope.widgets.memory_summary import MemorySummary
from branchscope.widgets.theme import dark_palette
from tests.builders.memory import PEAKS, GiB, MiB, write_four_gpu_trace
from tests.gui_helpers import show


@pytest.fixture
def four(tmp_path):
    trace = load_trace(write_four_gpu_trace(tmp_path / "four.json.gz"))
    return trace, analyze_memory(trace)


def _summary(qtbot, analysis) -> MemorySummary:
    view = show(qtbot, MemorySummary(), 700, 560)
    view.set_analysis(analysis)
    QApplication.processEvents()
    return view


def test_bars_words_and_the_heaviest_devices_peak_by_op(qtbot, four):
    trace, analysis = four
    view = _summary(qtbot, analysis)
    # one plot per kind: the GPUs' four bars on one scale, the CPU's apart
    assert set(view.plots) == {"cuda", "cpu"}
    gpu = view.bars["cuda"]
    assert list(gpu.opts["height"]) == [PEAKS[f"cuda:{i}"] for i in range(4)]
    assert list(view.bars["cpu"].opts["height"]) == [8]
    median = (PEAKS["cuda:1"] + PEAKS["cuda:2"]) / 2
    assert view.median_lines["cuda"].value() == median and "cpu" not in view.median_lines
    # in words: how much the heaviest exceeds the median GPU, and by how many times
    words = view.words.text()
    assert words.startswith("Largest peak: GPU cuda:0, 3.25 GiB of 5 GiB.")
    assert "cuda:0 peaks at 3.25 GiB, 3.0× the median GPU (1.09 GiB; heaviest ÷ median of 4): 2.16 GiB more." in words
    # the table: cuda:0's peak, largest first
    assert view.device == "cuda:0"
    assert view.rows() == [
        ("replica forward", 1 * GiB, 1),
        ("aten::gather", 1 * GiB, 1),
        ("aten::nll_loss", 768 * MiB, 1),
        ("aten::scatter", 512 * MiB, 1),
    ]
    assert [view.table.item(r, 0).text() for r in range(view.table.rowCount())] == [
        w for w, *_ in view.rows()
    ]
    assert view.table.item(2, 1).text() == "768 MiB" and view.table.item(2, 3).text() == "23%"
    assert "3.25 GiB" in view.caption.text()


def test_a_bar_click_chooses_its_device_and_a_row_click_its_op(qtbot, four):
    trace, analysis = four
    view = _summary(qtbot, analysis)
    x, y = view.bar_center("cuda:2")
    with qtbot.waitSignal(view.deviceChosen) as chosen:
        qtbot.mouseClick(view.chart.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(round(x), round(y)))
    assert chosen.args == ["cuda:2"] and view.device == "cuda:2"
    assert view.rows() == [("replica forward", 1 * GiB, 1), ("aten::empty", 128 * MiB, 1)]
    # a click between bars chooses nothing
    gap = view.bar_center("cuda:1")[0] / 2 + view.bar_center("cuda:2")[0] / 2
    with qtbot.assertNotEmitted(view.deviceChosen):
        qtbot.mouseClick(view.chart.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(round(gap), round(y)))
    # a row: its op's name (for the timeline's find) and the very events that hold the memory
    rect = view.table.visualRect(view.table.model().index(1, 0))
    with qtbot.waitSignal(view.whereActivated) as where, qtbot.waitSignal(view.eventsActivated) as events:
        qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert where.args == ["aten::empty"]
    (held,) = events.args
    assert len(held) == 1 and trace.names[trace.name_id[held[0]]] == "aten::empty"
    assert (
        int(trace.start_ns[held[0]]) <= 1_000_031_000 <= int(trace.start_ns[held[0]] + trace.dur_ns[held[0]])
    )


def test_a_single_device_and_nothing_at_all(qtbot, tmp_path, four):
    view = _summary(qtbot, None)
    assert view.words.text() == "" and view.table.rowCount() == 0 and not view.plots
    trace, analysis = four
    view.set_analysis(analysis)
    assert view.table.rowCount() == 4
    view.set_analysis(None)
    assert view.table.rowCount() == 0 and view.device is None


def test_the_summary_follows_the_dark_palette_and_font(qtbot, four, tmp_path):
    _, analysis = four
    view = _summary(qtbot, analysis)
    view.grab().save(str(tmp_path / "summary-light.png"))
    app = QApplication.instance()
    before = app.palette()
    try:
        app.setPalette(dark_palette())
        qtbot.waitUntil(lambda: view.chart.backgroundBrush().color().lightness() < 80)
        axis = view.plots["cuda"].getAxis("bottom")
        assert axis.textPen().color().lightness() > 128  # device names readable on the dark chart
        view.grab().save(str(tmp_path / "summary-dark.png"))
    finally:
        app.setPalette(before)
    font = view.font()
    font.setPointSizeF(font.pointSizeF() * 1.5)
    view.setFont(font)
    qtbot.waitUntil(
        lambda: view.plots["cuda"].getAxis("left").style["tickFont"].pointSizeF() == font.pointSizeF()
    )


def test_a_snapshots_peak_is_grouped_by_allocation_site(qtbot):
    """A series with allocation sites (as a snapshot gives): the table says site, not op."""
    t = np.array([1_000, 2_000, 3_000, 4_000], dtype=np.int64)
    delta = np.array([300 * MiB, 100 * MiB, -100 * MiB, -300 * MiB], dtype=np.int64)
    sites = ("train.py:41:loss", "model.py:12:forward")
    gpu = [
        MemorySeries(
            f"cuda:{i}", t, delta * (i + 1), np.cumsum(delta * (i + 1)),
            addr=np.array([16, 32, 32, 16], dtype=np.int64), site_id=np.array([0, 1, 1, 0], dtype=np.int32), sites=sites,
        )
        for i in range(2)
    ]  # fmt: skip
    trace = build_trace(
        path="snapshot", start_ns=np.zeros(0, dtype=np.int64), dur_ns=np.zeros(0, dtype=np.int64),
        lane=np.zeros(0), name_id=np.zeros(0), cat_id=np.zeros(0), names=[], cats=[], lanes=[], memory=gpu,
    )  # fmt: skip
    view = _summary(qtbot, analyze_memory(trace))
    assert view.device == "cuda:1"
    assert view.rows() == [("train.py:41:loss", 600 * MiB, 1), ("model.py:12:forward", 200 * MiB, 1)]
    assert (
        view.table.horizontalHeaderItem(0).text() == "allocation site"
        and "by allocation site" in view.caption.text()
    )
    rect = view.table.visualRect(view.table.model().index(0, 0))
    with qtbot.waitSignal(view.whereActivated) as where, qtbot.waitSignal(view.eventsActivated) as events:
        qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert where.args == ["train.py:41:loss"] and events.args == [[]]  # no events in a snapshot
