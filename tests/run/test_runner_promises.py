"""The runner as a hostile tester tries it: users' files, concurrent runs, killed runners, full disks,
processes that escape, dead parents, bad timeouts and the current folder (docs/promises.md, "What
branchscope promises"). Each test failed on the runner before these promises were kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest

from branchscope.app import cmd_profile
from branchscope.profiling.run.folder import STAGING_PREFIX
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest, python_command
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.run.supervise import log_tail
from tests.paths import MODELS
from tests.processes import alive, kill_all, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_profile.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def profile_args(out: Path | str, *extra: str, model: str = "twin-mm") -> list[str]:
    source = ["--model", model] if model.endswith(".py") else ["--demo", model]
    return ["profile", *source, "--mode", "sequential", "--interop", "1", "--intra", "1",
            "--steps", "2", "--warmup", "1", "--out", str(out), *extra]  # fmt: skip


def runner_command(out: Path, model: str = "twin-mm", *extra: str) -> list[str]:
    return python_command("branchscope.profiling.run.runner") + profile_args(out, *extra, model=model)[1:]


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and mtime (ns): what "untouched" means."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()
    }



def with_marker(marker: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or []) and alive(p.pid)]



def last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


# ------------------------------------------------------------------------------ users' files


@pytest.mark.parametrize("mine", [["trace.json"], ["plan.py"], ["notes.txt", "run.json"]])
def test_folder_holding_files_branchscope_did_not_write_is_refused_untouched(tmp_path, capsys, monkeypatch, mine):
    for name in mine:
        (tmp_path / name).write_text(f"the user's own {name}\n")
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(profile_args(".")) == 2  # `--out .` beside the user's files
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and last_line(err).startswith("error: ")
    assert "holds files branchscope did not write" in err and "--overwrite" in err
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == sorted(mine)


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "out").write_text("mine")
    assert cli(profile_args(tmp_path / "out")) == 2
    assert last_line(capsys.readouterr().err) == f"error: --out {tmp_path / 'out'} exists and is not a folder"
    assert (tmp_path / "out").read_text() == "mine"


@pytest.mark.slow
def test_overwrite_writes_beside_the_users_files_and_a_model_in_the_folder_is_read(tmp_path, capsys):
    model = tmp_path / "plan.py"  # a model file named like the plan a fork run writes
    shutil.copy(MODELS / "two_tower.py", model)
    (tmp_path / "trace.json").write_text("the user's trace")
    assert cli(profile_args(tmp_path, "--overwrite", model=str(model))) == 0, capsys.readouterr().err
    assert (tmp_path / "trace.json").read_text() == "the user's trace"
    assert model.read_bytes() == (MODELS / "two_tower.py").read_bytes()  # a sequential run writes no plan.py
    run = json.loads((tmp_path / "run.json").read_text())
    assert sorted(run["files"]) == ["trace.json.gz", "worker.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.py", "run.json", "trace.json", "trace.json.gz", "worker.log"]


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A successful run's folder, to copy: the earlier results that later failures must leave intact."""
    out = tmp_path_factory.mktemp("earlier") / "run"
    proc = subprocess.run(runner_command(out), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def copy_of(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


@pytest.mark.slow
def test_run_json_lists_what_the_run_wrote_and_each_file_is_complete(earlier_run):
    run = json.loads((earlier_run / "run.json").read_text())
    assert run["complete"] is True
    assert {name: (earlier_run / name).stat().st_size for name in run["files"]} == run["files"]
    assert sorted(p.name for p in earlier_run.iterdir()) == sorted([*run["files"], "run.json"])


@pytest.mark.slow
def test_failed_run_leaves_the_earlier_results_as_they_were(earlier_run, tmp_path, capsys):
    out = copy_of(earlier_run, tmp_path)
    before = snapshot(out)
    assert cli(profile_args(out, model=str(MODELS / "raises_in_forward.py"))) == 2
    assert "the model raised ValueError" in last_line(capsys.readouterr().err)
    assert snapshot(out) == before


@pytest.mark.slow
def test_new_run_replaces_an_earlier_runs_files_and_only_those(earlier_run, tmp_path, capsys):
    out = copy_of(earlier_run, tmp_path)
    old_trace = (out / "trace.json.gz").read_bytes()
    assert cli([*profile_args(out)[:-2], "--mode", "fork", "--interop", "2", "--out", str(out)]) == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["mode"] == "fork" and sorted(run["files"]) == ["plan.py", "trace.json.gz", "worker.log"]
    assert (out / "trace.json.gz").read_bytes() != old_trace
    assert sorted(p.name for p in out.iterdir()) == ["plan.py", "run.json", "trace.json.gz", "worker.log"]


_KILL_WHILE_COMPRESSING = textwrap.dedent(
    """
    import os, signal, sys
    import branchscope.profiling.run.finish as finish
    import branchscope.profiling.run.runner as runner

    real = finish.write_atomic

    def write_atomic(path, write, *, gz=False):
        def write_then_die(f):
            f.write(b"half a trace")
            os.kill(os.getpid(), signal.SIGKILL)  # the runner killed while it compresses the trace
        return real(path, write_then_die, gz=gz)

    finish.write_atomic = write_atomic
    sys.exit(runner.main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_runner_killed_while_compressing_leaves_the_earlier_results_and_the_next_run_cleans_up(earlier_run, tmp_path):
    out = copy_of(earlier_run, tmp_path)
    before = snapshot(out)
    args = runner_command(out)[4:]  # the runner's own arguments
    proc = subprocess.run([sys.executable, "-c", _KILL_WHILE_COMPRESSING, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    # DIR holds exactly the earlier run (its run.json never claims a trace that is not there) and the
    # killed run's staging folder, which the next run removes.
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(STAGING_PREFIX)} == before
    assert [p.name for p in out.iterdir() if p.name.startswith(STAGING_PREFIX)]
    proc = subprocess.run(runner_command(out), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not [p.name for p in out.iterdir() if p.name.startswith(STAGING_PREFIX)]


@pytest.mark.slow
def test_two_runs_on_one_folder_the_second_fails_at_once(tmp_path, capsys):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    env = dict(os.environ, BRANCHSCOPE_TEST_MARKER=marker)
    first = subprocess.Popen(runner_command(tmp_path, str(MODELS / "hangs.py")), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: with_marker(marker), 120, "the first run's model")
        assert cli(profile_args(tmp_path)) == 2
        assert last_line(capsys.readouterr().err) == (
            f"error: another branchscope run is writing to {tmp_path}; wait for it or choose another --out"
        )
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
        assert first.returncode == 128 + signal.SIGTERM
        assert list(tmp_path.iterdir()) == []
    finally:
        first.kill()
        first.wait()
        kill_all(with_marker(marker))


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or not _unshare_works(), reason="needs unshare (mount namespaces)")
def test_full_disk_says_no_space_left_and_leaves_no_temporaries(tmp_path):
    """The run's folder on a 16 KiB tmpfs, in a private mount namespace: the trace cannot fit."""
    disk = tmp_path / "disk"
    disk.mkdir()
    cmd = " ".join(runner_command(disk / "out", "twin-mm", "--steps", "5"))
    script = f"mount -t tmpfs -o size=16k tmpfs {disk} && {{ {cmd}; echo rc=$?; ls -A {disk}; }}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert "rc=4" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "rc=4"  # nothing left on the disk: not even the folder
    assert last_line(proc.stderr).startswith("error: ") and "no space left on device" in last_line(proc.stderr)
    assert proc.stderr.strip().splitlines() == [last_line(proc.stderr)]  # one line: no traceback above it


# ------------------------------------------------------------------------------ processes


@pytest.mark.slow
def test_daemon_holding_the_workers_pipes_neither_hangs_the_run_nor_outlives_it(tmp_path):
    pidfile = tmp_path / "daemon.pid"
    env = dict(os.environ, BRANCHSCOPE_TEST_ESCAPE="daemon", BRANCHSCOPE_TEST_PIDFILE=str(pidfile))
    runner = subprocess.Popen(runner_command(tmp_path / "out", str(MODELS / "escapes.py")), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, stderr = runner.communicate(timeout=180)  # a guard: before the fix it hung until the daemon ended
        assert runner.returncode == 0, stderr
        assert json.loads((tmp_path / "out" / "run.json").read_text())["complete"] is True
        daemon = int(pidfile.read_text())
        wait_until(lambda: not alive(daemon), 30, "the daemon to end")
    finally:
        runner.kill()
        runner.wait()
        if pidfile.exists():
            kill_all([int(pidfile.read_text())])


@pytest.mark.slow
def test_process_that_left_the_workers_group_is_stopped_when_the_run_ends(tmp_path, capsys, monkeypatch):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("BRANCHSCOPE_TEST_MARKER", marker)
    monkeypatch.setenv("BRANCHSCOPE_TEST_ESCAPE", "session")
    try:
        assert cli(profile_args(tmp_path, model=str(MODELS / "escapes.py"))) == 0, capsys.readouterr().err
        wait_until(lambda: not with_marker(marker), 30, "the escaped process to end")
    finally:
        kill_all(with_marker(marker))


@pytest.mark.slow
def test_runner_killed_outright_takes_processes_that_left_the_group(tmp_path):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    env = dict(os.environ, BRANCHSCOPE_TEST_MARKER=marker, BRANCHSCOPE_TEST_ESCAPE="session", BRANCHSCOPE_TEST_HANG="1")
    runner = subprocess.Popen(runner_command(tmp_path / "out", str(MODELS / "escapes.py")), env=env)
    try:
        wait_until(lambda: with_marker(marker), 120, "the model's escaped process")
        runner.kill()
        runner.wait()
        wait_until(lambda: not with_marker(marker), 30, "the escaped process to end with the runner")
    finally:
        runner.kill()
        runner.wait()
        kill_all(with_marker(marker))


_WINDOW = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from PySide6.QtCore import QCoreApplication
    from branchscope.app.run_controller import RunController, RunSpec
    from branchscope.profiling.run.options import RunOptions

    app = QCoreApplication([])
    controller = RunController(runs_dir=Path(sys.argv[1]))
    controller.start(RunSpec(mode="sequential", interop=1, intra=1, options=RunOptions(model=Path(sys.argv[2]))))
    app.exec()
    """
)


@pytest.mark.slow
def test_window_killed_outright_takes_the_runner_the_worker_and_the_models_processes(tmp_path):
    """The window's own RunController starts a run of a model that hangs; then the window is SIGKILLed."""
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    env = dict(os.environ, BRANCHSCOPE_TEST_MARKER=marker, BRANCHSCOPE_TEST_ESCAPE="session", BRANCHSCOPE_TEST_HANG="1")
    window = subprocess.Popen([sys.executable, "-c", _WINDOW, str(tmp_path), str(MODELS / "escapes.py")], env=env)
    descendants: list[psutil.Process] = []
    try:
        wait_until(lambda: with_marker(marker), 120, "the model's process")
        descendants = psutil.Process(window.pid).children(recursive=True)
        assert any("branchscope.profiling.run.runner" in " ".join(p.cmdline()) for p in descendants)
        window.kill()
        window.wait()
        wait_until(lambda: not [p for p in descendants if alive(p.pid)], 60, "the runner and worker to end")
        wait_until(lambda: not with_marker(marker), 30, "the model's process to end")
        assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []  # a cancelled run keeps nothing
    finally:
        window.kill()
        window.wait()
        kill_all([p.pid for p in descendants] + with_marker(marker))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_timeout_that_could_never_fire_is_a_bad_argument(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        cli([*profile_args(tmp_path), f"--timeout={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "argument --timeout" in last_line(err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1.0])
def test_engine_refuses_a_timeout_that_could_never_fire(tmp_path, timeout):
    result = run_profile(RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, options=RunOptions(demo="twin-mm", timeout=timeout)))
    assert result.exit_code == 2 and "--timeout must be a positive number of seconds" in (result.message or "")


_SHADOWS = {
    "json.py": "open(__file__ + '.ran', 'w').close()\nraise SystemExit('json.py from the current folder ran')\n",
    "statistics.py": "open(__file__ + '.ran', 'w').close()\nraise SystemExit('statistics.py from the current folder ran')\n",
}


@pytest.mark.slow
def test_nothing_in_the_current_folder_runs_in_the_runner_or_the_worker(tmp_path):
    """The window's runner command (and the worker it starts), run from a folder with modules named like
    the standard library's: none of them is imported, the run succeeds."""
    here = tmp_path / "here"
    here.mkdir()
    for name, code in _SHADOWS.items():
        (here / name).write_text(code)
    from branchscope.app.run_controller import RunController

    cmd = RunController().command + profile_args(tmp_path / "out")[1:]
    proc = subprocess.run(cmd, cwd=here, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in here.iterdir()) == sorted(_SHADOWS)  # no `.ran` marker


def test_log_tail_reads_only_the_end_of_a_huge_log(tmp_path):
    """A model that printed gigabytes: the runner shows the last lines without reading the rest
    (in a child limited to 1 GiB of address space, reading a 4 GiB log whole would fail)."""
    log = tmp_path / "worker.log"
    with open(log, "wb") as f:
        f.truncate(4 << 30)  # sparse: takes no disk
        f.seek(0, os.SEEK_END)
        f.write(b"".join(f"line {i}\n".encode() for i in range(100)))
    code = textwrap.dedent(
        f"""
        import resource, sys
        from branchscope.profiling.run.supervise import log_tail
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        print(log_tail(__import__("pathlib").Path({str(log)!r}), lines=3))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["line 97", "line 98", "line 99"]
    assert log_tail(log, lines=1) == "line 99"
