"""The Perfetto protobuf reader (`perfetto*` modules) through `load_trace` and `open_source`: each
part of the format it reads, on small traces built here packet by packet with Perfetto's protos."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.perfetto_args import PerfettoArgs
from branchscope.profiling.trace.reader import load_trace
from branchscope.profiling.trace.sources import RANK_TRACES, load_job, open_source
from tests.builders.perfetto_traces import annotate

B, E, INSTANT, C = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
PID, TID, GPU_PID = 100, 101, 0


class Writer:
    """A trace built packet by packet on sequence 1."""

    def __init__(self) -> None:
        self.trace = pb.Trace()

    def packet(self, ts: int | None = None, seq: int = 1, **fields: Any) -> Any:
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = seq
        if ts is not None:
            p.timestamp = ts
        for k, v in fields.items():
            setattr(p, k, v)
        return p

    def thread(self, uuid: int, pid: int, tid: int, name: str = "") -> None:
        d = self.packet().track_descriptor
        d.uuid, d.thread.pid, d.thread.tid = uuid, pid, tid
        if name:
            d.thread.thread_name = name

    def process(self, uuid: int, pid: int, name: str = "", labels: tuple[str, ...] = ()) -> None:
        d = self.packet().track_descriptor
        d.uuid, d.process.pid = uuid, pid
        if name:
            d.process.process_name = name
        d.process.process_labels.extend(labels)

    def custom(self, uuid: int, parent: int, name: str, counter: bool = False, description: str = "") -> None:
        d = self.packet().track_descriptor
        d.uuid, d.parent_uuid, d.name = uuid, parent, name
        if description:
            d.description = description
        if counter:
            d.counter.SetInParent()

    def event(self, ts: int, kind: int, track: int | None, name: str = "", cat: str = "", seq: int = 1, **args: Any) -> Any:
        p = self.packet(ts, seq)
        te = p.track_event
        te.type = kind
        if track is not None:
            te.track_uuid = track
        if name:
            te.name = name
        if cat:
            te.categories.append(cat)
        for k, v in args.items():
            annotate(te, k, v)
        return te

    def slice(self, ts: int, dur: int, track: int, name: str, cat: str = "cpu_op", **args: Any) -> Any:
        te = self.event(ts, B, track, name, cat, **args)
        self.event(ts + dur, E, track)
        return te

    def write(self, path: Path, gzipped: bool = False) -> Path:
        data = self.trace.SerializeToString()
        path.write_bytes(gzip.compress(data) if gzipped else data)
        return path


def events_of(trace: Any) -> list[tuple[int, int, str, int, int]]:
    """(pid, tid, name, start, dur) of every event, sorted."""
    lanes = trace.lanes
    return sorted(
        (lanes[int(ln)].pid, lanes[int(ln)].tid, trace.names[int(n)], int(s), int(d))
        for ln, n, s, d in zip(trace.lane, trace.name_id, trace.start_ns, trace.dur_ns)
    )


def test_nested_slices_on_a_thread_track_with_args_read_only_when_asked(tmp_path: Path) -> None:
    w = Writer()
    w.process(1, PID, "python")
    w.thread(2, PID, TID, "pt_main_thread")
    w.event(1_001, B, 2, "forward", "user_annotation", step=3, ok=True, ratio=0.5, shape="[2, 3]")
    w.slice(1_101, 51, 2, "aten::mm", "cpu_op")
    w.event(2_003, E, 2)
    w.event(2_100, E, 2)  # an end with nothing open: dropped
    w.event(3_001, B, 2, "never ended")
    w.slice(2_999, 1, 2, "last")
    trace = load_trace(w.write(tmp_path / "t.pftrace"))
    assert events_of(trace) == [
        (PID, TID, "aten::mm", 1_101, 51), (PID, TID, "forward", 1_001, 1_002),
        (PID, TID, "last", 2_999, 1), (PID, TID, "never ended", 3_001, 0),
    ]  # fmt: skip
    assert [ln.name for ln in trace.lanes] == ["pt_main_thread"]
    assert isinstance(trace._raw_args, PerfettoArgs)  # not read at load
    forward = int(np.flatnonzero(np.array(trace.names)[trace.name_id] == "forward")[0])
    assert trace.event_args(forward) == {"step": 3, "ok": True, "ratio": 0.5, "shape": "[2, 3]"}
    assert trace.cats[int(trace.cat_id[forward])] == "user_annotation"


def test_interned_names_categories_and_annotations_follow_the_sequences_incremental_state(tmp_path: Path) -> None:
    w = Writer()
    w.thread(2, PID, TID)
    for gen, (name, cat, key, value) in enumerate((("first", "c1", "k1", "v1"), ("second", "c2", "k2", "v2"))):
        p = w.packet(sequence_flags=CLEARED)  # the same iids mean other texts after each clear
        p.interned_data.event_names.add(iid=1, name=name)
        p.interned_data.event_categories.add(iid=1, name=cat)
        p.interned_data.debug_annotation_names.add(iid=1, name=key)
        p.interned_data.debug_annotation_string_values.add(iid=1, str=value.encode())
        te = w.packet(10_000 * (gen + 1)).track_event
        te.type, te.track_uuid, te.name_iid = B, 2, 1
        te.category_iids.append(1)
        a = te.debug_annotations.add()
        a.name_iid, a.string_value_iid = 1, 1
        w.event(10_000 * (gen + 1) + 7, E, 2)
    trace = load_trace(w.write(tmp_path / "interned.pftrace"))
    got = {trace.names[int(n)]: (trace.cats[int(c)], trace.event_args(i)) for i, (n, c) in enumerate(zip(trace.name_id, trace.cat_id))}
    assert got == {"first": ("c1", {"k1": "v1"}), "second": ("c2", {"k2": "v2"})}


def test_default_track_and_an_incremental_clock_bring_timestamps_to_the_trace_clock(tmp_path: Path) -> None:
    w = Writer()
    w.thread(2, PID, TID)
    p = w.packet(sequence_flags=CLEARED)
    p.trace_packet_defaults.timestamp_clock_id = 64
    p.trace_packet_defaults.track_event_defaults.track_uuid = 2
    snap = w.packet().clock_snapshot
    snap.clocks.add(clock_id=6, timestamp=5_000_000)  # BOOTTIME
    snap.clocks.add(clock_id=64, timestamp=1_000, is_incremental=True)
    for delta, kind in ((10, B), (30, E), (5, B), (7, E)):  # deltas from the snapshot's 1_000
        w.event(delta, kind, None, "s" if kind == B else "")
    trace = load_trace(w.write(tmp_path / "clock.pftrace"))
    assert [(int(s), int(d)) for s, d in zip(trace.start_ns, trace.dur_ns)] == [(5_000_010, 30), (5_000_045, 7)]


def test_gpu_streams_as_thread_tracks_or_stream_tracks_are_gpu_lanes(tmp_path: Path) -> None:
    w = Writer()
    w.process(1, PID)
    w.thread(2, PID, TID)
    w.process(3, GPU_PID, "GPU 0")
    w.thread(4, GPU_PID, 7, "stream 7")
    w.custom(5, 3, "stream 9")
    w.custom(6, 2, "overlap")  # overflow track of the CPU thread: its lane
    w.slice(100, 50, 2, "cudaLaunchKernel", "cuda_runtime")
    w.slice(120, 40, 6, "overlapping", "cpu_op")
    w.slice(200, 30, 4, "gemm", "kernel")
    w.slice(210, 30, 5, "copy", "gpu_memcpy")
    trace = load_trace(w.write(tmp_path / "gpu.pftrace"))
    lanes = [(ln.pid, ln.tid, ln.kind, ln.role) for ln in trace.lanes]
    assert lanes == [(PID, TID, "cpu", "other"), (GPU_PID, 7, "gpu", "stream"), (GPU_PID, 9, "gpu", "stream")]
    assert ("overlapping" in trace.names) and {ln.tid for ln in (trace.lanes[int(k)] for k in trace.lane)} == {TID, 7, 9}


def test_counters_memory_flows_and_metadata(tmp_path: Path) -> None:
    w = Writer()
    w.process(1, PID)
    w.thread(2, PID, TID)
    w.process(3, GPU_PID, labels=("GPU 0",))
    w.thread(4, GPU_PID, 7)
    w.custom(10, 2, "cpu sample", counter=True, description="cpu_pct")
    w.custom(11, 1, "memory cuda:0", counter=True)
    w.event(50, C, 10).double_counter_value = 12.5
    w.event(60, C, 10).counter_value = 40
    derived = w.event(70, C, 11)
    derived.double_counter_value = 1.0
    derived.categories.append("branchscope.derived")
    launch = w.slice(100, 10, 2, "cudaLaunchKernel", "cuda_runtime")
    launch.flow_ids.append(77)
    w.slice(150, 20, 4, "gemm", "kernel").terminating_flow_ids.append(77)
    w.event(120, INSTANT, 2, "[memory]", **{"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "Total Allocated": 512})
    w.event(130, INSTANT, 2, "[memory]", **{"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": -512, "Total Allocated": 0})
    w.event(140, INSTANT, 2, "an instant")  # dropped, as JSON's "i" events are
    w.custom(99, 0, "branchscope")
    meta = {"baseTimeNanoseconds": 1_700_000_000_000_000_000, "distributedInfo": {"rank": 1}, "not kept": 1}
    w.event(0, INSTANT, 99, "branchscope.metadata", json=json.dumps(meta))
    trace = load_trace(w.write(tmp_path / "all.perfetto-trace", gzipped=True))
    assert [(c.name, c.key, c.pid, c.tid, c.ts_ns.tolist(), c.values.tolist()) for c in trace.counters] == [
        ("cpu sample", "cpu_pct", PID, TID, [50, 60], [12.5, 40.0])
    ]
    [series] = trace.memory
    assert (series.device, series.ts_ns.tolist(), series.total_bytes.tolist()) == ("cuda:0", [120, 130], [512, 0])
    flows = trace.flows
    assert [(trace.event_name(int(s)), trace.event_name(int(d))) for s, d in zip(flows.src, flows.dst)] == [("cudaLaunchKernel", "gemm")]
    assert trace.metadata == {"baseTimeNanoseconds": 1_700_000_000_000_000_000, "distributedInfo": {"rank": 1}}
    assert trace.rank == 1
    assert sorted(trace.names) == ["cudaLaunchKernel", "gemm"]


def test_flow_categories_the_trace_gives_are_read_and_are_no_args(tmp_path: Path) -> None:
    """A flow named in its starting slice's annotation "branchscope.flow_categories" {id: category}
    has that category; one it does not name keeps the rule (ac2g where it ends on a GPU event, else
    "flow"); the annotation is none of the slice's args."""
    w = Writer()
    w.process(1, PID)
    w.thread(2, PID, TID)
    w.thread(3, PID, TID + 1)
    w.process(4, GPU_PID, labels=("GPU 0",))
    w.thread(5, GPU_PID, 7)
    fwd = w.slice(100, 10, 2, "fwd", x=1)
    fwd.flow_ids.extend([5, 6, 12_345_678_901])
    said = fwd.debug_annotations.add()
    said.name = "branchscope.flow_categories"
    for key, cat in (("5", "fwdbwd"), ("not an id", "junk"), ("12345678901", "ac2g")):
        entry = said.dict_entries.add()
        entry.name, entry.string_value = key, cat
    w.slice(120, 10, 3, "bwd").terminating_flow_ids.append(5)
    w.slice(150, 20, 5, "gemm", "kernel").terminating_flow_ids.append(6)
    w.slice(160, 5, 3, "step").terminating_flow_ids.append(12_345_678_901)  # said ac2g, though on a CPU event
    w.slice(200, 10, 2, "other").flow_ids.append(7)
    w.slice(220, 10, 3, "later").terminating_flow_ids.append(7)
    trace = load_trace(w.write(tmp_path / "cats.pftrace"))
    flows = trace.flows
    found = sorted(
        (trace.event_name(int(s)), trace.event_name(int(d)), flows.cats[c])
        for s, d, c in zip(flows.src.tolist(), flows.dst.tolist(), flows.cat_id.tolist())
    )
    assert found == [("fwd", "bwd", "fwdbwd"), ("fwd", "gemm", "ac2g"), ("fwd", "step", "ac2g"), ("other", "later", "flow")]
    [at] = [i for i in range(len(trace)) if trace.event_name(i) == "fwd"]
    assert trace.event_args(at) == {"x": 1}


def test_a_protobuf_opens_whatever_its_name_and_a_pftrace_of_json_opens_as_json(tmp_path: Path) -> None:
    w = Writer()
    w.thread(2, PID, TID)
    w.slice(10, 5, 2, "op")
    for name in ("trace.json", "trace.pb", "x.bin"):
        assert events_of(load_trace(w.write(tmp_path / name))) == [(PID, TID, "op", 10, 5)]
    as_json = {"traceEvents": [{"ph": "X", "name": "op", "pid": PID, "tid": TID, "ts": 0.01, "dur": 0.005}]}
    (tmp_path / "json.pftrace").write_text("\n" + json.dumps(as_json))
    assert events_of(load_trace(tmp_path / "json.pftrace")) == [(PID, TID, "op", 10, 5)]


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x7f\x08",  # cut short
        b"\x0a\x05" + b"\x5a\x09\x48\x01\x58" + b"\xff" * 20,  # a track event's varint past its end
        b"\x0a" + b"\xff" * 9 + b"\x01",  # an absurd length
        b"\x0a\x02\x5a\x00" + bytes(range(256)),
    ],
)
def test_broken_protobuf_is_refused_in_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.pftrace"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_folder_of_rank_pftraces_merges_as_ranks(tmp_path: Path) -> None:
    for rank in (0, 1):
        w = Writer()
        w.thread(2, PID + rank, TID)
        w.slice(1_000 + rank, 10, 2, f"rank{rank}op")
        w.custom(99, 0, "branchscope")
        w.event(0, INSTANT, 99, "branchscope.metadata", json=json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}}))
        w.write(tmp_path / f"rank-{rank}.pftrace")
    source = open_source(tmp_path)
    assert source.kind == RANK_TRACES and [p.name for p in source.traces] == ["rank-0.pftrace", "rank-1.pftrace"]
    merged = load_job([source])
    assert sorted((ln.rank, trace_name) for ln, trace_name in zip((merged.lanes[int(k)] for k in merged.lane), (merged.names[int(n)] for n in merged.name_id))) == [
        (0, "rank0op"), (1, "rank1op")
    ]
    assert sorted(merged.start_ns.tolist()) == [1_000, 1_001]


def test_neither_startup_nor_a_json_trace_imports_protobuf(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}))
    code = (
        "import sys, branchscope.app.cli\n"
        "from branchscope.profiling.trace.sources import open_job\n"
        f"open_job([{str(trace)!r}])\n"
        "bad = [m for m in sys.modules if m.startswith(('google.protobuf', 'perfetto', 'branchscope.profiling.trace.perfetto'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_perfetto_trace_travels_through_the_rank_pool_with_its_args(tmp_path: Path) -> None:
    import io

    from branchscope.profiling.trace.rank_pool import decode, encode, trace_from_parts, trace_parts

    w = Writer()
    w.thread(2, PID, TID)
    w.slice(10, 5, 2, "with args", step=1)
    w.slice(20, 5, 2, "without")
    trace = load_trace(w.write(tmp_path / "t.pftrace"))
    pipe = io.BytesIO()
    encode(trace_parts(trace), pipe)  # raised "args held as objects" while an item was None
    pipe.seek(0)
    back = trace_from_parts(decode(pipe))
    assert [back.event_args(i) for i in range(len(back))] == [{"step": 1}, {}]


def _batch_trace(path: Path) -> Path:
    """A trace whose every part crosses packet batches when they are a few packets each: interning
    cleared between uses of the same iids, slices begun in one batch and ended in another, a flow,
    memory events, counters and the metadata event."""
    w = Writer()
    w.process(1, PID)
    w.thread(2, PID, TID, "main")
    w.custom(10, 2, "cpu sample", counter=True)
    for gen, name in enumerate(("first", "second", "third")):
        p = w.packet(sequence_flags=CLEARED)
        p.interned_data.event_names.add(iid=1, name=name)
        p.interned_data.debug_annotation_names.add(iid=1, name=f"key{gen}")
        te = w.packet(1_000 * (gen + 1)).track_event
        te.type, te.track_uuid, te.name_iid = B, 2, 1
        te.debug_annotations.add(name_iid=1, int_value=gen)
        w.event(1_000 * (gen + 1) + 5, INSTANT, 2, "[memory]", **{"Device Type": 1, "Device Id": 0, "Bytes": 64, "Total Allocated": 64 * (gen + 1)})
        w.event(1_000 * (gen + 1) + 7, C, 10).double_counter_value = float(gen)
        w.slice(1_000 * (gen + 1) + 10, 20, 2, f"inner{gen}").flow_ids.append(5)
        w.event(1_000 * (gen + 1) + 500, E, 2)
    w.custom(99, 0, "branchscope")
    w.event(0, INSTANT, 99, "branchscope.metadata", json=json.dumps({"distributedInfo": {"rank": 3}}))
    return w.write(path)


def _facts(trace: Any) -> Any:
    return (
        events_of(trace), [trace.event_args(i) for i in range(len(trace))],
        [(c.name, c.ts_ns.tolist(), c.values.tolist()) for c in trace.counters],
        [(m.ts_ns.tolist(), m.total_bytes.tolist()) for m in trace.memory],
        [(trace.event_name(int(s)), trace.event_name(int(d))) for s, d in zip(trace.flows.src, trace.flows.dst)],
        trace.metadata,
    )  # fmt: skip


@pytest.mark.parametrize("batch", [1, 2, 3, 7])
def test_packets_read_in_batches_of_any_size_give_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int) -> None:
    from branchscope.profiling.trace import perfetto_state

    path = _batch_trace(tmp_path / "batches.pftrace")
    whole = _facts(load_trace(path))
    assert [e[2] for e in whole[0]] == ["first", "inner0", "inner1", "inner2", "second", "third"]
    assert whole[1][0] == {"key0": 0} and whole[5] == {"distributedInfo": {"rank": 3}} and whole[4] == [("inner0", "inner2")]
    monkeypatch.setattr(perfetto_state, "PACKETS_AT_A_TIME", batch)
    assert _facts(load_trace(path)) == whole
