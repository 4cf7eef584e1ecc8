"""CPU samples of the worker's OS threads line up with the profiler's events on the trace's clock."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from branchscope.profiling.run.cpu_sampler import (
    ThreadCpuSampler,
    ThreadSeries,
    read_thread_name,
    read_thread_names,
)
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.run.runner import run_profile

MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
TOLERANCE_US = 2000.0  # the issue: within 2 ms
WINDOW_US = 25_000.0  # looked at around each busy op (inside the model's 30 ms sleeps)
BUSY_PCT = 50.0


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


@pytest.mark.slow
def test_busy_op_lines_up_with_its_threads_samples(tmp_path):
    """A 60 ms single-threaded spin between two 30 ms sleeps, against the main thread's samples
(CPU plus waiting for a core: see the comment below).

    Robust to a loaded machine (the worker or the sampler may be preempted for a while): the edges of
    the spin seen in the samples (first and last sample at or above 50%) must fall on the op's start and
    end within 2 ms plus one sample period; inside, the typical (median) sample is busy; counts are
    relative to the observed sample period.
    """
    result = run_profile(
        RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, model=MODELS / "busy_then_idle.py", steps=3, warmup=0)
    )
    assert result.ok, result.message
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    main = trace["branchscope"]["main_tid"]
    busy = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == "busy"]
    assert len(busy) == 3
    samples = sorted(
        (e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample" and e["tid"] == main), key=lambda e: e["ts"]
    )
    # Busy = on a core or runnable and waiting for one: a machine loaded by other work halves the
    # spinning thread's CPU (cpu_pct ~50%), and the other half shows as waiting (wait_pct).
    intervals = [
        (a["ts"], b["ts"], b["args"]["cpu_pct"] + b["args"]["wait_pct"]) for a, b in zip(samples, samples[1:], strict=False)
    ]
    period = statistics.median(e - s for s, e, _ in intervals)
    slack = TOLERANCE_US + period
    for event in busy:
        start, end = event["ts"], event["ts"] + event["dur"]
        window = [(s, e, p) for s, e, p in intervals if start - WINDOW_US <= s and e <= end + WINDOW_US]
        high = [(s, e) for s, e, p in window if p >= BUSY_PCT]
        assert high, f"no busy sample around the op at {start}"
        (first_s, first_e), (last_s, last_e) = high[0], high[-1]
        # The first busy interval holds the op's start, the last its end (a clock off by more shows here).
        assert first_s <= start + slack and first_e >= start - slack, (start, first_s, first_e, period)
        assert last_s <= end + slack and last_e >= end - slack, (end, last_s, last_e, period)
        inside = [p for s, e, p in window if start + slack <= s and e <= end - slack]
        before = [p for s, e, p in window if e <= start - slack]
        after = [p for s, e, p in window if s >= end + slack]
        # Enough samples to see the edges at all, counted in sample periods.
        assert len(inside) >= 0.5 * (end - start - 2 * slack) / period
        assert len(before) >= 0.25 * (WINDOW_US - slack) / period and len(after) >= 0.25 * (WINDOW_US - slack) / period
        assert statistics.median(inside) >= BUSY_PCT


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_busy_thread_sharing_its_core_shows_as_half_running_half_waiting():
    """Two spinning processes pinned to one core: each runs about half the time and waits the rest."""
    spin = [sys.executable, "-c", "import os; os.sched_setaffinity(0, {%d}); exec('while True: pass')"]
    core = min(os.sched_getaffinity(0))
    procs = [subprocess.Popen([*spin[:2], spin[2] % core]) for _ in range(2)]
    try:
        sampler = ThreadCpuSampler(procs[0].pid, rescan_every=1)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            assert sampler.sample()
            time.sleep(0.002)
        series = sampler.series[procs[0].pid]
        sampler.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # Over the whole window (the first sample may precede the pinning): CPU and waiting both large,
    # together about the wall time.
    wall = series.ts_ns[-1] - series.ts_ns[0]
    cpu = (series.cpu_ns[-1] - series.cpu_ns[0]) / wall
    wait = (series.wait_ns[-1] - series.wait_ns[0]) / wall
    assert 0.25 < cpu < 0.75 and 0.25 < wait < 0.75 and cpu + wait > 0.8, (cpu, wait)
    assert max(series.wait_pct()) > 0


def test_wait_until_threads_sleep_tells_busy_from_idle_threads():
    import threading

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
        assert wait_until_threads_sleep([tids["idle"]], timeout_s=5.0)
        assert not wait_until_threads_sleep([tids["idle"], tids["busy"]], timeout_s=0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
