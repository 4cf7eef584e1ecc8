"""The typed records of run.json and sweep.json, and the JSON-line events: untrusted files read field
by field, folders of earlier versions, names read from a record never followed blindly."""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from branchscope.profiling.trace.events import (
    CellEvent,
    DoneEvent,
    ErrorEvent,
    ExitedEvent,
    PhaseEvent,
    ProgressEvent,
    decode_events,
    encode_event,
)
from branchscope.profiling.trace.records import (
    RUN_FORMAT,
    BranchRecord,
    RankRecord,
    RunRecord,
    TraceClock,
    encode_record,
    read_run_record,
    to_builtins,
)
from branchscope.profiling.trace.sweep_records import CELL_FOLDER, CellRecord, SweepRecord


def test_a_run_record_round_trips_through_the_json_branchscope_writes():
    run = RunRecord(
        format=RUN_FORMAT, mode="fork", interop=2, intra=1, model="demo inception", source="demo",
        steps_ms=[1.5, 2.0], unprofiled_steps_ms=[1.0, 1.25, 1.5], branches=[BranchRecord(name="a → b", region="1")],
        trace_clock=TraceClock(base_time_ns=5.0, first_us=1.0, last_us=2.0), threads={"12": "python"},
        files={"trace.json.gz": 10}, complete=True,
    )  # fmt: skip
    text = encode_record(run)
    assert text.startswith(b"{\n ")  # indented by one, as run.json always was
    assert RunRecord.parse(json.loads(text)) == run
    assert run.demo == "inception" and run.model_label == "inception" and run.threads_label == "2×1"
    assert run.unprofiled_stats is not None and run.unprofiled_stats.median == 1.25


def test_a_field_of_the_wrong_type_reads_as_absent_and_the_rest_is_kept():
    run = RunRecord.parse(
        {
            "mode": "fork",
            "interop": True,  # a bool is no thread count
            "intra": "2",
            "median_ms": float("nan"),  # Python's json reads NaN: no number
            "steps_ms": [1, 2.5],
            "unprofiled_steps_ms": "slow",
            "branches": [{"name": "a", "region": "1", "ops": 3}, "x", {"name": 5}, {"region": "2"}],
            "trace_clock": {"base_time_ns": 7, "first_us": "soon"},
            "files": {"trace.json.gz": 3, "x": "big"},
            "complete": "yes",
            "unknown": {"kept": False},
        }
    )
    assert (run.mode, run.interop, run.intra, run.median_ms) == ("fork", None, None, None)
    assert run.steps_ms == [1.0, 2.5] and run.unprofiled_steps_ms is None and run.unprofiled_stats is None
    assert run.branches == [BranchRecord(name="a", region="1", ops=3)]  # items without a name are dropped
    assert run.trace_clock == TraceClock(base_time_ns=7.0)
    assert run.files is None  # one value of the wrong type: the whole map is untrusted
    assert run.complete is False


@given(st.dictionaries(st.sampled_from(["mode", "interop", "steps_ms", "branches", "ranks", "trace", "complete",
                                         "trace_clock", "files", "threads"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                                    max_leaves=10)))  # fmt: skip
def test_any_json_object_parses_without_raising(obj):
    run = RunRecord.parse(obj)
    assert isinstance(run, RunRecord)
    doc = to_builtins(run)
    assert all(not isinstance(v, float) or math.isfinite(v) for v in doc.values())
    run.trace_files()  # never raises either


def test_run_records_name_only_trace_files_of_the_shapes_branchscope_writes():
    assert RunRecord().trace_files() == ["trace.json.gz"]  # version 1 folders named none
    assert RunRecord(trace="t.json.gz").trace_files() == ["t.json.gz"]
    for bad in ("..", ".", "", "a/b", "/etc/passwd", "a\\b"):
        assert RunRecord(trace=bad).trace_files() is None, bad
    ranks = [RankRecord(rank=r, trace=f"rank-{r}/trace.json.gz") for r in (0, 1)]
    assert RunRecord(ranks=ranks).trace_files() == ["rank-0/trace.json.gz", "rank-1/trace.json.gz"]
    for bad in ("rank-0/../../x", "../rank-0/trace.json.gz", "rank-01/trace.json.gz", "rank-0/a/b", None):
        assert RunRecord(ranks=[RankRecord(rank=0, trace=bad)]).trace_files() is None, bad
    assert RunRecord(ranks=[]).trace_files() is None


def test_a_run_json_of_an_earlier_version_reads(tmp_path):
    """run.json as version 1 wrote it (no "format", no "input_shapes"): every field it has reads."""
    old = {
        "mode": "sequential", "interop": 1, "intra": 1, "cores": 2, "device": "cpu", "torch": "2.13.0",
        "model": "demo twin-mm", "source": "demo", "steps": 3, "warmup": 1, "steps_ms": [2.0, 2.1, 2.2],
        "median_ms": 2.1, "unprofiled_steps": 3, "unprofiled_steps_ms": [1.9, 2.0, 2.1], "unprofiled_median_ms": 2.0,
        "unprofiled_spread_ms": [1.9, 1.95, 2.05, 2.1], "profiler_overhead": 1.05,
        "branches": [{"name": "a", "region": "1", "ops": 2, "fork": "x", "join": "add", "depth": 0, "parent": None}],
        "regions": 1, "max_abs_diff": 0.0, "main_tid": 10, "interop_tids": [], "intra_tids": [],
        "threads_applied": {"interop": 1, "intra": 1}, "pid": 9, "threads": {"10": "python"}, "fx_error": None,
        "tracer": "torch.fx", "tracer_errors": {}, "notes": [], "plan": None, "trace": "trace.json.gz",
        "trace_clock": {"base_time_ns": 1, "first_us": 2, "last_us": 3}, "train_step": False, "complete": True,
    }  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(old))
    run = read_run_record(tmp_path)
    assert run is not None and run.format is None and run.complete
    # fields added since (a branch's region_name) read as their defaults
    branches = [{**to_builtins(BranchRecord()), **b} for b in old["branches"]]
    assert json.loads(encode_record(run)) == {**to_builtins(RunRecord()), **old, "branches": branches}


def test_read_run_record_refuses_what_is_not_a_regular_json_object(tmp_path):
    assert read_run_record(tmp_path) is None  # no run.json
    (tmp_path / "run.json").write_text("[1, 2]")
    assert read_run_record(tmp_path) is None
    (tmp_path / "run.json").unlink()
    (tmp_path / "elsewhere.json").write_text('{"complete": true}')
    (tmp_path / "run.json").symlink_to(tmp_path / "elsewhere.json")
    assert read_run_record(tmp_path) is not None
    assert read_run_record(tmp_path, follow_symlinks=False) is None


def test_sweep_records_keep_their_cells_and_find_the_best():
    cells = [
        CellRecord(mode="sequential", interop=1, intra=1, run="sequential-1x1", status="done", unprofiled_median_ms=40.0),
        CellRecord(mode="fork", interop=2, intra=1, run="fork-2x1", status="failed", error="boom"),
        CellRecord(mode="fork", interop=1, intra=1, run="fork-1x1", status="done", unprofiled_median_ms=30.0),
    ]
    sweep = SweepRecord(cells=cells, cores=2)
    assert sweep.best_index() == 2
    assert SweepRecord.parse(json.loads(encode_record(sweep))) == sweep
    assert [bool(CELL_FOLDER.fullmatch(c.run or "")) for c in cells] == [True, True, True]
    assert not any(CELL_FOLDER.fullmatch(n) for n in ("..", "fork-0x1", "a/fork-1x1", "Fork-1x1", "fork-1x1/.."))


def test_events_round_trip_and_lines_that_are_not_events_are_skipped():
    events = [
        PhaseEvent(phase="load"),
        ProgressEvent(step=2, of=5),
        ProgressEvent(step=1, of=3, index=4),
        ErrorEvent(message="boom", traceback="tb", exit_code=2),
        ExitedEvent(rank=1, pid=7, code=-9, t=1.5),
        DoneEvent(out="/o", run=RunRecord(mode="fork", complete=True)),
        CellEvent(index=0, of=2, out="/s", folder="/s/fork-1x1", cell=CellRecord(mode="fork"), best=0),
    ]
    lines = [encode_event(e) for e in events]
    assert json.loads(lines[1]) == {"event": "progress", "step": 2, "of": 5}  # defaults are left out
    noise = [b"", b"hello from the model", b'{"event": "unknown-kind"}', b'{"event": "progress", "step": "x"}', b"[1]"]
    assert decode_events(noise[:2] + lines[:3] + noise[2:] + lines[3:]) == events


def test_records_are_plain_msgspec_structs():
    assert issubclass(RunRecord, msgspec.Struct) and issubclass(SweepRecord, msgspec.Struct)
    with pytest.raises(TypeError):
        RunRecord("fork")  # type: ignore[misc]  # keyword only: run.json's keys are the names
