"""Run and sweep folders as a hostile user leaves them (issue 17): a run.json or sweep.json whose names
point out of the folder, a user's file in a rank's folder, a FIFO or /dev/zero where run.json should
be, --out names kineto cannot write, and a current folder full of modules named like the stdlib's.
Each test failed before its promise was kept (docs/promises.md, "What branchscope promises")."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.profiling.run.folder import (
    RUN_FILE_NAME,
    RunFolder,
    RunFolderError,
    SweepFolder,
    files_written_by_branchscope,
)
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest, python_command
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.run.sweep import SWEEP_JSON, load_sweep
from branchscope.profiling.trace.reader import load_trace
from branchscope.profiling.trace.records import RunRecord, to_builtins

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs, /proc, /dev/zero: Linux")

#: Names a run.json may list that reach outside its folder, or name the folder itself.
ESCAPING_NAMES = ["..", ".", "", "/", "../user.txt", "/etc/hostname", "rank-0/..", "rank-0/../../user.txt",
                  "rank-0/../..", "a/b", "rank-0/sub/run.json", "rank-0", "./trace.json.gz", "trace.json.gz/"]  # fmt: skip


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links as links) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def _earlier_run(out: Path, files: dict[str, int], **extra: object) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps({"complete": True, "mode": "sequential", "files": files, **extra}))


def _commit_a_run(out: Path, *, overwrite: bool = False, ranks: int = 0) -> dict[str, object]:
    """What the runner does with a finished run: open OUT, stage the files, commit."""
    with RunFolder(out, overwrite=overwrite) as folder:
        assert folder.staging is not None
        if ranks:
            for r in range(ranks):
                (folder.staging / f"rank-{r}").mkdir()
                (folder.staging / f"rank-{r}" / "run.json").write_text("{}")
                (folder.staging / f"rank-{r}" / "trace.json.gz").write_bytes(b"new")
        else:
            (folder.staging / "trace.json.gz").write_bytes(b"new")
            (folder.staging / "worker.log").write_text("log")
        return to_builtins(folder.commit(RunRecord(complete=True, mode="sequential")))


# ------------------------------------------------------------------------------ names from run.json


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("name", ESCAPING_NAMES)
def test_names_in_run_json_never_reach_outside_out_nor_remove_it(tmp_path, name, overwrite):
    project = tmp_path / "project"
    out = project / "out"
    _earlier_run(out, {name: 1, "trace.json.gz": 3})
    (out / "trace.json.gz").write_bytes(b"old")
    (project / "user.txt").write_text("the user's")
    (project / "src").mkdir()
    (project / "src" / "model.py").write_text("x = 1")
    before = {k: v for k, v in _tree(project).items() if not k.startswith("out/")}

    run = _commit_a_run(out, overwrite=overwrite)

    assert {k: v for k, v in _tree(project).items() if not k.startswith("out/")} == before
    assert (out / "trace.json.gz").read_bytes() == b"new" and (out / "worker.log").read_text() == "log"
    assert json.loads((out / "run.json").read_text())["files"] == run["files"] == {"trace.json.gz": 3, "worker.log": 3}
    assert name not in files_written_by_branchscope(out)


def test_only_the_shapes_branchscope_writes_are_its_files(tmp_path):
    listed = {n: 1 for n in ESCAPING_NAMES} | {"plan.py": 1, "rank-3/trace.json.gz": 1, "rank-3/worker.log": 1,
                                               "notes.md": 1, "rank-x/run.json": 1, "rank-01/run.json": 1}  # fmt: skip
    _earlier_run(tmp_path, listed)
    assert files_written_by_branchscope(tmp_path) == {"run.json", "plan.py", "rank-3/trace.json.gz", "rank-3/worker.log"}
    assert all(RUN_FILE_NAME.fullmatch(n) for n in files_written_by_branchscope(tmp_path))


def test_a_user_file_in_a_rank_folder_is_never_deleted(tmp_path):
    out = tmp_path / "out"
    _earlier_run(out, {"rank-0/run.json": 2, "rank-0/trace.json.gz": 3, "rank-1/run.json": 2, "rank-1/trace.json.gz": 3},
                 ranks=[{"rank": 0}, {"rank": 1}])  # fmt: skip
    for r in (0, 1):
        (out / f"rank-{r}").mkdir()
        (out / f"rank-{r}" / "run.json").write_text("{}")
        (out / f"rank-{r}" / "trace.json.gz").write_bytes(b"old")
    (out / "rank-0" / "notes.md").write_text("mine")

    with pytest.raises(RunFolderError, match=r"did not write \(rank-0/notes.md\)"):
        _commit_a_run(out)  # refused, as a user's file beside run.json is
    assert (out / "rank-0" / "trace.json.gz").read_bytes() == b"old"

    _commit_a_run(out, overwrite=True)  # a one-process run: the ranks' files go, the user's stays
    assert (out / "rank-0" / "notes.md").read_text() == "mine"
    assert sorted(os.listdir(out / "rank-0")) == ["notes.md"]
    assert not (out / "rank-1").exists()  # emptied by removing our files: removed

    (out / "rank-1").mkdir()
    (out / "rank-1" / "mine.txt").write_text("also mine")
    run = _commit_a_run(out, overwrite=True, ranks=2)  # a distributed run into folders the user keeps files in
    assert sorted(os.listdir(out / "rank-0")) == ["notes.md", "run.json", "trace.json.gz"]
    assert (out / "rank-1" / "mine.txt").read_text() == "also mine"
    assert set(run["files"]) == {"rank-0/run.json", "rank-0/trace.json.gz", "rank-1/run.json", "rank-1/trace.json.gz"}

    _commit_a_run(out, overwrite=True)  # and back: only what we wrote goes
    assert sorted(os.listdir(out / "rank-0")) == ["notes.md"] and sorted(os.listdir(out / "rank-1")) == ["mine.txt"]


def test_a_rank_folder_that_is_a_link_is_neither_followed_nor_removed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_text("precious")
    (elsewhere / "trace.json.gz").write_bytes(b"precious")
    out = tmp_path / "out"
    _earlier_run(out, {"rank-0/run.json": 2, "rank-0/trace.json.gz": 3})
    (out / "rank-0").symlink_to(elsewhere)

    _commit_a_run(out, overwrite=True)
    assert (elsewhere / "run.json").read_text() == "precious" and (elsewhere / "trace.json.gz").read_bytes() == b"precious"
    with pytest.raises(OSError, match="in the way"):
        _commit_a_run(out, overwrite=True, ranks=1)
    assert sorted(os.listdir(elsewhere)) == ["run.json", "trace.json.gz"]


def test_a_sweep_dropping_a_cell_whose_run_json_points_out_removes_nothing_outside(tmp_path):
    project = tmp_path / "project"
    out = project / "sweep"
    out.mkdir(parents=True)
    (project / "user.txt").write_text("the user's")
    (out / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "cells": [{"mode": "fork", "interop": 1, "intra": 1, "run": "fork-1x1"}]}))
    _earlier_run(out / "fork-1x1", {"..": 1, ".": 1, "trace.json.gz": 3})
    (out / "fork-1x1" / "trace.json.gz").write_bytes(b"old")

    with SweepFolder(out, ["fork-2x1"]):
        pass  # the earlier cell fork-1x1 is dropped on open

    assert (project / "user.txt").read_text() == "the user's"
    assert not (out / "fork-1x1").exists() and (out / SWEEP_JSON).exists()


@pytest.mark.parametrize("name", ["..", ".", "", "../../x", "/tmp", "fork-1x1/..", "sweep.json", "notes", "fork-0x1"])
def test_a_sweep_json_cell_folder_is_only_a_cell_name(tmp_path, name):
    (tmp_path / "notes").mkdir()
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "cells": [{"mode": "fork", "interop": 1, "intra": 1, "run": name}]}))
    with pytest.raises(Exception, match="cell 0 needs"):
        load_sweep(tmp_path)
    with pytest.raises(RunFolderError, match="did not write"):  # so nothing in DIR is ours: refused
        SweepFolder(tmp_path, ["fork-1x1"]).open()
    assert (tmp_path / "notes").is_dir() and (tmp_path / SWEEP_JSON).exists()


def test_a_sweep_cell_folder_that_is_a_link_is_never_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "sweep"
    out.mkdir()
    (out / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "cells": [{"mode": "fork", "interop": 1, "intra": 1, "run": "fork-1x1"}]}))
    (out / "fork-1x1").symlink_to(elsewhere)
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match="fork-1x1"):
            SweepFolder(out, ["fork-1x1"], overwrite=overwrite).open()
    assert os.listdir(elsewhere) == []


# ------------------------------------------------------------------------------ special files in OUT


#: Runs a command and writes the peak memory of its process tree (KiB) into the file argv[1].
MEASURED = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)")  # fmt: skip


def _cli(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120,
         peak_kib: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`branchscope ARGV` in its own process; the timeout is a guard against a hang, not a measure.
    `peak_kib`: a file that receives the command's peak memory."""
    command = python_command("branchscope.app") + list(argv)
    if peak_kib is not None:
        command = [sys.executable, "-c", MEASURED, str(peak_kib), *command]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _profile_args(out: Path, *extra: str) -> list[str]:
    return ["profile", "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1",
            "--steps", "1", "--warmup", "0", "--out", str(out), *extra]  # fmt: skip


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "huge"])
def test_a_run_json_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / "run.json")
    elif kind == "dev-zero":
        (out / "run.json").symlink_to("/dev/zero")
    elif kind == "folder":
        (out / "run.json").mkdir()
    else:  # a sparse file far larger than any run.json
        with open(out / "run.json", "wb") as f:
            f.truncate(8 << 30)
    proc = _cli(*_profile_args(out), peak_kib=tmp_path / "peak")  # before: blocked for ever (FIFO), or read until MemoryError
    assert proc.returncode == 2, proc.stderr
    assert "did not write (run.json)" in _one_error_line(proc)
    assert int((tmp_path / "peak").read_text()) < 512 << 10  # KiB: the CLI itself, not gigabytes of zeros
    assert os.listdir(out) == ["run.json"]


def test_a_sweep_json_that_is_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / SWEEP_JSON)
    proc = _cli("sweep", "--demo", "twin-mm", "--modes", "sequential", "--interop", "1", "--intra", "1",
                "--steps", "1", "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2 and "did not write (sweep.json)" in _one_error_line(proc)
    load = f"from branchscope.profiling.run.sweep import load_sweep; load_sweep({str(tmp_path)!r})"
    proc = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=120)
    assert "SweepError" in proc.stderr and "is a FIFO (named pipe), not a regular file" in proc.stderr


def test_compare_refuses_a_run_json_far_larger_than_any_run_json(tmp_path):
    (tmp_path / "trace.json.gz").write_bytes(b"")
    with open(tmp_path / "run.json", "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GB of zeros that take no disk
    proc = _cli("compare", str(tmp_path), str(tmp_path), peak_kib=tmp_path / "peak")
    assert proc.returncode == 2
    assert "larger than" in _one_error_line(proc)
    assert int((tmp_path / "peak").read_text()) < 512 << 10  # KiB


FAKE_WORKER = """
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
(out / "trace.json").write_text(json.dumps({"traceEvents": []}))
(out / "run.json").write_text(json.dumps({"complete": True, "mode": "sequential", "interop": 1, "intra": 1,
    "trace_clock": {"base_time_ns": 0, "first_us": 0.0, "last_us": 1.0}, "steps_ms": [1.0], "median_ms": 1.0}))
"""


@pytest.fixture
def fake_worker(monkeypatch):
    monkeypatch.setattr("branchscope.profiling.run.supervise.worker_command", lambda req, out: [sys.executable, "-c", FAKE_WORKER, str(out)])


def test_overwrite_never_replaces_a_special_run_json_nor_reads_it(tmp_path, fake_worker):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "run.json")  # not ours: --overwrite writes beside such a file, never over it
    req = RunRequest(mode="sequential", interop=1, intra=1, out=out, overwrite=True, options=RunOptions(demo="twin-mm", steps=1, warmup=0))
    result = run_profile(req)
    assert result.exit_code == 2 and "never over them" in (result.message or "") and "run.json" in (result.message or "")
    assert stat.S_ISFIFO(os.lstat(out / "run.json").st_mode) and os.listdir(out) == ["run.json"]


# ------------------------------------------------------------------------------ --out names


#: kineto wrote what it was given into "traceName" unescaped, and its rename turned `\` into `/`.
RAW_TRACE_NAME = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}\n  ],"traceName": "/tmp/we"ird/dir\\x/t.json" }'


def test_a_trace_kineto_wrote_with_a_raw_path_is_still_read(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(RAW_TRACE_NAME)
    trace = load_trace(path)
    assert [trace.names[i] for i in trace.name_id] == ["aten::mm"]
    assert trace.metadata["traceName"] == '/tmp/we"ird/dir\\x/t.json'
    path.write_bytes(RAW_TRACE_NAME.replace(b'"traceName"', b'"other"'))  # any other broken text stays an error
    with pytest.raises(ValueError, match="not valid JSON"):
        load_trace(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ['quote"d', "back\\slash", "new\nline", "all \"\\\n' $(x) *"])
def test_any_out_name_the_os_accepts_gets_a_run(tmp_path, name):
    out = tmp_path / name / "out"
    proc = _cli(*_profile_args(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True and set(run["files"]) >= {"trace.json.gz"}
    trace = load_trace(out / "trace.json.gz")
    assert "traceName" not in trace.metadata  # the staging path is nobody's business
    assert any(n.startswith("step ") for n in trace.names)


def test_an_out_name_the_os_refuses_is_one_error_line_before_any_work(tmp_path):
    proc = _cli(*_profile_args(tmp_path / ("x" * 300)))
    assert proc.returncode == 2 and "file name too long" in _one_error_line(proc)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------ the current folder


EVIL = "open({marker!r}, 'a').write(__name__ + '\\n')\n"


def test_the_cli_imports_nothing_from_the_current_folder_whatever_pythonpath_holds(tmp_path):
    script = Path(sys.executable).parent / "branchscope"
    if not script.exists():
        pytest.skip("no installed branchscope command beside this interpreter")
    here = tmp_path / "here"
    here.mkdir()
    marker = tmp_path / "imported.txt"
    # Not pathlib, typing, re…: an editable install's .pth imports them as the interpreter starts, before
    # any code of ours (docs/promises.md says so); everything the CLI itself imports is here.
    for module in ("json", "numpy", "argparse", "msgspec", "gzip", "psutil", "shutil", "pickle", "zlib"):
        (here / f"{module}.py").write_text(EVIL.format(marker=str(marker)))
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}))
    for pythonpath in (":/nonexistent", ".", str(here), "nonexistent:"):
        env = dict(os.environ, PYTHONPATH=pythonpath)
        proc = subprocess.run([str(script), "inspect", str(trace)], cwd=here, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert not marker.exists(), f"PYTHONPATH={pythonpath!r} imported {marker.read_text().split()}"
