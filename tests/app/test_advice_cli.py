"""Advice on the command line: `branchscope compare` and `branchscope sweep` say in one line which
way of using the cores (intra-op threads, or forking the branches) served the model better, from runs
of the same thread count (profiling/trace/advice.py), or which run would tell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from branchscope.app import cli
from branchscope.app.cmd_sweep import report
from branchscope.profiling.machine import usable_cores
from branchscope.profiling.trace.sweep_records import SWEEP_JSON, CellRecord, SweepRecord
from tests.builders.runs import ADVICE_SEQ_WINS, write_advice_runs, write_timed_run

SEQ_WINS = ADVICE_SEQ_WINS


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    return {
        **write_advice_runs(tmp_path),
        "fork 2x1 noisy": write_timed_run(tmp_path / "fork21n", "fork", 2, 1, [30.0, 38.0, 40.0, 45.0, 60.0]),
    }


def _compare(capsys, *folders: Path, json_out: bool = False) -> str:
    assert cli.main(["compare", *map(str, folders), *(["--json"] if json_out else [])]) == 0
    return capsys.readouterr().out


def test_compare_says_which_way_of_using_the_cores_served_the_model_better(runs, capsys):
    out = _compare(capsys, runs["seq 1x1"], runs["fork 2x1"], runs["seq 1x2"])
    assert f"advice: {SEQ_WINS}" in out.splitlines()
    doc = json.loads(_compare(capsys, runs["seq 1x1"], runs["fork 2x1"], runs["seq 1x2"], json_out=True))
    # The winner by its configuration and its index among the runs given (as --baseline K counts them).
    assert doc["advice"] == {
        "text": SEQ_WINS,
        "winner": {"mode": "sequential", "interop": 1, "intra": 2, "index": 2},
        "reason": "faster: sequential 1×2 by 1.17×, beyond noise (their step times' interquartile ranges do not overlap)",
        "parts": None,  # no fork 1×1 among the runs
    }
    assert all(run["starved"] is None for run in doc["runs"])  # run.json from before `starved`, no load


def test_compare_within_noise_says_so(runs, capsys):
    out = _compare(capsys, runs["seq 1x2"], runs["fork 2x1 noisy"])
    line = next(x for x in out.splitlines() if x.startswith("advice: "))
    assert line.startswith("advice: on 2 cores, fork 2×1 (40.0 ms) and sequential 1×2 (41.0 ms) are within noise")


def test_compare_of_fork_against_sequential_1x1_says_which_run_would_tell(runs, capsys):
    out = _compare(capsys, runs["seq 1x1"], runs["fork 2x1"])
    line = next(x for x in out.splitlines() if x.startswith("advice: "))
    assert "fork 2×1 computes with 2 threads, the sequential run here with 1" in line
    assert "sequential 1×2 beside it would tell" in line


def test_compare_of_runs_of_one_way_gives_no_advice(runs, capsys):
    out = _compare(capsys, runs["seq 1x1"], runs["seq 1x2"])
    assert not [x for x in out.splitlines() if x.startswith("advice")]
    assert json.loads(_compare(capsys, runs["seq 1x1"], runs["seq 1x2"], json_out=True))["advice"] is None


def test_the_sweep_report_carries_the_advice_after_the_best_cell(tmp_path):
    def cell(mode, interop, intra, median, spread):
        return CellRecord(mode=mode, interop=interop, intra=intra, run=f"{mode}-{interop}x{intra}", status="done",
                          unprofiled_median_ms=median, unprofiled_spread_ms=spread)  # fmt: skip

    sweep = SweepRecord(cores=2, best=1, cells=[
        cell("sequential", 1, 1, 70.0, [69.0, 69.5, 70.5, 72.0]),
        cell("sequential", 1, 2, 41.0, [40.0, 40.5, 41.5, 43.0]),
        cell("fork", 2, 1, 48.0, [47.0, 47.5, 48.5, 50.0]),
    ])  # fmt: skip
    lines = report(sweep, tmp_path).splitlines()
    assert lines[-3:] == [f"best: sequential 1×2 ({tmp_path / 'sequential-1x2'})", f"advice: {SEQ_WINS}",
                          f"wrote {tmp_path / SWEEP_JSON}"]  # fmt: skip


#: Stands in for the worker (argv: OUT MODE INTEROP INTRA): a step takes 12 / intra ms sequential,
#: 8 / (interop × intra) forked, so fork 2×1 (4 ms) beats sequential 1×2 and 2×2 (6 ms).
FAKE_WORKER = """
import json, sys
from pathlib import Path
out, mode, interop, intra = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ms = 12.0 / intra if mode == "sequential" else 8.0 / (interop * intra)
(out / "trace.json").write_text(json.dumps({"traceEvents": []}))
run = {"complete": True, "mode": mode, "interop": interop, "intra": intra,
       "trace_clock": {"base_time_ns": 0, "first_us": 0.0, "last_us": 1.0},
       "steps_ms": [2 * ms, 2 * ms], "median_ms": 2 * ms,
       "unprofiled_steps_ms": [ms - 0.5, ms, ms + 0.5], "unprofiled_median_ms": ms}
(out / "run.json").write_text(json.dumps(run))
"""


def test_sweep_prints_the_advice(tmp_path, monkeypatch, capsys):
    def command(req, out):
        return [sys.executable, "-c", FAKE_WORKER, str(out), req.mode, str(req.interop), str(req.intra)]

    monkeypatch.setattr("branchscope.profiling.run.supervise.worker_command", command)
    out = tmp_path / "sweep"
    argv = ["sweep", "--demo", "twin-mm", "--modes", "sequential,fork", "--interop", "1,2", "--intra", "1,2",
            "--steps", "1", "--warmup", "0", "--quiet", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    advice = [x for x in capsys.readouterr().out.splitlines() if x.startswith("advice: ")]
    cores = usable_cores()
    where = "on 2 cores" if cores == 2 else f"with 2 threads on {cores} core{'s' if cores != 1 else ''}"
    # 2 threads: sequential 1×2 (6 ms; sequential runs once per intra-op count) and fork 2×1 (4 ms); fork 1×2
    # (4 ms) forks nothing side by side and fork 2×2 computes with 4 threads: neither is paired. Beside
    # sequential 1×1 (12 ms) and fork 1×1 (8 ms), fork 2×1's speedup splits into its plan (12 / 8) and its
    # threads (8 / 4), the plan named as fork's registry entry names it (sweep.json's cells' plan_by).
    assert advice == [
        f"advice: {where}, fork 2×1 (4.00 ms) beat sequential 1×2 (6.00 ms) by 1.50×: "
        "forking its branches serves this model better than intra-op threads; "
        "fork 2×1 over sequential 1×1, in parts: 3.00× = 1.50× from TorchScript's plan × 2.00× from 2 threads"
    ]
    data = json.loads((out / SWEEP_JSON).read_text())
    assert {c["mode"]: c["plan_by"] for c in data["cells"]} == {
        "sequential": "the model's own forward", "fork": "TorchScript's plan"}  # fmt: skip
    parts = data["advice"]["parts"]
    labels = [f"{c['mode']} {c['interop']}×{c['intra']}" for c in data["cells"]]
    assert (labels[parts["sequential"]], labels[parts["one_thread"]]) == ("sequential 1×1", "fork 1×1")
    assert {k: parts[k]["median"] for k in ("plan", "parallel", "whole")} == {"plan": 1.5, "parallel": 2.0, "whole": 3.0}
    assert parts["plan"]["ci95"] is None and parts["plan_by"] == "TorchScript's plan"


def test_compare_names_no_winner_beside_a_starved_run_and_offers_a_paired_measurement(tmp_path, capsys):
    # The runner judged the threads run starved (run.json's "starved"): 0.36 of a core for 2 threads.
    seq = write_timed_run(tmp_path / "seq12", "sequential", 1, 2, [221.0, 222.0, 222.7, 223.0, 224.0], starved=False)
    thr = write_timed_run(tmp_path / "thr21", "threads", 2, 1, [49.0, 49.2, 49.5, 49.8, 50.0], starved=True,
                          load={"cores": 2, "others_cores": 1.6, "own_cores": 0.36, "busy": True})  # fmt: skip
    doc = json.loads(_compare(capsys, seq, thr, json_out=True))
    assert [r["starved"] for r in doc["runs"]] == [False, True]
    advice = doc["advice"]
    assert advice["winner"] is None
    assert advice["reason"] == "starved: threads 2×1 got fewer cores than its threads could use (starved)"
    assert "4.50" not in advice["text"] and "branchscope speedup --configs sequential:1x2,threads:2x1" in advice["text"]
    lines = _compare(capsys, seq, thr).splitlines()
    assert "starved of cores: run 1 (got fewer cores than the threads could use: never the advice's winner)" in lines
    row = next(x for x in lines if x.startswith("1 "))
    assert "starved" in row
    assert f"advice: {advice['text']}" in lines
