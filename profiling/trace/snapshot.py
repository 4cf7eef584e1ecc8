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

A snapshot is untrusted, so it is not read by `pickle` but by `plain_pickle.unpickle`, a small stack
machine that knows only the opcodes of plain data (no global: no class, no function, nothing is run)
and bounds the memory it takes by a multiple of the file's size (`_MAX_EXPANSION`), counting what
each opcode builds before it builds the next, and before an allocation that one opcode could make
huge (a memo index, a declared length). Dict keys and set items must be strings or numbers that hash
without collisions, so that nothing deep is hashed and no dict takes quadratic time to build. The
file's size is checked against the memory left before it is read. What the memo lets a few bytes
repeat is bounded once unpickled too: a snapshot may hold one segment, block or entry per
`_BYTES_PER_ITEM` bytes and `_MAX_DEVICES` device traces, a frames list or a frame shared by
entries is read once (`_Sites`), and names in sites are cut at `_MAX_NAME` characters. Anything
else than plain data of the shape above is a `TraceFormatError` with one line.
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.files import UnreadableFile, open_regular, read_head
from branchscope.profiling.trace.memory import NO_OP
from branchscope.profiling.trace.model import MemorySeries, Trace, TraceFormatError, build_trace
from branchscope.profiling.trace.pickle_machine import HASH_SAFE, Refused
from branchscope.profiling.trace.plain_pickle import unpickle
from branchscope.profiling.trace.text import _memory_budget, _mib, check_trace_path

#: How many bytes of memory a byte of a snapshot may take once unpickled: `_unpickle` counts what
#: it builds and refuses a pickle past this multiple (plus `_SLACK`). Snapshots count 6x (frames
#: shared through the memo) to 16x (blocks without frames, the densest shape; 11x in fact);
#: one-byte opcodes that each build an object of 56 to 216 bytes (empty containers, 1-tuples)
#: would take far more.
_MAX_EXPANSION = 32
#: What any pickle may take beyond that, so that a small one's fixed costs never count against it.
_SLACK = 1 << 20
#: A snapshot's segments, blocks and trace entries take 30 bytes of it or more each (dicts of five
#: items or more): more of them than one every `_BYTES_PER_ITEM` bytes can only come from its memo
#: repeating them, and reading those would take time and memory out of proportion with the file.
_BYTES_PER_ITEM = 16
_MIN_ITEMS = 10_000
#: Device traces a snapshot may hold: each device, even one sharing another's trace, is a series.
_MAX_DEVICES = 1024
#: The distinct sites of a snapshot may take this many characters a byte of it (and `_SLACK`).
_SITE_CHARS_PER_BYTE = 4
#: Filenames and function names longer than this are cut in a site.
_MAX_NAME = 256
_INT64 = 1 << 63
#: The first bytes of a pickle of protocol 2 and above (PROTO opcode, then the protocol).
PICKLE_MAGIC = b"\x80"

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_ALLOCATED = {"alloc": 1}
_FREED = ("free_requested", "free")
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """Whether a regular file starts like a pickle (protocol 2+), as snapshots do. Anything else
    (a FIFO would block the open for ever, a folder, /dev/zero) is not one."""
    head = read_head(path, 2)
    return len(head) == 2 and head[:1] == PICKLE_MAGIC and 2 <= head[1] <= 5


def rank_from_name(path: str | os.PathLike[str]) -> int | None:
    """The N of `rank-N` (or rank_N, rankN) in a file's name, if any."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _read(p: Path) -> tuple[Any, int]:
    """The object pickled in the file, and the file's size."""
    st = check_trace_path(p)
    budget = _memory_budget()
    if st.st_size * _MAX_EXPANSION > budget:
        raise TraceFormatError(
            f"{p}: too large to load: a snapshot of {_mib(st.st_size)} may need about "
            f"{_mib(st.st_size * _MAX_EXPANSION)} of memory, more than the {_mib(budget)} this process may still use"
        )
    try:
        with open(open_regular(p), "rb") as f:  # never blocks, should the path have become a FIFO
            data = f.read(st.st_size + 1)
    except UnreadableFile as exc:
        raise TraceFormatError(str(exc)) from None
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > st.st_size:
        raise TraceFormatError(f"{p}: grew while it was read")
    if not data:
        raise TraceFormatError(f"{p}: empty file")
    # Hundreds of thousands of new dicts and lists would trigger many useless cyclic-GC passes.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        limit_is = f"{_MAX_EXPANSION} times the file's size (a snapshot takes half of that at most)"
        return unpickle(data, _MAX_EXPANSION * len(data) + _SLACK, limit_is), len(data)
    except Refused as exc:
        raise TraceFormatError(f"{p}: not a memory snapshot: {exc}") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _is_torch(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "torch" in parts or not filename.endswith(".py")


def _pick(frames: Any, torch: dict[str, bool]) -> dict[str, Any] | None:
    """The innermost frame outside torch (frames are innermost first), or the innermost frame when
    all are torch's; None without frames. `torch` remembers which filenames are torch's."""
    if type(frames) is not list:
        return None
    first = None
    for frame in frames:
        if type(frame) is dict:
            filename = frame.get("filename")
            if type(filename) is str:
                if first is None:
                    first = frame
                is_torch = torch.get(filename)
                if is_torch is None:
                    is_torch = torch[filename] = _is_torch(filename)
                if not is_torch:
                    return frame
    return first


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_NAME else text[:_MAX_NAME - 1] + "…"


def _site_text(frame: dict[str, Any]) -> str:
    # Only an int or a string is shown: str() of anything else could recurse or take gigabytes.
    line, name = frame.get("line"), frame.get("name")
    if type(line) is str:
        line = _cut(line)
    elif not (type(line) is int and -HASH_SAFE < line < HASH_SAFE):
        line = "?"
    return f"{_cut(frame['filename'])}:{line}:{_cut(name) if type(name) is str else '?'}"


def site_of(frames: Any) -> str:
    """`file:line:function` of the innermost frame outside torch (frames are innermost first);
    names longer than `_MAX_NAME` characters are cut."""
    frame = _pick(frames, {})
    return NO_OP if frame is None else _site_text(frame)


class _Sites:
    """`site_of` for all the entries of one snapshot, in time and memory bounded by the file's size
    however its memo shares frames: a long frames list shared by entries is read once, a frame
    picked by several lists is written out once, each filename is looked at once, and the
    distinct sites may take `budget` characters in all. Objects are known by their id, so an
    instance lives no longer than the snapshot it reads."""

    def __init__(self, budget: int) -> None:
        self._left = budget
        self._texts: dict[str, str] = {}
        self._of_list: dict[int, str] = {}
        self._of_frame: dict[int, str] = {}
        self._torch: dict[str, bool] = {}

    def __call__(self, frames: Any) -> str:
        long = type(frames) is list and len(frames) > 16
        text = self._of_list.get(id(frames)) if long else None
        if text is None:
            frame = _pick(frames, self._torch)
            if frame is None:
                text = NO_OP
            else:
                text = self._of_frame.get(id(frame))
                if text is None:
                    text = _site_text(frame)
                    known = self._texts.get(text)
                    if known is None:
                        self._left -= len(text)
                        if self._left < 0:
                            raise ValueError("its frames' sites take more characters than a snapshot of its size can hold")
                        self._texts[text] = text
                    else:
                        text = known
                    self._of_frame[id(frame)] = text
            if long:
                self._of_list[id(frames)] = text
        return text


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise ValueError(f"{what} is {type(v).__name__}, not an integer")
    if not -_INT64 <= v < _INT64:  # sums and products of larger ones could take minutes
        raise ValueError(f"{what} does not fit in 64 bits")
    return v


def _segment_totals(segments: list[dict[str, Any]], n_devices: int) -> tuple[list[int], list[int]]:
    """Per device 0..n_devices-1 (those with a trace), the bytes its segments' blocks hold as
    `active_allocated`, and its segments' `total_size`. Every segment's sizes are checked; those of
    other devices are not kept, so no device number from the file is ever hashed (numbers built to
    collide made a dict of them take minutes)."""
    held = [0] * n_devices
    reserved = [0] * n_devices
    for s in segments:
        device = s.get("device")
        if type(device) is not int:
            continue
        size = _int(s.get("total_size", 0), "segment size")
        blocks = s.get("blocks")
        active = 0
        if type(blocks) is list:
            active = sum(
                _int(b.get("size", 0), "block size")
                for b in blocks
                if type(b) is dict and b.get("state") == "active_allocated"
            )
        if 0 <= device < n_devices:
            reserved[device] += size
            held[device] += active
    return held, reserved


def _device_series(device: int, entries: list[Any], held: int, seg_total: int, site_text: _Sites) -> MemorySeries | None:
    actions = [e.get("action") for e in entries]
    odd = [a for a in actions if a.__class__ is not str and a is not None]
    if odd:  # not hashed: a deep tuple's hash recurses in C until the process dies
        raise ValueError(f"an action is {type(odd[0]).__name__}, not a string")
    kinds = set(actions)
    freed: tuple[str, ...] = _FREED if kinds & set(_FREED) else ("free_completed",)
    ts: list[int] = []
    delta: list[int] = []
    addr: list[int] = []
    site: list[int] = []
    reserved_at: list[int] = []
    sites: dict[str, int] = {}
    reserved = 0
    for position, (e, action) in enumerate(zip(entries, actions)):
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
        site.append(sites.setdefault(site_text(e.get("frames")), len(sites)) if sign > 0 else -1)
        reserved_at.append(reserved)
    if not ts:
        return None
    # Absolute totals: the dump's state, less what the recorded events did.
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
    obj, size = _read(p)
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
    if len(traces) > _MAX_DEVICES:
        raise TraceFormatError(f"{p}: malformed snapshot: {len(traces):,} device traces, more than the {_MAX_DEVICES} a machine could have")
    items = len(segments) + len(traces) + sum(len(b) for s in segments if type(b := s.get("blocks")) is list)
    items += sum(len(entries) for entries in traces if type(entries) is list)
    if items > max(size // _BYTES_PER_ITEM, _MIN_ITEMS):
        raise TraceFormatError(
            f"{p}: malformed snapshot: {items:,} segments, blocks and entries in {size:,} bytes: "
            "its memo repeats them"
        )
    memory: list[MemorySeries] = []
    try:
        held, seg_total = _segment_totals(segments, len(traces))
        sites = _Sites(_SITE_CHARS_PER_BYTE * size + _SLACK)
        for device, entries in enumerate(traces):
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ValueError(f"device_traces[{device}] is not a list of objects")
            series = _device_series(device, entries, held[device], seg_total[device], sites)
            if series is not None:
                memory.append(series)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(f"{p}: malformed snapshot: {exc}") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
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

