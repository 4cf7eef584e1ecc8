"""Deleting by manifest (issue 32): the window's runs cache prunes an old run folder only when
everything in it is branchscope's (run.json's "files", sweep.json's cells, failure.json's files; by
name in a folder written before manifests), keeps a folder holding a user's file whole and says so
once (stderr and the status bar), and never follows a link; `--overwrite` writes beside a user's
file, never over it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from branchscope.app.main_window import MainWindow
from branchscope.app.run_controller import RunController, prune_runs
from branchscope.profiling.run.folder import RunFolder, RunFolderError, not_ours, remove_if_all_ours
from branchscope.profiling.run.sweep import SweepCell
from branchscope.profiling.trace.records import RunRecord, encode_record
from branchscope.profiling.trace.sweep_records import SweepRecord
from tests.gui_helpers import FAKE_RUNNER

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes and links")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _committed_run(out: Path) -> Path:
    """A run folder as the runner commits it: its files and a run.json listing them."""
    with RunFolder(out) as folder:
        assert folder.staging is not None
        (folder.staging / "trace.json.gz").write_bytes(b"trace")
        (folder.staging / "worker.log").write_text("log")
        folder.commit(RunRecord(complete=True, mode="sequential"))
    return out


def _sweep(out: Path) -> Path:
    """A sweep folder: sweep.json listing two cells, each a committed run."""
    cells = [SweepCell("sequential", 1, 1), SweepCell("fork", 2, 1)]
    for cell in cells:
        _committed_run(out / cell.run)
    record = SweepRecord.parse({"sweep": 2, "complete": True, "cells": [{"mode": c.mode, "interop": c.interop,
                                "intra": c.intra, "run": c.run, "status": "done"} for c in cells]})  # fmt: skip
    (out / "sweep.json").write_bytes(encode_record(record))
    return out


@pytest.fixture
def runs_root(tmp_path):
    """A runs root with an old session of a window that is gone."""
    session = tmp_path / "runs" / f"20240101-000000-{_dead_pid()}"
    session.mkdir(parents=True)
    return session


def _prune(root_session: Path) -> list[tuple[Path, list[str]]]:
    return prune_runs(root_session.parent / "20260101-000000-1", keep=0)


def test_a_users_note_in_the_oldest_run_folder_keeps_the_folder_whole_and_is_said_once(runs_root):
    noted = _committed_run(runs_root / "001-twin-mm-sequential-1x1")
    (noted / "my-notes.md").write_text("the user's notes")
    plain = _committed_run(runs_root / "002-twin-mm-fork-2x1")
    kept = _prune(runs_root)
    assert kept == [(noted, ["my-notes.md"])]
    assert (noted / "my-notes.md").read_text() == "the user's notes"
    assert (noted / "trace.json.gz").read_bytes() == b"trace" and (noted / "run.json").is_file()  # whole
    assert not plain.exists()  # everything in it was ours
    assert _prune(runs_root) == []  # said once: the next window does not say it again
    assert (noted / "my-notes.md").is_file()


def test_a_folder_from_before_manifests_is_pruned_only_when_every_name_is_ours(runs_root):
    legacy = runs_root / "001-old"
    legacy.mkdir()
    for name in ("run.json", "trace.json.gz", "worker.log", "plan.py"):
        (legacy / name).write_text("{}")
    mixed = runs_root / "002-old-with-notes"
    mixed.mkdir()
    (mixed / "trace.json.gz").write_text("x")
    (mixed / "notes.txt").write_text("mine")
    assert [k for k, _ in _prune(runs_root)] == [mixed]
    assert not legacy.exists()
    assert sorted(os.listdir(mixed)) == ["notes.txt", "trace.json.gz"]


def test_a_file_the_manifest_does_not_list_is_not_ours_even_when_named_like_ours(runs_root):
    run = _committed_run(runs_root / "001-run")
    (run / "plan.py").write_text("the user's own plan.py")  # a name we write, but this run did not
    assert not_ours(run) == ["plan.py"]
    assert remove_if_all_ours(run) == ["plan.py"] and (run / "plan.py").read_text() == "the user's own plan.py"


def test_sweeps_rank_folders_and_failed_runs_are_read_by_their_manifests(runs_root):
    sweep = _sweep(runs_root / "001-sweep")
    clean = _sweep(runs_root / "002-sweep")
    (sweep / "fork-2x1" / "notes.md").write_text("why fork won")
    assert not_ours(sweep) == ["fork-2x1/notes.md"]
    run = _committed_run(runs_root / "003-run")
    (run / "rank-0").mkdir()
    (run / "rank-0" / "mine.txt").write_text("x")  # a rank-like folder the manifest does not list
    assert not_ours(run) == ["rank-0"]
    kept = _prune(runs_root)
    assert sorted(k for k, _ in kept) == [sweep, run]
    assert not clean.exists() and (sweep / "fork-2x1" / "trace.json.gz").is_file() and (sweep / "sweep.json").is_file()


def test_links_are_never_followed_nor_counted_ours(runs_root, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious.txt").write_text("precious")
    run = _committed_run(runs_root / "001-run")
    (run / "worker.log").unlink()
    (run / "worker.log").symlink_to(target / "precious.txt")  # where our file was: a link now
    (runs_root / "002-link").symlink_to(target, target_is_directory=True)  # a run-named link
    kept = _prune(runs_root)
    assert [k for k, _ in kept] == [run]
    assert (target / "precious.txt").read_text() == "precious" and (runs_root / "002-link").is_symlink()
    assert (run / "worker.log").is_symlink()


def test_the_window_says_what_pruning_kept_in_its_status_bar(qtbot, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    session = tmp_path / "cache" / "branchscope" / "runs" / f"20240101-000000-{_dead_pid()}"
    noted = _committed_run(session / "001-twin-mm-sequential-1x1")
    (noted / "my-notes.md").write_text("mine")
    monkeypatch.setattr("branchscope.app.run_controller.KEEP_RUNS", 0)
    controller = RunController(command=FAKE_RUNNER)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    qtbot.addWidget(win)
    assert (noted / "my-notes.md").read_text() == "mine"
    message = win.statusBar().currentMessage()
    assert message.startswith(f"kept the old run folder {noted}: ") and "my-notes.md" in message
    assert capfd.readouterr().err.count("branchscope: kept the old run folder") == 1
    controller.shutdown()


def test_overwrite_writes_beside_a_users_file_never_over_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "worker.log").write_text("the user's log")  # named like ours, not ours: no run.json lists it
    (out / "notes.md").write_text("mine")
    with pytest.raises(RunFolderError, match="never over them: move them or choose another --out"):
        RunFolder(out, overwrite=True).open()
    assert (out / "worker.log").read_text() == "the user's log"
    (out / "worker.log").unlink()
    with RunFolder(out, overwrite=True) as folder:  # beside notes.md: fine
        assert folder.staging is not None
        (folder.staging / "trace.json.gz").write_bytes(b"trace")
        (out / "trace.json.gz").write_text("appeared meanwhile")  # a user's file where ours goes
        with pytest.raises(OSError, match="did not write"):
            folder.commit(RunRecord(complete=True, mode="sequential"))
    assert (out / "trace.json.gz").read_text() == "appeared meanwhile" and (out / "notes.md").read_text() == "mine"
    assert not (out / "run.json").exists()


def test_a_nodes_folder_keeps_a_users_file_and_never_follows_a_link(tmp_path, capfd):
    from branchscope.profiling.run.nodes import NODE_DIR, NodeFolder

    out = tmp_path / "out"
    node_dir = out / NODE_DIR.format(node=1)
    (node_dir / "stage" / "rank-1").mkdir(parents=True)  # an earlier run's part of node 1
    (node_dir / "stage" / "rank-1" / "trace.json").write_text("{}")
    (node_dir / "node-1.json").write_text("{}")
    (node_dir / "notes.md").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    (node_dir / "node-1.json.link").symlink_to(tmp_path / "elsewhere")
    folder = NodeFolder(out, 1, 2).open()
    try:
        assert sorted(os.listdir(node_dir)) == ["node-1.json", "node-1.json.link", "notes.md", "stage"]
        assert not (node_dir / "stage" / "rank-1").exists()  # the earlier run's staged files went
        assert (node_dir / "notes.md").read_text() == "mine" and (tmp_path / "elsewhere").is_dir()
    finally:
        folder.close()
    assert "it holds files branchscope did not write (node-1.json.link, notes.md)" in capfd.readouterr().err
