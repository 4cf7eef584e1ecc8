"""CPU samples of the worker's OS threads line up with the profiler's events on the trace's clock.

What the sampler guarantees, on any machine however busy (see profiling/run/cpu_sampler.py), and so
what these tests check: the samples cover the profiled time, tick after tick, on the trace's clock; a
thread busy all through an op is seen running (on a core or waiting for one) at every sample inside
it; the CPU time the samples add up to is the thread's own, as /proc counts it; and that CPU goes to
the intervals in which the thread ran, so a busy op's CPU lands in the op, not in the sleeps around
it. None of them asserts how much of a core a thread got, nor how long anything took: beside other
work a spinning thread gets whatever share of a core the scheduler gives it (issue 17).
"""

from __future__ import annotations

import gzip
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from branchscope.profiling.run import supervise
from branchscope.profiling.run.cpu_sampler import (
    ThreadCpuSampler,
    ThreadSeries,
    read_thread_name,
    read_thread_names,
)
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.run.runner import run_profile
from tests.paths import MODELS

TOLERANCE_NS = 2_000_000  # the issue: samples line up with the trace's events within 2 ms
IDLE_NS, BUSY_NS = 30_000_000, 60_000_000  # fixtures/models/busy_then_idle.py: 30 ms asleep, 60 ms busy, 30 ms asleep
INTERVAL_S = 0.002  # the runner's default sample period
#: /proc/PID/task/TID/stat counts CPU time in clock ticks (1/100 s on Linux), user and system apart.
CLOCK_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 1e7

needs_proc = pytest.mark.skipif(
    not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"), reason="needs /proc with schedstat"
)


def _stat_cpu_ns(pid: int, tid: int) -> float | None:
    """The thread's CPU time per /proc/PID/task/TID/stat (utime + stime, whole clock ticks), in ns."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # fields[0] is the state (field 3): utime is field 14
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK_NS


@dataclass
class Tick:
    """One sample of the watched thread as a witness saw it: the wall-clock span (unix ns) in which
    the sampler read the thread's files, and the thread's CPU time per /proc/.../stat just before
    and just after."""

    read_from: int
    read_to: int
    stat_before: float
    stat_after: float


class Witness(ThreadCpuSampler):
    """The sampler, plus a `Tick` for each of its samples of thread `tid` (default: the main thread),
    by the sample's stamp."""

    def __init__(self, pid: int, tid: int | None = None, **kwargs) -> None:
        super().__init__(pid, **kwargs)
        self.tid = pid if tid is None else tid
        self.ticks: dict[int, Tick] = {}

    def sample(self) -> bool:
        before = _stat_cpu_ns(self.pid, self.tid)
        read_from = time.time_ns()
        ok = super().sample()
        read_to = time.time_ns()
        after = _stat_cpu_ns(self.pid, self.tid)
        series = self.series.get(self.tid)
        if ok and series is not None and read_from <= series.ts_ns[-1] <= read_to and None not in (before, after):
            self.ticks[series.ts_ns[-1]] = Tick(read_from, read_to, before, after)  # type: ignore[arg-type]
        return ok


def _check_busy_ops(
    series: ThreadSeries, ticks: dict[int, Tick], pct: dict[int, float], ops: list[tuple[int, int]]
) -> None:
    """Checks the samples of a thread that spun through each of `ops` ((start, end), unix ns, on
    the samples' clock) and slept IDLE_NS before and after each.

    `pct`: {i: cpu_pct of the interval (ts_ns[i-1], ts_ns[i]]} for the intervals to check, as
    shown (the trace's, or the series' own); consecutive indices.
    """
    ts, cpu, running = series.ts_ns, series.cpu_ns, series.running
    first, last = min(pct), max(pct)
    assert sorted(pct) == list(range(first, last + 1)), "a sample is missing"
    assert first >= 1 and last < len(ts)

    def cpu_ns(lo: int, hi: int, *, within: bool = False) -> float:
        """The CPU of the intervals overlapping (lo, hi), or `within` it."""
        return sum(
            p / 100.0 * (ts[i] - ts[i - 1])
            for i, p in pct.items()
            if ((lo <= ts[i - 1] and ts[i] <= hi) if within else (ts[i - 1] < hi and ts[i] > lo))
        )

    # Coverage: the intervals run from before the first op to after the last.
    assert ts[first - 1] <= ops[0][0] and ts[last] >= ops[-1][1], (ts[first - 1], ts[last], ops)
    for start, end in ops:
        # Spinning, the thread is runnable all along (on a core or waiting for one, whatever the
        # load): each sample read inside the op sees it running (a clock off by more shows here).
        inside = [i for i in pct if (t := ticks.get(ts[i])) and start + TOLERANCE_NS <= t.read_from and t.read_to <= end - TOLERANCE_NS]  # fmt: skip
        assert inside, f"no sample inside the op at {start}"
        assert all(running[i] for i in inside), (start, end, [(ts[i], running[i]) for i in inside])
        # Its CPU goes to the op's intervals rather than to those of the sleeps around it: how much
        # CPU the thread got depends on the load, where it shows does not. (Only mostly: the kernel
        # counts a running thread's CPU time at its ticks and when it stops, so the CPU of one such
        # update is spread over the intervals in which the thread was seen runnable, and after the op
        # a preempted thread waits, runnable, before it goes to sleep.)
        in_op = cpu_ns(start - TOLERANCE_NS, end + TOLERANCE_NS)
        in_sleeps = cpu_ns(start - IDLE_NS + TOLERANCE_NS, start - TOLERANCE_NS, within=True) + cpu_ns(
            end + TOLERANCE_NS, end + IDLE_NS - TOLERANCE_NS, within=True
        )
        assert in_op > in_sleeps, (start, in_op, in_sleeps)

    # Totals: from a sample that saw the thread asleep before the first op to one after the last
    # (its CPU time is up to date while it sleeps), the samples hold exactly the CPU time the
    # thread gained, and that is its CPU time as /proc/.../stat counts it.
    def settled(i: int) -> bool:  # asleep, its CPU counted up to then, and a witness's tick
        return running[i] is False and (i == 0 or cpu[i] != cpu[i - 1]) and ts[i] in ticks

    a = max((i for i in range(first - 1, last + 1) if ts[i] <= ops[0][0] and settled(i)), default=None)
    b = min((i for i in range(first, last + 1) if ts[i] >= ops[-1][1] and settled(i)), default=None)
    assert a is not None and b is not None, "no sample while the thread slept before the first op and after the last"
    sampled = sum(pct[i] / 100.0 * (ts[i] - ts[i - 1]) for i in range(a + 1, b + 1))
    gained = cpu[b] - cpu[a]
    # cpu_pct rounded to 0.01 (the trace's) is off by at most 0.005% of each interval.
    assert abs(sampled - gained) <= 5e-5 * (ts[b] - ts[a]) + 1000, (sampled, gained)
    # /proc/.../stat: utime and stime each truncated to whole clock ticks, read just around the samples.
    low = ticks[ts[b]].stat_before - ticks[ts[a]].stat_after - 2 * CLOCK_TICK_NS
    high = ticks[ts[b]].stat_after - ticks[ts[a]].stat_before + 2 * CLOCK_TICK_NS
    assert low <= sampled <= high, (sampled, low, high)
    # Most of it in the ops: between them the thread only slept (and stepped).
    in_ops = sum(
        pct[i] / 100.0 * (ts[i] - ts[i - 1])
        for i in range(a + 1, b + 1)
        if any(ts[i - 1] < end + TOLERANCE_NS and ts[i] > start - TOLERANCE_NS for start, end in ops)
    )
    assert in_ops > 0.5 * sampled, (in_ops, sampled)


def test_cpu_time_gained_between_updates_goes_to_the_intervals_seen_running():
    # The kernel updated the CPU time only at the last sample (a tick): 2 ms gained over 4 intervals,
    # but the thread was seen running only at the last three samples.
    s = ThreadSeries(1, "t", ts_ns=[0, 1_000_000, 2_000_000, 3_000_000, 4_000_000],
                     cpu_ns=[0, 0, 0, 0, 2_000_000], running=[False, False, True, True, True])  # fmt: skip
    pct = s.cpu_pct()
    assert pct[1] == 0.0 and pct[2] == 0.0  # idle at both ends; started inside, after the others filled
    assert pct[3] == pytest.approx(100.0) and pct[4] == pytest.approx(100.0)
    assert sum(pct[1:]) == pytest.approx(200.0)  # totals are kept: 2 ms over 1 ms intervals


def test_cpu_time_without_states_is_spread_evenly_and_capped():
    s = ThreadSeries(1, "t", ts_ns=[0, 1000, 2000, 3000], cpu_ns=[0, 0, 0, 1500], running=[None] * 4)
    assert s.cpu_pct()[1:] == [pytest.approx(50.0)] * 3


def test_cpu_time_counted_late_goes_to_the_intervals_before_and_totals_are_kept():
    # A thread running all along from an asleep sample: the kernel counted only 0.6 ms of its first
    # 1 ms interval by the sample ending it (a running thread's time is updated at its ticks), and
    # the rest, with the next interval's 1 ms, by the next: 1.4 ms in a 1 ms interval. The 0.4 ms
    # over ran in the interval before; nothing is lost.
    s = ThreadSeries(1, "t", ts_ns=[0, 1_000_000, 2_000_000, 3_000_000],
                     cpu_ns=[0, 600_000, 2_000_000, 3_000_000], running=[False, True, True, True])  # fmt: skip
    assert s.cpu_pct()[1:] == [pytest.approx(100.0)] * 3
    # Not past a sample that saw the thread asleep: its CPU time was up to date there.
    s.running[1] = False
    s.cpu_ns = [0, 600_000, 2_000_000, 2_000_000]
    assert s.cpu_pct()[1:] == [pytest.approx(60.0), pytest.approx(100.0), 0.0]


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
def test_sampler_finds_new_threads_within_a_rescan_and_forgets_ended_ones():
    open_before = _fd_count()
    sampler = ThreadCpuSampler(os.getpid(), rescan_every=5)
    assert sampler.sample()  # tick 0: lists the threads
    started, stop, tids = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=lambda: (tids.append(threading.get_native_id()), started.set(), stop.wait()))
    thread.start()
    try:
        assert started.wait(30)
        for _ in range(4):  # ticks 1-4 only re-read the threads already known
            assert sampler.sample()
        assert tids[0] not in sampler.series
        assert sampler.sample()  # tick 5 lists the threads again
        assert len(sampler.series[tids[0]].ts_ns) == 1
        assert sampler.series[threading.get_native_id()].ts_ns[-1] == sampler.series[tids[0]].ts_ns[-1]
    finally:
        stop.set()
        thread.join()
    deadline = time.monotonic() + 30  # join() returns a moment before the OS thread is gone
    while os.path.exists(f"/proc/self/task/{tids[0]}") and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sampler.sample()  # the ended thread's files fail to read: it is dropped, its samples stay
    assert sampler.sample() and len(sampler.series[tids[0]].ts_ns) == 1
    sampler.close()
    assert _fd_count() == open_before
    assert read_thread_names()[threading.get_native_id()] == read_thread_name("self", threading.get_native_id())


#: Sleeps IDLE_NS, spins BUSY_NS, three times, then sleeps again; prints the spins' (start, end) in
#: unix ns. Starts when told to (a line on stdin) and stays until stdin closes.
BUSY_CHILD = f"""
import json, sys, time
print("ready", flush=True)
sys.stdin.readline()
ops = []
for _ in range(3):
    time.sleep({IDLE_NS / 1e9})
    start = time.time_ns()
    end = time.perf_counter() + {BUSY_NS / 1e9}
    while time.perf_counter() < end:
        pass
    ops.append((start, time.time_ns()))
time.sleep({IDLE_NS / 1e9})
print(json.dumps(ops), flush=True)
sys.stdin.read()
"""


@needs_proc
def test_a_busy_processs_samples_cover_it_and_add_up_to_its_cpu_time_where_it_ran():
    """The sampler on its own, on a process that spins between sleeps, sampled the way the runner does."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"ready\n"
        sampler = Witness(proc.pid)
        assert sampler.sample()
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        next_tick = time.monotonic()
        while not select.select([proc.stdout], [], [], max(0.0, next_tick - time.monotonic()))[0]:
            assert sampler.sample()
            next_tick = max(next_tick + INTERVAL_S, time.monotonic() - INTERVAL_S)  # the runner's schedule
        ops = [tuple(op) for op in json.loads(proc.stdout.readline())]
        assert sampler.sample()  # the child now waits on stdin
        sampler.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)  # a guard against a hang, not a timing assertion
    series = sampler.series[proc.pid]
    pct = series.cpu_pct()
    _check_busy_ops(series, sampler.ticks, {i: pct[i] for i in range(1, len(pct))}, ops)


@needs_proc
@pytest.mark.slow
def test_busy_op_lines_up_with_its_threads_samples(tmp_path, monkeypatch):
    """A 60 ms single-threaded spin between two 30 ms sleeps, three steps, against the worker's main
    thread's samples in trace.json.gz: they are the sampler's own, put on the trace's clock, and what
    they show for the ops (see _check_busy_ops) holds against the profiler's events."""
    witnesses: list[Witness] = []

    def witness(pid: int) -> Witness:
        witnesses.append(Witness(pid))
        return witnesses[-1]

    monkeypatch.setattr(supervise, "ThreadCpuSampler", witness)
    result = run_profile(
        RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(model=MODELS / "busy_then_idle.py", steps=3, warmup=0))
    )
    assert result.ok, result.message
    (sampler,) = witnesses
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    base, main = trace["baseTimeNanoseconds"], trace["branchscope"]["main_tid"]
    assert main == sampler.pid
    series = sampler.series[main]
    samples = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample" and e["tid"] == main]
    # Each sample is one of the sampler's, by its stamp on the trace's clock (µs after baseTimeNanoseconds).
    index = {ts: i for i, ts in enumerate(series.ts_ns)}
    pct: dict[int, float] = {}
    for e in samples:
        i = index.get(base + round(e["ts"] * 1000))
        assert i is not None and i not in pct, e
        pct[i] = e["args"]["cpu_pct"]
    ops = [
        (base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("name") == "busy"
    ]
    assert len(ops) == 3 and all(e.get("tid") == main for e in trace["traceEvents"] if e.get("name") == "busy")
    _check_busy_ops(series, sampler.ticks, pct, sorted(ops))


def _steal_ns(core: int) -> float:
    """Time the hypervisor took core `core` from this machine (/proc/stat), in ns; 0 where unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                fields = line.split()
                if fields[0] == f"cpu{core}":
                    return int(fields[8]) * CLOCK_TICK_NS if len(fields) > 8 else 0.0
    except OSError:
        pass
    return 0.0


@needs_proc
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_busy_threads_sharing_one_core_show_as_running_or_waiting_all_along():
    """Two spinning processes pinned to one core. Each is runnable all the time, so its CPU plus its
    time waiting for the core make up the whole window; they share one core, so their CPU adds up to
    one core at most and each waits. Other work on that core (a busy machine) only moves time from
    CPU to waiting: nothing here assumes the core was free."""
    core = min(os.sched_getaffinity(0))
    spin = f"import os; os.sched_setaffinity(0, {{{core}}}); print(flush=True); exec('while True: pass')"
    procs = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        assert all(p.stdout is not None and p.stdout.readline() == b"\n" for p in procs)  # pinned, spinning
        samplers = [ThreadCpuSampler(p.pid, rescan_every=1000) for p in procs]
        stolen = -_steal_ns(core)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            assert all(s.sample() for s in samplers)
            time.sleep(INTERVAL_S)
        stolen += _steal_ns(core)
        series = [s.series[p.pid] for s, p in zip(samplers, procs, strict=True)]
        for s in samplers:
            s.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    shares = []
    for s in series:
        wall = s.ts_ns[-1] - s.ts_ns[0]
        cpu = s.cpu_ns[-1] - s.cpu_ns[0]
        wait = s.wait_ns[-1] - s.wait_ns[0]
        # At each end a wait may be counted before it began or not yet (the kernel adds a wait when it
        # ends), and CPU time lags by a scheduler tick: 10% of the window covers both.
        assert wall - stolen - 0.1 * wall <= cpu + wait <= 1.1 * wall, (cpu / wall, wait / wall, stolen / wall)
        assert max(s.wait_pct()) > 0
        shares.append(cpu / wall)
    assert sum(shares) <= 1.1, shares  # one core between them


def test_wait_until_threads_sleep_tells_busy_from_idle_threads():
    from branchscope.profiling.run.cpu_sampler import wait_until_threads_sleep

    stop = threading.Event()
    tids: dict[str, int] = {}

    def spin() -> None:
        tids["busy"] = threading.get_native_id()
        while not stop.is_set():
            pass

    def idle() -> None:
        tids["idle"] = threading.get_native_id()
        stop.wait()

    threads = [threading.Thread(target=spin), threading.Thread(target=idle)]
    for t in threads:
        t.start()
    try:
        while len(tids) < 2:
            stop.wait(0.001)
        assert wait_until_threads_sleep([tids["idle"]], timeout_s=30.0)  # a bound, not a timing assertion
        assert not wait_until_threads_sleep([tids["idle"], tids["busy"]], timeout_s=0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
