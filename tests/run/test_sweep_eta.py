"""How long a sweep will take and has left (profiling/run/sweep_eta.py), on a clock the test moves,
and `branchscope sweep`'s lines that say it (its engine stood in for: no worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchscope.app.cli import main
from branchscope.profiling.run.sweep import DONE, FAILED, SweepResult, new_sweep
from branchscope.profiling.run.sweep_eta import (
    RUN_OVERHEAD_S,
    STEP_GUESS_S,
    SweepClock,
    duration_text,
    plan_text,
    run_guess_s,
)
from branchscope.profiling.trace.events import CellEvent, SweepEvent
from branchscope.profiling.trace.records import RunRecord


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_durations_read_as_a_person_says_them():
    assert [duration_text(s) for s in (3, 38, 85, 130, 3550, 3900, 7200)] == [
        "a few seconds", "about 40 s", "about 80 s", "about 2 min", "about 59 min", "about 1 h 5 min", "about 2 h"]  # fmt: skip


def test_before_any_run_the_time_is_cells_times_passes_times_a_run_guessed_from_its_steps():
    assert run_guess_s(steps=5, warmup=3) == pytest.approx(RUN_OVERHEAD_S + 18 * STEP_GUESS_S)
    assert run_guess_s(steps=50, warmup=3) > run_guess_s(steps=5, warmup=3)
    earlier = RunRecord(phase_seconds={"start": 1.5, "profile": 2.0, "export": 0.5})
    assert run_guess_s(steps=5, warmup=3, earlier=earlier) == pytest.approx(4.0 + RUN_OVERHEAD_S / 3)
    # The sweep: 10 cells, 3 passes, 7 s a run is 3.5 min.
    assert plan_text(10, 3, 7.0) == "10 cells × 3 passes = 30 runs, about 4 min"
    assert plan_text(1, 1, 7.0) == "1 cell, a few seconds"


def test_the_time_left_follows_the_runs_that_finished():
    now = Clock()
    clock = SweepClock(cells=4, passes=2, guess_s=10.0, now=now)
    assert clock.runs == 8 and clock.seconds_left() == 80.0
    assert clock.text() == "about 80 s left (a guess until a cell finishes)"
    now.t += 30.0  # the first run took 30 s, not 10
    clock.run_done(1, failed=False)
    assert clock.seconds_left() == 210.0 and clock.text() == "about 4 min left"
    now.t += 20.0  # the next is under way: its time comes off, never below the runs after it
    assert clock.seconds_left() == 190.0
    now.t += 100.0
    assert clock.seconds_left() == 180.0
    clock.run_done(1, failed=True)  # a cell whose first pass failed is not run again
    assert clock.runs == 7 and clock.seconds_left() == pytest.approx(75.0 * 5)
    for _ in range(5):
        clock.run_done(2, failed=False)
    assert clock.seconds_left() == 0.0 and clock.text() == ""


def test_the_cli_says_how_long_before_the_first_cell_and_with_each_cell(tmp_path, monkeypatch, capsys):
    now = Clock()
    monkeypatch.setattr("branchscope.profiling.run.sweep_eta.monotonic", now)

    def fake_sweep(req, on_event, cancel):
        sweep = new_sweep(req, 2)
        on_event(SweepEvent(out=str(req.out), sweep=sweep))
        cells = req.cells()
        for k in (1, 2):
            for i, cell in enumerate(cells):
                now.t += 12.0
                record = sweep.cells[i]
                record.status, record.unprofiled_median_ms = (FAILED, None) if cell.mode == "streams" else (DONE, 20.0)
                record.busy = cell.mode == "fork"
                if k == 2 and cell.mode == "streams":
                    continue
                on_event(CellEvent(index=i, of=len(cells), out=str(req.out), folder=str(Path(req.out) / cell.run),
                                   cell=record, sweep_pass=k, passes=req.passes))  # fmt: skip
        return SweepResult(1, req.out, message="stand-in")

    monkeypatch.setattr("branchscope.app.cmd_sweep.run_sweep", fake_sweep)
    code = main(["sweep", "--demo", "twin-mm", "--modes", "sequential,fork", "--interop", "2", "--intra", "1",
                 "--steps", "5", "--warmup", "3", "--passes", "2", "--out", str(tmp_path / "s")])  # fmt: skip
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    guess = 4 * run_guess_s(5, 3)
    assert lines[0] == f"sweeping 2 cells × 2 passes = 4 runs, {duration_text(guess)} (a guess until a cell finishes) into {tmp_path / 's'}"
    assert lines[1] == "pass 1/2 cell 1/2 sequential 1×1: 20.0 ms · about 40 s left"  # 3 runs of 12 s
    assert lines[2] == "pass 1/2 cell 2/2 fork 2×1: 20.0 ms (busy machine) · about 20 s left"
    assert lines[4] == "pass 2/2 cell 2/2 fork 2×1: 20.0 ms (busy machine)"  # nothing left
    assert lines[-1] == "error: stand-in"


def test_the_cli_says_nothing_of_time_with_quiet(tmp_path, monkeypatch, capsys):
    def fake_sweep(req, on_event, cancel):
        on_event(SweepEvent(out=str(req.out), sweep=new_sweep(req, 2)))
        return SweepResult(1, req.out, message="stand-in")

    monkeypatch.setattr("branchscope.app.cmd_sweep.run_sweep", fake_sweep)
    assert main(["sweep", "--demo", "twin-mm", "--modes", "sequential", "--interop", "1", "--intra", "1",
                 "--quiet", "--out", str(tmp_path / "s")]) == 1  # fmt: skip
    assert capsys.readouterr().err.splitlines() == ["error: stand-in"]


