"""Flow events (`"ph"` "s", "t", "f": `ac2g` launch -> kernel, `fwdbwd`), read into columns of
endpoints on first use of `Trace.flows`, not at load time (`flows.bind_flows` binds them)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.decode import _Event
from branchscope.profiling.trace.fields import _MAX_ABS_NS, _to_ns


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
_END = frozenset(kineto.PHASE_FLOW_END.spellings)
#: An end's "bp" that binds it to the slice enclosing it, as a start or step always is (a tuple:
#: "bp" may be any JSON value, a list too, which a set could not be asked for).
_ENCLOSING = kineto.BIND_ENCLOSING.spellings


def _flow_ts(e: _Event) -> int | None:
    try:
        return _to_ns(e.ts)
    except (ValueError, OverflowError):
        return None


def flow_point_columns(
    raws: list[msgspec.Raw], lane_lookup: dict[tuple[Any, Any], int]
) -> tuple[np.ndarray, ...] | None:
    """Flow endpoints as columns (phase, id, cat, lane, ts_ns, binds_enclosing, cat names).

    Called on first use of `Trace.flows`, not at load time: most views never draw arrows. An
    endpoint with a broken id or time is dropped (its arrow is not drawn) rather than failing a
    trace that has already loaded.
    """
    events = list(map(_FLOW_DECODER.decode, raws))
    pts, ts_list = [], []
    for e in events:
        if type(e.id) in (int, str) and (e.pid, e.tid) in lane_lookup:
            t = _flow_ts(e)
            if t is not None and abs(t) < _MAX_ABS_NS:
                pts.append(e)
                ts_list.append(t)
    if not pts:
        return None
    phase = np.array([_PHASE[e.ph] for e in pts], dtype=np.int8)
    ids: dict[Any, int] = {}
    flow_id = np.array([ids.setdefault(e.id, len(ids)) for e in pts], dtype=np.int64)
    cat_names: dict[str, int] = {}
    cat = np.array([cat_names.setdefault(e.cat, len(cat_names)) for e in pts], dtype=np.int32)
    lane = np.array([lane_lookup[(e.pid, e.tid)] for e in pts], dtype=np.int32)
    ts = np.array(ts_list, dtype=np.int64)
    enclosing = np.array([e.ph not in _END or e.bp in _ENCLOSING for e in pts], dtype=bool)
    return (phase, flow_id, cat, lane, ts, enclosing, np.array(list(cat_names), dtype=object))
