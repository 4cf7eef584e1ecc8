"""Flow events (`"ph"` "s", "t", "f": `ac2g` launch -> kernel, `fwdbwd`), read into columns of
endpoints on first use of `Trace.flows`, not at load time (`flows.bind_flows` binds them)."""

from __future__ import annotations

import itertools
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.decode import _Event, _Interner, _picked
from branchscope.profiling.trace.fields import _MAX_ABS_NS, _ns_column, _to_ns


class _FlowEvent(_Event, gc=False):
    """A flow endpoint: decoded only when the trace's flows are first used."""

    id: Any = None
    bp: Any = None


_FLOW_DECODER = msgspec.json.Decoder(_FlowEvent, float_hook=str)
#: A flow endpoint's phase as `flows.bind_flows` reads it: 0 start, 1 step, 2 end.
_PHASE = {
    ph: code
    for code, k in enumerate((kineto.PHASE_FLOW_START, kineto.PHASE_FLOW_STEP, kineto.PHASE_FLOW_END))
    for ph in k.spellings
}
#: An end's "bp" that binds it to the slice enclosing it, as a start or step always is (a tuple:
#: "bp" may be any JSON value, a list too, which a set could not be asked for).
_ENCLOSING = kineto.BIND_ENCLOSING.spellings


def _flow_ts(ts: Any) -> int | None:
    try:
        return _to_ns(ts)
    except (ValueError, OverflowError):
        return None


def _flow_times(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Endpoints' times in exact ns (by numpy, as complete events' are: `_ns_column`), and which
    are usable; where any is broken or out of range, one at a time, the broken ones unusable."""
    try:
        return _ns_column(values, "flow time"), np.ones(len(values), dtype=bool)
    except (ValueError, TypeError, OverflowError):
        ns = list(map(_flow_ts, values))
        ok = np.array([t is not None and abs(t) < _MAX_ABS_NS for t in ns], dtype=bool)
        return np.array([t if good else 0 for t, good in zip(ns, ok.tolist())], dtype=np.int64), ok


_get_ph, _get_id, _get_cat, _get_bp, _get_ts = (attrgetter(a) for a in ("ph", "id", "cat", "bp", "ts"))
_get_pid, _get_tid = attrgetter("pid"), attrgetter("tid")
#: The types a flow's id may have (a bool is no id, nor a float: JSON's ids are ints or strings).
_ID_TYPES = (int, str)


def flow_point_columns(
    raws: list[msgspec.Raw], lane_lookup: dict[tuple[Any, Any], int]
) -> tuple[np.ndarray, ...] | None:
    """Flow endpoints as columns (phase, id, cat, lane, ts_ns, binds_enclosing, cat names).

    Called on first use of `Trace.flows`, not at load time: most views never draw arrows. An
    endpoint with a broken id or time, or on a thread no complete event names, is dropped (its
    arrow is not drawn) rather than failing a trace that has already loaded. Fields are taken by
    `map` and numpy, never a Python step per endpoint (but for broken times).
    """
    events = list(map(_FLOW_DECODER.decode, raws))
    lanes = np.fromiter(
        map(lane_lookup.get, zip(map(_get_pid, events), map(_get_tid, events)), itertools.repeat(-1)),
        dtype=np.int64, count=len(events),
    )  # fmt: skip
    id_ok = np.fromiter(map(_ID_TYPES.__contains__, map(type, map(_get_id, events))), dtype=bool, count=len(events))
    keep = np.flatnonzero((lanes >= 0) & id_ok)
    ts, usable = _flow_times(list(map(_get_ts, _picked(events, keep))))
    keep, ts = keep[usable], ts[usable]
    if keep.size == 0:
        return None
    pts = _picked(events, keep)
    phase = np.fromiter(map(_PHASE.__getitem__, map(_get_ph, pts)), dtype=np.int8, count=len(pts))
    flow_id = _Interner().ids(list(map(_get_id, pts))).astype(np.int64)
    cats = _Interner()
    cat = cats.ids(list(map(_get_cat, pts)))
    binds_enclosing = np.fromiter(map(_ENCLOSING.__contains__, map(_get_bp, pts)), dtype=bool, count=len(pts))
    enclosing = (phase != _PHASE[kineto.PHASE_FLOW_END.name]) | binds_enclosing
    return (phase, flow_id, cat, lanes[keep].astype(np.int32), ts, enclosing, np.array(list(cats.table), dtype=object))
