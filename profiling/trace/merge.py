"""Several ranks' traces of one distributed job, as one `Trace` on one clock.

A multi-rank job writes one trace per rank; comparing ranks (stragglers, unbalanced memory)
needs them side by side. Lanes keep their rank, memory devices are prefixed with it, and traces
whose timestamps are relative to different `baseTimeNanoseconds` are shifted onto the first one's.
Flow arrows are not carried over: they link events within one rank's trace.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from branchscope.profiling.trace.model import CounterTrack, Lane, MemorySeries, Trace, build_trace
from branchscope.profiling.trace.reader import load_trace


def load_traces(paths: Sequence[str | os.PathLike[str]]) -> Trace:
    """One trace as is, or several merged (see `merge_traces`)."""
    traces = [load_trace(p) for p in paths]
    return traces[0] if len(traces) == 1 else merge_traces(traces)


def _clock_shift(trace: Trace, reference: Trace) -> int:
    if trace.base_time_ns is not None and reference.base_time_ns is not None:
        return trace.base_time_ns - reference.base_time_ns
    return 0


def merge_traces(traces: Sequence[Trace]) -> Trace:
    if not traces:
        raise ValueError("merge_traces needs at least one trace")
    reference = traces[0]
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    lanes: list[Lane] = []
    starts: list[np.ndarray] = []
    durs: list[np.ndarray] = []
    lane_cols: list[np.ndarray] = []
    name_cols: list[np.ndarray] = []
    cat_cols: list[np.ndarray] = []
    raw_args: list[Any] = []
    memory: list[MemorySeries] = []
    counters: list[CounterTrack] = []
    for position, t in enumerate(traces):
        rank = t.rank if t.rank is not None else position
        shift = _clock_shift(t, reference)
        name_map = np.array([names.setdefault(n, len(names)) for n in t.names], dtype=np.int32)
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in t.cats], dtype=np.int32)
        lane_base = len(lanes)
        lanes += [replace(ln, index=lane_base + ln.index, rank=rank) for ln in t.lanes]
        starts.append(t.start_ns + shift)
        durs.append(t.dur_ns)
        lane_cols.append(t.lane + lane_base)
        name_cols.append(name_map[t.name_id] if len(t) else np.zeros(0, np.int32))
        cat_cols.append(cat_map[t.cat_id] if len(t) else np.zeros(0, np.int32))
        raw_args += t._raw_args if t._raw_args is not None else [None] * len(t)
        memory += [replace(m, device=f"rank{rank}/{m.device}", ts_ns=m.ts_ns + shift) for m in t.memory]
        counters += [replace(c, ts_ns=c.ts_ns + shift) for c in t.counters]
    return build_trace(
        path=" + ".join(t.path for t in traces),
        start_ns=np.concatenate(starts),
        dur_ns=np.concatenate(durs),
        lane=np.concatenate(lane_cols),
        name_id=np.concatenate(name_cols),
        cat_id=np.concatenate(cat_cols),
        names=list(names),
        cats=list(cats),
        lanes=lanes,
        memory=memory,
        counters=counters,
        metadata={"ranks": [t.metadata for t in traces], "baseTimeNanoseconds": reference.base_time_ns},
        raw_args=raw_args,
    )
