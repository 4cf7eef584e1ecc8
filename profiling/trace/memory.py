"""Memory per device as a diagnosis: peaks, what is live at them, and the imbalance across devices.

`analyze_memory(trace)` pairs each device's allocations and frees by process and address in time
order (the caching allocator reuses addresses, so an address pairs an allocation with the next free
of it); a free with no allocation was allocated before profiling began, an allocation with no free
outlived the profile. An allocation whose address is allocated again with no free between was freed
where the profiler did not record it (torch.profiler records a free only on a thread it follows: not
on an inter-op pool thread once a forked task has ended, where TorchScript drops what a forked task
held): it is counted alive until that address is handed out again, at the latest, and flagged
(`Allocation.freed_unseen`, `DeviceMemory.freed_unseen`, `MISSED_FREES`). Each allocation is attributed to the innermost op enclosing it on the thread that
allocated (a snapshot's series names its allocation site instead). Traces without `Addr` (the
oldest format) cannot be paired: their devices report peaks and event counts only.

Work is done per device with numpy (the public 54 MB trace has 28k memory events); `Allocation`
objects are only built for what is asked (`allocations`, `live_at`, `in_range`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from branchscope.profiling.trace.memory_source import recorded_by, why_none
from branchscope.profiling.trace.model import MemorySeries, Trace
from branchscope.profiling.trace.natural import natural_key

#: `where` of an allocation no op encloses (or, in a snapshot, with no frames).
NO_OP = "(no op)"
#: `where` of a free whose allocation happened before profiling began.
BEFORE_PROFILING = "(before profiling)"
#: `where` of what a peak counts that no event explains, on a device where the profiler missed frees:
#: memory allocated before profiling, or blocks freed unseen that its running total still counts.
UNEXPLAINED = "(before profiling, or frees the profiler missed)"
#: One line: why a device's allocations look alive when their addresses were handed out again.
MISSED_FREES = (
    "the profiler missed {n} free{s} on {device}: {these} block{s} {were} allocated again at {their} address with "
    "no free recorded between (freed on a thread torch.profiler does not follow, such as torch's inter-op pool "
    "after a forked task ended); each counts as alive until its address is reused, and the profiler's running "
    "total, so the peak, may still count {them}"
)


def missed_frees_line(n: int, device: str) -> str:
    """`MISSED_FREES` for `n` frees on `device`."""
    one = n == 1
    return MISSED_FREES.format(
        n=f"{n:,}", s="" if one else "s", device=device, these="this" if one else "these",
        were="was" if one else "were", their="its" if one else "their", them="it" if one else "them",
    )  # fmt: skip

_RANK_PREFIX = re.compile(r"^rank(-?\d+)/(.*)$")
_MIN = np.iinfo(np.int64).min
_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Allocation:
    """One block's life on a device; `alloc_ns`/`free_ns` on the trace's clock."""

    device: str
    bytes: int
    #: None: allocated before profiling began (a free with no allocation).
    alloc_ns: int | None
    #: None: outlived the profile (never freed in it).
    free_ns: int | None
    #: The innermost op enclosing the allocation on its thread, or a snapshot's `file:line:function`.
    where: str
    addr: int | None
    #: Index into the trace's events of the enclosing op; -1 if none.
    event: int
    #: Freed where the profiler recorded no free: its address was allocated again at `free_ns`
    #: (the latest it can have been freed).
    freed_unseen: bool = False

    @property
    def lifetime_ns(self) -> int | None:
        if self.alloc_ns is None or self.free_ns is None:
            return None
        return self.free_ns - self.alloc_ns


@dataclass(frozen=True)
class AtPeak:
    """Live allocations at a device's peak that share one `where`."""

    where: str
    bytes: int
    allocations: int


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory: `device` as in `Trace.memory` (merged ranks: "rankR/cuda:N")."""

    device: str
    rank: int | None
    peak_bytes: int
    peak_ns: int
    reserved_peak_bytes: int | None
    capacity_bytes: int | None
    #: Allocation and free events of the device (counted whether or not they pair).
    allocations: int
    frees: int
    #: Live allocations at the peak grouped by `where`, largest first (empty without addresses).
    #: BEFORE_PROFILING also holds what the peak counts that no event explains: memory allocated
    #: before profiling and still held (its `allocations` counts only the frees seen).
    at_peak: tuple[AtPeak, ...]
    #: Allocations freed where the profiler recorded no free (their address allocated again first).
    freed_unseen: int = 0

    @property
    def plain_device(self) -> str:
        """The device without its rank prefix: "cuda:1"."""
        return plain_device(self.device)

    @property
    def label(self) -> str:
        """"rankR/cuda:N" when the rank is known, else the device."""
        return self.plain_device if self.rank is None else f"rank{self.rank}/{self.plain_device}"


@dataclass(frozen=True)
class Imbalance:
    """The heaviest device of one kind against the others of that kind.

    `ratio` is the heaviest peak over the lightest one for two devices ("rank 0 holds 5.0x rank 1":
    the median of two is their mean, which hides a 5x split as 1.67x), over the median peak for
    three or more (`against` says which); inf when that peak is 0."""

    device_type: str
    #: The heaviest device's label ("cuda:0", or "rankR/cuda:N" when ranks are known).
    heaviest: str
    #: Heaviest peak / median peak; inf when the median peak is 0.
    max_over_median: float
    #: The heaviest peak minus `reference_bytes` (what `ratio` divides by).
    excess_bytes: int
    #: The heaviest peak over `against`'s: "lightest" (two devices) or "median" (three or more).
    ratio: float = float("inf")
    against: str = "median"
    #: The lightest device's label (what `ratio` divides by for two devices).
    lightest: str = ""
    heaviest_bytes: int = 0
    #: The lightest peak (two devices) or the median peak (three or more).
    reference_bytes: float = 0.0
    heaviest_rank: int | None = None
    lightest_rank: int | None = None
    #: How many devices of the kind.
    devices: int = 0

    def words(self, size: Callable[[float], str]) -> str:
        """One sentence, sizes written by `size`: "rank 0 holds 5.0× rank 1 at its peak (…)"."""
        ratio = "∞" if self.ratio == float("inf") else f"{self.ratio:.1f}×"
        if self.against == "lightest":
            ranks = self.heaviest_rank is not None and self.lightest_rank is not None
            a = f"rank {self.heaviest_rank}" if ranks else self.heaviest
            b = f"rank {self.lightest_rank}" if ranks else self.lightest
            return (
                f"{a} holds {ratio} {b} at its peak ({self.heaviest}: {size(self.heaviest_bytes)}, "
                f"{self.lightest}: {size(self.reference_bytes)}; heaviest ÷ lightest of 2)."
            )
        kind = kind_name(self.device_type)
        return (
            f"{self.heaviest} peaks at {size(self.heaviest_bytes)}, {ratio} the median {kind} "
            f"({size(self.reference_bytes)}; heaviest ÷ median of {self.devices}): {size(self.excess_bytes)} more."
        )


def kind_name(device_type: str) -> str:
    """How sentences name a kind of device: "GPU" for cuda and hip, "CPU"; else the type."""
    return {"cuda": "GPU", "hip": "GPU", "cpu": "CPU"}.get(device_type, device_type)


def plain_device(device: str) -> str:
    m = _RANK_PREFIX.match(device)
    return m.group(2) if m else device


def device_type_of(device: str) -> str:
    """'cuda:1' -> 'cuda'; 'rank1/cuda:1' -> 'cuda'."""
    return plain_device(device).split(":")[0]


@dataclass(frozen=True)
class AllocationColumns:
    """A device's allocations as columns, in time order (pre-profile frees first)."""

    alloc_idx: np.ndarray  # int64 index into the series; -1: allocated before profiling
    free_idx: np.ndarray  # int64 index into the series; -1: never freed
    alloc_ns: np.ndarray  # int64; int64 min where alloc_idx is -1
    free_ns: np.ndarray  # int64; int64 max where free_idx is -1
    bytes: np.ndarray  # int64
    addr: np.ndarray  # int64
    where_id: np.ndarray  # int32 into MemoryAnalysis.wheres
    event: np.ndarray  # int64, -1 if none
    #: Freed unseen: `free_idx` is the event that allocated its address again (see the module docstring).
    freed_unseen: np.ndarray  # bool


def _pair(series: MemorySeries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alloc_idx, free_idx, freed_unseen) per block: every allocation once, then the frees nothing
    allocated. Blocks are told apart by process and address (processes have address spaces of their
    own); an allocation followed at its address by another allocation was freed unseen: its
    `free_idx` is that next allocation."""
    delta, addr = series.delta_bytes, series.addr
    idx = np.flatnonzero((addr != -1) & (delta != 0))
    pid = series.pid[idx] if series.pid.size == series.events else np.zeros(idx.size, dtype=np.int64)
    s = idx[np.lexsort((idx, addr[idx], pid))]  # by process, address, then time (the series is in time order)
    a, d = addr[s], delta[s]
    p = series.pid[s] if series.pid.size == series.events else np.zeros(s.size, dtype=np.int64)
    same = (a[:-1] == a[1:]) & (p[:-1] == p[1:])
    is_alloc, is_free = d > 0, d < 0
    k = np.flatnonzero(is_alloc[:-1] & is_free[1:] & same)
    free_of = np.full(series.events, -1, dtype=np.int64)
    free_of[s[k]] = s[k + 1]
    paired_free = np.zeros(series.events, dtype=bool)
    paired_free[s[k + 1]] = True
    reused = np.flatnonzero(is_alloc[:-1] & is_alloc[1:] & same)
    unseen = np.zeros(series.events, dtype=bool)
    free_of[s[reused]] = s[reused + 1]
    unseen[s[reused]] = True
    allocs = s[is_alloc]
    allocs.sort()
    orphans = s[is_free & ~paired_free[s]]
    orphans.sort()
    alloc_idx = np.concatenate([np.full(orphans.size, -1, dtype=np.int64), allocs])
    free_idx = np.concatenate([orphans, free_of[allocs]])
    freed_unseen = np.concatenate([np.zeros(orphans.size, dtype=bool), unseen[allocs]])
    return alloc_idx, free_idx, freed_unseen


def _enclosing_ops(trace: Trace, series: MemorySeries, rows: np.ndarray) -> np.ndarray:
    """For events `rows` of `series`: the innermost op enclosing each on its own thread (or -1).

    An op encloses time t when start <= t <= end (an instant recorded as the op ends still
    belongs to it). The last op of the lane starting at or before t is the deepest candidate;
    each round climbs, for all events at once, those whose candidate ended before t.
    """
    out = np.full(rows.size, -1, dtype=np.int64)
    if rows.size == 0 or len(trace) == 0:
        return out
    m = _RANK_PREFIX.match(series.device)
    rank = int(m.group(1)) if m else None
    pid, tid, ts = series.pid[rows], series.tid[rows], series.ts_ns[rows]
    keys = np.stack([pid, tid], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    # Only lanes of the threads asked for are looked at (a trace can have a million lanes).
    maybe = np.flatnonzero(np.isin(trace.lane_pids, uniq[:, 0]) & np.isin(trace.lane_tids, uniq[:, 1]))
    lane_of = {
        (ln.pid, ln.tid): ln.index
        for ln in map(trace.lanes.__getitem__, maybe.tolist())
        if ln.kind == "cpu" and ln.rank == rank
    }
    inverse = inverse.reshape(-1)
    start, end = trace.start_ns, trace.end_ns
    for u, (p, t) in enumerate(uniq.tolist()):
        lane = lane_of.get((p, t))
        if lane is None:
            continue
        sel = np.flatnonzero(inverse == u)
        sl = trace.lane_slice(lane)
        k = np.searchsorted(start[sl], ts[sel], side="right") - 1
        cand = np.where(k >= 0, sl.start + k, -1)
        out[sel] = cand
    parent = trace.parent if np.any(out >= 0) else None
    while parent is not None:
        climb = np.flatnonzero(out >= 0)
        climb = climb[end[out[climb]] < ts[climb]]
        if climb.size == 0:
            break
        out[climb] = parent[out[climb]]
    return out


def heaviest(devices: Sequence[DeviceMemory]) -> DeviceMemory | None:
    """The device of the largest peak (the first of equals); None without devices: the device that
    matters, in the CLI's, the Memory tab's and the window's words alike."""
    return max(devices, key=lambda d: d.peak_bytes) if devices else None


class MemoryAnalysis:
    """Per-device peaks, what is live at them, and the imbalance across devices of one kind."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.series: dict[str, MemorySeries] = {m.device: m for m in trace.memory}
        self.wheres: list[str] = [NO_OP, BEFORE_PROFILING, UNEXPLAINED]
        self._where_ids: dict[str, int] = {w: i for i, w in enumerate(self.wheres)}
        self._pairs: dict[str, AllocationColumns] = {}
        #: In rank order, then device order, numbers by value (rank2 before rank10, cuda:2 before cuda:10).
        self.devices: list[DeviceMemory] = [
            self._device(m) for m in sorted(trace.memory, key=lambda m: natural_key(m.device))
        ]
        self.imbalance: list[Imbalance] = imbalance_of(self.devices)

    # ---- building ---------------------------------------------------------------------------
    def _intern(self, names: list[str]) -> np.ndarray:
        ids = self._where_ids
        table = [ids.setdefault(n, len(ids)) for n in names]
        if len(ids) > len(self.wheres):
            self.wheres.extend(list(ids)[len(self.wheres) :])
        return np.array(table, dtype=np.int32)

    def _where(self, series: MemorySeries, alloc_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(where_id, event) of each allocation; pre-profile frees are BEFORE_PROFILING."""
        where_id = np.full(alloc_idx.size, self._where_ids[BEFORE_PROFILING], dtype=np.int32)
        event = np.full(alloc_idx.size, -1, dtype=np.int64)
        real = np.flatnonzero(alloc_idx >= 0)
        rows = alloc_idx[real]
        if series.site_id is not None:
            site_ids = self._intern([NO_OP, *series.sites])  # site -1 -> NO_OP
            where_id[real] = site_ids[series.site_id[rows] + 1]
            return where_id, event
        ops = _enclosing_ops(self.trace, series, rows)
        names = self.trace.names
        op_where = self._intern([NO_OP, *names])  # name id -1 -> NO_OP
        name_of = np.where(ops >= 0, self.trace.name_id[np.maximum(ops, 0)], -1) if len(self.trace) else ops
        where_id[real] = op_where[name_of + 1]
        event[real] = ops
        return where_id, event

    def _device(self, series: MemorySeries) -> DeviceMemory:
        delta = series.delta_bytes
        m = _RANK_PREFIX.match(series.device)
        rank = int(m.group(1)) if m else series.rank
        peak = int(np.argmax(series.total_bytes)) if series.events else -1
        at_peak: tuple[AtPeak, ...] = ()
        if series.has_addr:
            alloc_idx, free_idx, freed_unseen = _pair(series)
            where_id, event = self._where(series, alloc_idx)
            ts = series.ts_ns
            pairs = AllocationColumns(
                alloc_idx=alloc_idx,
                free_idx=free_idx,
                alloc_ns=np.where(alloc_idx >= 0, ts[np.maximum(alloc_idx, 0)], _MIN),
                free_ns=np.where(free_idx >= 0, ts[np.maximum(free_idx, 0)], _MAX),
                bytes=np.abs(delta[np.where(alloc_idx >= 0, alloc_idx, free_idx)]),
                addr=series.addr[np.where(alloc_idx >= 0, alloc_idx, free_idx)],
                where_id=where_id,
                event=event,
                freed_unseen=freed_unseen,
            )
            self._pairs[series.device] = pairs
            live = self._live_at_index(pairs, peak)
            # What the allocator held at the peak that no event of the profile explains was
            # allocated before profiling and still held: it counts under BEFORE_PROFILING.
            # Where the profiler missed frees, its running total may still count those blocks too.
            unseen = series.peak_bytes - int(pairs.bytes[live].sum())
            unexplained = UNEXPLAINED if freed_unseen.any() else BEFORE_PROFILING
            at_peak = self._grouped(pairs, live, max(unseen, 0), unexplained)
        return DeviceMemory(
            device=series.device,
            rank=rank,
            peak_bytes=series.peak_bytes,
            peak_ns=int(series.ts_ns[peak]) if peak >= 0 else 0,
            reserved_peak_bytes=(
                int(series.reserved_bytes.max())
                if series.reserved_bytes is not None and series.reserved_bytes.size
                else None
            ),
            capacity_bytes=series.capacity_bytes,
            allocations=int(np.count_nonzero(delta > 0)),
            frees=int(np.count_nonzero(delta < 0)),
            at_peak=at_peak,
            freed_unseen=int(np.count_nonzero(self._pairs[series.device].freed_unseen)) if series.has_addr else 0,
        )

    @staticmethod
    def _live_at_index(pairs: AllocationColumns, i: int) -> np.ndarray:
        """Rows live just after series event `i` (exact where several events share a time)."""
        return (pairs.alloc_idx <= i) & ((pairs.free_idx > i) | (pairs.free_idx < 0))

    def _grouped(
        self, pairs: AllocationColumns, live: np.ndarray, unseen: int, unseen_where: str = BEFORE_PROFILING
    ) -> tuple[AtPeak, ...]:
        """Live rows grouped by `where`, largest first; `unseen` bytes join `unseen_where`."""
        wid = pairs.where_id[live]
        n = len(self.wheres)
        # Exact sums: float64 weights are exact below 2**53 bytes, far above any device.
        size = np.bincount(wid, weights=pairs.bytes[live].astype(np.float64), minlength=n)
        count = np.bincount(wid, minlength=n)
        size[self._where_ids[unseen_where]] += unseen
        used = np.flatnonzero(size > 0)
        order = used[np.lexsort((used, -size[used]))]
        return tuple(AtPeak(self.wheres[w], int(size[w]), int(count[w])) for w in order.tolist())

    # ---- queries ----------------------------------------------------------------------------
    def _build(self, device: str, rows: np.ndarray) -> list[Allocation]:
        p = self._pairs.get(device)
        if p is None:
            return []
        out = []
        for r in rows.tolist():
            a, f = int(p.alloc_idx[r]), int(p.free_idx[r])
            out.append(
                Allocation(
                    device=device,
                    bytes=int(p.bytes[r]),
                    alloc_ns=int(p.alloc_ns[r]) if a >= 0 else None,
                    free_ns=int(p.free_ns[r]) if f >= 0 else None,
                    where=self.wheres[int(p.where_id[r])],
                    addr=int(p.addr[r]),
                    event=int(p.event[r]),
                    freed_unseen=bool(p.freed_unseen[r]),
                )
            )
        return out

    def allocations(self, device: str) -> list[Allocation]:
        """Every allocation of a device, paired with its free, in time order (pre-profile frees
        first); empty for a device whose events have no addresses."""
        p = self._pairs.get(device)
        return [] if p is None else self._build(device, np.arange(p.bytes.size))

    def live_at(self, device: str, t_ns: int) -> list[Allocation]:
        """Allocations alive at `t_ns` (allocated at or before it, freed after it)."""
        p = self._pairs.get(device)
        if p is None:
            return []
        return self._build(device, np.flatnonzero((p.alloc_ns <= t_ns) & (p.free_ns > t_ns)))

    def live_at_peak(self, device: str) -> list[Allocation]:
        """Allocations alive right after the device's peak event (what `at_peak` groups)."""
        p, s = self._pairs.get(device), self.series.get(device)
        if p is None or s is None or not s.events:
            return []
        return self._build(device, np.flatnonzero(self._live_at_index(p, int(np.argmax(s.total_bytes)))))

    def in_range(self, device: str, t0_ns: int, t1_ns: int) -> list[Allocation]:
        """Allocations alive at any time in [t0_ns, t1_ns]."""
        return self._build(device, self.rows_in_range(device, t0_ns, t1_ns))

    def rows_in_range(self, device: str, t0_ns: int, t1_ns: int) -> np.ndarray:
        """`in_range` as row numbers (into `columns(device)`), without building an object per row:
        what a view of hundreds of thousands of allocations needs."""
        p = self._pairs.get(device)
        if p is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero((p.alloc_ns <= t1_ns) & (p.free_ns > t0_ns))

    def allocation(self, device: str, row: int) -> Allocation:
        """Row `row` of the device's allocations (a number from `rows_in_range`)."""
        return self._build(device, np.array([row], dtype=np.int64))[0]

    def columns(self, device: str) -> AllocationColumns | None:
        """The device's allocations as columns (None without addresses): to sort or sum rows."""
        return self._pairs.get(device)

    def device(self, device: str) -> DeviceMemory | None:
        return next((d for d in self.devices if d.device == device), None)

    def main_device(self) -> DeviceMemory | None:
        """The device that matters: the largest peak (`heaviest`); None without devices."""
        return heaviest(self.devices)

    def live_curve(self, device: str) -> np.ndarray | None:
        """Bytes of the paired allocations live just after each event of the device's series (what
        the events explain: memory allocated before profiling and never freed in it is not in it);
        None without addresses."""
        p, s = self._pairs.get(device), self.series.get(device)
        if p is None or s is None:
            return None
        step = np.zeros(s.events + 1, dtype=np.int64)
        np.add.at(step, np.maximum(p.alloc_idx, 0), p.bytes)  # before profiling: live from the start
        freed = p.free_idx >= 0
        np.add.at(step, p.free_idx[freed], -p.bytes[freed])
        return np.cumsum(step[:-1])

    def most_live_in_range(self, device: str, t0_ns: int, t1_ns: int) -> tuple[int, int] | None:
        """(bytes, time): the most the device's paired allocations hold at once in [t0_ns, t1_ns],
        and when (t0_ns when that is what was live as the range began); None without addresses."""
        curve, s = self.live_curve(device), self.series.get(device)
        if curve is None or s is None:
            return None
        return _most_in_range(curve, s.ts_ns, t0_ns, t1_ns)

    def peak_in_range(self, device: str, t0_ns: int, t1_ns: int) -> tuple[int, int] | None:
        """(bytes, time): the device's highest total allocated in [t0_ns, t1_ns] as its allocator
        counted it (memory from before profiling included); None for a device not in the trace."""
        s = self.series.get(device)
        if s is None or not s.events:
            return None
        return _most_in_range(s.total_bytes, s.ts_ns, t0_ns, t1_ns)

    def to_json(self, top: int = 10) -> dict[str, Any]:
        """The `branchscope memory --json` document (`at_peak`: the `top` largest groups; `main`:
        the device of the largest peak; each imbalance's `ratio`: heaviest ÷ lightest peak for two
        devices, heaviest ÷ median for more, as `ratio_of` says)."""
        main = self.main_device()
        return {
            "main": None if main is None else {"device": main.plain_device, "rank": main.rank},
            "source": recorded_by(self.trace),
            "why_none": None if self.devices else why_none(self.trace),
            "devices": [
                {
                    "device": d.plain_device,
                    "rank": d.rank,
                    "peak_bytes": d.peak_bytes,
                    "peak_ts_us": d.peak_ns / 1000.0,
                    "reserved_peak_bytes": d.reserved_peak_bytes,
                    "capacity_bytes": d.capacity_bytes,
                    "allocations": d.allocations,
                    "frees": d.frees,
                    "freed_unseen": d.freed_unseen,
                    "at_peak": [
                        {"where": a.where, "bytes": a.bytes, "allocations": a.allocations}
                        for a in d.at_peak[: max(top, 0)]
                    ],
                }
                for d in self.devices
            ],
            "imbalance": [
                {
                    "device_type": i.device_type,
                    "heaviest": i.heaviest,
                    "max_over_median": None if i.max_over_median == float("inf") else i.max_over_median,
                    "excess_bytes": i.excess_bytes,
                    "ratio": None if i.ratio == float("inf") else i.ratio,
                    "ratio_of": "max/min" if i.against == "lightest" else "max/median",
                    "lightest": i.lightest,
                }
                for i in self.imbalance
            ],
        }


def _most_in_range(values: np.ndarray, ts: np.ndarray, t0_ns: int, t1_ns: int) -> tuple[int, int]:
    """(value, time): the highest of a step series (`values[i]` from `ts[i]` on, 0 before the
    first) over [t0_ns, t1_ns]; t0_ns when the value the range began with is the highest."""
    lo = int(np.searchsorted(ts, t0_ns, side="right"))  # events up to t0: the range's start
    hi = int(np.searchsorted(ts, t1_ns, side="right"))
    best, at = (int(values[lo - 1]), int(t0_ns)) if lo > 0 else (0, int(t0_ns))
    if hi > lo:
        k = lo + int(np.argmax(values[lo:hi]))
        if int(values[k]) > best:
            best, at = int(values[k]), int(ts[k])
    return best, at


def imbalance_of(devices: list[DeviceMemory]) -> list[Imbalance]:
    """One `Imbalance` per kind with two devices or more, the kind of the largest peak first."""
    by_type: dict[str, list[DeviceMemory]] = {}
    for d in devices:
        by_type.setdefault(device_type_of(d.device), []).append(d)
    out = []
    for kind, group in sorted(by_type.items(), key=lambda kv: -max(d.peak_bytes for d in kv[1])):
        if len(group) < 2:
            continue
        heaviest = max(group, key=lambda d: d.peak_bytes)  # the first of equals
        lightest = min((d for d in group if d is not heaviest), key=lambda d: d.peak_bytes)  # another device, even if equal
        median = float(np.median([d.peak_bytes for d in group]))
        two = len(group) == 2
        reference = float(lightest.peak_bytes) if two else median
        out.append(
            Imbalance(
                device_type=kind,
                heaviest=heaviest.label,
                max_over_median=heaviest.peak_bytes / median if median > 0 else float("inf"),
                excess_bytes=int(round(heaviest.peak_bytes - reference)),
                ratio=heaviest.peak_bytes / reference if reference > 0 else float("inf"),
                against="lightest" if two else "median",
                lightest=lightest.label,
                heaviest_bytes=heaviest.peak_bytes,
                reference_bytes=reference,
                heaviest_rank=heaviest.rank,
                lightest_rank=lightest.rank,
                devices=len(group),
            )
        )
    return out


def analyze_memory(trace: Trace) -> MemoryAnalysis:
    """Analyse every device of `trace.memory` (see the module docstring)."""
    return MemoryAnalysis(trace)
