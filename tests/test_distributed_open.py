"""A distributed run's folder (rank-R/ folders and a top-level run.json listing them) opens as one
job: in the window and in `inspect`, every rank's trace merged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.gui_helpers import write_small_trace


def _distributed_folder(out: Path) -> Path:
    ranks = []
    for r in (0, 1):
        (out / f"rank-{r}").mkdir(parents=True)
        write_small_trace(out / f"rank-{r}" / "trace.json.gz", "fork")
        ranks.append({"rank": r, "pid": 100 + r, "device": "cpu", "trace": f"rank-{r}/trace.json.gz"})
    run = {"mode": "fork", "interop": 2, "intra": 1, "nproc": 2, "world_size": 2, "model": "demo twin-mm",
           "source": "demo", "ranks": ranks, "trace": "rank-0/trace.json.gz", "complete": True}  # fmt: skip
    (out / "run.json").write_text(json.dumps(run))
    return out


def test_the_window_opens_a_distributed_run_folder_as_its_ranks_merged(window, tmp_path):
    folder = _distributed_folder(tmp_path / "D")
    assert window.open_trace_files([str(folder)]) == 1
    trace = window.entries[0].trace
    assert sorted({ln.rank for ln in trace.lanes}) == [0, 1]
    assert [p.name for p in window.entries[0].paths] == ["trace.json.gz", "trace.json.gz"]


def test_inspect_takes_a_distributed_run_folder(tmp_path):
    folder = _distributed_folder(tmp_path / "D")
    proc = subprocess.run(
        [sys.executable, "-m", "branchscope.app", "inspect", str(folder), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted({ln["rank"] for ln in doc["lanes"]}) == [0, 1]
