"""Analyses on small hand-made traces, where the right answer is known exactly."""

from __future__ import annotations

import numpy as np

from branchscope.profiling.trace.analyses import (
    branch_assignment,
    concurrency,
    interop_occupancy,
    lane_busy_ns,
    memory_imbalance,
    merged_intervals,
    parallelism,
)
from branchscope.profiling.trace.model import Lane, MemorySeries, build_trace


def _trace(events, lanes, memory=None, metadata=None):
    """events: (lane, name, start, dur) tuples in any order."""
    names = sorted({e[1] for e in events})
    return build_trace(
        path="synthetic",
        start_ns=np.array([e[2] for e in events]),
        dur_ns=np.array([e[3] for e in events]),
        lane=np.array([e[0] for e in events]),
        name_id=np.array([names.index(e[1]) for e in events]),
        cat_id=np.zeros(len(events), dtype=np.int32),
        names=names,
        cats=["cpu_op"],
        lanes=lanes,
        memory=memory,
        metadata=metadata,
    )


MAIN = Lane(0, "cpu", 1, 1, "thread 1 (pt_main_thread)", "main")
POOL_A = Lane(1, "cpu", 1, 2, "thread 2 (PTThreadPool)", "interop")
POOL_B = Lane(2, "cpu", 1, 3, "thread 3 (PTThreadPool)", "interop")


def test_depth_from_nesting_and_sorting():
    t = _trace([(0, "child", 10, 5), (0, "parent", 0, 100), (0, "grandchild", 11, 2), (0, "next", 100, 5)], [MAIN])
    assert [t.event_name(i) for i in range(len(t))] == ["parent", "child", "grandchild", "next"]
    assert t.depth.tolist() == [0, 1, 2, 0]


def test_zero_length_events_nest_like_instants():
    # An instant at the end of an event is outside it; one at the start of an event is inside it.
    t = _trace([(0, "a", 0, 10), (0, "z", 10, 0), (0, "b", 20, 5), (0, "y", 20, 0)], [MAIN])
    assert [t.event_name(i) for i in range(len(t))] == ["a", "z", "b", "y"]
    assert t.depth.tolist() == [0, 0, 0, 1]


def test_merged_intervals_union():
    s, e = merged_intervals(np.array([0, 5, 20, 22]), np.array([10, 8, 25, 30]))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 30]


def test_busy_time_counts_nesting_once():
    t = _trace([(0, "p", 0, 100), (0, "c", 10, 50), (0, "q", 200, 10)], [MAIN])
    assert lane_busy_ns(t).tolist() == [110]


def test_interop_occupancy_steps_against_pool_size():
    events = [(0, "main", 0, 100), (1, "x", 10, 40), (2, "y", 30, 40), (1, "z", 50, 10)]
    t = _trace(events, [MAIN, POOL_A, POOL_B], metadata={"branchscope": {"interop": 4}})
    occ = interop_occupancy(t)
    assert occ.capacity == 4
    # Pool A busy 10-60 (two back-to-back events), pool B busy 30-70.
    assert occ.t_ns.tolist() == [10, 30, 60, 70]
    assert occ.value.tolist() == [1, 2, 1, 0]
    assert occ.at(35) == 2 and occ.at(5) == 0


def test_back_to_back_work_is_not_counted_twice():
    occ = concurrency([(np.array([0]), np.array([10])), (np.array([10]), np.array([20]))], 2)
    assert occ.value.max() == 1


def test_parallelism_is_busy_sum_over_span():
    t = _trace([(0, "a", 0, 100), (1, "b", 0, 50), (2, "c", 50, 50)], [MAIN, POOL_A, POOL_B])
    assert parallelism(t) == 2.0


def test_memory_imbalance_max_over_mean():
    def series(device, peak):
        return MemorySeries(device, np.array([0, 1]), np.array([peak, -peak]), np.array([peak, 0]))

    t = _trace([(0, "a", 0, 1)], [MAIN], memory=[series("cuda:0", 300), series("cuda:1", 100), series("cpu", 5)])
    assert memory_imbalance(t, "cuda") == 300 / 200
    assert memory_imbalance(t, "mps") is None


def test_branch_assignment_by_enclosing_annotation_per_lane():
    events = [
        (0, "step 0", 0, 100),
        (0, "branch: left", 5, 40),
        (0, "aten::mm", 10, 10),
        (1, "branch: right", 6, 50),
        (1, "aten::add", 20, 5),
        (0, "aten::cat", 60, 10),
    ]
    t = _trace(events, [MAIN, POOL_A])
    result = branch_assignment(t)
    assert sorted(result.names) == ["left", "right"]
    by_name = {t.event_name(i): result.event_branch[i] for i in range(len(t))}
    assert result.names[by_name["aten::mm"]] == "left"
    assert result.names[by_name["aten::add"]] == "right"
    assert by_name["aten::cat"] == -1 and by_name["step 0"] == -1


def test_child_outliving_parent_gets_its_own_row():
    # Rounding makes "inner" end 1 ns after "outer"; "late" starts after outer ended but inside inner.
    events = [(0, "outer", 0, 100), (0, "inner", 10, 91), (0, "late", 100, 1)]
    t = _trace(events, [MAIN])
    by_name = {t.event_name(i): int(t.depth[i]) for i in range(len(t))}
    assert by_name == {"outer": 0, "inner": 1, "late": 2}
    # No two events on one row overlap.
    for d in set(by_name.values()):
        rows = sorted((int(t.start_ns[i]), int(t.end_ns[i])) for i in range(len(t)) if t.depth[i] == d)
        assert all(a[1] <= b[0] for a, b in zip(rows, rows[1:]))


def test_event_at_finds_the_deepest_event_even_inside_a_long_parent():
    children = [(0, f"op{i}", 10 + 3 * i, 2) for i in range(6000)]
    t = _trace([(0, "step 1", 0, 20_000), *children], [MAIN])
    step = next(i for i in range(len(t)) if t.event_name(i) == "step 1")
    assert t.event_at(0, 13) == next(i for i in range(len(t)) if t.event_name(i) == "op1")
    # Between two children, and far from the parent's start: the parent.
    assert t.event_at(0, 10 + 3 * 5000 + 2) == step
    assert t.event_at(0, 20_000) == -1 and t.event_at(0, -1) == -1
    assert t.parent[t.event_at(0, 13)] == step
