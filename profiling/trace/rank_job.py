"""A job of many ranks: every rank summarised, only the ranks in view loaded (issue 23).

Opening a folder of 256 rank traces whole holds every event of every rank (1.4× the JSON of all
of them). `open_rank_job(paths)` reads each file once, on every core (`merge.map_files`: forked
children, each file's summary piped back), and keeps of each rank only what the job's figures
need: its `ranks.RankFigures` (step times, busy share, memory peaks), its collective events alone
(`collectives.collective_events`), its clock. So a `RankJob` holds

- `figures`: every rank's, joined (`ranks.join_figures`: stragglers and the heaviest rank over all);
- `collectives`: every rank's collective events merged on one clock, matched as a full trace's
  are (`collectives.collectives_of(job.collectives)`);
- `load(ranks)`: the full events of the ranks asked for (the ranks in view), merged on the job's
  clock (its first rank's `baseTimeNanoseconds`), so an instant has the same time whichever ranks
  are loaded. `job_of(trace)` is the job a trace so loaded belongs to; `view` the ranks loaded
  last, least recently wanted first, and `wanted(rank)` the view with that rank in it. While the
  last trace loaded lives, its ranks are merged again from it, not read again; the job itself
  holds no events (a job is kept, `JOBS_KEPT`, so that showing it again does not summarise it again).

`open_view(paths)` is what the window opens: a job of up to `ALL_RANKS_UP_TO` ranks whole (every
rank loaded, as `merge.load_traces`), a larger one as a job with `IN_VIEW` ranks loaded, those
that stand out first (`first_view`). Rank files picked one by one open the same way:
`large_jobs(paths)` summarises them once, groups them into jobs (`merge.clock_groups`) and keeps
each large one under its files, in whatever order they were named, so `open_view` finds it.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.trace.collectives import Collectives, collective_events, collectives_of
from branchscope.profiling.trace.merge import (
    FILES_PHASE,
    clock_groups,
    clock_of,
    job_ranks,
    load_many,
    load_source,
    load_traces,
    map_files,
    merge_traces,
    with_rank,
)
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.profiling.trace.rank_pool import register, trace_from_parts, trace_parts
from branchscope.profiling.trace.ranks import (
    HeavyRank,
    RankFigures,
    Straggler,
    join_figures,
    most_often_slowest,
    rank_figures,
    worst_straggler,
)
from branchscope.profiling.trace.reader import ProgressCallback

#: A job of up to this many ranks opens whole (`open_view`); a larger one with `IN_VIEW` loaded.
ALL_RANKS_UP_TO = 8
#: How many ranks' events a large job holds at once.
IN_VIEW = 4
#: Jobs kept by their files (`open_rank_job`), so a job shown again is not summarised again.
JOBS_KEPT = 4
#: The children that read the ranks in view: one. The ranks held (about 1.15× their JSON each)
#: and one rank being decoded (about 1.9× its JSON) stay within twice the JSON of the ranks in
#: view by construction; a second child decoding beside it could pass that. Measured (16 ranks of
#: 29 MB, 4 in view, the load alone): two children 211 MB (1.83× their JSON) in 2.0 s, one 191 MB
#: (1.65×) in 2.7 s.
VIEW_WORKERS = 1

for _cls in (RankFigures, Straggler, HeavyRank):  # what a child's summary of a rank holds
    register(_cls)


def _rank_part(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One rank's share of a job (run in a forked child): its figures, collective events and clock."""
    trace = load_source(path)
    figures = rank_figures(trace)
    if len(figures.ranks) > 1:
        raise TraceFormatError(f"{path}: holds {len(figures.ranks)} ranks, not one rank of a job")
    return {
        "rank": trace.rank,
        "figures": figures,
        "collectives": trace_parts(collective_events(trace)),
        "base_time_ns": trace.base_time_ns,
        "span": list(trace.span()),
        "events": len(trace),
        "clock": clock_of(trace),
    }


class RankJob:
    """See the module docstring. Built by `open_rank_job`."""

    def __init__(
        self,
        paths: Sequence[Path],
        ranks: Sequence[int],
        figures: RankFigures,
        collectives: Trace,
        base_time_ns: int | None,
        origin_ns: int,
    ) -> None:
        #: The files, in rank order, and each one's rank.
        self.paths = tuple(paths)
        self.ranks = tuple(ranks)
        self.figures = figures
        #: Every rank's collective events, merged on the job's clock.
        self.collectives = collectives
        self.base_time_ns = base_time_ns
        lane_rank = np.array([-1 if ln.rank is None else ln.rank for ln in collectives.lanes], dtype=np.int64)
        self._event_rank = lane_rank[collectives.lane]
        #: The earliest event of any rank, on the job's clock.
        self.origin_ns = origin_ns
        #: The ranks loaded last (`load`), least recently wanted first.
        self.view: list[int] = []
        #: The trace `load` made last, while it is held (by the window): its ranks' traces, each
        #: as read, are merged again when the view changes, not read again.
        self._last: weakref.ref[Trace] | None = None

    def __len__(self) -> int:
        return len(self.ranks)

    def path_of(self, rank: int) -> Path:
        return self.paths[self.ranks.index(rank)]

    def first_view(self, k: int = IN_VIEW) -> list[int]:
        """The `k` ranks to load first: those that stand out (the worst straggler, the heaviest
        memory rank, the rank slowest in the most steps), then the lowest ranks; in rank order."""
        f = self.figures
        worst, often = worst_straggler(f), most_often_slowest(f)
        chosen = [
            *([] if worst is None else [worst.rank]),
            *([] if f.heaviest is None else [f.heaviest.rank]),
            *([] if often is None else [often[0]]),
            *self.ranks,
        ]
        return sorted(list(dict.fromkeys(chosen))[:k])

    def wanted(self, rank: int, k: int = IN_VIEW) -> list[int]:
        """The view with `rank` in it, the least recently wanted rank dropped past `k`."""
        if rank not in self.ranks:
            raise ValueError(f"the job has no rank {rank}")
        view = [r for r in self.view if r != rank] + [rank]
        return view[-k:]

    def load(
        self, ranks: Sequence[int], *, progress: ProgressCallback | None = None, workers: int = VIEW_WORKERS
    ) -> Trace:
        """The full events of `ranks` (in that order of recency: `view`), merged on the job's clock;
        `job_of` the result is this job. Ranks already held (the last `load`'s) are not read again;
        the others' files are read by `workers` forked children (`merge.load_many`), and the
        ranks not asked for are let go."""
        if not ranks:
            raise ValueError("no rank to load")
        order = sorted(set(ranks), key=self.ranks.index)
        last = self._last() if self._last is not None else None
        held = _PARTS.get(last, {}) if last is not None else {}
        missing = [r for r in order if r not in held]
        read = load_many([self.path_of(r) for r in missing], progress=progress, workers=workers) if missing else []
        if not missing and progress is not None:
            progress(FILES_PHASE, 1.0)
        fresh = {r: with_rank(t, r) for r, t in zip(missing, read)}
        parts = {r: held[r] if r in held else fresh[r] for r in order}
        trace = merge_traces(list(parts.values()), base_time_ns=self.base_time_ns)
        self.view = list(dict.fromkeys(ranks))
        _JOB_OF[trace], _PARTS[trace] = self, parts
        self._last = weakref.ref(trace)
        return trace

    def collective_of(self, trace: Trace, i: int) -> tuple[Collectives, int] | None:
        """Event `i` of `trace` (of this job's `load`) as a member of the job's collectives, matched
        over every rank: (`collectives_of(self.collectives)`, its collective), None when it is in none."""
        rank = trace.lanes[int(trace.lane[i])].rank
        found = self.collectives
        try:
            name = found.names.index(trace.event_name(i))
        except ValueError:
            return None
        hit = np.flatnonzero(
            (found.name_id == name) & (found.start_ns == trace.start_ns[i]) & (self._event_rank == rank)
        )
        if hit.size == 0:
            return None
        coll = collectives_of(found)
        c = coll.of_event(int(hit[0]))
        return (coll, c) if c >= 0 else None

    def loaded(self, trace: Trace) -> list[int]:
        """The ranks of this job that `trace` (of its `load`) holds: their events, or their memory
        alone (allocator snapshots have no lanes)."""
        return sorted(_PARTS.get(trace, {}))


_JOB_OF: weakref.WeakKeyDictionary[Trace, RankJob] = weakref.WeakKeyDictionary()
#: The ranks' own traces a trace of `RankJob.load` was merged from, while it lives.
_PARTS: weakref.WeakKeyDictionary[Trace, dict[int, Trace]] = weakref.WeakKeyDictionary()
_JOBS: OrderedDict[tuple[Any, ...], RankJob] = OrderedDict()


def job_of(trace: Trace | None) -> RankJob | None:
    """The job `trace` shows some ranks of (`RankJob.load`), None for any other trace."""
    return None if trace is None else _JOB_OF.get(trace)


def _files_key(paths: Sequence[str | os.PathLike[str]]) -> tuple[Any, ...] | None:
    """The files as they are now (path, size, change time), in any order they are named: a job
    kept is used again only for these (its folder's files, or the same files picked one by one)."""
    key = []
    for p in sorted(os.fspath(p) for p in paths):
        try:
            st = os.stat(p)
        except OSError:
            return None
        key.append((os.fspath(p), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(key)


def open_rank_job(
    paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None, workers: int | None = None
) -> RankJob:
    """The job whose ranks are the files `paths` (one rank each), summarised without holding their
    events (see the module docstring); ranks as `merge.as_ranks` gives them. A file whose child
    failed is read here, so a broken file raises as `load_source` raises for it, naming it.
    `progress(FILES_PHASE, files done / files)`; False from it cancels (`LoadCancelled`)."""
    key = _files_key(paths)
    if key is not None and key in _JOBS:
        _JOBS.move_to_end(key)
        return _JOBS[key]

    def finish(part: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
        return part if isinstance(part, dict) else _rank_part(path)

    return _kept(key, _job_of_parts(paths, map_files(_rank_part, finish, paths, progress, workers)))


def _kept(key: tuple[Any, ...] | None, job: RankJob) -> RankJob:
    """`job`, kept by its files' `key` (`JOBS_KEPT` at most) so that opening them again finds it."""
    if key is not None:
        _JOBS[key] = job
        _JOBS.move_to_end(key)
        while len(_JOBS) > JOBS_KEPT:
            _JOBS.popitem(last=False)
    return job


def _job_of_parts(paths: Sequence[str | os.PathLike[str]], parts: list[dict[str, Any]]) -> RankJob:
    """The job of the files `paths` from each one's summary (`_rank_part`, in the same order)."""
    ranks = job_ranks([p["rank"] for p in parts], paths)
    order = sorted(range(len(paths)), key=lambda k: ranks[k])
    first = parts[order[0]]
    base = first["base_time_ns"]

    def shift(p: dict[str, Any]) -> int:
        return p["base_time_ns"] - base if p["base_time_ns"] is not None and base is not None else 0

    figures = join_figures([replace(parts[k]["figures"], ranks=[ranks[k]]) for k in order])
    collectives = merge_traces(
        [with_rank(trace_from_parts(parts[k]["collectives"]), ranks[k]) for k in order], base_time_ns=base
    )
    spans = [(p["span"][0] + shift(p), p["events"]) for p in parts]
    origin = min((s for s, n in spans if n), default=0)
    job = RankJob([Path(paths[k]) for k in order], [ranks[k] for k in order], figures, collectives, base, origin)
    collectives_of(job.collectives)  # matched now, off the GUI thread: a selection only looks them up
    return job


def large_jobs(paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None) -> list[list[int]]:
    """The files `paths` (trace files a user picked together) grouped as `merge.clock_groups`
    groups ranks of one job, each file summarised once (on every core); a group of more than
    `ALL_RANKS_UP_TO` ranks is made its job and kept, so that `open_view` of its files opens it as
    their folder opens it (every rank summarised, the ranks in view loaded) without reading them
    again. A file that cannot be summarised (broken, or of several ranks) is a group of its own:
    reading it alone says why. Groups as `clock_groups` gives them, of positions in `paths`.
    `progress` hears the files summarised as `open_view` reports its own summaries."""

    def finish(part: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
        if isinstance(part, dict):
            return part
        try:
            return _rank_part(path)
        except (TraceFormatError, OSError):
            return {}  # not summarised

    n = len(paths)  # the summaries' share of the whole, as `open_view` shares it with the ranks in view
    parts: list[dict[str, Any]] = map_files(_rank_part, finish, paths, _share(progress, 0.0, n / (n + IN_VIEW)), None)
    summarised = [k for k, p in enumerate(parts) if p]
    groups = [[summarised[i] for i in g] for g in clock_groups([parts[k]["clock"] for k in summarised])]
    for group in groups:
        if len(group) > ALL_RANKS_UP_TO:
            files = [paths[k] for k in group]
            _kept(_files_key(files), _job_of_parts(files, [parts[k] for k in group]))
    return sorted(groups + [[k] for k, p in enumerate(parts) if not p])


def _share(progress: ProgressCallback | None, lo: float, hi: float) -> ProgressCallback | None:
    """`progress` with the pool's files fraction put between `lo` and `hi` of the whole."""
    if progress is None:
        return None
    return lambda phase, f: progress(FILES_PHASE, lo + (hi - lo) * f) if phase == FILES_PHASE else progress(phase, f)


def open_view(
    paths: Sequence[str | os.PathLike[str]], *, progress: ProgressCallback | None = None, in_view: int = IN_VIEW
) -> Trace:
    """The trace the window shows of `paths`: one file, or a job of up to `ALL_RANKS_UP_TO` ranks,
    whole (`merge.load_traces`); a larger job's `first_view` ranks loaded, or the ranks it had
    loaded last when the job was kept (`job_of` tells the trace's job)."""
    if len(paths) <= ALL_RANKS_UP_TO:
        return load_traces(paths, progress=progress)
    n, k = len(paths), min(in_view, len(paths))
    job = open_rank_job(paths, progress=_share(progress, 0.0, n / (n + k)))
    return job.load(job.view or job.first_view(k), progress=_share(progress, n / (n + k), 1.0))
