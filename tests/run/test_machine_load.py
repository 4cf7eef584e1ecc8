"""The machine's load around a run (run.json "load"): /proc read from fixture text, the arithmetic
of the cores other processes used, and real runs, one of them beside two CPU burners."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from branchscope.profiling import machine
from branchscope.profiling.run import machine_load
from branchscope.profiling.run.machine_load import LoadMeter
from branchscope.profiling.trace.records import LoadRecord, RunRecord, read_run_record
from branchscope.profiling.trace.starved import is_starved, run_threads
from tests.processes import kill_all
from tests.run.test_runner_cli import cli, profile

# /proc/stat of a 4-CPU machine: user nice system idle iowait irq softirq steal guest guest_nice
PROC_STAT = """cpu  1000 10 300 5000 200 5 5 50 40 0
cpu0 100 0 50 1000 50 1 1 10 0 0
cpu1 200 10 50 1000 50 1 1 10 0 0
cpu2 300 0 100 1500 50 2 2 20 40 0
cpu3 400 0 100 1500 50 1 1 10 0 0
intr 123456 0 0
ctxt 987654
btime 1700000000
"""


def test_cpu_ticks_sum_the_usable_cpus_busy_time_without_idle_iowait_and_steal():
    # cpu0: 100+0+50+1+1 busy (idle 1000, iowait 50, steal 10 left out) of 1000+... total
    assert machine.cpu_ticks(PROC_STAT, frozenset({0})) == (152, 1212)
    assert machine.cpu_ticks(PROC_STAT, frozenset({0, 1})) == (152 + 262, 1212 + 1322)
    # the whole machine's line when no CPUs are named; CPUs that are not there count nothing
    assert machine.cpu_ticks(PROC_STAT) == (1000 + 10 + 300 + 5 + 5, 6570)
    assert machine.cpu_ticks(PROC_STAT, frozenset({7})) is None
    assert machine.cpu_ticks("intr 1 2 3\n", None) is None
    assert machine.cpu_ticks("cpu0 a b c d\ncpu0 1 2\n", frozenset({0})) is None  # no numbers, too few


def test_load_average_reads_the_first_field_of_proc_loadavg():
    assert machine.load_average("0.52 0.58 0.59 2/1051 12345\n") == 0.52
    assert machine.load_average("") is None
    assert machine.load_average("nan 1 1") is None and machine.load_average("-1 1 1") is None
    assert machine.load_average("x 1 1") is None


def test_busy_beyond_a_fifth_of_the_cores_and_its_warning():
    assert not machine.is_busy(0.4, 2) and machine.is_busy(0.41, 2)
    assert machine.is_busy(0.81, 4) and not machine.is_busy(0.8, 4)
    assert machine.busy_warning(0.8, 2) == (
        "other processes used 0.8 of 2 cores while this run timed its steps: "
        "its times are not comparable with a quiet run's"
    )


def _fake_proc(tmp_path: Path, busy_ticks: int, loadavg: str = "1.50 1.00 0.50 1/100 42") -> Path:
    """A /proc with a 2-CPU stat whose cpu0 and cpu1 have `busy_ticks` busy between them."""
    half = busy_ticks // 2
    (tmp_path / "stat").write_text(f"cpu  0 0 0 0\ncpu0 {half} 0 0 1000 0 0 0 0\ncpu1 {busy_ticks - half} 0 0 1000 0 0 0 0\n")
    (tmp_path / "loadavg").write_text(loadavg)
    return tmp_path


def test_others_are_the_usable_cores_busy_time_less_the_runs_own(tmp_path, monkeypatch):
    clock = iter([100.0, 102.0])  # two seconds between begin and end
    own = iter([{1: 5.0}, {1: 6.5}])  # the run's processes used 1.5 s of CPU meanwhile
    monkeypatch.setattr(machine_load.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(machine_load, "_cpu_seconds", lambda procs: next(own))
    monkeypatch.setattr(machine_load, "_tree", lambda root: {})
    monkeypatch.setattr(machine_load, "_clock_ticks", lambda: 100)
    monkeypatch.setattr(machine, "usable_cpus", lambda: frozenset({0, 1}))
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    proc = _fake_proc(tmp_path, 1000)
    meter = LoadMeter(proc=str(proc))
    meter.begin(None)
    _fake_proc(tmp_path, 1000 + 250, "2.25 1 1 1/1 1")  # 2.5 s busy on the two CPUs
    meter.end(None)
    load = meter.record()
    # (2.5 s busy - 1.5 s ours) / 2 s = 0.5 cores: more than a fifth of 2; the run's own 1.5 s: 0.75 cores
    assert load == LoadRecord(loadavg_start=1.5, loadavg_end=2.25, cores=2, others_cores=0.5, own_cores=0.75,
                              seconds=2.0, busy=True)  # fmt: skip
    assert meter.warning() == machine.busy_warning(0.5, 2)
    assert "0.50 of 2 cores" in load.text() and load.text().endswith("busy, times not comparable with a quiet run's")


def test_others_never_below_zero_nor_above_the_cores(tmp_path, monkeypatch):
    for busy_after, expected, busy in ((1000, 0.0, False), (1000 + 10_000, 2.0, True)):
        clock = iter([0.0, 1.0])
        own = iter([{1: 0.0}, {1: 1.0}])
        monkeypatch.setattr(machine_load.time, "monotonic", lambda clock=clock: next(clock))
        monkeypatch.setattr(machine_load, "_cpu_seconds", lambda procs, own=own: next(own))
        monkeypatch.setattr(machine_load, "_tree", lambda root: {})
        monkeypatch.setattr(machine, "usable_cpus", lambda: frozenset({0, 1}))
        monkeypatch.setattr(machine, "usable_cores", lambda: 2)
        meter = LoadMeter(proc=str(_fake_proc(tmp_path, 1000)))
        meter.begin(None)
        _fake_proc(tmp_path, busy_after)
        meter.end(None)
        assert (meter.others_cores, meter.record().busy, meter.warning() is not None) == (expected, busy, busy)


def test_without_proc_nothing_is_measured_and_nothing_is_claimed(tmp_path):
    meter = LoadMeter(proc=str(tmp_path / "missing"))
    meter.begin(None)
    meter.end(None)
    load = meter.record()
    assert load.others_cores is None and load.busy is None and load.loadavg_start is None
    assert meter.warning() is None and "not measured" in load.text()
    assert RunRecord.parse({"load": {"others_cores": "x", "busy": 1}}).load == LoadRecord()  # lenient


def test_the_runner_itself_is_not_the_runs_own_cores_and_starved_is_judged_from_both(tmp_path, monkeypatch):
    clock = iter([0.0, 2.0])
    # This process (the runner: it samples) used 1 s, the worker 2.4 s of the 2 s: 1.2 cores.
    own = iter([{os.getpid(): 0.0, 7: 0.0}, {os.getpid(): 1.0, 7: 2.4}])
    monkeypatch.setattr(machine_load.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(machine_load, "_cpu_seconds", lambda procs: next(own))
    monkeypatch.setattr(machine_load, "_tree", lambda root: {})
    # Its threads waited 1.6 s for a core, runnable, over the 2 s: 0.8 cores (a thread that is gone
    # at the end, 9, loses its wait; one new at the end, 8, had none before).
    delays = iter([{(7, 7): 0, (7, 9): 5}, {(7, 7): 1_600_000_000, (7, 8): 10**9}])
    monkeypatch.setattr(machine_load, "_run_delays", lambda procs, proc: next(delays))
    monkeypatch.setattr(machine_load, "_clock_ticks", lambda: 100)
    monkeypatch.setattr(machine, "usable_cpus", lambda: frozenset({0, 1}))
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    meter = LoadMeter(proc=str(_fake_proc(tmp_path, 1000)))
    assert meter.starved(RunRecord(mode="fork", interop=2, intra=1)) is None  # nothing measured yet
    meter.begin(None)
    _fake_proc(tmp_path, 1000 + 3 * 100 + 40)  # 3.4 s busy: ours and nobody else's
    meter.end(None)
    assert (meter.own_cores, meter.others_cores) == (pytest.approx(1.2), pytest.approx(0.0))
    assert meter.own_wait_cores == pytest.approx(0.8) and meter.record().own_wait_cores == pytest.approx(0.8)
    # It wanted 2 cores (1.2 used + 0.8 waited) for 2 threads, got 1.2 (< 0.8 × 2): starved; for
    # sequential 1×1's one thread, not.
    assert meter.starved(RunRecord(mode="fork", interop=2, intra=1)) is True
    assert meter.starved(RunRecord(mode="sequential", interop=2, intra=1)) is False
    assert meter.starved(RunRecord(mode=None, interop=2, intra=1)) is None  # its threads unknown
    meter.own_wait_cores = 0.0  # its threads idled, never waited for a core: 1.2 was all it wanted
    assert meter.starved(RunRecord(mode="fork", interop=2, intra=1)) is False


def _check_load(run: RunRecord) -> LoadRecord:
    """The load of a real run: every field there and sane, the flag and warning from its own numbers,
    and whether it was starved from its own numbers and threads."""
    load = run.load
    assert load is not None
    assert load.cores == machine.usable_cores()
    assert load.others_cores is not None and 0.0 <= load.others_cores <= load.cores
    assert load.own_cores is not None and 0.0 < load.own_cores <= load.cores
    threads = run_threads(run.mode, run.interop, run.intra, run.nproc)
    assert threads is not None
    assert load.own_wait_cores is not None and load.own_wait_cores >= 0.0
    assert run.starved is is_starved(threads, load.cores, load.own_cores, load.others_cores, load.own_wait_cores)
    assert load.seconds is not None and load.seconds > 0
    assert load.loadavg_start is not None and load.loadavg_start >= 0
    assert load.loadavg_end is not None and load.loadavg_end >= 0
    assert load.busy == (load.others_cores > machine.BUSY_SHARE * load.cores)
    warned = [w for w in run.warnings or [] if w.startswith("other processes used")]
    assert warned == ([machine.busy_warning(load.others_cores, load.cores)] if load.busy else [])
    return load


@pytest.mark.slow
def test_a_real_run_records_the_machines_load(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli(profile(out, "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1")) == 0
    run = read_run_record(out)
    assert run is not None
    load = _check_load(run)
    assert load.text() in capsys.readouterr().out  # the summary line says it


@pytest.mark.slow
def test_a_run_beside_two_cpu_burners_is_flagged_by_what_others_used(tmp_path):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        before = {p.pid: sum(psutil.Process(p.pid).cpu_times()[:2]) for p in burners}
        started = time.monotonic()
        out = tmp_path / "out"
        assert cli(profile(out, "--demo", "twin-mm", "--mode", "fork", "--interop", "2", "--intra", "1")) == 0
        wall = time.monotonic() - started
        used = sum(sum(psutil.Process(p.pid).cpu_times()[:2]) - before[p.pid] for p in burners)
    finally:
        kill_all([p.pid for p in burners])
        for p in burners:
            p.wait()
    run = read_run_record(out)
    assert run is not None
    load = _check_load(run)
    # Whatever core the burners got, what they used is others' time: a meter that missed it reads ~0.
    # Over the whole run they used `used` CPU seconds; the steps timed are part of it, at about its rate.
    rate = used / wall
    if rate >= 0.5:
        assert load.others_cores >= 0.25 * rate, (load, rate)
    if rate >= 1.0 and load.cores <= 2:  # a core or more taken from fork 2×1's two: it was starved
        assert run.starved is True, (load, rate)
