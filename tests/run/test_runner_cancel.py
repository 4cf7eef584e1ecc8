"""Stopping a run: SIGTERM/SIGINT to the runner (the GUI's cancel), and a runner that is SIGKILLed.

Either way nothing may be left running: the worker, the reaper it forks, and whatever the model
started (hangs.py starts a child carrying $BRANCHSCOPE_TEST_MARKER on its command line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.run.runner import run_profile, stop_on_signals
from tests.paths import MODELS, ROOT
from tests.processes import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in (p.info["cmdline"] or []) and _alive(p):
            found.append(p)
    return found


def _start_hanging_runner(tmp_path: Path, marker: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "branchscope.profiling.run.runner", "--model", str(MODELS / "hangs.py"), "--mode", "sequential",
           "--interop", "1", "--intra", "1", "--out", str(tmp_path), "--jsonl"]  # fmt: skip
    env = dict(os.environ, BRANCHSCOPE_TEST_MARKER=marker)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _descendants_once_the_model_runs(runner: subprocess.Popen[str], marker: str) -> list[psutil.Process]:
    """The runner's descendants once the worker runs the model and the model's child exists."""
    wait_until(lambda: _with_marker(marker), 120, "the model's child process")
    descendants = psutil.Process(runner.pid).children(recursive=True)
    assert any("branchscope.profiling.run.worker" in " ".join(p.cmdline()) for p in descendants)
    return descendants


def _kill_leftovers(processes: list[psutil.Process]) -> None:
    for p in processes:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_runner_stops_the_run_and_leaves_nothing_running(tmp_path, signum):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    runner = _start_hanging_runner(tmp_path, marker)
    descendants: list[psutil.Process] = []
    try:
        descendants = _descendants_once_the_model_runs(runner, marker)
        runner.send_signal(signum)
        stdout, stderr = runner.communicate(timeout=60)  # a guard against a hang, not a timing assertion
        assert runner.returncode == 128 + signum
        name = signal.Signals(signum).name
        assert json.loads(stdout.splitlines()[-1]) == {
            "event": "error", "message": f"cancelled by {name}; the worker was stopped",
        }  # fmt: skip
        assert stderr.splitlines()[-1] == f"error: cancelled by {name}; the worker was stopped"
        wait_until(lambda: not [p for p in descendants if _alive(p)], 30, "the runner's descendants to end")
        assert _with_marker(marker) == []
        assert list(tmp_path.iterdir()) == []  # no results, no temporary files: the folder is as it was
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        _kill_leftovers(descendants)


@pytest.mark.slow
def test_runner_killed_outright_still_takes_the_worker_and_the_models_children(tmp_path):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    runner = _start_hanging_runner(tmp_path, marker)
    descendants: list[psutil.Process] = []
    try:
        descendants = _descendants_once_the_model_runs(runner, marker)
        runner.kill()  # no cleanup of its own: the worker's death signal and its reaper must do it
        runner.communicate(timeout=60)
        wait_until(lambda: not [p for p in descendants if _alive(p)], 30, "the runner's descendants to end")
        assert _with_marker(marker) == []
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        _kill_leftovers(descendants)


def _fake_worker(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """The runner starts `python -c code OUT` instead of the worker (no torch: quick); OUT is where the
    worker writes (the run folder's staging folder), `out` in the code."""
    code = "import sys\nfrom pathlib import Path\nout = Path(sys.argv[1])\n" + code
    monkeypatch.setattr("branchscope.profiling.run.supervise.worker_command", lambda req, out: [sys.executable, "-c", code, str(out)])


def test_cancelled_run_returns_128_plus_the_signal_and_kills_the_group(tmp_path, monkeypatch):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    _fake_worker(monkeypatch, (
        "import json, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "print(json.dumps({'event': 'progress', 'step': 1, 'of': 2}), flush=True)\n"
        "time.sleep(600)\n"
    ))  # fmt: skip
    with stop_on_signals((signal.SIGUSR1,)) as cancel:

        def on_event(event):
            wait_until(lambda: _with_marker(marker), 60, "the fake worker's child")
            os.kill(os.getpid(), signal.SIGUSR1)  # as the GUI's SIGTERM would, through the handler

        result = run_profile(RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm")), on_event, cancel)
    assert result.exit_code == 128 + signal.SIGUSR1 and result.cancelled_by == signal.SIGUSR1
    assert result.message == "cancelled by SIGUSR1; the worker was stopped"
    wait_until(lambda: not _with_marker(marker), 30, "the fake worker's child to end")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler is put back


def test_worker_that_fails_after_writing_its_trace_leaves_no_partial_files(tmp_path, monkeypatch):
    _fake_worker(monkeypatch, (
        "import json, sys\n"
        "open(out / 'trace.json', 'w').write(json.dumps({'traceEvents': []}))\n"
        "open(out / 'run.json.tmp', 'w').write('{')\n"
        "sys.exit(1)\n"
    ))  # fmt: skip
    result = run_profile(RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm")))
    assert result.exit_code == 4 and result.message == "the worker died (exit code 1) before writing its results"
    assert list(tmp_path.iterdir()) == []


def test_complete_run_with_a_trace_the_runner_cannot_extend_is_a_failure_not_a_half_trace(tmp_path, monkeypatch):
    run = {"complete": True, "trace_clock": {"base_time_ns": 0, "first_us": 0.0, "last_us": 1.0}}
    _fake_worker(monkeypatch, (
        "import json\n"
        "open(out / 'trace.json', 'w').write('{\"traceEvents\": [], \"x\": 1}')\n"
        f"open(out / 'run.json', 'w').write({json.dumps(run)!r})\n"
    ))  # fmt: skip
    result = run_profile(RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm")))
    assert result.exit_code == 4 and "does not end with its traceEvents array" in (result.message or "")
    assert list(tmp_path.iterdir()) == []


def test_worker_that_ends_badly_after_writing_complete_results_is_a_run_with_a_note(tmp_path, monkeypatch):
    """One worker's results are committed as every rank's are (the supervisor's one commit path): the
    trace compressed, run.json last, and a note for the exit status."""
    run = {"complete": True, "mode": "sequential", "trace_clock": {"base_time_ns": 0, "first_us": 0.0, "last_us": 1.0}}
    _fake_worker(monkeypatch, (
        "import json, sys\n"
        "open(out / 'trace.json', 'w').write(json.dumps({'traceEvents': []}))\n"
        f"open(out / 'run.json', 'w').write({json.dumps(run)!r})\n"
        "sys.exit(1)\n"
    ))  # fmt: skip
    result = run_profile(RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm")))
    assert result.ok, result.message
    assert result.notes == ["the worker ended with exit code 1 after writing complete results"]
    assert result.run is not None and result.run.mode == "sequential"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "trace.json.gz", "worker.log"]


def test_worker_that_reports_an_error_and_hangs_is_stopped_and_its_error_named(tmp_path, monkeypatch):
    """As for a rank of a distributed run: once a worker said it failed, it is stopped (a second
    later, not at --timeout) and its error names the failure, with its exit code."""
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    error = {"event": "error", "message": "the model raised", "traceback": "Traceback: …", "exit_code": 2}
    _fake_worker(monkeypatch, (
        "import json, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        f"print(json.dumps({error!r}), flush=True)\n"
        "time.sleep(600)\n"
    ))  # fmt: skip
    result = run_profile(
        RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm", timeout=900))
    )
    assert result.exit_code == 2 and result.message == "the model raised" and result.traceback == "Traceback: …"
    assert _with_marker(marker) == []  # stopped with the worker, before run_profile returned
    assert list(tmp_path.iterdir()) == []
