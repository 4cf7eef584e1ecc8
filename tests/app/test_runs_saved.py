"""Runs read back from disk, without Qt: the runs kept under the runs root (a restarted window lists
them) and run folders or trace files opened from disk, labelled by model, mode and threads."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.app.run_entry import Entry, RunSpec, entry_for_path
from branchscope.app.runs import Runs
from branchscope.app.runs_on_disk import saved_runs
from branchscope.app.runs_words import when_text
from branchscope.profiling import load_trace
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sources import SCAN_CHUNK as _SCAN_CHUNK
from branchscope.profiling.trace.sources import find_info as _find_info
from branchscope.profiling.trace.sources import read_trace_info
from tests.builders.runs import write_run_json
from tests.paths import ROOT


def _run_json(mode: str, interop: int, intra: int, model: str = "demo twin-mm", source: str = "demo", **more) -> dict:
    return {
        "mode": mode, "interop": interop, "intra": intra, "model": model, "source": source, "steps": 3,
        "warmup": 1, "median_ms": 50.0, "unprofiled_steps_ms": [10.0, 11.0, 12.0], "trace": "trace.json.gz",
        "complete": True, **more,
    }  # fmt: skip


def _write_run(folder: Path, run: dict | None, *, trace: bool = True, when: float | None = None) -> Path:
    folder.mkdir(parents=True)
    if trace:
        (folder / "trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    if run is not None:
        write_run_json(folder, **run)
        if when is not None:
            os.utime(folder / "run.json", (when, when))
    return folder


def _snapshot(root: Path) -> dict[str, tuple[int, float]]:
    """Every path under root with its size and mtime (to show nothing was written)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime)
    return out


def test_saved_runs_lists_complete_runs_oldest_first_and_writes_nothing(tmp_path):
    root = tmp_path / "runs"
    s1, s2 = root / "20260101-100000-111", root / "20260102-100000-222"
    newer = _write_run(s1 / "002-twin-mm-fork-2x1", _run_json("fork", 2, 1), when=3000)
    older = _write_run(s2 / "001-twin-mm-sequential-1x1", _run_json("sequential", 1, 1), when=1000)
    middle = _write_run(s2 / "003-net.py-fork-2x2", _run_json("fork", 2, 2, model="/m/net.py", source="py"), when=2000)
    # skipped: no run.json (a run cut short), not complete, its trace missing, a hostile trace name,
    # a folder not named like a run, a session not named like one, run.json not JSON, a FIFO
    _write_run(s1 / "004-twin-mm-fork-2x1", None)
    _write_run(s1 / "005-twin-mm-fork-2x1", _run_json("fork", 2, 1) | {"complete": False})
    _write_run(s1 / "006-twin-mm-fork-2x1", _run_json("fork", 2, 1), trace=False)
    _write_run(s1 / "007-twin-mm-fork-2x1", _run_json("fork", 2, 1) | {"trace": "../../x.json"})
    _write_run(s1 / "notes", _run_json("fork", 2, 1))
    _write_run(root / "my-session" / "001-twin-mm-fork-2x1", _run_json("fork", 2, 1))
    broken = _write_run(s1 / "008-twin-mm-fork-2x1", None)
    (broken / "run.json").write_text("{not json")
    fifo = _write_run(s1 / "009-twin-mm-fork-2x1", None)
    os.mkfifo(fifo / "run.json")
    # a link to a session elsewhere is not followed
    elsewhere = tmp_path / "elsewhere"
    _write_run(elsewhere / "001-twin-mm-fork-2x1", _run_json("fork", 2, 1))
    (root / "20260103-100000-333").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(tmp_path)

    entries = saved_runs(root)

    assert [e.trace_path.parent for e in entries] == [older, middle, newer]
    assert [e.title for e in entries] == ["twin-mm · sequential · 1×1", "net.py · fork · 2×2", "twin-mm · fork · 2×1"]
    assert entries[0].spec == RunSpec("sequential", 1, 1, options=RunOptions(steps=3, demo="twin-mm", warmup=1))
    assert entries[1].spec == RunSpec("fork", 2, 2, options=RunOptions(steps=3, model=Path("/m/net.py"), warmup=1))
    assert entries[0].stats is not None and entries[0].stats.median == 11.0
    assert all(e.trace is None for e in entries)  # read when shown
    assert _snapshot(tmp_path) == before
    # the window's own session is left out; a missing root is no error
    assert [e.trace_path.parent for e in saved_runs(root, exclude=s2)] == [newer]
    assert saved_runs(tmp_path / "missing") == []


def test_saved_runs_are_a_baseline_only_when_the_user_sets_one(tmp_path):
    root = tmp_path / "runs"
    session = root / "20260101-100000-111"
    _write_run(session / "001-a", _run_json("sequential", 1, 1) | {"unprofiled_steps_ms": [40.0]}, when=1000)
    _write_run(session / "002-b", _run_json("fork", 2, 1) | {"unprofiled_steps_ms": [20.0]}, when=2000)
    runs = Runs()
    runs.extend(saved_runs(root))
    assert all(e.from_disk for e in runs)
    # an earlier session's sequential 1×1 run is no default baseline: no speedup, and the reason named
    assert runs.baseline_of(1) is None and runs.speedup(1) is None and runs.default_baseline(1) is None
    assert runs.no_baseline_text(1).startswith("no baseline this session: #1 sequential 1×1 is from another session")
    assert runs.header_text() == "speedup (no baseline this session)"
    # chosen by the user, it is used, and said to be from disk and set by the user
    runs.set_baseline(0)
    assert runs.baseline_of(1) == 0 and runs.speedup(1) == 2.0
    assert runs.baseline_text(1) == f"#1 sequential 1×1, run {when_text(1000)} from disk (001-a) (set by you)"
    assert when_text(1000).startswith("on ") and "1970" in when_text(1000) or "1969" in when_text(1000)


def test_a_torchscript_run_is_repeatable_only_with_its_input_shapes():
    def spec_from_run(run: dict) -> RunSpec | None:
        return RunSpec.from_record(RunRecord.parse(run))

    run = _run_json("fork", 2, 1, model="/m/net.pt", source="torchscript")
    assert spec_from_run(run) is None
    spec = spec_from_run(run | {"input_shapes": ["8x3"], "dtype": "float16"})
    assert spec == RunSpec("fork", 2, 1, options=RunOptions(steps=3, model=Path("/m/net.pt"), warmup=1, input_shapes=("8x3",), dtype="float16"))
    assert spec_from_run({"mode": "fork"}) is None and spec_from_run(run | {"interop": "2"}) is None
    # without a spec, an entry still says what ran
    e = Entry("net.pt", Path("/r/trace.json.gz"), run=RunRecord.parse(run))
    assert e.title == "net.pt · fork · 2×1" and e.model_key == "file:/m/net.pt"


def _trace_with_info(path: Path, info: dict | None, *, events: int = 10, info_first: bool = False, decoy: bool = False) -> Path:
    """A Chrome trace with `events` events (padding to span several read chunks) and the
    "branchscope" object before or after them."""
    ev = [{"ph": "X", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"pad": "x" * 200}} for i in range(events)]
    if decoy:  # an event naming the key in its args, before the real object
        ev.insert(0, {"ph": "i", "name": "note", "pid": 1, "tid": 1, "ts": 0, "args": {"branchscope": "not it"}})
    doc = {"schemaVersion": 1}
    if info is not None and info_first:
        doc["branchscope"] = info
    doc["traceEvents"] = ev
    if info is not None and not info_first:
        doc["branchscope"] = info
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


INFO = {"mode": "fork", "interop": 2, "intra": 3, "cores": 2, "branches": [{"name": "a", "region": "1"}]}


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("info_first", [True, False])
def test_the_branchscope_object_is_found_without_decoding_the_trace(tmp_path, name, info_first):
    path = _trace_with_info(tmp_path / name, INFO, events=4000, info_first=info_first, decoy=True)
    assert os.path.getsize(path) > 2 * _SCAN_CHUNK or name.endswith(".gz")
    assert read_trace_info(path) == INFO
    assert read_trace_info(_trace_with_info(tmp_path / f"none-{name}", None)) is None


def test_an_object_near_the_start_is_read_from_the_first_chunk_only():
    doc = b'{"branchscope": {"mode": "sequential"}, "traceEvents": [' + b'{"ph": "X"},' * 1_000_000 + b"{}]}"

    class Counting(io.BytesIO):
        reads = 0

        def read(self, n=-1):
            Counting.reads += 1
            return super().read(n)

    assert _find_info(Counting(doc)) == {"mode": "sequential"}
    assert Counting.reads == 1 and len(doc) > 10 * _SCAN_CHUNK


def test_unreadable_traces_give_no_info(tmp_path):
    (tmp_path / "broken.json.gz").write_bytes(b"\x1f\x8b" + b"not gzip at all")
    (tmp_path / "cut.json").write_text('{"branchscope": {"mode": "fork", "inter')
    os.mkfifo(tmp_path / "fifo.json")
    for name in ("broken.json.gz", "cut.json", "fifo.json", "missing.json"):
        assert read_trace_info(tmp_path / name) is None, name


def test_an_opened_trace_is_labelled_by_its_run_or_its_own_object(tmp_path):
    # a trace with its run.json beside it: the run's model, mode, threads and medians
    folder = _write_run(tmp_path / "001-twin-mm-fork-2x1", _run_json("fork", 2, 1))
    e = entry_for_path(folder / "trace.json.gz")
    assert (e.label, e.title, e.stats.median) == ("twin-mm", "twin-mm · fork · 2×1", 11.0)
    assert e.spec == RunSpec("fork", 2, 1, options=RunOptions(steps=3, demo="twin-mm", warmup=1))
    assert entry_for_path(folder).trace_path == folder / "trace.json.gz"  # the folder itself
    # a trace alone: its "branchscope" object, and its name (a generic name: its folder's)
    alone = _trace_with_info(tmp_path / "mine.json.gz", INFO)
    e = entry_for_path(alone)
    assert (e.title, e.spec, e.run, e.stats) == ("mine · fork · 2×3", None, None, None)
    (tmp_path / "copy").mkdir()
    generic = _trace_with_info(tmp_path / "copy" / "trace.json.gz", INFO)
    assert entry_for_path(generic).title == "copy · fork · 2×3"
    plain = _trace_with_info(tmp_path / "plain.json", None)
    assert entry_for_path(plain).title == "plain"
    # a run.json beside that names another trace is not this trace's
    other = _write_run(tmp_path / "other", _run_json("sequential", 1, 1) | {"trace": "elsewhere.json.gz"})
    (other / "elsewhere.json.gz").write_bytes(b"")
    assert entry_for_path(_trace_with_info(other / "t.json", INFO)).title == "t · fork · 2×3"


def test_a_path_that_is_neither_run_folder_nor_trace_says_so(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        entry_for_path(tmp_path / "missing.json")
    with pytest.raises(TraceFormatError, match="folder without a complete run"):
        entry_for_path(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(TraceFormatError, match="FIFO"):
        entry_for_path(tmp_path / "fifo")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run of a small demo (fork 2×1, few steps) through `branchscope profile`."""
    out = tmp_path_factory.mktemp("real") / "20260101-000000-1" / "001-twin-mm-fork-2x1"
    cmd = [sys.executable, "-m", "branchscope.app.cli", "profile", "--demo", "twin-mm", "--mode", "fork",
           "--interop", "2", "--intra", "1", "--steps", "2", "--warmup", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_real_run_folder_reads_back_as_it_ran(real_run):
    run = json.loads((real_run / "run.json").read_text())
    e = entry_for_path(real_run)
    assert e.title == "twin-mm · fork · 2×1"
    assert e.spec == RunSpec("fork", 2, 1, options=RunOptions(steps=2, demo="twin-mm", warmup=1))
    assert e.stats is not None and e.stats.n == len(run["unprofiled_steps_ms"]) >= 2
    [kept] = saved_runs(real_run.parent.parent)
    assert kept.title == e.title and kept.trace_path == e.trace_path
    # the trace's own object agrees with run.json, and the entry loads
    info = read_trace_info(real_run / "trace.json.gz")
    assert (info["mode"], info["interop"], info["intra"]) == ("fork", 2, 1)
    runs = Runs()
    runs.append(kept)
    trace, read = runs.load(0, lambda paths: load_trace(paths[0]))
    assert read and trace.run_info is not None and trace.run_info.interop == 2
