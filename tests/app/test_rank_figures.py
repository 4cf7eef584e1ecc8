"""A folder of rank traces in the window (the rank overview in the Run tab) and in `inspect --json`,
`memory --json` and `inspect`'s table: the same per-rank figures (`profiling/trace/ranks.py`)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.builders.ranks import PEAK_BYTES, write_rank_job


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "branchscope.app", *args], capture_output=True, text=True, timeout=120)


def test_the_window_shows_the_overview_when_a_rank_folder_is_opened(window, tmp_path):
    from branchscope.app.pages.run_page import RunPage

    folder = write_rank_job(tmp_path / "job", 4, steps=3, slow={2: {0: 300}})
    assert window.open_trace_files([str(folder)]) == 1
    assert window.tabs.currentWidget() is window.page(RunPage)
    overview = window.page(RunPage).workspace.rank_overview
    assert overview.isVisible() and overview.figures is not None
    assert overview.figures.ranks == [0, 1, 2, 3]
    assert np.array_equal(overview.figures.step_ns[2], [1_300_000, 1_000_000, 1_000_000])


def test_inspect_and_memory_json_give_the_per_rank_figures(tmp_path):
    folder = write_rank_job(tmp_path / "job", 4, steps=3, slow={1: {2: 600}}, heavy=(2, 1 << 20))
    inspect = _cli("inspect", str(folder), "--json")
    assert inspect.returncode == 0, inspect.stderr
    doc = json.loads(inspect.stdout)
    assert doc["rank_steps"]["steps"] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert [r["steps_us"] for r in doc["rank_steps"]["ranks"]][1] == [1000.0, 1000.0, 1600.0]
    assert doc["stragglers"][2] == {"step": "ProfilerStep#2", "rank": 1, "step_us": 1600.0, "median_us": 1000.0,
                                    "excess_us": 600.0}  # fmt: skip
    heavy = doc["heaviest_memory_rank"]
    assert (heavy["rank"], heavy["device"], heavy["excess_bytes"]) == (2, "cuda:2", 1 << 20)
    # The busy shares and peaks are the rank summaries' ("ranks").
    assert [r["busy"] for r in doc["rank_steps"]["ranks"]] == [r["busy"] for r in doc["ranks"]]
    memory = _cli("memory", str(folder), "--json")
    assert memory.returncode == 0, memory.stderr
    mem = json.loads(memory.stdout)
    assert mem["heaviest_memory_rank"] == heavy
    assert [r["memory_peaks"] for r in mem["ranks"]] == [
        {f"cuda:{r}": PEAK_BYTES + (1 << 20 if r == 2 else 0)} for r in range(4)
    ]
    assert [r["memory_peak_bytes"] for r in mem["ranks"]] == [r["memory_peak_bytes"] for r in doc["ranks"]]
    table = _cli("inspect", str(folder))
    assert table.returncode == 0, table.stderr
    assert "stragglers: rank 1 slowest in 1 of 3 steps; worst ProfilerStep#2 on rank 1, 1.600 ms, +0.600 ms" in table.stdout


def test_compare_takes_folders_of_rank_traces_with_the_slowest_ranks_steps_and_each_ranks(tmp_path):
    """Without run.json the step times are the traces' profiled steps: the job's median is the
    slowest rank's step by step (as a distributed run.json counts it), each rank's its own."""
    a = write_rank_job(tmp_path / "a", 3, steps=3, slow={2: {1: 500, 2: 500}})  # slowest: 1.0, 1.5, 1.5 ms
    b = write_rank_job(tmp_path / "b", 3, steps=3, slow={0: {0: 200}})  # slowest: 1.2, 1.0, 1.0 ms
    proc = _cli("compare", str(a), str(b), "--json")
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert [r["median_ms"] for r in runs] == [1.5, 1.0]
    assert [(r["rank"], r["median_ms"]) for r in runs[0]["ranks"]] == [(0, 1.0), (1, 1.0), (2, 1.5)]
    table = _cli("compare", str(a), str(b))
    assert table.returncode == 0, table.stderr
    assert "1.50 profiled" in table.stdout and "rank 2" in table.stdout


def test_a_folder_of_many_rank_traces_is_named_by_where_and_how_many(window, tmp_path):
    """256 ranks listed every file name in the run controls and the details (half the left panel)."""
    from branchscope.profiling.trace.merge import load_traces
    from branchscope.widgets.details_panel import trace_summary_rows

    folder = write_rank_job(tmp_path / "job", 6, steps=2)
    assert window.open_trace_files([str(folder)]) == 1
    text = window.controls.shown_label.whole_text()
    assert text.startswith("opened from disk: 6 traces in job/ (rank-0.json … rank-5.json) — #1 ")
    files = dict(trace_summary_rows(load_traces(sorted(folder.glob("rank-*.json")))))["File"]
    assert files == "rank-0.json + … + rank-5.json (6 files)"
