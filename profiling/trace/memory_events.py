"""`[memory]` events: the allocator's records, read into one `MemorySeries` per device.

Each event is decoded with its `args` (`_ARGS`: device, bytes, totals, address; their spellings in
`kineto`) into columns while the events are decoded (`_memory_columns`, called by
`decode`), then the columns of all parts are sorted into series per device here (`_memory_series`),
named by c10's device types (`kineto.DEVICE_TYPES`), with each GPU's capacity from the trace's
`deviceProperties`. The legacy format of PyTorch <= 1.9 writes no `Total Allocated`: the series
then sums `Bytes`. Addresses at or above 2**63 wrap (they are compared, never added).
"""

from __future__ import annotations

import itertools
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.fields import _ns_column, _real_ids
from branchscope.profiling.trace.model import MemorySeries

#: The args a `[memory]` event is read for: (attribute, key, type, default). A key's other
#: spellings decode into attributes of their own (`kineto.struct_fields`), the first said is taken.
_ARGS = (
    ("device_type", kineto.DEVICE_TYPE, int, 0),
    ("device_id", kineto.DEVICE_ID, int, -1),
    ("bytes", kineto.BYTES, int, 0),
    ("total", kineto.TOTAL_ALLOCATED, int | None, None),
    ("reserved", kineto.TOTAL_RESERVED, int | None, None),
    ("addr", kineto.ADDR, int | None, None),
)
_MemoryArgs = msgspec.defstruct(
    "_MemoryArgs", [f for attr, k, kind, default in _ARGS for f in kineto.struct_fields(attr, k, kind, default)], gc=False
)


class _MemoryEvent(msgspec.Struct, gc=False):
    ts: Any = None
    pid: int | str = 0
    tid: int | str = 0
    args: _MemoryArgs = msgspec.field(default_factory=_MemoryArgs)  # type: ignore[valid-type]


_MEMORY_EVENT_DECODER = msgspec.json.Decoder(_MemoryEvent, float_hook=str)


def _device_name(device_type: int, device_id: int) -> str:
    kind = kineto.DEVICE_TYPES.get(device_type, f"device{device_type}")
    return kind if kind == "cpu" else f"{kind}:{device_id}"


def _capacities(metadata: dict[str, Any]) -> dict[int, int]:
    """GPU index -> totalGlobalMem from the trace's deviceProperties (what is well formed of it)."""
    props = kineto.DEVICE_PROPERTIES.of(metadata)
    out: dict[int, int] = {}
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict):
                index, memory = kineto.GPU_INDEX.of(p), kineto.GPU_MEMORY.of(p)
                if type(index) is int and type(memory) is int:
                    out[index] = memory
    return out


def _int64(values: list[int], what: str) -> np.ndarray:
    """An int64 column; addresses at or above 2**63 wrap (they are compared, never added)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        if any(v < -(1 << 63) or v >= 1 << 64 for v in values):
            raise ValueError(f"[memory] {what} out of range") from None
        return np.array([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=np.int64)



def _memory_columns(raws: list[msgspec.Raw]) -> dict[str, np.ndarray]:
    """`[memory]` events (their texts) as columns."""
    try:
        events = list(map(_MEMORY_EVENT_DECODER.decode, raws))
    except msgspec.ValidationError as exc:
        raise ValueError(f"[memory] event: {exc}") from None
    args = list(map(_get_args, events))
    said = {attr: _first_said(args, attr, k, default) for attr, k, _, default in _ARGS}
    totals, reserved = said["total"], said["reserved"]
    return {
        "ts": _ns_column(list(map(_get_ts, events)), "memory timestamp"),
        "pid": _real_ids(list(map(_get_pid, events))),
        "tid": _real_ids(list(map(_get_tid, events))),
        "device_type": np.array(said["device_type"], dtype=np.int64),
        "device_id": np.array(said["device_id"], dtype=np.int64),
        "bytes": _int64_or_none(said["bytes"], kineto.BYTES.name, 0),
        "has_total": _known(totals),
        "total": _int64_or_none(totals, kineto.TOTAL_ALLOCATED.name, 0),
        "has_reserved": _known(reserved),
        "reserved": _int64_or_none(reserved, kineto.TOTAL_RESERVED.name, 0),
        "addr": _int64_or_none(said["addr"], kineto.ADDR.name, -1),
    }


def _first_said(args: list[Any], attr: str, k: kineto.Key, default: Any) -> list[Any]:
    """Each event's value of key `k`: of its first spelling that the event says (not `default`).
    One spelling (every key today): one `attrgetter` pass, as before there were alternates."""
    attrs = kineto.spelling_attrs(attr, k)
    values = list(map(attrgetter(attrs[0]), args))
    for other in attrs[1:]:
        values = [v if v != default else o for v, o in zip(values, map(attrgetter(other), args))]
    return values


def _known(values: list[Any]) -> np.ndarray:
    """Where `values` is not None."""
    if None not in values:
        return np.ones(len(values), dtype=bool)
    # is_not(None, v) is a real bool; None.__ne__(v) returned NotImplemented for every value that
    # is not None, which only worked through NotImplemented's truth value (deprecated in Python 3.9).
    return np.fromiter(map(is_not, itertools.repeat(None), values), dtype=bool, count=len(values))


def _int64_or_none(values: list[int | None], what: str, missing: int) -> np.ndarray:
    """An int64 column, `missing` for None; addresses at or above 2**63 wrap (they are compared,
    never added), any other value out of int64's range is an error."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, OverflowError):
        pass
    filled = [missing if v is None else v for v in values]
    if what != kineto.ADDR.name:
        try:
            return np.array(filled, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"[memory] {what} out of range") from None
    return _int64(filled, what)


_get_ts, _get_pid, _get_tid, _get_args = attrgetter("ts"), attrgetter("pid"), attrgetter("tid"), attrgetter("args")


def _device_pairs(device_type: np.ndarray, device_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (device type, device id) rows, sorted, and each event's row among them. Both
    fit 32 bits in every real trace: then one int64 key each, 10x faster than unique rows."""
    lo, hi = -(1 << 31), 1 << 31
    if device_type.size and lo <= min(device_type.min(), device_id.min()) and max(device_type.max(), device_id.max()) < hi:
        keys, which = np.unique((device_type << 32) + (device_id - lo), return_inverse=True)
        return np.stack([keys >> 32, (keys & 0xFFFFFFFF) + lo], axis=1), which.reshape(-1)
    pairs, which = np.unique(np.stack([device_type, device_id], axis=1), axis=0, return_inverse=True)
    return pairs, which.reshape(-1)


def _memory_series(parts: list[dict[str, np.ndarray]], metadata: dict[str, Any] | None = None) -> list[MemorySeries]:
    """Allocator events per device; the legacy format lacks `Total Allocated`: sum `Bytes` instead.

    Each series keeps per event the address (-1 without `Addr`), `Total Reserved` (None when any
    event lacks it) and the allocating thread; GPUs get their capacity from deviceProperties.
    """
    if not parts:
        return []
    metadata = metadata or {}
    col = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    capacity = _capacities(metadata)
    info = kineto.DISTRIBUTED_INFO.of(metadata)
    said_rank = kineto.RANK.of(info) if isinstance(info, dict) else None
    rank = said_rank if type(said_rank) is int else None
    pairs, which = _device_pairs(col["device_type"], col["device_id"])
    devices = {_device_name(int(t), int(i)): k for k, (t, i) in enumerate(pairs.tolist())}
    by_device: dict[str, np.ndarray] = {}
    for device, k in devices.items():
        idx = np.flatnonzero(which == k)
        by_device[device] = idx if device not in by_device else np.sort(np.concatenate([by_device[device], idx]))
    series = []
    for device in sorted(by_device, key=lambda d: (d != "cpu", len(d), d)):
        idx = by_device[device]
        order = idx[np.argsort(col["ts"][idx], kind="stable")]
        delta = col["bytes"][order]
        total = col["total"][order] if col["has_total"][order].all() else np.cumsum(delta)
        kind, _, dev_id = device.partition(":")
        series.append(
            MemorySeries(
                device=device,
                ts_ns=col["ts"][order],
                delta_bytes=delta,
                total_bytes=total,
                addr=col["addr"][order],
                reserved_bytes=col["reserved"][order] if col["has_reserved"][order].all() else None,
                pid=col["pid"][order],
                tid=col["tid"][order],
                capacity_bytes=capacity.get(int(dev_id)) if kind in ("cuda", "hip") and dev_id else None,
                rank=rank,
            )
        )
    return series
