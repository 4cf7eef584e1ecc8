"""Several ranks' traces of one distributed job, as one `Trace` on one clock.

A multi-rank job writes one trace per rank; comparing ranks (stragglers, unbalanced memory)
needs them side by side. Lanes keep their rank, memory devices are prefixed with it, and traces
whose timestamps are relative to different `baseTimeNanoseconds` are shifted onto the first one's.
Each rank keeps its flow arrows (bound in its own trace, on first use).

Only traces that are ranks of one job belong on one clock: `rank_groups` sorts a list of traces
into such groups (same world size, distinct ranks, overlapping clocks); any other trace (another
job, a single-process run, a run recorded at another time) is a group of its own.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.trace import forked, kineto
from branchscope.profiling.trace.flows import merged_flow_binder
from branchscope.profiling.trace.model import (
    KIND_ORDER,
    CounterTrack,
    Lane,
    LoadCancelled,
    MemorySeries,
    Trace,
)
from branchscope.profiling.trace.rank_pool import forked_map, register, trace_from_parts, trace_parts
from branchscope.profiling.trace.reader import ProgressCallback, load_trace
from branchscope.profiling.trace.snapshot import is_snapshot, load_snapshot, rank_from_name


def load_source(path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> Trace:
    """A trace file, or an allocator snapshot (a pickle, told by its first bytes) as a trace of memory."""
    return load_snapshot(path) if is_snapshot(path) else load_trace(path, progress=progress)


#: The progress phase of files read by the pool: its fraction is files done of all (the reader's own
#: phases, per file, come only from a file read in this process).
FILES_PHASE = "files"


def load_traces(paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None) -> Trace:
    """One trace (or snapshot) as is, or several merged as ranks (see `merge_traces`, `as_ranks`).

    Several files are read `POOL_WORKERS()` at a time by forked children (`load_many`): `progress`
    then hears ("files", files done ÷ files); one worker, or one file: `progress` goes to
    `load_trace` for each file in turn (its phases start over per file).
    """
    if len(paths) > 1 and POOL_WORKERS() > 1:
        traces = load_many(paths, progress=progress)
    else:
        traces = [load_source(p, progress=progress) for p in paths]
    return traces[0] if len(traces) == 1 else merge_traces(as_ranks(traces))


def POOL_WORKERS() -> int:  # noqa: N802 - a knob tests and benchmarks set, read when called
    """How many files `load_many` reads at once: the cores this process may use."""
    return forked.cores()


def _loaded_parts(path: str | os.PathLike[str]) -> dict[str, Any]:
    return trace_parts(load_source(path))


def load_many(
    paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None, workers: int | None = None
) -> list[Trace]:
    """The traces (or snapshots) of `paths` in order, read `workers` (default `POOL_WORKERS()`)
    at a time, each in a forked child (`rank_pool.forked_map`). A file whose child failed is read
    here, so a broken file raises as `load_source` raises for it, naming it; no child is left.
    `progress("files", files done / files)` as files arrive; False from it cancels (`LoadCancelled`)."""

    def finish(parts: Any, path: str | os.PathLike[str]) -> Trace:
        # A failed child: this process reads the file now, so its error is raised at once.
        return trace_from_parts(parts) if parts is not None else load_source(path)

    return map_files(_loaded_parts, finish, paths, progress, workers)


def map_files(
    child: Callable[[Any], Any],
    finish: Callable[[Any, Any], Any],
    paths: Sequence[str | os.PathLike[str]],
    progress: ProgressCallback | None,
    workers: int | None,
) -> list[Any]:
    """`finish(child(path), path)` for each of `paths`, in order: `child` runs in a forked child
    (`workers` at a time, default `POOL_WORKERS()`), `finish` here on what it sent back (None when
    that child failed: `finish` then reads the file itself). `progress(FILES_PHASE, files done /
    files)` as files arrive; False from it cancels (`LoadCancelled`)."""
    n = len(paths)
    out: list[Any] = [None] * n
    count = [0]

    def waiting() -> None:
        if progress is not None and progress(FILES_PHASE, count[0] / n) is False:
            raise LoadCancelled("loading stopped while reading")

    def arrived(k: int, result: Any) -> None:
        out[k] = finish(result, paths[k])
        count[0] += 1
        waiting()

    forked_map(child, list(paths), workers=workers or POOL_WORKERS(), waiting=waiting, done=arrived)
    return [x for x in out if x is not None]


def as_ranks(traces: Sequence[Trace]) -> list[Trace]:
    """The traces of one job with a rank each: their own (`distributedInfo`), else the N of
    `rank-N` in their file names, when that gives every one a distinct rank; else their positions.
    In rank order, whatever order they were named in (a shell's `rank-*` puts rank 10 before
    rank 2): merged, rank 0's clock is the job's and every list of ranks reads 0, 1, 2, …, 10."""
    given = job_ranks([t.rank for t in traces], [t.path or "" for t in traces])
    return [with_rank(t, rank) for rank, t in sorted(zip(given, traces), key=lambda pair: pair[0])]


def job_ranks(said: Sequence[int | None], paths: Sequence[str | os.PathLike[str]]) -> list[int]:
    """The rank of each file of a job: the rank its trace says (`said`), else the N of `rank-N`
    in its name, when that gives every file a distinct rank; else its position."""
    ranks = [r if r is not None else rank_from_name(os.fspath(p)) for r, p in zip(said, paths)]
    if None not in ranks and len(set(ranks)) == len(ranks):
        return [r for r in ranks if r is not None]
    return list(range(len(said)))


def with_rank(trace: Trace, rank: int) -> Trace:
    """`trace` as rank `rank` (its distributedInfo's rank set; the trace itself when it says so)."""
    if trace.rank == rank:
        return trace
    info = kineto.DISTRIBUTED_INFO.of(trace.metadata)
    info = {**info, kineto.RANK.name: rank} if isinstance(info, dict) else {kineto.RANK.name: rank}
    return replace(trace, metadata={**trace.metadata, kineto.DISTRIBUTED_INFO.name: info})


#: What a folder of rank traces holds (torchrun jobs, tensorboard_trace_handler): trace files.
#: The names of trace files in a folder of ranks: JSON, and Perfetto protobuf (read by content, whatever the name).
PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")
RANK_FILE_SUFFIXES = (
    ".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz", *PERFETTO_SUFFIXES, *(s + ".gz" for s in PERFETTO_SUFFIXES),
)  # fmt: skip


def folder_traces(folder: str | os.PathLike[str]) -> list[Path]:
    """The trace files right in `folder` (regular files, no links), in name order with rank-N numerically."""
    found = []
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and entry.name.endswith(RANK_FILE_SUFFIXES):
            found.append(Path(entry.path))
    return in_rank_order(found)


def in_rank_order(files: Sequence[Path]) -> list[Path]:
    """Rank trace files in name order with rank-N numerically (rank-2 before rank-10)."""
    return sorted(files, key=lambda p: (rank_from_name(p) is None, rank_from_name(p) or 0, p.name))


def host_of(metadata: dict[str, Any]) -> str | None:
    """The host a trace says it was recorded on (`kineto.HOST`: at the top level, in its
    distributedInfo or in a branchscope run's own object), or None."""
    nested = [kineto.DISTRIBUTED_INFO.of(metadata), kineto.RUN_FACTS.of(metadata)]
    for where in (metadata, *(n for n in nested if isinstance(n, dict))):
        for key in kineto.HOST.spellings:
            value = where.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def rank_hosts(trace: Trace) -> dict[int | None, str]:
    """{rank: host} for the ranks of a trace (merged or not) whose traces say their host."""
    hosts: dict[int | None, str] = {}
    parts = trace.metadata.get("ranks")
    for meta in parts if isinstance(parts, list) else [trace.metadata]:
        if not isinstance(meta, dict):
            continue
        info = kineto.DISTRIBUTED_INFO.of(meta)
        rank = kineto.RANK.of(info) if isinstance(info, dict) else None
        rank = rank if type(rank) is int else None
        host = host_of(meta)
        if host is not None:
            hosts[rank] = host
    return hosts


@register
@dataclass(frozen=True)
class RankSummary:
    """One rank of a trace at a glance, to tell a slow or heavy rank (`rank_summaries`)."""

    rank: int | None
    host: str | None
    events: int
    span_ns: int
    #: What share of the rank's span its GPU streams computed (the union of their events), or, for
    #: a rank without GPU streams, its CPU threads did.
    busy: float
    busy_of: str  # "GPU" or "CPU"
    #: The highest memory peak of the rank's devices (bytes), None without memory events.
    memory_peak_bytes: int | None
    #: The median of its profiled steps (ns), None without step annotations.
    step_ns: int | None


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    if starts.size == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    last = np.flatnonzero(np.append(new[1:], True))
    return int((e[last] - s[new]).sum())


def rank_summaries(trace: Trace) -> list[RankSummary]:
    """Each rank's busy share, memory peak and median step, in rank order (one entry for a trace
    of one process: its lanes' rank, or None)."""
    from branchscope.profiling.trace.ranges import step_events

    hosts = rank_hosts(trace)
    lane_rank = np.array([-1 if ln.rank is None else ln.rank for ln in trace.lanes], dtype=np.int64)
    gpu_lane = trace.lane_kind_codes == KIND_ORDER.index("gpu")
    ev_rank = lane_rank[trace.lane] if len(trace) else np.zeros(0, dtype=np.int64)
    steps = step_events(trace)
    out = []
    ranks = sorted({int(x) for x in lane_rank.tolist()})
    for r in ranks:
        mine = ev_rank == r
        if not mine.any():
            continue
        starts, ends = trace.start_ns[mine], trace.end_ns[mine]
        span = int(ends.max() - starts.min())
        on_gpu = gpu_lane[trace.lane[mine]]
        kind = "GPU" if on_gpu.any() else "CPU"
        sel = on_gpu if on_gpu.any() else ~on_gpu
        busy = _union_ns(starts[sel], ends[sel]) / span if span > 0 else 0.0
        rank = trace.rank if r < 0 else r
        peaks = [m.peak_bytes for m in trace.memory if len(ranks) == 1 or m.rank == rank]
        own_steps = steps[ev_rank[steps] == r] if steps.size else steps
        out.append(
            RankSummary(
                rank=rank, host=hosts.get(rank), events=int(mine.sum()), span_ns=span, busy=busy, busy_of=kind,
                memory_peak_bytes=max(peaks) if peaks else None,
                step_ns=int(np.median(trace.dur_ns[own_steps])) if own_steps.size else None,
            )
        )  # fmt: skip
    return out


def _file_summary(path: str | os.PathLike[str]) -> RankSummary:
    summaries = rank_summaries(load_source(path))
    if len(summaries) != 1:
        raise ValueError(f"{path}: not one rank's trace")
    return summaries[0]


def rank_job_summaries(
    paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None, workers: int | None = None
) -> list[RankSummary]:
    """`rank_summaries` of the job whose ranks are the files `paths`, without holding their events:
    each file is read and summarised in a forked child (`workers` at a time, default
    `POOL_WORKERS()`), which sends back its summary only; ranks as `as_ranks` gives them. The
    same figures as `rank_summaries(load_traces(paths))`, in rank order. A file whose child failed
    is read here (its error raised as `load_source` raises it, naming it); no child is left."""

    def finish(summary: Any, path: str | os.PathLike[str]) -> RankSummary:
        return summary if isinstance(summary, RankSummary) else _file_summary(path)

    summaries: list[RankSummary] = map_files(_file_summary, finish, paths, progress, workers)
    ranks = job_ranks([s.rank for s in summaries], paths)
    return sorted((replace(s, rank=r) for s, r in zip(summaries, ranks)), key=lambda s: s.rank or 0)


def _clock_shift(trace: Trace | Clock, reference: Trace | Clock) -> int:
    if trace.base_time_ns is not None and reference.base_time_ns is not None:
        return trace.base_time_ns - reference.base_time_ns
    return 0


def _distributed(trace: Trace) -> tuple[int, int, str | None] | None:
    """(rank, world size, backend) from a trace's distributedInfo; None when it is not a rank's trace."""
    job = _job(trace)
    return job if job is not None and 0 <= job[0] < job[1] else None


def _job(trace: Trace) -> tuple[int, int, str | None] | None:
    """(rank, world size, backend) as a trace's distributedInfo says them, the rank perhaps out of
    the world's range; None without a rank and world size."""
    info = kineto.DISTRIBUTED_INFO.of(trace.metadata)
    if not isinstance(info, dict):
        return None
    rank, world, backend = kineto.RANK.of(info), kineto.WORLD_SIZE.of(info), kineto.BACKEND.of(info)
    if type(rank) is not int or type(world) is not int:
        return None
    return rank, world, backend if isinstance(backend, str) else None


def why_apart(traces: Sequence[Trace], paths: Sequence[str], groups: list[list[int]]) -> str:
    """Why `rank_groups` did not put the traces in one group: the first trace outside the first
    group against that group (`paths[k]` names trace k)."""
    first = groups[0]
    k = groups[1][0]
    a, b = paths[first[0]], paths[k]
    me, ref = _job(traces[k]), _job(traces[first[0]])
    for path, job in ((a, ref), (b, me)):
        if job is None:
            return f"{path} has no distributedInfo with its rank and world size: not a rank of a distributed job"
    assert me is not None and ref is not None
    if me[1:] != ref[1:]:
        return (
            f"different distributedInfo: {a} is rank {ref[0]} of {ref[1]} ({ref[2] or 'no backend'}), "
            f"{b} rank {me[0]} of {me[1]} ({me[2] or 'no backend'})"
        )
    taken = [i for i in first if (job := _job(traces[i])) is not None and job[0] == me[0]]
    if taken:
        return f"{paths[taken[0]]} and {b} are both rank {me[0]}"
    return f"their clocks do not overlap: {b} was not recorded while {a} was"


@register
@dataclass(frozen=True)
class Clock:
    """What tells whether traces are ranks of one job (`clock_groups`), without their events: the
    (rank, world size, backend) of a rank's distributedInfo (None for any other trace), its span
    (its own clock), how many events it has and its `baseTimeNanoseconds`."""

    job: tuple[int, int, str | None] | None
    span: tuple[int, int]
    events: int
    base_time_ns: int | None


def clock_of(trace: Trace) -> Clock:
    """`trace`'s `Clock` (what a forked child sends back of a rank it summarised, `rank_job`)."""
    start, end = trace.span()
    return Clock(_distributed(trace), (int(start), int(end)), len(trace), trace.base_time_ns)


def rank_groups(traces: Sequence[Trace]) -> list[list[int]]:
    """Indices of `traces` grouped into ranks of one job (`clock_groups` of their clocks). Merge a
    group with `merge_traces`; never merge across groups."""
    return clock_groups([clock_of(t) for t in traces])


def clock_groups(clocks: Sequence[Clock]) -> list[list[int]]:
    """Indices of `clocks` grouped into ranks of one job, each group and its members in input order.

    A trace joins the first group whose traces have its world size and backend, none its rank, and
    whose clock (shifted as `merge_traces` would shift it) overlaps its own; every other trace is a
    group of its own.
    """
    groups: list[list[int]] = []
    for i, me in enumerate(clocks):
        home = None
        if me.job is not None and me.events:
            for group in groups:
                first = clocks[group[0]]
                if not first.events:
                    continue
                others = [clocks[k].job for k in group]
                if any(o is None or o[1:] != me.job[1:] or o[0] == me.job[0] for o in others):
                    continue
                shift = _clock_shift(me, first)
                lo = min(clocks[k].span[0] + _clock_shift(clocks[k], first) for k in group)
                hi = max(clocks[k].span[1] + _clock_shift(clocks[k], first) for k in group)
                if me.span[0] + shift <= hi and lo <= me.span[1] + shift:
                    home = group
                    break
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    return groups


def merge_traces(traces: Sequence[Trace], *, base_time_ns: int | None = None) -> Trace:
    """The traces as one, each on the clock of the first (its `baseTimeNanoseconds`), or of
    `base_time_ns` when given (`rank_job`: the same instant the same time whichever ranks are merged)."""
    if not traces:
        raise ValueError("merge_traces needs at least one trace")
    base = traces[0].base_time_ns if base_time_ns is None else base_time_ns
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    lanes: list[Lane] = []
    starts: list[np.ndarray] = []
    durs: list[np.ndarray] = []
    lane_cols: list[np.ndarray] = []
    name_cols: list[np.ndarray] = []
    cat_cols: list[np.ndarray] = []
    depths: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    raw_parts: list[tuple[int, Sequence[Any] | None]] = []
    events = 0
    memory: list[MemorySeries] = []
    counters: list[CounterTrack] = []
    for position, t in enumerate(traces):
        rank = t.rank if t.rank is not None else position
        shift = t.base_time_ns - base if t.base_time_ns is not None and base is not None else 0
        name_map = np.array([names.setdefault(n, len(names)) for n in t.names], dtype=np.int32)
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in t.cats], dtype=np.int32)
        lane_base = len(lanes)
        lanes += [replace(ln, index=lane_base + ln.index, rank=rank) for ln in t.lanes]
        starts.append(t.start_ns + shift)
        durs.append(t.dur_ns)
        lane_cols.append(t.lane + lane_base)
        name_cols.append(name_map[t.name_id] if len(t) else np.zeros(0, np.int32))
        cat_cols.append(cat_map[t.cat_id] if len(t) else np.zeros(0, np.int32))
        depths.append(t.depth)
        offsets.append(t.lane_offsets[:-1] + events)
        raw_parts.append((events, t._raw_args))
        events += len(t)
        memory += [replace(m, device=f"rank{rank}/{m.device}", ts_ns=m.ts_ns + shift, rank=rank) for m in t.memory]
        counters += [replace(c, ts_ns=c.ts_ns + shift) for c in t.counters]
    # Each part is sorted by (lane, start, longest first) and its lanes follow the parts' before
    # it, one shift per part: the parts one after another are the merged order, and each event's
    # depth its part's (no sort, no depth computed again: what build_trace would give).
    return Trace(
        path=" + ".join(t.path for t in traces),
        start_ns=np.concatenate(starts).astype(np.int64, copy=False),
        dur_ns=np.concatenate(durs).astype(np.int64, copy=False),
        lane=np.concatenate(lane_cols).astype(np.int32, copy=False),
        depth=np.concatenate(depths).astype(np.int32, copy=False),
        name_id=np.concatenate(name_cols).astype(np.int32, copy=False),
        cat_id=np.concatenate(cat_cols).astype(np.int32, copy=False),
        names=list(names),
        cats=list(cats),
        lanes=lanes,
        lane_offsets=np.concatenate([*offsets, np.array([events], dtype=np.int64)]).astype(np.int64, copy=False),
        memory=memory,
        counters=counters,
        metadata={"ranks": [t.metadata for t in traces], kineto.BASE_TIME.name: base},
        _raw_args=_ChainedArgs(raw_parts, events),
        _flow_binder=merged_flow_binder(list(traces)),
    )


class _ChainedArgs(Sequence[Any]):
    """The merged trace's per-event texts: the parts' own, looked up by event (no list of a
    million views made at merge time)."""

    def __init__(self, parts: list[tuple[int, Sequence[Any] | None]], total: int) -> None:
        self._firsts = [first for first, _ in parts]
        self._parts = [raw for _, raw in parts]
        self._total = total

    def __len__(self) -> int:
        return self._total

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._total))]
        if i < 0:
            i += self._total
        if not 0 <= i < self._total:
            raise IndexError(i)
        k = bisect.bisect_right(self._firsts, i) - 1
        raw = self._parts[k]
        return None if raw is None else raw[i - self._firsts[k]]
