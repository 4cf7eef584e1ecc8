"""`branchscope sweep` end to end: real workers on a small demo (a few seconds a cell), through the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import psutil
import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.sweep import SWEEP_JSON
from tests.paths import MODELS, ROOT
from tests.processes import alive, mentioning, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux"),
]

def sweep(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "branchscope.app.cli", "sweep", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_sweep_records_each_cell_goes_on_after_a_failed_one_and_marks_the_best(tmp_path):
    out = tmp_path / "sweep"
    proc = sweep("--demo", "twin-mm", "--modes", "sequential,streams", "--interop", "1", "--intra", "1,2",
                 "--steps", "2", "--warmup", "1", "--passes", "1", "--out", str(out), "--jsonl")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    data = json.loads((out / SWEEP_JSON).read_text())
    assert events[0] == {"event": "sweep", "out": str(out), "sweep": events[0]["sweep"]}
    assert events[-1] == {"event": "done", "out": str(out), "sweep": data}
    cells = [e for e in events if e["event"] == "cell"]
    assert [(e["index"], e["of"], e["cell"]["mode"], e["cell"]["intra"], e["cell"]["status"]) for e in cells] == [
        (0, 4, "sequential", 1, "done"), (1, 4, "sequential", 2, "done"),
        (2, 4, "streams", 1, "failed"), (3, 4, "streams", 2, "failed"),
    ]  # fmt: skip
    assert {e["event"] for e in events} == {"sweep", "progress", "cell", "done"}
    assert data["cores"] == usable_cores() and data["complete"] is True
    done, failed = data["cells"][:2], data["cells"][2:]
    for cell in done:
        run = json.loads((out / cell["run"] / "run.json").read_text())
        assert (run["mode"], run["interop"], run["intra"]) == (cell["mode"], cell["interop"], cell["intra"])
        assert cell["unprofiled_median_ms"] == run["unprofiled_median_ms"] > 0
        lo, q1, q3, hi = cell["unprofiled_spread_ms"]
        assert lo <= q1 <= cell["unprofiled_median_ms"] <= q3 <= hi
        assert min(run["unprofiled_steps_ms"]) == lo and max(run["unprofiled_steps_ms"]) == hi
        assert cell["median_ms"] == run["median_ms"]
        trace = load_trace(out / cell["run"] / "trace.json.gz")
        assert trace.run_info is not None and trace.run_info.interop == cell["interop"]
    for cell in failed:
        assert cell["exit_code"] == 3 and "CUDA" in cell["error"] and cell["unprofiled_median_ms"] is None
        assert not (out / cell["run"]).exists()
    medians = [c["unprofiled_median_ms"] for c in done]
    assert data["best"] == medians.index(min(medians))
    assert [c["oversubscribed"] for c in data["cells"]] == [c["intra"] > usable_cores() for c in data["cells"]]


def test_a_sweep_in_two_passes_end_to_end(tmp_path):
    """Two cells (sequential once, whatever --interop says; fork 2×1) in two passes, real workers:
    structure, never timings."""
    out = tmp_path / "sweep"
    proc = sweep("--demo", "twin-mm", "--modes", "sequential,fork", "--interop", "2", "--intra", "1",
                 "--steps", "2", "--warmup", "1", "--passes", "2", "--out", str(out), "--jsonl")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    cells = [e for e in events if e["event"] == "cell"]
    assert [(e["sweep_pass"], e["passes"], e["index"], e["cell"]["mode"]) for e in cells] == [
        (1, 2, 0, "sequential"), (1, 2, 1, "fork"), (2, 2, 0, "sequential"), (2, 2, 1, "fork"),
    ]  # fmt: skip
    data = json.loads((out / SWEEP_JSON).read_text())
    assert data["passes"] == 2 and data["complete"] is True and events[-1]["sweep"] == data
    assert [(c["mode"], c["interop"], c["intra"], c["any_interop"]) for c in data["cells"]] == [
        ("sequential", 1, 1, True), ("fork", 2, 1, False),
    ]  # fmt: skip
    for cell in data["cells"]:
        assert cell["status"] == "done", cell["error"]
        a, b = cell["pass_medians_ms"]
        assert cell["unprofiled_median_ms"] == pytest.approx((a + b) / 2, abs=1e-3)
        run = json.loads((out / cell["run"] / "run.json").read_text())  # the cell's folder: its second pass's run
        assert run["unprofiled_median_ms"] == pytest.approx(b, abs=1e-3)
        lo, q1, q3, hi = cell["unprofiled_spread_ms"]  # both passes' steps pooled
        assert lo <= min(run["unprofiled_steps_ms"]) and max(run["unprofiled_steps_ms"]) <= hi
        assert cell["unprofiled_steps"] > len(run["unprofiled_steps_ms"])
    best = data["best"]
    assert data["ties"][0] == best and set(data["ties"]) <= {0, 1}
    assert sorted(p.name for p in out.iterdir()) == ["fork-2x1", "sequential-1x1", SWEEP_JSON]


def test_sweep_reports_each_cell_on_stderr_and_prints_the_table(tmp_path):
    proc = sweep("--demo", "twin-mm", "--modes", "streams", "--interop", "1", "--intra", "1,2",
                 "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 3 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    # how long it will take, then each cell with the time left; the first pass of 3 fails each cell,
    # and a cell whose first pass failed is not run again (so after the last one, nothing is left)
    assert lines[0].startswith("sweeping 2 cells × 3 passes = 6 runs, ") and lines[0].endswith(f"into {tmp_path}")
    assert lines[1].startswith("pass 1/3 cell 1/2 streams 1×1: failed: multi-stream needs CUDA: this machine has no "
                               "CUDA device torch can use · ") and lines[1].endswith(" left")  # fmt: skip
    assert lines[2].startswith("pass 1/3 cell 2/2 streams 1×2: failed:") and len(lines) == 4
    assert not lines[2].endswith(" left")
    assert lines[-1] == "error: no cell ran: multi-stream needs CUDA: this machine has no CUDA device torch can use"
    assert json.loads((tmp_path / SWEEP_JSON).read_text())["best"] is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_cancel_stops_the_running_cell_and_keeps_the_finished_ones(tmp_path, signum):
    model = MODELS / "hangs_with_two.py"
    out = tmp_path / "sweep"
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "branchscope.app.cli", "sweep", "--model", str(model), "--modes", "sequential",
           "--interop", "1", "--intra", "1,2,4", "--steps", "2", "--warmup", "1", "--out", str(out)]  # fmt: skip
    env = dict(os.environ, BRANCHSCOPE_TEST_MARKER=marker)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    descendants: list[psutil.Process] = []

    def first_cell() -> dict | None:
        try:
            cell = json.loads((out / SWEEP_JSON).read_text())["cells"][0]
        except (OSError, ValueError):
            return None
        return cell if cell["status"] != "not run" else None

    try:
        cell = wait_until(first_cell, 120, "the first cell in sweep.json")
        assert cell["status"] == "done", cell["error"]
        wait_until(lambda: mentioning(marker), 120, "the second cell's model to hang")
        descendants = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)  # a guard against a hang, not a timing assertion
        assert proc.returncode == 128 + signum
        name = signal.Signals(signum).name
        assert stderr.splitlines()[-1] == f"error: cancelled by {name}; 1 of 3 cells ran, the rest are marked not run"
        data = json.loads((out / SWEEP_JSON).read_text())
        assert [c["status"] for c in data["cells"]] == ["done", "not run", "not run"]
        assert data["cancelled"] == name and data["complete"] is False and data["best"] == 0
        assert sorted(p.name for p in out.iterdir()) == ["sequential-1x1", SWEEP_JSON]
        wait_until(lambda: not [p for p in descendants if alive(p.pid)], 30, "the sweep's descendants to end")
        assert mentioning(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in descendants + mentioning(marker):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def test_sweep_refuses_a_folder_holding_foreign_files(tmp_path):
    (tmp_path / "results.csv").write_text("not branchscope's")
    proc = sweep("--demo", "twin-mm", "--modes", "fork", "--interop", "1", "--intra", "1", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: --out {tmp_path} holds files branchscope did not write (results.csv); choose a new or empty "
        "folder, or pass --overwrite to write beside them"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_sweep_with_bad_options_exits_2(tmp_path):
    proc = sweep("--demo", "twin-mm", "--modes", "fork,nope", "--interop", "1", "--intra", "1", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--modes" in proc.stderr and "'nope' is not a mode" in proc.stderr
    proc = sweep("--demo", "no-such-demo", "--modes", "fork", "--interop", "1", "--intra", "1", "--out", str(tmp_path / "d"))
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith("error: ")
    assert not (tmp_path / "d").exists()
