"""The rank overview: one strip per rank, each step's straggler outlined, the heaviest memory rank
marked, hover words, a click that emits `rankActivated` and, in the workspace, reveals that rank's
lanes; in the window when a rank folder is opened."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt

from branchscope.profiling.trace.sources import open_job
from branchscope.widgets.rank_overview import RankOverview
from branchscope.widgets.workspace import TraceWorkspace
from tests.builders.ranks import write_rank_job


@pytest.fixture
def job(tmp_path):
    """8 ranks × 4 steps: rank 5 slow in step 1, rank 6 in step 3; rank 3 holds 8 MiB more."""
    folder = write_rank_job(tmp_path / "job", 8, steps=4, slow={5: {1: 700}, 6: {3: 400}}, heavy=(3, 8 << 20))
    return open_job([str(folder)])


def _shown(qtbot, trace, height: int) -> RankOverview:
    view = RankOverview()
    qtbot.addWidget(view)
    view.resize(1000, height)
    view.set_trace(trace)
    view.show()
    qtbot.waitExposed(view)
    return view


@pytest.fixture
def overview(qtbot, job):
    return _shown(qtbot, job, 260)


def test_a_row_per_rank_the_stragglers_outlined_and_the_heavy_rank_marked(overview):
    f = overview.figures
    assert f is not None and f.ranks == list(range(8))
    assert overview.image.image.shape == (8, 4)  # rows = ranks, columns = steps
    # Only the steps with a straggler slower than the median: rank 5 in step 1, rank 6 in step 3.
    outlined = sorted((round(m.rect().y()), round(m.rect().x())) for m in overview.straggler_marks)
    assert outlined == [(5, 1), (6, 3)]
    assert overview.heavy_mark is not None and round(overview.heavy_mark.pos().y() - 0.5) == 3
    labels = [text for _, text in overview.heat.getAxis("left")._tickLevels[0]]
    assert labels == [f"rank {r}" for r in range(8)]
    assert "worst: rank 5 in ProfilerStep#1" in overview.caption.text() and "rank 3 (cuda:3)" in overview.caption.text()


def test_hover_says_rank_step_time_and_excess(overview):
    scene = overview.heat.getViewBox().mapViewToScene(QPointF(1.5, 5.5))
    where = overview.cell_at_scene(scene)
    assert where == ("heat", 5, 1)
    overview._on_move(scene)
    tip = overview.graphics.toolTip()
    assert tip.startswith("rank 5, ProfilerStep#1: 1.7 ms, +700 µs") and "slowest rank of this step" in tip
    memory = overview.memory_plot.getViewBox().mapViewToScene(QPointF(1.0, 3.5))
    assert "the heaviest: +8 MiB" in overview.describe(overview.cell_at_scene(memory))


def test_a_click_on_a_rank_emits_it(qtbot, overview):
    with qtbot.waitSignal(overview.rankActivated) as got:
        qtbot.mouseClick(overview.graphics.viewport(), Qt.MouseButton.LeftButton, pos=overview.rank_point(6, 2))
    assert got.args == [6]


def test_a_trace_of_one_rank_hides_it(qtbot, tmp_path):
    view = RankOverview()
    qtbot.addWidget(view)
    view.set_trace(open_job([str(write_rank_job(tmp_path / "one", 1) / "rank-0.json")]))
    assert view.figures is None and view.isHidden()


def test_256_ranks_compress_into_the_same_height_with_every_kth_labelled(qtbot, tmp_path):
    trace = open_job([str(write_rank_job(tmp_path / "big", 256, steps=10, slow={200: {4: 300}}))])
    view = _shown(qtbot, trace, 400)
    assert view.image.image.shape == (256, 10) and view.maximumHeight() <= 400 and view.planned_height() == 330
    labels = [text for _, text in view.heat.getAxis("left")._tickLevels[0]]
    assert 8 <= len(labels) <= 32 and labels[0] == "0"
    assert [(round(m.rect().y()), round(m.rect().x())) for m in view.straggler_marks] == [(200, 4)]
    with qtbot.waitSignal(view.rankActivated) as got:
        qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=view.rank_point(200, 4))
    assert got.args[0] in (199, 200, 201)  # a row is about a pixel high here
    # Only some ranks' events loaded (a large job, `rank_job`): those labelled ●, near ones together.
    view.set_figures(view.figures, loaded={0, 1, 200})
    ticks = view.heat.getAxis("left")._tickLevels[0]
    marked = [(y, text) for y, text in ticks if text.startswith("●")]
    assert marked == [(0.5, "● 0, 1"), (200.5, "● 200")]
    others = [y for y, text in ticks if not text.startswith("●")]
    assert others and all(abs(y - 200.5) >= 2 and y >= 2 for y in others)
    assert "the events of 3 of 256 ranks loaded (● 0, 1, 200)" in view.caption.text()
    assert view.describe(("busy", 7, 0)).endswith("its events not loaded: click to load them")
    assert "not loaded" not in view.describe(("busy", 200, 0))


def test_the_workspace_shows_it_for_a_job_and_a_click_reveals_that_ranks_lanes(qtbot, job):
    ws = TraceWorkspace()
    qtbot.addWidget(ws)
    ws.resize(1200, 700)
    ws.show()
    qtbot.waitExposed(ws)
    ws.show_traces([job])
    assert ws.rank_overview.isVisible() and not ws.rank_bar.isVisible()
    timeline = ws.panel("timeline")
    lane = int(ws.rank_overview.figures.first_lane[7])
    assert job.lanes[lane].rank == 7
    qtbot.waitUntil(lambda: timeline.lane_layout.lane_extent(lane) is not None)
    top, _ = timeline.lane_layout.lane_extent(lane)
    assert top >= timeline.scroll_y + timeline.height()  # rank 7 starts below what is in view
    with qtbot.waitSignal(ws.rank_overview.rankActivated):
        qtbot.mouseClick(
            ws.rank_overview.graphics.viewport(), Qt.MouseButton.LeftButton, pos=ws.rank_overview.rank_point(7)
        )
    top, h = timeline.lane_layout.lane_extent(lane)
    assert timeline.scroll_y <= top < timeline.scroll_y + timeline.height()
    ws.show_traces([job, job])  # two rows compared: the line instead
    assert not ws.rank_overview.isVisible() and ws.rank_bar.isVisible()

