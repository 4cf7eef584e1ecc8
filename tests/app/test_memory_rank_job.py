"""The Memory tab of a large job in the window (pytest-qt, offscreen): a bar for every rank, in
rank order, the loaded ranks' and the others' (the job's peaks); the headline's median over every
rank; a click on a rank not loaded loads it, then lists what was live at its peak."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt

from branchscope.app.pages.memory_page import MemoryPage
from branchscope.profiling.trace import rank_job
from branchscope.profiling.trace.rank_job import job_of
from tests.builders.ranks import write_rank_job

RANKS = 12


@pytest.fixture(autouse=True)
def _no_jobs_kept(monkeypatch):
    monkeypatch.setattr(rank_job, "_JOBS", type(rank_job._JOBS)())


def test_every_rank_has_a_bar_and_a_click_loads_one(window, qtbot, tmp_path):
    folder = write_rank_job(tmp_path / "job", RANKS, steps=4, heavy=(4, 8 << 20))
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        window.open_in_background([str(folder)])
    page = window.page(MemoryPage)
    summary = page.memory_summary
    job = job_of(window.run_list.current_entry.trace)
    assert job is not None
    loaded = {d.rank for d in page.analysis.devices}
    assert len(loaded) == rank_job.IN_VIEW and 4 in loaded
    assert [d.rank for d in summary.devices] == list(range(RANKS))  # rank 2 before rank 10
    assert f"of {RANKS} are loaded" in summary.words.text() and f"median of {RANKS}" in summary.words.text()
    assert summary.device == "rank4/cuda:4"  # the builder gives rank R the GPU cuda:R
    wanted = max(set(range(RANKS)) - loaded)
    device = f"rank{wanted}/cuda:{wanted}"
    assert "not loaded" in summary.bars["cuda"].tips[wanted]
    window.tabs.setCurrentWidget(page)
    x, y = summary.bar_center(device)
    with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
        qtbot.mouseClick(summary.chart.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(int(x), int(y)))
    qtbot.waitUntil(lambda: page.analysis is not None and device in page.analysis.series, timeout=10_000)
    assert summary.device == device and page.memory_table.device == device
    assert summary.rows() and "live at" in summary.caption.text()
