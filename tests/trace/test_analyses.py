"""Analyses on small hand-made traces, where the right answer is known exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from branchscope.profiling.trace.analyses import (
    branch_assignment,
    concurrency,
    cores_used,
    first_step_start,
    interop_occupancy,
    lane_busy_ns,
    lane_compute_runs,
    memory_imbalance,
    merged_intervals,
    parallelism,
    pool_busy_share,
    steps_window,
    subtract_intervals,
)
from branchscope.profiling.trace.model import CounterTrack, Lane, MemorySeries
from tests.builders.events import trace_of

MAIN = Lane(0, "cpu", 1, 1, "thread 1 (pt_main_thread)", "main")
POOL_A = Lane(1, "cpu", 1, 2, "thread 2 (PTThreadPool)", "interop")
POOL_B = Lane(2, "cpu", 1, 3, "thread 3 (PTThreadPool)", "interop")


def test_depth_from_nesting_and_sorting():
    t = trace_of([(0, "child", 10, 5), (0, "parent", 0, 100), (0, "grandchild", 11, 2), (0, "next", 100, 5)], [MAIN])
    assert [t.event_name(i) for i in range(len(t))] == ["parent", "child", "grandchild", "next"]
    assert t.depth.tolist() == [0, 1, 2, 0]


def test_steps_stay_on_one_row_when_each_forward_outlives_its_step():
    """A fork run's `forward` can end milliseconds after its `step N` (issue 22: the steps stacked
    into a staircase, each a row lower than the last, as each outlived child stayed on the stack)."""
    events = []
    for k in range(6):
        t0 = k * 1000
        events += [(0, f"step {k + 1}", t0, 990), (0, "forward", t0 + 10, 1020), (0, "aten::mm", t0 + 20, 500)]
    t = trace_of(events, [MAIN])
    steps = [i for i in range(len(t)) if t.event_name(i).startswith("step")]
    assert [int(t.depth[i]) for i in steps] == [0] * 6
    assert {int(t.depth[i]) for i in range(len(t)) if t.event_name(i) == "forward"} == {1}
    assert {int(t.depth[i]) for i in range(len(t)) if t.event_name(i) == "aten::mm"} == {2}


def test_what_starts_inside_a_child_that_outlives_its_parent_stays_below_the_child():
    """A fork run's pool thread: a branch outlives the wrapper it started in, and the ops it holds
    are still its children (the staircase's fix must not lift them out of the branch)."""
    events = [(0, "wrapper", 0, 100), (0, "branch: b", 10, 300), (0, "aten::linear", 150, 100), (0, "next", 400, 10)]
    t = trace_of(events, [MAIN])
    by_name = {t.event_name(i): int(t.depth[i]) for i in range(len(t))}
    assert by_name == {"wrapper": 0, "branch: b": 1, "aten::linear": 2, "next": 0}
    linear = next(i for i in range(len(t)) if t.event_name(i) == "aten::linear")
    assert t.event_name(int(t.parent[linear])) == "branch: b"


def test_zero_length_events_nest_like_instants():
    # An instant at the end of an event is outside it; one at the start of an event is inside it.
    t = trace_of([(0, "a", 0, 10), (0, "z", 10, 0), (0, "b", 20, 5), (0, "y", 20, 0)], [MAIN])
    assert [t.event_name(i) for i in range(len(t))] == ["a", "z", "b", "y"]
    assert t.depth.tolist() == [0, 0, 0, 1]


def test_merged_intervals_union():
    s, e = merged_intervals(np.array([0, 5, 20, 22]), np.array([10, 8, 25, 30]))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 30]


def test_busy_time_counts_nesting_once():
    t = trace_of([(0, "p", 0, 100), (0, "c", 10, 50), (0, "q", 200, 10)], [MAIN])
    assert lane_busy_ns(t).tolist() == [110]


def test_interop_occupancy_steps_against_pool_size():
    events = [(0, "aten::main", 0, 100), (1, "aten::x", 10, 40), (2, "aten::y", 30, 40), (1, "aten::z", 50, 10)]
    t = trace_of(events, [MAIN, POOL_A, POOL_B], metadata={"branchscope": {"interop": 4}})
    occ = interop_occupancy(t)
    assert occ.capacity == 4
    # Pool A busy 10-60 (two back-to-back events), pool B busy 30-70.
    assert occ.t_ns.tolist() == [10, 30, 60, 70]
    assert occ.value.tolist() == [1, 2, 1, 0]
    assert occ.at(35) == 2 and occ.at(5) == 0


def test_back_to_back_work_is_not_counted_twice():
    occ = concurrency([(np.array([0]), np.array([10])), (np.array([10]), np.array([20]))], 2)
    assert occ.value.max() == 1


def test_parallelism_is_computing_time_over_the_span_without_steps():
    t = trace_of([(0, "aten::a", 0, 100), (1, "aten::b", 0, 50), (2, "aten::c", 50, 50)], [MAIN, POOL_A, POOL_B])
    assert steps_window(t) is None and first_step_start(t) is None
    assert parallelism(t) == 2.0


def _forked_step():
    """One step of a forked run, as torch.profiler records it: the main thread's "step 1" and
    TorchScript "forward" around nothing but waiting, an op at its end that waits inside; the
    branches' annotations and ops on two pool threads; a CUDA launch and a synchronize."""
    events = [
        (0, "step 1", 1000, 1000, "user_annotation"),
        (0, "forward", 1000, 1000),  # the scripted plan's call: forks, then waits
        (0, "aten::linear", 1800, 200),  # computes 1800-1850 and 1950-2000, waits 1850-1950
        (0, "aten::wait", 1850, 100),
        (0, "cudaLaunchKernel", 1700, 20, "cuda_runtime"),
        (0, "cudaDeviceSynchronize", 1720, 60, "cuda_runtime"),
        (1, "<forked function>", 1100, 700),
        (1, "branch: left", 1100, 700, "user_annotation"),
        (1, "aten::mm", 1150, 600),
        (2, "branch: right", 1100, 400, "user_annotation"),
        (2, "aten::mm", 1100, 400),
        (0, "python setup", 0, 900, "python_function"),  # before the step: outside the window
    ]
    return trace_of(events, [MAIN, POOL_A, POOL_B], metadata={"branchscope": {"interop": 2, "interop_tids": [2, 3]}})


def test_computing_excludes_annotations_method_calls_and_waits():
    t = _forked_step()
    starts, ends = lane_compute_runs(t, 0)
    assert list(zip(starts.tolist(), ends.tolist())) == [(1700, 1720), (1800, 1850), (1950, 2000)]
    assert lane_compute_runs(t, 1)[0].tolist() == [1150] and lane_compute_runs(t, 1)[1].tolist() == [1750]


def test_steps_window_and_parallelism_inside_it():
    t = _forked_step()
    assert steps_window(t) == (1000, 2000) and first_step_start(t) == 1000
    # main 20 + 50 + 50, pool A 600, pool B 400 over the 1000 ns step
    assert parallelism(t) == pytest.approx(1.12)
    assert parallelism(t, (1100, 1500)) == pytest.approx((350 + 400) / 400)
    # the whole span (0-2000) holds no more computing than the step
    assert parallelism(t, t.span()) == pytest.approx(1120 / 2000)


def test_steps_window_takes_only_step_labels():
    lanes = [MAIN]
    t = trace_of([(0, "step 1", 100, 300), (0, "step 2", 500, 400), (0, "step 2 setup", 0, 1000), (0, "aten::x", 950, 10)], lanes)
    assert steps_window(t) == (100, 900)


def test_pool_busy_share_is_computing_time_over_pool_capacity():
    t = _forked_step()
    assert pool_busy_share(t) == pytest.approx((600 + 400) / (2 * 1000))
    assert interop_occupancy(t).at(1200) == 2 and interop_occupancy(t).at(1600) == 1
    sequential = trace_of([(0, "step 1", 0, 100), (0, "aten::mm", 0, 90)], [MAIN],
                        metadata={"branchscope": {"interop": 1, "interop_tids": []}})  # fmt: skip
    assert pool_busy_share(sequential) is None and interop_occupancy(sequential).capacity == 0


def _samples(tid, ts_ns, pct):
    return CounterTrack(f"thread {tid} (t)", 1, tid, "cpu_pct", np.array(ts_ns, dtype=np.int64),
                        np.array(pct, dtype=np.float64), "cpu_sample")  # fmt: skip


def test_cores_used_sums_the_cpu_samples_over_the_window():
    # Thread 1 at 100% for ten 100 ns intervals (the first one's start: a median interval before);
    # thread 2 at 50% for the second half only.
    main = _samples(1, range(100, 1100, 100), [100.0] * 10)
    omp = _samples(7, [600, 700, 800, 900, 1000], [50.0] * 5)
    waiting = CounterTrack("thread 7 (t)", 1, 7, "wait_pct", np.array([600]), np.array([90.0]), "cpu_sample")
    t = trace_of([(0, "step 1", 0, 1000), (0, "aten::mm", 0, 1000)], [MAIN], counters=[main, omp, waiting])
    assert cores_used(t) == pytest.approx((1000 + 250) / 1000)
    assert cores_used(t, (500, 1000)) == pytest.approx((500 + 250) / 500)
    assert cores_used(_forked_step()) is None  # no samples


def test_subtract_intervals():
    s, e = subtract_intervals(np.array([0, 100]), np.array([50, 200]), np.array([10, 40, 150]), np.array([20, 120, 160]))
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 40), (120, 150), (160, 200)]


def test_memory_imbalance_max_over_median():
    def series(device, peak):
        return MemorySeries(device, np.array([0, 1]), np.array([peak, -peak]), np.array([peak, 0]))

    t = trace_of([(0, "a", 0, 1)], [MAIN], memory=[series("cuda:0", 300), series("cuda:1", 100), series("cpu", 5)])
    assert memory_imbalance(t, "cuda") == 300 / 100  # two: the heaviest over the lightest
    three = [series("cuda:0", 900), series("cuda:1", 100), series("cuda:2", 110)]
    assert memory_imbalance(trace_of([(0, "a", 0, 1)], [MAIN], memory=three), "cuda") == 900 / 110
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
    t = trace_of(events, [MAIN, POOL_A])
    result = branch_assignment(t)
    assert sorted(result.names) == ["left", "right"]
    by_name = {t.event_name(i): result.event_branch[i] for i in range(len(t))}
    assert result.names[by_name["aten::mm"]] == "left"
    assert result.names[by_name["aten::add"]] == "right"
    assert by_name["aten::cat"] == -1 and by_name["step 0"] == -1


def test_child_outliving_parent_gets_its_own_row():
    # Rounding makes "inner" end 1 ns after "outer"; "late" starts after outer ended but inside inner.
    events = [(0, "outer", 0, 100), (0, "inner", 10, 91), (0, "late", 100, 1)]
    t = trace_of(events, [MAIN])
    by_name = {t.event_name(i): int(t.depth[i]) for i in range(len(t))}
    assert by_name == {"outer": 0, "inner": 1, "late": 2}
    # No two events on one row overlap.
    for d in set(by_name.values()):
        rows = sorted((int(t.start_ns[i]), int(t.end_ns[i])) for i in range(len(t)) if t.depth[i] == d)
        assert all(a[1] <= b[0] for a, b in zip(rows, rows[1:]))


def test_event_at_finds_the_deepest_event_even_inside_a_long_parent():
    children = [(0, f"op{i}", 10 + 3 * i, 2) for i in range(6000)]
    t = trace_of([(0, "step 1", 0, 20_000), *children], [MAIN])
    step = next(i for i in range(len(t)) if t.event_name(i) == "step 1")
    assert t.event_at(0, 13) == next(i for i in range(len(t)) if t.event_name(i) == "op1")
    # Between two children, and far from the parent's start: the parent.
    assert t.event_at(0, 10 + 3 * 5000 + 2) == step
    assert t.event_at(0, 20_000) == -1 and t.event_at(0, -1) == -1
    assert t.parent[t.event_at(0, 13)] == step


_spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(work=_spans, waits=_spans)
def test_computing_is_every_instant_inside_an_op_and_outside_every_wait(work, waits):
    events = [(0, "aten::op", s, d) for s, d in work] + [(0, "aten::wait", s, d) for s, d in waits]
    events.append((0, "step 1", 0, 100, "user_annotation"))
    t = trace_of(events, [MAIN])
    starts, ends = lane_compute_runs(t, 0)
    covered = np.zeros(100, dtype=bool)
    for s, e in zip(starts.tolist(), ends.tolist()):
        assert not covered[s:e].any()  # disjoint runs
        covered[s:e] = True
    assert (starts[1:] > ends[:-1]).all()  # and apart: touching runs are one
    expected = np.zeros(100, dtype=bool)
    for s, d in work:
        expected[s : s + d] = True
    for s, d in waits:
        expected[s : s + d] = False
    assert np.array_equal(covered, expected)
    assert parallelism(t) == pytest.approx(expected.sum() / 100)
