"""`branchscope inspect`: the JSON shape fixed by the issue, and the README facts of public traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_trace_reader import FACTS

ROOT = Path(__file__).resolve().parent.parent


def _inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchscope.app.cli", "inspect", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "name", ["hta_gpu_memory_2streams.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz", "hta_two_ranks/rank-0.json.gz"]
)
def test_inspect_json_shape_and_facts(shared_traces: Path, name: str) -> None:
    proc = _inspect(str(shared_traces / name), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc)[:4] == ["events", "lanes", "memory", "span_us"] or list(doc)[:4] == [
        "events", "span_us", "lanes", "memory"
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
