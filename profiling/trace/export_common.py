"""What both exports (`export_chrome`, `export_perfetto`) write of a `Trace` alike: each lane's
process and thread as written (`ExportLanes`), each event's args, and each `[memory]` event's args
in kineto's spelling, so that reading the export gives back the same lanes, args and memory series.

A merged job's ranks may share pids (each rank's GPU is "pid 0" on its own host): a pid that more
than one rank uses is given a fresh one per rank, and every process of a rank is named "rank R"
(`process_names`), so one file shows every rank, a process per rank, as Perfetto's UI shows a trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.lane_table import LaneTable
from branchscope.profiling.trace.model import MemorySeries, Trace

#: Where fresh pids for ranks that share one start (below int32's top: Perfetto's pids are int32).
_FRESH_PID = (1 << 31) - 1
#: c10 device types by name: the inverse of `kineto.DEVICE_TYPES`.
_DEVICE_CODES = {name: code for code, name in kineto.DEVICE_TYPES.items()}


@dataclass(frozen=True)
class ExportLanes:
    """Per lane (by index): the pid and tid written, whether it is a GPU stream, its device, and its
    name when it has one of its own; per written pid, its process's name ("rank R") and label
    ("GPU N", for a process of GPU streams only); `pid_map`: (rank, pid read) -> pid written."""

    pid: list[int]
    tid: list[int]
    gpu: list[bool]
    device: list[int]
    names: dict[int, str]
    process_names: dict[int, str]
    process_labels: dict[int, str]
    pid_map: dict[tuple[int | None, int], int]

    def pid_of(self, pid: int, rank: int | None = None) -> int:
        """The pid written for `pid` of `rank` (of any rank when None: counters say none)."""
        return self.pid_map.get((rank, pid), pid)

    def __len__(self) -> int:
        return len(self.pid)


def export_lanes(trace: Trace) -> ExportLanes:
    """The lanes of `trace` as they are written (see the module docstring)."""
    pids = [int(p) for p in trace.lane_pids.tolist()]
    tids = [int(t) for t in trace.lane_tids.tolist()]
    gpu = (trace.lane_kind_codes == 1).tolist()
    lanes = trace.lanes
    if isinstance(lanes, LaneTable):
        device = [int(d) for d in lanes.device.tolist()]
        names = dict(lanes.names)
        ranks: list[int | None] = [None] * len(pids)
    else:
        device = [ln.device for ln in lanes]
        names = {ln.index: ln.name for ln in lanes if ln.name and ln.name != _default_name(ln.kind == "gpu", ln.tid)}
        ranks = [ln.rank for ln in lanes]
    written, process_names = _rank_pids(pids, ranks)
    cpu_pids = {p for p, g in zip(written, gpu) if not g}
    labels = {p: f"GPU {d}" for p, g, d in zip(written, gpu, device) if g and p not in cpu_pids}
    pid_map = {(r, p): w for r, p, w in zip(ranks, pids, written) if p != w}
    return ExportLanes(written, tids, gpu, device, names, process_names, labels, pid_map)


def _default_name(gpu: bool, tid: int) -> str:
    """The name the reader gives a lane whose thread is not named (`lane_table._DEFAULT_NAME`)."""
    return f"stream {tid}" if gpu else f"thread {tid}"


def _rank_pids(pids: list[int], ranks: list[int | None]) -> tuple[list[int], dict[int, str]]:
    """Pids made distinct per rank (a pid more than one rank uses is given a fresh one for each
    rank after the first), and the name of each rank's processes."""
    if all(r is None for r in ranks):
        return pids, {}
    owners: dict[int, set[int | None]] = {}
    for p, r in zip(pids, ranks):
        owners.setdefault(p, set()).add(r)
    fresh: dict[tuple[int | None, int], int] = {}
    out = []
    for p, r in zip(pids, ranks):
        if len(owners[p]) > 1 and r != min(owners[p], key=lambda x: -1 if x is None else x):
            p = fresh.setdefault((r, p), _FRESH_PID - len(fresh))
        out.append(p)
    names = {p: f"rank {r}" for p, r in zip(out, ranks) if r is not None}
    return out, names


# ---------------------------------------------------------------------------------- args


class _ArgsText(msgspec.Struct, gc=False):
    """An event's text with its `args` kept as text (for passing it on without decoding it)."""

    args: msgspec.Raw = msgspec.Raw(b"")


@cache
def _args_text_decoder() -> msgspec.json.Decoder[_ArgsText]:
    return msgspec.json.Decoder(_ArgsText)


def args_texts(trace: Trace) -> Iterator[bytes]:
    """Each event's `args` as JSON text (b"" when it has none), in event order: an event read
    from JSON passes its args' text on as written, undecoded."""
    raws = trace._raw_args
    if raws is None:
        yield from (b"" for _ in range(len(trace)))
        return
    yield from map(_args_text, raws)


def args_text_at(trace: Trace) -> Callable[[int], bytes]:
    """Event i's `args` as JSON text (b"" when it has none), read when asked for: an export that
    writes events out of their order reads each one's args then, not all of them first."""
    raws = trace._raw_args
    if raws is None:
        return lambda _i: b""
    return lambda i: _args_text(raws[i])


def _args_text(raw: Any) -> bytes:
    """The args' text of one event's raw record (its JSON text, its Perfetto args' bytes, a dict)."""
    if raw is None or len(raw) == 0:
        return b""
    if isinstance(raw, dict):
        return msgspec.json.encode(raw)
    try:
        text = bytes(_args_text_decoder().decode(raw).args)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return b""
    return text if text.startswith(b"{") else b""


def args_dicts(trace: Trace) -> Iterator[dict[str, Any]]:
    """Each event's `args` as a dict (empty when it has none), in event order."""
    decode = msgspec.json.decode
    for text in args_texts(trace):
        yield decode(text) if text and text != b"{}" else {}


# ---------------------------------------------------------------------------------- memory

#: Kineto's name and category of allocator events.
MEMORY_NAME = kineto.MEMORY_EVENT.name
MEMORY_CATEGORY = "cpu_instant_event"


def device_codes(device: str) -> tuple[int, int]:
    """("cuda:1" or "rank0/cuda:1") -> (c10 device type, index); "cpu" -> (0, -1)."""
    name = device.rsplit("/", 1)[-1]
    kind, _, index = name.partition(":")
    code = _DEVICE_CODES.get(kind)
    if code is None and kind.startswith("device") and kind[6:].isdigit():
        code = int(kind[6:])
    return (code if code is not None else 0, int(index) if index.lstrip("-").isdigit() else -1)


def memory_args(series: MemorySeries) -> Iterator[dict[str, Any]]:
    """Each allocator event of `series` with kineto's args (device, address, bytes, totals), made
    as it is written."""
    device_type, device_id = device_codes(series.device)
    columns = [items(series.delta_bytes), items(series.total_bytes), items(series.addr)]
    reserved = items(series.reserved_bytes) if series.reserved_bytes is not None else None
    for delta, total, addr in zip(*columns):
        args: dict[str, Any] = {
            kineto.DEVICE_TYPE.name: device_type, kineto.DEVICE_ID.name: device_id, kineto.BYTES.name: delta,
            kineto.TOTAL_ALLOCATED.name: total,
        }  # fmt: skip
        if addr != -1:  # as the allocator wrote it: unsigned (the series wraps those past int64)
            args[kineto.ADDR.name] = addr if addr >= 0 else addr + (1 << 64)
        if reserved is not None:
            args[kineto.TOTAL_RESERVED.name] = next(reserved)
        yield args


def items(values: np.ndarray, step: int = 1 << 15) -> Iterator[Any]:
    """The values of a column as Python numbers, made `step` at a time (`tolist` of a whole column
    holds an object per value)."""
    for lo in range(0, values.size, step):
        yield from values[lo : lo + step].tolist()

