"""The worker process: thread counts first, JSON-lines protocol, trace and run.json contents."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import profiling

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "fixtures" / "models"

pytestmark = pytest.mark.slow

RUN_FIELDS = {
    "mode", "interop", "intra", "device", "torch", "steps_ms", "median_ms", "unprofiled_median_ms",
    "branches", "max_abs_diff", "main_tid", "interop_tids", "fx_error", "complete",
}  # fmt: skip


def _worker(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "profiling.worker", *args, "--steps", "2", "--warmup", "1", "--out", str(out)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def twin_fork(tmp_path_factory):
    out = tmp_path_factory.mktemp("twin_fork")
    proc = _worker(out, "--demo", "twin-mm", "--mode", "fork", "--interop", "2", "--intra", "1")
    assert proc.returncode == 0, proc.stderr
    with gzip.open(out / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    return out, proc, json.loads((out / "run.json").read_text()), trace


def test_protocol_lines_and_progress(twin_fork):
    out, proc, _, _ = twin_fork
    events = _events(proc.stdout)
    assert [e["event"] for e in events] == ["phase", "progress", "progress", "phase", "finished"]
    assert [(e["step"], e["of"]) for e in events if e["event"] == "progress"] == [(1, 2), (2, 2)]


def test_run_json_fields_and_thread_counts(twin_fork):
    out, _, run, _ = twin_fork
    assert RUN_FIELDS <= set(run)
    assert run["mode"] == "fork" and run["interop"] == 2 and run["intra"] == 1 and run["device"] == "cpu"
    assert run["threads_applied"] == {"interop": 2, "intra": 1}
    assert len(run["steps_ms"]) == 2 and run["median_ms"] > 0 and run["unprofiled_median_ms"] > 0
    assert run["max_abs_diff"] <= 1e-5
    assert [b["name"] for b in run["branches"]] == ["Wy", "Wz"]
    assert run["main_tid"] == run["pid"]
    assert len(run["interop_tids"]) == 2 and run["main_tid"] not in run["interop_tids"]
    assert (out / "plan.py").read_text().count("torch.jit.fork(") == 2


def test_trace_marks_steps_and_branches_on_the_right_threads(twin_fork):
    _, _, run, trace = twin_fork
    assert isinstance(trace["baseTimeNanoseconds"], int)
    bs = trace["branchscope"]
    assert bs["main_tid"] == run["main_tid"] and bs["interop_tids"] == run["interop_tids"]
    assert bs["mode"] == "fork" and bs["cores"] >= 1 and bs["branches"] == run["branches"]
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = {e["name"]: e["tid"] for e in events if e["name"].startswith("step ")}
    assert steps == {"step 1": run["main_tid"], "step 2": run["main_tid"]}
    branch_tids = {e["tid"] for e in events if e["name"] in ("branch: Wy", "branch: Wz")}
    assert branch_tids and branch_tids <= set(run["interop_tids"])


def test_trace_reader_sees_the_inter_op_lanes(twin_fork):
    out, _, run, _ = twin_fork
    trace = profiling.load_trace(out / "trace.json.gz")
    roles = {lane.tid: lane.role for lane in trace.lanes if lane.kind == "cpu"}
    assert roles[run["main_tid"]] == "main"
    assert {tid for tid, role in roles.items() if role == "interop"} <= set(run["interop_tids"])
    assert any(role == "interop" for role in roles.values())


def test_model_prints_do_not_break_the_protocol_and_errors_carry_the_traceback(tmp_path):
    proc = _worker(
        tmp_path, "--model", str(MODELS / "raises_in_forward.py"), "--mode", "sequential", "--interop", "1", "--intra", "1"
    )
    assert proc.returncode == 2
    (error,) = _events(proc.stdout)  # only JSON on stdout; the model's print went to stderr
    assert error["event"] == "error" and "ValueError" in error["message"]
    assert "raises_in_forward.py" in error["traceback"] and "check_shape" in error["traceback"]
    assert "model output on stdout" in proc.stderr
    assert not (tmp_path / "run.json").exists()
