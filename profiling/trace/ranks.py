"""Every rank of a job side by side: step time per step, busy share, memory peaks, and who stands out.

`rank_figures(trace)` reads a merged trace (`merge.merge_traces`; a trace of one process is one
rank) into `RankFigures`: a ranks × steps matrix of step times (the steps' annotations per rank,
`ranges.step_events`, matched across ranks by their label's number: `step 3` of rank 0 with `step 3`
of rank 5), each rank's busy share (as `merge.RankSummary` counts it: the union of its GPU streams'
events, or of its CPU threads' for a rank without GPU streams, over the rank's span) and its
memory peak per device. From those, per step the slowest rank and its excess over the ranks'
median for that step (`Straggler`), and the rank of the highest memory peak and its excess over
the median of the ranks' peaks (`HeavyRank`). `figures_json` is the one JSON form, which
`inspect --json` and `memory --json` print.

Vectorised over events, ranks and steps (a job of 256 ranks × 10 steps is a few array passes);
nothing here imports Qt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from branchscope.profiling.trace.analyses import merged_runs_by_lane
from branchscope.profiling.trace.merge import rank_hosts
from branchscope.profiling.trace.model import KIND_ORDER, Trace
from branchscope.profiling.trace.ranges import step_events

_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class Straggler:
    """The slowest rank of one step: its time, the ranks' median for that step and the excess (ns)."""

    step: str
    rank: int
    step_ns: int
    median_ns: float
    excess_ns: float


@dataclass(frozen=True)
class HeavyRank:
    """The rank of the highest memory peak: its peak, the median of the ranks' peaks and the excess (bytes)."""

    rank: int
    device: str
    peak_bytes: int
    median_bytes: float
    excess_bytes: float


@dataclass(frozen=True)
class RankFigures:
    """Per rank (rows, in rank order) and per step (columns, in step order) of a job."""

    ranks: list[int]
    hosts: list[str | None]
    #: Each step's label ("step 3", "ProfilerStep#3"), as the first rank to have it names it.
    steps: list[str]
    #: ranks × steps, int64 ns; -1 where a rank has no such step (the longest where it has several).
    step_ns: np.ndarray
    #: Each rank's busy share of its span, and of what ("GPU" or "CPU").
    busy: np.ndarray
    busy_of: list[str]
    #: Each rank's highest memory peak (bytes; -1 without memory events), and its peak per device.
    memory_peak: np.ndarray
    peaks: list[dict[str, int]]
    #: Each rank's first lane (the timeline's group of that rank starts there); -1 for none.
    first_lane: np.ndarray
    stragglers: list[Straggler] = field(default_factory=list)
    heaviest: HeavyRank | None = None

    def row(self, rank: int) -> int:
        """The row of `rank` (ValueError when the job has no such rank)."""
        return self.ranks.index(rank)

    def straggler_cells(self) -> list[tuple[int, int]]:
        """(row, column) of each step's straggler."""
        col = {s: k for k, s in enumerate(self.steps)}
        return [(self.row(s.rank), col[s.step]) for s in self.stragglers]

    def excess_ns(self) -> np.ndarray:
        """ranks × steps: each time over its step's median across ranks (NaN where a rank lacks the step)."""
        times = np.where(self.step_ns >= 0, self.step_ns.astype(np.float64), np.nan)
        if times.size == 0:
            return times
        with np.errstate(all="ignore"):
            have = ~np.isnan(times).all(axis=0)
            median = np.full(times.shape[1], np.nan)
            if have.any():
                median[have] = np.nanmedian(times[:, have], axis=0)
        return times - median[None, :]


def _no_rank(trace: Trace) -> int:
    """The rank of what says none in `trace`: the trace's own (distributedInfo), else -1."""
    return -1 if trace.rank is None else trace.rank


def _lane_ranks(trace: Trace) -> np.ndarray:
    """Each lane's rank (int64; `_no_rank` for a lane of no rank)."""
    if None in trace.lane_rank_set and len(trace.lane_rank_set) == 1:
        return np.full(len(trace.lanes), _no_rank(trace), dtype=np.int64)
    return np.array([_no_rank(trace) if ln.rank is None else ln.rank for ln in trace.lanes], dtype=np.int64)


def _busy(trace: Trace, rows: np.ndarray, n: int) -> tuple[np.ndarray, list[str]]:
    """Per row: the union of its chosen lanes' events over its span (GPU lanes where it has some)."""
    lane_row = rows
    gpu = trace.lane_kind_codes == KIND_ORDER.index("gpu")
    counts = np.diff(trace.lane_offsets)
    has_gpu = np.zeros(n, dtype=bool)
    np.logical_or.at(has_gpu, lane_row[(lane_row >= 0) & gpu & (counts > 0)], True)
    ev_row = lane_row[trace.lane]
    ok = ev_row >= 0
    start, end = trace.start_ns, trace.end_ns
    # Each lane's span (a lane's events are in start order), then each row's over its lanes.
    full = np.flatnonzero(counts > 0)
    firsts = trace.lane_offsets[full]
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    mine = lane_row[full] >= 0
    if firsts.size:
        np.minimum.at(lo, lane_row[full][mine], start[firsts][mine])
        np.maximum.at(hi, lane_row[full][mine], np.maximum.reduceat(end, firsts)[mine])
    chosen = ok & (gpu[trace.lane] == has_gpu[np.maximum(ev_row, 0)])
    r, s, e = ev_row[chosen], start[chosen], end[chosen]
    busy = np.zeros(n, dtype=np.float64)
    if r.size:
        order = np.lexsort((s, r))
        # Each row's busy runs as a lane's are merged: safe on any clock (epoch nanoseconds of
        # 32 ranks lifted row by row overflowed int64, issue 35).
        run_row, run_start, run_end = merged_runs_by_lane(r[order], s[order], e[order])
        covered = np.zeros(n, dtype=np.int64)
        np.add.at(covered, run_row, run_end - run_start)
        span = hi - lo
        busy = np.where(span > 0, covered / np.where(span > 0, span, 1), 0.0)
    return busy, ["GPU" if g else "CPU" for g in has_gpu.tolist()]


def _step_order(label: str) -> tuple[int, str]:
    """Steps in order of the number that ends their label (`step 3`, `ProfilerStep#3`), then by label."""
    m = _NUMBER.search(label)
    return (int(m.group(1)) if m else -1, label)


def _step_matrix(trace: Trace, lane_row: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
    steps = step_events(trace)
    rows = lane_row[trace.lane[steps]] if steps.size else np.zeros(0, dtype=np.int64)
    steps, rows = steps[rows >= 0], rows[rows >= 0]
    if steps.size == 0:
        return [], np.full((n, 0), -1, dtype=np.int64)
    names = trace.name_id[steps]
    used = np.unique(names)
    order = sorted(range(used.size), key=lambda k: _step_order(trace.names[int(used[k])]))
    column_of = np.empty(used.size, dtype=np.int64)
    column_of[np.array(order, dtype=np.int64)] = np.arange(used.size)
    cols = column_of[np.searchsorted(used, names)]
    matrix = np.full((n, used.size), -1, dtype=np.int64)
    np.maximum.at(matrix, (rows, cols), trace.dur_ns[steps])
    return [trace.names[int(used[k])] for k in order], matrix


def _lane_rows(trace: Trace, ranks: np.ndarray) -> np.ndarray:
    """Each lane's row in `ranks` (ascending): -1 for a lane without events or of another rank."""
    lane_rank = _lane_ranks(trace)
    counts = np.diff(trace.lane_offsets)
    n = int(ranks.size)
    lane_row = np.searchsorted(ranks, lane_rank) if n else np.full(lane_rank.size, -1)
    lane_row = np.where((lane_row < n) & (counts > 0), lane_row, -1)
    if n:
        lane_row = np.where(ranks[np.minimum(lane_row, n - 1)] == lane_rank, lane_row, -1)
    return lane_row


def _first_lanes(lane_row: np.ndarray, n: int) -> np.ndarray:
    """Each row's first lane (`_lane_rows`), -1 for a row without one."""
    first_lane = np.full(n, -1, dtype=np.int64)
    for lane in np.flatnonzero(lane_row >= 0)[::-1].tolist():
        first_lane[lane_row[lane]] = lane
    return first_lane


def with_lanes(figures: RankFigures, trace: Trace) -> RankFigures:
    """`figures` with each rank's `first_lane` in `trace`, which holds some of its ranks' events
    (`rank_job`: the ranks in view); -1 for the others."""
    rows = _lane_rows(trace, np.array(figures.ranks, dtype=np.int64))
    return replace(figures, first_lane=_first_lanes(rows, len(figures.ranks)))


def rank_figures(trace: Trace) -> RankFigures:
    """The figures of every rank of `trace` (see the module docstring)."""
    lane_rank = _lane_ranks(trace)
    counts = np.diff(trace.lane_offsets)
    # The ranks with events, and those with memory only (allocator snapshots); -1: no rank.
    memory_ranks = [_no_rank(trace) if m.rank is None else m.rank for m in trace.memory]
    ranks_arr = np.unique(np.concatenate([lane_rank[counts > 0], np.array(memory_ranks, dtype=np.int64)]))
    n = int(ranks_arr.size)
    lane_row = _lane_rows(trace, ranks_arr)
    # A trace of one process without distributedInfo: rank -1.
    ranks = [int(r) for r in ranks_arr.tolist()]
    first_lane = _first_lanes(lane_row, n)
    steps, matrix = _step_matrix(trace, lane_row, n)
    busy, busy_of = _busy(trace, lane_row, n) if n else (np.zeros(0), [])
    peaks: list[dict[str, int]] = [{} for _ in range(n)]
    row_of = {r: k for k, r in enumerate(ranks_arr.tolist())}
    for m, r in zip(trace.memory, memory_ranks):
        k = 0 if n == 1 else row_of[r]
        device = m.device.split("/", 1)[1] if m.device.startswith("rank") and "/" in m.device else m.device
        peaks[k][device] = max(peaks[k].get(device, 0), m.peak_bytes)
    memory_peak = np.array([max(p.values()) if p else -1 for p in peaks], dtype=np.int64)
    hosts_of = rank_hosts(trace)
    figures = RankFigures(
        ranks=ranks, hosts=[hosts_of.get(r) for r in ranks], steps=steps, step_ns=matrix, busy=busy,
        busy_of=busy_of, memory_peak=memory_peak, peaks=peaks, first_lane=first_lane,
    )  # fmt: skip
    return RankFigures(**{**figures.__dict__, "stragglers": _stragglers(figures), "heaviest": _heaviest(figures)})


def join_figures(parts: list[RankFigures]) -> RankFigures:
    """The figures of a job from its ranks' own (`rank_figures` of each rank's trace, one rank
    each, its rank set): steps matched by their label as `rank_figures` matches them on a merged
    trace, then the stragglers and the heaviest rank over all of them. `first_lane` is -1: no
    merged trace holds these lanes (`with_lanes` reads them from the ranks loaded)."""
    for p in parts:
        if len(p.ranks) != 1:
            raise ValueError("join_figures takes one rank's figures each")
    parts = sorted(parts, key=lambda p: p.ranks[0])
    labels = sorted({s for p in parts for s in p.steps}, key=_step_order)
    column = {s: k for k, s in enumerate(labels)}
    matrix = np.full((len(parts), len(labels)), -1, dtype=np.int64)
    for row, p in enumerate(parts):
        if p.steps:
            matrix[row, [column[s] for s in p.steps]] = p.step_ns[0]
    figures = RankFigures(
        ranks=[p.ranks[0] for p in parts], hosts=[p.hosts[0] for p in parts], steps=labels, step_ns=matrix,
        busy=np.array([float(p.busy[0]) for p in parts], dtype=np.float64),
        busy_of=[p.busy_of[0] for p in parts],
        memory_peak=np.array([int(p.memory_peak[0]) for p in parts], dtype=np.int64),
        peaks=[dict(p.peaks[0]) for p in parts], first_lane=np.full(len(parts), -1, dtype=np.int64),
    )  # fmt: skip
    return RankFigures(**{**figures.__dict__, "stragglers": _stragglers(figures), "heaviest": _heaviest(figures)})


def _stragglers(f: RankFigures) -> list[Straggler]:
    """Per step that at least two ranks ran: the slowest (the lowest rank among equals) and its excess."""
    out = []
    for k, label in enumerate(f.steps):
        col = f.step_ns[:, k]
        have = np.flatnonzero(col >= 0)
        if have.size < 2:
            continue
        slow = int(have[np.argmax(col[have])])
        median = float(np.median(col[have]))
        out.append(Straggler(label, f.ranks[slow], int(col[slow]), median, float(col[slow]) - median))
    return out


def _heaviest(f: RankFigures) -> HeavyRank | None:
    have = np.flatnonzero(f.memory_peak >= 0)
    if have.size < 2:
        return None
    k = int(have[np.argmax(f.memory_peak[have])])
    median = float(np.median(f.memory_peak[have]))
    peak = int(f.memory_peak[k])
    device = max(f.peaks[k], key=lambda d: f.peaks[k][d])
    return HeavyRank(f.ranks[k], device, peak, median, float(peak) - median)


def worst_straggler(f: RankFigures) -> Straggler | None:
    """The straggler of the most excess over its step's median (None where no rank is slower)."""
    over = [s for s in f.stragglers if s.excess_ns > 0]  # a step of equal ranks has none
    return max(over, key=lambda s: s.excess_ns) if over else None


def most_often_slowest(f: RankFigures) -> tuple[int, int] | None:
    """(rank, steps) of the rank slowest in the most steps (the lowest among equals), None where none is slower."""
    slowest: dict[int, int] = {}
    for s in f.stragglers:
        if s.excess_ns > 0:
            slowest[s.rank] = slowest.get(s.rank, 0) + 1
    if not slowest:
        return None
    rank = max(slowest, key=lambda r: (slowest[r], -r))
    return rank, slowest[rank]


def straggler_line(f: RankFigures) -> str | None:
    """One line on the stragglers and the heaviest rank for a table's foot; None for one rank."""
    if len(f.ranks) < 2:
        return None
    parts = []
    worst, often = worst_straggler(f), most_often_slowest(f)
    if worst is not None and often is not None:
        parts.append(
            f"stragglers: rank {often[0]} slowest in {often[1]} of {len(f.stragglers)} steps; worst {worst.step} "
            f"on rank {worst.rank}, {worst.step_ns / 1e6:.3f} ms, {worst.excess_ns / 1e6:+.3f} ms over the median"
        )
    if f.heaviest is not None:
        h = f.heaviest
        parts.append(f"heaviest memory: rank {h.rank} ({h.device}), {h.excess_bytes / 2**20:+.1f} MiB over the median peak")
    return "; ".join(parts) or None


def figures_json(f: RankFigures, *, memory_only: bool = False) -> dict[str, Any]:
    """`inspect --json`'s per-rank keys (`memory_only`: `memory --json`'s, its peaks and heaviest rank)."""
    heavy = None if f.heaviest is None else {
        "rank": f.heaviest.rank, "device": f.heaviest.device, "peak_bytes": f.heaviest.peak_bytes,
        "median_bytes": f.heaviest.median_bytes, "excess_bytes": f.heaviest.excess_bytes,
    }  # fmt: skip
    rows = []
    for k, rank in enumerate(f.ranks):
        row: dict[str, Any] = {"rank": rank, "host": f.hosts[k]}
        if not memory_only:
            row["steps_us"] = [None if t < 0 else t / 1000.0 for t in f.step_ns[k].tolist()]
            row["busy"] = float(f.busy[k])
            row["busy_of"] = f.busy_of[k]
        row["memory_peak_bytes"] = None if f.memory_peak[k] < 0 else int(f.memory_peak[k])
        row["memory_peaks"] = dict(f.peaks[k])
        rows.append(row)
    if memory_only:
        return {"ranks": rows, "heaviest_memory_rank": heavy}
    return {
        "rank_steps": {"steps": list(f.steps), "ranks": rows},
        "stragglers": [
            {"step": s.step, "rank": s.rank, "step_us": s.step_ns / 1000.0, "median_us": s.median_ns / 1000.0,
             "excess_us": s.excess_ns / 1000.0}
            for s in f.stragglers
        ],  # fmt: skip
        "heaviest_memory_rank": heavy,
        "straggler_line": straggler_line(f),
    }
