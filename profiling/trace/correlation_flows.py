"""Arrows from a launch to the GPU work it launched, made from correlation ids where the trace's
flow events give none.

CUPTI (and roctracer) give a runtime call and each GPU activity it caused one correlation id, which
kineto writes into both events' args (`kineto.CORRELATION`); kineto also writes a flow event pair
for them (`ac2g`), from which `flows.bind_flows` makes the arrow. Some traces hold the ids and no
flow events (HolisticTraceAnalysis's sampled two-rank trace, a trace filtered by a tool that drops
"ph" "s"/"f"), and flow events give one arrow per id, so a cudaGraphLaunch's kernels after the first
get none. Here: each GPU-lane event that no arrow reaches yet gets one from the launch (a CPU-lane
event whose name begins as `kineto.LAUNCH_PREFIX` says) with its correlation id. An arrow a flow
event gives is never made twice: the event it reaches is left out.

Done on first use of `Trace.flows`, with `flows.bind_flows`; only the args of the launches and of
the GPU events left are read (one C call each, no dict per event), and the matching is numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from operator import attrgetter
from typing import Any

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.collectives import first_said
from branchscope.profiling.trace.lane_table import KIND_ORDER
from branchscope.profiling.trace.model import Flows, Trace

_GPU = KIND_ORDER.index("gpu")
_LAUNCH_PREFIXES = kineto.LAUNCH_PREFIX.spellings


def _is_launch(name: str) -> bool:
    return name.startswith(_LAUNCH_PREFIXES)


def names_launch(names: Sequence[str]) -> bool:
    """Whether any of a trace's event names is a launch's: without one, no arrow can be made here."""
    return any(map(_is_launch, names))


@cache
def _decoder() -> Any:
    """A decoder of one event's text that reads only its correlation id (every spelling, absent: -1)."""
    import msgspec

    args = msgspec.defstruct("_CorrelationArgs", kineto.struct_fields("corr", kineto.CORRELATION, int, -1), gc=False)
    event = msgspec.defstruct("_Correlated", [("args", args, msgspec.field(default_factory=args))], gc=False)
    return msgspec.json.Decoder(event)


def _lenient_id(args: dict[str, Any]) -> int:
    value = kineto.CORRELATION.of(args)
    return value if type(value) is int and 0 <= value < 1 << 63 else -1


def correlation_ids(trace: Trace, idx: np.ndarray) -> np.ndarray:
    """The correlation id of each event `idx` (int64; -1 where it says none, or an odd one)."""
    import msgspec

    raws = trace._raw_args
    if raws is None or idx.size == 0:
        return np.full(idx.size, -1, dtype=np.int64)
    picked = list(map(raws.__getitem__, idx.tolist()))
    try:
        args = list(map(attrgetter("args"), map(_decoder().decode, picked)))
        return np.maximum(first_said(args, "corr", kineto.CORRELATION, -1), -1)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, OverflowError):
        # a dict (a synthetic trace's args), None, or an id of another type: one by one
        return np.fromiter(
            (_lenient_id(r if isinstance(r, dict) else trace.event_args(i)) for r, i in zip(picked, idx.tolist())),
            dtype=np.int64,
            count=idx.size,
        )


def _launches(trace: Trace) -> np.ndarray:
    """The events on CPU lanes whose names are launches' (ascending)."""
    is_launch = np.fromiter(map(_is_launch, trace.names), dtype=bool, count=len(trace.names))
    on_cpu = trace.lane_kind_codes[trace.lane] != _GPU
    return np.flatnonzero(is_launch[trace.name_id] & on_cpu) if is_launch.any() else np.zeros(0, dtype=np.int64)


def _unreached_gpu_events(trace: Trace, given: Flows) -> np.ndarray:
    """The events on GPU lanes that no arrow of `given` reaches (ascending)."""
    on_gpu = trace.lane_kind_codes[trace.lane] == _GPU
    reached = given.dst[(given.src >= 0) & (given.dst >= 0)]
    on_gpu[reached] = False
    return np.flatnonzero(on_gpu)


def _launch_of(l_ids: np.ndarray, l_start: np.ndarray, launches: np.ndarray, g_ids: np.ndarray,
               g_start: np.ndarray) -> np.ndarray:  # fmt: skip
    """For each GPU event (its id and start), the launch with its id (-1: none). Where several
    launches say one id (processes of one trace each count their own), the last one starting at
    or before the GPU event, else the first."""
    order = np.lexsort((l_start, l_ids))
    ids, starts, events = l_ids[order], l_start[order], launches[order]
    lo = np.searchsorted(ids, g_ids, side="left")
    hi = np.searchsorted(ids, g_ids, side="right")
    found = np.where(hi > lo, events[np.minimum(lo, max(events.size - 1, 0))], -1)
    for k in np.flatnonzero(hi - lo > 1).tolist():
        before = int(np.searchsorted(starts[lo[k] : hi[k]], g_start[k], side="right")) - 1
        found[k] = events[lo[k] + max(before, 0)]
    return found


def correlation_flows(trace: Trace, given: Flows) -> Flows:
    """The arrows from launches to their GPU work that `given` (the trace's flow events' arrows)
    lacks, made from correlation ids (see the module docstring); all `from_correlation`."""
    gpu = _unreached_gpu_events(trace, given)
    launches = _launches(trace) if gpu.size else np.zeros(0, dtype=np.int64)
    if launches.size == 0:
        return Flows.empty()
    l_ids = correlation_ids(trace, launches)
    said = l_ids >= 0
    launches, l_ids = launches[said], l_ids[said]
    g_ids = correlation_ids(trace, gpu)
    said = g_ids >= 0
    gpu, g_ids = gpu[said], g_ids[said]
    if launches.size == 0 or gpu.size == 0:
        return Flows.empty()
    src = _launch_of(l_ids, trace.start_ns[launches], launches, g_ids, trace.start_ns[gpu])
    made = src >= 0
    n = int(made.sum())
    return Flows(
        cats=[kineto.LAUNCH_FLOW_CATEGORY.name],
        cat_id=np.zeros(n, dtype=np.int32),
        flow_id=g_ids[made],
        src=src[made].astype(np.int64),
        dst=gpu[made].astype(np.int64),
        from_correlation=np.ones(n, dtype=bool),
    )
