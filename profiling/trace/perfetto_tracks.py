"""Perfetto tracks as the (pid, tid) lanes the rest of the trace engine knows from JSON traces.

- a thread track (`TrackDescriptor.thread`) is the lane (pid, tid), its `thread_name` (else the
  track's name) the JSON's `thread_name` metadata;
- a process track (`.process`) gives its pid's `process_labels` (joined with ","; a process named
  "GPU N" without labels is labelled so, which makes its lanes device N's streams, as in JSON),
  and events right on it go to the lane (pid, 0);
- any other track takes the lane of its nearest thread ancestor (`parent_uuid`): so an exporter
  may put overlapping events on child tracks of their thread and they come back on its lane.
  Under a process and no thread, a track named "stream N" is the lane (pid, N) (kineto's GPU
  streams), any other name a lane of its own (pid, `SYNTHETIC_TID` + k); with no ancestor, pid 0;
- a counter track (`.counter`) is a `CounterTrack`: name the track's, key its `description`
  (else the name), category its first, pid and tid its ancestor's lane.

An event on a track no descriptor names gets a lane of its own, as Perfetto draws it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.perfetto_schema import text

#: The first tid given to a track that names no thread (`SYNTHETIC_TID + k`, k counting such tracks).
SYNTHETIC_TID = 1_000_000_000
#: The track that holds the trace's metadata event, by name (see docs/formats.md).
METADATA_TRACK = kineto.RUN_FACTS.name
_DEPTH = 64  # the most ancestors climbed: a cycle of parents ends there


@dataclass
class CounterInfo:
    name: str
    key: str
    cat: str
    pid: int
    tid: int


@dataclass
class Tracks:
    """What the reader needs of a trace's track descriptors."""

    lane_of: dict[int, tuple[int, int]] = field(default_factory=dict)  # track uuid -> (pid, tid)
    process_labels: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    counters: dict[int, CounterInfo] = field(default_factory=dict)
    metadata_tracks: set[int] = field(default_factory=set)
    _synthetic: int = 0

    def synthetic(self, pid: int) -> tuple[int, int]:
        """A lane of its own under `pid`."""
        self._synthetic += 1
        return pid, SYNTHETIC_TID + self._synthetic - 1

    def lanes(self, uuids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (pid, tid) of each track uuid (int64 columns); a uuid no descriptor names gets a lane of its own."""
        unique, inverse = np.unique(uuids, return_inverse=True)
        pairs = [self.lane_of.get(u) or self.lane_of.setdefault(u, self.synthetic(0)) for u in unique.tolist()]
        pid = np.array([p for p, _ in pairs], np.int64)
        tid = np.array([t for _, t in pairs], np.int64)
        return pid[inverse], tid[inverse]


def _name(d: Any) -> str:
    return text(d.name or d.static_name)


def read_tracks(descriptors: list[Any]) -> Tracks:
    """The lanes, names and counters of the trace's `TrackDescriptor`s (the first of each uuid counts)."""
    out = Tracks()
    by_uuid: dict[int, Any] = {}
    for d in descriptors:
        by_uuid.setdefault(d.uuid, d)
    for uuid, d in by_uuid.items():
        if d.HasField("process"):
            _read_process(out, d)
        if d.HasField("thread"):
            pid, tid = d.thread.pid, d.thread.tid
            out.lane_of[uuid] = (pid, tid)
            name = text(d.thread.thread_name) or _name(d)
            names = out.thread_names.setdefault((pid, tid), [])
            if name and name not in names:
                names.append(name)
        if _name(d) == METADATA_TRACK and not d.HasField("thread") and not d.HasField("process"):
            out.metadata_tracks.add(uuid)
    for uuid, d in by_uuid.items():
        if uuid not in out.lane_of:
            out.lane_of[uuid] = _inherited(out, by_uuid, d)
        if d.HasField("counter"):
            name = _name(d)
            pid, tid = out.lane_of[uuid]
            cats = d.counter.categories
            out.counters[uuid] = CounterInfo(name, text(d.description) or name, text(cats[0]) if cats else "", pid, tid)
    return out


def _read_process(out: Tracks, d: Any) -> None:
    pid = d.process.pid
    labels = ",".join(text(x) for x in d.process.process_labels)
    name = text(d.process.process_name)
    if not labels and kineto.GPU_PROCESS_LABEL.search(name):
        labels = name
    if labels:
        out.process_labels[pid] = labels


def _inherited(out: Tracks, by_uuid: dict[int, Any], d: Any) -> tuple[int, int]:
    """The lane of a track that names no thread (module docstring)."""
    if d.HasField("process"):
        return d.process.pid, 0
    parent = by_uuid.get(d.parent_uuid) if d.HasField("parent_uuid") else None
    for _ in range(_DEPTH):
        if parent is None:
            return out.synthetic(0)
        if parent.HasField("thread"):
            return parent.thread.pid, parent.thread.tid
        if parent.HasField("process"):
            m = kineto.STREAM_TID.match(_name(d).strip())
            return (parent.process.pid, int(m.group(1))) if m else out.synthetic(parent.process.pid)
        parent = by_uuid.get(parent.parent_uuid) if parent.HasField("parent_uuid") else None
    return out.synthetic(0)
