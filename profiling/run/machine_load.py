"""The machine's load around a run, measured by the runner from /proc (`records.LoadRecord`).

A run's step times mean little when other work shared its cores. The runner reads the 1-minute load
average when the run starts and when it ends, and, between the worker's "timing" phase and its
"export" phase (the steps timed without the profiler, then the profiled ones), how busy the cores
this process may use were (/proc/stat, per CPU) less what this run's own processes used (the runner
itself, the process it started and every descendant: psutil's user + system time). What is left,
divided by the seconds between, is the average number of cores other processes used. More than
`machine.BUSY_SHARE` of the usable cores flags the run (`busy`) and adds a warning to run.json.
What the process the runner started and its descendants used over the same seconds is the cores the
run got (`own_cores`; the runner itself, which samples, is left out): with the cores others used, it
says whether the run was starved of cores (`starved`, `profiling/trace/starved.py`), run.json's
`starved`.

Both figures tick at USER_HZ (10 ms), so over a phase of a second they are exact to a few hundredths
of a core; a process of the run that ended between the two readings loses its time to "others".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil

from branchscope.profiling import machine
from branchscope.profiling.trace.records import LoadRecord, RunRecord
from branchscope.profiling.trace.starved import load_starved

PROC = "/proc"


def _read_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", "replace")
    except OSError:
        return None


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (AttributeError, OSError, ValueError):
        return 100


def _cpu_seconds(procs: dict[int, psutil.Process]) -> dict[int, float]:
    """{pid: user + system seconds} of the processes still there."""
    seconds = {}
    for pid, p in procs.items():
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        seconds[pid] = t.user + t.system
    return seconds


def _tree(root: int | None) -> dict[int, psutil.Process]:
    """This process, `root` and every descendant of `root`."""
    procs = {os.getpid(): psutil.Process()}
    if root is None:
        return procs
    try:
        top = psutil.Process(root)
        procs[root] = top
        for child in top.children(recursive=True):
            procs[child.pid] = child
    except psutil.Error:
        pass
    return procs


def _run_delays(procs: dict[int, psutil.Process], proc: str = PROC) -> dict[tuple[int, int], int]:
    """{(pid, tid): ns the thread has waited for a core, runnable} of every thread of `procs`, from
    /proc/PID/task/TID/schedstat (its second field, `run_delay`)."""
    delays = {}
    for pid in procs:
        try:
            tids = os.listdir(os.path.join(proc, str(pid), "task"))
        except OSError:
            continue
        for tid in tids:
            text = _read_text(os.path.join(proc, str(pid), "task", tid, "schedstat"), 256)
            fields = text.split() if text else []
            if len(fields) >= 2 and fields[1].isdigit() and tid.isdigit():
                delays[(pid, int(tid))] = int(fields[1])
    return delays


@dataclass
class _Reading:
    t: float
    busy_ticks: int
    own: dict[int, float]
    procs: dict[int, psutil.Process] = field(repr=False)
    delays: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)


class LoadMeter:
    """Reads the load around one run: made as the run starts (the load average then), `begin`
    when the worker starts timing its steps, `end` when it has profiled them (both with the pid of
    the process the runner started), `record()` as the run is committed."""

    def __init__(self, proc: str = PROC) -> None:
        self.proc = proc
        self.cpus = machine.usable_cpus()
        self.cores = machine.usable_cores()
        self.loadavg_start = self._loadavg()
        self._begin: _Reading | None = None
        self.others_cores: float | None = None
        #: The cores the run's own processes (the process started and its descendants) used, and the
        #: cores their threads waited for, runnable (schedstat's run delay: threads that ended
        #: between the readings lose theirs).
        self.own_cores: float | None = None
        self.own_wait_cores: float | None = None
        self.seconds: float | None = None

    def _loadavg(self) -> float | None:
        text = _read_text(os.path.join(self.proc, "loadavg"), 4096)
        return machine.load_average(text) if text is not None else None

    def _busy_ticks(self) -> int | None:
        text = _read_text(os.path.join(self.proc, "stat"))
        ticks = machine.cpu_ticks(text, self.cpus) if text is not None else None
        return ticks[0] if ticks is not None else None

    def _read(self, root: int | None) -> _Reading | None:
        procs = _tree(root)
        own = _cpu_seconds(procs)
        busy = self._busy_ticks()
        if busy is None or (root is not None and root not in own):
            return None
        return _Reading(time.monotonic(), busy, own, procs, _run_delays(self._run_procs(procs), self.proc))

    @staticmethod
    def _run_procs(procs: dict[int, psutil.Process]) -> dict[int, psutil.Process]:
        """The run's processes without the runner itself (which samples: its waits are not the run's)."""
        return {pid: p for pid, p in procs.items() if pid != os.getpid()}

    def begin(self, root: int | None) -> None:
        """The worker starts timing its steps (`root`: the process the runner started)."""
        if self._begin is None and self.others_cores is None:
            self._begin = self._read(root)

    def end(self, root: int | None) -> None:
        """The worker has profiled its steps: the cores others used since `begin` (once)."""
        start, self._begin = self._begin, None
        if start is None:
            return
        # The processes of the run now: those known at `begin` and any started since.
        procs = {**start.procs, **_tree(root)}
        own_now = _cpu_seconds(procs)
        busy = self._busy_ticks()
        seconds = time.monotonic() - start.t
        if busy is None or seconds <= 0 or (root is not None and root not in own_now):
            return
        used = {pid: s - start.own.get(pid, 0.0) for pid, s in own_now.items()}
        own = sum(used.values())
        busy_s = (busy - start.busy_ticks) / _clock_ticks()
        others = (busy_s - own) / seconds
        self.others_cores = min(float(self.cores), max(0.0, others))
        run = sum(s for pid, s in used.items() if pid != os.getpid())
        self.own_cores = min(float(self.cores), max(0.0, run / seconds))
        delays = _run_delays(self._run_procs(procs), self.proc)
        both = [ns - start.delays[key] for key, ns in delays.items() if key in start.delays]
        self.own_wait_cores = max(0.0, sum(both) / 1e9 / seconds) if both else None  # no thread read twice: unknown
        self.seconds = seconds

    def record(self) -> LoadRecord:
        """What run.json says of the load (read now: the load average at the end)."""
        busy = None if self.others_cores is None else machine.is_busy(self.others_cores, self.cores)
        return LoadRecord(
            loadavg_start=self.loadavg_start,
            loadavg_end=self._loadavg(),
            cores=self.cores,
            others_cores=None if self.others_cores is None else round(self.others_cores, 3),
            own_cores=None if self.own_cores is None else round(self.own_cores, 3),
            own_wait_cores=None if self.own_wait_cores is None else round(self.own_wait_cores, 3),
            seconds=None if self.seconds is None else round(self.seconds, 3),
            busy=busy,
        )

    def starved(self, run: RunRecord) -> bool | None:
        """run.json's `starved`: whether the run (its mode, threads and ranks here) got, or was left,
        fewer cores than its threads could use while it timed and profiled its steps; None when that
        was not measured or its threads are unknown."""
        return load_starved(run.mode, run.interop, run.intra, run.nproc, self.record())

    def warning(self) -> str | None:
        """run.json's warning line when the run was busy, else None."""
        if self.others_cores is None or not machine.is_busy(self.others_cores, self.cores):
            return None
        return machine.busy_warning(self.others_cores, self.cores)
