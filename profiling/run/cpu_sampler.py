"""CPU use of every OS thread of the worker, sampled from the parent, as counter events on the trace's clock.

torch.profiler records only threads that run profiled ops: OpenMP intra-op workers never appear in
its traces, and a thread waiting on a lock looks the same as one that is not there. So while the
worker profiles, the runner (its parent) reads each thread's CPU time every 2 ms or so and
turns the differences into "percent of one core" samples.

Per-thread CPU time comes from `/proc/PID/task/TID/schedstat` (nanoseconds on CPU). The kernel
updates that figure for a running thread only at scheduler ticks (every 4 ms at HZ=250) and context
switches, so each sample also reads the thread's state (`R` = running or runnable) from
`/proc/PID/task/TID/stat`. The CPU time gained between two updates is spread over the sample
intervals in which the thread was seen running: totals stay exact and edges stay as sharp as the
sampling period. (psutil's `threads()` gives user/system time in 10 ms clock ticks; it is the fallback
where schedstat is missing.) Thread names come from `/proc/PID/task/TID/comm`.

The same schedstat line gives the time the thread spent runnable but waiting for a core (its second
field, `run_delay`), sampled as `wait_pct`: a busy thread that shares its core shows half a core of
CPU and half a core of waiting, so oversubscription is told apart from idleness. The kernel adds a
wait when it ends (the thread gets a core), so a wait shows in the interval where it ended.

Clock: samples are stamped with `time.time_ns()`. A torch.profiler trace writes
`baseTimeNanoseconds` at its top level and event `ts` in µs relative to it, so
`unix_ns = baseTimeNanoseconds + ts * 1000`; `to_counter_events` inverts that.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from branchscope.profiling.run.branch_pool import POOL_THREAD_NAME as BRANCH_POOL_THREAD_NAME
from branchscope.profiling.run.protocol import CPU_SAMPLE_CATEGORY, cpu_sample_name

#: Category of the counter events (see docs/internals.md, "Contracts between the engines").
CATEGORY = CPU_SAMPLE_CATEGORY
#: The OS name torch gives its inter-op pool threads (and that OpenMP workers they start inherit).
POOL_THREAD_NAME = "PTThreadPool"
#: The OS names of inter-op pools: torch's, and threads mode's Python pool (`branch_pool`).
POOL_THREAD_NAMES = (POOL_THREAD_NAME, BRANCH_POOL_THREAD_NAME)


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_thread_name(pid: int | str, tid: int) -> str | None:
    """The OS name (`comm`) of thread `tid` of process `pid` ("self" for this one); None once it is gone."""
    comm = _read(f"/proc/{pid}/task/{tid}/comm")
    return comm.strip() if comm else None


def read_thread_names(pid: int | str = "self") -> dict[int, str]:
    """{tid: OS name} of every thread of process `pid` ("self" for this one); {} where /proc is missing."""
    try:
        entries = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    names = {}
    for entry in entries:
        name = read_thread_name(pid, int(entry))
        if name is not None:
            names[int(entry)] = name
    return names


def read_thread_state(pid: int | str, tid: int) -> str | None:
    """The scheduler state letter of a thread (R running, S sleeping, ...); None once it is gone."""
    stat = _read(f"/proc/{pid}/task/{tid}/stat")
    if not stat:
        return None
    close = stat.rfind(")")
    return stat[close + 2 : close + 3] if close >= 0 else None


def wait_until_threads_sleep(tids: list[int], timeout_s: float = 1.0, settle: int = 5) -> bool:
    """Wait until every thread in `tids` has been asleep for `settle` checks in a row (at most
    `timeout_s`); True if they settled. Used by the worker to let the inter-op pool finish the
    tail of its tasks (ending their profiler ranges) before the profiler stops."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        states = [read_thread_state("self", tid) for tid in tids]
        quiet = quiet + 1 if all(s in (None, "S", "D", "T", "t", "Z", "X") for s in states) else 0
        if quiet >= settle:
            return True
        time.sleep(0.001)
    return False


def settle_interop_pool(timeout_s: float = 1.0) -> bool:
    """Wait until the threads of this process's inter-op pool (torch names them PTThreadPool) are all
    asleep, at most `timeout_s`; True if they settled (or there are none).

    Call it inside a torch.profiler session that ran forked TorchScript, just before the profiler
    stops: a forked task's future completes before its pool thread has finished the task (and closed
    its profiler ranges), and stopping the profiler while that thread still records races with it.
    The race corrupts the profiler's results on the heap: a crash when they are freed (often much
    later, by the cyclic garbage collector: torch's `profile` object sits in a reference cycle),
    or garbage bytes in the exported trace."""
    pool = [tid for tid, name in read_thread_names().items() if name == POOL_THREAD_NAME]
    return wait_until_threads_sleep(pool, timeout_s=timeout_s)


class ThreadCensus:
    """Which OS threads of this process are the main thread, the inter-op pool, the intra-op
    (OpenMP) workers, or other threads (torch's pthreadpool for XNNPACK, the profiler's, CUDA's).

    Names cannot tell: a new thread inherits its creator's name, so the OpenMP workers a pool thread
    starts are "PTThreadPool" too, and the main thread's are named like it. So the worker takes the
    census as threads start (see worker.run): threads present at the start are other threads;
    `note("intra")` after an intra-op parallel op on the main thread (libgomp starts a thread's team
    at its first parallel region) takes the main thread's team; `note("interop")` right after the
    first fork, of a task that does no OpenMP work, takes the new threads as the pool (c10's
    ThreadPool starts all its threads at once, on first use, before they name themselves). Any other
    call (`note()`) sorts threads that appeared since by name: pool-named ones are OpenMP workers of
    pool threads (intra), unless no pool was seen yet (a model forking by itself): then the lowest
    `interop` tids are the pool, started before any task ran (Linux hands out tids in increasing
    order); threads named like the main thread are OpenMP workers (intra) when
    `main_named_are_intra`, else other; the rest are other.
    """

    def __init__(self, main_tid: int, interop: int, names: dict[int, str] | None = None) -> None:
        names = read_thread_names() if names is None else names
        self.main_tid = main_tid
        self.interop_size = interop
        self.main_name = names.get(main_tid, "")
        self.roles: dict[int, str] = {tid: "main" if tid == main_tid else "other" for tid in names}
        #: The name of each thread when it was first seen.
        self.names: dict[int, str] = dict(names)

    def note(
        self, role: str | None = None, names: dict[int, str] | None = None, *, main_named_are_intra: bool = True
    ) -> list[int]:
        """Sorts the threads that appeared since the last census (see the class docstring) and
        returns them. `role` "intra", "interop" or "other": all of them have it; None: by name.
        `names`: {tid: name} of the threads now (default: read from /proc)."""
        names = read_thread_names() if names is None else names
        new = sorted(tid for tid in names if tid not in self.roles)
        self.names.update((tid, names[tid]) for tid in new)
        if role is not None:
            self.roles.update((tid, role) for tid in new)
            return new
        if not self.interop_tids:
            pool_named = [tid for tid in new if names[tid] in POOL_THREAD_NAMES]
            self.roles.update((tid, "interop") for tid in pool_named[: self.interop_size])
        for tid in new:
            if tid in self.roles:
                continue
            name = names[tid]
            intra = name in POOL_THREAD_NAMES or (main_named_are_intra and name == self.main_name)
            self.roles[tid] = "intra" if intra else "other"
        return new

    def _tids(self, role: str) -> list[int]:
        return sorted(tid for tid, r in self.roles.items() if r == role)

    @property
    def interop_tids(self) -> list[int]:
        return self._tids("interop")

    @property
    def intra_tids(self) -> list[int]:
        return self._tids("intra")

    @property
    def other_tids(self) -> list[int]:
        return self._tids("other")


@dataclass
class ThreadSeries:
    tid: int
    name: str
    #: Sample times (unix ns) and the thread's cumulative CPU time (ns) at each.
    ts_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    #: Whether the thread was running (or runnable) when sampled; None where the state is unknown.
    running: list[bool | None] = field(default_factory=list)
    #: The thread's cumulative time runnable but waiting for a core (ns; 0 where unknown).
    wait_ns: list[int] = field(default_factory=list)

    def wait_pct(self) -> list[float]:
        """Percent of the interval (ts_ns[i-1], ts_ns[i]] the thread waited for a core, for i >= 1."""
        pct = [0.0] * len(self.ts_ns)
        if len(self.wait_ns) != len(self.ts_ns):  # not sampled (a series built by hand)
            return pct
        for i in range(1, len(self.ts_ns)):
            span = max(self.ts_ns[i] - self.ts_ns[i - 1], 1)
            pct[i] = min(max(100.0 * (self.wait_ns[i] - self.wait_ns[i - 1]) / span, 0.0), 100.0)
        return pct

    def cpu_pct(self) -> list[float]:
        """Percent of one core over each interval (ts_ns[i-1], ts_ns[i]], for i >= 1.

        Totals are kept: the intervals after a sample at which the thread was not running hold
        exactly the CPU time it gained since then (see `_spread` and the late CPU below).
        """
        n = len(self.ts_ns)
        cap = [float(max(self.ts_ns[i] - self.ts_ns[i - 1], 1)) if i else 1.0 for i in range(n)]
        used = [0.0] * n  # ns of CPU given to each interval
        start = 1  # first interval of the current segment (intervals since the last CPU-time update)
        for j in range(1, n):
            gained = self.cpu_ns[j] - self.cpu_ns[start - 1]
            if gained <= 0 and j < n - 1:
                continue
            if gained > 0:
                left = self._spread(gained, start, j, cap, used)
                # More CPU than the segment's span: the kernel had not yet counted all of a running
                # thread's time at the sample that began it (it does at its next tick), so the rest
                # ran before that sample. It goes to the intervals just before, back to the last
                # sample that saw the thread asleep (whose CPU time was up to date).
                i = start - 1
                while left > 1e-6 and i >= 1 and self.running[i] is not False:
                    add = min(left, cap[i] - used[i])
                    used[i] += add
                    left -= add
                    i -= 1
            start = j + 1
        return [100.0 * used[i] / cap[i] if i else 0.0 for i in range(n)]

    def _spread(self, gained: int, first: int, last: int, cap: list[float], used: list[float]) -> float:
        """Spreads `gained` ns of CPU over intervals first..last, at most 100% each (`cap`: their
        lengths, `used`: the CPU they hold); returns what did not fit.

        Intervals with the thread seen running at both ends are filled first, then those with it
        running at one end (it started or stopped inside), then the rest of the span (short bursts
        between samples), each group in proportion to interval length.
        """
        span = range(first, last + 1)
        ends = {i: bool(self.running[i]) + bool(self.running[i - 1]) for i in span}
        left = float(gained)
        for pool in ([i for i in span if ends[i] == 2], [i for i in span if ends[i] == 1], list(span)):
            open_ = [i for i in pool if used[i] < cap[i] - 1e-6]
            while left > 1e-6 and open_:
                total = sum(cap[i] for i in open_)
                given = 0.0
                for i in open_:
                    add = min(left * cap[i] / total, cap[i] - used[i])
                    used[i] += add
                    given += add
                left -= given
                open_ = [i for i in open_ if used[i] < cap[i] - 1e-6]
        return max(left, 0.0)


class ThreadCpuSampler:
    """Samples the CPU time of each thread of process `pid`. Call `sample()` at the rate you want.

    Every tick competes with the worker for the same few cores, so a tick does little: the
    schedstat and stat files of each thread stay open and are re-read with `os.pread`, and the list
    of threads is read again only every `rescan_every` ticks (a new thread shows up within that
    many ticks, ~20 ms at the default 1 ms to 2 ms period). Call `close()` when done.
    """

    def __init__(self, pid: int, rescan_every: int = 20) -> None:
        self.pid = pid
        self.task_dir = f"/proc/{pid}/task"
        self.series: dict[int, ThreadSeries] = {}
        self.alive = True
        self.rescan_every = max(1, rescan_every)
        self.use_schedstat = _read(f"/proc/{pid}/schedstat") is not None
        self._psutil = None if self.use_schedstat else psutil.Process(pid)
        #: tid -> (schedstat fd, stat fd), kept open between ticks.
        self._fds: dict[int, tuple[int, int]] = {}
        self._ticks = 0

    def _rescan(self) -> bool:
        """Opens the files of threads that appeared and forgets those that ended; False once the process is gone."""
        try:
            tids = {int(entry) for entry in os.listdir(self.task_dir)}
        except OSError:
            return False
        for tid in list(self._fds):
            if tid not in tids:
                self._drop(tid)
        for tid in tids - self._fds.keys():
            try:
                sched = os.open(f"{self.task_dir}/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue
            try:
                stat = os.open(f"{self.task_dir}/{tid}/stat", os.O_RDONLY)
            except OSError:
                os.close(sched)
                continue
            self._fds[tid] = (sched, stat)
        return True

    def _drop(self, tid: int) -> None:
        for fd in self._fds.pop(tid, ()):
            os.close(fd)

    def close(self) -> None:
        """Closes the files kept open between ticks (the series stay)."""
        for tid in list(self._fds):
            self._drop(tid)

    def sample(self) -> bool:
        """Takes one sample of every thread; False once the process is gone."""
        if not self.alive:
            return False
        t0 = time.time_ns()
        readings: list[tuple[int, int, bool | None, int]] = []
        if self.use_schedstat:
            if self._ticks % self.rescan_every == 0 and not self._rescan():
                self.alive = False
                self.close()
                return False
            self._ticks += 1
            for tid, (sched, stat) in list(self._fds.items()):
                try:
                    text = os.pread(sched, 64, 0)
                    head = os.pread(stat, 64, 0)  # "TID (comm) S ...": the state follows the last ")"
                except OSError:  # the thread ended (ESRCH)
                    self._drop(tid)
                    continue
                if not text:
                    self._drop(tid)
                    continue
                close = head.rfind(b")")
                state = head[close + 2 : close + 3] if close >= 0 else b""
                fields = text.split()
                wait = int(fields[1]) if len(fields) > 1 else 0
                readings.append((tid, int(fields[0]), state == b"R" if state else None, wait))
        else:
            try:
                threads = self._psutil.threads()  # type: ignore[union-attr]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self.alive = False
                return False
            readings = [(t.id, int((t.user_time + t.system_time) * 1e9), None, 0) for t in threads]
        t1 = time.time_ns()
        if not readings:
            self.alive = False
            self.close()
            return False
        stamp = (t0 + t1) // 2
        for tid, cpu, running, wait in readings:
            series = self.series.get(tid)
            if series is None:
                series = self.series[tid] = ThreadSeries(tid, read_thread_name(self.pid, tid) or "?")
            series.ts_ns.append(stamp)
            series.cpu_ns.append(cpu)
            series.running.append(running)
            series.wait_ns.append(wait)
        return True

    def refresh_names(self) -> None:
        """Threads may rename themselves after they start (torch's pool threads do); read names again."""
        for tid, series in self.series.items():
            name = read_thread_name(self.pid, tid)
            if name:
                series.name = name

    def to_counter_events(self, base_time_ns: int, pid: int | None = None) -> list[dict[str, Any]]:
        """Chrome counter events, one track per thread, `ts` in µs relative to `base_time_ns`.

        Each event's `cpu_pct` is the thread's CPU use over the interval that ends at its `ts`
        (100 = one core busy all the interval), `wait_pct` its time runnable but waiting for a core.
        """
        pid = self.pid if pid is None else pid
        events: list[dict[str, Any]] = []
        for tid in sorted(self.series):
            s = self.series[tid]
            name = cpu_sample_name(tid, s.name)
            pcts, waits = s.cpu_pct(), s.wait_pct()
            for i in range(1, len(s.ts_ns)):
                pct = pcts[i]
                events.append(
                    {
                        "ph": "C",
                        "cat": CATEGORY,
                        "name": name,
                        "pid": pid,
                        "tid": tid,
                        "ts": round((s.ts_ns[i] - base_time_ns) / 1000.0, 3),
                        "args": {"cpu_pct": round(max(pct, 0.0), 2), "wait_pct": round(waits[i], 2)},
                    }
                )
        return events
