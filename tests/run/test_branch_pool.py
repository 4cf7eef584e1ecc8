"""threads mode's Python pool (`profiling/run/branch_pool.py`): a fixed set of named threads, results
and errors handed back, nested regions without deadlock, and what each thread measures."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from branchscope.profiling.run import branch_pool
from branchscope.profiling.run.branch_pool import POOL_THREAD_NAME, BranchPool, gil_enabled, python_version
from branchscope.profiling.run.cpu_sampler import read_thread_names
from tests.processes import wait_until


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


needs_schedstat = pytest.mark.skipif(
    not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"), reason="needs /proc with schedstat"
)
needs_gil = pytest.mark.skipif(not gil_enabled(), reason="a free-threaded interpreter has no GIL to wait for")


def _spin(n: int) -> int:
    """Pure Python: holds the GIL but where the interpreter hands it over (`sys.getswitchinterval`)."""
    x = 0
    for i in range(n):
        x += i
    return x


def _shares(times: list[branch_pool.ThreadTimes]) -> dict[str, float]:
    wall = sum(t.wall_ns for t in times)
    assert wall > 0
    return {
        "computing": sum(t.cpu_ns for t in times) / wall,
        "core_wait": sum(t.core_wait_ns for t in times) / wall,
        "gil_wait": sum(t.gil_wait_ns for t in times) / wall,
    }


def _small_ops(rounds: int):
    """2 × `rounds` tiny torch ops, a few µs each; nothing else (no GIL wanted by others, no sleep)."""
    import torch

    x = torch.ones(64)
    for _ in range(rounds):
        x = x * 1.0001 + 0.5
    return x


#: Sub-millisecond branches (about 0.1 ms here), well under a 4 ms scheduler tick.
SHORT_ROUNDS = 15
#: Branches of some 10 ms of CPU here: longer than a scheduler slice (3 ms), so a thread sharing its
#: core with burners loses the core inside a branch (a short one, woken onto the core, may not).
LONG_ROUNDS = 1000


def _run_one_by_one(pool: BranchPool, rounds: int, count: int) -> list[branch_pool.ThreadTimes]:
    """`count` branches of `_small_ops(rounds)`, measured, each submitted once the one before is done:
    the main thread sleeps while a branch runs (with two at a time it would wake between them, and
    take the GIL a moment)."""
    pool.reset_times()
    pool.measuring = True
    for _ in range(count):
        pool.submit(_small_ops, rounds).result()
    pool.measuring = False
    return pool.times()


@pytest.fixture
def one_core():
    """Pins callers' threads to one core beside two pinned CPU burners, whatever else the machine does."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs CPU affinity")
    core = min(os.sched_getaffinity(0))
    spin = f"import os; os.sched_setaffinity(0, {{{core}}}); print(flush=True); exec('while True: pass')"
    burners = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        assert all(p.stdout is not None and p.stdout.readline() == b"\n" for p in burners)  # pinned, spinning
        yield lambda tid: os.sched_setaffinity(tid, {core})
    finally:
        for p in burners:
            p.kill()
            p.wait()


@needs_gil
@needs_schedstat
@pytest.mark.parametrize(
    ("rounds", "count", "beside_burners"),
    [(SHORT_ROUNDS, 300, False), (SHORT_ROUNDS, 300, True), (LONG_ROUNDS, 12, True)],
    ids=["short-branches", "short-branches-on-one-core-with-two-burners", "long-branches-on-one-core-with-two-burners"],
)
def test_one_thread_waits_for_no_gil(rounds, count, beside_burners, request):
    """One pool thread, the main thread asleep while a branch runs: nobody holds the GIL against the
    branches, so their time is CPU and waits for a core, and the GIL reads about 0% however short the
    branches (read from schedstat's first field, which moves only at a tick or a switch, sub-millisecond
    branches had read near-zero CPU and mostly "GIL"). On a core two burners share, a branch longer
    than a slice waits for the core most of the time: that lands in core_wait, not in the GIL. The
    bounds leave room for what a busy machine adds (interrupts, the hypervisor's steal: read as sleep)."""
    pool = BranchPool(1)
    try:
        _run_one_by_one(pool, SHORT_ROUNDS, 10)  # warm: torch's first ops load code from disk (asleep)
        if beside_burners:
            request.getfixturevalue("one_core")(pool.tids[0])
        times = _run_one_by_one(pool, rounds, count)
    finally:
        pool.shutdown()
    (t,) = times
    shares = _shares(times)
    assert t.calls == count and t.join_ns == 0
    assert shares["gil_wait"] < 0.10, shares
    if rounds == LONG_ROUNDS:  # a third of the core or less for the pool thread: most of the rest waiting for it
        assert shares["core_wait"] > 0.2, shares
    elif not beside_burners:  # woken onto a core, a short branch mostly runs through (>0.9 on a quiet machine)
        assert shares["computing"] > 0.3, shares


@needs_gil
def test_two_branches_of_pure_python_wait_for_the_gil(pool):
    """Pure Python holds the GIL: while one thread runs its loop the other sleeps on the GIL, which is
    neither CPU time nor a wait for a core. The interpreter hands the GIL over every 50 ms here (the
    thread waiting asks when that has passed), and each loop is several turns long: both threads take
    a branch and share the GIL by turns, so nearly half of their branch time is waiting for it (0.4
    beside burners on 2 cores; a waiter woken to ask for the GIL may wait for a core a moment)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.05)  # few hand-overs, each waking a thread that may wait for a core
    try:
        pool.measuring = True
        tasks = [pool.submit(_spin, 3_000_000) for _ in range(2)]
        [t.result() for t in tasks]
        pool.measuring = False
    finally:
        sys.setswitchinterval(interval)
    times = pool.times()
    assert [t.calls for t in times] == [1, 1]
    assert _shares(times)["gil_wait"] > 0.25, _shares(times)


def test_a_task_a_pool_thread_runs_itself_while_joining_is_part_of_its_branch():
    """The one pool thread runs a branch that joins a branch of its own, which nobody took: it runs
    it inside `result()`. That inner branch is the outer one's time, counted once (one call, its CPU
    within the outer's), and no join: the thread never waited."""
    pool = BranchPool(1)

    def inner():
        cpu0 = time.thread_time_ns()
        _spin(200_000)
        return time.thread_time_ns() - cpu0

    try:
        pool.measuring = True
        inner_cpu = pool.submit(lambda: pool.submit(inner).result()).result()
        pool.measuring = False
    finally:
        pool.shutdown()
    (t,) = pool.times()
    assert t.calls == 1 and t.join_ns == 0
    assert inner_cpu <= t.cpu_ns
    # Counted twice, the inner branch's CPU time would be about twice the wall time (clocks apart: 2%).
    assert t.cpu_ns + t.core_wait_ns <= t.wall_ns + t.wall_ns // 50


def test_a_branch_waiting_for_a_branch_another_thread_runs_counts_it_as_join(pool):
    """A branch that joins a branch another pool thread already runs waits for it: join time, in the
    joining thread's figures; the other thread's figures hold its own branch only."""
    started = threading.Event()

    def inner():
        started.set()
        return _spin(1_000_000)

    pool.measuring = True
    running = pool.submit(inner)
    started.wait()  # taken by one thread: the outer branch, on the other, can only wait for it
    outer = pool.submit(lambda: (threading.get_native_id(), running.result()))
    joiner, _ = outer.result()
    pool.measuring = False
    times = {t.tid: t for t in pool.times()}
    (other,) = set(times) - {joiner}
    assert times[joiner].calls == 1 and times[other].calls == 1
    assert 0 < times[joiner].join_ns <= times[joiner].wall_ns
    assert times[other].join_ns == 0


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


def test_a_pool_thread_keeps_no_value_of_a_task_it_ran(pool):
    """A branch's value is freed once its waiter lets it go: the pool thread that ran it does not
    hold the task (and its value) until the next task comes, which would raise a run's memory peak."""
    import gc
    import weakref

    class Value:
        pass

    task = pool.submit(Value)
    value = weakref.ref(task.result())
    del task
    wait_until(lambda: gc.collect() is not None and value() is None, 60, "the pool to let the task's value go")
