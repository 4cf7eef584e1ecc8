"""Perfetto protobuf traces built with the `perfetto` package's builder, each with the facts a
reader must find in it (`Facts`), for the golden tests of the protobuf reader.

The facts are recorded while the trace is written (`_Writer` notes each slice, arrow, counter value
and allocation as it writes its packets), so they say what was built, never what a reader made of
it. Times are nanoseconds on the trace's clock (BOOTTIME, Perfetto's default trace clock); every
start and duration is an odd number of ns so that a reader rounding to µs fails.

Each `*_trace()` returns a `Built` (its bytes and its facts); `write()` puts one in a file.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder, TraceProtoBuilder

from tests.builders.perfetto_facts import ExpectedLane, Facts

BEGIN, END, INSTANT, COUNTER = (
    pb.TrackEvent.TYPE_SLICE_BEGIN,
    pb.TrackEvent.TYPE_SLICE_END,
    pb.TrackEvent.TYPE_INSTANT,
    pb.TrackEvent.TYPE_COUNTER,
)
CLEARED, NEEDS_STATE = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
BOOTTIME, MONOTONIC = pb.BUILTIN_CLOCK_BOOTTIME, pb.BUILTIN_CLOCK_MONOTONIC
#: Where the traces' times start (1 s after boot, and an odd ns).
T0 = 1_000_000_001


@dataclass(frozen=True)
class Built:
    data: bytes
    facts: Facts


def write(path: Path, data: bytes) -> Path:
    """`data` into `path` (its parent made); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# ---- writing packets and noting what they mean --------------------------------------------------


class _Writer:
    """Packets of one trusted sequence added to `builder`, and the facts they make noted in `facts`.

    `lane_of` maps a track's uuid to the name of the lane its events belong to."""

    def __init__(self, builder: TraceProtoBuilder, seq: int, facts: Facts, lane_of: dict[int, str]) -> None:
        self.builder, self.seq, self.facts, self.lane_of = builder, seq, facts, lane_of

    def packet(self, ts: int | None = None, flags: int = 0, clock: int = 0) -> pb.TracePacket:
        """A packet of this sequence; `clock`: its timestamp_clock_id (0: the sequence's default)."""
        p = self.builder.add_packet()
        p.trusted_packet_sequence_id = self.seq
        if ts is not None:
            p.timestamp = ts
        if flags:
            p.sequence_flags = flags
        if clock:
            p.timestamp_clock_id = clock
        return p

    # tracks
    def process(self, uuid: int, pid: int, name: str) -> None:
        d = self.packet().track_descriptor
        d.uuid, d.name = uuid, name
        d.process.pid, d.process.process_name = pid, name

    def thread(self, uuid: int, pid: int, tid: int, name: str, parent: int) -> None:
        d = self.packet().track_descriptor
        d.uuid, d.parent_uuid = uuid, parent
        d.thread.pid, d.thread.tid, d.thread.thread_name = pid, tid, name
        self.lane_of[uuid] = name

    def track(self, uuid: int, name: str, parent: int, lane: str | None = None) -> None:
        """A named track under `parent`; its events are on lane `lane` (its own name if None)."""
        d = self.packet().track_descriptor
        d.uuid, d.parent_uuid, d.name = uuid, parent, name
        self.lane_of[uuid] = name if lane is None else lane

    def counter_track(self, uuid: int, name: str, parent: int, unit: int = 0) -> None:
        d = self.packet().track_descriptor
        d.uuid, d.parent_uuid, d.name = uuid, parent, name
        d.counter.SetInParent()
        if unit:
            d.counter.unit = unit

    def metadata(self, doc: dict[str, Any]) -> None:
        """The trace's top-level JSON keys as the reader's FORMAT.md says they are written: an
        instant "branchscope.metadata" on a plain track named "branchscope", its one annotation
        "json" the object's JSON text."""
        d = self.packet().track_descriptor
        d.uuid, d.name = 999, "branchscope"
        e = self.event(T0, INSTANT, 999)
        e.name = "branchscope.metadata"
        annotate(e, "json", json.dumps(doc))

    # events
    def event(self, ts: int, kind: int, track: int | None, flags: int = 0, clock: int = 0) -> pb.TrackEvent:
        e = self.packet(ts, flags, clock).track_event
        e.type = kind
        if track is not None:
            e.track_uuid = track
        return e

    def slice(self, track: int | None, name: str, start: int, dur: int, cat: str, lane: str | None = None,
              **extra: Any) -> pb.TrackEvent:  # fmt: skip
        """A begin/end pair on `track` (None: the sequence's default track, then `lane` names its
        lane); `extra`: TrackEvent fields of the begin event (flow_ids, debug annotations...)."""
        begin = self.event(start, BEGIN, track)
        begin.name = name
        begin.categories.append(cat)
        for key, value in extra.items():
            getattr(begin, key).extend(value)
        self.event(start + dur, END, track)
        self.note(lane or self.lane_of[track or 0], name, start, dur, cat)
        return begin

    def note(self, lane: str, name: str, start: int, dur: int, cat: str) -> None:
        self.facts.events.setdefault(lane, []).append((name, start, dur, cat))

    def count(self, track: int, name: str, pid: int, ts: int, value: float) -> None:
        """A double counter value on counter track `track`, noted as counter `name` of `pid`."""
        self.event(ts, COUNTER, track).double_counter_value = value
        _, times, values = self.facts.counters.setdefault(name, (pid, [], []))
        times.append(ts)
        values.append(value)


def _new(seq: int = 1) -> tuple[TraceProtoBuilder, _Writer]:
    builder = TraceProtoBuilder()
    return builder, _Writer(builder, seq, Facts(), {})


def varint(n: int) -> bytes:
    """`n` (>= 0) as a protobuf varint, written by hand (the tests of the wire reader build bytes
    with it, not with the exporter's encoder they would then be testing against)."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def annotate(event: pb.TrackEvent, name: str, value: Any) -> pb.DebugAnnotation:
    """A debug annotation `name` = `value` on `event` (`_set_value` says how each type is written)."""
    a = event.debug_annotations.add()
    a.name = name
    _set_value(a, value)
    return a


def _set_value(a: pb.DebugAnnotation, value: Any) -> None:
    """An int is written int_value, a `Uint` uint_value, a float double_value, a bool bool_value,
    a str string_value, a dict dict_entries (named) and a list array_values."""
    if isinstance(value, bool):
        a.bool_value = value
    elif isinstance(value, Uint):
        a.uint_value = value.value
    elif isinstance(value, int):
        a.int_value = value
    elif isinstance(value, float):
        a.double_value = value
    elif isinstance(value, str):
        a.string_value = value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            entry = a.dict_entries.add()
            entry.name = k
            _set_value(entry, v)
    else:
        for v in value:
            _set_value(a.array_values.add(), v)


@dataclass(frozen=True)
class Uint:
    """An unsigned value, written uint_value (a reader gives it as a plain int)."""

    value: int


def _plain(value: Any) -> Any:
    """What a reader's `event_args` must give for an annotation value: JSON's types."""
    if isinstance(value, Uint):
        return value.value
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---- (1) two CPU threads of one process, nested slices ------------------------------------------

PID = 4242
MAIN_TID, POOL_TID = PID, 4250


def threads_trace() -> Built:
    """Process 4242 "python" with its main thread (named pt_main_thread) and a pool thread (named
    "PTThreadPool 1"). The main thread's sequence names its track on every event; the pool
    thread's sequence gives its track once, as the sequence's default (TrackEventDefaults), and
    its events name none. Nested slices three deep on the main thread, two on the pool's."""
    builder, main = _new(seq=1)
    pool = _Writer(builder, 2, main.facts, main.lane_of)
    main.process(1, PID, "python")
    main.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    pool.thread(3, PID, POOL_TID, "PTThreadPool 1", parent=1)
    main.slice(2, "ProfilerStep#0", T0, 9_001, "user_annotation")
    main.slice(2, "aten::linear", T0 + 1_001, 4_003, "cpu_op")
    main.slice(2, "aten::addmm", T0 + 1_503, 2_001, "cpu_op")
    main.slice(2, "aten::relu", T0 + 6_007, 1_001, "cpu_op")
    complete = main.event(T0 + 7_501, INSTANT, 2)  # a complete event as Chrome JSON converted has it
    complete.name = "aten::empty"
    complete.categories.append("cpu_op")
    complete.legacy_event.phase, complete.legacy_event.duration_us = ord("X"), 1
    main.note("pt_main_thread", "aten::empty", T0 + 7_501, 1_000, "cpu_op")
    defaults = pool.packet(flags=CLEARED).trace_packet_defaults.track_event_defaults
    defaults.track_uuid = 3
    pool.slice(None, "aten::mm", T0 + 2_001, 5_003, "cpu_op", lane="PTThreadPool 1")
    pool.slice(None, "aten::add", T0 + 2_501, 999, "cpu_op", lane="PTThreadPool 1")
    main.facts.lanes = [
        ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID),
        ExpectedLane("cpu", "interop", "PTThreadPool 1", POOL_TID, PID),
    ]
    return Built(builder.serialize(), main.facts)


#: Each event of `threads_trace` by name: its depth on its lane.
THREADS_DEPTH = {"ProfilerStep#0": 0, "aten::linear": 1, "aten::addmm": 2, "aten::relu": 1, "aten::empty": 1,
                 "aten::mm": 0, "aten::add": 1}  # fmt: skip


def unended_trace() -> Built:
    """A slice begun and never ended (it lasts to the trace's last timestamp, as Perfetto's UI draws
    it), holding one whose END carries a debug annotation (merged into the slice's args)."""
    builder, w = _new()
    w.process(1, PID, "python")
    w.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    begin = w.event(T0, BEGIN, 2)
    begin.name = "ProfilerStep#0"
    begin.categories.append("user_annotation")
    annotate(w.slice(2, "aten::mm", T0 + 1_001, 2_001, "cpu_op"), "Input Dims", [[2, 3]])
    annotate(w.builder.trace.packet[-1].track_event, "Output", "ok")  # the END just written
    w.note("pt_main_thread", "ProfilerStep#0", T0, 1_001 + 2_001, "user_annotation")
    w.facts.args["aten::mm"] = {"Input Dims": [[2, 3]], "Output": "ok"}
    w.facts.lanes = [ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID)]
    return Built(builder.serialize(), w.facts)


# ---- (2) GPU streams as tracks under a "GPU 0" process, launches with flows -----------------------

STREAMS = (7, 20)


def gpu_trace() -> Built:
    """A CPU thread launching three kernels (cudaLaunchKernel, cat cuda_runtime) on GPU 0's streams
    7 and 20: tracks named "stream 7" / "stream 20" under a process track "GPU 0" (pid 0); kernels
    of category "kernel". Each launch carries a flow id; its kernel ends it (terminating_flow_ids)
    for the first two and, for the third, names it in flow_ids (a flow's next step)."""
    builder, w = _new()
    w.process(1, PID, "python")
    w.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    w.process(10, 0, "GPU 0")
    for k, stream in enumerate(STREAMS):
        w.track(11 + k, f"stream {stream}", parent=10)
    launches = [(11, "gemm_kernel", 101, True), (12, "elementwise_kernel", 102, True), (11, "reduce_kernel", 103, False)]
    for k, (track, kernel, flow, terminating) in enumerate(launches):
        launch_at = T0 + 10_001 * k
        w.slice(2, "cudaLaunchKernel", launch_at, 3_001 + k, "cuda_runtime", flow_ids=[flow])
        w.slice(track, kernel, launch_at + 5_003, 7_001 + 2 * k, "kernel",
                **({"terminating_flow_ids": [flow]} if terminating else {"flow_ids": [flow]}))  # fmt: skip
        w.facts.arrows.add((("cudaLaunchKernel", launch_at), (kernel, launch_at + 5_003)))
    w.slice(2, "aten::mm", T0 - 1_001, 40_003, "cpu_op")
    w.facts.lanes = [
        ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID),
        *(ExpectedLane("gpu", "stream", f"stream {s}", s, device=0) for s in STREAMS),
    ]
    return Built(builder.serialize(), w.facts)


# ---- (3) counters and kineto's [memory] instants ---------------------------------------------------

#: (delta bytes, device type, device id, address) of each allocator event, 1 µs + 1 ns apart.
ALLOCATIONS = [(4096, 1, 0, 0x7F00), (1024, 0, -1, 0x1000), (512, 1, 0, 0x8F00), (-4096, 1, 0, 0x7F00), (-1024, 0, -1, 0x1000)]
RESERVED = 2 << 20


def counters_trace() -> Built:
    """kineto's `[memory]` instants on the main thread, args as kineto writes them in JSON (Bytes,
    Total Allocated, Total Reserved, Device Type, Device Id, Addr), for cuda:0 and the CPU; a
    counter track in bytes ("cuda:0 allocated", under the process) and a plain one ("GPU
    utilization"), both of double values; one slice so the process has a lane."""
    builder, w = _new()
    w.process(1, PID, "python")
    w.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    w.slice(2, "ProfilerStep#0", T0, 50_001, "user_annotation")
    _memory_instants(w)
    w.counter_track(20, "cuda:0 allocated", parent=1, unit=pb.CounterDescriptor.UNIT_SIZE_BYTES)
    w.counter_track(21, "GPU utilization", parent=1)
    for k, value in enumerate((0.0, 4096.0, 1024.0)):
        w.count(20, "cuda:0 allocated", PID, T0 + 1_001 + 10_007 * k, value)
    for k, value in enumerate((0.25, 0.75)):
        w.count(21, "GPU utilization", PID, T0 + 3_003 + 20_011 * k, value)
    w.facts.lanes = [ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID)]
    return Built(builder.serialize(), w.facts)


def _memory_instants(w: _Writer) -> None:
    """ALLOCATIONS as `[memory]` instants, noted as each device's MemorySeries columns."""
    totals: dict[str, int] = {}
    for k, (delta, dtype, did, addr) in enumerate(ALLOCATIONS):
        device = "cpu" if dtype == 0 else f"cuda:{did}"
        totals[device] = totals.get(device, 0) + delta
        ts = T0 + 1_001 * (k + 1)
        e = w.event(ts, INSTANT, 2)
        e.name = "[memory]"
        e.categories.append("cpu_instant_event")
        args = {"Device Type": dtype, "Device Id": did, "Addr": addr, "Bytes": delta,
                "Total Allocated": totals[device], "Total Reserved": RESERVED}  # fmt: skip
        for name, value in args.items():
            annotate(e, name, value)
        series = w.facts.memory.setdefault(device, {"ts_ns": [], "delta_bytes": [], "total_bytes": [], "addr": [],
                                                    "reserved_bytes": [], "tid": [], "pid": []})  # fmt: skip
        for column, value in zip(series, (ts, delta, totals[device], addr, RESERVED, MAIN_TID, PID)):
            series[column].append(value)


# ---- (4) interned names and categories ----------------------------------------------------------


def _intern(p: pb.TracePacket, names: dict[int, str] | None = None, cats: dict[int, str] | None = None) -> None:
    for iid, name in (names or {}).items():
        entry = p.interned_data.event_names.add()
        entry.iid, entry.name = iid, name
    for iid, name in (cats or {}).items():
        entry = p.interned_data.event_categories.add()
        entry.iid, entry.name = iid, name


def interned_trace() -> Built:
    """Names and categories given by iid. Sequence 1: iids 1, 2 = alpha, beta (cat 1 = cpu_op);
    a later packet adds iid 3 = epsilon without clearing; then the state is cleared and iid 1 means
    gamma. Sequence 2 (another thread) gives iid 1 = delta, cat 1 = kernel_launch: the same iids,
    other names. On sequence 2 an annotation's name and another's string value are interned too
    (debug_annotation_names iid 1 = "Sequence number", debug_annotation_string_values iid 1 =
    "aten::mm")."""
    builder, one = _new(seq=1)
    two = _Writer(builder, 2, one.facts, one.lane_of)
    one.process(1, PID, "python")
    one.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    two.thread(3, PID, POOL_TID, "PTThreadPool 1", parent=1)
    _intern(one.packet(flags=CLEARED), {1: "alpha", 2: "beta"}, {1: "cpu_op"})
    _intern(two.packet(flags=CLEARED), {1: "delta"}, {1: "kernel_launch"})
    strings = two.packet().interned_data
    strings.debug_annotation_names.add(iid=1, name="Sequence number")
    strings.debug_annotation_string_values.add(iid=1, str=b"aten::mm")
    at = T0
    for w, iid, later in ((one, 1, {}), (one, 2, {}), (one, 3, {3: "epsilon"}), (two, 1, {})):
        _interned_slice(w, iid, at, later)
        at += 2_003
    _intern(one.packet(flags=CLEARED), {1: "gamma"}, {1: "cpu_op"})
    _interned_slice(one, 1, at, {})
    one.facts.args["delta"] = {"Sequence number": 7, "Op": "aten::mm"}
    one.facts.lanes = [
        ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID),
        ExpectedLane("cpu", "interop", "PTThreadPool 1", POOL_TID, PID),
    ]
    return Built(builder.serialize(), one.facts)


def _interned_slice(w: _Writer, iid: int, start: int, new_names: dict[int, str]) -> None:
    """A 1001 ns slice named by `iid` (cat iid 1) on the sequence's thread; `new_names`
    interned in its own packet. Noted under the name the sequence's state gives the iid now."""
    track = 2 if w.seq == 1 else 3
    begin = w.packet(start, NEEDS_STATE)
    _intern(begin, new_names)
    e = begin.track_event
    e.type, e.track_uuid, e.name_iid = BEGIN, track, iid
    e.category_iids.append(1)
    if w.seq == 2:
        e.debug_annotations.add(name_iid=1, int_value=7)
        e.debug_annotations.add(name="Op", string_value_iid=1)
    w.event(start + 1_001, END, track, NEEDS_STATE)
    name, cat = _interned_meaning(w, iid, new_names)
    w.note(w.lane_of[track], name, start, 1_001, cat)


def _interned_meaning(w: _Writer, iid: int, new_names: dict[int, str]) -> tuple[str, str]:
    """What `iid` (and category iid 1) mean on `w`'s sequence now, from the packets written so far."""
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    for p in w.builder.trace.packet:
        if p.trusted_packet_sequence_id != w.seq:
            continue
        if p.sequence_flags & CLEARED:
            names, cats = {}, {}
        names.update({n.iid: n.name for n in p.interned_data.event_names})
        cats.update({c.iid: c.name for c in p.interned_data.event_categories})
    return names[iid], cats[1]


# ---- (5) incremental timestamps and a second clock ------------------------------------------------

INCREMENTAL_CLOCK = 64
#: The clock snapshot: BOOTTIME and MONOTONIC readings at one instant, and the incremental clock's.
SNAP_BOOT, SNAP_MONO, SNAP_INCR = T0, 400_000_003, 5_000


def clocks_trace() -> Built:
    """Sequence 1 writes its times as deltas on an incremental clock (id 64, a sequence-scoped
    clock made by a ClockSnapshot that reads 5000 on it when BOOTTIME reads T0; the sequence's
    default clock by TracePacketDefaults.timestamp_clock_id): each packet's timestamp is the
    delta from the one before. Sequence 2 writes MONOTONIC times (timestamp_clock_id 3), converted
    through the snapshot (MONOTONIC read SNAP_MONO at BOOTTIME T0). Every time noted on BOOTTIME."""
    builder, incr = _new(seq=1)
    mono = _Writer(builder, 2, incr.facts, incr.lane_of)
    incr.process(1, PID, "python")
    incr.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    incr.thread(3, PID, POOL_TID, "PTThreadPool 1", parent=1)
    snap = incr.packet(flags=CLEARED)
    for clock_id, ts, incremental in ((BOOTTIME, SNAP_BOOT, False), (MONOTONIC, SNAP_MONO, False),
                                      (INCREMENTAL_CLOCK, SNAP_INCR, True)):  # fmt: skip
        snap.clock_snapshot.clocks.add(clock_id=clock_id, timestamp=ts, is_incremental=incremental)
    snap.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
    # (delta from the packet before, begin or end, name): "outer" holds "inner", then "next".
    boot = SNAP_BOOT
    opened: list[tuple[str, int]] = []
    for delta, kind, name in ((3_001, BEGIN, "outer"), (1_003, BEGIN, "inner"), (2_005, END, ""),
                              (1_007, END, ""), (501, BEGIN, "next"), (11, END, "")):  # fmt: skip
        boot += delta
        e = incr.event(delta, kind, 2, NEEDS_STATE)
        if kind == BEGIN:
            e.name = name
            e.categories.append("cpu_op")
            opened.append((name, boot))
        else:
            began_name, began = opened.pop()
            incr.note("pt_main_thread", began_name, began, boot - began, "cpu_op")
    mono_start = SNAP_MONO + 2_009
    mono_begin = mono.event(mono_start, BEGIN, 3, clock=MONOTONIC)
    mono_begin.name = "monotonic_op"
    mono_begin.categories.append("cpu_op")
    mono.event(mono_start + 3_333, END, 3, clock=MONOTONIC)
    mono.note("PTThreadPool 1", "monotonic_op", mono_start - SNAP_MONO + SNAP_BOOT, 3_333, "cpu_op")
    incr.facts.lanes = [
        ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID),
        ExpectedLane("cpu", "interop", "PTThreadPool 1", POOL_TID, PID),
    ]
    return Built(builder.serialize(), incr.facts)


# ---- (2b) as kineto's PerfettoTraceBuilder writes: a child track per event ---------------------


def kineto_shaped_trace() -> Built:
    """The layout of kineto's PerfettoTraceBuilder: a process track "Kineto Trace" (pid 0) holding
    the CPU thread's track (its pid the real one); a device process "GPU 0 [NVIDIA H200]"
    (process_name "GPU 0", pid 0) holding stream 7's thread track (pid 0, tid 7); every event on
    a child track of its own under its thread's track, named as the thread; a launch and its kernel
    sharing one flow id (flow_ids on both), correlation_id annotations; a "trace_metadata"
    instant (dropped, as JSON's instants are)."""
    builder, w = _new(seq=7)
    w.process(1, 0, "Kineto Trace")
    w.thread(2, PID, MAIN_TID, "thread 4242 (python)", parent=1)
    w.packet().track_descriptor.CopyFrom(pb.TrackDescriptor(uuid=3, name="GPU 0 [NVIDIA H200]",
                                                            process=pb.ProcessDescriptor(pid=0, process_name="GPU 0")))  # fmt: skip
    w.thread(4, 0, 7, "stream 7", parent=3)
    meta = w.event(T0, INSTANT, 1)
    meta.name = "trace_metadata"
    annotate(meta, "schemaVersion", "1")
    uuid = iter(range(100, 200))

    def on_child(parent: int, name: str, start: int, dur: int, cat: str, flow: int = 0) -> None:
        child = next(uuid)
        w.track(child, w.lane_of[parent], parent, lane=w.lane_of[parent])
        begin = w.slice(child, name, start, dur, cat, **({"flow_ids": [flow]} if flow else {}))
        if flow:
            annotate(begin, "correlation_id", flow)

    on_child(2, "ProfilerStep#0", T0, 30_001, "user_annotation")
    on_child(2, "aten::mm", T0 + 1_001, 10_003, "cpu_op")
    on_child(2, "cudaLaunchKernel", T0 + 2_001, 3_001, "cuda_runtime", flow=55)
    on_child(4, "gemm_kernel", T0 + 6_007, 9_001, "kernel", flow=55)
    w.facts.arrows.add((("cudaLaunchKernel", T0 + 2_001), ("gemm_kernel", T0 + 6_007)))
    w.facts.lanes = [ExpectedLane("cpu", "main", "thread 4242 (python)", MAIN_TID, PID),
                     ExpectedLane("gpu", "stream", "stream 7", 7, device=0)]  # fmt: skip
    return Built(builder.serialize(), w.facts)


# ---- (6) debug annotations of every kind ----------------------------------------------------------

#: The annotations of `args_trace`'s one event, as written (`_set_value`).
ANNOTATIONS: dict[str, Any] = {
    "int": -7,
    "big int": 2**62 + 1,
    "uint": Uint(2**63 + 5),
    "double": 2.5,
    "bool": True,
    "string": "aten::mm",
    "nested": {"shape": [32, 64], "dtype": "float", "strides": [[64, 1]]},
    "array": [1, "two", 3.0, False],
}


def args_trace() -> Built:
    """One slice whose begin event carries ANNOTATIONS: what `event_args` must give is the same
    values in JSON's types (an unsigned value as an int, a dict's entries as a dict)."""
    builder, w = _new()
    w.process(1, PID, "python")
    w.thread(2, PID, MAIN_TID, "pt_main_thread", parent=1)
    begin = w.slice(2, "aten::mm", T0, 5_001, "cpu_op")
    for name, value in ANNOTATIONS.items():
        annotate(begin, name, value)
    w.facts.args["aten::mm"] = {name: _plain(value) for name, value in ANNOTATIONS.items()}
    w.facts.lanes = [ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID)]
    return Built(builder.serialize(), w.facts)


# ---- (7) the same trace in other wrappings -------------------------------------------------------


def gzipped(built: Built) -> Built:
    return Built(gzip.compress(built.data), built.facts)


def json_twin() -> tuple[bytes, Facts]:
    """A Chrome JSON trace (for a `.pftrace`-named file: it must open as JSON): one thread, two
    nested complete events."""
    events = [
        {"ph": "X", "name": "ProfilerStep#0", "cat": "user_annotation", "pid": PID, "tid": MAIN_TID, "ts": 1000.001, "dur": 9.001},
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": PID, "tid": MAIN_TID, "ts": 1001.003, "dur": 2.001},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": MAIN_TID, "args": {"name": "pt_main_thread"}},
    ]  # fmt: skip
    facts = Facts(
        lanes=[ExpectedLane("cpu", "main", "pt_main_thread", MAIN_TID, PID)],
        events={"pt_main_thread": [("ProfilerStep#0", 1_000_001, 9_001, "user_annotation"),
                                   ("aten::mm", 1_001_003, 2_001, "cpu_op")]},
    )  # fmt: skip
    return json.dumps({"traceEvents": events}).encode(), facts


# ---- (8) two ranks, each its own file ------------------------------------------------------------

#: How much later rank 1's events are than rank 0's (on the one BOOTTIME clock both use).
RANK_SKEW_NS = 3_001


def rank_trace(rank: int) -> Built:
    """Rank `rank`'s process (pid 1000 + rank) with its main thread: a ProfilerStep#0 holding an
    nccl:all_reduce, RANK_SKEW_NS later per rank; and its GPU (device = rank, stream 7) running a
    kernel. Its rank in its metadata's distributedInfo (as the reader's FORMAT.md says metadata is
    written), with its baseTimeNanoseconds."""
    builder, w = _new()
    pid, at = 1000 + rank, T0 + rank * RANK_SKEW_NS
    w.process(1, pid, "python")
    w.thread(2, pid, pid, "pt_main_thread", parent=1)
    w.process(10, rank, f"GPU {rank}")
    w.track(11, "stream 7", parent=10)
    w.metadata(rank_metadata(rank))
    w.slice(2, "ProfilerStep#0", at, 20_001, "user_annotation")
    w.slice(2, "nccl:all_reduce", at + 1_001, 5_003, "user_annotation")
    w.slice(11, "ncclDevKernel_AllReduce", at + 2_003, 4_001, "kernel")
    w.facts.lanes = [ExpectedLane("cpu", "main", "pt_main_thread", pid, pid),
                     ExpectedLane("gpu", "stream", "stream 7", 7, device=rank)]  # fmt: skip
    return Built(builder.serialize(), w.facts)


def rank_metadata(rank: int, ranks: int = 2) -> dict[str, Any]:
    return {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
            "baseTimeNanoseconds": 1_700_000_000_000_000_000}  # fmt: skip


def write_rank_folder(folder: Path, ranks: int = 2) -> Path:
    """FOLDER/rank-R.pftrace for R < `ranks`, written packet by packet by StreamingTraceProtoBuilder
    (one Trace message per packet, concatenated: a reader must take them as one trace); returns
    the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        with open(folder / f"rank-{r}.pftrace", "wb") as f:
            stream = StreamingTraceProtoBuilder(f)
            for packet in pb.Trace.FromString(rank_trace(r).data).packet:
                stream.write_packet(packet)
    return folder


#: Every trace built here by name, for the tests that treat them all alike (the fuzz test).
ALL: dict[str, Callable[[], Built]] = {
    "threads": threads_trace,
    "gpu": gpu_trace,
    "kineto": kineto_shaped_trace,
    "counters": counters_trace,
    "unended": unended_trace,
    "interned": interned_trace,
    "clocks": clocks_trace,
    "args": args_trace,
    "rank0": lambda: rank_trace(0),
}

