"""A job of many ranks opened with every rank summarised and only the ranks in view loaded
(`profiling/trace/rank_job.py`): the job's figures and collectives are those of every rank loaded
whole, the ranks loaded are on the job's clock whichever they are, the ranks that stand out are
loaded first, and a broken or cancelled job leaves no child."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from branchscope.profiling.trace import rank_job
from branchscope.profiling.trace.collectives import collective_events, collectives_json
from branchscope.profiling.trace.merge import FILES_PHASE, load_traces
from branchscope.profiling.trace.model import LoadCancelled, Trace, TraceFormatError
from branchscope.profiling.trace.rank_job import job_of, open_rank_job, open_view
from branchscope.profiling.trace.ranks import figures_json, rank_figures, with_lanes
from tests.builders.ranks import write_rank_job
from tests.trace.test_collectives import rpc
from tests.trace.test_reader_parallel import _children, _earlier_children  # noqa: F401 (its autouse fixture too)

RANKS = 12
SLOW = {5: {1: 400, 2: 300}, 9: {3: 250}}
HEAVY = (7, 8 << 20)


@pytest.fixture(autouse=True)
def _no_jobs_kept(monkeypatch):
    monkeypatch.setattr(rank_job, "_JOBS", type(rank_job._JOBS)())


def _job_folder(folder: Path) -> Path:
    """A 12-rank job: stragglers planted on ranks 5 and 9, rank 7 heavy; each rank's clock its own
    (`baseTimeNanoseconds` 1 µs later a rank) and an all-reduce per step, Seq'd, arriving later on
    later ranks, so the collectives have a skew to find."""
    write_rank_job(folder, RANKS, steps=4, slow=SLOW, heavy=HEAVY)
    for r in range(RANKS):
        path = folder / f"rank-{r}.json"
        doc = json.loads(path.read_text())
        doc["baseTimeNanoseconds"] += r * 1000
        pid = 1000 + r
        doc["traceEvents"] += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": pid, "ts": 10_000 + 100 * s + r,
             "dur": 40, "args": rpc(s)}
            for s in range(4)
        ]  # fmt: skip
        path.write_text(json.dumps(doc))
    return folder


@pytest.fixture
def files(tmp_path) -> list[Path]:
    folder = _job_folder(tmp_path / "job")
    return [folder / f"rank-{r}.json" for r in range(RANKS)]


def _rank_events(trace: Trace, rank: int) -> list[tuple[str, int, int]]:
    lanes = np.array([ln.rank == rank for ln in trace.lanes])
    idx = np.flatnonzero(lanes[trace.lane])
    return sorted((trace.event_name(i), int(trace.start_ns[i]), int(trace.dur_ns[i])) for i in idx.tolist())


def test_the_jobs_figures_and_collectives_are_those_of_every_rank_loaded_whole(files):
    whole = load_traces(files)
    job = open_rank_job(files, workers=2)
    assert job.ranks == tuple(range(RANKS)) and list(job.paths) == files
    want, got = figures_json(rank_figures(whole)), figures_json(job.figures)
    assert got == want
    assert {(s.step, s.rank) for s in job.figures.stragglers if s.excess_ns > 0} >= {("ProfilerStep#1", 5), ("ProfilerStep#3", 9)}
    assert job.figures.heaviest is not None and job.figures.heaviest.rank == 7
    coll = collectives_json(job.collectives, origin_ns=job.origin_ns)
    assert coll == collectives_json(whole)
    assert coll is not None and coll["count"] == 4 and coll["matched_by_seq"] == 4
    assert coll["worst"][0]["skew_us"] == RANKS - 1 + (RANKS - 1) * 1.0  # arrivals r µs apart + clocks 1 µs apart


def test_ranks_loaded_are_on_the_jobs_clock_whichever_they_are(files):
    whole = load_traces(files)
    job = open_rank_job(files, workers=2)
    assert job.origin_ns == whole.span()[0]
    part = job.load([9, 3], workers=2)
    assert job_of(part) is job and job.loaded(part) == [3, 9] and job.view == [9, 3]
    for r in (3, 9):
        assert _rank_events(part, r) == _rank_events(whole, r)
    assert {ln.rank for ln in part.lanes} == {3, 9}
    lanes = with_lanes(job.figures, part).first_lane
    assert [part.lanes[int(lanes[r])].rank for r in (3, 9)] == [3, 9]
    assert all(lanes[r] == -1 for r in range(RANKS) if r not in (3, 9))
    alone = job.load([11], workers=1)
    assert _rank_events(alone, 11) == _rank_events(whole, 11)
    assert job_of(whole) is None


def test_ranks_held_are_merged_again_not_read_again_while_their_trace_lives(files, monkeypatch):
    import gc

    job = open_rank_job(files, workers=2)
    read: list[list[str]] = []
    real = rank_job.load_many
    monkeypatch.setattr(rank_job, "load_many", lambda paths, **kw: read.append([p.name for p in paths]) or real(paths, **kw))
    first = job.load([3, 9])
    second = job.load([9, 5])
    assert read == [["rank-3.json", "rank-9.json"], ["rank-5.json"]]
    assert job.loaded(second) == [5, 9] and _rank_events(second, 9) == _rank_events(first, 9)
    del first, second
    gc.collect()
    job.load([9])  # the traces gone: read again, nothing held by the job itself
    assert read[-1] == ["rank-9.json"]


def test_the_ranks_that_stand_out_are_loaded_first_and_the_least_recent_dropped(files):
    job = open_rank_job(files, workers=2)
    first = job.first_view(4)
    assert len(first) == 4 and {5, 7} <= set(first) and first == sorted(first)
    assert job.first_view(2) == sorted({7, max(job.figures.stragglers, key=lambda s: s.excess_ns).rank})
    job.load(first, workers=2)
    assert job.wanted(first[1]) == [first[0], *first[2:], first[1]]
    job.view = [0, 1, 2, 3]
    assert job.wanted(10) == [1, 2, 3, 10]
    assert job.wanted(2) == [0, 1, 3, 2]
    with pytest.raises(ValueError, match="no rank 99"):
        job.wanted(99)


def test_the_window_opens_a_small_job_whole_and_a_large_one_in_view(files, tmp_path):
    small = open_view(files[:8])
    assert job_of(small) is None and {ln.rank for ln in small.lanes} == set(range(8))
    seen: list[tuple[str, float]] = []
    large = open_view(files, progress=lambda phase, f: seen.append((phase, f)) or True)
    job = job_of(large)
    assert job is not None and len(job) == RANKS
    assert job.loaded(large) == job.first_view() and len(job.loaded(large)) == rank_job.IN_VIEW
    fractions = [f for phase, f in seen if phase == FILES_PHASE]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert fractions[RANKS - 1] == pytest.approx(RANKS / (RANKS + rank_job.IN_VIEW))
    # Opened again: the job kept, not summarised again; a file changed: summarised again.
    assert job_of(open_view(files)) is job
    files[0].write_text(files[0].read_text().replace('"dur": 1000', '"dur": 1001', 1))
    assert job_of(open_view(files)) is not job


def test_a_collective_of_the_ranks_in_view_says_the_waits_of_every_rank(files):
    from branchscope.widgets.event_info import wait_rows

    job = open_rank_job(files, workers=2)
    part = job.load([2, 5])
    i = next(k for k in range(len(part)) if part.event_name(k) == "record_param_comms")
    coll, c = job.collective_of(part, i)
    assert int(coll.rank_count[c]) == RANKS and int(coll.last_rank[c]) == RANKS - 1
    (title, text), = wait_rows(part, i)
    assert title == f"Waits (all {RANKS} ranks)" and "rank 11 arrived last (skew 22 µs)" in text
    assert "rank 0 waited 22 µs" in text and "… and 3 more ranks" in text
    assert job.collective_of(part, next(k for k in range(len(part)) if part.event_name(k) == "aten::mm")) is None


def test_only_the_collective_events_are_kept_of_a_rank(files):
    trace = load_traces(files[:1])
    small = collective_events(trace)
    assert set(small.names[i] for i in small.name_id.tolist()) == {"record_param_comms"} and len(small) == 4
    assert small.event_args(0)["Seq"] == 0 and small.lanes == trace.lanes


def test_a_broken_rank_is_one_error_naming_it_and_a_cancelled_job_leaves_no_child(files):
    files[4].write_text(files[4].read_text()[:-200])
    with pytest.raises(TraceFormatError, match="rank-4.json"):
        open_rank_job(files, workers=2)
    assert _children() == []
    files[4].unlink()
    with pytest.raises(LoadCancelled):
        open_rank_job([f for f in files if f.exists()], workers=2, progress=lambda _p, f: f < 0.3)
    assert _children() == []


def test_other_jobs_of_many_ranks_open_in_view_too(tmp_path):
    """A distributed run's folder (every rank's file named trace.json.gz, ranks from run.json's
    order) and allocator snapshots (memory, no lanes: the ranks loaded are those whose memory is)."""
    import pickle

    from branchscope.app.runs import entry_for_path
    from tests.builders.runs import write_run_json, write_small_trace
    from tests.builders.snapshots import two_gpu_snapshot

    out, ranks = tmp_path / "D", []
    for r in range(10):
        (out / f"rank-{r}").mkdir(parents=True)
        write_small_trace(out / f"rank-{r}" / "trace.json.gz", "fork")
        ranks.append({"rank": r, "pid": 100 + r, "device": "cpu", "trace": f"rank-{r}/trace.json.gz"})
    write_run_json(out, mode="fork", interop=2, intra=1, nproc=10, world_size=10, model="demo twin-mm",
                   source="demo", ranks=ranks, trace="rank-0/trace.json.gz", complete=True)  # fmt: skip
    trace = open_view(list(entry_for_path(out).paths))
    job = job_of(trace)
    assert job is not None and job.ranks == tuple(range(10)) and job.loaded(trace) == [0, 1, 2, 3]
    assert {ln.rank for ln in trace.lanes} == {0, 1, 2, 3} and job.figures.steps == ["step 0", "step 1"]
    snaps = []
    for r in range(10):
        snaps.append(tmp_path / f"snapshot_rank{r}.pickle")
        snaps[-1].write_bytes(pickle.dumps(two_gpu_snapshot()))
    trace = open_view(snaps)
    job = job_of(trace)
    assert job is not None and len(job) == 10 and not trace.lanes and job.loaded(trace) == [0, 1, 2, 3]
    assert sorted({m.rank for m in trace.memory}) == [0, 1, 2, 3] and (job.figures.memory_peak > 0).all()
