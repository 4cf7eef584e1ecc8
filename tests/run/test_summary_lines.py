"""`profile`'s summary lines (runner.format_summary): branches, what was left out, none found."""

from __future__ import annotations

from pathlib import Path

import msgspec

from branchscope.profiling.run.runner import format_summary
from branchscope.profiling.trace.records import BranchRecord, LeftOutRecord, RunRecord

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
