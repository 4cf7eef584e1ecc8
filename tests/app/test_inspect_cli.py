"""`branchscope inspect`: the JSON shape fixed by the issue, and the README facts of public traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders.public_traces import FACTS
from tests.paths import ROOT


def _inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchscope.app.cli", "inspect", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "name",
    [
        "hta_gpu_memory_2streams.json.gz",
        "kineto_legacy_resnet50_v100.pt.trace.json.gz",
        "hta_two_ranks/rank-0.json.gz",
    ],
)
def test_inspect_json_shape_and_facts(shared_traces: Path, name: str) -> None:
    proc = _inspect(str(shared_traces / name), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc)[:4] == ["events", "lanes", "memory", "span_us"] or list(doc)[:4] == [
        "events",
        "span_us",
        "lanes",
        "memory",
    ]
    events, cpu, gpu = FACTS[name]
    assert doc["events"] == events and isinstance(doc["span_us"], float) and doc["span_us"] > 0
    for lane in doc["lanes"]:
        assert set(lane) >= {"kind", "pid", "tid", "name", "events", "busy_us"}
        assert lane["kind"] in ("cpu", "gpu")
        assert all(isinstance(lane[k], int) for k in ("pid", "tid", "events"))
        assert isinstance(lane["busy_us"], float) and 0 <= lane["busy_us"] <= doc["span_us"] + 1e-6
    assert sorted(ln["events"] for ln in doc["lanes"] if ln["kind"] == "cpu") == cpu
    assert sorted(ln["events"] for ln in doc["lanes"] if ln["kind"] == "gpu") == gpu
    for m in doc["memory"]:
        assert set(m) >= {"device", "events", "peak_bytes"} and isinstance(m["peak_bytes"], int)


def test_inspect_memory_peak_json(shared_traces: Path) -> None:
    doc = json.loads(_inspect(str(shared_traces / "hta_gpu_memory_2streams.json.gz"), "--json").stdout)
    assert {"device": "cuda:1", "events": 26770, "peak_bytes": 6_629_508_096} in doc["memory"]


def test_inspect_gpu_lane_tid_is_stream(shared_traces: Path) -> None:
    doc = json.loads(_inspect(str(shared_traces / "hta_event_sync_multi_stream.json.gz"), "--json").stdout)
    assert sorted(ln["tid"] for ln in doc["lanes"] if ln["kind"] == "gpu") == [-1, 20, 24, 28]


def test_inspect_table_is_readable(shared_traces: Path) -> None:
    proc = _inspect(str(shared_traces / "hta_cpu_only.pt.trace.json.gz"))
    assert proc.returncode == 0
    assert "15 events" in proc.stdout and "pt_main_thread" in proc.stdout and "rank 34" in proc.stdout


@pytest.mark.parametrize("target", ["missing.json", "."])
def test_inspect_errors_exit_2(tmp_path: Path, target: str) -> None:
    proc = _inspect(str(tmp_path / target))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_inspect_reports_the_ranks_of_one_job_per_rank(shared_traces: Path) -> None:
    ranks = [str(shared_traces / "hta_two_ranks" / f"rank-{r}.json.gz") for r in (0, 1)]
    doc = json.loads(_inspect(*ranks, "--json").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert [r["events"] for r in doc["ranks"]] == [4810, 4675]  # the README's counts
    for r in doc["ranks"]:
        assert r["busy_of"] == "GPU" and 0 < r["busy"] < 1 and r["step_us"] > 0
    assert {ln["rank"] for ln in doc["lanes"]} == {0, 1}
    table = _inspect(*ranks).stdout
    assert "rank  host" in table and "4,810" in table and "4,675" in table


def _rank_trace(path: Path, rank: int, world: int, ts: int) -> str:
    events = [{"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": ts, "dur": 100}]
    path.write_text(
        json.dumps({"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events})
    )
    return str(path)


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        ((1, 4, 0), "different distributedInfo"),
        ((0, 2, 0), "are both rank 0"),
        ((1, 2, 10_000_000), "clocks do not overlap"),
    ],
)
def test_inspect_refuses_traces_of_different_jobs_in_one_line(tmp_path: Path, second, reason) -> None:
    a = _rank_trace(tmp_path / "a.json", 0, 2, 0)
    b = _rank_trace(tmp_path / "b.json", *second)
    proc = _inspect(a, b)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and reason in lines[0], lines


def test_inspect_refuses_a_trace_that_is_no_rank(shared_traces: Path) -> None:
    proc = _inspect(
        str(shared_traces / "hta_two_ranks" / "rank-0.json.gz"),
        str(shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz"),
    )
    assert proc.returncode == 2 and "kineto_legacy" in proc.stderr and "no distributedInfo" in proc.stderr


def test_inspect_merges_ranks_whose_clocks_overlap(tmp_path: Path) -> None:
    proc = _inspect(_rank_trace(tmp_path / "a.json", 0, 2, 0), _rank_trace(tmp_path / "b.json", 1, 2, 50))
    assert proc.returncode == 0, proc.stderr
    assert [
        r["rank"]
        for r in json.loads(_inspect(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json").stdout)[
            "ranks"
        ]
    ] == [0, 1]


def test_inspect_says_the_gil_of_a_threads_run(tmp_path: Path) -> None:
    from tests.builders.runs import write_small_trace

    path = write_small_trace(tmp_path / "threads.json", "threads")
    doc = json.loads(_inspect(str(path), "--json").stdout)
    assert doc["gil"]["python"] == "3.11.7" and doc["gil"]["gil"] is True
    assert doc["gil"]["branch_threads"]["calls"] == 4
    assert doc["gil"]["branch_threads"]["gil_wait"] == pytest.approx(0.4)
    assert [(w["tid"], round(w["wait_us"], 3)) for w in doc["gil_wait"]] == [(11, 640.0), (12, 640.0)]
    table = _inspect(str(path)).stdout
    assert "branch threads: 55% computing, 5% waiting for a core, 40% waiting for the GIL" in table
    assert "thread 11 (BSThreadPool): 0.640 ms waiting for the GIL (CPU samples)" in table
    free = write_small_trace(tmp_path / "free.json", "threads", gil=False)
    doc = json.loads(_inspect(str(free), "--json").stdout)
    assert doc["gil"]["line"] == "free-threaded Python 3.13.1: no GIL" and doc["gil_wait"] == []
    assert "free-threaded Python 3.13.1: no GIL" in _inspect(str(free)).stdout
    fork = json.loads(_inspect(str(write_small_trace(tmp_path / "fork.json", "fork")), "--json").stdout)
    assert fork["gil"] is None and fork["gil_wait"] == []
