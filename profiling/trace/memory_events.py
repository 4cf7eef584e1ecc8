"""`[memory]` events: the allocator's records, read into one `MemorySeries` per device.

Each event is decoded with its `args` ("Device Type", "Device Id", "Bytes", "Total Allocated",
"Total Reserved", "Addr") into columns while the events are decoded (`_memory_columns`, called by
`decode`), then the columns of all parts are sorted into series per device here (`_memory_series`),
named by c10's device types (`_DEVICE_TYPES`), with each GPU's capacity from the trace's
`deviceProperties`. The legacy format of PyTorch <= 1.9 writes no `Total Allocated`: the series
then sums `Bytes`. Addresses at or above 2**63 wrap (they are compared, never added).
"""

from __future__ import annotations

import itertools
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace.fields import _ns_column, _real_ids
from branchscope.profiling.trace.model import MemorySeries


class _MemoryArgs(msgspec.Struct, gc=False):
    device_type: int = msgspec.field(name="Device Type", default=0)
    device_id: int = msgspec.field(name="Device Id", default=-1)
    bytes: int = msgspec.field(name="Bytes", default=0)
    total: int | None = msgspec.field(name="Total Allocated", default=None)
    reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)


class _MemoryEvent(msgspec.Struct, gc=False):
    ts: Any = None
    pid: int | str = 0
    tid: int | str = 0
    args: _MemoryArgs = msgspec.field(default_factory=_MemoryArgs)


_MEMORY_EVENT_DECODER = msgspec.json.Decoder(_MemoryEvent, float_hook=str)


#: c10::DeviceType values seen in `[memory]` events (ROCm reports its GPUs as CUDA, type 1).
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia", 20: "privateuseone"}


def _device_name(device_type: int, device_id: int) -> str:
    kind = _DEVICE_TYPES.get(device_type, f"device{device_type}")
    return kind if kind == "cpu" else f"{kind}:{device_id}"


def _capacities(metadata: dict[str, Any]) -> dict[int, int]:
    """GPU index -> totalGlobalMem from the trace's deviceProperties (what is well formed of it)."""
    props = metadata.get("deviceProperties")
    out: dict[int, int] = {}
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and type(p.get("id")) is int and type(p.get("totalGlobalMem")) is int:
                out[p["id"]] = p["totalGlobalMem"]
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
    totals = list(map(_get_total, args))
    reserved = list(map(_get_reserved, args))
    return {
        "ts": _ns_column(list(map(_get_ts, events)), "memory timestamp"),
        "pid": _real_ids(list(map(_get_pid, events))),
        "tid": _real_ids(list(map(_get_tid, events))),
        "device_type": np.array(list(map(_get_device_type, args)), dtype=np.int64),
        "device_id": np.array(list(map(_get_device_id, args)), dtype=np.int64),
        "bytes": _int64_or_none(list(map(_get_bytes, args)), "Bytes", 0),
        "has_total": _known(totals),
        "total": _int64_or_none(totals, "Total Allocated", 0),
        "has_reserved": _known(reserved),
        "reserved": _int64_or_none(reserved, "Total Reserved", 0),
        "addr": _int64_or_none(list(map(_get_addr, args)), "Addr", -1),
    }


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
    if what != "Addr":
        try:
            return np.array(filled, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"[memory] {what} out of range") from None
    return _int64(filled, what)


_get_ts, _get_pid, _get_tid, _get_args = attrgetter("ts"), attrgetter("pid"), attrgetter("tid"), attrgetter("args")
_get_total, _get_reserved, _get_addr = attrgetter("total"), attrgetter("reserved"), attrgetter("addr")
_get_device_type, _get_device_id, _get_bytes = attrgetter("device_type"), attrgetter("device_id"), attrgetter("bytes")


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
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) and type(info.get("rank")) is int else None
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
