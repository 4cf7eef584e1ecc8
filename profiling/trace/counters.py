"""Counter events (`"ph": "C"`): each numeric value of their `args` becomes a point of a
`CounterTrack`, one track per (pid, tid, name, args key); numeric strings count, other values are
skipped."""

from __future__ import annotations

import numpy as np

from branchscope.profiling.trace.decode import _decode_args, _WithArgs
from branchscope.profiling.trace.fields import _ns_column, _real_id
from branchscope.profiling.trace.model import CounterTrack


def _counter_tracks(events: list[_WithArgs]) -> list[CounterTrack]:
    if not events:
        return []
    ts = _ns_column([e.ts for e in events], "counter timestamp")
    points: dict[tuple[int, int, str, str, str], tuple[list[int], list[float]]] = {}
    for i, (e, args) in enumerate(zip(events, _decode_args(events))):
        pid = _real_id(e.pid)
        if pid is None or not isinstance(args, dict):
            continue
        tid = _real_id(e.tid)
        for key, value in args.items():
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    continue
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            t, v = points.setdefault((pid, tid if tid is not None else 0, e.name, key, e.cat), ([], []))
            t.append(i)
            v.append(float(value))
    tracks = []
    for (pid, tid, name, key, cat), (idx, values) in points.items():
        t_ns = ts[np.array(idx, dtype=np.int64)]
        order = np.argsort(t_ns, kind="stable")
        tracks.append(
            CounterTrack(
                name=name, pid=pid, tid=tid, key=key, ts_ns=t_ns[order],
                values=np.array(values, dtype=np.float64)[order], cat=cat,
            )
        )
    tracks.sort(key=lambda c: (c.pid, c.tid, c.name, c.key))
    return tracks
