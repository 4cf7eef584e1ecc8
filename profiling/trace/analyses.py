"""Analyses over a `Trace`: busy time, inter-op pool occupancy, parallelism, memory, branches, and
threads mode's wait for the GIL (`gil_wait`).

*Busy* (`lane_busy_ns`) is any event on a lane, annotations included. *Computing*
(`lane_compute_runs`) is what parallelism and the pool's occupancy count: a thread computes while it
runs an operator (a name with "::", like aten::mm) or a CUDA runtime call, except while it waits
(aten::wait, prim::wait, cuda*Synchronize). User annotations ("step N", "branch: X"), Python
frames and a TorchScript method call (the "forward" of a forked plan, inside which the main thread
only waits for its forks) are not work themselves, only what runs inside them.

All are vectorised over the event columns (a lane's events are contiguous and start-sorted), so
they stay cheap on traces of millions of events, and across lanes too (`merged_runs_by_lane`,
`compute_runs_by_lane`): a trace can hold a million threads of one event each. None of them
imports Qt or torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.mode_traits import run_traits
from branchscope.profiling.trace.model import KIND_ORDER, CounterTrack, Trace
from branchscope.profiling.trace.run_info import CPU_SAMPLE_CATEGORY, branch_name

#: Operators during which a thread waits for others (a forked future, the GPU), not computes.
WAIT_OPS = frozenset({"aten::wait", "prim::wait", "aten::_wait"})
#: Categories of CUDA runtime and driver calls, made on CPU threads.
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
#: "step N", as the worker labels each profiled step (run_info.step_label).
_STEP = re.compile(r"step \d+")


@dataclass(frozen=True, slots=True)
class StepSeries:
    """A piecewise-constant series: `value[i]` holds from `t_ns[i]` until `t_ns[i + 1]`."""

    t_ns: np.ndarray  # int64, sorted
    value: np.ndarray  # int64 or float64
    capacity: int  # the ceiling worth drawing as a line (e.g. the pool's size)

    def at(self, t_ns: int) -> float:
        k = int(np.searchsorted(self.t_ns, t_ns, side="right")) - 1
        return float(self.value[k]) if k >= 0 else 0.0


@dataclass(frozen=True, slots=True)
class BranchAssignment:
    """Which branch each event ran for: `event_branch[i]` indexes `names`, or -1 for none."""

    names: list[str]
    event_branch: np.ndarray  # int32 per event


def merged_intervals(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals given sorted by start: the (starts, ends) of the disjoint busy runs."""
    if start_ns.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    reach = np.maximum.accumulate(end_ns)
    # A new run starts where an interval begins after everything before it has ended.
    new_run = np.empty(start_ns.size, dtype=bool)
    new_run[0] = True
    new_run[1:] = start_ns[1:] > reach[:-1]
    run_starts = start_ns[new_run]
    last_of_run = np.flatnonzero(np.append(new_run[1:], True))
    run_ends = reach[last_of_run]
    return run_starts, run_ends


def _running_max_by_lane(start: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """`np.maximum.accumulate(end)` restarted at every lane, of intervals sorted by (lane, start):
    `first` marks each lane's first interval.

    Each lane's ends, taken from its first start, are lifted above every earlier lane's (lane k by
    k times the widest lane), so that one running max over all lanes never carries one lane's reach
    into the next. Where that would overflow int64 (spans of centuries), the ends' ranks are lifted
    instead of the ends themselves."""
    seg = np.cumsum(first) - 1
    base = start[first][seg]
    rel = end - base  # >= 0: an interval ends at or after its start, which is at or after the lane's first
    width = int(rel.max()) + 1
    n_seg = int(seg[-1]) + 1
    if n_seg * width < 1 << 62 and int(rel.min()) >= 0:
        lift = seg * width
        return np.maximum.accumulate(lift + rel) - lift + base
    values, rank = np.unique(end, return_inverse=True)
    lift = seg * values.size
    return values[np.maximum.accumulate(lift + rank.reshape(-1)) - lift]


def merged_runs_by_lane(
    lane: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`merged_intervals` of every lane at once, from intervals sorted by (lane, start): the
    (lane, start, end) of each lane's disjoint busy runs, sorted by lane then start."""
    if start_ns.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=lane.dtype), empty, empty
    first = np.empty(start_ns.size, dtype=bool)
    first[0] = True
    np.not_equal(lane[1:], lane[:-1], out=first[1:])
    reach = _running_max_by_lane(start_ns, end_ns, first)
    new_run = first.copy()
    new_run[1:] |= start_ns[1:] > reach[:-1]
    last_of_run = np.flatnonzero(np.append(new_run[1:], True))
    return lane[new_run], start_ns[new_run], reach[last_of_run]


def _sum_by_lane(run_lane: np.ndarray, values: np.ndarray, n_lanes: int) -> np.ndarray:
    """Per lane (int64), the sum of `values` over its runs; `run_lane` is sorted."""
    out = np.zeros(n_lanes, dtype=np.int64)
    if run_lane.size:
        firsts = np.flatnonzero(np.append(True, run_lane[1:] != run_lane[:-1]))
        out[run_lane[firsts]] = np.add.reduceat(values, firsts)
    return out


def lane_busy_ns(trace: Trace) -> np.ndarray:
    """Busy time of every lane: the union of its events' intervals (nesting counted once)."""
    run_lane, starts, ends = merged_runs_by_lane(trace.lane, trace.start_ns, trace.end_ns)
    return _sum_by_lane(run_lane, ends - starts, len(trace.lanes))


def concurrency(runs: list[tuple[np.ndarray, np.ndarray]], capacity: int) -> StepSeries:
    """How many of the given lanes are busy at each instant, from each lane's disjoint busy runs."""
    busy = [(s, e) for s, e in runs if s.size]
    if not busy:
        return StepSeries(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), capacity)
    run_starts = np.concatenate([s for s, _ in busy])
    run_ends = np.concatenate([e for _, e in busy])
    t = np.concatenate([run_starts, run_ends])
    delta = np.concatenate([np.ones(run_starts.size, np.int64), -np.ones(run_ends.size, np.int64)])
    # At equal times apply ends before starts, so back-to-back work does not count twice.
    order = np.lexsort((delta, t))
    t, level = t[order], np.cumsum(delta[order])
    # Keep the last level at each distinct time.
    keep = np.append(t[1:] != t[:-1], True)
    return StepSeries(t[keep], level[keep], capacity)


def interop_pool_size(trace: Trace) -> int:
    """The pool's size: in a run of ours the pool threads it started (none when nothing forked, as
    in a sequential run), else the configured size, else the pool lanes seen."""
    info = trace.run_info
    if info is not None and info.thread_roles_known:
        return len(info.interop_tids)
    if info is not None and info.interop is not None:
        return info.interop
    return len(trace.lanes_of("cpu", "interop"))


def interop_occupancy(trace: Trace) -> StepSeries:
    """How many inter-op pool threads compute at each instant (see the module docstring), against the pool's size."""
    _, starts, ends = compute_runs_by_lane(trace, trace.lane_indices("cpu", "interop"))
    # Only the runs' times matter to `concurrency`, not which lane each is of.
    return concurrency([(starts, ends)], interop_pool_size(trace))


def _is_wait(name: str) -> bool:
    return name in WAIT_OPS or "Synchronize" in name


def _work_and_wait_events(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per event: whether it is work (an operator or a runtime call) and whether it is a wait."""
    wait_name = np.fromiter((_is_wait(n) for n in trace.names), dtype=bool, count=len(trace.names))
    op_name = np.fromiter(("::" in n for n in trace.names), dtype=bool, count=len(trace.names))
    runtime_cat = np.fromiter((c in RUNTIME_CATS for c in trace.cats), dtype=bool, count=len(trace.cats))
    wait = wait_name[trace.name_id]
    work = (op_name[trace.name_id] | runtime_cat[trace.cat_id]) & ~wait
    return work, wait


def subtract_intervals(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the disjoint sorted runs `a` outside the disjoint sorted runs `b`."""
    if a_start.size == 0 or b_start.size == 0:
        return a_start, a_end
    t = np.concatenate([a_start, a_end, b_start, b_end])
    da = np.concatenate([np.ones(a_start.size), -np.ones(a_end.size), np.zeros(2 * b_start.size)])
    db = np.concatenate([np.zeros(2 * a_start.size), np.ones(b_start.size), -np.ones(b_end.size)])
    times, inverse = np.unique(t, return_inverse=True)
    a_level = np.cumsum(np.bincount(inverse, weights=da, minlength=times.size))
    b_level = np.cumsum(np.bincount(inverse, weights=db, minlength=times.size))
    inside = (a_level[:-1] > 0.5) & (b_level[:-1] < 0.5)
    starts, ends = times[:-1][inside], times[1:][inside]
    # Pieces that touch (a wait's end inside one run) become one run again.
    return merged_intervals(starts.astype(np.int64), ends.astype(np.int64))


def lane_compute_runs(
    trace: Trace, lane_index: int, masks: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint runs in which a lane computes (see the module docstring): the union of its work
    events minus the union of its waits. `masks`: `_work_and_wait_events(trace)`, when already made."""
    work, wait = masks if masks is not None else _work_and_wait_events(trace)
    sl = trace.lane_slice(lane_index)
    starts, ends = trace.start_ns[sl], trace.end_ns[sl]
    w, x = work[sl], wait[sl]
    runs = merged_intervals(starts[w], ends[w])
    return subtract_intervals(*runs, *merged_intervals(starts[x], ends[x]))


def compute_runs_by_lane(trace: Trace, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`lane_compute_runs` of the lanes `lanes` (indices) at once: the (lane, start, end) of each
    run, sorted by lane then start; the same runs, without a Python step per lane."""
    work, wait = _work_and_wait_events(trace)
    chosen = np.zeros(len(trace.lanes), dtype=bool)
    chosen[lanes] = True
    on = chosen[trace.lane]
    lane, start, end = trace.lane, trace.start_ns, trace.end_ns
    w, x = np.flatnonzero(on & work), np.flatnonzero(on & wait)
    a_lane, a_start, a_end = merged_runs_by_lane(lane[w], start[w], end[w])
    b_lane, b_start, b_end = merged_runs_by_lane(lane[x], start[x], end[x])
    if b_lane.size == 0 or a_lane.size == 0:
        return a_lane, a_start, a_end
    # Lanes without a wait keep their work runs as they are (zero-length ones included, as
    # `subtract_intervals` leaves them); the others lose what their waits cover.
    waits = np.zeros(len(trace.lanes), dtype=bool)
    waits[b_lane] = True
    keep = ~waits[a_lane]
    cut = ~keep
    has_work = np.zeros(len(trace.lanes), dtype=bool)
    has_work[a_lane] = True
    used = has_work[b_lane]
    c_lane, c_start, c_end = _subtract_by_lane(
        (a_lane[cut], a_start[cut], a_end[cut]), (b_lane[used], b_start[used], b_end[used])
    )
    run_lane = np.concatenate([a_lane[keep], c_lane])
    order = np.argsort(run_lane, kind="stable")  # each part is sorted by (lane, start)
    return (
        run_lane[order],
        np.concatenate([a_start[keep], c_start])[order],
        np.concatenate([a_end[keep], c_end])[order],
    )


def _subtract_by_lane(
    a: tuple[np.ndarray, np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`subtract_intervals` lane by lane, all lanes at once: (lane, start, end) runs of `a` minus
    those of `b` (each disjoint and sorted within a lane), as maximal runs sorted by lane and start.

    One sweep over every boundary sorted by (lane, time): each lane's counts come back to 0 at its
    last boundary, so a single running sum over all lanes is every lane's own."""
    a_lane, a_start, a_end = a
    b_lane, b_start, b_end = b
    n_a, n_b = a_lane.size, b_lane.size
    if n_a == 0 or n_b == 0:
        return a
    lane = np.concatenate([a_lane, a_lane, b_lane, b_lane]).astype(np.int64)
    t = np.concatenate([a_start, a_end, b_start, b_end])
    da = np.concatenate([np.ones(n_a, np.int64), -np.ones(n_a, np.int64), np.zeros(2 * n_b, np.int64)])
    db = np.concatenate([np.zeros(2 * n_a, np.int64), np.ones(n_b, np.int64), -np.ones(n_b, np.int64)])
    order = np.lexsort((t, lane))
    lane, t = lane[order], t[order]
    distinct = np.flatnonzero(np.append(True, (lane[1:] != lane[:-1]) | (t[1:] != t[:-1])))
    a_level = np.cumsum(np.add.reduceat(da[order], distinct))
    b_level = np.cumsum(np.add.reduceat(db[order], distinct))
    lane, t = lane[distinct], t[distinct]
    # A piece runs from one boundary to the next; at a lane's last boundary both counts are 0.
    inside = np.flatnonzero((a_level[:-1] > 0) & (b_level[:-1] == 0))
    p_lane, p_start, p_end = lane[inside].astype(a_lane.dtype), t[inside], t[inside + 1]
    if p_start.size == 0:
        return p_lane, p_start, p_end
    # Pieces that touch (a wait's end inside one run) become one run again.
    new_run = np.ones(p_start.size, dtype=bool)
    new_run[1:] = (p_lane[1:] != p_lane[:-1]) | (p_start[1:] != p_end[:-1])
    last_of_run = np.flatnonzero(np.append(new_run[1:], True))
    return p_lane[new_run], p_start[new_run], p_end[last_of_run]


def _clipped_total_by_lane(run_lane: np.ndarray, starts: np.ndarray, ends: np.ndarray, window: tuple[int, int]) -> int:
    """The time inside `window` of all the runs, exactly (a Python int): the sum of every lane's own."""
    lo, hi = window
    clipped = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)
    if clipped.size * (int(hi) - int(lo)) < 1 << 63:  # no sum can overflow int64
        return int(clipped.sum())
    # Each lane's runs are disjoint, so its own sum stays within the window: add those as Python ints.
    return sum(_sum_by_lane(run_lane, clipped, int(run_lane.max()) + 1).tolist())


def steps_window(trace: Trace) -> tuple[int, int] | None:
    """From the first profiled step's start to the last one's end (ns); None without "step N" events."""
    step_names = [i for i, n in enumerate(trace.names) if _STEP.fullmatch(n)]
    if not step_names or len(trace) == 0:
        return None
    steps = np.flatnonzero(np.isin(trace.name_id, step_names))
    if steps.size == 0:
        return None
    return int(trace.start_ns[steps].min()), int(trace.end_ns[steps].max())


def first_step_start(trace: Trace) -> int | None:
    """When the first profiled step starts (ns); None without "step N" events."""
    window = steps_window(trace)
    return window[0] if window is not None else None


def _window(trace: Trace, window: tuple[int, int] | None) -> tuple[int, int]:
    """The window asked for, else the steps' window, else the trace's span."""
    if window is not None:
        return window
    return steps_window(trace) or trace.span()


def parallelism(trace: Trace, window: tuple[int, int] | None = None) -> float:
    """How many CPU threads compute at once on average over `window` (default: the profiled steps,
    else the whole trace): their computing time (see the module docstring) ÷ the window's length."""
    lo, hi = _window(trace, window)
    if hi <= lo:
        return 0.0
    busy = _clipped_total_by_lane(*compute_runs_by_lane(trace, trace.lane_indices("cpu")), (lo, hi))
    return float(busy) / float(hi - lo)


def cores_used(trace: Trace, window: tuple[int, int] | None = None) -> float | None:
    """Cores in use on average over `window` (default as `parallelism`), from the runner's CPU
    samples: the CPU time of every sampled thread (OpenMP workers included) ÷ the window's length.
    None when the trace has no samples. Each sample covers the time since the one before it on its
    thread (a thread's first sample: one median interval)."""
    tracks = [t for t in cpu_sample_tracks(trace) if t.ts_ns.size]
    if not tracks:
        return None
    lo, hi = _window(trace, window)
    if hi <= lo:
        return 0.0
    cpu_ns = 0.0
    for track in tracks:
        ends = track.ts_ns.astype(np.int64)
        gaps = np.diff(ends)
        first = int(np.median(gaps)) if gaps.size else 0
        starts = np.concatenate([[ends[0] - first], ends[:-1]])
        overlap = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)
        cpu_ns += float((overlap * (np.asarray(track.values, dtype=np.float64) / 100.0)).sum())
    return cpu_ns / float(hi - lo)


def pool_busy_share(trace: Trace, window: tuple[int, int] | None = None) -> float | None:
    """The share of the inter-op pool's capacity spent computing over `window` (default as
    `parallelism`): its threads' computing time ÷ (pool size × the window's length), 0 to 1. None
    without a pool (a run of ours where nothing forked, a trace without pool threads)."""
    size = interop_pool_size(trace)
    lo, hi = _window(trace, window)
    if size <= 0 or hi <= lo:
        return None
    pool = trace.lane_indices("cpu", "interop")
    busy = _clipped_total_by_lane(*compute_runs_by_lane(trace, pool), (lo, hi))
    return float(busy) / (float(size) * float(hi - lo))


def device_type_of(device: str) -> str:
    """'cuda:1' -> 'cuda'; merged ranks name devices 'rank1/cuda:1'."""
    return device.rsplit("/", 1)[-1].split(":")[0]


def memory_imbalance(trace: Trace, device_type: str = "cuda") -> float | None:
    """The heaviest peak across the devices of one type over the lightest for two devices (the median
    of two is their mean: 5x read 1.67x), over the median peak for more (1.0 = balanced; as
    `memory.Imbalance.ratio` counts it); None without any, or when that peak is 0."""
    peaks = [m.peak_bytes for m in trace.memory if device_type_of(m.device) == device_type]
    reference = float(min(peaks)) if len(peaks) == 2 else float(np.median(peaks)) if peaks else 0.0
    if reference <= 0:
        return None
    return float(max(peaks)) / reference


def branch_assignment(trace: Trace) -> BranchAssignment:
    """Give every event the branch whose `branch: NAME` annotation encloses it on its lane.

    Forked branches run on pool threads with their annotation on the same thread, so enclosure by
    time and depth on one lane is exact. GPU work gets the branch of the CPU op that launched it,
    through the trace's launch flows.
    """
    n = len(trace)
    event_branch = np.full(n, -1, dtype=np.int32)
    labelled = [(i, branch_name(label)) for i, label in enumerate(trace.names)]
    branch_name_ids = [i for i, name in labelled if name is not None]
    if not branch_name_ids:
        return BranchAssignment([], event_branch)
    # Labels are ASCII in traces ("a -> b": TorchScript drops other labels); names show the arrow.
    names = [str(labelled[i][1]) for i in branch_name_ids]
    branch_of_name = np.full(len(trace.names), -1, dtype=np.int32)
    branch_of_name[branch_name_ids] = np.arange(len(branch_name_ids), dtype=np.int32)
    annotations = np.flatnonzero(branch_of_name[trace.name_id] >= 0)
    # Outer annotations first so that a nested branch (a region inside a branch) overrides.
    annotations = annotations[np.argsort(trace.depth[annotations], kind="stable")]
    for a in annotations.tolist():
        sl = trace.lane_slice(int(trace.lane[a]))
        starts = trace.start_ns[sl]
        lo = int(np.searchsorted(starts, trace.start_ns[a], side="left"))
        hi = int(np.searchsorted(starts, trace.end_ns[a], side="left"))
        idx = np.arange(sl.start + lo, sl.start + hi)
        inside = idx[(trace.end_ns[idx] <= trace.end_ns[a]) & (trace.depth[idx] >= trace.depth[a])]
        event_branch[inside] = branch_of_name[trace.name_id[a]]
    flows = trace.flows
    if len(flows):
        ok = (flows.src >= 0) & (flows.dst >= 0)
        src, dst = flows.src[ok], flows.dst[ok]
        gpu_lane = trace.lane_kind_codes == KIND_ORDER.index("gpu")
        to_gpu = gpu_lane[trace.lane[dst]]
        event_branch[dst[to_gpu]] = event_branch[src[to_gpu]]
    return BranchAssignment(names, event_branch)


def cpu_sample_tracks(trace: Trace, key: str = "cpu_pct") -> list[CounterTrack]:
    """The runner's samples per OS thread (OpenMP workers included), in % of one core: CPU use
    (`cpu_pct`), or time runnable but waiting for a core (`wait_pct`)."""
    return [c for c in trace.counters if c.cat == CPU_SAMPLE_CATEGORY and c.key == key]


@dataclass(frozen=True, slots=True)
class GilWait:
    """One branch thread of a threads-mode run (an `interop_tids` thread) waiting for the GIL over
    time: `series.value[i]` is the share of the sample interval from `series.t_ns[i]` to
    `series.t_ns[i + 1]` it spent waiting for the GIL (0 to 1; the last value is 0)."""

    pid: int
    tid: int
    name: str
    series: StepSeries

    @property
    def total_ns(self) -> float:
        """The thread's time waiting for the GIL, over the whole trace (ns)."""
        t, v = self.series.t_ns, self.series.value
        return float((np.diff(t).astype(np.float64) * v[:-1]).sum()) if t.size > 1 else 0.0


def _covered_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each instant of `t`, how much of the disjoint sorted runs (`starts`, `ends`) lies
    before it (ns, float64)."""
    if starts.size == 0:
        return np.zeros(t.size)
    done = np.concatenate([[0.0], np.cumsum((ends - starts).astype(np.float64))])
    k = np.searchsorted(starts, t, side="right")  # runs started at or before t; all but the last are over
    last = np.maximum(k - 1, 0)
    partial = np.clip(np.minimum(t, ends[last]) - starts[last], 0, None).astype(np.float64)
    return np.where(k > 0, done[last] + partial, 0.0)


def gil_shows(trace: Trace) -> bool:
    """Whether the trace is of a run that measured its branch threads' wait for a GIL it had: its
    mode's traits say `gil_measured` and `gil` is not False (a free-threaded CPython without the GIL;
    a trace that does not say is taken to have had one, as every CPython before 3.13 does)."""
    info = trace.run_info
    return info is not None and run_traits(info).gil_measured and info.gil is not False


def gil_wait(trace: Trace) -> list[GilWait]:
    """Each branch thread's wait for the GIL over time, in a threads-mode run with the GIL on
    (`gil_shows`; else none), from the runner's CPU samples and the branch spans.

    Inside a `branch: NAME` event on a branch thread, the part of each sample interval the thread
    was neither on a core (`cpu_pct`) nor runnable waiting for one (`wait_pct`) it was asleep, which
    for a branch on a Python thread is waiting for the GIL. A sample interval partly inside branches
    counts only the sleep beyond the part outside them (where the thread sleeps on the pool's queue):
    asleep − outside share, clipped at 0 (with
    intra-op threads > 1 this also holds the thread's wait for its own OpenMP team, as run.json's
    `gil_wait_ms` does). Outside branch spans a pool thread waits for work, not the GIL: none. A
    sample covers the time since its thread's previous one (the first: one median interval). Threads
    in the order of `cpu_sample_tracks`; a branch thread without samples has no series."""
    if not gil_shows(trace):
        return []
    info = trace.run_info
    assert info is not None
    tids = set(info.interop_tids)
    waits = {(c.pid, c.tid): c for c in cpu_sample_tracks(trace, "wait_pct")}
    is_branch = np.fromiter((branch_name(n) is not None for n in trace.names), dtype=bool, count=len(trace.names))
    lanes = {(ln.pid, ln.tid): ln.index for ln in trace.lanes if ln.kind == "cpu"}
    out = []
    for track in cpu_sample_tracks(trace):
        if track.tid not in tids or track.ts_ns.size == 0:
            continue
        ends = track.ts_ns.astype(np.int64)
        gaps = np.diff(ends)
        first = int(np.median(gaps)) if gaps.size else 0
        starts = np.concatenate([[ends[0] - first], ends[:-1]])
        cpu = np.asarray(track.values, dtype=np.float64)
        wait = np.zeros(ends.size)
        w = waits.get((track.pid, track.tid))
        if w is not None and w.ts_ns.size:
            k = np.clip(np.searchsorted(w.ts_ns, ends), 0, w.ts_ns.size - 1)
            same = w.ts_ns[k] == ends
            wait[same] = np.asarray(w.values, dtype=np.float64)[k[same]]
        lane = lanes.get((track.pid, track.tid))
        if lane is None:
            b_start = b_end = np.zeros(0, dtype=np.int64)
        else:
            sl = trace.lane_slice(lane)
            mine = is_branch[trace.name_id[sl]]
            b_start, b_end = merged_intervals(trace.start_ns[sl][mine], trace.end_ns[sl][mine])
        inside = _covered_before(b_start, b_end, ends) - _covered_before(b_start, b_end, starts)
        length = (ends - starts).astype(np.float64)
        share = np.divide(inside, length, out=np.zeros(ends.size), where=length > 0)
        asleep = np.clip(100.0 - np.nan_to_num(cpu) - np.nan_to_num(wait), 0.0, 100.0) / 100.0
        # Outside its branches a pool thread sleeps on the queue of work: only the sleep beyond that
        # part of the interval was inside a branch.
        value = np.append(np.clip(asleep - (1.0 - share), 0.0, 1.0), 0.0)
        series = StepSeries(np.append(starts[:1], ends), value, capacity=1)
        out.append(GilWait(track.pid, track.tid, track.name, series))
    return out
