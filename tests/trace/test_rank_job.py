"""Jobs of many ranks (issue 23): a generated job's planted stragglers and heavy rank are what the
summaries find; a folder of ranks read by a pool of forked children is the trace read one file at
a time; a broken file is one error naming it, and no child outlives a load."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from branchscope.profiling.trace import merge
from branchscope.profiling.trace.merge import load_many, load_traces, rank_job_summaries, rank_summaries
from branchscope.profiling.trace.model import LoadCancelled, Trace, TraceFormatError
from branchscope.profiling.trace.rank_pool import RawSlices
from branchscope.profiling.trace.sources import load_job, open_source
from tests.paths import ROOT, SHARED_TRACES
from tests.trace.test_reader_parallel import _children, _earlier_children  # noqa: F401 (its autouse fixture too)

TEMPLATE = SHARED_TRACES / "hta_two_ranks" / "rank-0.json.gz"
needs_template = pytest.mark.skipif(not TEMPLATE.is_file(), reason="../shared/traces absent")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_rank_job", ROOT / "benchmarks" / "gen_rank_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_rank_job", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, dict]:
    if not TEMPLATE.is_file():
        pytest.skip("../shared/traces absent")
    out = tmp_path_factory.mktemp("job") / "ranks"
    planted = _generator().generate(out, 8, seed=3, template=TEMPLATE, max_events=400)
    return out, json.loads((out / "planted.txt").read_text()) | {"stretch": planted.stretch}


def _files(folder: Path) -> list[Path]:
    return merge.folder_traces(folder)


@needs_template
def test_the_planted_stragglers_and_heavy_rank_are_what_the_summaries_find(job):
    folder, planted = job
    files = _files(folder)
    assert [p.name for p in files] == [f"rank-{r}.json.gz" for r in range(8)]
    summaries = rank_summaries(load_traces(files))
    assert [s.rank for s in summaries] == list(range(8))
    steps = {s.rank: s.step_ns for s in summaries}
    assert all(v is not None for v in steps.values())
    median = float(np.median([v for v in steps.values()]))
    slow = sorted(r for r, v in steps.items() if v is not None and v > 1.15 * median)
    assert slow == planted["stragglers"] and slow  # 1 in 16, at least one
    for r in slow:  # their steps are 20-40% longer
        assert 1.15 < steps[r] / median < 1.45
    peaks = {s.rank: s.memory_peak_bytes for s in summaries}
    heaviest = max(peaks, key=lambda r: peaks[r] or 0)
    assert heaviest == planted["heavy_rank"] and heaviest not in slow
    others = sorted(v for r, v in peaks.items() if r != heaviest and v is not None)
    assert peaks[heaviest] is not None and peaks[heaviest] > 1.4 * others[-1]
    # Every rank says which it is.
    for path in files:
        with gzip.open(path) as f:
            info = json.load(f)["distributedInfo"]
        assert info["world_size"] == 8 and f"rank-{info['rank']}." in path.name


@needs_template
def test_the_generators_help_describes_every_option():
    ap = _generator().parser()
    undescribed = [a.dest for a in ap._actions if not (a.help or "").strip()]
    assert undescribed == []
    assert "(default: 8)" in ap.format_help() and "planted.txt" in ap.format_help()


def test_the_generator_is_deterministic_and_names_ranks_as_real_jobs_do(tmp_path):
    gen = _generator()
    a = gen.generate(tmp_path / "a", 4, seed=7, template=TEMPLATE, max_events=100, naming="pt")
    b = gen.generate(tmp_path / "b", 4, seed=7, template=TEMPLATE, max_events=100, naming="pt")
    assert a.files == [f"rank_{r}.pt.trace.json.gz" for r in range(4)] == b.files
    for name in a.files:
        with gzip.open(tmp_path / "a" / name) as fa, gzip.open(tmp_path / "b" / name) as fb:
            assert fa.read() == fb.read()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        gen.generate(tmp_path / "c", 4, template=TEMPLATE, max_events=100)
    assert (tmp_path / "c" / "notes.txt").read_text() == "mine"


def _same(a: Trace, b: Trace) -> None:
    for col in ("start_ns", "dur_ns", "lane", "depth", "name_id", "cat_id", "lane_offsets"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert a.names == b.names and a.cats == b.cats
    assert list(a.lanes) == list(b.lanes)
    assert sorted({ln.rank for ln in a.lanes}) == sorted({ln.rank for ln in b.lanes})
    assert [m.device for m in a.memory] == [m.device for m in b.memory]
    for ma, mb in zip(a.memory, b.memory):
        assert np.array_equal(ma.ts_ns, mb.ts_ns) and np.array_equal(ma.total_bytes, mb.total_bytes)
    assert a.metadata == b.metadata
    for i in np.linspace(0, len(a) - 1, 25).astype(int).tolist():
        assert a.event_args(i) == b.event_args(i)
    fa, fb = a.flows, b.flows
    assert fa.cats == fb.cats
    for col in ("cat_id", "flow_id", "src", "dst"):
        assert np.array_equal(getattr(fa, col), getattr(fb, col)), col


def _flow_rank(path: Path, rank: int, world: int) -> Path:
    """A small rank trace with args, a counter, [memory] events and a flow (its arrow bound on use)."""
    t = 1_700_000_000_000_000 + rank * 3
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for k in range(40):
        events += [
            {"ph": "X", "name": f"op{k % 5}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": t + 10 * k, "dur": 6,
             "args": {"k": k, "rank": rank}},
            {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": t + 10 * k + 2, "dur": 3,
             "args": {"correlation": k}},
            {"ph": "s", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": 1, "ts": t + 10 * k + 1},
            {"ph": "f", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 0, "tid": 7, "ts": t + 10 * k + 2, "bp": "e"},
            {"ph": "C", "name": "load", "pid": 1, "tid": 1, "ts": t + 10 * k, "args": {"v": k * rank}},
            {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": 1, "tid": 1, "ts": t + 10 * k,
             "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * k, "Bytes": 100 + rank,
                      "Total Allocated": (k + 1) * (100 + rank)}},
        ]  # fmt: skip
    doc = {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world, "backend": "gloo"}}
    path.write_text(json.dumps(doc))
    return path


def test_ranks_read_by_the_pool_are_the_trace_read_one_file_at_a_time(tmp_path, monkeypatch):
    files = [_flow_rank(tmp_path / f"rank-{r}.json", r, 5) for r in range(5)]
    assert all(isinstance(t._raw_args, RawSlices) for t in load_many(files, workers=2))  # from the children
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 2)
    pooled = load_traces(files)
    assert len(pooled.flows) > 0 and _children() == []
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 1)
    alone = load_traces(files)
    _same(pooled, alone)
    assert sorted({ln.rank for ln in pooled.lanes}) == [0, 1, 2, 3, 4]
    # Summaries read in the children alone: the same figures as the merged trace's.
    assert rank_job_summaries(files, workers=2) == rank_summaries(alone)
    # Files named one by one (`load_job`, as the window and `inspect A B` open them): the pool too.
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 2)
    _same(load_job([open_source(f) for f in files]), alone)
    assert _children() == []


@needs_template
def test_a_generated_job_read_by_the_pool_is_the_same_job(job):
    folder, _ = job
    files = _files(folder)
    loaded = load_many(files, workers=2)
    assert all(isinstance(t._raw_args, RawSlices) for t in loaded)  # each came back from its child
    pooled = merge.merge_traces(merge.as_ranks(loaded))
    alone = merge.merge_traces(merge.as_ranks([merge.load_source(p) for p in files]))
    _same(pooled, alone)
    assert rank_job_summaries(files, workers=2) == rank_summaries(alone)
    assert _children() == []


def test_a_broken_rank_is_one_error_naming_it_and_no_child_is_left(tmp_path):
    files = [_flow_rank(tmp_path / f"rank-{r}.json", r, 4) for r in range(4)]
    files[2].write_text(files[2].read_text()[:-300])  # cut short
    with pytest.raises(TraceFormatError) as err:
        load_many(files, workers=2)
    assert str(files[2]) in str(err.value) and str(files[0]) not in str(err.value)
    assert _children() == []
    with pytest.raises(TraceFormatError, match="rank-2.json"):
        rank_job_summaries(files, workers=2)
    assert _children() == []


def test_the_cli_says_a_broken_rank_in_one_error_line(tmp_path):
    import subprocess

    folder = tmp_path / "job"
    folder.mkdir()
    files = [_flow_rank(folder / f"rank-{r}.json", r, 3) for r in range(3)]
    files[1].write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "branchscope.app", "inspect", str(folder)], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:") and "rank-1.json" in lines[0], done.stderr


def test_a_cancelled_load_of_ranks_stops_every_child(tmp_path):
    files = [_flow_rank(tmp_path / f"rank-{r}.json", r, 6) for r in range(6)]
    seen: list[float] = []

    def progress(_phase: str, fraction: float) -> bool:
        seen.append(fraction)
        return fraction < 0.3  # stop once a third has arrived

    with pytest.raises(LoadCancelled):
        load_many(files, workers=2, progress=progress)
    assert seen and _children() == []


def test_a_child_that_dies_leaves_its_files_to_this_process(tmp_path, monkeypatch):
    files = [_flow_rank(tmp_path / f"rank-{r}.json", r, 6) for r in range(6)]
    real = merge._loaded_parts

    def dies_at_rank_2(path):
        if Path(path).name == "rank-2.json":
            os._exit(3)  # in the child: its share's later files never come
        return real(path)

    monkeypatch.setattr(merge, "_loaded_parts", dies_at_rank_2)
    loaded = load_many(files, workers=2)
    # Child 0 had ranks 0, 2, 4: rank 0 came from it, 2 and 4 were read here; child 1's all came.
    assert [isinstance(t._raw_args, RawSlices) for t in loaded] == [True, True, False, True, False, True]
    _same(merge.merge_traces(merge.as_ranks(loaded)), merge.merge_traces(merge.as_ranks([merge.load_source(p) for p in files])))
    assert _children() == []


def test_merging_keeps_each_ranks_order_and_depth_as_sorting_them_again_would(tmp_path):
    from branchscope.profiling.trace.model import build_trace

    files = [_flow_rank(tmp_path / f"rank-{r}.json", r, 3) for r in range(3)]
    files.append(SHARED_TRACES / "hta_ns_resolution_fwdbwd.pt.trace.json.gz")  # nested, 4 lanes, flows
    parts = merge.as_ranks([merge.load_source(p) for p in files if p.is_file()])
    merged = merge.merge_traces(parts)
    again = build_trace(  # the merged columns sorted and their depth computed from scratch
        path=merged.path, start_ns=merged.start_ns[::-1], dur_ns=merged.dur_ns[::-1], lane=merged.lane[::-1],
        name_id=merged.name_id[::-1], cat_id=merged.cat_id[::-1], names=merged.names, cats=merged.cats,
        lanes=merged.lanes, raw_args=[merged._raw_args[i] for i in range(len(merged))][::-1],
    )  # fmt: skip
    for col in ("start_ns", "dur_ns", "lane", "depth", "name_id", "cat_id", "lane_offsets"):
        assert np.array_equal(getattr(merged, col), getattr(again, col)), col
    assert merged.depth.max() > 0
    for i in np.linspace(0, len(merged) - 1, 40).astype(int).tolist():
        assert merged.event_args(i) == again.event_args(i)
    with pytest.raises(IndexError):
        merged._raw_args[len(merged)]


def test_a_result_that_cannot_be_sent_or_an_item_that_raises_is_none_and_the_child_goes_on():
    from branchscope.profiling.trace.rank_pool import forked_map

    def fn(x: int):
        if x == 1:
            return object()  # not a value the pipe carries
        if x == 3:
            raise ValueError("no")
        return {"x": x, "a": np.arange(x), "t": (x, "s")}

    got = forked_map(fn, list(range(6)), workers=2)
    assert got[1] is None and got[3] is None
    for x in (0, 2, 4, 5):
        assert got[x]["x"] == x and np.array_equal(got[x]["a"], np.arange(x)) and got[x]["t"] == (x, "s")
    assert _children() == []


def test_pieces_arrive_as_one_array_of_their_bytes():
    from branchscope.profiling.trace.rank_pool import Pieces, forked_map

    def fn(x: int):
        parts = [b"ab", memoryview(b"cde"), b"", bytes([x])]
        return {"p": Pieces(parts, 6), "after": np.array([x, x], dtype=np.int32)}

    got = forked_map(fn, [7, 9], workers=2)
    for x, value in zip((7, 9), got):
        assert value["p"].dtype == np.uint8 and value["p"].tobytes() == b"abcde" + bytes([x])
        assert value["after"].tolist() == [x, x]  # what follows the pieces is read where it starts
    assert _children() == []
