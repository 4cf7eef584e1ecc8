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
