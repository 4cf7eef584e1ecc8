"""The Run page's header and the run controls' "shown" line in front of a class (issue 35, items 12
and 13): two lines at most for the header and one for the shown line, at 1920×1080 and at a
projector's 1280×720, whatever their text; "machine busy" said once; the whole text in the
tooltip (pytest-qt, offscreen, run folders written by the tests: no torch)."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QFontMetrics

from branchscope.app.pages.run_page import RunPage
from tests.builders.runs import write_run_folder

BUSY = {"cores": 2, "others_cores": 1.5, "busy": True, "loadavg_start": 5.8, "loadavg_end": 5.6}
WARNINGS = ["warm-up reached its cap of 200 steps after 200 steps without settling", "profiler overhead ×0.07"]
PREDICTION = {"by_threads": {"2": 1.98, "4": 3.78}, "from": "5 sequential steps measured in the worker"}


def _lines_fit(label, most: int) -> bool:
    """Whether `label` draws at most `most` lines, none wider than it is."""
    fm = QFontMetrics(label.font())
    return label.height() <= most * fm.lineSpacing() + 2 * label.margin() + 6 and label.text().count("<br>") < most


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720)])
def test_the_header_of_a_busy_run_and_its_busy_baseline_is_two_lines_saying_busy_once(window, qtbot, tmp_path, size):
    window.resize(*size)
    seq = write_run_folder(tmp_path / "runs" / "seq", "sequential", 1, 1, 40.0, load=BUSY)
    fork = write_run_folder(tmp_path / "runs" / "a-fork-run-with-a-long-folder-name", "fork", 2, 1, 41.0, load=BUSY,
                            warnings=WARNINGS, prediction=PREDICTION)  # fmt: skip
    assert window.open_trace_files([str(seq), str(fork)]) == 2
    window.run_list.set_baseline(0)  # runs from disk: a baseline only when the user sets one
    header = window.page(RunPage).summary_line
    qtbot.waitUntil(lambda: "slower than" in header.whole_text())
    qtbot.waitUntil(lambda: header.width() > 0 and header.text().count("<br>") == 1)
    whole = header.whole_text()
    assert whole.count("machine busy") == 1 and "machine busy while this run and its baseline timed their steps" in whole
    assert "⚠ 2 warnings" in whole
    assert _lines_fit(header, 2)
    # the loads and the warnings, whole, in its tooltip
    tip = header.toolTip()
    assert "this run's other processes used 1.50 of 2 cores" in tip and "the baseline's other processes used 1.50" in tip
    assert all(f"⚠ {w}" in tip for w in WARNINGS)
    # the run controls' "opened from disk" line: one line, cut to the panel, whole in its tooltip
    shown = window.controls.shown_label
    assert shown.whole_text().startswith("opened from disk: runs/a-fork-run-with-a-long-folder-name — #2 inception · fork")
    assert shown.toolTip() == shown.whole_text()
    assert _lines_fit(shown, 1)
    window.menus.scale_text(2)  # larger text: still two lines and one
    qtbot.waitUntil(lambda: header.height() >= QFontMetrics(header.font()).lineSpacing() * 2)
    assert _lines_fit(header, 2) and _lines_fit(shown, 1)


def test_elided_lines_flow_into_their_rows_and_cut_the_last(qtbot):
    from branchscope.app.elided_lines import ElidedLines

    label = ElidedLines(2)
    qtbot.addWidget(label)
    label.resize(300, 80)
    long = "word " * 80
    label.set_lines([[("title", "bold"), (": " + long, "")], [("a note", "#c0392b")]], more="more")
    rows = label.rows()
    assert len(rows) == 2 and rows[1][-1][0].endswith("…")  # the first line takes both rows, cut
    fm = QFontMetrics(label.font())
    assert all(sum(fm.horizontalAdvance(t) for t, _ in row) <= 300 + fm.horizontalAdvance("title") for row in rows)
    assert label.whole_text() == "title: " + long + "\na note" and label.toolTip() == label.whole_text() + "\nmore"
    label.resize(4000, 80)  # room for all: a row each
    assert ["".join(t for t, _ in row) for row in label.rows()] == ["title: " + long, "a note"]
    label.set_plain("")
    assert label.isHidden() and label.rows() == []
