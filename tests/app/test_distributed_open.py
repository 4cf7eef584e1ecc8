"""A distributed run's folder (rank-R/ folders and a top-level run.json listing them) opens as one
job: in the window and in `inspect`, every rank's trace merged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.builders.runs import write_run_json, write_small_trace


def _distributed_folder(out: Path) -> Path:
    ranks = []
    for r in (0, 1):
        (out / f"rank-{r}").mkdir(parents=True)
        write_small_trace(out / f"rank-{r}" / "trace.json.gz", "fork")
        ranks.append({"rank": r, "pid": 100 + r, "device": "cpu", "trace": f"rank-{r}/trace.json.gz"})
    run = {"mode": "fork", "interop": 2, "intra": 1, "nproc": 2, "world_size": 2, "model": "demo twin-mm",
           "source": "demo", "ranks": ranks, "trace": "rank-0/trace.json.gz", "complete": True}  # fmt: skip
    write_run_json(out, **run)
    return out


def test_the_window_opens_a_distributed_run_folder_as_its_ranks_merged(window, tmp_path):
    folder = _distributed_folder(tmp_path / "D")
    assert window.open_trace_files([str(folder)]) == 1
    trace = window.run_list.entries[0].trace
    assert sorted({ln.rank for ln in trace.lanes}) == [0, 1]
    assert [p.name for p in window.run_list.entries[0].paths] == ["trace.json.gz", "trace.json.gz"]


def test_inspect_takes_a_distributed_run_folder(tmp_path):
    folder = _distributed_folder(tmp_path / "D")
    proc = subprocess.run(
        [sys.executable, "-m", "branchscope.app", "inspect", str(folder), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted({ln["rank"] for ln in doc["lanes"]}) == [0, 1]


def test_a_folder_of_rank_traces_from_a_users_own_job_opens_as_one_job(window, tmp_path):
    """torchrun / tensorboard_trace_handler leave one file per rank: ranks from distributedInfo,
    else from `rank-N` in the names (here the traces say nothing, so the names tell)."""
    job = tmp_path / "job"
    job.mkdir()
    for r in (1, 0):  # written out of order: rank-0 still comes first
        write_small_trace(job / f"worker.rank-{r}.pt.trace.json", "fork")
    (job / "notes.txt").write_text("not a trace")
    assert window.open_trace_files([str(job)]) == 1
    entry = window.run_list.entries[0]
    assert entry.label == "job · 2 ranks"
    assert [p.name for p in entry.paths] == ["worker.rank-0.pt.trace.json", "worker.rank-1.pt.trace.json"]
    assert sorted({ln.rank for ln in entry.trace.lanes}) == [0, 1]


def test_a_folder_without_a_run_or_traces_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "branchscope.app", "inspect", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
