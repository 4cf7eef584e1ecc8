"""threads mode's Python pool (`profiling/run/branch_pool.py`): a fixed set of named threads, results
and errors handed back, nested regions without deadlock, and what each thread measures."""

from __future__ import annotations

import sys
import threading

import pytest

from branchscope.profiling.run import branch_pool
from branchscope.profiling.run.branch_pool import POOL_THREAD_NAME, BranchPool, gil_enabled, python_version
from branchscope.profiling.run.cpu_sampler import read_thread_names


@pytest.fixture
def pool():
    p = BranchPool(2)
    yield p
    p.shutdown()


def test_every_thread_is_there_and_named_when_the_pool_is_made(pool):
    assert len(pool.tids) == 2 and threading.get_native_id() not in pool.tids
    names = read_thread_names()
    assert [names[tid] for tid in pool.tids] == [POOL_THREAD_NAME] * 2


def test_tasks_run_on_the_pool_threads_and_give_their_results(pool):
    tasks = [pool.submit(lambda i=i: (i * i, threading.get_native_id())) for i in range(8)]
    results = [t.result() for t in tasks]
    assert [r[0] for r in results] == [i * i for i in range(8)]
    assert {r[1] for r in results} <= set(pool.tids)  # the main thread only waits


def test_a_tasks_exception_reaches_whoever_waits_for_it(pool):
    def boom():
        raise ValueError("in a branch")

    task = pool.submit(boom)
    with pytest.raises(ValueError, match="in a branch"):
        task.result()
    assert pool.submit(lambda: 1).result() == 1  # the thread goes on


def test_a_branch_that_joins_branches_of_its_own_never_deadlocks_a_full_pool():
    pool = BranchPool(1)  # the one thread runs a region whose branches it submits and waits for
    try:

        def inner(k):
            return k + 1

        def outer():
            tasks = [pool.submit(inner, k) for k in range(3)]
            return [t.result() for t in tasks], threading.get_native_id()

        values, tid = pool.submit(outer).result()
        assert values == [1, 2, 3] and tid == pool.tids[0]
    finally:
        pool.shutdown()


def test_each_thread_measures_only_while_measuring(pool):
    pool.submit(sum, range(1000)).result()
    assert all(t.calls == 0 and t.wall_ns == 0 for t in pool.times())
    pool.measuring = True
    for _ in range(6):
        pool.submit(sum, range(10000)).result()
    pool.measuring = False
    times = pool.times()
    assert sum(t.calls for t in times) == 6 and [t.tid for t in times] == pool.tids
    for t in times:
        assert t.wall_ns >= 0 and t.cpu_ns >= 0 and t.core_wait_ns >= 0 and t.gil_wait_ns >= 0
        assert t.gil_wait_ns == max(0, t.wall_ns - t.cpu_ns - t.core_wait_ns - t.join_ns)
    pool.reset_times()
    assert all(t.calls == 0 for t in pool.times())


@pytest.mark.skipif(not gil_enabled(), reason="a free-threaded interpreter has no GIL to wait for")
def test_two_branches_of_pure_python_wait_for_the_gil(pool):
    """Pure Python holds the GIL: while one thread runs its loop the other sleeps on the GIL, which is
    neither CPU time nor a wait for a core (whatever else the machine runs)."""

    def spin():
        x = 0
        for i in range(3_000_000):
            x += i
        return x

    pool.measuring = True
    tasks = [pool.submit(spin) for _ in range(2)]
    [t.result() for t in tasks]
    pool.measuring = False
    times = pool.times()
    assert [t.calls for t in times] == [1, 1]
    assert sum(t.gil_wait_ns for t in times) > 0


def test_the_gil_and_the_version_as_the_interpreter_says(monkeypatch):
    assert gil_enabled() is (sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert gil_enabled() is False
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert gil_enabled() is True
    assert python_version().startswith(".".join(map(str, sys.version_info[:3])))


def test_a_free_threading_build_says_so(monkeypatch):
    import sysconfig

    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1 if name == "Py_GIL_DISABLED" else real(name))
    assert branch_pool.python_version().endswith(" free-threading build")


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError):
        BranchPool(0)
