"""threads mode through the worker: every CPU demo gives the model's outputs with its branches on the
pool's threads (the run's inter-op threads, role "interop" in the trace), the GIL figures of each
pool thread, a free-threaded interpreter's run without them, and fork mode's exit 3 naming threads
mode when TorchScript is disabled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope import profiling
from branchscope.profiling.run.branch_pool import POOL_THREAD_NAME
from branchscope.profiling.trace.run_info import branch_name
from tests.paths import MODELS, ROOT

pytestmark = pytest.mark.slow

CPU_DEMOS = ["attention-qkv", "inception", "lstm-ensemble", "small-ops", "twin-mm", "two-towers"]


def _worker(out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "branchscope.profiling.run.worker", *args, "--out", str(out)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _error(proc: subprocess.CompletedProcess[str]) -> dict:
    (event,) = [json.loads(line) for line in proc.stdout.splitlines() if '"error"' in line]
    return event


@pytest.mark.parametrize("demo", CPU_DEMOS)
def test_threads_runs_every_cpu_demo_on_its_pool(demo, tmp_path):
    proc = _worker(tmp_path, "--demo", demo, "--mode", "threads", "--interop", "2", "--intra", "1", "--steps", "2", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["mode"] == "threads" and run["max_abs_diff"] <= 1e-5
    pool = run["interop_tids"]
    assert len(pool) == 2 and run["main_tid"] not in pool
    assert [run["threads"][str(tid)] for tid in pool] == [POOL_THREAD_NAME] * 2
    assert run["gil"] is True and run["python"] and run["python_executable"]
    assert [t["tid"] for t in run["branch_threads"]] == pool
    assert "_threads.submit(" in (tmp_path / "plan.py").read_text()

    raw = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    named = [(e["tid"], e["args"]["name"]) for e in raw if e.get("ph") == "M" and e.get("name") == "thread_name"]
    assert len(named) == len({tid for tid, _ in named})  # one name a thread: the OS name it has
    pool_names = [(tid, name) for tid, name in named if tid in pool]  # the pool threads that ran a branch
    assert pool_names and all(name == f"thread {tid} ({POOL_THREAD_NAME})" for tid, name in pool_names)

    trace = profiling.load_trace(tmp_path / "trace.json")
    roles = {lane.tid: lane.role for lane in trace.lanes if lane.kind == "cpu"}
    assert roles[run["main_tid"]] == "main"
    branch_tids = {
        int(trace.lanes[trace.lane[i]].tid) for i in range(len(trace.name_id)) if branch_name(trace.event_name(i))
    }
    assert branch_tids and branch_tids <= set(pool)  # every branch ran on a pool thread...
    assert {roles[tid] for tid in branch_tids} == {"interop"}  # ...which the trace calls the inter-op pool
    assert trace.run_info.gil is True and [t.tid for t in trace.run_info.branch_threads] == pool


def test_the_gil_figures_of_a_demo_of_small_ops(tmp_path):
    proc = _worker(tmp_path, "--demo", "small-ops", "--mode", "threads", "--interop", "2", "--intra", "1", "--steps", "3", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    rows = run["branch_threads"]
    assert sum(t["calls"] for t in rows) == 2 * 3  # two branches a step, each taken by a pool thread
    for t in rows:
        parts = t["cpu_ms"] + t["core_wait_ms"] + t["gil_wait_ms"]
        assert t["wall_ms"] >= 0 and parts >= t["wall_ms"] - 0.01 * t["wall_ms"] - 0.01  # nothing unaccounted
        assert t["cpu_ms"] + t["core_wait_ms"] <= t["wall_ms"] + 0.02 * t["wall_ms"] + 0.01  # nothing counted twice
    # Each thread's own CPU clock: sub-millisecond branches read their CPU time, not a tick's worth or none.
    # (How much of it is the GIL depends on whether the two branches overlap, which GIL hand-overs
    # decide: often the thread that ran one branch takes the other before the second thread has the GIL.)
    assert sum(t["cpu_ms"] for t in rows) > 0


def test_a_free_threaded_interpreter_writes_no_gil_figures(tmp_path):
    proc = _worker(tmp_path, "--model", str(MODELS / "claims_free_threaded.py"), "--mode", "threads",
                   "--interop", "2", "--intra", "1", "--steps", "1", "--warmup", "0")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["gil"] is False and run["branch_threads"] is None
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["branchscope"]["gil"] is False and "branch_threads" not in trace["branchscope"]


def test_fork_without_torchscript_exits_3_naming_threads_mode_which_still_runs(tmp_path):
    env = {**os.environ, "PYTORCH_JIT": "0"}  # TorchScript disabled: torch.jit.script gives the function back
    proc = _worker(tmp_path / "fork", "--demo", "twin-mm", "--mode", "fork", "--interop", "2", "--intra", "1",
                   "--steps", "1", "--warmup", "0", env=env)  # fmt: skip
    assert proc.returncode == 3
    message = _error(proc)["message"]
    assert message.startswith("fork mode needs TorchScript, and TorchScript is disabled") and "--mode threads" in message
    assert not (tmp_path / "fork" / "run.json").exists()
    proc = _worker(tmp_path / "threads", "--demo", "twin-mm", "--mode", "threads", "--interop", "2", "--intra", "1",
                   "--steps", "1", "--warmup", "0", env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "threads" / "run.json").read_text())["max_abs_diff"] <= 1e-5
