"""Read a torch.profiler / Chrome trace file into a `Trace`: `load_trace`, the entry point.

Formats handled, all seen in real traces: plain or gzipped JSON (detected by magic bytes, not by
name), an object with `traceEvents` or a bare event array, timestamps as ints, floats with ns
decimals (kept exact by reading the number's text), or strings, relative to `baseTimeNanoseconds`
or absolute, negative (wrapped 32-bit) tids, pseudo processes with string pids ("Spans",
"Traces"), and the legacy format of PyTorch <= 1.9 ("stream 7" tids, `Kernel`/`Memcpy` categories,
`[memory]` events without `Total Allocated`).

A load goes through these modules, and a format quirk goes in the one that reads what it is about;
a key spelled another way (a new or older spelling of an arg, metadata key, event name or category)
is one entry in `kineto`, the vocabulary every reader reads its keys from, and a golden test in
tests/trace/test_kineto_vocabulary.py:

- `text`: the file, read as untrusted input (regular files only, gzip by magic bytes, each MiB
  checked before the next is read, a memory budget); its docstring says what is refused and why;
- `decode`: the text split into one raw slice per event, decoded into numpy columns (a large
  trace's second half by a forked child on another core), parts merged; `fields`: one field's
  values as numbers (timestamps in exact ns, pids and tids);
- what the columns mean: `lanes` (threads, GPU streams and categories, roles, metadata events),
  `memory_events` (`[memory]` events, devices, capacities), `counters`, `flow_events`.

`load_trace` reports its progress and can be cancelled (`progress`). The names that other modules
and tests imported from here before the reader was split (issue 18) are still importable from
here (the `import x as x` lines); each is defined, and changed, in its own module. The knobs tests
set are not among them, since setting a copy here would change nothing: `decode._CHUNK`,
`decode.PARALLEL_MIN_EVENTS`, `decode.CHILD_WAIT_FLOOR_S`.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.correlation_flows import names_launch
from branchscope.profiling.trace.counters import _counter_tracks
from branchscope.profiling.trace.decode import (
    _WITH_ARGS_DECODER,
    _decode_events,
    _merge_parts,
    _picked,
    _split_events,
)
from branchscope.profiling.trace.decode import _Part as _Part
from branchscope.profiling.trace.fields import _MAX_ABS_NS as _MAX_ABS_NS
from branchscope.profiling.trace.fields import _ns_column as _ns_column
from branchscope.profiling.trace.fields import _real_id as _real_id
from branchscope.profiling.trace.flow_events import flow_point_columns
from branchscope.profiling.trace.flows import flow_binder
from branchscope.profiling.trace.lanes import GPU_CATEGORIES, _lanes, _read_metadata_events
from branchscope.profiling.trace.lanes import _best_name as _best_name
from branchscope.profiling.trace.lanes import _lane_tid as _lane_tid
from branchscope.profiling.trace.lanes import _role as _role
from branchscope.profiling.trace.memory_events import _device_pairs as _device_pairs
from branchscope.profiling.trace.memory_events import _memory_series
from branchscope.profiling.trace.model import (
    CounterTrack,
    LoadCancelled,
    Trace,
    TraceFormatError,
    build_trace,
)
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.text import _memory_budget as _memory_budget
from branchscope.profiling.trace.text import _mib as _mib
from branchscope.profiling.trace.text import _read_bytes, is_protobuf
from branchscope.profiling.trace.text import check_trace_path as check_trace_path

#: `progress(phase, fraction)`: phase "reading", "parsing", "events", "lanes" or "memory", fraction
#: 0..1 within it; return False to stop the load (`LoadCancelled`).
ProgressCallback = Callable[[str, float], bool]


class _Progress:
    """Calls a `ProgressCallback` when a phase starts, and then once its fraction has grown by 1% or
    50 ms have passed; raises `LoadCancelled` when the callback returns False. No callback: no-op."""

    __slots__ = ("_fn", "_phase", "_fraction", "_time")

    def __init__(self, fn: ProgressCallback | None) -> None:
        self._fn = fn
        self._phase = ""
        self._fraction = 0.0
        self._time = 0.0

    def __call__(self, phase: str, fraction: float) -> None:
        fn = self._fn
        if fn is None:
            return
        now = time.monotonic()
        if phase == self._phase and fraction < self._fraction + 0.01 and now < self._time + 0.05:
            return
        self._phase, self._fraction, self._time = phase, fraction, now
        go_on = fn(phase, min(max(fraction, 0.0), 1.0))
        if go_on is not None and not go_on:
            raise LoadCancelled(f"loading stopped while {phase}")


def load_trace(path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> Trace:
    """Load a trace file. Raises `TraceFormatError` (a ValueError) naming the file and the problem.

    `progress(phase, fraction)` is called now and then (see `ProgressCallback`); when it returns
    False the load stops with `LoadCancelled`, keeping nothing.
    """
    p = Path(path)
    report = _Progress(progress)
    data = _read_bytes(p, report)
    # Hundreds of thousands of new objects would trigger many useless cyclic-GC passes.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(str(p), data, report)
    except TraceFormatError:
        raise
    except RecursionError:
        raise TraceFormatError(f"{p}: nesting too deep to be a trace") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    except (ValueError, TypeError, OverflowError, KeyError, IndexError) as exc:
        raise TraceFormatError(f"{p}: malformed events: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()



def _parse(path: str, data: bytes, report: _Progress) -> Trace:
    report("parsing", 0.0)
    if is_protobuf(data):
        from branchscope.profiling.trace.perfetto import read_perfetto  # protobuf only when one is opened

        columns = read_perfetto(path, data)
        report("parsing", 1.0)
        return _assemble(path, report, **columns)
    try:
        events, metadata = _split_events(path, data)
        report("parsing", 1.0)
        return _build(path, events, metadata, report)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"{path}: unexpected trace structure: {exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"{path}: not valid JSON: {exc}") from None


def _build(path: str, raw_events: list[Any], metadata: dict[str, Any], report: _Progress) -> Trace:
    parts = _decode_events(raw_events, report)
    tables, col = _merge_parts(parts)
    raw_keys, names, cats = tables["thread"], list(tables["name_id"]), list(tables["cat_id"])
    del tables
    # Complete events keep their whole text for `args` (read on demand); the rest is dropped.
    raw_args = _picked(raw_events, col["index"])
    flow_raws = _picked(raw_events, np.concatenate([p.at["flow"] for p in parts]))
    meta_events = list(map(_WITH_ARGS_DECODER.decode, _picked(raw_events, np.concatenate([p.at["meta"] for p in parts]))))
    counter_raws = _picked(raw_events, np.concatenate([p.at["counter"] for p in parts]))
    counter_events = list(map(_WITH_ARGS_DECODER.decode, counter_raws))
    raw_events.clear()
    memory_parts = [p.memory for p in parts if p.memory]
    del parts, counter_raws
    process_labels, thread_names = _read_metadata_events(meta_events)
    return _assemble(
        path, report, raw_keys=raw_keys, thread=col["thread"], names=names, cats=cats, name_id=col["name_id"],
        cat_id=col["cat_id"], start_ns=col["start"], dur_ns=col["dur"], raw_args=raw_args, metadata=metadata,
        memory_parts=memory_parts, counters=_counter_tracks(counter_events), process_labels=process_labels,
        thread_names=thread_names,
        points=(lambda _lane, lookup: flow_point_columns(flow_raws, lookup())) if flow_raws else None,
    )  # fmt: skip


def _assemble(
    path: str,
    report: _Progress,
    *,
    raw_keys: dict[Any, int],
    thread: np.ndarray,
    names: list[str],
    cats: list[str],
    name_id: np.ndarray,
    cat_id: np.ndarray,
    start_ns: np.ndarray,
    dur_ns: np.ndarray,
    raw_args: Sequence[Any],
    metadata: dict[str, Any],
    memory_parts: list[dict[str, np.ndarray]],
    counters: list[CounterTrack],
    process_labels: dict[int, str],
    thread_names: dict[tuple[int, int], list[str]],
    points: Callable[[np.ndarray, Callable[[], dict[tuple[Any, Any], int]]], Any] | None,
) -> Trace:
    """The `Trace` of a file's events as columns, whatever its format (JSON: `_build`; Perfetto:
    `perfetto.read_perfetto`): memory series, lanes, flows, events sorted into lanes. `points`
    makes the flow endpoints' columns from the events' lanes and the {(pid, tid): lane} map (None:
    the file has no flow events)."""
    if dur_ns.size and dur_ns.min() < 0:
        raise TraceFormatError(f"{path}: negative duration in a complete event")
    report("memory", 0.0)
    memory = _memory_series(memory_parts, metadata)
    report("lanes", 0.0)
    info = RunInfo.parse(kineto.RUN_FACTS.of(metadata))
    gpu_cat = np.array([c in GPU_CATEGORIES for c in cats], dtype=bool)
    lane, lanes, lane_lookup = _lanes(raw_keys, thread, gpu_cat[cat_id], process_labels, thread_names, info)
    del thread
    # Arrows come from flow events, or from correlation ids where a launch is named (none: no binder).
    flow_points = (lambda: points(lane, lane_lookup)) if points is not None else None
    binder = flow_binder(flow_points) if flow_points is not None or names_launch(names) else None

    report("lanes", 0.2)
    trace = build_trace(
        path=path,
        start_ns=start_ns,
        dur_ns=dur_ns,
        lane=lane,
        name_id=name_id,
        cat_id=cat_id,
        names=names,
        cats=cats,
        lanes=lanes,
        memory=memory,
        counters=counters,
        metadata=metadata,
        raw_args=raw_args,
        flow_binder=binder,
    )
    report("lanes", 1.0)
    return trace
