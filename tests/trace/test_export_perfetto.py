"""The Perfetto export's packets, read with the `perfetto` package's protos (upb), not with
branchscope's own reader: a slice per event, exact to the ns, on its lane's track or an overflow
track of it where events overlap; interned names; args as debug annotations; arrows; `[memory]`
instants; counter tracks; the metadata instant (the contract in profiling/trace/export_perfetto.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from branchscope.profiling.trace.export import export_trace
from branchscope.profiling.trace.export_perfetto import (
    ADDED_ARG,
    DERIVED_CATEGORY,
    FLOW_CATEGORIES,
    METADATA_EVENT,
)
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.profiling.trace.reader import load_trace
from tests.builders.events import trace_of
from tests.builders.export_traces import MAIN, PID, trace_facts, write_kineto_like
from tests.builders.runs import write_small_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def annotation_value(a: Any) -> Any:
    """A DebugAnnotation's value as the JSON value it was written from."""
    kind = a.WhichOneof("value")
    if kind == "legacy_json_value":
        return json.loads(a.legacy_json_value)
    if kind is not None:
        return getattr(a, kind)
    if a.dict_entries:
        return {e.name: annotation_value(e) for e in a.dict_entries}
    return [annotation_value(e) for e in a.array_values]


class Read:
    """A .pftrace read packet by packet: descriptors, interned tables, and each track's slices
    matched BEGIN to END as a stack (an END closes the innermost open slice of its track)."""

    def __init__(self, path: Path) -> None:
        trace = pb.Trace()
        trace.ParseFromString(path.read_bytes())
        self.packets = list(trace.packet)
        self.tracks = {p.track_descriptor.uuid: p.track_descriptor for p in self.packets if p.HasField("track_descriptor")}
        first = self.packets[0]
        self.first_flags = first.sequence_flags
        self.names = {e.iid: e.name for e in first.interned_data.event_names}
        self.cats = {e.iid: e.name for e in first.interned_data.event_categories}
        self.arg_names: dict[int, str] = {}
        self.slices: list[tuple[str, str, int, int, int, dict[str, Any], list[int], list[int]]] = []
        self.instants: list[tuple[int, int, str, dict[str, Any]]] = []
        self.counters: dict[int, list[tuple[int, float]]] = {}
        open_: dict[int, list[tuple[Any, int]]] = {}
        for p in self.packets:
            self.arg_names.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
            if not p.HasField("track_event"):
                continue
            e = p.track_event
            if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                open_.setdefault(e.track_uuid, []).append((e, p.timestamp))
            elif e.type == pb.TrackEvent.TYPE_SLICE_END:
                b, start = open_[e.track_uuid].pop()
                cat = self.cats[b.category_iids[0]] if b.category_iids else ""
                self.slices.append((self.names[b.name_iid], cat, b.track_uuid, start, p.timestamp - start, self.args(b),
                                    list(b.flow_ids), list(b.terminating_flow_ids)))  # fmt: skip
            elif e.type == pb.TrackEvent.TYPE_INSTANT:
                name = e.name or self.names[e.name_iid]
                self.instants.append((e.track_uuid, p.timestamp, name, self.args(e)))
            elif e.type == pb.TrackEvent.TYPE_COUNTER:
                self.counters.setdefault(e.track_uuid, []).append((p.timestamp, e.double_counter_value))
        assert not any(open_.values()), "a slice begun and never ended"

    def args(self, e: Any) -> dict[str, Any]:
        return {(a.name or self.arg_names[a.name_iid]): annotation_value(a) for a in e.debug_annotations}

    def lane_of(self, uuid: int) -> tuple[int, int]:
        """(pid, tid) of the thread track a track is, or is under."""
        d = self.tracks[uuid]
        while not d.HasField("thread"):
            d = self.tracks[d.parent_uuid]
        return (d.thread.pid, d.thread.tid)


def _export(trace_or_path: Trace | Path, tmp_path: Path, name: str = "out.pftrace") -> tuple[Trace, Read]:
    trace = trace_or_path if isinstance(trace_or_path, Trace) else load_trace(trace_or_path)
    out = export_trace(trace, tmp_path / name)
    return trace, Read(out)


def test_every_event_is_a_slice_exact_to_the_ns_with_its_args_on_its_lane(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    assert read.first_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert set(read.names.values()) >= set(trace.names)
    want = sorted(
        (trace.names[trace.name_id[i]], trace.cats[trace.cat_id[i]], (trace.lanes[trace.lane[i]].pid, trace.lanes[trace.lane[i]].tid),
         int(trace.start_ns[i]), int(trace.dur_ns[i]), json.dumps(trace.event_args(i), sort_keys=True))
        for i in range(len(trace))
    )  # fmt: skip
    got = sorted(
        (n, c, read.lane_of(u), s, d, json.dumps({k: v for k, v in a.items() if k not in (ADDED_ARG, FLOW_CATEGORIES)}, sort_keys=True))
        for n, c, u, s, d, a, _, _ in read.slices
    )
    assert got == want
    # Every packet after the first needs the sequence's interned names, on the one sequence.
    assert all(p.trusted_packet_sequence_id == 1 for p in read.packets)


def test_events_that_overlap_without_nesting_go_on_overflow_tracks_of_their_lane(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    by_name = {name: read.tracks[u] for name, _, u, *_ in read.slices}
    # async_b overlaps async_a without nesting in it: a track of its own under async_a's thread track.
    assert by_name["async_a"].HasField("thread")
    assert by_name["async_b"].name == f"thread {MAIN + 1} · 2"
    assert by_name["async_b"].parent_uuid == [u for n, _, u, *_ in read.slices if n == "async_a"][0]
    assert by_name["async_c"].HasField("thread")  # nests in nothing open on the first track: back on it
    # The two kernels of one stream overlap: the second on the stream's second track.
    assert by_name["gemm"].HasField("thread") and by_name["gemm"].thread.thread_name == ""
    assert by_name["elementwise"].name == "stream 7 · 2"
    # Events that nest stay on the lane's own track, however many.
    assert {n for n, _, u, *_ in read.slices if not read.tracks[u].HasField("thread")} == {"async_b", "elementwise"}


def test_arrows_are_flow_ids_from_their_source_to_their_end(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    starts = {f: (n, s) for n, _, _, s, _, _, ids, _ in read.slices for f in ids}
    ends = {f: (n, s) for n, _, _, s, _, _, _, ids in read.slices for f in ids}
    assert starts.keys() == ends.keys() and len(starts) == len(trace.flows) == 2
    assert sorted((starts[f], ends[f]) for f in starts) == sorted(
        ((trace.event_name(s), int(trace.start_ns[s])), (trace.event_name(d), int(trace.start_ns[d])))
        for s, d in zip(trace.flows.src.tolist(), trace.flows.dst.tolist())
    )


def test_memory_events_are_instants_with_kinetos_args_beside_a_counter_track(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    memory = [(read.lane_of(u), t, a) for u, t, n, a in read.instants if n == "[memory]"]
    cuda = [(lane, t, a) for lane, t, a in memory if a["Device Type"] == 1]
    series = next(m for m in trace.memory if m.device == "cuda:0")
    assert [t for _, t, _ in cuda] == series.ts_ns.tolist()
    assert [a["Bytes"] for *_, a in cuda] == series.delta_bytes.tolist()
    assert [a["Addr"] for *_, a in cuda] == [2**63 + 64] * 2  # past int64: written unsigned
    assert {lane for lane, *_ in cuda} == {(PID, MAIN)}
    assert cuda[0][2]["Total Reserved"] == 1 << 20
    totals = [u for u, d in read.tracks.items() if d.name == "memory cuda:0"]
    assert len(totals) == 1 and list(read.tracks[totals[0]].counter.categories) == [DERIVED_CATEGORY]
    assert read.counters[totals[0]] == list(zip(series.ts_ns.tolist(), map(float, series.total_bytes.tolist())))


def test_counters_are_counter_tracks_named_as_the_reader_reads_them(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    for c in trace.counters:
        uuid = next(u for u, d in read.tracks.items() if d.name == c.name and d.description == c.key)
        assert list(read.tracks[uuid].counter.categories) == [c.cat]
        assert read.lane_of(read.tracks[uuid].parent_uuid) == (c.pid, c.tid)
        assert read.counters[uuid] == list(zip(c.ts_ns.tolist(), c.values.tolist()))


def test_metadata_and_run_info_are_one_instant_holding_them_as_json(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    (args,) = [a for _, _, n, a in read.instants if n == METADATA_EVENT]
    assert json.loads(args["json"]) == trace.metadata
    assert json.loads(args["json"])["branchscope"]["mode"] == "fork"


def test_a_run_trace_has_its_pool_busy_threads_as_a_derived_counter(tmp_path):
    trace, read = _export(write_small_trace(tmp_path / "run.json", "fork"), tmp_path)
    (uuid,) = [u for u, d in read.tracks.items() if d.name == "inter-op pool busy threads"]
    assert list(read.tracks[uuid].counter.categories) == [DERIVED_CATEGORY]
    assert max(v for _, v in read.counters[uuid]) == 2  # fork: both branches at once on the two pool threads


def test_a_trace_of_many_nested_and_zero_length_events_closes_each_where_it_ends(tmp_path):
    """Ends before begins at one time, inner ends first, zero-length events begun and ended together."""
    from branchscope.profiling.trace.lane_table import Lane

    lane = Lane(0, "cpu", 1, 1, "main", "main")
    events = [(0, "a", 0, 100), (0, "b", 0, 100), (0, "c", 100, 0), (0, "d", 100, 0), (0, "e", 100, 50), (0, "f", 150, 0)]
    trace = trace_of(events, [lane])
    _, read = _export(trace, tmp_path)
    assert sorted((n, s, d) for n, _, _, s, d, *_ in read.slices) == sorted((n, s, d) for _, n, s, d in events)
    assert {read.tracks[u].HasField("thread") for _, _, u, *_ in read.slices} == {True}


def test_events_before_time_zero_are_refused_in_one_line(tmp_path):
    from branchscope.profiling.trace.lane_table import Lane

    trace = trace_of([(0, "a", -5, 10)], [Lane(0, "cpu", 1, 1, "main", "main")])
    with pytest.raises(TraceFormatError, match="times before 0"):
        export_trace(trace, tmp_path / "out.pftrace")
    assert list(tmp_path.iterdir()) == []


def test_the_json_twin_and_the_pftrace_hold_the_same_facts_for_the_json_reader(tmp_path):
    """The JSON export of the Perfetto export's source loads to the source's facts (the two
    exports share their lanes and args: `export_common`)."""
    trace = load_trace(write_kineto_like(tmp_path / "k.json"))
    twin = load_trace(export_trace(trace, tmp_path / "twin.json"))
    assert trace_facts(twin) == trace_facts(trace)
    assert Counter(n for n, *_ in Read(export_trace(twin, tmp_path / "twin.pftrace")).slices) == Counter(
        trace.names[k] for k in trace.name_id.tolist()
    )


def test_varints_many_at_once_are_the_varints_one_at_a_time():
    import numpy as np

    from branchscope.profiling.trace.export_perfetto import _varint_of, _varints

    values = [0, 1, 127, 128, 16383, 16384, 2**35 + 3, 1_712_195_495_519_695_812, 2**63 - 1]
    assert _varints(np.array(values, dtype=np.int64)) == [_varint_of(v) for v in values]


def test_a_branch_label_carries_its_branch_region_and_mode(tmp_path):
    trace, read = _export(write_kineto_like(tmp_path / "k.json"), tmp_path)
    (left,) = [a for n, _, _, _, _, a, _, _ in read.slices if n == "branch: left"]
    assert left == {"branchscope": {"branch": "left", "region": "1", "mode": "fork"}}
    assert all("branchscope" not in a for n, *_, a, _, _ in read.slices if not n.startswith("branch: "))
