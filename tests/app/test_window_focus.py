"""Issue 22, item 8: after File › Open the timeline's keys work without a click first, and an event
clicked while the Range tab is in front shows its details."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from branchscope.app.pages.run_page import RunPage
from tests.builders.runs import write_small_trace


def test_a_trace_opened_takes_the_keyboard_to_its_timeline(window, qtbot, tmp_path):
    window.activateWindow()
    window.runs.setFocus()  # somewhere else first, as after a dialog
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not window.page(RunPage).timeline)
    assert window.open_trace_files([str(write_small_trace(tmp_path / "a.json"))]) == 1
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.page(RunPage).timeline, timeout=30_000)


def test_an_event_clicked_while_the_range_tab_is_in_front_shows_its_details(window, tmp_path):
    assert window.open_trace_files([str(write_small_trace(tmp_path / "a.json"))]) == 1
    panels = window.side_panel
    panels.tabs.setCurrentWidget(panels.ranges)
    trace = window.page(RunPage).timeline.trace
    op = next(i for i in range(len(trace)) if trace.event_name(i).startswith("aten::"))
    window.page(RunPage).timeline.select_event(op)
    assert panels.tabs.currentWidget() is panels.details
    shown = panels.details.body.text().replace("\u200b", "")  # long words get zero-width break points
    assert panels.details.title.text() == "Event" and trace.event_name(op) in shown
    # Escape (no event) leaves whatever tab is in front
    panels.tabs.setCurrentWidget(panels.ranges)
    window.page(RunPage).timeline.select_event(-1)
    assert panels.tabs.currentWidget() is panels.ranges


def test_zoom_to_step_shows_that_step_alone(window, tmp_path):
    """Issue 22, item 9 (`open --zoom-step N`): the time axis spans step N exactly."""
    assert window.open_trace_files([str(write_small_trace(tmp_path / "a.json"))]) == 1
    assert window.page(RunPage).step_labels() == ["step 0", "step 1"]
    from branchscope.profiling.trace.ranges import step_table

    step = next(r for r in step_table(window.page(RunPage).timeline.trace) if r.label == "step 1")
    assert window.page(RunPage).zoom_to_step(1)
    lo, hi = window.page(RunPage).timeline.time_range()
    assert abs(lo - step.start_ns) <= 1 and abs(hi - (step.start_ns + step.dur_ns)) <= 1
    assert not window.page(RunPage).zoom_to_step(5) and window.page(RunPage).timeline.time_range() == (lo, hi)


def test_zoom_to_step_takes_torch_profilers_step_numbers(window, tmp_path):
    """`open --zoom-step 2` on a kineto trace whose steps are `ProfilerStep#N` (a torch.profiler
    schedule's numbers) shows ProfilerStep#2, the first rank's; it refused them ("no profiled step 2
    (its steps: ProfilerStep#0, …)")."""
    from branchscope.profiling.trace.ranges import step_table
    from tests.builders.ranks import write_rank_job

    job = write_rank_job(tmp_path / "job", ranks=2, steps=3)
    assert window.open_trace_files([str(job / "rank-0.json")]) == 1
    page = window.page(RunPage)
    assert page.step_labels() == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    step = next(r for r in step_table(page.timeline.trace) if r.label == "ProfilerStep#2")
    assert page.zoom_to_step(2)
    lo, hi = page.timeline.time_range()
    assert abs(lo - step.start_ns) <= 1 and abs(hi - (step.start_ns + step.dur_ns)) <= 1
    assert not page.zoom_to_step(3) and page.timeline.time_range() == (lo, hi)
