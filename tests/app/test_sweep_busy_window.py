"""The Sweep tab and `branchscope sweep`'s summary on cells that ran on a busy machine or starved
of cores: each such cell is marked on the heatmap (a dashed outline, a ⚠ word under its time, why
in its tooltip, the legend), and the advice line names the busy cells it compares."""

from __future__ import annotations

import sys

import pytest

from branchscope.app.cmd_sweep import report
from branchscope.app.runs import RunSpec
from branchscope.app.sweep_controller import SweepController
from branchscope.app.sweep_panel import SweepPanel
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.sweep import load_sweep
from branchscope.widgets.sweep_view import BUSY_TEXT, STARVED_TEXT, SweepView
from tests.builders.runs import write_sweep_json
from tests.gui_helpers import show


def _cell(mode, interop, intra, ms, **kw):
    return {"mode": mode, "interop": interop, "intra": intra, "unprofiled_median_ms": ms, "median_ms": ms,
            "unprofiled_spread_ms": [ms - 1.0, ms - 0.5, ms + 0.5, ms + 1.0], "pass_medians_ms": [ms],
            "any_interop": mode == "sequential", **kw}  # fmt: skip


#: The evidence's sweep (21.png): threads 2×1 "beat" sequential 1×2 by 4.50×; sequential 1×2 ran on
#: a busy machine, threads 2×2 was starved of cores.
CELLS = [
    _cell("sequential", 1, 1, 48.4, busy=False),
    _cell("sequential", 1, 2, 222.7, busy=True),
    _cell("threads", 2, 1, 49.5, busy=False),
    _cell("threads", 2, 2, 34.3, busy=True, starved=True),
]


@pytest.fixture
def folder(tmp_path):
    return write_sweep_json(tmp_path / "sweep", CELLS, modes=["sequential", "threads"], interop=[2], intra=[1, 2],
                            passes=1, complete=True)  # fmt: skip


def _label(view: SweepView, index: int) -> str:
    cell = next(c for c in view.cells if c.index == index)
    plot = view.plots[cell.mode]
    at = (cell.x + cell.width / 2, cell.y + 0.5)
    return next(i.toPlainText() for i in plot.items if hasattr(i, "toPlainText") and (i.pos().x(), i.pos().y()) == at)


def test_busy_and_starved_cells_are_marked_with_why_in_their_tooltip_and_the_legend(qtbot, folder):
    view = show(qtbot, SweepView(), 900, 400)
    view.set_sweep(load_sweep(folder), folder)
    assert _label(view, 1) == "222.7 ms\n⚠ busy"
    assert _label(view, 3).endswith("34.3 ms\n⚠ starved")
    assert _label(view, 0) == "48.4 ms" and "⚠" not in _label(view, 2)
    assert len(view.load_marks) == 2  # a dashed outline on each, in its own plot
    assert {m.parentItem() for m in view.load_marks} == {
        view.plots["sequential"].getViewBox().childGroup, view.plots["threads"].getViewBox().childGroup}  # fmt: skip
    tips = {c.index: c.tooltip for c in view.cells}
    assert BUSY_TEXT in tips[1] and STARVED_TEXT in tips[3] and "⚠" not in tips[0] + tips[2]
    legend = view.legend.text()
    assert "⚠ dashed orange: starved of cores or ran on a busy machine, its time no claim (hover for why)" in legend
    assert BUSY_TEXT in view.legend.toolTip() and STARVED_TEXT in view.legend.toolTip()


def test_the_panels_advice_and_status_say_which_cells_ran_on_a_busy_machine(qtbot, folder):
    panel = SweepPanel(lambda: RunSpec("sequential", 1, 1, options=RunOptions(demo="twin-mm")), lambda _l: folder,
                       cores=2, controller=SweepController(command=[sys.executable, "-c", "pass"]))  # fmt: skip
    qtbot.addWidget(panel)
    assert panel.open_sweep(folder)
    advice = panel.advice.text()
    assert "threads 2×1 (49.5 ms) beat sequential 1×2 (222.7 ms) by 4.50×" in advice
    assert advice.endswith("(sequential 1×2 ran on a busy machine: re-run it on a quiet one)")
    assert "ran on a busy machine" in panel.advice.toolTip()
    assert panel.status.text().startswith("fastest: threads 2×2 (starved of cores), 34.30 ms")


def test_the_cli_summary_says_it_too(folder):
    text = report(load_sweep(folder), folder)
    assert "advice: " in text and "(sequential 1×2 ran on a busy machine: re-run it on a quiet one)" in text
    row = next(line for line in text.splitlines() if line.startswith("| sequential 1×2 "))
    assert "busy machine" in row
    assert "best: threads 2×2 (starved of cores)" in text


#: The teacher's sweep (21.png's cells): three modes at inter-op and intra-op 1, 2, some marked.
TEACHER = [
    _cell("sequential", 1, 1, 48.4), _cell("sequential", 1, 2, 222.7, busy=True),
    _cell("fork", 1, 1, 60.9), _cell("fork", 2, 1, 59.8), _cell("fork", 1, 2, 29.5), _cell("fork", 2, 2, 22.7),
    _cell("threads", 1, 1, 71.5), _cell("threads", 2, 1, 49.5, busy=True),
    _cell("threads", 1, 2, 42.4, starved=True), _cell("threads", 2, 2, 34.3, oversubscribed=True),
]  # fmt: skip


@pytest.mark.parametrize("size", [(1500, 560), (860, 380)])  # the Sweep tab's heatmap at 1920×1080 and 1280×720
def test_every_cells_words_fit_inside_it_at_a_projectors_size(qtbot, tmp_path, size):
    import pyqtgraph as pg
    from PySide6.QtCore import QPointF

    folder = write_sweep_json(tmp_path / "teacher", TEACHER, modes=["sequential", "fork", "threads"], interop=[1, 2],
                              intra=[1, 2], passes=3, complete=True)  # fmt: skip
    view = show(qtbot, SweepView(), *size)
    view.set_sweep(load_sweep(folder), folder)
    qtbot.waitUntil(lambda: all(p.getViewBox().width() > 0 for p in view.plots.values()))
    for cell in view.cells:
        vb = view.plots[cell.mode].getViewBox()
        left, right = vb.mapViewToScene(QPointF(cell.x, 0)).x(), vb.mapViewToScene(QPointF(cell.x + cell.width, 0)).x()
        label = next(i for i in view.plots[cell.mode].items if isinstance(i, pg.TextItem)
                     and (i.pos().x(), i.pos().y()) == (cell.x + cell.width / 2, cell.y + 0.5))  # fmt: skip
        assert label.textItem.boundingRect().width() <= right - left, (size, label.toPlainText())
