"""The gap explained: a fork or threads run's regions as measured in its trace, against what the
prediction (`prediction.py`) says they could take on its inter-op threads.

Per region and profiled step (its branches' `branch: NAME` annotations inside each `step N`):

- **measured**: from the region's start on the launching thread (the end of the last event there
  before the first branch starts: the main thread for a top-level region, the thread running the
  enclosing branch for a nested one; no such event: the step's or that branch's start) to the last
  branch's end;
- **predicted**: its branches' sequential times (`PredictionRecord.branch_ms`, nested regions by
  the prediction's rule) list-scheduled longest first on k threads;
- **start delay**: from the region's start to its first branch's start on a pool thread (the fork:
  handing the branch to the pool, a thread waking to take it);
- **stretch**: the branches' measured time over their sequential time (above 1: they ran slower side
  by side than alone: contention for cores or memory bandwidth, or the GIL);
- **idle**: the pool threads' time inside the region (min(k, branches) × from the first branch's
  start to the last one's end) not spent in a branch: uneven branches, a thread waiting for work.

The regions are measured in profiled steps, a fork or threads run's prediction without the profiler:
the run's profiler overhead is said beside them. Over the profiled steps: threads busy computing (`analyses.parallelism`) against cores the CPU
samples saw in use (`analyses.cores_used`): fewer cores than busy threads is contention for cores;
and, in threads mode, the branch threads' share of branch time spent waiting for the GIL (run.json
`branch_threads`, in the trace's run info). Means over the steps. Qt-free, torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from branchscope.profiling.trace.analyses import cores_used, parallelism
from branchscope.profiling.trace.mode_traits import run_traits
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.prediction import lpt_makespan
from branchscope.profiling.trace.ranges import step_events
from branchscope.profiling.trace.records import PredictionRecord
from branchscope.profiling.trace.run_info import branch_name


@dataclass(frozen=True)
class RegionGap:
    """One region of a run, measured against predicted (ms, means over `steps` steps)."""

    region: str
    region_name: str | None
    steps: int
    measured_ms: float
    predicted_ms: float
    start_delay_ms: float
    branch_ms: float
    sequential_ms: float
    idle_ms: float

    @property
    def stretch(self) -> float | None:
        """The branches' measured time ÷ their sequential time."""
        return self.branch_ms / self.sequential_ms if self.sequential_ms > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "region_name": self.region_name,
            "steps": self.steps,
            "measured_ms": round(self.measured_ms, 4),
            "predicted_ms": round(self.predicted_ms, 4),
            "start_delay_ms": round(self.start_delay_ms, 4),
            "branch_ms": round(self.branch_ms, 4),
            "sequential_ms": round(self.sequential_ms, 4),
            "stretch": None if self.stretch is None else round(self.stretch, 4),
            "idle_ms": round(self.idle_ms, 4),
        }


@dataclass(frozen=True)
class Gap:
    """A fork or threads run on `threads` inter-op threads: its regions measured against predicted,
    threads busy against cores used, and the GIL's share of branch time (threads mode)."""

    threads: int
    regions: tuple[RegionGap, ...]
    parallelism: float | None
    cores_used: float | None
    gil_wait_share: float | None
    #: The run's profiled median ÷ unprofiled median (run.json `profiler_overhead`): the regions are
    #: measured in profiled steps, the prediction's times without the profiler (fork, threads).
    profiler_overhead: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "regions": [r.to_json() for r in self.regions],
            "parallelism": None if self.parallelism is None else round(self.parallelism, 4),
            "cores_used": None if self.cores_used is None else round(self.cores_used, 4),
            "gil_wait_share": None if self.gil_wait_share is None else round(self.gil_wait_share, 4),
            "profiler_overhead": self.profiler_overhead,
            "text": self.text(),
        }

    def text(self) -> str:
        """One line: the region that lost most against its prediction, then contention and the GIL."""
        parts = []
        worst = max(self.regions, key=lambda r: r.measured_ms - r.predicted_ms, default=None)
        if worst is not None:
            name = f"region {worst.region}" + (f" ({worst.region_name})" if worst.region_name else "")
            said = (
                f"{name} took {worst.measured_ms:.2f} ms against {worst.predicted_ms:.2f} ms predicted on "
                f"{self.threads} threads: branches started {worst.start_delay_ms:.2f} ms after the fork"
            )
            if worst.stretch is not None:
                said += f", ran {worst.stretch:.2f}× their sequential time"
            said += f", pool threads idle {worst.idle_ms:.2f} ms"
            parts.append(said)
        if self.parallelism is not None and self.cores_used is not None:
            contention = " (contention)" if self.cores_used < 0.9 * self.parallelism else ""
            parts.append(f"{self.parallelism:.2f} threads busy on {self.cores_used:.2f} cores{contention}")
        if self.gil_wait_share is not None:
            parts.append(f"branch threads waited for the GIL {100 * self.gil_wait_share:.0f}% of their branch time")
        if self.profiler_overhead is not None and self.profiler_overhead > 1.05:
            parts.append(f"measured in profiled steps, ×{self.profiler_overhead:.2f} the unprofiled ones")
        return "; ".join(parts)


def _makespans(pred: PredictionRecord, parents: dict[str, str | None], regions: dict[str, list[str]], k: int) -> dict[str, float]:
    """Each region's predicted makespan on k threads (the prediction's nested rule) from its
    branches' sequential times."""
    ms = pred.branch_ms or {}
    nested: dict[str, list[str]] = {}
    for rid, parent in parents.items():
        if parent is not None:
            nested.setdefault(parent, []).append(rid)
    out: dict[str, float] = {}

    def on_k(name: str, depth: int) -> float:
        inner = nested.get(name, []) if depth < 32 else []
        own = max(0.0, ms.get(name, 0.0) - sum(ms.get(b, 0.0) for r in inner for b in regions[r]))
        return own + sum(span(r, depth + 1) for r in inner)

    def span(rid: str, depth: int) -> float:
        if rid not in out:
            out[rid] = lpt_makespan((on_k(b, depth) for b in regions[rid]), k)
        return out[rid]

    for rid in regions:
        span(rid, 0)
    return out


def explain_gap(
    trace: Trace, prediction: PredictionRecord | None = None, profiler_overhead: float | None = None
) -> Gap | None:
    """The gap of a fork or threads run (see the module docstring); `prediction`: its own, else the
    trace's run info's; `profiler_overhead`: run.json's, said beside it. None for a mode whose
    traits run no branch pool,
    fewer than 2 inter-op threads, no prediction with branch times, or no profiled steps with
    branches."""
    info = trace.run_info
    pred = prediction or (info.prediction if info is not None else None)
    traits = run_traits(info)
    if info is None or pred is None or not pred.branch_ms or not traits.branch_pool:
        return None
    k = info.interop or 0
    if k < 2 or not info.branches:
        return None
    regions: dict[str, list[str]] = {}
    parents: dict[str, str | None] = {}
    region_of: dict[str, str] = {}
    names_of_region: dict[str, str | None] = {}
    for b in info.branches:
        regions.setdefault(b.region, []).append(b.name)
        parents.setdefault(b.region, b.parent)
        names_of_region.setdefault(b.region, b.region_name)
        region_of[b.name] = b.region
    predicted = _makespans(pred, parents, regions, k)
    steps = step_events(trace)
    if steps.size == 0:
        return None
    step_lo, step_hi = trace.start_ns[steps], trace.end_ns[steps]
    # Branch annotations: (event, branch name).
    of_name = [branch_name(n) for n in trace.names]
    events = np.flatnonzero(np.fromiter((n is not None for n in of_name), dtype=bool, count=len(of_name))[trace.name_id]) if len(trace) else np.zeros(0, dtype=np.int64)
    main_lanes = [ln.index for ln in trace.lanes if ln.kind == "cpu" and ln.tid == info.main_tid]
    per_region: dict[str, list[tuple[float, float, float, float, float]]] = {}
    for s in range(steps.size):
        lo, hi = int(step_lo[s]), int(step_hi[s])
        inside = events[(trace.start_ns[events] >= lo) & (trace.start_ns[events] < hi)]
        by_region: dict[str, list[int]] = {}
        for e in inside.tolist():
            name = of_name[int(trace.name_id[e])]
            if name in region_of:
                by_region.setdefault(region_of[name], []).append(e)
        for rid, evs in by_region.items():
            ev = np.asarray(evs)
            first, last = int(trace.start_ns[ev].min()), int(trace.end_ns[ev].max())
            parent = parents.get(rid)
            launch_lanes, floor = main_lanes, lo
            if parent is not None:  # the enclosing branch's event holding the first start
                holders = [e for e in inside.tolist() if of_name[int(trace.name_id[e])] == parent
                           and trace.start_ns[e] <= first < trace.end_ns[e]]  # fmt: skip
                if holders:
                    launch_lanes, floor = [int(trace.lane[holders[0]])], int(trace.start_ns[holders[0]])
            start = _launch(trace, launch_lanes, floor, first)
            busy = float(trace.dur_ns[ev].sum())
            width = min(k, len(regions[rid]))
            idle = max(0.0, width * (last - first) - busy)
            per_region.setdefault(rid, []).append((last - start, first - start, busy, idle, 1.0))
    out = []
    for rid in sorted(per_region, key=_region_key):
        rows = np.asarray(per_region[rid], dtype=np.float64)
        n = rows.shape[0]
        mean = rows.mean(axis=0) / 1e6
        out.append(
            RegionGap(
                region=rid,
                region_name=names_of_region.get(rid),
                steps=n,
                measured_ms=float(mean[0]),
                predicted_ms=predicted.get(rid, 0.0),
                start_delay_ms=float(mean[1]),
                branch_ms=float(mean[2]),
                sequential_ms=sum((pred.branch_ms or {}).get(b, 0.0) for b in regions[rid]),
                idle_ms=float(mean[3]),
            )
        )
    if not out:
        return None
    gil = None
    if traits.gil_measured and info.gil is not False and info.branch_threads:
        wall = sum(t.wall_ms for t in info.branch_threads)
        gil = sum(t.gil_wait_ms for t in info.branch_threads) / wall if wall > 0 else None
    return Gap(k, tuple(out), parallelism(trace), cores_used(trace), gil, profiler_overhead)


def _launch(trace: Trace, lanes: Sequence[int], floor: int, first: int) -> int:
    """Where a region starts on its launching thread: the end of the last event on `lanes` that
    ends by `first` (the first branch's start), not before `floor`; else `floor`."""
    best = floor
    for lane in lanes:
        sl = trace.lane_slice(lane)
        ends = trace.end_ns[sl]
        ok = ends[(ends <= first) & (ends >= floor)]
        if ok.size:
            best = max(best, int(ok.max()))
    return best


def _region_key(region: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in region.split("."))
