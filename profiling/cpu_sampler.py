"""CPU use of every OS thread of the worker, sampled from the parent, as counter events on the trace's clock.

torch.profiler records only threads that run profiled ops: OpenMP intra-op workers never appear in
its traces, and a thread waiting on a lock looks the same as one that is not there. So while the
worker profiles, the runner (its parent) reads each thread's CPU time every millisecond or so and
turns the differences into "percent of one core" samples.

Per-thread CPU time comes from `/proc/PID/task/TID/schedstat` (nanoseconds on CPU). The kernel
updates that figure for a running thread only at scheduler ticks (every 4 ms at HZ=250) and context
switches, so each sample also reads the thread's state (`R` = running or runnable) from
`/proc/PID/task/TID/stat`. The CPU time gained between two updates is spread over the sample
intervals in which the thread was seen running: totals stay exact and edges stay as sharp as the
sampling period. (psutil's `threads()` gives user/system time in 10 ms clock ticks; it is the fallback
where schedstat is missing.) Thread names come from `/proc/PID/task/TID/comm`.

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

#: Category of the counter events (see ARCHITECTURE.md, "Contracts between the runner and the views").
CATEGORY = "cpu_sample"


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


@dataclass
class ThreadSeries:
    tid: int
    name: str
    #: Sample times (unix ns) and the thread's cumulative CPU time (ns) at each.
    ts_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    #: Whether the thread was running (or runnable) when sampled; None where the state is unknown.
    running: list[bool | None] = field(default_factory=list)

    def cpu_pct(self) -> list[float]:
        """Percent of one core over each interval (ts_ns[i-1], ts_ns[i]], for i >= 1."""
        n = len(self.ts_ns)
        pct = [0.0] * n
        start = 1  # first interval of the current segment (intervals since the last CPU-time update)
        for j in range(1, n):
            gained = self.cpu_ns[j] - self.cpu_ns[start - 1]
            if gained <= 0 and j < n - 1:
                continue
            if gained > 0:
                self._spread(gained, start, j, pct)
            start = j + 1
        return pct

    def _spread(self, gained: int, first: int, last: int, pct: list[float]) -> None:
        """Spreads `gained` ns of CPU over intervals first..last, at most 100% each.

        Intervals with the thread seen running at both ends are filled first, then those with it
        running at one end (it started or stopped inside), then the rest of the span (short bursts
        between samples), each group in proportion to interval length.
        """
        span = range(first, last + 1)
        cap = {i: float(max(self.ts_ns[i] - self.ts_ns[i - 1], 1)) for i in span}
        ends = {i: bool(self.running[i]) + bool(self.running[i - 1]) for i in span}
        used = dict.fromkeys(span, 0.0)
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
        for i in span:
            pct[i] = 100.0 * used[i] / cap[i]


class ThreadCpuSampler:
    """Samples the CPU time of each thread of process `pid`. Call `sample()` at the rate you want."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.task_dir = f"/proc/{pid}/task"
        self.series: dict[int, ThreadSeries] = {}
        self.alive = True
        self.use_schedstat = _read(f"/proc/{pid}/schedstat") is not None
        self._psutil = None if self.use_schedstat else psutil.Process(pid)

    def _name(self, tid: int) -> str:
        comm = _read(f"{self.task_dir}/{tid}/comm")
        return comm.strip() if comm else "?"

    def sample(self) -> bool:
        """Takes one sample of every thread; False once the process is gone."""
        if not self.alive:
            return False
        t0 = time.time_ns()
        readings: list[tuple[int, int, bool | None]] = []
        if self.use_schedstat:
            try:
                tids = os.listdir(self.task_dir)
            except OSError:
                self.alive = False
                return False
            for entry in tids:
                text = _read(f"{self.task_dir}/{entry}/schedstat")
                stat = _read(f"{self.task_dir}/{entry}/stat")
                if text:
                    state = stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] if stat else ""
                    readings.append((int(entry), int(text.split()[0]), state == "R" if state else None))
        else:
            try:
                threads = self._psutil.threads()  # type: ignore[union-attr]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self.alive = False
                return False
            readings = [(t.id, int((t.user_time + t.system_time) * 1e9), None) for t in threads]
        t1 = time.time_ns()
        if not readings:
            self.alive = False
            return False
        stamp = (t0 + t1) // 2
        for tid, cpu, running in readings:
            series = self.series.get(tid)
            if series is None:
                series = self.series[tid] = ThreadSeries(tid, self._name(tid))
            series.ts_ns.append(stamp)
            series.cpu_ns.append(cpu)
            series.running.append(running)
        return True

    def refresh_names(self) -> None:
        """Threads may rename themselves after they start (torch's pool threads do); read names again."""
        for tid, series in self.series.items():
            comm = _read(f"{self.task_dir}/{tid}/comm")
            if comm:
                series.name = comm.strip()

    @property
    def sample_count(self) -> int:
        return max((len(s.ts_ns) for s in self.series.values()), default=0)

    def to_counter_events(self, base_time_ns: int, pid: int | None = None) -> list[dict[str, Any]]:
        """Chrome counter events, one track per thread, `ts` in µs relative to `base_time_ns`.

        Each event's `cpu_pct` is the thread's CPU use over the interval that ends at its `ts`
        (100 = one core busy all the interval).
        """
        pid = self.pid if pid is None else pid
        events: list[dict[str, Any]] = []
        for tid in sorted(self.series):
            s = self.series[tid]
            name = f"thread {tid} ({s.name})"
            pcts = s.cpu_pct()
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
                        "args": {"cpu_pct": round(max(pct, 0.0), 2)},
                    }
                )
        return events
