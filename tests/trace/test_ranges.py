"""Range and step tables (profiling.trace.ranges) on synthetic traces with known answers, no Qt."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from branchscope.profiling.trace.analyses import merged_intervals
from branchscope.profiling.trace.model import Lane
from branchscope.profiling.trace.ranges import branch_order, branch_totals, range_ops, step_table
from tests.builders.events import trace_of

LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "PTThreadPool", "interop"),
    Lane(2, "cpu", 1, 12, "PTThreadPool", "interop"),
]


def _trace(events, info=None, lanes=LANES):
    """events: (lane, name, start_ns, dur_ns)."""
    return trace_of(events, lanes, metadata={"branchscope": info} if info is not None else None)


NESTED = [
    (0, "outer", 0, 1000),
    (0, "mm", 100, 200),  # 100..300
    (0, "mm", 600, 300),  # 600..900
    (0, "k", 650, 50),  # inside the second mm
    (1, "mm", 0, 100),  # ends before the range
    (1, "mm", 750, 450),  # 750..1200: clipped at the range's end
    (1, "mark", 500, 0),  # zero-length, inside
    (1, "add", 900, 50),  # after the range
]


def _by(rows):
    return {(r.name, r.lane): (r.count, r.total_ns, r.self_ns) for r in rows}


def test_range_ops_clip_at_the_range_ends_and_self_time_subtracts_children():
    rows = range_ops(_trace(NESTED), 200, 800)
    assert _by(rows) == {
        ("outer", 0): (1, 600, 300),  # 200..800, minus mm 200..300 and mm 600..800
        ("mm", 0): (2, 300, 250),  # 100 + 200, minus k's 50
        ("k", 0): (1, 50, 50),
        ("mm", 1): (1, 50, 50),  # 750..800
        ("mark", 1): (1, 0, 0),
    }
    assert [r.name for r in rows][:2] == ["outer", "mm"]  # longest first
    assert rows[0].lane_label == "main"
    assert _by(range_ops(_trace(NESTED), 800, 200)) == _by(rows)  # ends in either order


def test_range_ops_outside_every_event_is_empty():
    trace = _trace(NESTED)
    assert range_ops(trace, 5000, 6000) == []
    assert range_ops(trace, 1000, 1000) == []


@st.composite
def _nested_lane(draw):
    """Properly nested events of one lane: intervals split recursively."""
    events = []

    def fill(lo, hi, depth):
        t = lo
        while t < hi and depth < 4:
            gap = draw(st.integers(0, 50))
            dur = draw(st.integers(0, 200))
            s, e = t + gap, min(t + gap + dur, hi)
            if s >= hi:
                break
            events.append((0, draw(st.sampled_from(["a", "b", "c"])), s, e - s))
            if e - s > 2 and draw(st.booleans()):
                fill(s + 1, e - 1, depth + 1)
            t = e
            if not draw(st.booleans()):
                break

    fill(0, 2000, 0)
    return events


@settings(max_examples=60, deadline=None)
@given(_nested_lane(), st.integers(-100, 2100), st.integers(-100, 2100))
def test_self_times_of_a_lane_add_up_to_its_busy_time_in_the_range(events, a, b):
    if not events:
        return
    trace = _trace(events, lanes=LANES[:1])
    t0, t1 = min(a, b), max(a, b)
    rows = range_ops(trace, t0, t1)
    starts, ends = merged_intervals(trace.start_ns, trace.end_ns)
    busy = int(np.maximum(np.minimum(ends, t1) - np.maximum(starts, t0), 0).sum())
    assert sum(r.self_ns for r in rows) == busy
    for r in rows:
        assert 0 <= r.self_ns <= r.total_ns <= r.count * max(0, t1 - t0)
    # and each name's total is its events' clipped durations
    for name in {e[1] for e in events}:
        total = sum(max(0, min(s + d, t1) - max(s, t0)) for _, n, s, d in events if n == name)
        assert sum(r.total_ns for r in rows if r.name == name) == total


INFO = {
    "mode": "fork",
    "branches": [
        {"name": "right", "region": "1"},
        {"name": "left", "region": "1"},
        {"name": "left.inner", "region": "1.1", "depth": 1, "parent": "left"},
        {"name": "late", "region": "10"},
        {"name": "second", "region": "2"},
    ],
}


def test_branch_order_is_the_models_by_region_then_name_whatever_ran_first():
    # events name "right" before "left", and a branch the run info does not list
    trace = _trace(
        [(1, "branch: right", 0, 10), (2, "branch: left", 5, 10), (1, "branch: extra", 20, 5)], INFO
    )
    assert branch_order(trace) == ["left", "right", "left.inner", "second", "late", "extra"]
    assert branch_order(trace, ["zzz"]) == ["left", "right", "left.inner", "second", "late", "extra", "zzz"]
    bare = _trace([(1, "branch: right", 0, 10), (2, "branch: a -> b", 5, 10)])
    assert branch_order(bare) == ["a → b", "right"]


def test_branch_totals_sum_each_branchs_annotations():
    trace = _trace(
        [
            (1, "branch: left", 0, 100),
            (1, "branch: left", 300, 50),
            (2, "branch: right", 0, 70),
            (2, "aten::mm", 10, 20),
        ],
        INFO,
    )
    assert branch_totals(trace) == {
        "left": 150,
        "right": 70,
        "left.inner": 0,
        "second": 0,
        "late": 0,
    }


def test_step_table_gives_each_steps_duration_and_branch_time_clipped_to_it():
    events = [
        (0, "step 1", 0, 1000),
        (0, "step 2", 1200, 800),
        (1, "branch: left", 100, 500),
        (2, "branch: right", 150, 300),
        (1, "branch: left.inner", 200, 100),
        (1, "branch: left", 1300, 400),
        (2, "branch: right", 900, 500),  # 900..1400: 100 in step 1, 200 in step 2
        (0, "aten::add", 1900, 50),
    ]
    rows = step_table(_trace(events, INFO))
    assert [(r.label, r.start_ns, r.dur_ns) for r in rows] == [("step 1", 0, 1000), ("step 2", 1200, 800)]
    assert rows[0].branch_ns == {"left": 500, "right": 400, "left.inner": 100, "second": 0, "late": 0}
    assert rows[1].branch_ns == {"left": 400, "right": 200, "left.inner": 0, "second": 0, "late": 0}
    assert list(rows[0].branch_ns) == ["left", "right", "left.inner", "second", "late"]


def test_step_table_counts_only_the_steps_own_process():
    lanes = [Lane(0, "cpu", 1, 1, "main", "main", rank=0), Lane(1, "cpu", 2, 1, "main", "main", rank=1)]
    events = [
        (0, "step 1", 0, 1000),
        (1, "step 1", 0, 1000),
        (0, "branch: a", 0, 100),
        (1, "branch: a", 0, 300),
    ]
    rows = step_table(_trace(events, lanes=lanes))
    assert sorted((r.lane, r.branch_ns["a"]) for r in rows) == [(0, 100), (1, 300)]


def test_step_table_falls_back_to_profiler_steps_and_is_empty_without_steps():
    rows = step_table(_trace([(0, "ProfilerStep#7", 0, 100), (0, "ProfilerStep#8", 100, 50)]))
    assert [(r.label, r.dur_ns, r.branch_ns) for r in rows] == [
        ("ProfilerStep#7", 100, {}),
        ("ProfilerStep#8", 50, {}),
    ]
    assert step_table(_trace([(0, "aten::mm", 0, 10)])) == []
