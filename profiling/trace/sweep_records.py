"""What a sweep and `branchscope speedup` write on disk, as typed records: a sweep folder's
sweep.json (`SweepRecord`, its cells `CellRecord`, its advice `AdviceRecord`) and speedup.json
(`SpeedupRecord`, with `PairedTimesRecord`, what the paired worker hands the runner).

Read as run.json is (`records.lenient`: a field missing or of the wrong type keeps its default);
`SWEEP_FORMAT` and `SPEEDUP_FORMAT` say which version wrote a file, and every earlier one still
opens. No torch, no Qt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from branchscope.profiling.trace.mode_traits import ModeTraits
from branchscope.profiling.trace.records import MODE_NAME, PredictionRecord, lenient
from branchscope.profiling.trace.step_stats import Spread, within_noise_over_passes

SWEEP_JSON = "sweep.json"
#: sweep.json's "sweep" key: its version, and what marks a sweep.json as branchscope's (1: before
#: "nproc"; 2: before the cells' "starved" and "plan_by" and the sweep's "advice"). Every version still opens.
SWEEP_FORMAT = 3
SWEEP_FORMATS = (1, 2, 3)

#: A sweep cell's status.
DONE, FAILED, NOT_RUN = "done", "failed", "not run"
#: A sweep cell's run folder inside the sweep's folder, as branchscope names it ("fork-2x1"): a name
#: read from sweep.json is data, and counts only in this shape ("..", "a/b", a path never do).
CELL_FOLDER = re.compile(rf"{MODE_NAME.pattern}-[1-9][0-9]{{0,5}}x[1-9][0-9]{{0,5}}")


class WinnerRecord(msgspec.Struct, kw_only=True):
    """The run the advice names the winner: its configuration and `index`, its place among what was
    compared (a sweep.json cell's index in "cells", a `compare` run's index as --baseline K counts)."""

    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    index: int | None = None


class AdviceRecord(msgspec.Struct, kw_only=True):
    """Which way of using the cores served a model better (`profiling/trace/advice.py`), as sweep.json
    and `compare --json` write it: the line (`text`), the `winner` (null when the two are within
    noise, when either was starved of cores, or when no pair could be made) and the `reason`, a
    sentence that begins with what decided it ("faster: …", "within noise: …", "starved: …",
    "not paired: …"). `parts`: the paired fork or threads run's speedup over sequential 1×J in
    its parts (`profiling/trace/parts.py`: from the medians of the sequential 1×J and M 1×J runs
    beside it, no intervals), null where those are not among the runs or either of the pair was
    starved."""

    text: str = ""
    winner: WinnerRecord | None = None
    reason: str = ""
    parts: SpeedupPartsRecord | None = None


#: A skipped cell's exit code: its mode cannot run here (`protocol.EXIT_MODE`, which the trace
#: engine cannot import; tests/run/test_sweep_skips.py checks the two agree).
MODE_CANNOT_RUN = 3


class CellRecord(msgspec.Struct, kw_only=True):
    """One cell of a sweep: its configuration, its run folder (DIR/MODE-IxJ), what it gave."""

    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    run: str | None = None
    status: str = NOT_RUN
    oversubscribed: bool = False
    median_ms: float | None = None
    unprofiled_median_ms: float | None = None
    #: [min, q1, q3, max] of the unprofiled steps.
    unprofiled_spread_ms: Spread | None = None
    unprofiled_steps: int | None = None
    error: str | None = None
    exit_code: int | None = None
    #: The unprofiled median of each pass that finished, in the order they ran (`sweep.py`: the
    #: cell's `unprofiled_median_ms` is their median, its spread that of the passes' steps pooled).
    pass_medians_ms: list[float] | None = None
    #: Passes of this cell that failed while another finished (`error` holds the last one's message).
    failed_passes: int = 0
    #: The mode starts no inter-op pool (sequential, streams): this one run stands for every inter-op
    #: count of the sweep, which runs it once per intra-op count.
    any_interop: bool = False
    #: One of its passes' runs was starved of cores (run.json's `starved`): it names no winner.
    starved: bool = False
    #: One of its passes ran while other processes took more than about a fifth of the cores
    #: (run.json's `load.busy`): its time is not comparable with a quiet run's, and the sweep's
    #: advice says so when it names it. None: not known (a sweep.json of before it, or a run whose
    #: load was not measured; `load_sweep` then reads the cell's run.json).
    busy: bool | None = None
    #: How a speedup's parts name its mode's plan ("TorchScript's plan": `ModeTraits.plan_title`,
    #: as run.json's `plan_by`), for the advice's parts; None in a sweep.json of before it.
    plan_by: str | None = None
    #: Its mode's traits (`mode_traits.ModeTraits`, as run.json's), so that a sweep of a mode
    #: registered elsewhere reads right without it; None in a sweep.json of before them.
    mode_traits: ModeTraits | None = None

    @property
    def label(self) -> str:
        return f"{self.mode} {self.interop}×{self.intra}"

    @property
    def skipped(self) -> str | None:
        """Why the sweep did not run it (its mode cannot run under the sweep's Python: the mode's own
        line, e.g. fork without TorchScript), or None: it ran, or was not run (yet: cancelled; or
        a status this reader does not know, read as not run with whatever error it kept)."""
        return self.error if self.status == NOT_RUN and self.exit_code == MODE_CANNOT_RUN and self.error else None

    @property
    def load_word(self) -> str | None:
        """What the machine did to its time: "starved of cores", "busy machine", or None (a quiet
        run, or not known). Starved says more than busy (a starved run is never compared)."""
        if self.starved:
            return "starved of cores"
        return "busy machine" if self.busy else None

    def within_noise(self, other: CellRecord) -> bool:
        """Whether the two finished cells are within noise of each other (`step_stats.within_noise_over_passes`:
        their pooled steps' interquartile ranges, or the ranges of their passes' medians, overlap)."""
        a, b = self._noise(), other._noise()
        return a is not None and b is not None and within_noise_over_passes(a[0], a[1], b[0], b[1])

    def _noise(self) -> tuple[tuple[float, float], tuple[float, float]] | None:
        ms = self.unprofiled_median_ms
        if self.status != DONE or ms is None:
            return None
        spread = self.unprofiled_spread_ms
        iqr = (spread[1], spread[2]) if spread is not None and len(spread) == 4 else (ms, ms)
        medians = self.pass_medians_ms or [ms]
        return iqr, (min(medians), max(medians))


class SweepRecord(msgspec.Struct, kw_only=True):
    """A sweep folder's sweep.json: the axes, the run options of every cell, and the cells."""

    sweep: int = SWEEP_FORMAT
    demo: str | None = None
    model: str | None = None
    modes: list[str] | None = None
    interop: list[int] | None = None
    intra: list[int] | None = None
    steps: int | None = None
    warmup: int | None = None
    device: str | None = None
    nproc: int | None = None
    cores: int | None = None
    complete: bool = False
    cancelled: str | None = None
    best: int | None = None
    cells: list[CellRecord] = msgspec.field(default_factory=list)
    #: The passes asked for (each cell ran once per pass, round-robin); None: an earlier sweep's one.
    passes: int | None = None
    #: Every finished cell within noise of the best, the best first (`tie_indices`): "best" is this
    #: set when it holds several; `best` stays the lowest median for earlier readers.
    ties: list[int] | None = None
    #: Which way of using the cores served the model better among the finished cells
    #: (`profiling/trace/advice.py`); None when the cells are not of both ways (and before version 3).
    advice: AdviceRecord | None = None

    @classmethod
    def parse(cls, obj: Any) -> SweepRecord:
        return lenient(cls, obj)

    @property
    def model_label(self) -> str | None:
        return self.demo or (Path(self.model).name if self.model else None)

    def best_index(self) -> int | None:
        """The finished cell with the lowest unprofiled median (the first of equals); None when none finished."""
        best: tuple[float, int] | None = None
        for i, c in enumerate(self.cells):
            ms = c.unprofiled_median_ms
            if c.status == DONE and ms is not None and (best is None or ms < best[0]):
                best = (ms, i)
        return best[1] if best else None

    def tie_indices(self) -> list[int]:
        """The best cell and every finished cell within noise of it (`CellRecord.within_noise`), by
        median (the best first); [] when no cell finished."""
        best = self.best_index()
        if best is None:
            return []
        b = self.cells[best]
        tied = [i for i, c in enumerate(self.cells) if i != best and c.within_noise(b)]
        tied.sort(key=lambda i: (self.cells[i].unprofiled_median_ms or 0.0, i))
        return [best, *tied]

    def tied(self) -> list[int]:
        """`ties` as written, each a finished cell, else computed (a sweep.json of before ties)."""
        n = len(self.cells)
        if self.ties and all(0 <= i < n and self.cells[i].status == DONE for i in self.ties):
            return list(self.ties)
        return self.tie_indices()


def is_sweep_json(obj: Any) -> bool:
    """Whether decoded JSON is a sweep.json of branchscope's (its version and a list of cells)."""
    return isinstance(obj, dict) and obj.get("sweep") in SWEEP_FORMATS and isinstance(obj.get("cells"), list)


# ---------------------------------------------------------------- speedup.json (`branchscope speedup`)

SPEEDUP_JSON = "speedup.json"
#: speedup.json's format: 2 adds each added configuration's `"added": "parts"` and each parallel
#: configuration's `parts` (plan and parallel speedups) to what version 1 has; both are read.
SPEEDUP_FORMAT = 2
SPEEDUP_FORMATS = (1, 2)
#: `PairedConfigRecord.added` of a configuration `speedup` measured for the parts of another's speedup.
ADDED_FOR_PARTS = "parts"
#: What the paired worker writes into its staging folder (read by `run/paired.py`, never kept).
PAIRED_TIMES_JSON = "paired.json"
#: How `branchscope speedup` measured: one worker stepping the configurations in turn, or a fresh
#: worker per configuration in each round.
IN_ONE_WORKER = "in one worker"
ACROSS_WORKERS = "across workers"


class PairedConfigRecord(msgspec.Struct, kw_only=True):
    """One configuration of a paired measurement and the step times it gave (in the order taken;
    across workers: one per round, each a fresh worker's median)."""

    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    median_ms: float | None = None
    steps: int | None = None
    steps_ms: list[float] | None = None
    #: The plan's outputs against the model's own forward (the paired worker checks each plan once).
    max_abs_diff: float | None = None
    #: `ADDED_FOR_PARTS` where `speedup` measured it beside the user's configurations (format 2).
    added: str | None = None
    #: A pool mode's 1×J run as its plan with each branch waited for at once, on the pool of the
    #: worker's other configuration (format 2; `run/paired.py`'s `PairedConfig.one_at_a_time`).
    one_at_a_time: bool = False

    @property
    def label(self) -> str:
        return f"{self.mode} {self.interop}×{self.intra}" + (" (one branch at a time)" if self.one_at_a_time else "")


class PairedTimesRecord(msgspec.Struct, kw_only=True):
    """The paired worker's results (`PAIRED_TIMES_JSON`): each configuration's step times and, per
    round, the order the configurations ran in (indexes into `configs`)."""

    configs: list[PairedConfigRecord] = msgspec.field(default_factory=list)
    order: list[list[int]] = msgspec.field(default_factory=list)
    model: str | None = None
    device: str | None = None
    torch: str | None = None
    cores: int | None = None
    #: What the branches could give, from sequential steps the worker timed after the rounds.
    prediction: PredictionRecord | None = None
    complete: bool = False

    @classmethod
    def parse(cls, obj: Any) -> PairedTimesRecord:
        return lenient(cls, obj)


class SpeedupValueRecord(msgspec.Struct, kw_only=True):
    """A configuration's speedup over the baseline: the median of per-pair ratios (baseline / it),
    its 95% bootstrap interval, and whether that interval leaves 1.0 out."""

    median: float | None = None
    ci95: list[float] | None = None
    distinguishable: bool = False
    #: A parallel configuration's speedup in its parts (format 2; see `SpeedupPartsRecord`).
    parts: SpeedupPartsRecord | None = None


class SpeedupPartsRecord(msgspec.Struct, kw_only=True):
    """A parallel configuration M I×J's speedup over sequential 1×J in two parts, each paired:
    `plan`, M 1×J over sequential 1×J (what running the mode's plan on one thread changes: for fork,
    TorchScript's interpreter and fusion; for threads, its overhead), and `parallel`, M I×J over M
    1×J (what the I threads gave). `plan_by` names the plan in the mode's own words. Every field
    has a default, as `lenient` needs (a sweep.json's advice holds one too: untrusted data)."""

    plan: SpeedupValueRecord = msgspec.field(default_factory=SpeedupValueRecord)
    parallel: SpeedupValueRecord = msgspec.field(default_factory=SpeedupValueRecord)
    plan_by: str | None = None
    #: M I×J over sequential 1×J, paired as the parts are: the whole they split (the speedup
    #: itself when the baseline is sequential 1×J).
    whole: SpeedupValueRecord | None = None
    #: The configurations the parts compare, as indexes into `configs`: sequential 1×J and M 1×J.
    sequential: int | None = None
    one_thread: int | None = None


class SkippedConfigRecord(msgspec.Struct, kw_only=True):
    """A configuration `speedup` was asked for and did not measure: its mode cannot run under the
    worker's Python (fork without TorchScript); `reason`, the mode's own line of why."""

    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    reason: str = ""


class SpeedupRecord(msgspec.Struct, kw_only=True):
    """speedup.json (and `branchscope speedup --json`): the configurations measured in alternation,
    the baseline's index, one speedup per configuration (null for the baseline itself), how it was
    measured (`IN_ONE_WORKER` or `ACROSS_WORKERS`) and the order of each round; `prediction`, the
    speedup the branch graph allows (`prediction.prediction_json`: from sequential steps the paired worker
    timed; null without branches)."""

    paired: int = SPEEDUP_FORMAT
    demo: str | None = None
    model: str | None = None
    device: str | None = None
    cores: int | None = None
    measured: str | None = None
    rounds: int | None = None
    #: Across workers: the timed steps of each worker (its median is the round's time).
    worker_steps: int | None = None
    configs: list[PairedConfigRecord] = msgspec.field(default_factory=list)
    baseline: int = 0
    speedup: list[SpeedupValueRecord | None] = msgspec.field(default_factory=list)
    order: list[list[int]] = msgspec.field(default_factory=list)
    prediction: dict[str, Any] | None = None
    #: The configurations asked for whose mode cannot run here, left out, each with why.
    skipped: list[SkippedConfigRecord] = msgspec.field(default_factory=list)

    @classmethod
    def parse(cls, obj: Any) -> SpeedupRecord:
        return lenient(cls, obj)


def is_speedup_json(obj: Any) -> bool:
    """Whether decoded JSON is a speedup.json of branchscope's (its version and a list of configs)."""
    return isinstance(obj, dict) and obj.get("paired") in SPEEDUP_FORMATS and isinstance(obj.get("configs"), list)
