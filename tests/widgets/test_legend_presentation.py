"""Issue 35, finding 12: at a projector's 1280×720 in presentation size (text of 16 px) the side
panel's branch legend keeps 12 characters of every branch's name (all of a shorter one), and its
empty-state line and the details panel's values wrap rather than being cut."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtGui import QFontInfo, QFontMetricsF
from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionViewItem

from branchscope.profiling import load_trace
from branchscope.profiling.trace.prediction import predict
from branchscope.profiling.trace.records import BranchRecord, to_builtins
from branchscope.widgets.branch_legend import BranchLegend
from tests.gui_helpers import show

BRANCHES = ("branch1x1", "branch5x5_1 → branch5x5_2", "branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3", "branch_pool")


def write_inception_trace(path: Path, branches: tuple[str, ...] = BRANCHES) -> Path:
    """A threads run's trace of Inception's four branches (its module names) in one region named
    "x", each a branch annotation on a pool thread, with the run's facts."""
    events = []
    for step in range(2):  # each branch 190.82 ms in all, as wide a time as Inception's threads run shows
        t0 = step * 500_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t0, "dur": 450_000.0})
        for k, name in enumerate(branches):
            label = "branch: " + name.replace(" → ", " -> ")
            events.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 1, "tid": 11 + k % 2,
                           "ts": t0 + 1000.0 + 100_000.0 * k, "dur": 95_410.0})  # fmt: skip
    meta = {"mode": "threads", "interop": 2, "intra": 1, "cores": 2, "main_tid": 1, "interop_tids": [11, 12],
            "branches": [{"name": n, "region": "1", "region_name": "x", "ops": 3} for n in branches]}  # fmt: skip
    if branches:  # what the branches could give, as a run says it: the legend's region row shows it
        records = [BranchRecord(**b) for b in meta["branches"]]
        meta["prediction"] = to_builtins(predict(records, {n: 190.82 for n in branches}, 400.0, source="test"))
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "branchscope": meta}))
    return path


def _presentation_window(window, qtbot, trace: Path, size=(1280, 720)):
    assert window.open_trace_files([str(trace)]) == 1
    window.menus.presentation_action.trigger()
    window.resize(*size)
    qtbot.waitUntil(lambda: window.size().toTuple() == size and not window.columns._fit_timer.isActive())
    QApplication.processEvents()
    return window.side_panel


def _drawn_whole(tree, item) -> bool:
    """The row's lines fit the text rectangle Qt's style lays out in its cell (beside the swatch,
    inside the margins), measured as Qt's text layout does, and the row is as tall as its lines:
    Qt draws all of it."""
    option = QStyleOptionViewItem()
    option.rect = QRect(0, 0, tree.columnWidth(0) - tree.indentation() * 2, 100)  # a branch in a region
    option.features = QStyleOptionViewItem.ViewItemFeature.HasDecoration | QStyleOptionViewItem.ViewItemFeature.HasDisplay
    option.decorationSize = tree.iconSize()
    option.text, option.font = item.text(0), tree.font()
    margin = tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, tree) + 1
    room = tree.style().subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, tree).width() - 2 * margin
    fm = QFontMetricsF(tree.font())
    lines = item.text(0).split("\n")
    return all(fm.horizontalAdvance(line) <= room for line in lines) and len(lines) * fm.lineSpacing() <= tree.visualItemRect(item).height()


def test_legend_names_keep_12_characters_at_1280x720_in_presentation_size(window, qtbot, tmp_path):
    panel = _presentation_window(window, qtbot, write_inception_trace(tmp_path / "t.json"))
    legend = panel.legend
    assert QFontInfo(legend.tree.font()).pixelSize() >= 16
    for name in BRANCHES:
        item = legend.item_of(name)
        text = item.text(0)
        assert _drawn_whole(legend.tree, item), text
        assert len(text.replace("\n", " ")) >= min(12, len(name)), text
        assert item.toolTip(0).startswith(name)
    assert "≤" in legend.region_item("1").text(0)  # the region's bound, under its title
    # the times without their unit: the header says it, so the names keep the panel's width
    assert legend.tree.headerItem().text(1) == "ms" and legend.item_of(BRANCHES[0]).text(1) == "190.82"
    # a one-word name too long for its line wraps at its joint rather than being cut
    assert legend.item_of("branch_pool").text(0).replace("\n", "") == "branch_pool"
    # the word the siblings share goes first where the name does not fit: what tells them apart stays
    assert legend.item_of(BRANCHES[2]).text(0).replace("\n", " ") == "3x3dbl_1 → 3x3dbl_2 → 3x3dbl_3"
    # a legend wide enough shows the names whole, on one line
    wide = show(qtbot, BranchLegend(), 900, 400)
    wide.set_trace(load_trace(tmp_path / "t.json"))
    qtbot.waitUntil(lambda: [wide.item_of(n).text(0) for n in BRANCHES] == list(BRANCHES))


def test_the_legends_empty_line_and_the_details_values_wrap_at_1280x720(window, qtbot, tmp_path):
    panel = _presentation_window(window, qtbot, write_inception_trace(tmp_path / "branches.json", branches=()))
    legend = panel.legend
    empty = legend.tree.topLevelItem(0)
    assert empty.text(0).replace("\n", " ") == "no branches in this trace" and empty.isFirstColumnSpanned()
    room = legend.tree.viewport().width() - 8
    fm = legend.tree.fontMetrics()
    lines = empty.text(0).split("\n")
    assert all(fm.horizontalAdvance(line) <= room for line in lines)
    assert legend.tree.visualItemRect(empty).height() >= len(lines) * fm.lineSpacing()
    # the details panel's values break inside a word too long for their column ("trace.json.g" was cut)
    assert "branches.\u200bjson" in panel.details.body.text()
