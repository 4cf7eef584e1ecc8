"""The worker process: thread counts first, JSON-lines protocol, trace and run.json contents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope import profiling
from branchscope.profiling.run.steady import SETTLE_WINDOW
from tests.paths import MODELS, ROOT
from tests.run.slow_first_calls import write_slow_first_calls

pytestmark = pytest.mark.slow

RUN_FIELDS = {
    "mode", "interop", "intra", "device", "torch", "steps_ms", "median_ms", "unprofiled_median_ms",
    "unprofiled_steps", "unprofiled_steps_ms", "unprofiled_spread_ms", "branches", "max_abs_diff",
    "main_tid", "interop_tids", "intra_tids", "fx_error", "tracer", "tracer_errors", "complete",
    "warmup_steps", "warmup_steps_ms", "warmup_settled", "warmup_cap", "phase_seconds", "tracer_seconds",
    "plan_build_seconds", "plan_compile_seconds", "warnings",
}  # fmt: skip
#: run.json's "phase_seconds", in the order the worker runs them.
PHASES = ["start", "load", "forward", "discovery", "plan", "check", "warmup", "timing", "profile", "export"]
#: A run that does not run the model sequentially measures its branches for the prediction after the profile.
FORK_PHASES = [*PHASES[:-1], "prediction", "export"]


def _worker(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "branchscope.profiling.run.worker", *args, "--steps", "2", "--warmup", "1", "--out", str(out)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def twin_fork(tmp_path_factory):
    out = tmp_path_factory.mktemp("twin_fork")
    proc = _worker(out, "--demo", "twin-mm", "--mode", "fork", "--interop", "2", "--intra", "1")
    assert proc.returncode == 0, proc.stderr
    with open(out / "trace.json", encoding="utf-8") as f:
        trace = json.load(f)
    return out, proc, json.loads((out / "run.json").read_text()), trace


def test_protocol_lines_and_progress(twin_fork):
    out, proc, _, _ = twin_fork
    events = _events(proc.stdout)
    assert [e.get("phase", e["event"]) for e in events] == [
        "load", "warmup", "timing", "profile", "progress", "progress", "export", "finished"
    ]  # fmt: skip
    assert [(e["step"], e["of"]) for e in events if e["event"] == "progress"] == [(1, 2), (2, 2)]


def test_run_json_fields_and_thread_counts(twin_fork):
    out, _, run, _ = twin_fork
    assert RUN_FIELDS <= set(run)
    assert run["mode"] == "fork" and run["interop"] == 2 and run["intra"] == 1 and run["device"] == "cpu"
    assert run["threads_applied"] == {"interop": 2, "intra": 1}
    assert run["tracer"] == "torch.fx" and run["tracer_errors"] == {} and run["fx_error"] is None
    assert len(run["steps_ms"]) == 2 and run["median_ms"] > 0 and run["unprofiled_median_ms"] > 0
    # the timed phase: at least --steps steps, up to 20 unless 2 s of them passed first
    n = run["unprofiled_steps"]
    assert len(run["unprofiled_steps_ms"]) == n and 2 <= n <= 20
    assert n == 20 or sum(run["unprofiled_steps_ms"]) >= 2000.0
    low, q1, q3, high = run["unprofiled_spread_ms"]
    assert low == min(run["unprofiled_steps_ms"]) and high == max(run["unprofiled_steps_ms"])
    assert low <= q1 <= run["unprofiled_median_ms"] <= q3 <= high
    assert run["max_abs_diff"] <= 1e-5
    assert [b["name"] for b in run["branches"]] == ["Wy", "Wz"]
    assert run["main_tid"] == run["pid"]
    assert len(run["interop_tids"]) == 2 and run["main_tid"] not in run["interop_tids"]
    assert run["intra_tids"] == []  # one intra-op thread: no OpenMP workers
    assert (out / "plan.py").read_text().count("torch.jit.fork(") == 2
    # where the time went: every phase, discovery per tracer, the fork plan's build and TorchScript compile
    assert list(run["phase_seconds"]) == FORK_PHASES and all(s >= 0 for s in run["phase_seconds"].values())
    assert list(run["tracer_seconds"]) == ["torch.fx"]
    assert run["plan_build_seconds"] >= 0 and run["plan_compile_seconds"] >= 0
    # the warm-up: at least --warmup 1 step, and two windows of steps before it could settle
    assert run["warmup"] == 1 and run["warmup_steps"] == len(run["warmup_steps_ms"]) >= 2 * SETTLE_WINDOW
    assert (run["warmup_settled"], run["warmup_cap"]) in ((True, None), (False, "steps"), (False, "seconds"))
    assert isinstance(run["warnings"], list) and all(isinstance(w, str) for w in run["warnings"])


def test_trace_marks_steps_and_branches_on_the_right_threads(twin_fork):
    _, _, run, trace = twin_fork
    assert isinstance(trace["baseTimeNanoseconds"], int)
    bs = trace["branchscope"]
    assert bs["main_tid"] == run["main_tid"] and bs["interop_tids"] == run["interop_tids"]
    assert bs["intra_tids"] == run["intra_tids"]
    assert bs["mode"] == "fork" and bs["cores"] >= 1 and bs["branches"] == run["branches"]
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = {e["name"]: e["tid"] for e in events if e["name"].startswith("step ")}
    assert steps == {"step 1": run["main_tid"], "step 2": run["main_tid"]}
    branch_tids = {e["tid"] for e in events if e["name"] in ("branch: Wy", "branch: Wz")}
    assert branch_tids and branch_tids <= set(run["interop_tids"])


def test_trace_is_written_once_uncompressed_with_its_events_last_for_the_runner(twin_fork):
    out, _, run, trace = twin_fork
    assert not (out / "trace.json.gz").exists()  # the runner compresses it, adding the CPU samples
    assert list(trace)[-1] == "traceEvents" and (out / "trace.json").read_bytes().endswith(b"]}")
    clock = run["trace_clock"]
    assert clock["base_time_ns"] == trace["baseTimeNanoseconds"]
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert clock["first_us"] <= min(s for s, _ in spans) and clock["last_us"] >= max(e for _, e in spans)
    assert not [p.name for p in out.iterdir() if p.name.endswith((".tmp", ".raw.json"))]


def test_trace_reader_sees_the_inter_op_lanes(twin_fork):
    out, _, run, _ = twin_fork
    trace = profiling.load_trace(out / "trace.json")
    roles = {lane.tid: lane.role for lane in trace.lanes if lane.kind == "cpu"}
    assert roles[run["main_tid"]] == "main"
    # both pool threads ran a branch, so both have lanes, and no other lane is called a pool thread
    assert {tid for tid, role in roles.items() if role == "interop"} == set(run["interop_tids"])


def test_model_prints_do_not_break_the_protocol_and_errors_carry_the_traceback(tmp_path):
    proc = _worker(
        tmp_path, "--model", str(MODELS / "raises_in_forward.py"), "--mode", "sequential", "--interop", "1", "--intra", "1"
    )
    assert proc.returncode == 2
    load, error = _events(proc.stdout)  # only JSON on stdout; the model's print went to stderr
    assert load == {"event": "phase", "phase": "load"}
    assert error["event"] == "error" and "ValueError" in error["message"]
    assert "raises_in_forward.py" in error["traceback"] and "check_shape" in error["traceback"]
    assert "model output on stdout" in proc.stderr
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("mode", ["sequential", "fork"])
def test_model_raising_in_forward_is_a_model_error_in_every_mode(tmp_path, mode):
    proc = _worker(tmp_path, "--model", str(MODELS / "raises_in_forward.py"), "--mode", mode, "--interop", "2", "--intra", "1")
    assert proc.returncode == 2
    error = _events(proc.stdout)[-1]
    assert error["event"] == "error" and error["exit_code"] == 2
    assert error["message"].startswith("the model raised ValueError while running its forward: expected 4 dims")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_worker_whose_runner_is_already_gone_exits_before_doing_anything():
    # No arguments at all: a worker that went on would fail in argparse (exit 2, usage on stderr).
    cmd = [sys.executable, "-m", "branchscope.profiling.run.worker"]
    env = dict(os.environ, BRANCHSCOPE_RUNNER_PID=str(os.getpid() + 1_000_000))  # not its parent
    orphan = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (orphan.returncode, orphan.stdout, orphan.stderr) == (1, "", "")
    env["BRANCHSCOPE_RUNNER_PID"] = str(os.getpid())  # its real parent: it goes on to argparse
    adopted = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert adopted.returncode == 2 and "usage:" in adopted.stderr


def test_worker_rejects_a_cuda_device_it_cannot_use_with_exit_3(tmp_path):
    proc = _worker(tmp_path, "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1",
                   "--device", "cuda:64")  # fmt: skip
    assert proc.returncode == 3
    error = _events(proc.stdout)[-1]
    assert error["event"] == "error" and error["message"].startswith("--device cuda:64")
    assert "no CUDA device" in error["message"] or "torch sees only" in error["message"]


class _FakeCuda:
    """torch.cuda as resolve_device sees it, on a machine with `count` GPUs (none here)."""

    def __init__(self, count: int) -> None:
        self.count, self.current = count, 0

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current

    def set_device(self, index: int) -> None:
        self.current = index


@pytest.mark.parametrize(
    ("count", "requested", "resolved"),
    [(0, "auto", "cpu"), (0, "cpu", "cpu"), (2, "auto", "cuda:0"), (2, "cuda", "cuda:0"), (2, "cuda:1", "cuda:1")],
)
def test_resolved_cuda_device_becomes_the_current_one(count, requested, resolved):
    from types import SimpleNamespace

    from branchscope.profiling.run.model_setup import resolve_device

    fake = SimpleNamespace(cuda=_FakeCuda(count))
    assert resolve_device(fake, requested) == resolved
    if resolved.startswith("cuda:"):  # synchronize(), get_device_name() and friends then use it
        assert fake.cuda.current == int(resolved[5:])


@pytest.mark.parametrize(
    ("count", "requested", "code", "message"),
    [
        (0, "cuda", 3, "--device cuda needs CUDA, and torch sees no CUDA device here"),
        (1, "cuda:1", 3, "--device cuda:1: torch sees only 1 CUDA device(s) here (cuda:0 to cuda:0)"),
        (1, "gpu", 2, "--device 'gpu' is not one of: auto, cpu, cuda, cuda:N"),
    ],
)
def test_unusable_devices_are_refused_with_the_runners_exit_codes(count, requested, code, message):
    from types import SimpleNamespace

    from branchscope.profiling.run.model_setup import resolve_device
    from branchscope.profiling.run.protocol import RunFailure

    with pytest.raises(RunFailure) as info:
        resolve_device(SimpleNamespace(cuda=_FakeCuda(count)), requested)
    assert (info.value.exit_code, str(info.value)) == (code, message)


class _Clock:
    """perf_counter for timed_steps: each step takes `step_s`."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s, self.calls = 0.0, step_s, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.step_s
        self.calls += 1


@pytest.mark.parametrize(
    ("step_s", "steps", "timed"),
    [
        (0.001, 3, 20),  # fast steps: 20 of them, well inside 2 s
        (0.5, 3, 4),  # slow steps: 2 s passed after 4, past the 3 asked for
        (0.5, 1, 4),
        (1.5, 1, 2),  # never fewer than 2 s' worth once under 20 steps
        (1.5, 6, 6),  # never fewer than --steps
        (0.001, 30, 30),  # more than 20 asked for: all of them
        (0.001, 500, 200),  # at most 200
    ],
)
def test_timed_phase_runs_at_least_k_and_up_to_20_steps_or_2_seconds(step_s, steps, timed):
    from branchscope.profiling.run.profiled_steps import timed_steps

    clock = _Clock(step_s)
    times = timed_steps(clock.step, steps, clock)
    assert len(times) == clock.calls == timed
    assert times == [pytest.approx(step_s * 1000.0)] * timed


@pytest.mark.parametrize(("step_s", "steps"), [(0.001, 3), (1.5, 1), (0.001, 30)])
def test_ranks_time_exactly_the_steps_asked_for_whatever_the_clock_says(step_s, steps):
    """Ranks step together (collectives): a count that depended on each rank's clock would hang them."""
    from branchscope.profiling.run.profiled_steps import timed_steps

    clock = _Clock(step_s)
    assert len(timed_steps(clock.step, steps, clock, budget_s=0.0)) == clock.calls == steps


def test_without_proc_the_pool_is_the_threads_the_profiler_names_ptthreadpool():
    from branchscope.profiling.run.run_facts import pool_tids_from_trace

    meta = [{"ph": "M", "name": "thread_name", "tid": tid, "args": {"name": name}}
            for tid, name in ((1, "pt_main_thread"), (7, "PTThreadPool"), (5, "PTThreadPool"), ("x", "PTThreadPool"))]  # fmt: skip
    ops = [{"ph": "X", "name": "PTThreadPool", "tid": 9}]
    assert pool_tids_from_trace({"traceEvents": meta + ops}) == [5, 7]


def test_run_json_says_why_no_tracer_found_a_graph(tmp_path):
    proc = _worker(tmp_path, "--model", str(MODELS / "data_dependent.py"), "--mode", "sequential", "--interop", "1", "--intra", "1")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["tracer"] is None and run["branches"] == []
    assert list(run["tracer_errors"]) == ["torch.fx", "torch.export (non-strict)", "torch.export (strict)"]
    assert list(run["tracer_seconds"]) == list(run["tracer_errors"])  # each tracer tried, timed
    assert "control flow" in run["tracer_errors"]["torch.fx"]
    assert run["fx_error"].startswith("torch.fx could not trace DataDependent") and "nor could torch.export" in run["fx_error"]
    assert "def forward(" not in proc.stderr and "symbolic_shapes" not in proc.stderr  # export's partial graph, logs


def test_the_warm_up_outlasts_a_model_slow_for_its_first_calls(tmp_path):
    slow_calls = 12
    # its calls before the warm-up: its own forward, torch.fx's trace and the plan's output check
    model = write_slow_first_calls(tmp_path / "slow_first_calls.py", slow_calls)
    out = tmp_path / "out"
    proc = _worker(out, "--model", str(model), "--mode", "sequential", "--interop", "1", "--intra", "1")  # --warmup 1
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    # 1 warm-up step asked for; it went on past every slow call, until the quick steps settled
    assert run["warmup"] == 1 and run["warmup_steps"] >= slow_calls
    assert run["warmup_settled"] is True and run["warmup_cap"] is None
    assert len(run["warmup_steps_ms"]) == run["warmup_steps"]
    assert list(run["phase_seconds"]) == PHASES and list(run["tracer_seconds"]) == ["torch.fx"]
    assert run["plan_build_seconds"] is None and run["plan_compile_seconds"] is None  # sequential: the model itself
    assert isinstance(run["warnings"], list)


def test_warmup_zero_runs_no_warm_up_step(tmp_path):
    cmd = [sys.executable, "-m", "branchscope.profiling.run.worker", "--demo", "twin-mm", "--mode", "sequential",
           "--interop", "1", "--intra", "1", "--steps", "1", "--warmup", "0", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["warmup_steps"], run["warmup_steps_ms"], run["warmup_settled"], run["warmup_cap"]) == (0, [], None, None)
    assert not any(w.startswith("warm-up") for w in run["warnings"])


def _check_prediction(pred: dict, branches: list[dict]) -> None:
    """A prediction whose numbers hold together: bounds within [1, k], regions those of the branches,
    each region's work the sum of its branches', its longest branch among them."""
    assert set(pred["by_threads"]) >= {"2", "4"}
    for k, bound in pred["by_threads"].items():
        assert 1.0 <= bound <= int(k)
    assert [r["region"] for r in pred["regions"]] == sorted({b["region"] for b in branches})
    for r in pred["regions"]:
        names = [b["name"] for b in branches if b["region"] == r["region"]]
        assert r["branches"] == len(names) and r["longest_branch"] in names
        assert 0 < r["longest_branch_ms"] <= r["work_ms"]
        for k, bound in r["bound_by_threads"].items():
            assert 1.0 <= bound <= min(int(k), len(names)) + 1e-9
    assert 0 <= pred["serial_ms"] <= pred["step_ms"]


def test_a_fork_run_predicts_from_sequential_steps_it_measured_itself(twin_fork):
    _, _, run, trace = twin_fork
    pred = run["prediction"]
    assert pred["from"] == "5 unprofiled sequential steps measured in the worker" and pred["steps"] == 5
    _check_prediction(pred, run["branches"])
    for k, (lo, hi) in pred["by_threads_ci95"].items():  # 5 steps: enough for the bound's interval
        assert 1.0 <= lo <= hi <= int(k)
    assert pred["unmeasured"] is None
    assert trace["branchscope"]["prediction"] == pred  # a bare trace file has it too
    info = profiling.load_trace(twin_fork[0] / "trace.json").run_info
    assert info is not None and info.prediction is not None and info.prediction.by_threads == pred["by_threads"]


def test_a_sequential_run_predicts_from_its_own_profiled_steps(tmp_path):
    proc = _worker(tmp_path, "--demo", "inception", "--mode", "sequential", "--interop", "1", "--intra", "1")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run.json").read_text())
    pred = run["prediction"]
    assert pred["from"] == "this run's 2 profiled steps" and pred["steps"] == 2
    assert pred["by_threads_ci95"] is None  # too few steps for an interval
    assert "prediction" not in run["phase_seconds"]  # nothing measured beyond the run's own steps
    _check_prediction(pred, run["branches"])
    assert len(pred["regions"]) == 1 and pred["regions"][0]["branches"] == 4
