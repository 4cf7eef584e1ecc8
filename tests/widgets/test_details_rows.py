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


def test_the_threads_row_counts_what_the_mode_computes_with(tmp_path):
    """Sequential I×J computes with its J intra-op threads, never "oversubscribed" by I; fork with
    I pool threads × J each (issue 35, finding 5: the row said I×J whatever the mode)."""
    import msgspec

    said = {
        "sequential": "2 intra-op threads on 2 cores (inter-op 2 unused: sequential runs no pool)",
        "fork": "2 inter-op pool threads × 2 intra-op = 4 threads on 2 cores — oversubscribed",
    }
    for mode, words in said.items():
        trace = load_trace(write_small_trace(tmp_path / f"{mode}.json", mode))
        assert trace.run_info is not None
        trace.run_info = msgspec.structs.replace(trace.run_info, intra=2)  # type: ignore[misc]
        assert dict(trace_summary_rows(trace))["Threads"] == words
