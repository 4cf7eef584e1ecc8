"""threads mode and the GIL: the wait for it over time per branch thread (`analyses.gil_wait`, from the
CPU samples and the branch spans) and the summary's line (`gil.gil_line`), on hand-built traces."""

from __future__ import annotations

import numpy as np
import pytest

from branchscope.profiling.trace.analyses import gil_shows, gil_wait
from branchscope.profiling.trace.gil import BranchThreads, gil_json, gil_line, gil_line_of
from branchscope.profiling.trace.mode_traits import LEGACY
from branchscope.profiling.trace.model import CounterTrack, Lane
from branchscope.profiling.trace.reader import load_trace
from branchscope.profiling.trace.records import BranchThreadRecord, RunRecord
from branchscope.profiling.trace.run_info import RunInfo
from tests.builders.events import trace_of
from tests.builders.runs import write_small_trace

MAIN = Lane(0, "cpu", 1, 1, "thread 1 (python)", "main")
POOL = Lane(1, "cpu", 1, 2, "thread 2 (BSThreadPool)", "interop")


def _track(tid: int, key: str, ts: list[int], values: list[float]) -> CounterTrack:
    return CounterTrack(f"thread {tid} (BSThreadPool)", 1, tid, key, np.array(ts, dtype=np.int64),
                        np.array(values, dtype=np.float64), "cpu_sample")  # fmt: skip


def _trace(meta: dict, counters: list[CounterTrack], events=((1, "branch: a", 150, 200),)):
    return trace_of([(0, "step 1", 0, 400), *events], [MAIN, POOL], cat="user_annotation",
                    metadata={"branchscope": meta}, counters=counters)  # fmt: skip


THREADS_TRAITS = LEGACY["threads"]
THREADS = {"mode": "threads", "interop": 1, "intra": 1, "main_tid": 1, "interop_tids": [2], "intra_tids": [], "gil": True}
# The pool thread, sampled every 100 ns: inside its branch (150–350) 50% on a core, 10% waiting for
# one and 40% asleep on the GIL; outside, asleep on the pool's queue. An interval half inside the
# branch: 25% on a core, 5% waiting, 70% asleep, of which 20% inside the branch.
SAMPLES = [
    _track(2, "cpu_pct", [100, 200, 300, 400], [0.0, 25.0, 50.0, 25.0]),
    _track(2, "wait_pct", [100, 200, 300, 400], [0.0, 5.0, 10.0, 5.0]),
    _track(1, "cpu_pct", [100, 200, 300, 400], [0.0] * 4),  # the main thread: never a branch thread
]


def test_gil_wait_is_the_asleep_part_of_each_sample_interval_inside_the_branch_spans():
    # The branch runs 150–350: half of the interval 100–200, all of 200–300, half of 300–400.
    (w,) = gil_wait(_trace(THREADS, SAMPLES))
    assert (w.pid, w.tid) == (1, 2)
    assert w.series.t_ns.tolist() == [0, 100, 200, 300, 400]  # the first interval: one median before
    assert w.series.value == pytest.approx([0.0, 0.2, 0.4, 0.2, 0.0])
    assert w.total_ns == pytest.approx(80.0)  # 40% of the branch's 200 ns
    assert w.series.at(250) == pytest.approx(0.4) and w.series.at(50) == 0.0


def test_gil_wait_clips_at_zero_and_reads_a_missing_wait_as_none():
    busy = [_track(2, "cpu_pct", [100, 200, 300, 400], [70.0, 120.0, 95.0, 30.0]),
            _track(2, "wait_pct", [100, 200, 400], [0.0, 40.0, 10.0])]  # fmt: skip
    (w,) = gil_wait(_trace(THREADS, busy))
    # 200: 100 − 120 − 40 < 0; 300: no wait sample, so 5% asleep over the whole interval; 400: 60%
    # asleep, 50% of the interval outside the branch.
    assert w.series.value == pytest.approx([0.0, 0.0, 0.05, 0.1, 0.0])


def test_outside_branch_spans_a_pool_thread_waits_for_no_gil():
    (w,) = gil_wait(_trace(THREADS, SAMPLES, events=((1, "aten::mm", 150, 200),)))
    assert w.total_ns == 0.0
    nested = ((1, "branch: a", 150, 200), (1, "branch: a -> b", 160, 50))  # counted once
    (w,) = gil_wait(_trace(THREADS, SAMPLES, events=nested))
    assert w.total_ns == pytest.approx(80.0)


def test_no_gil_wait_without_the_gil_or_in_another_mode():
    assert gil_wait(_trace({**THREADS, "gil": False}, SAMPLES)) == []
    assert not gil_shows(_trace({**THREADS, "gil": False}, SAMPLES))
    assert gil_wait(_trace({**THREADS, "mode": "fork"}, SAMPLES)) == []
    assert gil_wait(_trace({**THREADS, "interop_tids": [7]}, SAMPLES)) == []  # no samples of the pool
    # A threads-mode trace that does not say (the worker before `gil`): taken to have had the GIL.
    no_word = {k: v for k, v in THREADS.items() if k != "gil"}
    assert len(gil_wait(_trace(no_word, SAMPLES))) == 1


def test_gil_wait_of_the_small_threads_run_trace(tmp_path):
    trace = load_trace(write_small_trace(tmp_path / "t.json", "threads"))
    waits = gil_wait(trace)
    assert [w.tid for w in waits] == [11, 12]
    # Each pool thread ran one 800 µs branch a step for 2 steps, 40% of it asleep: 640 µs (an
    # interval the branch starts or ends in counts the part inside the branch).
    for w in waits:
        assert w.total_ns == pytest.approx(640_000)
        assert float(w.series.value.max()) == pytest.approx(0.4)
    assert gil_wait(load_trace(write_small_trace(tmp_path / "f.json", "threads", gil=False))) == []
    assert gil_wait(load_trace(write_small_trace(tmp_path / "k.json", "fork"))) == []


FIGURES = [
    BranchThreadRecord(tid=11, calls=20, wall_ms=100.0, cpu_ms=60.0, core_wait_ms=5.0, gil_wait_ms=35.0),
    BranchThreadRecord(tid=12, calls=20, wall_ms=100.0, cpu_ms=56.0, core_wait_ms=7.0, gil_wait_ms=37.0),
]


def test_the_line_sums_the_pool_threads_as_shares_of_their_wall_time():
    assert gil_line(THREADS_TRAITS, "3.11.7", True, FIGURES) == (
        "branch threads: 58% computing, 6% waiting for a core, 36% waiting for the GIL "
        "(2 threads, 40 branch calls, Python 3.11.7)"
    )
    s = BranchThreads.of(FIGURES)
    assert (s.threads, s.calls, s.wall_ms) == (2, 40, 200.0)
    assert (s.computing, s.core_wait, s.gil_wait) == pytest.approx((0.58, 0.06, 0.36))
    assert gil_line(THREADS_TRAITS, None, None, FIGURES[:1]).endswith("(1 thread, 20 branch calls)")


def test_free_threaded_python_says_no_gil_and_no_figures():
    assert gil_line(THREADS_TRAITS, "3.13.1 free-threading build", False, None) == "free-threaded Python 3.13.1: no GIL"
    assert gil_line(THREADS_TRAITS, None, False, FIGURES) == "free-threaded Python: no GIL"


def test_no_line_for_other_modes_or_without_figures():
    assert gil_line(LEGACY["fork"], "3.11.7", True, FIGURES) is None
    assert gil_line(THREADS_TRAITS, "3.11.7", True, None) is None
    assert gil_line(THREADS_TRAITS, "3.11.7", True, []) is None
    idle = [BranchThreadRecord(tid=11)]
    assert gil_line(THREADS_TRAITS, "3.11.7", True, idle) == "branch threads: no time inside branches (1 thread, 0 branch calls, Python 3.11.7)"


def test_the_line_of_run_json_and_of_the_trace_agree():
    run = RunRecord.parse({
        "mode": "threads", "python": "3.11.7", "gil": True,
        "branch_threads": [{"tid": f.tid, "calls": f.calls, "wall_ms": f.wall_ms, "cpu_ms": f.cpu_ms,
                            "core_wait_ms": f.core_wait_ms, "gil_wait_ms": f.gil_wait_ms} for f in FIGURES],
    })  # fmt: skip
    info = RunInfo(mode="threads", python="3.11.7", gil=True, branch_threads=tuple(FIGURES))
    assert gil_line_of(run) == gil_line_of(info) is not None
    assert gil_line_of(None) is None
    doc = gil_json(info)
    assert doc is not None and doc["gil"] is True and doc["python"] == "3.11.7"
    assert doc["branch_threads"]["calls"] == 40 and doc["line"] == gil_line_of(info)
    free = gil_json(RunInfo(mode="threads", python="3.13.1 free-threading build", gil=False))
    assert free == {"python": "3.13.1 free-threading build", "gil": False, "branch_threads": None,
                    "line": "free-threaded Python 3.13.1: no GIL"}  # fmt: skip
    assert gil_json(RunInfo(mode="fork")) is None


def test_a_read_trace_keeps_the_branch_threads_figures(tmp_path):
    # The reader keeps a float's digits as a string (ns timestamps): the figures read as numbers.
    info = load_trace(write_small_trace(tmp_path / "t.json", "threads")).run_info
    assert info is not None and (info.python, info.gil) == ("3.11.7", True)
    assert [(t.tid, t.calls) for t in info.branch_threads] == [(11, 2), (12, 2)]
    assert [t.wall_ms for t in info.branch_threads] == pytest.approx([1.6, 1.6])
    assert [t.gil_wait_ms for t in info.branch_threads] == pytest.approx([0.64, 0.64])
    assert gil_line_of(info) == (
        "branch threads: 55% computing, 5% waiting for a core, 40% waiting for the GIL "
        "(2 threads, 4 branch calls, Python 3.11.7)"
    )
    odd = RunInfo.parse({"mode": "threads", "branch_threads": [{"tid": 1, "wall_ms": "1e3", "cpu_ms": "-2.5", "gil_wait_ms": "x"}]})
    assert odd is not None and (odd.branch_threads[0].wall_ms, odd.branch_threads[0].cpu_ms, odd.branch_threads[0].gil_wait_ms) == (1000.0, 0.0, 0.0)
