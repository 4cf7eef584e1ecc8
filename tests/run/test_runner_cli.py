"""`branchscope demos` / `branchscope profile` and the runner engine: exit codes, messages, cleanup."""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from branchscope import profiling
from branchscope.app import cmd_profile
from branchscope.profiling.trace.records import RunRecord
from tests.paths import MODELS, ROOT


def cli(argv: list[str]) -> int:
    """The sub-commands as app/cli.py wires them: register() on a subparsers action, then handler(args)."""
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_profile.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def profile(out: Path, *args: str) -> list[str]:
    return ["profile", *args, "--steps", "2", "--warmup", "1", "--out", str(out)]


def _last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


def _no_children_left() -> None:
    alive = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_demos_prints_one_line_per_demo(capsys):
    assert cli(["demos"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == [
        "attention-qkv", "dataparallel-balanced", "dataparallel-imbalance", "ddp-gather-loss", "ddp-local-loss",
        "inception", "lstm-ensemble", "small-ops", "twin-mm", "two-towers",
    ]  # fmt: skip
    assert "needs 2 CUDA devices" in lines[1] and "needs 2 CUDA devices" in lines[2]


def test_cli_and_runner_modules_do_not_import_torch():
    code = (
        "import sys, app.cmd_profile, branchscope.profiling.run.runner, branchscope.profiling.run.cpu_sampler;"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--demo", "twin-mm", "--mode", "fork", "--interop", "0", "--intra", "1"], "--interop must be at least 1"),
        (["--demo", "nope", "--mode", "fork", "--interop", "1", "--intra", "1"], "no demo named 'nope'"),
        (["--model", "missing.py", "--mode", "fork", "--interop", "1", "--intra", "1"], "does not exist"),
        (["--demo", "twin-mm", "--mode", "fork", "--interop", "1", "--intra", "1", "--device", "gpu"],
         "--device 'gpu' is not one of: auto, cpu, cuda, cuda:N"),
        (["--demo", "twin-mm", "--mode", "fork", "--interop", "1", "--intra", "1", "--device", "cuda:x"],
         "--device 'cuda:x' is not one of"),
    ],
)
def test_bad_arguments_exit_2_before_any_worker(tmp_path, capsys, args, message):
    assert cli(profile(tmp_path, *args)) == 2
    err = capsys.readouterr().err
    assert _last_line(err).startswith("error: ") and message in _last_line(err)
    assert "Traceback" not in err
    assert not (tmp_path / "worker.log").exists()


@pytest.mark.slow
def test_profile_writes_trace_with_cpu_samples_and_prints_summary(tmp_path, capsys):
    assert cli(profile(tmp_path, "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1")) == 0
    out = capsys.readouterr().out
    assert "sequential mode, 1 inter-op × 1 intra-op" in out and "median" in out and "Wy" in out
    run = json.loads((tmp_path / "run.json").read_text())
    # where the time went, in one line, and each warning (if the timings were not steady) after the summary
    (phases,) = [line for line in out.splitlines() if line.startswith("phases (s): ")]
    assert phases.startswith("phases (s): start ") and f"warmup {run['phase_seconds']['warmup']:.2f} (" in phases
    assert [line.removeprefix("warning: ") for line in out.splitlines() if line.startswith("warning: ")] == run["warnings"]
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    samples = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample"]
    main = [e for e in samples if e["tid"] == run["main_tid"]]
    assert main and all(e["ph"] == "C" and e["pid"] == run["pid"] for e in samples)
    assert main[0]["name"].startswith(f"thread {run['main_tid']} (")
    assert all(0.0 <= e["args"]["cpu_pct"] <= 100.0 for e in samples)
    assert trace["branchscope"]["main_tid"] == run["main_tid"]
    # Written once by the runner from the worker's uncompressed trace, which is gone; the reader agrees.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "trace.json.gz", "worker.log"]
    loaded = profiling.load_trace(tmp_path / "trace.json.gz")
    tracks = [c for c in loaded.counters if c.cat == "cpu_sample" and c.key == "cpu_pct" and c.tid == run["main_tid"]]
    assert len(tracks) == 1 and len(tracks[0].ts_ns) == len(main)
    assert loaded.metadata["branchscope"]["main_tid"] == run["main_tid"]
    _no_children_left()


@pytest.mark.slow
def test_missing_build_model_exits_2_naming_it(tmp_path, capsys):
    code = cli(profile(tmp_path, "--model", str(MODELS / "no_build_model.py"), "--mode", "sequential", "--interop", "1", "--intra", "1"))
    assert code == 2
    err = capsys.readouterr().err
    assert _last_line(err) == (
        "error: no_build_model.py defines no build_model(); a model file needs build_model() and example_inputs()"
    )
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sequential", "fork"])
def test_model_raising_exits_2_with_its_traceback_above_the_error(tmp_path, capsys, mode):
    # In fork mode too: the model's own error, not "fork mode needs the graph" nor an fx error.
    code = cli(profile(tmp_path, "--model", str(MODELS / "raises_in_forward.py"), "--mode", mode, "--interop", "2", "--intra", "1"))
    assert code == 2
    err = capsys.readouterr().err
    lines = err.rstrip("\n").splitlines()
    assert lines[-1] == "error: the model raised ValueError while running its forward: expected 4 dims, got 2 (raised by the test model)"
    assert lines[0] == "Traceback (most recent call last):"
    assert any("raises_in_forward.py" in line and "check_shape" in line for line in lines)
    assert not any("profiling/" in line for line in lines[:-1])  # no branchscope frames


@pytest.mark.slow
@pytest.mark.parametrize("model", ["exits_in_build.py", "exits_in_forward.py"])
def test_model_calling_sys_exit_is_a_model_error_exit_2(tmp_path, capsys, model):
    code = cli(profile(tmp_path, "--model", str(MODELS / model), "--mode", "sequential", "--interop", "1", "--intra", "1"))
    assert code == 2
    err = capsys.readouterr().err
    assert _last_line(err).startswith("error: ") and "sys.exit(" in _last_line(err)
    assert model in err  # the model's traceback, above the error line
    assert not (tmp_path / "run.json").exists()
    _no_children_left()


@pytest.mark.slow
def test_cuda_device_that_cannot_be_used_exits_3(tmp_path, capsys):
    # No CUDA here, or fewer than 65 devices: either way the mode cannot run on this machine.
    args = profile(tmp_path, "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1")
    assert cli([*args, "--device", "cuda:64"]) == 3
    err = capsys.readouterr().err
    assert _last_line(err).startswith("error: --device cuda:64") and "Traceback" not in err


@pytest.mark.slow
def test_streams_without_cuda_exits_3(tmp_path, capsys):
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine may have CUDA")
    assert cli(profile(tmp_path, "--demo", "twin-mm", "--mode", "streams", "--interop", "1", "--intra", "1")) == 3
    assert _last_line(capsys.readouterr().err).startswith("error: multi-stream needs CUDA")


@pytest.mark.slow
def test_fork_without_branches_exits_3_saying_why(tmp_path, capsys):
    assert cli(profile(tmp_path, "--model", str(MODELS / "no_branches.py"), "--mode", "fork", "--interop", "2", "--intra", "1")) == 3
    assert "found none" in _last_line(capsys.readouterr().err)


@pytest.mark.slow
def test_worker_killed_by_a_signal_exits_4_naming_it(tmp_path, capsys):
    assert cli(profile(tmp_path, "--model", str(MODELS / "segfault.py"), "--mode", "sequential", "--interop", "1", "--intra", "1")) == 4
    err = capsys.readouterr().err
    assert "SIGSEGV" in _last_line(err) and _last_line(err).startswith("error: ")
    assert "segfault.py" in err  # the crash report (faulthandler) names the model's line
    _no_children_left()


@pytest.mark.slow
def test_timeout_exits_4_and_leaves_nothing_running(tmp_path, capsys, monkeypatch):
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("BRANCHSCOPE_TEST_MARKER", marker)
    args = profile(tmp_path, "--model", str(MODELS / "hangs.py"), "--mode", "sequential", "--interop", "1", "--intra", "1")
    assert cli([*args, "--timeout", "5"]) == 4
    assert "--timeout 5 s" in _last_line(capsys.readouterr().err)
    _no_children_left()
    leftovers = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            leftovers.append(p.pid)
    assert leftovers == []  # the model's own child process was killed with the worker's group


@pytest.mark.slow
def test_runner_jsonl_for_the_gui(tmp_path):
    cmd = [sys.executable, "-m", "branchscope.profiling.run.runner", "--demo", "twin-mm", "--mode", "fork", "--interop", "2",
           "--intra", "1", "--steps", "3", "--warmup", "1", "--out", str(tmp_path), "--jsonl"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    phases = [{"event": "phase", "phase": p} for p in ("load", "warmup", "timing", "profile")]
    progress = [{"event": "progress", "step": i, "of": 3} for i in (1, 2, 3)]
    assert events[:8] == [*phases, *progress, {"event": "phase", "phase": "export"}]
    assert events[8]["event"] == "done" and events[8]["out"] == str(tmp_path)
    assert events[8]["run"]["mode"] == "fork" and events[8]["run"]["max_abs_diff"] <= 1e-5
    assert len(events) == 9


@pytest.mark.slow
def test_runner_jsonl_error_line(tmp_path):
    cmd = [sys.executable, "-m", "branchscope.profiling.run.runner", "--model", str(MODELS / "no_build_model.py"), "--mode",
           "sequential", "--interop", "1", "--intra", "1", "--out", str(tmp_path), "--jsonl"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    load, event = [json.loads(line) for line in proc.stdout.splitlines()]
    assert load == {"event": "phase", "phase": "load"}  # it failed loading the model
    assert event["event"] == "error" and "build_model()" in event["message"]


def _finished(run: RunRecord, tmp_path: Path):
    """run_profile for the CLI, as if a run had finished writing `run`."""
    from branchscope.profiling.run.outcome import RunResult

    return lambda request, on_event=None, cancel=None: RunResult(0, tmp_path, run, notes=["a note"])


def test_profile_prints_the_phases_in_one_line_and_each_warning(tmp_path, capsys, monkeypatch):
    run = RunRecord(
        model="demo inception", mode="fork", interop=2, intra=1, median_ms=65.0, unprofiled_median_ms=900.0,
        warmup=3, warmup_steps=200, warmup_settled=False, warmup_cap="steps",
        phase_seconds={"start": 4.2, "load": 1.25, "forward": 0.05, "discovery": 2.5, "plan": 2.8, "check": 0.3,
                       "warmup": 12.0, "timing": 2.0, "profile": 6.1, "export": 0.4},
        tracer_seconds={"torch.fx": 2.5}, plan_build_seconds=0.1, plan_compile_seconds=2.7,
        warnings=["warm-up reached its cap of 200 steps after 200 steps without settling", "profiler overhead ×0.07: …"],
    )  # fmt: skip
    monkeypatch.setattr(cmd_profile, "run_profile", _finished(run, tmp_path))
    assert cli(profile(tmp_path, "--demo", "inception", "--mode", "fork", "--interop", "2", "--intra", "1", "--quiet")) == 0
    lines = capsys.readouterr().out.splitlines()
    phases = (
        "phases (s): start 4.20, load 1.25, forward 0.05, discovery 2.50 (torch.fx 2.50), plan 2.80 (build 0.10, "
        "compile 2.70), check 0.30, warmup 12.00 (200 steps, stopped by its steps cap, not settled), timing 2.00, "
        "profile 6.10, export 0.40"
    )
    assert phases in lines
    assert lines[-3:] == [
        "warning: warm-up reached its cap of 200 steps after 200 steps without settling",
        "warning: profiler overhead ×0.07: …",
        "note: a note",
    ]


def test_the_phase_line_says_a_settled_warm_up_a_plan_without_steps_and_no_warm_up():
    from branchscope.profiling.run.runner import format_phases

    phases = {"warmup": 0.5, "timing": 2.0}
    settled = RunRecord(phase_seconds=phases, warmup_steps=9, warmup_settled=True)
    assert format_phases(settled) == "phases (s): warmup 0.50 (9 steps, settled), timing 2.00"
    assert format_phases(RunRecord(phase_seconds=phases, warmup_steps=0)) == "phases (s): warmup 0.50 (none), timing 2.00"
    assert format_phases(RunRecord()) is None  # a run from before phases were timed: no line
