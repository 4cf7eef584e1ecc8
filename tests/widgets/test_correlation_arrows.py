"""The arrow of a launch to its kernel where only correlation ids give it (the public two-rank trace
has no flow events): drawn on the timeline when the launch or the kernel is selected, in the window
too, and said in the details panel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from branchscope.profiling import load_trace
from branchscope.widgets.details_panel import DetailsPanel
from tests.widgets.test_flows import assert_the_arrow_is_drawn_both_ways


@pytest.fixture(scope="module")
def rank0(shared_traces: Path):
    return load_trace(shared_traces / "hta_two_ranks" / "rank-0.json.gz")


def _launch_and_kernel(trace) -> tuple[int, int]:
    """The first cudaLaunchKernel by start and the kernel its correlation id names."""
    launches = [i for i in np.argsort(trace.start_ns, kind="stable").tolist() if trace.event_name(i) == "cudaLaunchKernel"]
    corr = trace.event_args(launches[0])["correlation"]
    gpu = np.flatnonzero(trace.lane_kind_codes[trace.lane] == 1).tolist()
    (kernel,) = [k for k in gpu if trace.event_args(k).get("correlation") == corr]
    return launches[0], kernel


def test_selecting_a_launch_draws_the_arrow_its_correlation_id_gives(rank0, qtbot):
    launch, kernel = _launch_and_kernel(rank0)
    assert_the_arrow_is_drawn_both_ways(qtbot, rank0, launch, kernel)


def test_details_say_what_the_launch_launched_and_by_what_the_kernel(rank0, qtbot):
    launch, kernel = _launch_and_kernel(rank0)
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.show_event(rank0, launch)
    assert dict(panel.rows)["Launches"].startswith(rank0.event_name(kernel))
    panel.show_event(rank0, kernel)
    assert dict(panel.rows)["Launched by"].startswith("cudaLaunchKernel")


def test_the_window_draws_the_arrow_on_the_opened_two_rank_job(window, qtbot, shared_traces: Path):
    from branchscope.app.pages.run_page import RunPage

    window.resize(1600, 1000)
    window.open_trace_files([str(shared_traces / "hta_two_ranks" / f"rank-{r}.json.gz") for r in (0, 1)])
    timeline = window.page(RunPage).timeline
    qtbot.waitUntil(lambda: timeline.trace is not None and len(timeline.trace.flows) > 0, timeout=30_000)
    trace = timeline.trace
    f = trace.flows
    k = int(np.flatnonzero(np.array([trace.event_name(int(s)) == "cudaLaunchKernel" for s in f.src]))[0])
    launch, kernel = int(f.src[k]), int(f.dst[k])
    timeline.zoom_to_event(launch)
    timeline.select_event(launch)
    window.grab()
    assert timeline.flow_arrows == [(launch, kernel)] and timeline.drawn_arrows == [(launch, kernel)]
    assert dict(window.side_panel.details.rows)["Launches"].startswith(trace.event_name(kernel))
