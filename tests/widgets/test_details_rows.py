"""The details panel's summary of a trace names its measures the way the compare view does."""

from __future__ import annotations

from branchscope.profiling import load_trace
from branchscope.widgets.details_panel import trace_summary_rows
from tests.builders.runs import write_small_trace


def test_parallelism_cores_used_and_pool_share_are_named_apart(tmp_path):
    rows = dict(trace_summary_rows(load_trace(write_small_trace(tmp_path / "t.json", "fork"))))
    assert rows["Parallelism"].endswith("threads computing on average in the profiled steps")
    assert rows["Cores used"].endswith("on average in the profiled steps (CPU samples)")
    assert rows["Inter-op pool"].startswith("2 threads, busy ")


def test_a_threads_run_names_its_python_pool_and_says_the_gil(tmp_path):
    from branchscope.widgets.timeline_layout import group_of

    trace = load_trace(write_small_trace(tmp_path / "t.json", "threads"))
    rows = dict(trace_summary_rows(trace))
    assert rows["Python pool"].startswith("2 threads, busy ") and "Inter-op pool" not in rows
    assert rows["Python"] == "3.11.7"
    assert rows["GIL"].startswith("branch threads: 55% computing, 5% waiting for a core, 40% waiting for the GIL")
    pool = trace.lane_indices("cpu", "interop")[0]
    assert group_of(trace, int(pool), False)[1] == "Python pool"  # the timeline's group
    free = dict(trace_summary_rows(load_trace(write_small_trace(tmp_path / "f.json", "threads", gil=False))))
    assert free["GIL"] == "free-threaded Python 3.13.1: no GIL"
    fork = load_trace(write_small_trace(tmp_path / "k.json", "fork"))
    assert "GIL" not in dict(trace_summary_rows(fork))
    assert group_of(fork, int(fork.lane_indices("cpu", "interop")[0]), False)[1] == "inter-op pool"
