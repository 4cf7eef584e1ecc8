"""A compared run starved of cores says so in its row (`RunSummary.starved`, `compare --json`'s
"starved"): run.json's verdict, the runner's; for a run.json from before it, judged on its load."""

from __future__ import annotations

import json

from branchscope.profiling import load_trace
from branchscope.profiling.trace.compare import LoadedRun, compare, summarize
from branchscope.profiling.trace.records import LoadRecord, RunRecord
from tests.builders.runs import write_small_trace


def _run(mode="threads", interop=2, intra=1, **more) -> RunRecord:
    return RunRecord(mode=mode, interop=interop, intra=intra, model="demo m", cores=2,
                     unprofiled_steps_ms=[5.0, 5.1, 4.9], complete=True, **more)  # fmt: skip


def test_a_compared_run_is_starved_as_its_run_json_says_else_as_its_load_tells(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "threads"))
    quiet = LoadRecord(cores=2, others_cores=0.02, own_cores=0.36, busy=False)
    # The runner's verdict is kept, whatever the CPU samples of the profiled steps say.
    assert summarize(small, _run(starved=True, load=quiet)).starved is True
    assert summarize(small, _run(starved=False, load=LoadRecord(cores=2, others_cores=1.5))).starved is False
    # A run.json from before `starved`: others took 0.9 of 2 cores, leaving 1.1 for 2 threads (< 1.6).
    assert summarize(small, _run(load=LoadRecord(cores=2, others_cores=0.9, busy=True))).starved is True
    assert summarize(small, _run(load=LoadRecord(cores=2, others_cores=0.3))).starved is False
    assert summarize(small, _run("sequential", 1, 1, load=LoadRecord(cores=2, others_cores=0.9))).starved is False
    # Nothing measured, or no run.json: unknown.
    assert summarize(small, _run()).starved is None
    assert summarize(small, None).starved is None


def test_compare_json_rows_say_whether_each_run_was_starved(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "threads"))
    runs = [LoadedRun("seq", small, _run("sequential", 1, 2, starved=False)),
            LoadedRun("thr", small, _run(starved=True)), LoadedRun("plain", small, None)]  # fmt: skip
    doc = json.loads(json.dumps(compare(runs).to_json()))
    assert [r["starved"] for r in doc["runs"]] == [False, True, None]
