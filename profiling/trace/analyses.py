"""Analyses over a `Trace`: busy time, inter-op pool occupancy, parallelism, memory, branches.

All are vectorised over the event columns (a lane's events are contiguous and start-sorted), so
they stay cheap on traces of millions of events. None of them imports Qt or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.model import CounterTrack, Trace
from branchscope.profiling.trace.run_info import CPU_SAMPLE_CATEGORY, branch_name


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


def lane_busy_runs(trace: Trace, lane_index: int) -> tuple[np.ndarray, np.ndarray]:
    sl = trace.lane_slice(lane_index)
    return merged_intervals(trace.start_ns[sl], trace.end_ns[sl])


def lane_busy_ns(trace: Trace) -> np.ndarray:
    """Busy time of every lane: the union of its events' intervals (nesting counted once)."""
    busy = np.zeros(len(trace.lanes), dtype=np.int64)
    for ln in trace.lanes:
        starts, ends = lane_busy_runs(trace, ln.index)
        busy[ln.index] = int((ends - starts).sum())
    return busy


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
    """The configured pool size when the trace is one of our runs, else the pool lanes seen."""
    info = trace.run_info
    if info is not None and info.interop is not None:
        return info.interop
    return len(trace.lanes_of("cpu", "interop"))


def interop_occupancy(trace: Trace) -> StepSeries:
    """Busy inter-op pool threads over time, against the pool's size."""
    pool = trace.lanes_of("cpu", "interop")
    return concurrency([lane_busy_runs(trace, ln.index) for ln in pool], interop_pool_size(trace))


def parallelism(trace: Trace) -> float:
    """Busy time summed over all lanes divided by the span: 1.0 means one lane busy on average."""
    start, end = trace.span()
    if end <= start:
        return 0.0
    return float(lane_busy_ns(trace).sum()) / float(end - start)


def device_type_of(device: str) -> str:
    """'cuda:1' -> 'cuda'; merged ranks name devices 'rank1/cuda:1'."""
    return device.rsplit("/", 1)[-1].split(":")[0]


def memory_imbalance(trace: Trace, device_type: str = "cuda") -> float | None:
    """Max peak / mean peak across the devices of one type (1.0 = balanced); None without any."""
    peaks = [m.peak_bytes for m in trace.memory if device_type_of(m.device) == device_type]
    if not peaks or max(peaks) <= 0:
        return None
    return float(max(peaks)) / float(np.mean(peaks))


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
        gpu_lane = np.array([ln.kind == "gpu" for ln in trace.lanes], dtype=bool)
        to_gpu = gpu_lane[trace.lane[dst]]
        event_branch[dst[to_gpu]] = event_branch[src[to_gpu]]
    return BranchAssignment(names, event_branch)


def cpu_sample_tracks(trace: Trace, key: str = "cpu_pct") -> list[CounterTrack]:
    """The runner's samples per OS thread (OpenMP workers included), in % of one core: CPU use
    (`cpu_pct`), or time runnable but waiting for a core (`wait_pct`)."""
    return [c for c in trace.counters if c.cat == CPU_SAMPLE_CATEGORY and c.key == key]
