"""What a model's branches *could* give on k threads, from its branch tree and sequential times.

Input: the branch tree of a run (run.json's `branches`: name, region "1" / "1.2" (nested), depth,
parent: the branch a nested region lies in), each branch's time in the model's own sequential
forward, and the sequential step time T1, both per step (see `branch_times_from_trace` and the
worker's `measure_branch_times`, which say where they came from).

The model (no contention for cores or memory, no cost to start or join a branch, every thread as
fast as the one that ran the sequential step):

- A region's branches are placed on k threads by list scheduling, longest first (LPT: each branch,
  in order of decreasing time, goes to the thread that frees first); the region takes its
  makespan. LPT is what a pool given the branches longest first does; it is within 4/3 of the best
  possible placement, and never below max(longest branch, work / k).
- **Nested regions** (the one rule): a branch's time on k threads is its own serial part (its
  sequential time minus the work of the regions nested in it) plus the makespans of its nested
  regions on k threads, each nested region having all k threads to itself while it runs. Since
  branches beside it need threads too, no region's makespan is taken below its work / k: k threads
  never do more than k threads' work (without that floor, an LSTM ensemble's members, each with
  its two directions nested, were given 3.6× on 2 threads).
- The step on k threads: `T_k = serial + Σ makespan_k(top-level region)`, serial being T1 minus
  the top-level regions' work (what runs between regions: Amdahl's serial part). The bound is
  `T1 / T_k`; a region's own bound is its work over its makespan.
- A branch without a time (one the sequential run could not mark: no submodule of its own) counts
  0 and is listed in `unmeasured`: its time stays in its parent's own part or in the serial part,
  which can only lower the bound.

**The interval** (`bound_intervals`, `by_threads_ci95`): the times are medians of sequential steps
measured one by one (`StepSamples`); from `MIN_CI_STEPS` steps on, the steps are resampled with
replacement (`CI_RESAMPLES` times, seeded as `pairing.SEED`: the same steps give the same interval)
and each resample's medians give a bound; the 2.5th and 97.5th percentiles of those are its 95%
interval. Medians of parts may add up to a little more than the median step: the step is then taken
as its regions' work (the bound never goes below 1×).

`predict` builds a `records.PredictionRecord`; `prediction_text` and `region_text` say it in words
with its assumptions. No torch, no Qt.
"""

from __future__ import annotations

import heapq
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np

from branchscope.profiling.trace.labels import branch_name
from branchscope.profiling.trace.pairing import SEED
from branchscope.profiling.trace.records import PredictionRecord, RegionPredictionRecord

#: Thread counts always predicted; more (8, 16, …) while a region has more branches than threads.
BASE_THREADS = (2, 4)
MAX_THREADS = 64
#: The assumptions every sentence carries.
ASSUMPTIONS = "no contention, no overhead assumed"
#: How `PredictionRecord.from_` says where the times came from.
FROM_PROFILED = "this run's {n} profiled steps"
FROM_MEASURED = "{n} unprofiled sequential steps measured in the worker"

_STEP = re.compile(r"^step \d+$")


class BranchLike(Protocol):
    """What `predict` reads of a branch (records.BranchRecord, of run.json and the trace alike)."""

    @property
    def name(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def parent(self) -> str | None: ...


def lpt_makespan(times: Iterable[float], k: int) -> float:
    """The makespan of `times` list-scheduled longest first on `k` threads (each next-longest job to
    the thread that frees first)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    jobs = sorted((max(0.0, t) for t in times), reverse=True)
    if not jobs:
        return 0.0
    loads = [0.0] * min(k, len(jobs))
    heapq.heapify(loads)
    for t in jobs:
        heapq.heapreplace(loads, loads[0] + t)
    return max(loads)


def thread_counts(widest: int) -> tuple[int, ...]:
    """2 and 4, then doubling while a region has more branches than the last count (past the widest
    region's branch count nothing changes)."""
    ks = list(BASE_THREADS)
    while ks[-1] < widest and ks[-1] < MAX_THREADS:
        ks.append(ks[-1] * 2)
    return tuple(ks)


def _region_key(region: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in region.split("."))


@dataclass
class _Region:
    id: str
    name: str | None
    parent: str | None  # the branch it lies in
    branches: list[str]


def predict(
    branches: Sequence[BranchLike],
    branch_ms: Mapping[str, float],
    step_ms: float,
    *,
    source: str,
    steps: int | None = None,
    threads: Sequence[int] | None = None,
    samples: StepSamples | None = None,
) -> PredictionRecord | None:
    """The prediction for a step of `step_ms` (sequential) whose branches took `branch_ms` (ms per
    step, by name); None when there are no branches, no step time, or no branch has a time. With the
    `samples` the times are the medians of, the bound gets its interval (`bound_intervals`)."""
    if not branches or not (step_ms > 0 and math.isfinite(step_ms)):
        return None
    ms = {n: float(t) for n, t in branch_ms.items() if isinstance(t, int | float) and math.isfinite(t) and t >= 0}
    regions: dict[str, _Region] = {}
    for b in branches:
        r = regions.setdefault(b.region, _Region(b.region, getattr(b, "region_name", None), b.parent, []))
        if b.name not in r.branches:
            r.branches.append(b.name)
    if not any(n in ms for r in regions.values() for n in r.branches):
        return None
    ks = tuple(threads) if threads else thread_counts(max(len(r.branches) for r in regions.values()))
    names = {b.name for b in branches}
    model = _BoundModel(regions, names)
    by_threads, serial = model.bounds(ms, step_ms, ks)
    region_records = model.region_records(ms, ks)
    return PredictionRecord(
        by_threads=by_threads,
        by_threads_ci95=bound_intervals(model, samples, ks) if samples is not None else None,
        step_ms=_round(step_ms),
        serial_ms=_round(serial),
        regions=region_records,
        from_=source,
        steps=steps,
        unmeasured=sorted(names - set(ms)) or None,
        branch_ms={n: _round(ms[n]) for n in sorted(ms) if n in names} or None,
    )


def predict_from(
    branches: Sequence[BranchLike], samples: StepSamples, *, source: str, threads: Sequence[int] | None = None
) -> PredictionRecord | None:
    """`predict` from sequential steps measured one by one: their medians (`StepSamples.typical`),
    the bound's interval from the steps themselves; `source` is filled with the steps' count."""
    step_ms, branch_ms, n = samples.typical()
    return predict(branches, branch_ms, step_ms, source=source.format(n=n), steps=n, threads=threads, samples=samples)


class _BoundModel:
    """The branch tree of a prediction, and the bound it gives for given times (module docstring)."""

    def __init__(self, regions: dict[str, _Region], names: set[str]) -> None:
        self.regions = regions
        self.nested: dict[str, list[_Region]] = {}
        for r in regions.values():
            if r.parent is not None:
                self.nested.setdefault(r.parent, []).append(r)
        self.top = [r for r in regions.values() if r.parent is None or r.parent not in names]

    def bounds(self, ms: Mapping[str, float], step_ms: float, ks: Sequence[int]) -> tuple[dict[str, float], float]:
        """({k: the step's bound on k threads}, the serial part) for branch times `ms` in a step of `step_ms`."""
        makespan, work = self._makespan(ms)
        # Medians of the parts may add up to a little more than the median step: the step is at
        # least its regions' work (so the bound is never below 1×).
        step_ms = max(step_ms, sum(work[r.id] for r in self.top))
        serial = step_ms - sum(work[r.id] for r in self.top)
        by_threads: dict[str, float] = {}
        for k in ks:
            t_k = serial + sum(makespan(r, k, frozenset({r.id})) for r in self.top)
            by_threads[str(k)] = _round(step_ms / t_k) if t_k > 0 else 1.0
        return by_threads, serial

    def region_records(self, ms: Mapping[str, float], ks: Sequence[int]) -> list[RegionPredictionRecord]:
        makespan, work = self._makespan(ms)
        records = []
        for r in sorted(self.regions.values(), key=lambda r: _region_key(r.id)):
            longest = max(r.branches, key=lambda n: ms.get(n, 0.0))
            bounds = {}
            for k in ks:
                m = makespan(r, k, frozenset({r.id}))
                bounds[str(k)] = _round(work[r.id] / m) if m > 0 else 1.0
            records.append(
                RegionPredictionRecord(
                    region=r.id,
                    region_name=r.name,
                    branches=len(r.branches),
                    work_ms=_round(work[r.id]),
                    longest_branch=longest,
                    longest_branch_ms=_round(ms.get(longest, 0.0)),
                    bound_by_threads=bounds,
                )
            )
        return records

    def _makespan(self, ms: Mapping[str, float]) -> tuple[Any, dict[str, float]]:
        regions, nested = self.regions, self.nested

        def t1(name: str) -> float:
            return ms.get(name, 0.0)

        work: dict[str, float] = {rid: sum(t1(n) for n in r.branches) for rid, r in regions.items()}
        memo: dict[tuple[str, int], float] = {}

        def on_k(name: str, k: int, seen: frozenset[str] = frozenset()) -> float:
            """A branch's time on k threads (the nested rule)."""
            if (name, k) in memo:
                return memo[(name, k)]
            inner = [r for r in nested.get(name, []) if r.id not in seen]
            own = max(0.0, t1(name) - sum(work[r.id] for r in inner))
            value = own + sum(makespan(r, k, seen | {r.id}) for r in inner)
            memo[(name, k)] = value
            return value

        def makespan(r: _Region, k: int, seen: frozenset[str]) -> float:
            # never below work / k: the nested rule lends every nested region all k threads
            return max(lpt_makespan((on_k(n, k, seen) for n in r.branches), k), work[r.id] / k)

        return makespan, work


#: The fewest sequential steps a bound's interval is drawn from; resamples of the bootstrap.
MIN_CI_STEPS = 5
CI_RESAMPLES = 1000


def bound_intervals(model: _BoundModel, samples: StepSamples, ks: Sequence[int]) -> dict[str, list[float]] | None:
    """The bound's 95% interval for each k: the steps resampled with replacement (a seeded
    generator: the same steps give the same interval), the bound of each resample's medians, their
    2.5th and 97.5th percentiles; None under MIN_CI_STEPS steps."""
    n = len(samples.steps_ms)
    if n < MIN_CI_STEPS:
        return None
    rng = np.random.default_rng(SEED)
    names = sorted({b for d in samples.branch_ms for b in d})
    steps = np.asarray(samples.steps_ms, dtype=np.float64)
    branch = np.asarray([[d.get(b, 0.0) for b in names] for d in samples.branch_ms], dtype=np.float64)
    draws: dict[str, list[float]] = {str(k): [] for k in ks}
    for pick in rng.integers(0, n, size=(CI_RESAMPLES, n)):
        step_ms = float(np.median(steps[pick]))
        ms = dict(zip(names, np.median(branch[pick], axis=0).tolist(), strict=True)) if names else {}
        for k, v in model.bounds(ms, step_ms, ks)[0].items():
            draws[k].append(v)
    out = {}
    for k, vs in draws.items():
        lo, hi = np.percentile(vs, [2.5, 97.5])
        out[k] = [_round(float(lo)), _round(float(hi))]
    return out


def _round(x: float) -> float:
    return round(x, 4)


# ---------------------------------------------------------------- where the times come from


@dataclass
class StepSamples:
    """Sequential steps measured one by one: each step's ms, and each branch's ms in it (a branch
    missing from a step took 0 there)."""

    steps_ms: list[float] = field(default_factory=list)
    branch_ms: list[dict[str, float]] = field(default_factory=list)

    def add(self, step_ms: float, branch_ms: Mapping[str, float]) -> None:
        self.steps_ms.append(step_ms)
        self.branch_ms.append(dict(branch_ms))

    def typical(self) -> tuple[float, dict[str, float], int]:
        """(step ms, ms of each branch, steps): the median of each, so that a step slowed by other
        work on the machine moves none of them (the parts then add up to the step only nearly: the
        serial part is the median step less the regions' work, never below 0)."""
        names = {n for d in self.branch_ms for n in d}
        return (
            statistics.median(self.steps_ms),
            {n: statistics.median(d.get(n, 0.0) for d in self.branch_ms) for n in sorted(names)},
            len(self.steps_ms),
        )


def branch_times_from_trace(events: Iterable[Any]) -> StepSamples | None:
    """Each step of a sequential run and its branches' times, from its raw Chrome trace events: the
    `"step N"` annotations and the `"branch: NAME"` ones inside them (one process: the worker's; a
    branch the forward runs in several pieces has a range for each, summed). None without steps."""
    steps: list[tuple[float, float]] = []
    marks: list[tuple[str, float, float]] = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
        if not isinstance(name, str) or not isinstance(ts, int | float) or not isinstance(dur, int | float):
            continue
        if _STEP.match(name):
            steps.append((float(ts), float(ts) + float(dur)))
        elif (branch := branch_name(name)) is not None:
            marks.append((branch, float(ts), float(ts) + float(dur)))
    if not steps:
        return None
    steps.sort()
    per_step: list[dict[str, float]] = [{} for _ in steps]
    for branch, s, e in marks:
        for i, (ss, se) in enumerate(steps):
            inside = min(e, se) - max(s, ss)
            if inside > 0:
                per_step[i][branch] = per_step[i].get(branch, 0.0) + inside / 1000.0
    return StepSamples([(se - ss) / 1000.0 for ss, se in steps], per_step)


# ---------------------------------------------------------------- reading it back


def parse_prediction(obj: Any) -> PredictionRecord | None:
    """A trace's `"branchscope"` `prediction` value as a record (the trace reader keeps a float's
    digits as a string: converted here); None when it is not one."""
    if not isinstance(obj, dict):
        return None
    try:
        record = msgspec.convert(obj, PredictionRecord, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
        return None
    values = [*record.by_threads.values(), record.serial_ms or 0.0, record.step_ms or 0.0]
    values += [v for r in record.regions for v in (r.work_ms, r.longest_branch_ms, *r.bound_by_threads.values())]
    values += list((record.branch_ms or {}).values())
    values += [v for ci in (record.by_threads_ci95 or {}).values() for v in ci]
    return record if all(math.isfinite(v) for v in values) and record.by_threads else None


# ---------------------------------------------------------------- in words


def _ks(pred: PredictionRecord) -> list[tuple[int, float]]:
    out = []
    for k, v in pred.by_threads.items():
        if k.isdigit():
            out.append((int(k), v))
    return sorted(out)


def region_label(region: RegionPredictionRecord) -> str:
    return f"region {region.region}" + (f" ({region.region_name})" if region.region_name else "")


def _limit(pred: PredictionRecord) -> str:
    """Why the bound is what it is: the region whose uneven branches cost most on 2 threads, and
    the serial part when it is a fair share of the step."""
    parts = []
    worst: tuple[float, RegionPredictionRecord] | None = None
    for r in pred.regions:
        if r.work_ms <= 0 or r.branches < 2:
            continue
        loss = r.longest_branch_ms - r.work_ms / 2  # what the longest branch keeps beyond an even split
        if worst is None or loss > worst[0]:
            worst = (loss, r)
    if worst is not None and worst[0] > 0:
        r = worst[1]
        parts.append(f"{r.longest_branch} alone is {100 * r.longest_branch_ms / r.work_ms:.0f}% of {region_label(r)}")
    if pred.step_ms and pred.serial_ms is not None and pred.serial_ms / pred.step_ms >= 0.05:
        parts.append(f"{100 * pred.serial_ms / pred.step_ms:.0f}% of the step runs outside the regions")
    return "; ".join(parts)


def bound_text(pred: PredictionRecord, k: int) -> str:
    """"1.87×" or, with its interval, "1.87× [1.80–1.95]": the bound on k threads."""
    value = pred.by_threads.get(str(k))
    if value is None:
        return "?"
    ci = (pred.by_threads_ci95 or {}).get(str(k))
    return f"{value:.2f}× [{ci[0]:.2f}–{ci[1]:.2f}]" if ci and len(ci) == 2 else f"{value:.2f}×"


def prediction_text(pred: PredictionRecord) -> str:
    """One line: "could be at most 1.46× [1.41–1.50] on 2 threads, 1.71× [1.66–1.75] on 4:
    branch3x3dbl alone is 41% of region 1 (Mixed_5b) (no contention, no overhead assumed; 95%
    intervals over the steps; from …)"."""
    ks = _ks(pred)
    bounds = ", ".join(f"{bound_text(pred, k)} on {k}" for k, _v in ks)
    first, _, rest = bounds.partition(", ")
    said = f"could be at most {first} threads" + (f", {rest}" if rest else "")
    why = _limit(pred)
    extra = f"; {len(pred.unmeasured)} branch(es) unmeasured" if pred.unmeasured else ""
    src = f"; from {pred.from_}" if pred.from_ else ""
    ci = "; 95% intervals over the steps" if pred.by_threads_ci95 else ""
    return f"{said}" + (f": {why}" if why else "") + f" ({ASSUMPTIONS}{extra}{ci}{src})"


def region_text(region: RegionPredictionRecord) -> str:
    """A region in words: "at most 1.46× on 2 threads, 1.71× on 4: branch3x3dbl alone is 41% of
    its work"."""
    ks = sorted((int(k), v) for k, v in region.bound_by_threads.items() if k.isdigit())
    bounds = ", ".join(f"{v:.2f}× on {k}" for k, v in ks)
    first, _, rest = bounds.partition(", ")
    said = f"at most {first} threads" + (f", {rest}" if rest else "")
    if region.work_ms > 0 and region.branches > 1:
        said += f": {region.longest_branch} alone is {100 * region.longest_branch_ms / region.work_ms:.0f}% of its work"
    return said


def prediction_json(pred: PredictionRecord | None) -> dict[str, Any] | None:
    """The record as plain JSON (run.json's shape), with its sentence as `"text"`."""
    if pred is None:
        return None
    out = msgspec.to_builtins(pred)
    assert isinstance(out, dict)
    out["text"] = prediction_text(pred)
    return out
