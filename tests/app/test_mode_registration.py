"""A mode is two files: a mode defined outside branchscope (tests/fixtures/modes/pythreads.py,
threads mode's plan under another name) registered through BRANCHSCOPE_MODES runs through
`profile`, `sweep`, `compare` and the window with no other change, and every reader sees it as its
traits say: its branches on a pool of Python threads, the GIL measured, a branch pool mode for the
advice. `compare` and the window read it without the registration: run.json and the trace carry
its traits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.profiling.trace.reader import load_trace
from branchscope.profiling.trace.records import read_run_record
from tests.paths import FIXTURES, ROOT

pytestmark = pytest.mark.slow

PYTHREADS = FIXTURES / "modes" / "pythreads.py"


def branchscope(*args: str, registered: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BRANCHSCOPE_MODES"}
    if registered:
        env["BRANCHSCOPE_MODES"] = str(PYTHREADS.relative_to(ROOT))  # relative: the worker runs elsewhere
    return subprocess.run([sys.executable, "-m", "branchscope.app.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """sequential and pythreads over 1 and 2 inter-op threads, one intra-op thread: three runs."""
    out = tmp_path_factory.mktemp("pythreads") / "sweep"
    proc = branchscope("sweep", "--demo", "twin-mm", "--modes", "sequential,pythreads", "--interop", "1,2",
                       "--intra", "1", "--steps", "2", "--warmup", "0", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def test_profile_runs_the_registered_mode_on_its_python_pool_and_measures_the_gil(tmp_path):
    out = tmp_path / "run"
    proc = branchscope("profile", "--demo", "twin-mm", "--mode", "pythreads", "--interop", "2", "--intra", "1",
                       "--steps", "2", "--warmup", "0", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = read_run_record(out)
    assert run is not None and run.complete and run.mode == "pythreads"
    assert run.mode_traits is not None and run.mode_traits.pool == "python" and run.mode_traits.gil_measured
    assert run.plan_by == "the pythreads plan"
    assert run.branch_threads and len(run.interop_tids or []) == 2
    assert "branch threads:" in proc.stdout  # the summary's GIL line
    info = load_trace(out / "trace.json.gz").run_info
    assert info is not None and info.mode_traits == run.mode_traits


def test_sweep_runs_it_and_its_advice_pairs_it_as_a_branch_pool_mode(sweep):
    doc = json.loads((sweep / "sweep.json").read_text())
    cells = {(c["mode"], c["interop"]): c for c in doc["cells"]}
    assert cells[("pythreads", 2)]["status"] == "done" and cells[("pythreads", 1)]["status"] == "done"
    assert cells[("pythreads", 2)]["plan_by"] == "the pythreads plan"
    # pythreads 2×1 computes with two threads beside sequential's one: the advice asks for sequential 1×2.
    assert "pythreads 2×1" in doc["advice"]["text"] and "sequential 1×2" in doc["advice"]["text"]
    assert "running its branches on pythreads" in doc["advice"]["text"]
    assert cells[("pythreads", 2)]["mode_traits"]["pool"] == "python"  # sweep.json says what it is


def test_its_sweep_read_without_the_registration_pairs_it_by_the_traits_sweep_json_holds(sweep):
    from branchscope.profiling.trace.advice import advice_record, from_sweep
    from branchscope.profiling.trace.mode_traits import UNKNOWN, traits_of
    from branchscope.profiling.trace.sources import read_sweep

    assert traits_of("pythreads") == UNKNOWN  # this process never registered it
    runs = from_sweep(read_sweep(sweep))
    (pythreads,) = [m for m in runs if m.mode == "pythreads" and m.interop == 2]
    assert pythreads.traits.pool == "python" and pythreads.traits.branch_pool
    advice = advice_record(runs)
    assert advice is not None and "pythreads 2×1" in advice.text and "sequential 1×2" in advice.text


def test_compare_reads_its_traits_from_run_json_without_the_registration(sweep):
    proc = branchscope("compare", str(sweep / "pythreads-2x1"), str(sweep / "sequential-1x1"), "--json",
                       registered=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["baseline"] == 1  # the sequential 1×1 run, by its traits
    assert doc["advice"]["reason"].startswith("not paired: pythreads 2×1 computes with 2 threads")


def test_the_window_names_its_pool_the_python_pool_and_draws_its_gil(sweep, qtbot, tmp_path):
    from branchscope.widgets.details_panel import trace_summary_rows
    from branchscope.widgets.pool_usage import PoolUsageView
    from branchscope.widgets.timeline_layout import group_of

    folder = sweep / "pythreads-2x1"
    trace = load_trace(folder / "trace.json.gz")
    pool = PoolUsageView()
    qtbot.addWidget(pool)
    pool.set_trace(trace)
    assert pool.pool_title == "Python pool"
    assert ("interop", "Python pool (2)") in pool.legend()
    lanes = [ln.index for ln in trace.lanes if ln.kind == "cpu" and ln.role == "interop"]
    assert lanes and group_of(trace, lanes[0], False)[1].endswith("Python pool")
    rows = dict(trace_summary_rows(trace, read_run_record(folder)))
    assert "Python pool" in rows and rows["GIL"].startswith("branch threads:")

    shot = tmp_path / "window.png"
    proc = branchscope("open", str(folder), "--screenshot", str(shot), registered=False)
    assert proc.returncode == 0, proc.stderr
    assert shot.stat().st_size > 0


def test_the_sweep_panel_checks_it_by_default_where_it_is_registered():
    code = "from branchscope.app.sweep_panel import DEFAULT_MODES; print(','.join(DEFAULT_MODES))"
    env = {**os.environ, "BRANCHSCOPE_MODES": str(PYTHREADS), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["sequential,fork,threads,pythreads"]
