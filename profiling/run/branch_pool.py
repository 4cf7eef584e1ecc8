"""threads mode's inter-op pool: a fixed number of Python threads that run a region's branches.

ATen ops release the GIL while they compute, so branches submitted to Python threads overlap in plain
eager PyTorch, with no TorchScript; what needs the GIL (the Python between the ops, and each op's
entry and return) runs one thread at a time unless the interpreter is free-threaded.

- All threads start at once (`BranchPool(size)`), before the model loads, so the worker's thread
  census takes them as the inter-op pool; each names itself `POOL_THREAD_NAME` (its OS name, which
  the OpenMP workers it starts inherit, as torch's own pool threads do with "PTThreadPool").
- `submit(fn, *args)` gives a `Task`; `Task.result()` waits for it. A pool thread that waits for a
  task no thread has taken yet runs it itself (a branch holding a region of its own submits and
  waits from inside the pool: with every thread waiting, a plain pool would deadlock). Any other
  thread (the model's main thread) only waits, so a run uses exactly `size` branch threads.
- `measuring = True` makes each pool thread measure every task it takes from the queue, reading its
  own clocks around it (`_Worker.read_clocks`): its wall time, its CPU time (`time.thread_time_ns()`,
  CLOCK_THREAD_CPUTIME_ID: exact to the nanosecond for the calling thread), its run delay (runnable
  but waiting for a core: the second field of its own `/proc/thread-self/schedstat`, which the kernel
  adds to when the thread gets a core, so it is exact whenever the thread reads it itself, holding
  the GIL: `_PREAD`) and the
  time it waited for tasks of other threads (`join_ns`). What is left, asleep and not joining, is the
  GIL (`ThreadTimes.gil_wait_ns`, never below 0). Not schedstat's first field for the CPU time: the
  kernel advances it only at a scheduler tick (4 ms at HZ=250) or a context switch, so a branch
  shorter than a tick read next to no CPU, and the GIL took the rest. Also read as the GIL: time the
  kernel spends on interrupts or the hypervisor takes (steal) while the thread runs. Without /proc:
  no run delay (a wait for a core then reads as the GIL too).
- Only the time inside tasks is measured: a pool thread woken for a task while another thread holds
  the GIL waits for it before it can take the task, in no task's time. Where branches are shorter
  than the interpreter's switch interval (5 ms), the thread holding the GIL often takes the next
  branch itself before a woken one gets it: the branches then run one after another, and neither
  this measure nor the CPU samples inside branch spans (`analyses.gil_wait`) count that as the GIL.
- A task a pool thread runs itself inside `Task.result()` is part of the task it runs in: its time
  counts in that task's wall and CPU time, and only a real wait (for a task another thread runs) in
  its `join_ns`.

No torch and no Qt here: what a branch needs of the launching thread's state (grad mode, the CUDA
stream) is the caller's to carry (see `modes/threads.py`).
"""

from __future__ import annotations

import ctypes
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The OS name of the pool's threads (15 characters at most).
POOL_THREAD_NAME = "BSThreadPool"

_PENDING, _RUNNING, _DONE = 0, 1, 2


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL (False only on a free-threaded CPython running
    without it: `sys._is_gil_enabled()`, Python 3.13 and later)."""
    probe = getattr(sys, "_is_gil_enabled", None)
    return bool(probe()) if callable(probe) else True


def python_version() -> str:
    """This interpreter's version, and "free-threading build" where it is one ("3.13.1 free-threading build")."""
    import platform
    import sysconfig

    version = platform.python_version()
    return f"{version} free-threading build" if sysconfig.get_config_var("Py_GIL_DISABLED") else version


#: libc's pread, called holding the GIL (a `PyDLL` function keeps it; `os.pread` lets it go). Letting
#: the GIL go wakes the thread waiting for it, which may take this thread's core before the read: that
#: wait lands in the run delay read next, and at a task's end, after its wall time was read, it was
#: counted as waiting for a core outside the task (CPU + run delay over the wall time, seen beside CPU
#: burners). None where libc cannot be loaded: then `os.pread`.
try:
    _PREAD: Any = ctypes.PyDLL(None, use_errno=True).pread
    _PREAD.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
    _PREAD.restype = ctypes.c_ssize_t
except (OSError, AttributeError):  # pragma: no cover - not glibc/musl
    _PREAD = None


class _RunDelay:
    """The calling thread's run delay (ns, runnable but waiting for a core): the second field of its
    `schedstat`, kept open and re-read with pread, holding the GIL (`_PREAD`); 0 without /proc."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None
        self._buffer = ctypes.create_string_buffer(128)

    def read(self) -> int:
        if self.fd is not None:
            try:
                return int(self._read_text().split()[1])
            except (OSError, ValueError, IndexError):
                pass
        return 0

    def _read_text(self) -> bytes:
        assert self.fd is not None
        if _PREAD is None:  # pragma: no cover - see _PREAD
            return os.pread(self.fd, 128, 0)
        n = _PREAD(self.fd, self._buffer, 128, 0)
        if n < 0:
            raise OSError(ctypes.get_errno(), "pread of schedstat failed")
        return self._buffer.raw[:n]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class ThreadTimes:
    """What one pool thread measured of the tasks it took while `measuring` (ns)."""

    tid: int
    calls: int = 0
    wall_ns: int = 0
    cpu_ns: int = 0
    core_wait_ns: int = 0
    #: Waiting for tasks another thread had taken (a branch joining its own region's branches).
    join_ns: int = 0

    @property
    def gil_wait_ns(self) -> int:
        """Inside a branch neither on a core (`cpu_ns`), nor waiting for one (`core_wait_ns`), nor for
        another thread's branch (`join_ns`): asleep, which on a pool thread is the GIL; never below 0."""
        return max(0, self.wall_ns - self.cpu_ns - self.core_wait_ns - self.join_ns)


class Task:
    """One submitted call; `result()` gives its value or raises its exception."""

    def __init__(self, pool: BranchPool, fn: Callable[..., Any], args: tuple[Any, ...], measured: bool = True) -> None:
        self._pool = pool
        #: A branch's task, measured while the pool is `measuring`; not the pool's own chores (`on_each_thread`).
        self._measured = measured
        self._fn = fn
        self._args = args
        self._lock = threading.Lock()
        self._state = _PENDING
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def _claim(self) -> bool:
        with self._lock:
            if self._state != _PENDING:
                return False
            self._state = _RUNNING
            return True

    def _run(self, worker: _Worker | None = None) -> None:
        """Runs the task; `worker`: the pool thread that took it from the queue, which measures it
        (while the pool is `measuring`) before anyone waiting can see it done."""
        start = worker.start_task() if worker is not None and self._measured and self._pool.measuring else None
        try:
            self._value = self._fn(*self._args)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the task
            self._error = exc
        finally:
            self._fn = self._args = None  # type: ignore[assignment]
            if start is not None:
                assert worker is not None
                worker.end_task(start)
            self._state = _DONE
            self._done.set()

    def result(self) -> Any:
        """The task's value, once it has run (see the module docstring for who runs it)."""
        worker = self._pool._own_worker()
        if worker is not None and self._claim():
            self._run()  # a pool thread runs a task nobody took, rather than wait for it: part of its own task
        elif not self._done.is_set():
            t0 = time.perf_counter_ns()
            self._done.wait()
            if worker is not None and worker.in_measured_task:
                worker.times.join_ns += time.perf_counter_ns() - t0
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class _Worker:
    """A pool thread: what it measured, its run delay, and whether the task it took from the queue
    (and runs now) is measured, so that a wait inside it counts as join time in the same task's figures."""

    times: ThreadTimes
    run_delay: _RunDelay = field(default_factory=_RunDelay)
    in_measured_task: bool = False

    def start_task(self) -> tuple[int, int, int]:
        """The clocks at the start of a measured task (see `read_clocks`)."""
        self.in_measured_task = True
        return self.read_clocks()

    def end_task(self, start: tuple[int, int, int]) -> None:
        """Adds the task begun at `start` to `times`."""
        wall1, cpu1, delay1 = self.read_clocks()
        wall0, cpu0, delay0 = start
        times = self.times
        times.calls += 1
        times.wall_ns += wall1 - wall0
        times.cpu_ns += cpu1 - cpu0
        times.core_wait_ns += delay1 - delay0
        self.in_measured_task = False

    def read_clocks(self) -> tuple[int, int, int]:
        """Wall time, CPU time and run delay (ns), read in the order CPU, wall, run delay. Reading the
        CPU time updates the kernel's accounting, which may hand the core over as the call returns
        (the thread's slice used up); the kernel adds that wait to the run delay once the thread is
        back. Read after it, the wall time and the run delay both hold such a wait or neither does,
        where a wall read before it would call the wait (a whole slice, milliseconds) the GIL."""
        cpu = time.thread_time_ns()
        wall = time.perf_counter_ns()
        return wall, cpu, self.run_delay.read()


class BranchPool:
    """`size` Python threads that run submitted tasks (see the module docstring)."""

    def __init__(self, size: int, name: str = POOL_THREAD_NAME) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self.measuring = False
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._local = threading.local()
        self._workers: list[_Worker] = []
        self._started = threading.Barrier(size + 1)
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(size)
        ]
        for t in self._threads:
            t.start()
        self._started.wait()  # every thread is there (and named) when the pool is made

    @property
    def tids(self) -> list[int]:
        """The OS thread ids of the pool's threads."""
        return sorted(w.times.tid for w in self._workers)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Task:
        return self._submit(Task(self, fn, args))

    def _submit(self, task: Task) -> Task:
        self._queue.put(task)
        return task

    def times(self) -> list[ThreadTimes]:
        """What each thread measured (see `measuring`), by thread id."""
        return sorted((w.times for w in self._workers), key=lambda t: t.tid)

    def reset_times(self) -> None:
        for w in self._workers:
            w.times = ThreadTimes(w.times.tid)

    def on_each_thread(self, fn: Callable[[], Any]) -> list[Any]:
        """`fn()` called once on every pool thread (what must run on the thread itself, such as
        turning a thread-local recorder on or off), their values in no set order. Each thread
        takes one of `size` tasks and waits at a barrier until all have one, so none takes two;
        the pool must be idle (no task queued or running). These tasks are not branches: never
        measured, even while the pool is `measuring`."""
        barrier = threading.Barrier(self.size)

        def once() -> Any:
            barrier.wait()
            return fn()

        return [task.result() for task in [self._submit(Task(self, once, (), measured=False)) for _ in range(self.size)]]

    def shutdown(self) -> None:
        """Stops the threads once the tasks submitted before have run."""
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()

    def _own_worker(self) -> _Worker | None:
        """The calling thread's `_Worker`; None off the pool."""
        return getattr(self._local, "worker", None)

    def _loop(self) -> None:
        _name_this_thread(self.name)
        worker = _Worker(ThreadTimes(threading.get_native_id()))
        self._local.worker = worker
        self._workers.append(worker)
        self._started.wait()
        try:
            while (task := self._queue.get()) is not None:
                if task._claim():  # else a pool thread waiting for it ran it already
                    task._run(worker)
                del task  # the task holds its value: not kept alive until the next task comes
        finally:
            worker.run_delay.close()


def _name_this_thread(name: str) -> None:
    """Sets the calling thread's OS name (Linux; 15 bytes kept), which /proc and profilers show."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w", encoding="ascii") as f:
            f.write(name[:15])
    except OSError:
        pass
