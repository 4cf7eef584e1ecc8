"""`branchscope compare` says a fork or threads run's speedup in its parts (plan × threads) when its
sequential 1×J and M 1×J are among the runs compared: a line in the table, "parts" in --json's row,
and the prediction's bound held against the part from its threads. Run folders from the builders,
no torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from branchscope.app import cli
from tests.builders.runs import write_timed_run

TS = "TorchScript's plan"
#: The fork run's own prediction: its branches could give 1.8× on 2 threads.
PREDICTION = {"by_threads": {"2": 1.8}, "step_ms": 50.0, "serial_ms": 5.0, "from": "test"}


def _steps(ms: float) -> list[float]:
    return [ms - 1.0, ms - 0.5, ms, ms + 0.5, ms + 1.0]


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    """sequential 1×1 (50 ms), fork 1×1 (40 ms), fork 2×1 (25 ms, with a prediction), fork 2×2 (20 ms)."""
    seq = "the model's own forward"
    return {
        "seq 1x1": write_timed_run(tmp_path / "seq11", "sequential", 1, 1, _steps(50.0), plan_by=seq),
        "fork 1x1": write_timed_run(tmp_path / "fork11", "fork", 1, 1, _steps(40.0), plan_by=TS),
        "fork 2x1": write_timed_run(tmp_path / "fork21", "fork", 2, 1, _steps(25.0), plan_by=TS, prediction=PREDICTION),
        "fork 2x2": write_timed_run(tmp_path / "fork22", "fork", 2, 2, _steps(20.0), plan_by=TS),
    }


def _compare(capsys, *folders: Path, json_out: bool = False) -> str:
    assert cli.main(["compare", *map(str, folders), *(["--json"] if json_out else [])]) == 0
    return capsys.readouterr().out


def test_json_rows_carry_the_parts_of_a_fork_run_beside_its_sequential_1xj_and_fork_1xj(runs, capsys):
    order = ("seq 1x1", "fork 1x1", "fork 2x1", "fork 2x2")
    doc = json.loads(_compare(capsys, *(runs[k] for k in order), json_out=True))
    rows = doc["runs"]
    # fork 2×2 has no sequential 1×2 or fork 1×2 here; sequential and 1×J runs have no parts at all.
    assert [r["parts"] is None for r in rows] == [True, True, False, True]
    parts = rows[2]["parts"]
    assert {k: parts[k]["median"] for k in ("plan", "parallel", "whole")} == {"plan": 1.25, "parallel": 1.6, "whole": 2.0}
    assert [parts[k]["ci95"] for k in ("plan", "parallel", "whole")] == [None] * 3  # medians, not paired
    assert parts["plan_by"] == TS and (parts["sequential"], parts["one_thread"]) == (0, 1)
    assert doc["speedup"][2] == 2.0  # the whole is the speedup over sequential 1×1, the baseline
    # The bound is about threads: held against the part from them (1.6 of 1.8), not the whole (2.0).
    vs = doc["vs_prediction"][2]
    assert vs["part"] == "parallel" and vs["measured"] == 1.6 and vs["bound"] == 1.8
    assert vs["share"] == pytest.approx(1.6 / 1.8, abs=1e-4)


def test_the_table_says_the_parts_in_a_line_and_the_bound_against_the_threads(runs, capsys):
    lines = _compare(capsys, runs["seq 1x1"], runs["fork 1x1"], runs["fork 2x1"]).splitlines()
    assert (
        "parts, run 2: fork 2×1 over sequential 1×1, in parts: 2.00× = 1.25× from TorchScript's plan × "
        "1.60× from 2 threads (from runs 0 and 1)"
    ) in lines
    assert len([x for x in lines if x.startswith("parts, run ")]) == 1
    prediction = next(x for x in lines if x.startswith("prediction, run 2: "))
    assert prediction.endswith("; 1.60× from its 2 threads (over fork 1×1): 89% of the 1.80× bound")


def test_without_fork_1xj_there_are_no_parts_and_the_bound_is_held_against_the_whole(runs, capsys):
    doc = json.loads(_compare(capsys, runs["seq 1x1"], runs["fork 2x1"], json_out=True))
    assert [r["parts"] for r in doc["runs"]] == [None, None]
    vs = doc["vs_prediction"][1]
    assert vs["part"] == "whole" and vs["measured"] == 2.0
    lines = _compare(capsys, runs["seq 1x1"], runs["fork 2x1"]).splitlines()
    assert not [x for x in lines if x.startswith("parts")]
    assert next(x for x in lines if x.startswith("prediction, run 1: ")).endswith(
        "; measured 2.00× on 2 threads: 111% of the 1.80× bound"
    )


def test_a_starved_fork_1xj_gives_no_parts(tmp_path, capsys):
    seq = write_timed_run(tmp_path / "seq11", "sequential", 1, 1, _steps(50.0))
    one = write_timed_run(tmp_path / "fork11", "fork", 1, 1, _steps(40.0), plan_by=TS, starved=True)
    two = write_timed_run(tmp_path / "fork21", "fork", 2, 1, _steps(25.0), plan_by=TS)
    doc = json.loads(_compare(capsys, seq, one, two, json_out=True))
    assert [r["parts"] for r in doc["runs"]] == [None, None, None]
