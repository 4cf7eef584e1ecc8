"""Read a PyTorch allocator snapshot (`torch.cuda.memory._dump_snapshot`) as a `Trace`.

A snapshot is a pickle of plain dicts and lists: `segments` (what the allocator holds at the dump)
and `device_traces` (one list per device of `{action, addr, size, stream, time_us, frames}`). It
is read into a `Trace` with no events whose `memory` holds one `MemorySeries` per device that has
allocations, so that the views and `analyze_memory` treat it like a trace:

- allocated total: `alloc` adds `size`, `free_requested` (or the older `free`) takes it away, as
  torch's allocated-bytes counter does (a device whose trace has only `free_completed` uses that);
  the total is absolute: it starts from what the dump's segments hold as `active_allocated` less
  what the trace added, so memory allocated before recording began is counted;
- reserved total likewise from `segment_alloc`/`segment_map` and `segment_free`/`segment_unmap`
  against the segments' `total_size`;
- each event's allocation site (`MemorySeries.sites`): the innermost frame outside torch as
  `file:line:function` (the innermost frame when all are torch's; NO_OP without frames);
- times from `time_us`; entries without it take their position (µs) as their time.

A snapshot is untrusted: the unpickler refuses every global (no class, no function, nothing is
run), and the file's size is checked before it is read (see `_MAX_EXPANSION`). Anything else
than plain data of that shape is a `TraceFormatError` with one line.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.trace.memory import NO_OP
from branchscope.profiling.trace.model import MemorySeries, Trace, TraceFormatError, build_trace
from branchscope.profiling.trace.reader import _memory_budget, _mib, check_trace_path

#: How many bytes of memory a byte of a snapshot may take once unpickled. Snapshots of real runs
#: take 5-15x (frames' strings are shared through the pickle's memo); a pickle made of nothing but
#: empty containers could take more, so this is a guard against large files, not a hard bound.
_MAX_EXPANSION = 32
#: The first bytes of a pickle of protocol 2 and above (PROTO opcode, then the protocol).
PICKLE_MAGIC = b"\x80"

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_ALLOCATED = {"alloc": 1}
_FREED = ("free_requested", "free")
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds only plain data: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}: a snapshot holds only plain data")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id: a snapshot holds only plain data")


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """Whether a regular file starts like a pickle (protocol 2+), as snapshots do. Anything else
    (a FIFO would block the open for ever, a folder, /dev/zero) is not one."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return len(head) == 2 and head[:1] == PICKLE_MAGIC and 2 <= head[1] <= 5


def rank_from_name(path: str | os.PathLike[str]) -> int | None:
    """The N of `rank-N` (or rank_N, rankN) in a file's name, if any."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _read(p: Path) -> Any:
    st = check_trace_path(p)
    budget = _memory_budget()
    if st.st_size * _MAX_EXPANSION > budget:
        raise TraceFormatError(
            f"{p}: too large to load: a snapshot of {_mib(st.st_size)} may need about "
            f"{_mib(st.st_size * _MAX_EXPANSION)} of memory, more than the {_mib(budget)} this process may still use"
        )
    try:
        with open(p, "rb") as f:
            data = f.read(st.st_size + 1)
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > st.st_size:
        raise TraceFormatError(f"{p}: grew while it was read")
    if not data:
        raise TraceFormatError(f"{p}: empty file")
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except RecursionError:
        raise TraceFormatError(f"{p}: nesting too deep to be a snapshot") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    except Exception as exc:  # the unpickler raises many kinds on broken data
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceFormatError(f"{p}: not a memory snapshot: {text}") from None


def _is_torch(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "torch" in parts or not filename.endswith(".py")


def site_of(frames: Any) -> str:
    """`file:line:function` of the innermost frame outside torch (frames are innermost first)."""
    if not isinstance(frames, list) or not frames:
        return NO_OP
    good = [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    if not good:
        return NO_OP
    pick = next((f for f in good if not _is_torch(f["filename"])), good[0])
    return f"{pick['filename']}:{pick.get('line', '?')}:{pick.get('name', '?')}"


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise ValueError(f"{what} is {type(v).__name__}, not an integer")
    return v


def _device_series(device: int, entries: list[Any], segments: list[Any], p: Path) -> MemorySeries | None:
    kinds = {e.get("action") for e in entries}
    freed: tuple[str, ...] = _FREED if kinds & set(_FREED) else ("free_completed",)
    ts: list[int] = []
    delta: list[int] = []
    addr: list[int] = []
    site: list[int] = []
    reserved_at: list[int] = []
    sites: dict[str, int] = {}
    reserved = 0
    for position, e in enumerate(entries):
        action = e.get("action")
        size = e.get("size", 0)
        if action in _RESERVED:
            reserved += _RESERVED[action] * _int(size, "segment size")
            continue
        sign = 1 if action in _ALLOCATED else -1 if action in freed else 0
        if sign == 0:
            continue
        t = e.get("time_us")
        ts.append(_int(t, "time_us") * 1000 if t is not None else position * 1000)
        delta.append(sign * _int(size, "size"))
        a = e.get("addr", -1)
        addr.append(_int(a, "addr") if a is not None else -1)
        site.append(sites.setdefault(site_of(e.get("frames")), len(sites)) if sign > 0 else -1)
        reserved_at.append(reserved)
    if not ts:
        return None
    # Absolute totals: the dump's state, less what the recorded events did.
    held = sum(
        _int(b.get("size", 0), "block size")
        for s in segments
        if s.get("device") == device
        for b in (s.get("blocks") or [])
        if isinstance(b, dict) and b.get("state") == "active_allocated"
    )
    seg_total = sum(_int(s.get("total_size", 0), "segment size") for s in segments if s.get("device") == device)
    d = np.array(delta, dtype=np.int64)
    total = np.cumsum(d)
    total += max(held - int(total[-1]), 0)
    r = np.array(reserved_at, dtype=np.int64)
    r += max(seg_total - reserved, 0)
    t_ns = np.array(ts, dtype=np.int64)
    order = np.argsort(t_ns, kind="stable")
    if not np.all(order == np.arange(order.size)):
        t_ns, d, total, r = t_ns[order], d[order], total[order], r[order]
        addr, site = [addr[i] for i in order.tolist()], [site[i] for i in order.tolist()]
    return MemorySeries(
        device=f"cuda:{device}",
        ts_ns=t_ns,
        delta_bytes=d,
        total_bytes=total,
        addr=np.array(addr, dtype=np.int64),
        reserved_bytes=r,
        site_id=np.array(site, dtype=np.int32),
        sites=tuple(sites),
    )


def load_snapshot(path: str | os.PathLike[str], rank: int | None = None) -> Trace:
    """A snapshot as a `Trace` without events whose `memory` has one series per device.

    `rank` (default: the N of `rank-N` in the file's name) goes into the trace's distributedInfo,
    so that `merge_traces` names its devices `rankN/cuda:M`.
    """
    p = Path(path)
    obj = _read(p)
    if isinstance(obj, list):  # the oldest snapshots: the segments alone
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict) or not isinstance(obj.get("device_traces", []), list):
        raise TraceFormatError(f"{p}: not a memory snapshot: no 'segments' / 'device_traces'")
    if "segments" not in obj and "device_traces" not in obj:
        raise TraceFormatError(f"{p}: not a memory snapshot: no 'segments' / 'device_traces'")
    segments = obj.get("segments") or []
    traces = obj.get("device_traces") or []
    if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
        raise TraceFormatError(f"{p}: not a memory snapshot: 'segments' is not a list of objects")
    memory: list[MemorySeries] = []
    try:
        for device, entries in enumerate(traces):
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ValueError(f"device_traces[{device}] is not a list of objects")
            series = _device_series(device, entries, segments, p)
            if series is not None:
                memory.append(series)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(f"{p}: malformed snapshot: {exc}") from None
    if rank is None:
        rank = rank_from_name(p)
    metadata: dict[str, Any] = {"snapshot": True}
    if rank is not None:
        metadata["distributedInfo"] = {"rank": rank}
        memory = [replace(m, rank=rank) for m in memory]
    empty = np.zeros(0, dtype=np.int64)
    return build_trace(
        path=str(p), start_ns=empty, dur_ns=empty, lane=empty, name_id=empty, cat_id=empty,
        names=[], cats=[], lanes=[], memory=memory, metadata=metadata,
    )

