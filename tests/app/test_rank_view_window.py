"""A large job in the window (issue 23): a folder of more ranks than `rank_job.ALL_RANKS_UP_TO`
opens with every rank in the overview and only the ranks in view loaded (those that stand out);
a click on another rank loads its events off the GUI thread, lets the least recently wanted rank
go and shows the new rank's lanes."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from branchscope.app.pages.run_page import RunPage
from branchscope.profiling.trace import rank_job
from branchscope.profiling.trace.rank_job import job_of
from tests.builders.ranks import write_rank_job

RANKS = 12


@pytest.fixture(autouse=True)
def _no_jobs_kept(monkeypatch):
    monkeypatch.setattr(rank_job, "_JOBS", type(rank_job._JOBS)())


def _lane_ranks(window) -> set[int]:
    return {ln.rank for ln in window.page(RunPage).workspace.rows[0].shown.trace.lanes}


def test_a_large_job_opens_with_its_ranks_in_view_and_loads_a_clicked_one(window, qtbot, tmp_path):
    folder = write_rank_job(tmp_path / "job", RANKS, steps=4, slow={9: {2: 600}}, heavy=(4, 8 << 20))
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        window.open_in_background([str(folder)])
    assert window.runs_table.rowCount() == 1
    overview = window.page(RunPage).workspace.rank_overview
    job = job_of(window.run_list.current_entry.trace)
    assert job is not None and overview.isVisible() and overview.figures.ranks == list(range(RANKS))
    in_view = set(job.first_view())
    assert {4, 9} <= in_view and _lane_ranks(window) == in_view == overview.loaded
    assert f"the events of {rank_job.IN_VIEW} of {RANKS} ranks loaded" in overview.caption.text()
    labels = [text for _, text in overview.heat.getAxis("left")._tickLevels[0]]
    assert "● rank 9" in labels and "rank 10" in labels
    wanted = max(set(range(RANKS)) - in_view)
    overview._on_move(overview.graphics.mapToScene(overview.rank_point(wanted)))
    assert overview.graphics.toolTip().endswith("its events not loaded: click to load them")
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        qtbot.mouseClick(overview.graphics.viewport(), Qt.MouseButton.LeftButton, pos=overview.rank_point(wanted))
    qtbot.waitUntil(lambda: wanted in _lane_ranks(window), timeout=10_000)
    dropped = job.first_view()[0]  # the least recently wanted: the first of the first view
    assert _lane_ranks(window) == (in_view - {dropped}) | {wanted} and overview.loaded == _lane_ranks(window)
    assert job_of(window.run_list.current_entry.trace) is job
    timeline = window.page(RunPage).timeline
    lane = next(ln.index for ln in timeline.trace.lanes if ln.rank == wanted)
    qtbot.waitUntil(lambda: timeline.lane_layout.lane_extent(lane) is not None)
    top, _ = timeline.lane_layout.lane_extent(lane)
    assert timeline.scroll_y <= top < timeline.scroll_y + timeline.height()
    # A rank in view is only shown, nothing read.
    loaded = window.run_list.current_entry.trace
    with qtbot.assertNotEmitted(window.loader.started):
        qtbot.mouseClick(overview.graphics.viewport(), Qt.MouseButton.LeftButton, pos=overview.rank_point(wanted))
    assert window.run_list.current_entry.trace is loaded
