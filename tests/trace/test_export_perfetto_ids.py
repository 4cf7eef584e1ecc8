"""The Perfetto export where Perfetto's fields are narrower than a trace's: pids and tids beyond
int32 (64-bit thread ids) get fresh int32 ones that no other thread or process has, their real ones
kept in their names; times before 0 (Perfetto's are unsigned) are refused in one line, whichever
of events, allocations or counters has them; an export exported again carries its branch
annotation once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from branchscope.profiling.trace.export import export_trace
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.reader import load_trace
from tests.builders.export_traces import write_kineto_like

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

WIDE_TID, WIDE_PID = 2**32 + 5, 2**40


def _x(name: str, pid: int, tid: int, ts: str) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": "5.000"}


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _descriptors(path: Path) -> list:
    t = pb.Trace()
    t.ParseFromString(path.read_bytes())
    return [p.track_descriptor for p in t.packet if p.HasField("track_descriptor")]


def test_pids_and_tids_beyond_int32_are_lanes_of_their_own_named_by_their_real_ids(tmp_path):
    # tid 2**32 + 5 keeps the low bits 5 of the lane beside it; 2**31 - 1 is the first fresh id, taken already
    events = [_x("wide", 1, WIDE_TID, "10.000"), _x("narrow", 1, 5, "10.000"), _x("taken", 1, 2**31 - 1, "10.000"),
              _x("far", WIDE_PID, 1, "12.000"), _x("far2", 2**31, 1, "13.000")]  # fmt: skip
    source = load_trace(_write(tmp_path / "t.json", events))
    out = export_trace(source, tmp_path / "t.pftrace")
    back = load_trace(out)
    lane_of = {back.names[n]: back.lanes[ln] for n, ln in zip(back.name_id.tolist(), back.lane.tolist())}
    assert len(back.lanes) == len(source.lanes) == 5
    assert len({(ln.pid, ln.tid) for ln in back.lanes}) == 5
    assert lane_of["wide"].name == f"thread {WIDE_TID}" and lane_of["narrow"].tid == 5
    assert lane_of["taken"].tid == 2**31 - 1 and lane_of["wide"].tid != 2**31 - 1
    assert lane_of["far"].pid != lane_of["far2"].pid
    processes = {d.process.pid: d.process.process_name for d in _descriptors(out) if d.HasField("process")}
    assert sorted(processes.values()) == sorted(["", f"pid {2**31}", f"pid {WIDE_PID}"])
    assert all(-(2**31) <= p < 2**31 for p in processes)


def test_a_counter_or_allocation_of_a_wide_thread_is_on_that_threads_track(tmp_path):
    events = [_x("wide", 1, WIDE_TID, "10.000"), _x("other", 1, 5, "10.000"),
              {"ph": "C", "cat": "cpu_sample", "name": "s", "pid": 1, "tid": WIDE_TID, "ts": "11.000",
               "args": {"cpu_pct": 5.0}}]  # fmt: skip
    back = load_trace(export_trace(_write(tmp_path / "t.json", events), tmp_path / "t.pftrace"))
    (counter,) = back.counters
    wide = next(ln for ln in back.lanes if ln.name == f"thread {WIDE_TID}")
    assert (counter.pid, counter.tid) == (wide.pid, wide.tid) != (1, 5)


@pytest.mark.parametrize("kind", ["counter", "memory", "event"])
def test_times_before_0_anywhere_are_refused_in_one_line_and_kept_by_json(tmp_path, kind):
    events = [_x("a", 1, 1, "10.000")]
    early = {
        "counter": {"ph": "C", "cat": "cpu_sample", "name": "thread 1", "pid": 1, "tid": 1, "ts": "-3.000",
                    "args": {"cpu_pct": 5.0}},
        "memory": {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                   "ts": "-2.000", "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64, "Total Allocated": 64}},
        "event": _x("b", 1, 1, "-1.000"),
    }  # fmt: skip
    source = _write(tmp_path / "t.json", [*events, early[kind]])
    with pytest.raises(TraceFormatError, match="times before 0") as refused:
        export_trace(source, tmp_path / "t.pftrace")
    assert "\n" not in str(refused.value) and ".json" in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
    assert len(load_trace(export_trace(source, tmp_path / "t2.json"))) == len(load_trace(source))


def test_an_export_exported_again_carries_its_branch_annotation_once(tmp_path):
    first = load_trace(export_trace(write_kineto_like(tmp_path / "k.json"), tmp_path / "a.pftrace"))
    again = export_trace(first, tmp_path / "b.pftrace")
    t = pb.Trace()
    t.ParseFromString(again.read_bytes())
    names: dict[int, str] = {}
    keys = []
    for p in t.packet:
        names.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        e = p.track_event
        if p.HasField("track_event") and e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            keys.append([names.get(a.name_iid, a.name) for a in e.debug_annotations])
    assert [k.count("branchscope") for k in keys if "branchscope" in k] == [1]


def test_memory_while_writing_does_not_grow_by_python_objects_per_event(monkeypatch):
    """The BEGIN/END records are encoded a slice of the order at a time, each event's args read
    when it is written: the peak is the order's columns, not Python objects for every event
    (440 B/event before, the trace's whole args list and every record's varint held at once)."""
    import tracemalloc

    import numpy as np

    from branchscope.profiling.trace import export_perfetto
    from branchscope.profiling.trace.lane_table import Lane
    from branchscope.profiling.trace.model import build_trace

    n = 10_000
    rng = np.random.default_rng(0)
    trace = build_trace(
        path="many", start_ns=np.sort(rng.integers(0, 10**12, n)), dur_ns=rng.integers(0, 10**5, n),
        lane=rng.integers(0, 4, n).astype(np.int32), name_id=(np.arange(n) % 50).astype(np.int32),
        cat_id=np.zeros(n, np.int32), names=[f"op{k}" for k in range(50)], cats=["cpu_op"],
        lanes=[Lane(i, "cpu", 1, 10 + i, f"t{i}", "main") for i in range(4)],
        raw_args=[b'{"ph":"X","args":{"shape":[[3,4]],"id":%d}}' % i for i in range(n)],
    )  # fmt: skip
    _ = trace.depth, trace.end_ns, trace.flows
    # slices, joined chunks and the annotation cache small beside n, as they are beside a large trace
    for name, value in (("_SLICE", 512), ("_CHUNK", 256), ("_SEEN_MAX", 256)):
        monkeypatch.setattr(export_perfetto, name, value, raising=False)

    class Sink:
        size = 0

        def write(self, b: bytes) -> None:
            self.size += len(b)

    sink = Sink()
    tracemalloc.start()
    try:
        export_perfetto.write_perfetto(trace, sink)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sink.size > 40 * n and peak / n < 150
