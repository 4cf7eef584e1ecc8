"""The window says a fork or threads run's speedup in its parts (plan × threads) where its sequential
1×J and M 1×J runs are listed: the runs list's speedup cell short ("2.00× (1.25× plan × 1.60×
threads)") with the sentence in its tooltip, and the Compare page a line per run under the advice
and a summary row. Run folders from the builders, no torch (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.runs_table import SPEEDUP
from tests.builders.runs import write_run_json, write_small_trace, write_timed_run

TS = "TorchScript's plan"
SENTENCE = "fork 2×1 over sequential 1×1, in parts: 2.00× = 1.25× from TorchScript's plan × 1.60× from 2 threads"
PREDICTION = {"by_threads": {"2": 1.8}, "step_ms": 50.0, "serial_ms": 5.0, "from": "test"}


def _steps(ms: float) -> list[float]:
    return [ms - 1.0, ms - 0.5, ms, ms + 0.5, ms + 1.0]


@pytest.fixture
def folders(tmp_path) -> list[Path]:
    """sequential 1×1 (50 ms), fork 1×1 (40 ms), fork 2×1 (25 ms) of one model, and fork 2×1 of another."""
    return [
        write_timed_run(tmp_path / "seq11", "sequential", 1, 1, _steps(50.0), plan_by="the model's own forward"),
        write_timed_run(tmp_path / "fork11", "fork", 1, 1, _steps(40.0), plan_by=TS),
        # a run.json of before plan_by: the window names fork's plan from the modes registry
        write_timed_run(tmp_path / "fork21", "fork", 2, 1, _steps(25.0), prediction=PREDICTION),
        _other_model(tmp_path / "other21"),
    ]


def _other_model(folder: Path) -> Path:
    """fork 2×1 (25 ms) of the twin-mm demo."""
    folder.mkdir(parents=True)
    write_small_trace(folder / "trace.json.gz", "fork")
    return write_run_json(folder, mode="fork", interop=2, intra=1, cores=2, model="demo twin-mm", source="demo",
                          unprofiled_steps_ms=_steps(25.0), steps_ms=_steps(25.0), plan_by=TS)  # fmt: skip


def _speedups(window) -> list[tuple[str, str]]:
    model = window.runs.model()
    cells = [model.index(r, SPEEDUP) for r in range(model.rowCount())]
    return [(c.data(), c.data(Qt.ItemDataRole.ToolTipRole)) for c in cells]


def test_the_runs_list_says_the_parts_short_and_their_sentence_in_the_tooltip(window, folders):
    assert window.open_trace_files([str(p) for p in folders]) == 4
    (seq, _), (one, _), (two, tip), (other, other_tip) = _speedups(window)
    # Runs from disk have no baseline until one is set; the parts need none.
    assert two == "1.25× plan × 1.60× threads"  # not "– (…)" in a narrow column
    assert f"{SENTENCE} (#1 and #2)" in tip.splitlines()
    assert (seq, one, other) == ("–", "–", "–") and "in parts" not in other_tip  # another model's runs never count
    window.run_list.set_baseline(0)
    (seq, _), (one, _), (two, tip), _ = _speedups(window)
    assert (seq, one, two) == ("baseline", "1.25×", "2.00×")  # the parts in its tooltip
    assert tip.startswith("2.00× vs #1 sequential 1×1") and f"{SENTENCE} (#1 and #2)" in tip.splitlines()
    # Taking fork 1×1 out of the list takes the parts with it.
    window.run_list.remove(1)
    assert _speedups(window)[1][0] == "2.00×"


def test_the_compare_page_says_the_parts_in_its_header_and_summary(window, folders):
    assert window.open_trace_files([str(p) for p in folders[:3]]) == 3
    window.runs.selectAll()
    window.compare_button.click()
    view = window.page(ComparePage)
    assert window.tabs.currentWidget() is view
    assert view.parts_label.isVisible() and view.parts_label.text() == f"run 2: {SENTENCE}"
    table = view.summary_table
    rows = {table.verticalHeaderItem(r).text(): r for r in range(table.rowCount())}
    cells = [table.item(rows["speedup in parts"], k) for k in range(3)]
    assert [c.text() for c in cells] == ["–", "–", "1.25× plan × 1.60× threads"]
    assert cells[2].toolTip() == SENTENCE
    # The bound on 2 threads (1.8×) is held against the part from the threads (1.6×), not the whole (2.0×).
    bound = table.item(rows["measured ÷ could give"], 2)
    assert bound.text() == "89 % of 1.80× (its threads)"
    assert bound.toolTip() == "1.60× from its 2 threads (over fork 1×1): 89% of the 1.80× bound"


def test_the_compare_page_without_a_fork_1xj_says_no_parts(window, folders):
    assert window.open_trace_files([str(folders[0]), str(folders[2])]) == 2
    window.runs.selectAll()
    window.compare_button.click()
    view = window.page(ComparePage)
    assert not view.parts_label.isVisible() and view.parts_label.text() == ""
