"""The runs folder of the window: when it cannot be made the window says so (and --screenshot fails
in one line), and pruning old runs removes only what branchscope made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from branchscope.app.main_window import MainWindow
from branchscope.app.run_controller import RunController, default_runs_dir, prune_runs
from tests.builders.runs import write_run_json
from tests.gui_helpers import FAKE_RUNNER
from tests.paths import ROOT


def _blocked_cache(tmp_path: Path, how: str) -> Path:
    """An XDG_CACHE_HOME under which no runs folder can be made."""
    if how == "file_in_the_way":
        cache = tmp_path / "cache"
        cache.mkdir()
        (cache / "branchscope").write_text("a file where the folder should be")
        return cache
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    cache = tmp_path / "read-only-cache"
    cache.mkdir()
    cache.chmod(0o555)
    return cache


@pytest.mark.parametrize("how", ["file_in_the_way", "read_only"])
def test_a_runs_folder_that_cannot_be_made_is_said_in_a_dialog(qtbot, tmp_path, monkeypatch, how):
    cache = _blocked_cache(tmp_path, how)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    controller = RunController(command=FAKE_RUNNER)  # the default runs folder, under the cache
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    qtbot.addWidget(win)
    win.show()
    win.controls.run_button.click()  # an exception here would fail the test (pytest-qt)
    box = win.message_box
    assert box is not None and box.isVisible()
    assert "runs folder" in box.text() and str(cache) in box.text()
    assert win.controls.progress.format() == "failed" and not controller.is_running()
    assert not win.controls.cancel_button.isEnabled()
    box.close()
    # once the folder can be made, the next run works
    if how == "file_in_the_way":
        (cache / "branchscope").unlink()
    else:
        cache.chmod(0o755)
    with qtbot.waitSignal(win.lifecycle.opened, timeout=20_000):
        win.controls.run_button.click()
    assert win.runs.topLevelItemCount() == 1
    assert controller.runs_dir().is_relative_to(cache)
    controller.shutdown()


def test_screenshot_exits_2_in_one_line_when_the_runs_folder_cannot_be_made(tmp_path):
    cache = _blocked_cache(tmp_path, "file_in_the_way")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(XDG_CACHE_HOME=str(cache), HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [sys.executable, "-m", "branchscope.app", "--screenshot", str(shot)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "runs folder" in lines[0], proc.stderr
    assert not shot.exists()


def _unshare_works() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare (mount namespaces)")
def test_screenshot_exits_2_in_one_line_on_a_read_only_cache(tmp_path):
    """A read-only XDG_CACHE_HOME that even root cannot write: a read-only tmpfs in a private mount namespace."""
    cache = tmp_path / "read-only-cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(XDG_CACHE_HOME=str(cache), HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    shot = tmp_path / "shot.png"
    script = f'mount -t tmpfs -o ro tmpfs "{cache}" && exec "{sys.executable}" -m branchscope.app --screenshot "{shot}"'
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "runs folder" in lines[0], proc.stderr
    assert "read-only file system" in lines[0].lower(), lines[0]
    assert not shot.exists()


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_runs_dir().parent == tmp_path / ".cache" / "branchscope" / "runs"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_old_runs_are_pruned_but_recent_ones_kept(tmp_path):
    root = tmp_path / "runs"
    dead = _dead_pid()
    for s in range(3):
        for r in range(5):
            run = root / f"2026010{s}-000000-{dead}" / f"{r:03d}-run"
            run.mkdir(parents=True)
            os.utime(run, (1_000_000 + s * 10 + r, 1_000_000 + s * 10 + r))
    # A window still open (this process) keeps all its runs, however old: they are on its screen.
    live = root / f"20250101-000000-{os.getpid()}" / "000-run"
    live.mkdir(parents=True)
    os.utime(live, (1, 1))
    current = root / "20260109-000000-9"
    prune_runs(current, keep=4)
    left = sorted(p.name for s in root.iterdir() if s != live.parent for p in s.iterdir())
    assert len(left) == 4
    assert sorted(s.name for s in root.iterdir()) == [live.parent.name, f"20260102-000000-{dead}"]
    assert live.is_dir()


def test_pruning_removes_only_what_branchscope_made(tmp_path):
    root = tmp_path / "runs"
    dead = _dead_pid()
    old_session = root / f"20240101-000000-{dead}"
    ours = [old_session / f"{k:03d}-inception-sequential-1x1" for k in range(1, 4)]
    for run in ours:
        (run / "trace.json.gz").parent.mkdir(parents=True)
        (run / "trace.json.gz").write_bytes(b"x")
    # What a user put under the runs root, in and beside our session folders:
    users = [
        root / "my-notes" / "sub",  # a folder not named like a session
        root / "20240101-000000-notapid",  # nearly a session name
        old_session / "keep-me",  # a folder in a session, not named like a run
        old_session / "007",  # a number only
    ]
    for folder in users:
        folder.mkdir(parents=True)
        (folder / "important.txt").write_text("mine")
    (root / "README.txt").write_text("mine")
    (old_session / "notes.txt").write_text("mine")
    # A session-named link to a folder elsewhere: never followed into.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "001-run-like-folder").mkdir(parents=True)
    (root / f"20240102-000000-{dead}").symlink_to(elsewhere, target_is_directory=True)
    # An empty session of ours, and a run-like link in our session: the link goes, not its target.
    (root / f"20240103-000000-{dead}").mkdir()
    (tmp_path / "target").mkdir()
    (old_session / "009-link").symlink_to(tmp_path / "target", target_is_directory=True)

    prune_runs(root / "20260101-000000-1", keep=0)

    assert not any(run.exists() for run in ours)
    for folder in users:
        assert (folder / "important.txt").read_text() == "mine", folder
    assert (root / "README.txt").exists() and (old_session / "notes.txt").exists()
    assert (elsewhere / "001-run-like-folder").is_dir() and (root / f"20240102-000000-{dead}").is_symlink()
    assert (tmp_path / "target").is_dir()
    assert not (root / f"20240103-000000-{dead}").exists()  # empty: removed
    assert old_session.is_dir()  # still holds the user's things


def test_pruning_a_runs_root_that_cannot_be_read_is_not_an_error(tmp_path):
    (tmp_path / "runs").write_text("a file, not a folder")
    prune_runs(tmp_path / "runs" / "20260101-000000-1", keep=0)
    prune_runs(tmp_path / "missing" / "20260101-000000-1", keep=0)


def _kept_run(folder: Path, mode: str, when: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "trace.json.gz").write_bytes(b"x")
    run = {"mode": mode, "interop": 1, "intra": 1, "model": "demo twin-mm", "source": "demo",
           "unprofiled_steps_ms": [10.0], "trace": "trace.json.gz", "complete": True}  # fmt: skip
    write_run_json(folder, **run)
    os.utime(folder, (when, when))
    os.utime(folder / "run.json", (when, when))
    return folder


def test_a_new_window_lists_the_runs_kept_from_earlier_ones(tmp_path, monkeypatch):
    import branchscope.app.run_controller as run_controller

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(run_controller, "KEEP_RUNS", 2)
    root = tmp_path / "cache" / "branchscope" / "runs"
    session = root / f"20240101-000000-{_dead_pid()}"
    pruned = _kept_run(session / "001-twin-mm-sequential-1x1", "sequential", 1000)
    kept = [_kept_run(session / f"00{k}-twin-mm-fork-1x1", "fork", 1000 + k) for k in (2, 3)]
    controller = RunController(command=FAKE_RUNNER)
    entries = controller.saved_runs()  # pruned first: the two newest stay
    assert [e.trace_path.parent for e in entries] == kept and not pruned.exists()
    assert [e.title for e in entries] == ["twin-mm · fork · 1×1"] * 2
    own = controller.runs_dir()
    _kept_run(own / "001-twin-mm-fork-2x1", "fork", 5000)  # this window's own run: listed as it finishes
    assert own.parent == root and [e.trace_path.parent for e in controller.saved_runs()] == kept
