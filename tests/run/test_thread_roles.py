"""Which OS thread is which: the main thread, the inter-op pool, intra-op (OpenMP) workers, others.

OpenMP workers started by a pool thread inherit its name (PTThreadPool), so names cannot tell them
from the pool: the worker takes a census as torch starts its threads, the run lists the tids, and
the reader and the CPU chart go by those lists.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.run.cpu_sampler import ThreadCensus
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.run.runner import run_profile
from branchscope.widgets.pool_usage import PoolUsageView
from tests.gui_helpers import show
from tests.paths import ROOT

POOL = "PTThreadPool"


def test_census_sorts_threads_in_the_order_torch_starts_them():
    names = {1: "python", 2: "python"}  # the main thread and torch's pthreadpool (XNNPACK)
    census = ThreadCensus(1, 2, names)
    names = {**names, 3: "python"}  # the main thread's OpenMP team, named like it
    assert census.note("intra", names) == [3]
    names = {**names, 4: "python", 5: "python"}  # the pool, before its threads name themselves
    assert census.note("interop", names) == [4, 5]
    names = {**names, 4: POOL, 5: POOL, 6: "cuda-EvtHandlr", 7: "python"}  # loading on CUDA
    assert census.note(names=names, main_named_are_intra=False) == [6, 7]
    names = {**names, 8: POOL, 9: POOL, 10: "python"}  # the pool threads' OpenMP teams, and the main thread's grown
    census.note(names=names)
    names = {**names, 11: "python"}  # the profiler's thread
    census.note("other", names)
    assert census.interop_tids == [4, 5]
    assert census.intra_tids == [3, 8, 9, 10]
    assert census.other_tids == [2, 6, 7, 11]
    assert census.names[4] == "python"  # as first seen; the worker reads the names again at the end


def test_a_pool_the_model_starts_itself_is_its_lowest_pool_named_threads():
    # A sequential run of a model that forks: the pool (2) and its threads' OpenMP workers appear
    # together; ThreadPool starts all its threads before any runs a task, so they have the lowest tids.
    census = ThreadCensus(1, 2, {1: "python"})
    census.note(names={1: "python", 20: POOL, 21: POOL, 22: POOL, 23: POOL, 24: "other-lib"})
    assert (census.interop_tids, census.intra_tids, census.other_tids) == ([20, 21], [22, 23], [24])
    census.note(names={1: "python", 25: POOL})
    assert census.interop_tids == [20, 21] and census.intra_tids == [22, 23, 25]


def _trace_file(path: Path, branchscope: dict | None) -> Path:
    """Ops on the main thread, two pool threads, an OpenMP worker named like them and one more
    pool-named thread, each with CPU samples."""
    threads = {1: "pt_main_thread", 11: POOL, 12: POOL, 13: POOL, 14: POOL, 15: "python"}
    events: list[dict] = []
    for tid, name in threads.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}})
        if tid != 15:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": 10, "dur": 50})
        for ts in (10, 20, 30):
            events.append({"ph": "C", "cat": "cpu_sample", "name": f"thread {tid} ({name})", "pid": 1, "tid": tid,
                           "ts": ts, "args": {"cpu_pct": 50.0, "wait_pct": 0.0}})  # fmt: skip
    doc: dict = {"traceEvents": events}
    if branchscope is not None:
        doc = {"branchscope": branchscope, **doc}
    path.write_text(json.dumps(doc))
    return path


LISTED = {"mode": "fork", "interop": 2, "intra": 2, "cores": 2, "main_tid": 1, "interop_tids": [11, 12],
          "intra_tids": [13, 15]}  # fmt: skip


def test_reader_gives_a_runs_listed_threads_their_roles_whatever_their_names(tmp_path):
    trace = load_trace(_trace_file(tmp_path / "listed.json", LISTED))
    assert {ln.tid: ln.role for ln in trace.lanes} == {1: "main", 11: "interop", 12: "interop", 13: "intra", 14: "other"}
    assert [ln.role for ln in trace.lanes] == ["main", "interop", "interop", "intra", "other"]  # lanes in role order
    assert trace.run_info is not None and trace.run_info.intra_tids == (13, 15)
    # a trace without the lists goes by names
    guessed = load_trace(_trace_file(tmp_path / "plain.json", None))
    assert {ln.tid: ln.role for ln in guessed.lanes} == {1: "main", 11: "interop", 12: "interop", 13: "interop", 14: "interop"}


def test_cpu_chart_groups_threads_by_role_with_counts(tmp_path, qtbot):
    view = show(qtbot, PoolUsageView(), 1000, 260)
    view.set_trace(load_trace(_trace_file(tmp_path / "listed.json", LISTED)))
    assert view.legend() == [
        ("main", "main thread (1)"),
        ("interop", "inter-op pool (2)"),
        ("intra", "intra-op OpenMP workers (2)"),
        ("other", "other threads (1)"),
    ]
    assert [th.role for th in view.threads] == ["main", "interop", "interop", "intra", "intra", "other"]
    cpu, pool = (g.text.toPlainText() for g in (view.cpu_gutter, view.pool_gutter))  # as shown
    for text in ("CPU use per OS thread", "inter-op pool (2)", "intra-op OpenMP workers (2)", "cores in use"):
        assert text in cpu
    assert "busy inter-op threads (of 2)" in pool
    assert "per pixel" not in cpu + pool
    view.set_trace(load_trace(_trace_file(tmp_path / "plain.json", None)))  # by names: four pool threads
    assert view.legend() == [("main", "main thread (1)"), ("interop", "inter-op pool (4)"), ("other", "other threads (1)")]


PROBE = """
import json, torch
from branchscope.profiling.run.cpu_sampler import ThreadCensus, settle_interop_pool
from branchscope.profiling.run.plans import start_interop_pool, start_intra_op_team
import threading
torch.set_num_interop_threads(3)
torch.set_num_threads(3)
census = ThreadCensus(threading.get_native_id(), 3)
start_intra_op_team(3)
team = census.note("intra")
start_interop_pool()
settle_interop_pool()
pool = census.note("interop")
print(json.dumps({"team": team, "pool": pool, "names": census.names}))
"""


@pytest.mark.slow
def test_probes_start_the_main_threads_team_then_exactly_the_pool():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "3"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    assert len(found["team"]) == 2  # 3 intra-op threads: the main thread and 2 OpenMP workers
    assert len(found["pool"]) == 3  # the pool alone, all its threads at once
    names = {int(t): n for t, n in found["names"].items()}
    assert all(names[t] != POOL for t in found["team"])


@pytest.mark.slow
def test_a_forked_2x2_run_lists_exactly_its_pool_and_its_openmp_workers(tmp_path, qtbot):
    req = RunRequest(mode="fork", interop=2, intra=2, out=tmp_path / "run", options=RunOptions(demo="twin-mm", steps=2, warmup=1))
    result = run_profile(req)
    assert result.ok, result.message
    run = result.run
    assert run is not None
    main, pool, intra = run.main_tid, set(run.interop_tids or []), set(run.intra_tids or [])
    assert len(pool) == 2 and intra and not pool & intra and main not in pool | intra
    assert {(run.threads or {})[str(t)] for t in pool} == {POOL}
    trace = load_trace(tmp_path / "run" / "trace.json.gz")
    info = trace.run_info
    assert info is not None and set(info.interop_tids) == pool and set(info.intra_tids) == intra
    # The pool threads that ran a branch: which ones is the scheduler's choice (on a busy machine
    # the first to wake may take both forked tasks before the other gets a core).
    lanes = {ln.tid for ln in trace.lanes_of("cpu", "interop")}
    assert lanes and lanes <= pool
    sampled = {c.tid for c in trace.counters if c.cat == "cpu_sample"}
    assert pool | intra | {main} <= sampled
    view = show(qtbot, PoolUsageView(), 1000, 260)
    view.set_trace(trace)
    legend = dict(view.legend())
    assert legend["main"] == "main thread (1)"
    assert legend["interop"] == "inter-op pool (2)"
    assert legend["intra"] == f"intra-op OpenMP workers ({len(intra)})"
    others = len(sampled - pool - intra - {main})
    assert legend.get("other") == (f"other threads ({others})" if others else None)
