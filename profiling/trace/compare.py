"""Several runs side by side: a summary per run, speedups against a baseline, and an op diff.

A run is a run folder (run.json + its trace) or a trace file (with the run.json beside it when that
names the file). `summarize` gives one `RunSummary`: what was run, the unprofiled step times (the
honest numbers; `StepStats`), parallelism, cores used, pool busy share and memory peaks, measured
inside the profiled steps when the trace has them, and whether the run was starved of cores
(run.json's `starved`, judged by the runner; for a run from before it, `starved.is_starved` on
run.json's load alone: the cores the runner measured it used are not in it, and the CPU samples
cover the profiled steps only, not the steps timed without the profiler). A fork or threads run
M I×J compared beside sequential 1×J and M 1×J of its model has its speedup in parts
(`summary_parts`, `profiling/trace/parts.py`: its plan × its threads), and the prediction's bound,
which is about threads only, is held against the part its threads gave. `op_diff` lists, per op name, count, total and
self time in every run (self: the duration minus that of its children on its lane), largest
difference first, as HolisticTraceAnalysis' TraceDiff and TensorBoard's diff view do. Ops are the
real work (CPU ops, kernels, memcpy/memset, runtime calls); user annotations ("step N", "branch: …"),
Python frames and counters are not ops. `compare` puts it together for `branchscope compare` and
the compare view.

Qt-free and torch-free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.trace.analyses import (
    cores_used,
    first_step_start,
    parallelism,
    pool_busy_share,
    steps_window,
)
from branchscope.profiling.trace.gap import Gap, explain_gap
from branchscope.profiling.trace.mode_traits import KnowsItsTraits, ModeTraits
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.profiling.trace.parts import PartRun, speedup_parts
from branchscope.profiling.trace.prediction import prediction_json
from branchscope.profiling.trace.ranks import rank_figures
from branchscope.profiling.trace.records import LoadRecord, PredictionRecord, RunRecord, to_builtins
from branchscope.profiling.trace.run_info import BRANCH_PREFIX
from branchscope.profiling.trace.sources import SWEEP, open_source
from branchscope.profiling.trace.starved import load_starved
from branchscope.profiling.trace.step_stats import StepStats, speedup
from branchscope.profiling.trace.sweep_records import SpeedupPartsRecord

#: Categories of events that are not ops: annotations, Python frames, the profiler's own span.
NOT_OP_CATEGORIES = frozenset(
    {"user_annotation", "gpu_user_annotation", "python_function", "trace", "cpu_instant_event"}
)
#: Names that are not ops in any category: the profiled steps and branches (annotations), torch's
#: own record_function labels ("ProfilerStep#3", "Optimizer.step#SGD.step", older traces file them
#: as ops), and the frames TorchScript records as CPU ops (its function calls "forward",
#: "<forked function>", "<forward op>", and record_function's "__enter__"/"__exit__").
_NOT_OP_NAME = re.compile(
    r"step \d+|" + re.escape(BRANCH_PREFIX) + r".*|[^:#]+#[^:]*|<[^<>]*>|__enter__|__exit__|forward",
    re.DOTALL,
)


@dataclass(frozen=True)
class LoadedRun:
    """A run to compare: its trace, its run.json (None for a trace alone) and the path it came from.

    A distributed run's trace is its ranks merged, its run.json the top-level one (the slowest
    rank's step times, step by step), and `ranks` each rank's own run.json."""

    path: str
    trace: Trace
    run: RunRecord | None = None
    ranks: tuple[RunRecord | None, ...] = ()


@dataclass(frozen=True)
class RunSummary(KnowsItsTraits):
    """What one run was and how it did. Values a run cannot tell are None.

    `median_ms` is the profiled median of run.json; `unprofiled` the step times without the
    profiler. `parallelism` is the busy-computing threads on average, `cores_used` the CPU cores the
    samples saw in use, `pool_busy_share` the inter-op pool's busy share; all three inside the
    profiled steps when the trace has them. `origin_ns` is the first step's start (else the trace's
    first event), the instant shown at 0 when runs are lined up.
    """

    label: str
    path: str
    mode: str | None
    interop: int | None
    intra: int | None
    median_ms: float | None
    unprofiled: StepStats | None
    parallelism: float | None
    cores_used: float | None
    pool_busy_share: float | None
    peak_bytes: dict[str, int] = field(default_factory=dict)
    origin_ns: int = 0
    #: A distributed run's ranks: each rank's own step times (its rank number, its stats).
    ranks: tuple[RankSummary, ...] = ()
    #: The cores the run could use (run.json `cores`), None when unknown.
    cores: int | None = None
    #: The model run (run.json `model`: "demo NAME" or the model file's path), None when unknown.
    model: str | None = None
    #: The machine's load while it ran (run.json `load`), None when not measured.
    load: LoadRecord | None = None
    #: What its branches could give on k threads (run.json's or the trace's `prediction`), None
    #: when unknown.
    prediction: PredictionRecord | None = None
    #: A fork or threads run's regions measured against the prediction (`gap.explain_gap`).
    gap: Gap | None = None
    #: It got, or was left, fewer cores than its threads could use (`starved.is_starved`); None: unknown.
    starved: bool | None = None
    #: How a speedup's parts name its mode's plan (run.json's `plan_by`); None: not said.
    plan_by: str | None = None
    #: Its mode's traits as run.json or the trace says them (None: the table's, `traits`).
    mode_traits: ModeTraits | None = None

    @property
    def busy(self) -> bool:
        """Other processes took more than about a fifth of the cores while it timed its steps."""
        return self.load is not None and self.load.busy is True

    @property
    def is_baseline_1x1(self) -> bool:
        """A 1×1 run of the baseline mode (sequential): what speedups are measured against by default."""
        return self.traits.baseline and self.interop == 1 and self.intra == 1

    @property
    def threads(self) -> str | None:
        """The threads as "I×J" (inter-op × intra-op), or None when unknown."""
        if self.interop is None or self.intra is None:
            return None
        return f"{self.interop}×{self.intra}"


@dataclass(frozen=True)
class RankSummary:
    """One rank of a distributed run being compared: its own step times."""

    rank: int
    median_ms: float | None
    unprofiled: StepStats | None


@dataclass(frozen=True)
class OpDiff:
    """One op name across the compared runs: count, total and self time (µs) per run."""

    name: str
    count: list[int]
    total_us: list[float]
    self_us: list[float]

    @property
    def spread_us(self) -> float:
        """The largest difference of total time between two runs."""
        return max(self.total_us) - min(self.total_us)


@dataclass(frozen=True)
class Comparison:
    """Runs compared against `runs[baseline]`; `speedup[k]` is the baseline's unprofiled median ÷ run k's."""

    runs: list[RunSummary]
    baseline: int
    speedup: list[float | None]
    #: Whether run k's and the baseline's unprofiled interquartile ranges overlap (None: unknown).
    within_noise: list[bool | None]
    ops: list[OpDiff]
    #: Whether the baseline was chosen (`compare(baseline=K)`), not `default_baseline`'s.
    baseline_chosen: bool = False
    #: Each run's speedup in its parts (`summary_parts`), None where it has none.
    parts: list[SpeedupPartsRecord | None] = field(default_factory=list)

    def parts_of(self, k: int) -> SpeedupPartsRecord | None:
        return self.parts[k] if k < len(self.parts) else None

    def busy_beside_baseline(self, k: int) -> bool:
        """Whether run k's speedup compares times where the machine was busy for either run."""
        return k != self.baseline and (self.runs[k].busy or self.runs[self.baseline].busy)

    def baseline_text(self) -> str:
        """Which run the speedups are against, and why that one: "speedups against run 0 (twin-mm,
        sequential 1×1): the first sequential 1×1 run given (--baseline K picks another)"."""
        b = self.runs[self.baseline]
        config = " ".join(y for y in (b.mode, b.threads) if y)
        what = b.label if not config or (b.threads or "") in b.label else f"{b.label}, {config}"
        if self.baseline_chosen:
            why = "chosen with --baseline"
        elif b.is_baseline_1x1:
            why = "the first sequential 1×1 run given (--baseline K picks another)"
        else:
            why = "the first run given, as none is sequential 1×1 (--baseline K picks another)"
        return f"speedups against run {self.baseline} ({what}): {why}"

    def to_json(self) -> dict[str, Any]:
        """The `branchscope compare --json` document."""
        return {
            "runs": [
                {**_run_json(s), "parts": None if p is None else to_builtins(p)}
                for s, p in zip(self.runs, [self.parts_of(k) for k in range(len(self.runs))])
            ],
            "baseline": self.baseline,
            "baseline_chosen": self.baseline_chosen,
            "speedup": [None if x is None else round(x, 4) for x in self.speedup],
            "vs_prediction": [
                None if v is None else {"threads": v.threads, "measured": round(v.measured, 4), "bound": v.bound,
                                        "share": round(v.share, 4), "part": "parallel" if v.over else "whole"}
                for v in (vs_prediction(self.runs, self.baseline, self.speedup, k, self.parts_of(k))
                          for k in range(len(self.runs)))
            ],  # fmt: skip
            "ops": [
                {"name": op.name, "count": op.count, "total_us": op.total_us, "self_us": op.self_us}
                for op in self.ops
            ],
        }


def _run_json(s: RunSummary) -> dict[str, Any]:
    u = s.unprofiled
    return {
        "label": s.label,
        "path": s.path,
        "mode": s.mode,
        "interop": s.interop,
        "intra": s.intra,
        "median_ms": s.median_ms,
        "unprofiled_median_ms": None if u is None else round(u.median, 4),
        "unprofiled_spread_ms": None if u is None else u.rounded_spread(),
        "parallelism": _rounded(s.parallelism),
        "cores_used": _rounded(s.cores_used),
        "peak_bytes": dict(s.peak_bytes),
        "busy": None if s.load is None else s.load.busy,
        "starved": s.starved,
        "prediction": prediction_json(s.prediction),
        "gap": None if s.gap is None else s.gap.to_json(),
        "ranks": [
            {
                "rank": r.rank,
                "median_ms": r.median_ms,
                "unprofiled_median_ms": None if r.unprofiled is None else round(r.unprofiled.median, 4),
                "unprofiled_spread_ms": None if r.unprofiled is None else r.unprofiled.rounded_spread(),
            }
            for r in s.ranks
        ],
    }


def _rounded(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


# ---- loading ---------------------------------------------------------------------------------
def load_run(path: str | os.PathLike[str]) -> LoadedRun:
    """A run folder (run.json and the trace it names), a distributed run's folder (its ranks
    merged), a folder of rank traces, or a trace file (with the run.json beside it when that names
    this file): whatever `sources.open_source` opens but a sweep. Raises `TraceFormatError`."""
    source = open_source(path)
    if source.kind == SWEEP:
        raise TraceFormatError(f"{path}: is a sweep folder; compare its cells' run folders (or open it in the window)")
    return LoadedRun(str(path), source.load(), source.run, tuple(source.rank_runs()))


# ---- one run ----------------------------------------------------------------------------------
def _config(trace: Trace, run: RunRecord | None) -> tuple[str | None, int | None, int | None]:
    """(mode, interop, intra) from run.json, else from the trace's run info."""
    run = run or RunRecord()
    info = trace.run_info
    mode, interop, intra = run.mode, run.interop, run.intra
    if info is not None:
        mode = mode if mode is not None else info.mode
        interop = interop if interop is not None else info.interop
        intra = intra if intra is not None else info.intra
    return mode, interop, intra


def run_label(trace: Trace, run: RunRecord | None, path: str) -> str:
    """The label "MODEL · MODE · I×J" from run.json and the trace's run info; the file name where they are silent."""
    model = run.model if run is not None else None
    mode, interop, intra = _config(trace, run)
    name = Path(path).name or str(path)
    parts = [model or name]
    if mode:
        parts.append(mode)
    if interop is not None and intra is not None:
        parts.append(f"{interop}×{intra}")
    return " · ".join(parts)


def trace_rank_steps(trace: Trace) -> tuple[float | None, tuple[RankSummary, ...]]:
    """A job without run.json (a folder of rank traces): (the median of the slowest rank's profiled
    step times, step by step, as a distributed run.json counts it; each rank's own profiled median),
    from its steps' annotations (`ranks.rank_figures`); (None, ()) without steps."""
    f = rank_figures(trace)
    if not f.steps:
        return None, ()
    times = np.where(f.step_ns >= 0, f.step_ns / 1e6, np.nan)
    have = ~np.isnan(times)
    slowest = np.nanmax(times[:, have.any(axis=0)], axis=0)
    rows = tuple(
        RankSummary(rank, round(float(np.median(times[k, have[k]])), 6) if have[k].any() else None, None)
        for k, rank in enumerate(f.ranks)
    )
    return round(float(np.median(slowest)), 6), rows


def summarize(
    trace: Trace,
    run: RunRecord | None = None,
    path: str | None = None,
    label: str | None = None,
    ranks: Sequence[RunRecord | None] = (),
) -> RunSummary:
    """The `RunSummary` of one run (see there); `ranks`: a distributed run's ranks' own run.json."""
    run = run or RunRecord()
    path = trace.path if path is None else path
    mode, interop, intra = _config(trace, run)
    window = steps_window(trace)
    first = first_step_start(trace)
    peaks: dict[str, int] = {}
    for m in trace.memory:
        peaks[m.device] = max(peaks.get(m.device, 0), m.peak_bytes)
    rank_rows = tuple(
        RankSummary(r.rank if r.rank is not None else k, r.median_ms, r.unprofiled_stats)
        for k, r in enumerate(ranks)
        if r is not None
    )
    median_ms = run.median_ms
    if not rank_rows and median_ms is None and len(trace.lane_rank_set - {None}) >= 2:
        median_ms, rank_rows = trace_rank_steps(trace)
    return RunSummary(
        label=label if label is not None else run_label(trace, run, path),
        path=path,
        mode=mode,
        interop=interop,
        intra=intra,
        median_ms=median_ms,
        unprofiled=run.unprofiled_stats,
        parallelism=parallelism(trace, window) if len(trace) else None,
        cores_used=cores_used(trace, window),
        pool_busy_share=pool_busy_share(trace, window),
        peak_bytes=peaks,
        origin_ns=first if first is not None else trace.span()[0],
        ranks=rank_rows,
        cores=run.cores,
        model=run.model,
        load=run.load,
        prediction=run.prediction or (trace.run_info.prediction if trace.run_info is not None else None),
        gap=explain_gap(trace, run.prediction, run.profiler_overhead),
        starved=_starved(run, mode, interop, intra, len(rank_rows)),
        plan_by=run.plan_by,
        mode_traits=run.mode_traits or (trace.run_info.mode_traits if trace.run_info is not None else None),
    )


def _starved(run: RunRecord, mode: str | None, interop: int | None, intra: int | None, ranks: int) -> bool | None:
    """run.json's `starved`; for a run from before it, whether its machine's load (run.json's
    `load`) left it fewer cores than its threads could use (`starved.is_starved`); None when
    neither tells."""
    if run.starved is not None:
        return run.starved
    return load_starved(mode, interop, intra, run.nproc or ranks, run.load, run.cores)


def default_baseline(summaries: Sequence[RunSummary]) -> int:
    """The first sequential 1×1 run, else the first run."""
    for k, s in enumerate(summaries):
        if s.is_baseline_1x1:
            return k
    return 0


# ---- ops --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpTotals:
    """Per op name of one trace: how many, total and self time in ns."""

    names: list[str]
    count: np.ndarray  # int64
    total_ns: np.ndarray  # int64
    self_ns: np.ndarray  # int64


def op_mask(trace: Trace) -> np.ndarray:
    """Which events are ops (see the module docstring)."""
    cat_ok = np.array([c.lower() not in NOT_OP_CATEGORIES for c in trace.cats], dtype=bool)
    name_ok = np.array([_NOT_OP_NAME.fullmatch(n) is None for n in trace.names], dtype=bool)
    if not len(trace):
        return np.zeros(0, dtype=bool)
    return cat_ok[trace.cat_id] & name_ok[trace.name_id]


def op_totals(trace: Trace, window: tuple[int, int] | None = None) -> OpTotals:
    """Count, total and self time per op name, of the ops starting inside `window` (None: all).

    An op's self time is its duration less the time its nearest enclosed ops on its lane take,
    each clipped to the op's own interval (rounded times let a child outlast its parent). Ops are
    nested through annotations and frames: "branch: …" between two ops does not hide the inner one.
    """
    n = len(trace)
    names = list(trace.names)
    k = len(names)
    if n == 0:
        return OpTotals(names, *(np.zeros(k, dtype=np.int64) for _ in range(3)))
    is_op = op_mask(trace)
    # Each op's nearest enclosing op: climb the parents past whatever is not an op.
    up = trace.parent.copy()
    climbing = np.flatnonzero(up >= 0)
    climbing = climbing[~is_op[up[climbing]]]
    while climbing.size:
        up[climbing] = trace.parent[up[climbing]]
        climbing = climbing[up[climbing] >= 0]
        climbing = climbing[~is_op[up[climbing]]]
    child = np.flatnonzero(is_op & (up >= 0))
    parent = up[child]
    end = trace.end_ns
    overlap = np.minimum(end[child], end[parent]) - np.maximum(trace.start_ns[child], trace.start_ns[parent])
    covered = np.bincount(parent, weights=np.maximum(overlap, 0), minlength=n).astype(np.int64)
    self_ns = np.maximum(trace.dur_ns - covered, 0)
    keep = is_op
    if window is not None:
        keep = keep & (trace.start_ns >= window[0]) & (trace.start_ns < window[1])
    ids = trace.name_id[keep]
    return OpTotals(
        names,
        np.bincount(ids, minlength=k).astype(np.int64),
        np.bincount(ids, weights=trace.dur_ns[keep], minlength=k).astype(np.int64),
        np.bincount(ids, weights=self_ns[keep], minlength=k).astype(np.int64),
    )


def op_diff(traces: Sequence[Trace], windows: Sequence[tuple[int, int] | None] | None = None) -> list[OpDiff]:
    """Per op name, count, total and self time in each trace, largest difference of total first.

    `windows[k]` limits trace k to the ops starting in it; by default each trace's profiled steps.
    """
    if windows is None:
        windows = [steps_window(t) for t in traces]
    per_run = [op_totals(t, w) for t, w in zip(traces, windows)]
    index: dict[str, int] = {}
    for totals in per_run:
        for name, c in zip(totals.names, totals.count.tolist()):
            if c:
                index.setdefault(name, len(index))
    m = len(index)
    count = np.zeros((len(per_run), m), dtype=np.int64)
    total = np.zeros((len(per_run), m), dtype=np.int64)
    own = np.zeros((len(per_run), m), dtype=np.int64)
    for r, totals in enumerate(per_run):
        cols = np.array([index.get(name, -1) for name in totals.names], dtype=np.int64)
        ok = (cols >= 0) & (totals.count > 0)
        count[r, cols[ok]] = totals.count[ok]
        total[r, cols[ok]] = totals.total_ns[ok]
        own[r, cols[ok]] = totals.self_ns[ok]
    names = list(index)
    if not m:
        return []
    spread = total.max(axis=0) - total.min(axis=0)
    order = sorted(range(m), key=lambda j: (-int(spread[j]), names[j]))
    return [
        OpDiff(
            name=names[j],
            count=count[:, j].tolist(),
            total_us=(total[:, j] / 1000.0).tolist(),
            self_us=(own[:, j] / 1000.0).tolist(),
        )
        for j in order
    ]


# ---- against the prediction -------------------------------------------------------------------
@dataclass(frozen=True)
class VsPrediction:
    """A fork or threads run's measured speedup against what its branches could give on its
    inter-op threads (`profiling/trace/prediction.py`): `share` = measured ÷ bound. `over` is the
    run the speedup is over when it is the part its threads gave ("fork 1×1"), None when it is the
    whole speedup over the sequential baseline."""

    threads: int
    measured: float
    bound: float
    prediction: PredictionRecord
    over: str | None = None

    @property
    def share(self) -> float:
        return self.measured / self.bound

    def text(self) -> str:
        """"measured 1.07× on 2 threads: 55% of the 1.96× bound", or the part its threads gave:
        "0.96× from its 2 threads (over fork 1×1): 49% of the 1.96× bound"."""
        if self.over is not None:
            what = f"{self.measured:.2f}× from its {self.threads} threads (over {self.over})"
        else:
            what = f"measured {self.measured:.2f}× on {self.threads} threads"
        return f"{what}: {100 * self.share:.0f}% of the {self.bound:.2f}× bound"


def vs_prediction(
    summaries: Sequence[RunSummary],
    baseline: int,
    speedups: Sequence[float | None],
    k: int,
    parts: SpeedupPartsRecord | None = None,
) -> VsPrediction | None:
    """Run k's speedup held against the prediction on its inter-op thread count, where that means
    something: run k a fork or threads run. The bound is about threads only, so where run k's
    `parts` are known it is held against the part its threads gave (M 1×J ÷ M I×J; the prediction
    its own, else its sequential 1×J run's); else against its whole speedup, when the baseline is a
    sequential run of the same model at the same intra-op thread count (the prediction's
    sequential times are at that count; its own prediction, else the baseline's)."""
    s, base = summaries[k], summaries[baseline]
    if not s.traits.branch_pool or not s.interop:
        return None
    if parts is not None and parts.parallel.median:
        seq = parts.sequential
        pred = s.prediction or (summaries[seq].prediction if seq is not None and 0 <= seq < len(summaries) else None)
        measured, over = parts.parallel.median, f"{s.mode} 1×{s.intra}"
    else:
        whole = speedups[k] if k < len(speedups) else None
        if k == baseline or whole is None:
            return None
        if not base.traits.baseline or base.intra != s.intra or (base.model and s.model and base.model != s.model):
            return None
        pred, measured, over = s.prediction or base.prediction, whole, None
    bound = pred.by_threads.get(str(s.interop)) if pred is not None else None
    if pred is None or bound is None or bound <= 0:
        return None
    return VsPrediction(s.interop, measured, bound, pred, over)


# ---- all of it --------------------------------------------------------------------------------
def unique_labels(labels: Sequence[str]) -> list[str]:
    """The labels, a repeated one numbered from its second time on ("… (2)")."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def summary_parts(summaries: Sequence[RunSummary]) -> list[SpeedupPartsRecord | None]:
    """Each run's speedup in its parts (`parts.speedup_parts`: a fork or threads run M I×J beside
    sequential 1×J and M 1×J of its model, from their unprofiled medians), None where it has none;
    the parts name their runs by index among `summaries`."""
    return speedup_parts([
        PartRun(s.mode, s.interop, s.intra, None if s.unprofiled is None else s.unprofiled.median, model=s.model,
                cores=s.cores, ranks=max(1, len(s.ranks)), plan_by=s.plan_by, starved=s.starved is True, index=k,
                mode_traits=s.mode_traits)
        for k, s in enumerate(summaries)
    ])  # fmt: skip


def compare_summaries(
    summaries: Sequence[RunSummary], baseline: int
) -> tuple[list[float | None], list[bool | None]]:
    """Each run's speedup against `summaries[baseline]`, and whether it is within noise of it."""
    base = summaries[baseline].unprofiled
    speedups = [speedup(base, s.unprofiled) for s in summaries]
    noise = [
        None if base is None or s.unprofiled is None else s.unprofiled.within_noise(base) for s in summaries
    ]
    return speedups, noise


def compare(runs: Sequence[LoadedRun], baseline: int | None = None) -> Comparison:
    """Summaries, speedups against the baseline (default: `default_baseline`) and the op diff."""
    labels = unique_labels([run_label(r.trace, r.run, r.path) for r in runs])
    summaries = [summarize(r.trace, r.run, r.path, label, r.ranks) for r, label in zip(runs, labels)]
    chosen = baseline is not None
    if baseline is None:
        baseline = default_baseline(summaries)
    if not 0 <= baseline < len(summaries):
        raise IndexError(
            f"baseline {baseline} is not one of the {len(summaries)} runs (0 to {len(summaries) - 1})"
        )
    speedups, noise = compare_summaries(summaries, baseline)
    return Comparison(
        summaries, baseline, speedups, noise, op_diff([r.trace for r in runs]), baseline_chosen=chosen,
        parts=summary_parts(summaries),
    )  # fmt: skip
