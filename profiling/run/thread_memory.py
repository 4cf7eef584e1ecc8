"""Memory events where torch.profiler records none: runs that profile every thread.

torch.profiler with `profile_all_threads` (threads mode: branches on Python threads) keeps its state
for all threads at once, where the CPU allocator looks for a profiler in the allocating thread's own
state: it finds none, so the trace holds no `[memory]` event at all, on any thread, even with
`profile_memory=True` (torch 2.13; a tiny script shows it). torch's legacy profiler keeps its state
per thread and runs beside it: `ThreadMemory` turns it on, with memory, on the main thread and on
each of branchscope's pool threads (`branch_pool.BranchPool.on_each_thread`) for the profiled steps,
and writes what the allocator reported to it (each allocation and free, its bytes, its time) into
the trace as kineto's `[memory]` events, with the running total as their "Total Allocated": the
same figures the allocator gives torch.profiler in the other modes, with no address (the legacy
profiler does not keep it), so the memory views draw the curve and its peak, not which block was
live. run.json's `memory_source` says so (`PER_THREAD`); where the threads are not branchscope's,
or this torch has no legacy profiler, it says why the trace has no memory (`not_recorded`).

Worker-side: imports nothing of torch itself, uses the module it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: run.json's and the trace's `memory_source` for memory recorded by `ThreadMemory`.
PER_THREAD = (
    "allocator events of the main thread and each pool thread, recorded by torch's legacy profiler on each "
    "thread (torch.profiler records none when it profiles every thread); no addresses, so no list of live blocks"
)
#: Why a run that profiles every thread has no memory events (`not_recorded`), after "no memory events: ".
_ALL_THREADS = "torch.profiler records none when it profiles every thread (profile_all_threads)"


def not_recorded(why: str) -> str:
    """run.json's `memory_source` for a run without memory events, saying why."""
    return f"no memory events: {_ALL_THREADS}, and {why}"


def legacy_profiler(torch: Any) -> Any:
    """torch's legacy profiler's module (`torch._C._autograd`), or None where this torch lacks it."""
    autograd = getattr(getattr(torch, "_C", None), "_autograd", None)
    needed = ("_enable_profiler_legacy", "_disable_profiler_legacy")
    return autograd if all(hasattr(autograd, name) for name in needed) else None


class ThreadMemory:
    """The allocator's reports to torch's legacy profiler, on every thread it was `start`ed on.

    `start()` and `stop()` run on the thread recorded (the main thread calls them for itself and,
    through `on_pool`, for each pool thread); `trace_events` gives what all of them recorded."""

    def __init__(self, torch: Any, legacy: Any) -> None:
        """`legacy`: torch's legacy profiler's module, as `legacy_profiler(torch)` found it."""
        self._torch = torch
        self._legacy = legacy
        self._lock = threading.Lock()
        #: (time in µs since the epoch, bytes: negative for a free, the OS thread id)
        self._reports: list[tuple[float, int, int]] = []

    def start(self) -> None:
        """Turns the legacy profiler on, with memory, on the calling thread."""
        profiler = self._torch._C._profiler
        config = profiler.ProfilerConfig(
            profiler.ProfilerState.CPU, False, True, False, False, False, profiler._ExperimentalConfig()
        )
        self._legacy._enable_profiler_legacy(config)

    def stop(self) -> None:
        """Turns it off on the calling thread, keeping what the allocator reported there."""
        tid = threading.get_native_id()
        events = [e for per_thread in self._legacy._disable_profiler_legacy() for e in per_thread]
        reports = [(e.start_us(), int(e.cpu_memory_usage()), tid) for e in events if e.kind() == "memory_alloc"]
        with self._lock:
            self._reports.extend(r for r in reports if r[1] != 0)

    def on_pool(self, pool: Any, method: Callable[[], None]) -> None:
        """`method` (this recorder's `start` or `stop`) on the calling thread, then on each of
        `pool`'s threads."""
        method()
        pool.on_each_thread(method)

    def trace_events(self, base_time_ns: int | float | None, pid: int) -> list[dict[str, Any]]:
        """kineto's `[memory]` events (CPU) of what was recorded, in time order, their timestamps
        on the trace's clock (µs after `base_time_ns`, the trace's baseTimeNanoseconds) and each
        "Total Allocated" the running sum of the bytes allocated and freed since `start`."""
        base_us = (base_time_ns or 0) / 1000.0
        total = 0
        events = []
        for ts_us, nbytes, tid in sorted(self._reports):
            total += nbytes
            args = {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes, "Device Id": -1, "Device Type": 0}
            events.append(
                {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": tid,
                 "ts": round(ts_us - base_us, 3), "args": args}
            )  # fmt: skip
        return events


def for_run(torch: Any, mode: Any, pool: Any) -> tuple[ThreadMemory | None, str | None]:
    """The recorder a run needs, if any, and its run.json `memory_source`: (None, None) where
    torch.profiler records memory itself (a mode that does not profile every thread)."""
    if not mode.profile_all_threads:
        return None, None
    if pool is None:
        return None, not_recorded("this mode's threads are not branchscope's pool, the only threads it can record them on")
    legacy = legacy_profiler(torch)
    if legacy is None:
        return None, not_recorded(f"torch {getattr(torch, '__version__', '')} has no legacy profiler to record them on each thread")
    return ThreadMemory(torch, legacy), PER_THREAD
