"""Memory where torch.profiler records none (`profiling/run/thread_memory.py`): with
profile_all_threads it writes no `[memory]` event on any thread; the legacy profiler turned on per
thread records each allocation and free of the main thread and the pool's threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from branchscope.profiling.run.branch_pool import BranchPool
from branchscope.profiling.run.thread_memory import PER_THREAD, for_run, legacy_profiler

SIDE = 64  # a 64×64 float32 tensor: 16 KiB


def test_on_each_thread_runs_once_on_every_pool_thread() -> None:
    pool = BranchPool(3)
    try:
        pool.measuring = True  # as while profiling: the chores are no branches, never counted as calls
        tids = pool.on_each_thread(threading.get_native_id)
        assert sorted(tids) == pool.tids
        assert [t.calls for t in pool.times()] == [0, 0, 0]
    finally:
        pool.shutdown()


@pytest.mark.slow
def test_pool_threads_memory_is_recorded_where_the_profiler_records_none(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    if legacy_profiler(torch) is None:
        pytest.skip(f"torch {torch.__version__} has no legacy profiler")

    def branch() -> float:
        x = torch.ones(SIDE, SIDE)
        y = x * 2  # x and y live together: 32 KiB at once on this thread
        return float(y.sum())

    class AllThreads:
        profile_all_threads = True

    pool = BranchPool(2)
    memory, source = for_run(torch, AllThreads(), pool)
    assert memory is not None and source == PER_THREAD
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, experimental_config=config) as prof:
            memory.on_pool(pool, memory.start)
            assert [t.result() for t in [pool.submit(branch) for _ in range(4)]] == [2.0 * SIDE * SIDE] * 4
            memory.on_pool(pool, memory.stop)
        prof.export_chrome_trace(str(tmp_path / "t.json"))
    finally:
        pool.shutdown()
    kineto = (tmp_path / "t.json").read_text()
    assert '"[memory]"' not in kineto  # the cause: torch.profiler itself recorded none
    events = memory.trace_events(0, 1)
    tensor = SIDE * SIDE * 4
    allocs = [e for e in events if e["args"]["Bytes"] > 0 and e["tid"] in pool.tids]
    assert len([e for e in allocs if e["args"]["Bytes"] == tensor]) == 8  # x and y of 4 branches
    assert events[-1]["args"]["Total Allocated"] == 0  # every allocation freed, on some recorded thread
    assert max(e["args"]["Total Allocated"] for e in events) >= 2 * tensor
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_a_mode_that_follows_its_threads_needs_no_recorder() -> None:
    class Plain:
        profile_all_threads = False

    assert for_run(object(), Plain(), None) == (None, None)


def test_threads_that_are_not_the_pools_say_why_there_is_no_memory() -> None:
    class AllThreads:
        profile_all_threads = True

    memory, source = for_run(object(), AllThreads(), None)
    assert memory is None and source is not None and source.startswith("no memory events: ")


def test_no_recorder_without_the_legacy_profiler() -> None:
    assert legacy_profiler(object()) is None
