"""The memory events table on a built 4-GPU trace: a device's allocations alive in a time range,
times from the shown origin, never-freed allocations and pre-profile frees flagged, sorting by
value, clicks saying which op holds the memory (pytest-qt, offscreen)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import analyze_memory
from branchscope.widgets.memory_table import BEFORE, COLUMNS, NEVER_FREED, MemoryTable, note_of
from tests.builders.memory import T0_US, GiB, MiB, write_four_gpu_trace
from tests.gui_helpers import show

T0 = T0_US * 1000


@pytest.fixture
def four(tmp_path):
    trace = load_trace(write_four_gpu_trace(tmp_path / "four.json.gz"))
    return trace, analyze_memory(trace)


def _table(qtbot) -> MemoryTable:
    view = show(qtbot, MemoryTable(), 800, 320)
    return view


def _texts(view: MemoryTable, col: int) -> list[str]:
    proxy = view.model
    return [proxy.index(r, col).data() for r in range(proxy.rowCount())]


def test_a_devices_allocations_flag_the_never_freed_and_the_pre_profile_frees(qtbot, four):
    trace, analysis = four
    view = _table(qtbot)
    view.set_analysis(analysis, "cuda:1", None, None, T0)
    assert [(a.where, a.bytes) for a in view.rows()] == [
        ("(before profiling)", 256 * MiB),
        ("replica forward", 1 * GiB),
        ("aten::empty", 64 * MiB),
    ]
    assert _texts(view, 2) == ["before profiling", "21.000 µs", "31.000 µs"]
    assert _texts(view, 3) == ["5.000 µs", "70.000 µs", "never freed"]
    assert _texts(view, 4) == ["—", "49 µs", "—"]
    assert [(a.where, note) for a, note in view.flagged()] == [
        ("(before profiling)", BEFORE),
        ("aten::empty", NEVER_FREED),
    ]
    tints = [view.model.index(r, 0).data(Qt.ItemDataRole.BackgroundRole) for r in range(3)]
    assert tints[0] is not None and tints[1] is None and tints[2] is not None
    caption = view.caption.text()
    assert (
        "3 allocations alive" in caption
        and "1 never freed" in caption
        and "1 allocated before profiling" in caption
    )
    assert view.model.headerData(0, Qt.Orientation.Horizontal) == "op"


def test_a_time_range_keeps_what_is_alive_in_it_with_times_from_the_origin(qtbot, four):
    trace, analysis = four
    view = _table(qtbot)
    # cuda:0 between 40 and 45 µs: the scatter (10-90) and the replica's forward (20-70) only
    view.set_analysis(analysis, "cuda:0", T0 + 40_000, T0 + 45_000, T0 - 5_000)
    assert sorted(a.where for a in view.rows()) == ["aten::scatter", "replica forward"]
    assert _texts(view, 2) == ["16.000 µs", "26.000 µs"]  # 5 µs later from the earlier origin
    assert not view.flagged()
    assert "45.000 µs to 50.000 µs" in view.caption.text()


def test_columns_sort_by_value(qtbot, four):
    trace, analysis = four
    view = _table(qtbot)
    view.set_analysis(analysis, "cuda:0", None, None, T0)
    header = view.view.horizontalHeader()
    # a click on the bytes header sorts by size (not by the text "768 MiB" against "1 GiB")
    section = QPoint(header.sectionViewportPosition(1) + 5, header.height() // 2)
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=section)
    first = [a.bytes for a in view.rows()]
    assert header.sortIndicatorSection() == 1
    assert first in (sorted(first), sorted(first, reverse=True)) and len(set(first)) > 1
    view.view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert [a.bytes for a in view.rows()] == [GiB, GiB, 768 * MiB, 512 * MiB]
    view.set_analysis(analysis, "cuda:2", None, None, T0)
    view.view.sortByColumn(3, Qt.SortOrder.AscendingOrder)
    assert _texts(view, 3)[-1] == "never freed"  # never freed: after every free


def test_a_row_click_says_which_op_holds_the_memory(qtbot, four):
    trace, analysis = four
    view = _table(qtbot)
    view.set_analysis(analysis, "cuda:0", None, None, T0)
    QApplication.processEvents()
    row = next(r for r in range(view.model.rowCount()) if view.model.index(r, 0).data() == "aten::nll_loss")
    rect = view.view.visualRect(view.model.index(row, 1))
    with qtbot.waitSignal(view.whereActivated) as where, qtbot.waitSignal(view.eventActivated) as event:
        qtbot.mouseClick(view.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert where.args == ["aten::nll_loss"]
    assert trace.names[trace.name_id[event.args[0]]] == "aten::nll_loss"
    view.set_analysis(None, None)
    assert view.model.rowCount() == 0 and view.caption.text() == ""


def _python_key(a, column: int):
    """What each column sorts by, as the values say (the text would put "1 GiB" before "768 MiB")."""
    inf = float("inf")
    return [
        a.where.lower(),
        a.bytes,
        -inf if a.alloc_ns is None else a.alloc_ns,
        inf if a.free_ns is None else a.free_ns,
        inf if a.lifetime_ns is None else a.lifetime_ns,
        {"": 0, BEFORE: 1, NEVER_FREED: 2}[note_of(a)],
    ][column]


@pytest.mark.parametrize("device", ["cuda:0", "cuda:1", "cuda:2"])
def test_every_column_sorts_by_its_values_both_ways(qtbot, four, device):
    trace, analysis = four
    view = _table(qtbot)
    view.set_analysis(analysis, device, None, None, T0)
    for column in range(len(COLUMNS)):
        for order in (Qt.SortOrder.AscendingOrder, Qt.SortOrder.DescendingOrder):
            view.view.sortByColumn(column, order)
            keys = [_python_key(a, column) for a in view.rows()]
            assert keys == sorted(keys, reverse=order == Qt.SortOrder.DescendingOrder), (column, order)


def _many_allocations(path, n: int):
    """n blocks on cuda:0, each allocated then freed, inside one op."""
    events = [{"ph": "X", "name": "big op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 4 * n + 10}]
    for k in range(n):
        common = {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "s": "t"}
        events.append({**common, "ts": 1 + 4 * k, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512 + k, "Addr": 4096 * (k + 1)}})  # fmt: skip
        events.append({**common, "ts": 3 + 4 * k, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512 - k, "Addr": 4096 * (k + 1)}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_hundred_thousand_allocations_build_only_the_rows_on_screen(qtbot, tmp_path):
    trace = load_trace(_many_allocations(tmp_path / "many.json", 100_000))
    analysis = analyze_memory(trace)
    view = _table(qtbot)
    view.set_analysis(analysis, "cuda:0")
    QApplication.processEvents()
    assert view.model.rowCount() == 100_000 and "100000 allocations alive" in view.caption.text()
    assert 0 < len(view.model._built) < 2_000  # what was painted and measured, not every row
    view.view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert view.model.allocation(0).bytes == 512 + 99_999 and view.model.allocation(99_999).bytes == 512


def _close_allocations(path):
    """Three blocks allocated 100 ns apart at a real epoch (µs with ns decimals), of 300, 100 and 200 bytes."""
    base = 1_712_195_495_519_000
    events = [{"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": base, "dur": 10}]
    for k, size in enumerate((300, 100, 200)):
        events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "s": "t", "ts": f"{base + 1}.{k + 1}00",
                       "args": {"Device Type": 1, "Device Id": 0, "Bytes": size, "Addr": 4096 * (k + 1)}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_times_sort_exactly_even_100_ns_apart(qtbot, tmp_path):
    trace = load_trace(_close_allocations(tmp_path / "close.json"))
    view = _table(qtbot)
    view.set_analysis(analyze_memory(trace), "cuda:0")
    view.view.sortByColumn(1, Qt.SortOrder.DescendingOrder)  # any order but time's first
    assert [a.bytes for a in view.rows()] == [300, 200, 100]
    view.view.sortByColumn(2, Qt.SortOrder.AscendingOrder)
    assert [a.bytes for a in view.rows()] == [300, 100, 200]  # as allocated, 100 ns apart
    view.view.sortByColumn(2, Qt.SortOrder.DescendingOrder)
    assert [a.bytes for a in view.rows()] == [200, 100, 300]


def test_the_selection_stays_on_its_allocation_when_sorted(qtbot, tmp_path):
    trace = load_trace(_close_allocations(tmp_path / "close.json"))
    view = _table(qtbot)
    view.set_analysis(analyze_memory(trace), "cuda:0")
    row = [a.bytes for a in view.rows()].index(200)
    view.view.selectRow(row)
    for column, order in ((1, Qt.SortOrder.AscendingOrder), (1, Qt.SortOrder.DescendingOrder), (0, Qt.SortOrder.AscendingOrder)):
        view.view.sortByColumn(column, order)
        (selected,) = view.view.selectionModel().selectedRows()
        assert view.model.allocation(selected.row()).bytes == 200
