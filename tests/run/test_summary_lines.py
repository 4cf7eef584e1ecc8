"""`profile`'s summary lines (runner.format_summary): branches, what was left out, none found."""

from __future__ import annotations

from pathlib import Path

import msgspec

from branchscope.profiling.run.runner import format_summary
from branchscope.profiling.trace.prediction import predict
from branchscope.profiling.trace.records import BranchRecord, LeftOutRecord, LoadRecord, RunRecord
from branchscope.profiling.trace.starved import STARVED_LINE

ASSERTION = LeftOutRecord(name="stem.bn: eq → _assert", ops=3, kind="assertion", why="an assertion")


def _run(**fields) -> RunRecord:
    return RunRecord(mode="fork", interop=2, intra=1, model="m.py", tracer="torch.fx", **fields)


def test_branches_then_what_was_left_out():
    run = _run(
        branches=[BranchRecord(name="a", region="1", ops=3), BranchRecord(name="b", region="1", ops=4)],
        left_out=[ASSERTION, ASSERTION],
    )
    lines = format_summary(run, Path("out")).splitlines()
    assert "branches: 2 in 1 region(s) (graph from torch.fx)" in lines
    assert "left out: 2 assertions" in lines
    assert not any("none found" in line for line in lines)
    plain = format_summary(msgspec.structs.replace(run, left_out=None), Path("out")).splitlines()
    assert not any("none found" in line or line.startswith("left out") for line in plain)


def test_no_branch_says_none_found_and_what_was_left_out():
    small = LeftOutRecord(name="downsample", ops=1, kind="small", why="under 5%")
    lines = format_summary(_run(left_out=[small]), Path("out")).splitlines()
    assert "branches: none found" in lines
    assert "left out: 1 branch too small beside its region's largest" in lines
    lines = format_summary(_run(), Path("out")).splitlines()
    assert "branches: none found" in lines and not any(line.startswith("left out") for line in lines)


def test_threads_mode_says_the_branch_threads_wait_for_the_gil_after_the_threads_line():
    figures = [{"tid": 11, "calls": 20, "wall_ms": 100.0, "cpu_ms": 60.0, "core_wait_ms": 5.0, "gil_wait_ms": 35.0},
               {"tid": 12, "calls": 20, "wall_ms": 100.0, "cpu_ms": 56.0, "core_wait_ms": 7.0, "gil_wait_ms": 37.0}]  # fmt: skip
    run = RunRecord.parse({"mode": "threads", "interop": 2, "intra": 1, "model": "m.py", "main_tid": 1,
                           "interop_tids": [11, 12], "intra_tids": [], "python": "3.11.7", "gil": True,
                           "branch_threads": figures})  # fmt: skip
    lines = format_summary(run, Path("out")).splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("threads: "))
    assert lines[at + 1] == (
        "branch threads: 58% computing, 6% waiting for a core, 36% waiting for the GIL "
        "(2 threads, 40 branch calls, Python 3.11.7)"
    )
    free = msgspec.structs.replace(run, python="3.13.1 free-threading build", gil=False, branch_threads=None)
    assert "free-threaded Python 3.13.1: no GIL" in format_summary(free, Path("out")).splitlines()
    fork = _run(branches=[BranchRecord(name="a", region="1", ops=3)])
    assert not any("GIL" in line for line in format_summary(fork, Path("out")).splitlines())  # not in other modes


def test_the_prediction_is_said_in_words_with_its_assumptions():
    branches = [BranchRecord(name="big", region="1", ops=3), BranchRecord(name="small", region="1", ops=4)]
    pred = predict(branches, {"big": 7.0, "small": 3.0}, 10.0, source="3 sequential steps measured in the worker")
    lines = format_summary(_run(branches=branches, prediction=pred), Path("out")).splitlines()
    assert (
        "prediction: could be at most 1.43× on 2 threads, 1.43× on 4: big alone is 70% of region 1 "
        "(no contention, no overhead assumed; from 3 sequential steps measured in the worker)"
    ) in lines
    # after the branches, before the threads
    said = next(i for i, line in enumerate(lines) if line.startswith("prediction: "))
    assert lines[said - 1].strip().startswith("[1] small") and lines[said + 1].startswith("threads: ")
    assert not any(line.startswith("prediction") for line in format_summary(_run(branches=branches), Path("o")).splitlines())


def test_what_discovery_and_the_prediction_could_not_do_is_said_as_notes():
    said = "branches inside the paths of torch.cond (node cond) are not searched"
    lines = format_summary(_run(notes=[said]), Path("out")).splitlines()
    assert f"note: {said}" in lines
    assert not any(line.startswith("note: ") for line in format_summary(_run(), Path("out")).splitlines())


def test_a_starved_run_says_so_under_the_machines_load():
    load = LoadRecord(cores=2, others_cores=1.0, own_cores=0.97, own_wait_cores=0.7, busy=True)
    lines = format_summary(_run(load=load, starved=True), Path("out")).splitlines()
    assert lines[lines.index(load.text()) + 1] == STARVED_LINE
    quiet = format_summary(_run(load=load, starved=False), Path("out")).splitlines()
    assert STARVED_LINE not in quiet and load.text() in quiet
