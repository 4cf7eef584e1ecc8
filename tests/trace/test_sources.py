"""`open_source`: one way to tell what a path is — a run folder, a distributed run's folder, a
folder of rank traces, a trace file (with its run.json beside it or not), a snapshot, a sweep — and
`load_job` over several; and `compare` on distributed runs through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.profiling.trace import sources
from branchscope.profiling.trace.compare import compare, load_run
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RankRecord, RunRecord, to_builtins
from branchscope.profiling.trace.sources import load_job, open_source
from tests.builders.runs import write_run_folder, write_run_json, write_small_trace, write_sweep_folder
from tests.paths import ROOT


def distributed_run(out: Path, medians=((10.0, 12.0, 11.0), (20.0, 22.0, 21.0))) -> Path:
    """A distributed run's folder as the runner leaves it: rank-R/ with its trace and run.json, and
    a top-level run.json with the slowest rank's steps, step by step."""
    ranks = []
    for r, steps in enumerate(medians):
        sub = out / f"rank-{r}"
        sub.mkdir(parents=True)
        write_small_trace(sub / "trace.json.gz", "fork")
        write_run_json(sub, mode="fork", interop=2, intra=1, rank=r, world_size=len(medians), unprofiled_steps_ms=list(steps))
        ranks.append(RankRecord(rank=r, pid=100 + r, device="cpu", run=f"rank-{r}/run.json", trace=f"rank-{r}/trace.json.gz"))
    slowest = [max(xs) for xs in zip(*medians)]
    write_run_json(out, mode="fork", interop=2, intra=1, nproc=len(medians), model="demo twin-mm", source="demo",
                   unprofiled_steps_ms=slowest, ranks=[to_builtins(r) for r in ranks], trace="rank-0/trace.json.gz")  # fmt: skip
    return out


def test_each_kind_of_source_is_told_apart(tmp_path):
    run = write_run_folder(tmp_path / "run", "fork", 2, 1, 20.0)
    job = tmp_path / "job"
    job.mkdir()
    for r in (1, 0):
        write_small_trace(job / f"w.rank-{r}.pt.trace.json", "fork")
    alone = write_small_trace(tmp_path / "alone.json", "sequential")
    sweep = write_sweep_folder(tmp_path / "sweep")
    dist = distributed_run(tmp_path / "dist")
    found = {name: open_source(p) for name, p in
             [("run", run), ("trace in run", run / "trace.json.gz"), ("job", job), ("alone", alone),
              ("sweep", sweep), ("dist", dist)]}  # fmt: skip
    assert {k: v.kind for k, v in found.items()} == {
        "run": "run", "trace in run": "run", "job": "rank folder", "alone": "trace", "sweep": "sweep",
        "dist": "distributed run",
    }  # fmt: skip
    assert found["run"].traces == (run / "trace.json.gz",) and found["run"].run is not None
    assert found["trace in run"].run == found["run"].run
    assert [p.name for p in found["job"].traces] == ["w.rank-0.pt.trace.json", "w.rank-1.pt.trace.json"]
    assert found["job"].label == "job · 2 ranks"
    assert found["alone"].info is not None and found["alone"].info.mode == "sequential"
    assert found["sweep"].traces == () and found["sweep"].sweep is not None and found["sweep"].sweep.best == 1
    assert [str(p.relative_to(dist)) for p in found["dist"].traces] == ["rank-0/trace.json.gz", "rank-1/trace.json.gz"]
    assert [r.rank for r in found["dist"].rank_runs() if r is not None] == [0, 1]
    assert found["run"].label == "inception" and found["dist"].label == "twin-mm"


def test_a_snapshot_is_a_source_of_its_own(tmp_path):
    from tests.builders.snapshots import two_gpu_snapshot, write

    path = write(tmp_path / "snap.pickle", two_gpu_snapshot())
    source = open_source(path)
    assert source.kind == "snapshot" and source.traces == (path,)
    assert {m.device for m in source.load().memory} >= {"cuda:0"}


@pytest.mark.parametrize(
    "what, says",
    [
        ("missing", "no such file"),
        ("empty folder", "folder without a complete run"),
        ("incomplete run.json", "folder without a complete run"),
        ("run.json naming a trace elsewhere", "folder without a complete run"),
        ("bad sweep.json", "not a branchscope sweep"),
        ("sweep cell outside", "cell 0 needs"),
        ("a FIFO", "FIFO"),
    ],
)
def test_what_is_no_source_is_one_line_naming_it(tmp_path, what, says):
    path = tmp_path / "x"
    if what in ("empty folder", "incomplete run.json", "run.json naming a trace elsewhere", "bad sweep.json", "sweep cell outside"):
        path.mkdir()
    if what == "incomplete run.json":
        write_small_trace(path / "trace.json.gz", "fork")
        write_run_json(path, mode="fork", complete=False)
    elif what == "run.json naming a trace elsewhere":
        write_small_trace(tmp_path / "elsewhere.json", "fork")
        write_run_json(path, mode="fork", trace="../elsewhere.json")
    elif what == "bad sweep.json":
        (path / "sweep.json").write_text('{"sweep": 99, "cells": []}')
    elif what == "sweep cell outside":
        (path / "sweep.json").write_text(json.dumps({"sweep": 2, "cells": [{"mode": "fork", "interop": 1, "intra": 1, "run": ".."}]}))
    elif what == "a FIFO":
        os.mkfifo(path)
    with pytest.raises(TraceFormatError, match=says) as info:
        open_source(path)
    assert "x" in str(info.value) and "\n" not in str(info.value)


def test_several_sources_are_ranks_of_one_job_or_refused(tmp_path):
    a = write_small_trace(tmp_path / "a.json", "fork")
    b = write_small_trace(tmp_path / "b.json", "fork")
    # Two traces that say nothing of a job, from one clock: refused, never merged onto one clock.
    with pytest.raises(TraceFormatError, match="not the ranks of one job"):
        load_job([open_source(a), open_source(b)])
    dist = distributed_run(tmp_path / "dist")
    merged = load_job([open_source(dist)])
    assert sorted({ln.rank for ln in merged.lanes}) == [0, 1]
    with pytest.raises(TraceFormatError, match="sweep"):
        load_job([open_source(dist), open_source(write_sweep_folder(tmp_path / "sweep"))])


def test_compare_takes_a_distributed_run_with_the_slowest_ranks_steps_and_each_ranks(tmp_path):
    dist = distributed_run(tmp_path / "dist")
    single = write_run_folder(tmp_path / "seq", "sequential", 1, 1, 40.0)
    loaded = [load_run(single), load_run(dist)]
    assert loaded[1].run is not None and loaded[1].run.distributed
    assert sorted({ln.rank for ln in loaded[1].trace.lanes}) == [0, 1]  # every rank's events
    c = compare(loaded)
    s = c.runs[1]
    assert s.unprofiled is not None and s.unprofiled.median == 21.0  # the slowest rank's, step by step
    assert [(r.rank, r.unprofiled.median if r.unprofiled else None) for r in s.ranks] == [(0, 11.0), (1, 21.0)]
    doc = c.to_json()
    assert [r["rank"] for r in doc["runs"][1]["ranks"]] == [0, 1] and doc["runs"][0]["ranks"] == []
    assert c.speedup[1] == pytest.approx(40.0 / 21.0)


def test_branchscope_compare_on_a_distributed_run_folder(tmp_path):
    """Before: `error: ddp1/trace.json.gz: no such file` (compare took only a bare trace name)."""
    dist = distributed_run(tmp_path / "ddp1")
    single = write_run_folder(tmp_path / "seq", "sequential", 1, 1, 40.0)
    proc = subprocess.run([sys.executable, "-m", "branchscope.app", "compare", str(single), str(dist), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["rank"] for r in doc["runs"][1]["ranks"]] == [0, 1]
    assert doc["runs"][1]["unprofiled_median_ms"] == 21.0
    table = subprocess.run([sys.executable, "-m", "branchscope.app", "compare", str(single), str(dist)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert table.returncode == 0 and "rank 1" in table.stdout, table.stderr


def test_sources_reads_a_trace_info_without_decoding_the_trace(tmp_path):
    path = write_small_trace(tmp_path / "t.json", "fork")
    info = sources.read_trace_info(path)
    assert info is not None and info["mode"] == "fork"
    assert RunRecord.parse(info).mode == "fork"
