"""Many trace files read on every core: a few forked children, each reading its share (issue 23).

A job of many ranks is many files; `load_trace` reads one on one core (its second half on another
only for a big file). `forked_map(fn, items)` runs `fn(item)` for each item in one of `workers`
forked children (the cores this process may use; `forked.ForkedCall`: each dies with its parent
and is killed when the map ends, done or not), each child doing its share of the items one after
another (a fork per child, not per file: a fork of a large process costs), and reads each result back
through its pipe as `encode`/`decode` write it: a msgpack header, then each numpy array's bytes as
they are (as the reader's own forked half does). No pickle: what comes back is numbers, strings
and the trace model's own dataclasses, named in `_CLASSES`, rebuilt field by field.

An item whose `fn` raised (the child goes on with its next), or whose child died, or whose result
cannot be encoded, is None in the results: the caller then does that item itself, so a broken file's error is the caller's own,
named as a single load names it. `trace_parts(trace)` and `trace_from_parts(parts)` carry a whole
`Trace` (its columns, lanes, memory, counters, metadata, each event's text for its args, and its
flows, bound in the child).
"""

from __future__ import annotations

import dataclasses
import io
import os
import select
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import msgspec
import numpy as np

from branchscope.profiling.trace import decode as _decode
from branchscope.profiling.trace import forked
from branchscope.profiling.trace.model import CounterTrack, Flows, Lane, MemorySeries, Trace

T = TypeVar("T")
R = TypeVar("R")

#: The dataclasses a child's result may hold, rebuilt by name (nothing else is ever constructed).
_CLASSES: dict[str, type] = {c.__name__: c for c in (Lane, MemorySeries, CounterTrack, Flows)}


def register(cls: type) -> type:
    """Let results hold instances of the dataclass `cls` (a frozen record of plain fields)."""
    _CLASSES[cls.__name__] = cls
    return cls


# ---- encoding: msgpack over plain values, arrays after it ----------------------------------


class Pieces:
    """Buffers sent as one array of bytes, written one after another: the receiver gets one
    uint8 array of their `nbytes`, the sender never joins them (a trace's event texts, as large
    as its JSON, are not copied once more in the child)."""

    dtype = np.dtype(np.uint8)

    def __init__(self, parts: Sequence[Any], nbytes: int) -> None:
        self.parts = parts
        self.nbytes = nbytes
        self.shape = (nbytes,)


def _flatten(value: Any, arrays: list[Any]) -> Any:
    if isinstance(value, Pieces):
        arrays.append(value)
        return {"__a": len(arrays) - 1}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("an object array cannot be sent")
        arrays.append(np.ascontiguousarray(value))
        return {"__a": len(arrays) - 1}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if _CLASSES.get(name) is not type(value):
            raise TypeError(f"{name} cannot be sent")
        fields = {f.name: _flatten(getattr(value, f.name), arrays) for f in dataclasses.fields(value) if f.init}
        return {"__d": name, "f": fields}
    if isinstance(value, tuple):
        return {"__t": [_flatten(v, arrays) for v in value]}
    if isinstance(value, list):
        return [_flatten(v, arrays) for v in value]
    if isinstance(value, dict):
        if any(k in value for k in ("__a", "__d", "__t")):
            return {"__m": [[_flatten(k, arrays), _flatten(v, arrays)] for k, v in value.items()]}
        return {k: _flatten(v, arrays) for k, v in value.items()}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


def _unflatten(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_unflatten(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__a" in value:
        return arrays[value["__a"]]
    if "__d" in value:
        cls = _CLASSES[value["__d"]]
        return cls(**{k: _unflatten(v, arrays) for k, v in value["f"].items()})
    if "__t" in value:
        return tuple(_unflatten(v, arrays) for v in value["__t"])
    if "__m" in value:
        return {_unflatten(k, arrays): _unflatten(v, arrays) for k, v in value["__m"]}
    return {k: _unflatten(v, arrays) for k, v in value.items()}


def encode(value: Any, pipe: io.BufferedIOBase) -> None:
    """Write `value` (plain values, numpy arrays, `_CLASSES` dataclasses) into `pipe`."""
    _write(pipe, *_prepared(value))


def _prepared(value: Any) -> tuple[bytes, list[Any]]:
    """The header and arrays (numpy arrays, `Pieces`) `encode` writes: whatever cannot be sent
    raises here, before a byte is written."""
    arrays: list[Any] = []
    tree = _flatten(value, arrays)
    return msgspec.msgpack.encode({"tree": tree, "arrays": [(a.dtype.str, list(a.shape)) for a in arrays]}), arrays


def _write(pipe: io.BufferedIOBase, header: bytes, arrays: list[Any]) -> None:
    pipe.write(len(header).to_bytes(8, "little"))
    pipe.write(header)
    for a in arrays:
        if isinstance(a, Pieces):
            pipe.writelines(a.parts)
        elif a.nbytes:
            pipe.write(a.data.cast("B"))


def decode(pipe: io.BufferedReader) -> Any:
    """What `encode` wrote; EOFError or ValueError if it was cut short or malformed."""
    read = _decode._read_exact
    header = msgspec.msgpack.decode(read(pipe, int.from_bytes(read(pipe, 8), "little")))
    arrays = []
    for dtype, shape in header["arrays"]:
        a = np.empty(shape, dtype=np.dtype(dtype))
        if a.nbytes:
            read(pipe, a.nbytes, into=a.data.cast("B"))
        arrays.append(a)
    return _unflatten(header["tree"], arrays)


# ---- the map ----------------------------------------------------------------------------------


class _Worker(forked.ForkedCall):
    """A forked child running `fn` over its share of the items, one result after another into its
    pipe, each a status byte (1: `encode`d result follows, 0: `fn` raised) then the result."""

    def next(self, waiting: Callable[[], object]) -> tuple[bool, Any]:
        """(True, result) for the child's next item; (False, None) where `fn` raised for it or
        the child has died or sent something malformed (then nothing more is read from it)."""
        if self._fd is None:
            return False, None
        if self._pipe is None:  # unbuffered: what poll says is ready is all there is
            self._pipe = os.fdopen(self._fd, "rb", buffering=0, closefd=False)
        poll = select.poll()  # not select(): it cannot watch a descriptor numbered 1024 or more
        poll.register(self._fd, select.POLLIN)
        while not poll.poll(50):
            waiting()
        try:
            status = self._pipe.read(1)
            if status == b"\x01":
                return True, decode(self._pipe)
            if status == b"\x00":
                return False, None
        except (OSError, EOFError, ValueError, TypeError, KeyError, MemoryError):
            pass
        self.stop()  # dead, or its data cut short: the caller does its items
        return False, None

    _pipe: Any = None

    def stop(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        super().stop()


def forked_map(
    fn: Callable[[T], Any],
    items: Sequence[T],
    *,
    workers: int | None = None,
    waiting: Callable[[], object] = lambda: None,
    done: Callable[[int, Any], object] = lambda _k, _v: None,
) -> list[Any]:
    """[fn(item) for item in items] in `workers` (default: the usable cores) forked children,
    child w doing items w, w + workers, ... one after another (a fork per child, not per item);
    an item whose `fn` raised, or whose child died, is None. Results are read in item order.
    `waiting()` is called every 50 ms while the next result is awaited (an exception it raises
    ends the map, every child killed), `done(k, result)` as item k's result arrives (an exception
    it raises ends the map the same way). No child outlives the call."""
    workers = max(1, min(len(items), workers if workers is not None else forked.cores()))
    results: list[Any] = [None] * len(items)

    def share(w: int) -> Callable[[io.BufferedWriter], object]:
        def write(pipe: io.BufferedWriter) -> None:
            # One core each: no nested forked half in a child (the pool already fills the cores).
            _decode.PARALLEL_MIN_EVENTS = 1 << 62
            for item in items[w::workers]:
                try:
                    value = fn(item)
                except Exception:  # the parent does this item itself, and raises its error
                    pipe.write(b"\x00")
                    pipe.flush()
                    continue
                try:
                    prepared = _prepared(value)
                except (TypeError, ValueError, OverflowError):
                    pipe.write(b"\x00")
                else:
                    pipe.write(b"\x01")
                    _write(pipe, *prepared)  # straight into the pipe: no second copy here
                    del prepared
                pipe.flush()
                del value

        return write

    started: list[_Worker | None] = []
    try:
        for w in range(workers):
            call = _Worker.start(share(w))
            started.append(call if isinstance(call, _Worker) else None)
        for k in range(len(items)):
            call = started[k % workers]
            ok, value = call.next(waiting) if call is not None else (False, None)
            results[k] = value if ok else None
            done(k, results[k])
    finally:
        for call in started:
            if call is not None:
                call.stop()
    return results


# ---- a whole trace ----------------------------------------------------------------------------


class RawSlices(Sequence[memoryview]):
    """Each event's JSON text as a view into one buffer (`Trace._raw_args` of a trace that came
    back from a child): one object for all of them, not one per event."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self._blob = blob.data.cast("B")
        self._offsets = offsets.tolist()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return self._blob[self._offsets[i] : self._offsets[i + 1]]

    def __iter__(self) -> Iterator[memoryview]:
        blob, off = self._blob, self._offsets
        return (blob[a:b] for a, b in zip(off, off[1:]))


def trace_parts(trace: Trace) -> dict[str, Any]:
    """What `trace_from_parts` needs to rebuild `trace` in another process (flows bound now), as
    `encode` sends it (its event texts as `Pieces`, received as one array)."""
    raw = trace._raw_args
    parts: dict[str, Any] = {
        "path": trace.path,
        "columns": {k: getattr(trace, k) for k in ("start_ns", "dur_ns", "lane", "depth", "name_id", "cat_id")},
        "lane_offsets": trace.lane_offsets,
        "names": list(trace.names),
        "cats": list(trace.cats),
        "lanes": list(trace.lanes),
        "memory": trace.memory,
        "counters": trace.counters,
        "metadata": trace.metadata,
        "flows": trace.flows if trace._flow_binder is not None else None,
    }
    if raw is not None and all(isinstance(r, (bytes, msgspec.Raw, memoryview)) for r in raw):
        sizes = np.fromiter((len(r) for r in raw), dtype=np.int64, count=len(raw))
        offsets = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        parts["raw"] = Pieces(raw, int(offsets[-1]))  # received as one array of bytes
        parts["raw_offsets"] = offsets
    elif raw is not None:
        raise TypeError("args held as objects: loaded here instead")
    return parts


def trace_from_parts(parts: dict[str, Any]) -> Trace:
    """The `Trace` that `trace_parts` described."""
    flows = parts["flows"]
    raw = RawSlices(parts["raw"], parts["raw_offsets"]) if "raw" in parts else None
    return Trace(
        path=parts["path"],
        **parts["columns"],
        names=parts["names"],
        cats=parts["cats"],
        lanes=parts["lanes"],
        lane_offsets=parts["lane_offsets"],
        memory=parts["memory"],
        counters=parts["counters"],
        metadata=parts["metadata"],
        _raw_args=raw,
        _flow_binder=(lambda _t: flows) if flows is not None else None,
    )
