"""Traces of very many lanes (issue 17): the reader builds lanes, depths and the analyses' per-lane
figures for all lanes at once, and they must be exactly what the former one-lane-at-a-time code
gave. The references here are that code, kept slow and simple; no test here times anything."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from branchscope.profiling import load_trace
from branchscope.profiling.trace import decode, depth, forked, kineto, reader
from branchscope.profiling.trace.analyses import (
    compute_runs_by_lane,
    concurrency,
    interop_occupancy,
    interop_pool_size,
    lane_busy_ns,
    lane_compute_runs,
    merged_intervals,
    merged_runs_by_lane,
    parallelism,
    pool_busy_share,
)
from branchscope.profiling.trace.flows import bind_flows
from branchscope.profiling.trace.lane_table import ROLE_ORDER, Lane, LaneTable
from branchscope.profiling.trace.model import Trace, build_trace
from branchscope.profiling.trace.run_info import RunInfo

# ---- the former per-lane code, as references ---------------------------------------------------


def reference_depth(start_ns: np.ndarray, dur_ns: np.ndarray, lane_offsets: np.ndarray) -> np.ndarray:
    """`compute_depth` as it was: one lane at a time (each as `depth.lane_depth` does it)."""
    out = np.zeros(start_ns.size, dtype=np.int32)
    end = start_ns + np.maximum(dur_ns, 1)
    for i in range(lane_offsets.size - 1):
        a, b = int(lane_offsets[i]), int(lane_offsets[i + 1])
        if b - a >= 2:
            out[a:b] = depth.lane_depth(start_ns[a:b], end[a:b])
    return out


def reference_busy(trace: Trace) -> list[int]:
    out = []
    for i in range(len(trace.lanes)):
        sl = trace.lane_slice(i)
        s, e = merged_intervals(trace.start_ns[sl], trace.end_ns[sl])
        out.append(int((e - s).sum()))
    return out


def _clipped(runs: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> int:
    s, e = runs
    return int(np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None).sum())


def reference_parallelism(trace: Trace, lo: int, hi: int) -> float:
    busy = sum(_clipped(lane_compute_runs(trace, ln.index), lo, hi) for ln in trace.lanes if ln.kind == "cpu")
    return float(busy) / float(hi - lo)


def reference_occupancy(trace: Trace) -> tuple[list[int], list[int]]:
    pool = [ln for ln in trace.lanes if ln.kind == "cpu" and ln.role == "interop"]
    occ = concurrency([lane_compute_runs(trace, ln.index) for ln in pool], interop_pool_size(trace))
    return occ.t_ns.tolist(), occ.value.tolist()


def reference_lanes(doc: dict[str, Any]) -> tuple[list[Lane], dict[tuple[Any, Any], int], list[tuple]]:
    """The reader's lanes as its former code made them, one (pid, tid) key at a time: the lanes, the
    {(pid, tid) as written: lane} map flows are bound with, and each complete event as (lane, start
    ns, dur ns, name), sorted."""
    events = doc["traceEvents"]
    complete = [
        e for e in events
        if e.get("ph") == "X" and (type(e.get("pid", 0)) is int or reader._real_id(e.get("pid", 0)) is not None)
    ]  # fmt: skip
    raw_keys: dict[tuple[Any, Any], int] = {}
    key_of_event = [raw_keys.setdefault((e.get("pid", 0), e.get("tid", 0)), len(raw_keys)) for e in complete]
    gpu_hits = [0] * len(raw_keys)
    for e, k in zip(complete, key_of_event):
        gpu_hits[k] += e.get("cat", "") in reader.GPU_CATEGORIES
    meta = [reader._WITH_ARGS_DECODER.decode(json.dumps(e).encode()) for e in events if e.get("ph") == "M"]
    process_labels, thread_names = reader._read_metadata_events(meta)
    info = RunInfo.parse(doc.get("branchscope"))

    synthetic: dict[str, int] = {}
    norm_of_key = [(reader._real_id(p), reader._lane_tid(t, synthetic)) for p, t in raw_keys]
    keys_of_norm: dict[tuple, list[int]] = {}
    for k, norm in enumerate(norm_of_key):
        keys_of_norm.setdefault(norm, []).append(k)
    stream_tid_keys = {
        k for k, (_, t) in enumerate(raw_keys) if isinstance(t, str) and kineto.STREAM_TID.match(t.strip())
    }
    cpu_label_pids = {pid for pid, label in process_labels.items() if label.strip().upper() == "CPU"}
    own_tid_pids = {pid for pid, tid in keys_of_norm if pid == tid}
    specs = []
    for (pid, tid), keys in keys_of_norm.items():
        label = process_labels.get(pid, "")
        gpu_label = kineto.GPU_PROCESS_LABEL.search(label)
        is_gpu = any(gpu_hits[k] > 0 or k in stream_tid_keys for k in keys) or (
            gpu_label is not None and pid not in cpu_label_pids
        )
        if is_gpu:
            device = int(gpu_label.group(1)) if gpu_label else max(pid, 0)
            specs.append(((1, device, tid, 0), keys, "gpu", pid, tid, f"stream {tid}", "stream", device))
        else:
            tnames = thread_names.get((pid, tid), [])
            role = reader._role(pid, tid, tnames, info, pid in own_tid_pids)
            name = reader._best_name(tnames, role, tid)
            specs.append(((0, pid, ROLE_ORDER.index(role), tid), keys, "cpu", pid, tid, name, role, -1))
    specs.sort(key=lambda s: s[0])
    lanes, lane_of_key = [], {}
    for index, (_, keys, kind, pid, tid, name, role, device) in enumerate(specs):
        lanes.append(Lane(index=index, kind=kind, pid=pid, tid=tid, name=name, role=role, device=device))
        for k in keys:
            lane_of_key[k] = index
    lookup = {key: lane_of_key[k] for key, k in raw_keys.items()}
    rows = sorted(
        (lane_of_key[k], e["ts"] * 1000, max(e.get("dur", 0), 0) * 1000, e["name"])
        for e, k in zip(complete, key_of_event)
    )
    return lanes, lookup, rows


def check_against_references(trace: Trace) -> None:
    """Every per-lane figure of `trace` against its former one-lane-at-a-time computation."""
    counts = np.bincount(trace.lane, minlength=len(trace.lanes))
    assert trace.lane_offsets.tolist() == [0, *np.cumsum(counts).tolist()]
    assert np.array_equal(trace.depth, reference_depth(trace.start_ns, trace.dur_ns, trace.lane_offsets))
    assert lane_busy_ns(trace).tolist() == reference_busy(trace)
    every = np.arange(len(trace.lanes))
    run_lane, starts, ends = compute_runs_by_lane(trace, every)
    for i in range(len(trace.lanes)):
        s, e = lane_compute_runs(trace, i)
        mine = run_lane == i
        assert starts[mine].tolist() == s.tolist() and ends[mine].tolist() == e.tolist(), i
    if len(trace):
        lo, hi = trace.span()
        for window in ((lo, hi), (lo + (hi - lo) // 3, hi - (hi - lo) // 4)):
            if window[1] > window[0]:
                assert parallelism(trace, window) == reference_parallelism(trace, *window)
    occ = interop_occupancy(trace)
    assert (occ.t_ns.tolist(), occ.value.tolist()) == reference_occupancy(trace)


# ---- a loaded trace of thousands of lanes -----------------------------------------------------------


def many_lane_doc(seed: int, n_lanes: int = 3000) -> dict[str, Any]:
    """Mostly lanes of one event each, as in issue 17, and among them lanes of nested events (some
    of them not nesting cleanly), of waits, GPU streams, named and pool threads, threads written as
    strings, "stream N" and a pseudo process."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_labels", "pid": 2, "tid": 0, "args": {"labels": "GPU 1"}},
        {"ph": "M", "name": "process_labels", "pid": 3, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "pt_main_thread"}},
    ]
    t0 = 1_000_000
    for k in range(n_lanes):
        pid = 1 if k % 97 else 3
        tid: Any = 1000 + k
        if k % 11 == 0:
            tid = str(tid)  # the same thread as the int would be
        elif k % 13 == 0:
            tid = -tid  # a wrapped 32-bit tid
        if k % 50 == 0:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid if type(tid) is int else int(tid),
                           "args": {"name": f"thread {k} (PTThreadPool)"}})  # fmt: skip
        t = t0 + rng.randrange(0, 5000)
        kind = k % 10
        if kind == 0:  # nested: a step, ops, a wait inside
            events += [
                {"ph": "X", "name": "step 1", "pid": pid, "tid": tid, "ts": t, "dur": 100},
                {"ph": "X", "name": "aten::linear", "pid": pid, "tid": tid, "ts": t + 10, "dur": 40},
                {"ph": "X", "name": "aten::mm", "pid": pid, "tid": tid, "ts": t + 12, "dur": 20},
                {"ph": "X", "name": "aten::wait", "pid": pid, "tid": tid, "ts": t + 15, "dur": 5},
                {"ph": "X", "name": "aten::relu", "pid": pid, "tid": tid, "ts": t + 60, "dur": 30},
                {"ph": "X", "name": "aten::add", "pid": pid, "tid": tid, "ts": t + 60, "dur": 0},
            ]
        elif kind == 1:  # a child ending after its parent (rounded times): the stack decides (row 0, not 1:
            # the child holds its place no longer than its parent)
            events += [
                {"ph": "X", "name": "aten::conv2d", "pid": pid, "tid": tid, "ts": t, "dur": 50},
                {"ph": "X", "name": "aten::convolution", "pid": pid, "tid": tid, "ts": t + 5, "dur": 47},
                {"ph": "X", "name": "aten::_conv", "pid": pid, "tid": tid, "ts": t + 51, "dur": 9},
            ]
        elif kind == 2:  # a GPU stream of a labelled process, and one of the same number on the same
            # device in an unlabelled process (pid 1: device 1): the first seen goes first
            events.append({"ph": "X", "name": "kernel", "cat": "kernel", "pid": 2, "tid": 7000 + k, "ts": t, "dur": 9})
            if k % 4 == 2:
                events.append({"ph": "X", "name": "kernel", "cat": "kernel", "pid": 1, "tid": 7000 + k, "ts": t,
                               "dur": 9})  # fmt: skip
        elif kind == 3 and k % 3 == 0:  # a legacy stream tid
            events.append({"ph": "X", "name": "Memcpy", "cat": "Memcpy", "pid": 0, "tid": f"stream {k}", "ts": t,
                           "dur": 3})  # fmt: skip
        else:
            events.append({"ph": "X", "name": f"aten::op{k % 7}", "cat": "cpu_op", "pid": pid, "tid": tid, "ts": t,
                           "dur": rng.randrange(0, 30)})  # fmt: skip
        if k % 400 == 0:
            events.append({"ph": "X", "name": "span", "pid": "Spans", "tid": "x", "ts": t, "dur": 1})
        if k % 11 == 0:  # the same thread written as an int too
            events.append({"ph": "X", "name": "aten::add", "pid": pid, "tid": int(tid), "ts": t + 300, "dur": 2})
    events.append({"ph": "X", "name": "main op", "pid": 1, "tid": 1, "ts": t0, "dur": 7})
    # Threads written as ints come packed in one int64 a chunk of events at a time (`CHUNK` here),
    # the others interned as written: those are gathered in three places, so that most chunks
    # take the first way, some the other, a few both.
    plain = [e for e in events if type(e.get("pid")) is int and type(e.get("tid")) is int]
    odd = [e for e in events if not (type(e.get("pid")) is int and type(e.get("tid")) is int)]
    rng.shuffle(plain)
    rng.shuffle(odd)
    a, b, third = len(plain) // 3, 2 * len(plain) // 3, len(odd) // 3
    events = plain[:a] + odd[:third] + plain[a:b] + odd[third : 2 * third] + plain[b:] + odd[2 * third :]
    return {"traceEvents": events}


#: Events decoded at a time in these tests: small, so that a few thousand events make many chunks.
CHUNK = 256


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_CHUNK", CHUNK)


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_thousands_of_lanes_load_as_the_one_lane_at_a_time_code_made_them(tmp_path: Path) -> None:
    doc = many_lane_doc(seed=1)
    trace = load_trace(_write(tmp_path / "many.json", doc))
    lanes, _, rows = reference_lanes(doc)
    assert len(trace.lanes) > 2900
    assert isinstance(trace.lanes, LaneTable)
    assert list(trace.lanes) == lanes
    got = sorted(
        (int(trace.lane[i]), int(trace.start_ns[i]), int(trace.dur_ns[i]), trace.event_name(i)) for i in range(len(trace))
    )
    assert got == rows
    # What the mix holds: nested lanes, misnested ones redone with the stack, GPU streams, roles.
    assert trace.depth.max() >= 3
    conv = trace.names.index("aten::_conv")
    assert set(trace.depth[trace.name_id == conv].tolist()) == {0}
    gpu = [(ln.device, ln.tid) for ln in lanes if ln.kind == "gpu"]
    assert len(set(gpu)) < len(gpu)  # streams tied on (device, stream)
    assert {ln.kind for ln in lanes} == {"cpu", "gpu"}
    assert {"main", "interop", "other", "stream"} <= {ln.role for ln in lanes}
    check_against_references(trace)


def test_small_and_big_lanes_take_the_same_depths(tmp_path: Path) -> None:
    """Lanes from BIG_LANE_EVENTS events on are done one by one, smaller ones together: whichever
    way a lane goes, its depths are the same."""
    doc = many_lane_doc(seed=2, n_lanes=400)
    path = _write(tmp_path / "t.json", doc)
    expected = load_trace(path)
    for big in (2, 3, 6, 1 << 30):
        with mock.patch.object(depth, "BIG_LANE_EVENTS", big):
            trace = load_trace(path)
        assert np.array_equal(trace.depth, expected.depth), big
        assert np.array_equal(trace.depth, reference_depth(trace.start_ns, trace.dur_ns, trace.lane_offsets))


def test_a_lane_spanning_more_than_int64_from_its_first_start_keeps_its_depths() -> None:
    """Its ends taken from its first start wrap past 2^63: the lanes are then sorted by (lane, time),
    as for lanes too wide to lift (found by a random test against the per-lane code: [-1, -1])."""
    start = np.array([-4533544459761278525, 1976988000560982873], dtype=np.int64)
    dur = np.array([2022509300404538106, 3283857152347593520], dtype=np.int64)
    offsets = np.array([0, 2], dtype=np.int64)
    for big in (2, 1 << 30):  # one lane alone, or among the small lanes done together
        with mock.patch.object(depth, "BIG_LANE_EVENTS", big):
            assert depth.compute_depth(start, dur, offsets).tolist() == reference_depth(start, dur, offsets).tolist() == [0, 0]


def test_the_forked_half_gives_the_same_lanes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads written as strings in both halves: the child's keys join this process's."""
    path = _write(tmp_path / "t.json", many_lane_doc(seed=3, n_lanes=600))
    monkeypatch.setattr(decode, "PARALLEL_MIN_EVENTS", 1 << 62)
    alone = load_trace(path)
    monkeypatch.setattr(decode, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(forked, "cores", lambda: 2)
    both = load_trace(path)
    assert both.lanes == alone.lanes
    for column in ("start_ns", "dur_ns", "lane", "depth", "lane_offsets"):
        assert np.array_equal(getattr(both, column), getattr(alone, column)), column


def test_flows_bind_through_the_threads_as_written(tmp_path: Path) -> None:
    """A flow finds its lane by (pid, tid) exactly as its events wrote them, as before."""
    events: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for k in range(300):
        tid: Any = str(100 + k) if k % 3 == 0 else 100 + k
        events.append({"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": tid,
                       "ts": 10 * k, "dur": 5})  # fmt: skip
        events.append({"ph": "X", "name": "kernel", "cat": "kernel", "pid": 2, "tid": 7, "ts": 10 * k + 3, "dur": 4})
        # Every fourth launch's flow writes its tid the other way: not a thread seen as such, unbound.
        ftid = (int(tid) if isinstance(tid, str) else str(tid)) if k % 4 == 0 else tid
        flows.append({"ph": "s", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": ftid, "ts": 10 * k + 1})
        flows.append({"ph": "f", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 2, "tid": 7, "ts": 10 * k + 3,
                      "bp": "e"})  # fmt: skip
    doc = {"traceEvents": events + flows}
    trace = load_trace(_write(tmp_path / "f.json", doc))
    lanes, lookup, _ = reference_lanes(doc)
    assert list(trace.lanes) == lanes
    expected = bind_flows(trace, reader.flow_point_columns([json.dumps(f).encode() for f in flows], lookup))
    got = trace.flows
    assert got.src.tolist() == expected.src.tolist() and got.dst.tolist() == expected.dst.tolist()
    assert 0 < len(got) < 300


def test_lane_table_acts_as_the_list_of_its_lanes(tmp_path: Path) -> None:
    doc = many_lane_doc(seed=4, n_lanes=200)
    trace = load_trace(_write(tmp_path / "t.json", doc))
    lanes, _, _ = reference_lanes(doc)
    table = trace.lanes
    assert isinstance(table, LaneTable) and len(table) == len(lanes)
    first = table[5]
    assert first == lanes[5] and table[-1] == lanes[-1] and table[np.int32(7)] == lanes[7]
    assert table[2:9:3] == lanes[2:9:3]
    assert table == lanes and lanes == table and table != lanes[:-1]
    assert list(table)[5] is first  # a lane once made stays the same object
    assert table.index(lanes[42]) == 42 and lanes[42] in table
    with pytest.raises(IndexError):
        table[len(lanes)]
    for kind in (None, "cpu", "gpu"):
        for role in (None, *ROLE_ORDER):
            expected = [ln for ln in lanes if (kind is None or ln.kind == kind) and (role is None or ln.role == role)]
            assert trace.lanes_of(kind, role) == expected
    assert [trace.lane_event_count(i) for i in range(len(lanes))] == np.diff(trace.lane_offsets).tolist()
    assert trace.lane_pids.tolist() == [ln.pid for ln in lanes] and trace.lane_tids.tolist() == [ln.tid for ln in lanes]
    assert trace.lane_rank_set == {None}


def test_threads_past_int64_keep_their_ids(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {"ph": "X", "name": "a", "pid": 1, "tid": 2**64 - 1, "ts": 1, "dur": 5},
            {"ph": "X", "name": "b", "pid": 1, "tid": 2**64 - 1, "ts": 2, "dur": 1},
            {"ph": "X", "name": "c", "pid": 1, "tid": "18446744073709551614", "ts": 3, "dur": 1},
            {"ph": "X", "name": "d", "pid": 1, "tid": 5, "ts": 3, "dur": 1},
            {"ph": "X", "name": "e", "pid": 2**63, "tid": 2**63, "ts": 3, "dur": 1},
        ]
    }
    trace = load_trace(_write(tmp_path / "big.json", doc))
    lanes, _, rows = reference_lanes(doc)
    assert list(trace.lanes) == lanes
    assert [ln.tid for ln in trace.lanes] == [5, 2**64 - 2, 2**64 - 1, 2**63]
    assert trace.depth.tolist() == [0, 0, 0, 1, 0]
    check_against_references(trace)


# ---- random small traces -------------------------------------------------------------------------

_NAMES = ["aten::mm", "aten::wait", "step 1", "cudaLaunchKernel", "annotation"]
_CATS = ["cpu_op", "cuda_runtime", "kernel", "user_annotation"]


def _trace_of(rows: list[tuple[int, int, int, int]], n_lanes: int, roles: list[str]) -> Trace:
    lane = np.array([r[0] for r in rows], dtype=np.int32)
    return build_trace(
        path="random",
        start_ns=np.array([r[1] for r in rows], dtype=np.int64),
        dur_ns=np.array([r[2] for r in rows], dtype=np.int64),
        lane=lane,
        name_id=np.array([r[3] for r in rows], dtype=np.int32),
        cat_id=np.array([1 if r[3] == 3 else 0 for r in rows], dtype=np.int32),
        names=_NAMES,
        cats=_CATS,
        lanes=[
            Lane(i, "gpu" if roles[i] == "stream" else "cpu", 1, i, f"t{i}", roles[i])  # type: ignore[arg-type]
            for i in range(n_lanes)
        ],
    )


_times = st.one_of(st.integers(0, 60), st.integers(-(2**60), 2**60))
_rows = st.lists(
    st.tuples(st.integers(0, 6), _times, st.one_of(st.integers(0, 25), st.integers(0, 2**59)), st.integers(0, 4)),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    rows=_rows,
    roles=st.lists(st.sampled_from(["main", "interop", "other", "stream"]), min_size=7, max_size=7),
    big=st.sampled_from([2, 3, 5, 2048]),
)
def test_random_traces_match_the_per_lane_references(rows: list, roles: list[str], big: int) -> None:
    with mock.patch.object(depth, "BIG_LANE_EVENTS", big):
        trace = _trace_of(rows, 7, roles)
    check_against_references(trace)
    if len(trace):
        lo, hi = trace.span()
        share = pool_busy_share(trace, (lo, hi))
        if share is not None:
            pool = [ln for ln in trace.lanes if ln.kind == "cpu" and ln.role == "interop"]
            busy = sum(_clipped(lane_compute_runs(trace, ln.index), lo, hi) for ln in pool)
            assert share == float(busy) / (float(interop_pool_size(trace)) * float(hi - lo))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 40), st.integers(0, 15)), max_size=40))
def test_depths_and_busy_runs_of_clustered_lanes(rows: list[tuple[int, int, int]]) -> None:
    """Nesting-heavy lanes (short times, many overlaps) through both depth paths and the merged runs."""
    rows.sort()
    lane = np.array([r[0] for r in rows], dtype=np.int32)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    dur = np.array([r[2] for r in rows], dtype=np.int64)
    order = depth.compute_lane_order(lane, start, dur)
    lane, start, dur = lane[order], start[order], dur[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(lane, minlength=5))]).astype(np.int64)
    for big in (2, 4, 2048):
        with mock.patch.object(depth, "BIG_LANE_EVENTS", big):
            assert np.array_equal(depth.compute_depth(start, dur, offsets), reference_depth(start, dur, offsets))
    run_lane, s, e = merged_runs_by_lane(lane, start, start + dur)
    for i in range(5):
        rs, re = merged_intervals(start[offsets[i] : offsets[i + 1]], (start + dur)[offsets[i] : offsets[i + 1]])
        assert s[run_lane == i].tolist() == rs.tolist() and e[run_lane == i].tolist() == re.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(
        st.tuples(
            # Ids at the edges of 32 bits too: threads are packed in one int64 when both fit.
            st.sampled_from([1, 2, "2", " 3", "Spans", -(2**31), 2**31 - 1]),
            st.sampled_from([1, 2, 3, "3", -4, "stream 7", "x", "y", 2**64 - 1, "12", -(2**31), 2**31, 2**31 - 1]),
            st.sampled_from(["cpu_op", "kernel", "cuda_runtime"]),
            st.integers(0, 50),
            st.integers(0, 20),
        ),
        min_size=1,
        max_size=25,
    ),
    labels=st.dictionaries(
        st.sampled_from([1, 2, 3]), st.sampled_from(["GPU 0", "GPU 1", "GPU 3", "CPU", "host"]), max_size=2
    ),
    names=st.dictionaries(
        st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 3, 12])),
        st.sampled_from(["PTThreadPool", "pt_main_thread", "autograd thread", "worker", ""]),
        max_size=3,
    ),
    roles=st.one_of(
        st.none(), st.fixed_dictionaries({"main_tid": st.sampled_from([1, 2]), "interop_tids": st.just([3])})
    ),
)
def test_random_threads_make_the_lanes_the_former_code_made(
    tmp_path: Path, events: list, labels: dict, names: dict, roles: dict | None
) -> None:
    trace_events: list[dict[str, Any]] = [
        {"ph": "X", "name": f"e{k}", "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        for k, (pid, tid, cat, ts, dur) in enumerate(events)
    ]
    trace_events += [
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}}
        for pid, label in labels.items()
    ]
    trace_events += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        for (pid, tid), name in names.items()
    ]
    doc: dict[str, Any] = {"traceEvents": trace_events}
    if roles is not None:
        doc["branchscope"] = {**roles, "intra_tids": []}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    lanes, _, rows = reference_lanes(doc)
    assert list(trace.lanes) == lanes
    got = sorted(
        (int(trace.lane[i]), int(trace.start_ns[i]), int(trace.dur_ns[i]), trace.event_name(i)) for i in range(len(trace))
    )
    assert got == rows
