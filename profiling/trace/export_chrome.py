"""Write a `Trace` as a Chrome / torch.profiler JSON trace (`write_chrome`), in kineto's shape, so
that branchscope, Perfetto's UI and chrome://tracing open it.

What is written: the trace's metadata keys at the top level ("branchscope", distributedInfo,
deviceProperties, baseTimeNanoseconds, ...; `displayTimeUnit` "ns" unless it says otherwise), each
event a complete event ("X") on its lane's pid and tid, `ts` and `dur` in µs with three decimals
(exact to the ns), its args as read; the lanes' names as `process_name`, `process_labels` ("GPU N")
and `thread_name` metadata events; the allocator's events as `[memory]` instants with kineto's
args; counters as "C" events; arrows as "s"/"f" pairs (bound to the enclosing slice, `bp` "e").
Events are encoded a chunk at a time and written as they are made: memory stays bounded by a chunk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import IO

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.export_common import (
    MEMORY_CATEGORY,
    MEMORY_NAME,
    ExportLanes,
    args_texts,
    export_lanes,
    memory_args,
)
from branchscope.profiling.trace.model import Trace

#: Events encoded per write.
_CHUNK = 1 << 15


def us_texts(ns: np.ndarray) -> list[str]:
    """Times in ns as µs texts with three decimals ("-1.500" for -1500 ns): exact, never a float."""
    ns = np.asarray(ns, dtype=np.int64)
    sign = np.where(ns < 0, "-", "")
    whole, frac = np.divmod(np.abs(ns), 1000)
    return [f"{s}{w}.{f:03d}" for s, w, f in zip(sign.tolist(), whole.tolist(), frac.tolist())]


def write_chrome(trace: Trace, out: IO[bytes]) -> None:
    """Writes `trace` as Chrome JSON to the binary stream `out` (see the module docstring)."""
    lanes = export_lanes(trace)
    top = dict(trace.metadata)
    top.setdefault(kineto.DISPLAY_TIME_UNIT.name, "ns")
    head = msgspec.json.encode(top)
    out.write(head[:-1] + (b', "traceEvents": [\n' if len(head) > 2 else b'"traceEvents": [\n'))
    first = True
    for chunk in _event_chunks(trace, lanes):
        if chunk:
            out.write((b"" if first else b",\n") + ",\n".join(chunk).encode())
            first = False
    out.write(b"\n]}\n")


def _event_chunks(trace: Trace, lanes: ExportLanes) -> Iterator[list[str]]:
    yield _metadata_events(lanes)
    yield from _complete_events(trace, lanes)
    yield from _memory_events(trace, lanes)
    yield _counter_events(trace)
    yield from _flow_events(trace, lanes)


def _metadata_events(lanes: ExportLanes) -> list[str]:
    out = []
    for pid, name in lanes.process_names.items():
        out.append(_meta("process_name", pid, 0, {"name": name}))
    for pid, label in lanes.process_labels.items():
        out.append(_meta(kineto.PROCESS_LABELS.name, pid, 0, {kineto.PROCESS_LABELS_ARG.name: label}))
    for i, name in lanes.names.items():
        out.append(_meta(kineto.THREAD_NAME.name, lanes.pid[i], lanes.tid[i], {kineto.THREAD_NAME_ARG.name: name}))
    return out


def _meta(name: str, pid: int, tid: int, args: dict[str, str]) -> str:
    return json.dumps({"name": name, "ph": kineto.PHASE_METADATA.name, "ts": 0, "pid": pid, "tid": tid, "args": args})


def _complete_events(trace: Trace, lanes: ExportLanes) -> Iterator[list[str]]:
    names = [json.dumps(n) for n in trace.names]
    cats = [json.dumps(c) for c in trace.cats]
    pid_tid = [f'"pid": {p}, "tid": {t}' for p, t in zip(lanes.pid, lanes.tid)]
    args = args_texts(trace)
    for lo in range(0, len(trace), _CHUNK):
        sl = slice(lo, min(lo + _CHUNK, len(trace)))
        ts, dur = us_texts(trace.start_ns[sl]), us_texts(trace.dur_ns[sl])
        chunk = []
        for n, c, ln, t, d in zip(trace.name_id[sl].tolist(), trace.cat_id[sl].tolist(), trace.lane[sl].tolist(), ts, dur):
            a = next(args)
            tail = f', "args": {a.decode()}' if a else ""
            chunk.append(f'{{"ph": "X", "cat": {cats[c]}, "name": {names[n]}, {pid_tid[ln]}, "ts": {t}, "dur": {d}{tail}}}')
        yield chunk


def _memory_events(trace: Trace, lanes: ExportLanes) -> Iterator[list[str]]:
    name = json.dumps(MEMORY_NAME)
    for series in trace.memory:
        args = memory_args(series)
        for lo in range(0, series.ts_ns.size, _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            ts = us_texts(series.ts_ns[sl])
            pids, tids = [lanes.pid_of(p, series.rank) for p in series.pid[sl].tolist()], series.tid[sl].tolist()
            yield [
                f'{{"ph": "i", "s": "t", "cat": "{MEMORY_CATEGORY}", "name": {name}, "pid": {p}, "tid": {t}, "ts": {s}, '
                f'"args": {json.dumps(a)}}}'
                for p, t, s, a in zip(pids, tids, ts, args)
            ]


def _counter_events(trace: Trace) -> list[str]:
    out = []
    for c in trace.counters:
        head = f'{{"ph": "C", "cat": {json.dumps(c.cat)}, "name": {json.dumps(c.name)}, "pid": {c.pid}, "tid": {c.tid}'
        key = json.dumps(c.key)
        points = zip(us_texts(c.ts_ns), c.values.tolist())
        out += [f'{head}, "ts": {t}, "args": {{{key}: {v!r}}}}}' for t, v in points if math.isfinite(v)]
    return out


def _flow_events(trace: Trace, lanes: ExportLanes) -> Iterator[list[str]]:
    """Each arrow as an "s" / "f" pair (id: its number among the bound arrows), a chunk at a time."""
    flows = trace.flows
    if len(flows) == 0:
        return
    bound = np.flatnonzero((flows.src >= 0) & (flows.dst >= 0))
    cats = [json.dumps(c) for c in flows.cats]
    for lo in range(0, bound.size, _CHUNK):
        some = bound[lo : lo + _CHUNK]
        src, dst = flows.src[some], flows.dst[some]
        src_ts, dst_ts = us_texts(trace.start_ns[src]), us_texts(trace.start_ns[dst])  # not every event's
        points = zip(flows.cat_id[some].tolist(), src_ts, dst_ts, trace.lane[src].tolist(), trace.lane[dst].tolist())
        out = []
        for k, (c, s, d, sl, dl) in enumerate(points, start=lo + 1):
            common = f'"cat": {cats[c]}, "name": {cats[c]}, "id": {k}'
            out.append(f'{{"ph": "s", {common}, "pid": {lanes.pid[sl]}, "tid": {lanes.tid[sl]}, "ts": {s}}}')
            out.append(f'{{"ph": "f", "bp": "e", {common}, "pid": {lanes.pid[dl]}, "tid": {lanes.tid[dl]}, "ts": {d}}}')
        yield out
