"""Thread sweeps: profiling runs per cell (mode × inter-op × intra-op threads), side by side.

`run_sweep(request, on_event, cancel)` runs every cell through the runner engine (`run_profile`: a
fresh worker each, the run folder's promises) into DIR/<mode>-<interop>x<intra>/, and keeps
DIR/sweep.json up to date, rewritten atomically after each cell's run, so a killed sweep keeps the
cells it finished:

    {"sweep": 3, "demo", "model", "modes", "interop", "intra", "steps", "warmup", "device", "cores",
     "complete": bool, "cancelled": null | "SIGINT", "best": INDEX | null, "passes": N,
     "ties": [INDEX, …],
     "advice": null | {"text", "winner": null | {"mode", "interop", "intra", "index"}, "reason",
                       "parts": null | {"plan", "parallel", "whole", "plan_by", "sequential", "one_thread"}},
     "cells": [{"mode", "interop", "intra", "run": SUBDIR, "status": "done" | "failed" | "not run",
                "oversubscribed": the threads it computes with > cores, "median_ms", "unprofiled_median_ms",
                "unprofiled_spread_ms": [min, q1, q3, max], "error", "exit_code",
                "pass_medians_ms": [ms, …], "failed_passes", "any_interop", "starved": bool,
                "busy": bool | null,
                "plan_by": "TorchScript's plan"}]}

**Passes** (`--passes N`, default 3): a shared machine drifts between runs minutes apart by more
than one run's steps spread, so every cell runs N times, round-robin (pass 1 runs every cell in
order, then pass 2 every cell again…: ABC ABC ABC, never AAA BBB), each run a fresh worker. A cell's
`unprofiled_median_ms` is the median of its passes' unprofiled medians (`pass_medians_ms`, in the
order run), its spread and `unprofiled_steps` those of every pass's unprofiled steps pooled, its
profiled `median_ms` the median of its passes'. With one pass a cell is its run's numbers, as
before passes. The cell's folder holds its latest finished pass's run (each pass's run replaces the
one before, by the run folder's rules; a failed pass leaves the earlier run there): clicking a cell
shows that run, and sweep.json holds what every pass gave. A cell whose first pass failed is not run
again (a mode that cannot run here fails every time); a later pass that fails is counted in
`failed_passes`, its message in `error`, and the cell keeps the passes that finished.

**Starved cells**: a cell is `"starved": true` when the run of any of its passes was (run.json's
`starved`, `profiling/trace/starved.py`: it got, or the machine's load left it, fewer cores than its
threads could use). The sweep's `advice` (`profiling/trace/advice.py`, rewritten with each cell) never
names a starved cell the winner or the loser. A cell is `"busy": true` when any of its passes ran
while other processes took more than about a fifth of the cores (run.json's `load.busy`): not
starved, perhaps, but its time is not comparable with a quiet run's, so the advice's line and
reason end with which of the two cells it compares ran on a busy machine (`sweep_advice`), and
the table, the best cell's line and the heatmap say so of each such cell (`load_sweep` reads
`busy` from the cells' run.json for a sweep.json of before it).

**The parts**: each cell says how its mode's plan is named in a speedup's parts (`plan_by`, the
registry's `ModeTraits.plan_title`, as run.json's `plan_by`: sweep.json holds it so that the advice,
read from sweep.json alone by `branchscope sweep`, the Sweep tab and scripts, names the plan in the
mode's words). Where the advice names a fork or threads cell M I×J and the sequential 1×J and M 1×J
cells finished unstarved, its line and its `parts` split M I×J's speedup over sequential 1×J into
its plan and its threads (`profiling/trace/parts.py`, from the cells' medians).

**The same configuration once**: a mode that starts no inter-op pool (sequential, streams: the
registry's `starts_interop_pool`) runs the same whatever the inter-op count, so it runs once per
intra-op count, as 1×J, marked `"any_interop": true` (the heatmap spans it over every inter-op
column), never as several cells that differ only by drift.

**Ties** (`SweepRecord.tie_indices`): every finished cell within noise of the best — their pooled
steps' interquartile ranges overlap, or the ranges of their passes' medians do
(`step_stats.within_noise_over_passes`). `best` is the finished cell with the lowest unprofiled
median; `ties` lists it first, then the cells within noise of it; when it holds several, "best" is
that set (`best_text`). A failed cell keeps its message and null numbers and the sweep goes on; a
cancelled sweep marks the cell it stopped and those after it "not run" in the first pass, and keeps
each cell's finished passes in a later one.

**Skipped cells**: the cells of a mode that cannot run under the sweep's Python (`modes_skipped`:
fork without TorchScript) stay "not run", its line their `error`, exit code 3 (`CellRecord.skipped`);
the rest run. Every cell skipped: exit 3.

DIR follows the run folder's rules (branchscope.profiling.run.folder): it is locked while the sweep
runs, and refused when it holds files branchscope did not write (unless --overwrite). What is ours:
an earlier sweep.json of ours and the cell folders it lists, and an earlier run's files. Cell folders
of an earlier sweep that this one does not run lose the files branchscope wrote in them (and go when
that leaves them empty), as a run folder drops an earlier run's files.

No torch and no Qt here.
"""

from __future__ import annotations

import argparse
import signal
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.folder import (
    RunFolderError,
    SweepFolder,
    describe_os_error,
    write_record_atomic,
)
from branchscope.profiling.run.interpreter import InterpreterError, modes_unavailable
from branchscope.profiling.run.modes import MODE_NAMES, MODES
from branchscope.profiling.run.options import RunOptions, add_options
from branchscope.profiling.run.outcome import Ended, RunError, RunResult
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_MODE, EXIT_OK, RunRequest
from branchscope.profiling.run.runner import run_profile, validate
from branchscope.profiling.trace.events import CellEvent, Event, ProgressEvent, SweepEvent
from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RunRecord, read_run_record
from branchscope.profiling.trace.sources import read_sweep
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import (
    CELL_FOLDER,
    DONE,
    FAILED,
    NOT_RUN,
    SWEEP_FORMAT,
    SWEEP_JSON,
    CellRecord,
    SweepRecord,
)
from branchscope.profiling.trace.sweep_text import sweep_advice

#: Passes a sweep runs when not told (`--passes`).
DEFAULT_PASSES = 3


def any_interop(mode: str) -> bool:
    """Whether `mode` starts no inter-op pool, so its runs are the same at every inter-op count."""
    m = MODES.get(mode)
    return m is not None and not m.starts_interop_pool


class SweepError(Exception):
    """A sweep.json that cannot be read, or a DIR that cannot take a sweep; one line for `error: …`."""


@dataclass(frozen=True)
class SweepCell:
    mode: str
    interop: int
    intra: int

    @property
    def run(self) -> str:
        """The cell's run folder inside DIR, e.g. fork-2x1."""
        return f"{self.mode}-{self.interop}x{self.intra}"

    @property
    def label(self) -> str:
        return f"{self.mode} {self.interop}×{self.intra}"


@dataclass
class SweepRequest:
    """A sweep: the values of each axis, and the run options every cell shares (the model, steps,
    timeout per cell, ranks…)."""

    out: Path
    modes: tuple[str, ...]
    interop: tuple[int, ...]
    intra: tuple[int, ...]
    options: RunOptions = field(default_factory=RunOptions)
    overwrite: bool = False
    #: How many times each cell runs, round-robin (see the module docstring).
    passes: int = DEFAULT_PASSES

    def cells(self) -> list[SweepCell]:
        """Mode-major, then inter-op, then intra-op, each in the order given; a mode without an
        inter-op pool once per intra-op count, as 1×J (`any_interop`)."""
        return [SweepCell(m, i, j) for m in self.modes for i in self.interop_of(m) for j in self.intra]

    def interop_of(self, mode: str) -> tuple[int, ...]:
        """The inter-op counts `mode` runs at: all of them, or (1,) for a mode that starts no pool."""
        return (1,) if any_interop(mode) else self.interop

    def run_request(self, cell: SweepCell) -> RunRequest:
        return RunRequest(
            mode=cell.mode,
            interop=cell.interop,
            intra=cell.intra,
            out=Path(self.out) / cell.run,
            options=self.options,
            overwrite=self.overwrite,
        )

    def argv(self) -> list[str]:
        """The options of `branchscope sweep` that `add_sweep_arguments` reads back into this request."""
        args = self.options.argv()
        args += ["--modes", ",".join(self.modes)]
        args += ["--interop", ",".join(map(str, self.interop)), "--intra", ",".join(map(str, self.intra))]
        args += ["--out", str(self.out), "--passes", str(self.passes)]
        if self.overwrite:
            args.append("--overwrite")
        return args


def _comma_list(kind: Callable[[str], Any], what: str) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        values: list[Any] = []
        for part in text.split(","):
            try:
                value = kind(part.strip())
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not {what}" + (f" ({exc})" if str(exc) else "")) from None
            if value not in values:
                values.append(value)
        return tuple(values)

    return parse


def _mode(text: str) -> str:
    if text not in MODES:
        raise ValueError(f"one of {', '.join(MODE_NAMES)}")
    return text


def _threads(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("at least 1")
    return value


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `branchscope sweep` (read back by `sweep_request_from_args`): the run
    options every cell shares (`options.add_options`), the axes, DIR."""
    add_options(p)
    p.add_argument("--modes", type=_comma_list(_mode, "a mode"), required=True, metavar="M,M",
                   help=f"modes to run, comma-separated ({', '.join(MODE_NAMES)})")  # fmt: skip
    p.add_argument("--interop", type=_comma_list(_threads, "a thread count"), required=True, metavar="N,N",
                   help="inter-op thread counts, comma-separated")  # fmt: skip
    p.add_argument("--intra", type=_comma_list(_threads, "a thread count"), required=True, metavar="N,N",
                   help="intra-op thread counts, comma-separated")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where sweep.json and one run folder per cell go: a new or empty folder, or an earlier sweep's")  # fmt: skip
    p.add_argument("--passes", type=_threads, default=DEFAULT_PASSES, metavar="N",
                   help=f"run every cell N times, round-robin, each a fresh worker; a cell's figure is the median "
                        f"over its passes (default {DEFAULT_PASSES}; 1: each cell once)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true",
                   help="write into DIR (and the cells' folders) even though they hold files branchscope did not write")  # fmt: skip


def sweep_request_from_args(args: argparse.Namespace) -> SweepRequest:
    return SweepRequest(
        out=args.out,
        modes=tuple(args.modes),
        interop=tuple(args.interop),
        intra=tuple(args.intra),
        options=RunOptions.from_args(args),
        overwrite=bool(args.overwrite),
        passes=int(args.passes),
    )


# ---------------------------------------------------------------- sweep.json


def empty_cell(cell: SweepCell, cores: int) -> CellRecord:
    """A cell not run (yet)."""
    return CellRecord(
        mode=cell.mode,
        interop=cell.interop,
        intra=cell.intra,
        run=cell.run,
        status=NOT_RUN,
        oversubscribed=traits_of(cell.mode).oversubscribes(cell.interop, cell.intra, cores),
        any_interop=any_interop(cell.mode),
        plan_by=MODES[cell.mode].traits.plan_title if cell.mode in MODES else None,
        mode_traits=MODES[cell.mode].traits if cell.mode in MODES else None,
    )


def skipped_cell(cell: SweepCell, why: str, cores: int) -> CellRecord:
    """A cell not run because its mode cannot run under the sweep's Python (`why`: the mode's line)."""
    return msgspec.structs.replace(empty_cell(cell, cores), error=why, exit_code=EXIT_MODE)


def modes_skipped(modes: Iterable[str], python: Path | None) -> dict[str, str]:
    """Those of `modes` that cannot run under `python` (None: this process's own), with why: its probe
    (`interpreter.modes_unavailable`), asked only when one of them has a check. A sweep skips their
    cells, `speedup` their configurations. A Python that cannot be probed skips nothing (each run says why)."""
    modes = list(modes)
    if not any(MODES[m].check is not None for m in modes if m in MODES):
        return {}
    try:
        problems = modes_unavailable(python)
    except InterpreterError:
        return {}
    return {m: problems[m] for m in modes if m in problems}


def cell_record(cell: SweepCell, result: RunResult, cores: int) -> CellRecord:
    """The cell's entry in sweep.json from its run's result: numbers from run.json, or the error.

    The spread is run.json's "unprofiled_spread_ms" when it has one, else computed from its
    "unprofiled_steps_ms" (StepStats); the median likewise.
    """
    record = empty_cell(cell, cores)
    if not result.ok:
        return msgspec.structs.replace(record, status=FAILED, error=result.message or "the run failed", exit_code=result.exit_code)
    run = result.run or RunRecord()
    stats = run.unprofiled_stats
    spread = run.unprofiled_spread_ms
    if spread is None or len(spread) != 4:
        spread = stats.rounded_spread() if stats is not None else None
    median = run.unprofiled_median_ms
    if median is None and stats is not None:
        median = round(stats.median, 4)
    return msgspec.structs.replace(
        record,
        status=DONE,
        exit_code=EXIT_OK,
        median_ms=run.median_ms,
        unprofiled_median_ms=median,
        unprofiled_spread_ms=spread,
        unprofiled_steps=stats.n if stats is not None else None,
        starved=run.starved is True,
        busy=run.load.busy if run.load is not None else None,
    )


@dataclass
class CellPasses:
    """What a cell's passes gave so far: each run's cell record and unprofiled steps."""

    records: list[CellRecord] = field(default_factory=list)
    steps: list[list[float]] = field(default_factory=list)

    def add(self, record: CellRecord, result: RunResult) -> None:
        self.records.append(record)
        run = result.run if result.ok else None
        self.steps.append(list(run.unprofiled_steps_ms or []) if run is not None else [])


def combined_record(cell: SweepCell, passes: CellPasses, cores: int) -> CellRecord:
    """The cell's entry in sweep.json over its passes so far (see the module docstring)."""
    if not passes.records:
        return empty_cell(cell, cores)
    done = [(r, s) for r, s in zip(passes.records, passes.steps) if r.status == DONE and r.unprofiled_median_ms is not None]
    failures = [r for r in passes.records if r.status != DONE]
    if not done:
        return passes.records[-1]
    medians = [r.unprofiled_median_ms for r, _ in done if r.unprofiled_median_ms is not None]
    record = msgspec.structs.replace(
        done[-1][0],
        pass_medians_ms=medians,
        failed_passes=len(failures),
        error=failures[-1].error if failures else None,
        starved=any(r.starved for r, _ in done),
        busy=_any_known([r.busy for r, _ in done]),
    )
    if len(done) == 1:
        return record  # one pass: its run's own numbers
    pooled = StepStats.of([x for _, steps in done for x in steps])
    profiled = [r.median_ms for r, _ in done if r.median_ms is not None]
    return msgspec.structs.replace(
        record,
        unprofiled_median_ms=round(statistics.median(medians), 4),
        unprofiled_spread_ms=pooled.rounded_spread() if pooled is not None else None,
        unprofiled_steps=pooled.n if pooled is not None else None,
        median_ms=round(statistics.median(profiled), 4) if profiled else None,
    )


def _any_known(flags: list[bool | None]) -> bool | None:
    """True when any flag is, False when every one is known and none is, else None."""
    if any(flags):
        return True
    return None if any(f is None for f in flags) else False


def new_sweep(req: SweepRequest, cores: int, skipped: dict[str, str] | None = None) -> SweepRecord:
    """sweep.json before any cell ran (every cell "not run", those of a mode in `skipped` with why,
    `skipped_cell`): what a sweep writes first, and what the window shows as it starts one."""
    skip = skipped or {}
    opts = req.options
    return SweepRecord(
        sweep=SWEEP_FORMAT,
        demo=opts.demo,
        model=str(Path(opts.model).resolve()) if opts.model is not None else None,
        modes=list(req.modes),
        interop=list(req.interop),
        intra=list(req.intra),
        steps=opts.steps,
        warmup=opts.warmup,
        device=opts.device,
        nproc=opts.nproc,
        cores=cores,
        cells=[skipped_cell(c, skip[c.mode], cores) if c.mode in skip else empty_cell(c, cores) for c in req.cells()],
        passes=req.passes,
        ties=[],
    )


def load_sweep(folder: Path) -> SweepRecord:
    """FOLDER/sweep.json, checked (`sources.read_sweep`): raises SweepError with one line when it is
    not a sweep of ours."""
    try:
        sweep = read_sweep(Path(folder))
    except TraceFormatError as exc:
        raise SweepError(str(exc)) from None
    _read_busy(sweep, Path(folder))
    return sweep


def _read_busy(sweep: SweepRecord, folder: Path) -> None:
    """A finished cell whose sweep.json does not say whether the machine was busy (written before
    `busy`) takes it from its folder's run.json, its latest pass's run: a sweep of before it still
    marks the cells that ran on a busy machine."""
    for cell in sweep.cells:
        if cell.busy is None and cell.status == DONE and cell.run is not None and CELL_FOLDER.fullmatch(cell.run):
            run = read_run_record(folder / cell.run, follow_symlinks=False)
            if run is not None and run.load is not None:
                cell.busy = run.load.busy


# ---------------------------------------------------------------- running


@dataclass
class SweepResult(Ended):
    exit_code: int
    out: Path
    #: sweep.json as last written (None when the sweep never started).
    sweep: SweepRecord | None = None
    message: str | None = None
    cancelled_by: int | None = None


def validate_sweep(req: SweepRequest) -> str | None:
    """What is wrong with the request's axes (one line), or None."""
    for name, values in (("--modes", req.modes), ("--interop", req.interop), ("--intra", req.intra)):
        if not values:
            return f"{name} needs at least one value"
    bad = [m for m in req.modes if m not in MODES]
    if bad:
        return f"--modes {bad[0]!r} is not one of: {', '.join(MODE_NAMES)}"
    for name, values in (("--interop", req.interop), ("--intra", req.intra)):
        low = [v for v in values if v < 1]
        if low:
            return f"{name} must be at least 1, not {low[0]}"
    if req.passes < 1:
        return f"--passes must be at least 1, not {req.passes}"
    if req.options.nnodes > 1:  # each cell would need every node to run it in step with the others
        return "a sweep runs on one machine: --nnodes is for `branchscope profile`"
    return None


def run_sweep(
    req: SweepRequest,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
) -> SweepResult:
    """Runs every cell of the sweep in turn; never raises for a failed cell or sweep.

    `on_event` receives a `SweepEvent` once sweep.json is first written, then `ProgressEvent`s
    (with the cell's `index`) during a cell and a `CellEvent` after each (index counts from 0, as
    sweep.json's cells). Exit code: 0 when some cell finished (failed cells are in sweep.json), the first failure's
    when none did, 2 when the request or DIR is refused, 128 + signal when `cancel` was set.
    """
    out = Path(req.out)
    problem = validate_sweep(req)
    if problem:
        return SweepResult(EXIT_BAD_INPUT, out, message=problem)
    cells = req.cells()
    try:  # what would fail every cell (a missing model file, a bad --device) fails the sweep at once
        validate(req.run_request(cells[0]))
    except RunError as exc:
        return SweepResult(exc.exit_code, out, message=str(exc))
    emit = on_event or (lambda event: None)
    cores = usable_cores()
    folder = SweepFolder(out, [cell.run for cell in cells], overwrite=req.overwrite)
    try:
        folder.open()
    except RunFolderError as exc:
        return SweepResult(EXIT_BAD_INPUT, out, message=str(exc))
    try:
        sweep = new_sweep(req, cores, modes_skipped(req.modes, req.options.python))
        try:
            _write(out, sweep)
        except OSError as exc:
            return SweepResult(EXIT_BAD_INPUT, out, message=f"cannot write {out / SWEEP_JSON}: {describe_os_error(exc, with_file=False)}")
        emit(SweepEvent(out=str(out), sweep=sweep))
        first_failure: RunResult | None = None
        passes = [CellPasses() for _ in cells]
        stopped_in = 0  # the pass a cancel stopped (from 1), 0: none
        for k in range(1, req.passes + 1):
            for index, cell in enumerate(cells):
                if cancel is not None and cancel.is_set():
                    stopped_in = k
                    break
                if sweep.cells[index].skipped or (k > 1 and sweep.cells[index].status != DONE):
                    continue  # its mode cannot run here (skipped), or its first pass failed: it fails every time

                def progress(event: Event, index: int = index) -> None:
                    if isinstance(event, ProgressEvent):
                        emit(ProgressEvent(index=index, step=event.step, of=event.of))

                result = run_profile(req.run_request(cell), progress, cancel)
                if result.cancelled_by is not None:
                    stopped_in = k
                    break
                passes[index].add(cell_record(cell, result, cores), result)
                record = combined_record(cell, passes[index], cores)
                sweep.cells[index] = record
                sweep.best = sweep.best_index()
                sweep.ties = sweep.tie_indices()
                sweep.advice = sweep_advice(sweep)
                if not result.ok and first_failure is None:
                    first_failure = result
                _save(out, sweep)
                emit(CellEvent(index=index, of=len(cells), out=str(out), folder=str(out / cell.run), cell=record,
                               best=sweep.best, sweep_pass=k, passes=req.passes, ties=sweep.ties))  # fmt: skip
            if stopped_in:
                break
        if cancel is not None and cancel.is_set():
            return _cancelled(out, sweep, cancel, stopped_in or req.passes, req.passes)
        sweep.complete = True
        _save(out, sweep)
        if sweep.best is None and first_failure is not None:
            return SweepResult(first_failure.exit_code, out, sweep, message=f"no cell ran: {first_failure.message}")
        skipped = [c.skipped for c in sweep.cells if c.skipped]
        if sweep.best is None and skipped:
            return SweepResult(EXIT_MODE, out, sweep, message=f"no cell ran: {skipped[0]}")
        return SweepResult(EXIT_OK, out, sweep)
    finally:
        folder.close()


def _cancelled(out: Path, sweep: SweepRecord, cancel: CancelFlag, stopped_in: int, passes: int) -> SweepResult:
    """A cancelled sweep (in pass `stopped_in`): sweep.json says so, and the result what ran."""
    signum = cancel.signum or signal.SIGTERM
    name = signal.Signals(signum).name
    sweep.cancelled = name
    _save(out, sweep)
    done = sum(1 for c in sweep.cells if c.status != NOT_RUN)
    if stopped_in > 1:
        message = f"cancelled by {name} in pass {stopped_in} of {passes}; each cell keeps the passes it finished"
    else:
        message = f"cancelled by {name}; {done} of {len(sweep.cells)} cells ran, the rest are marked not run"
    return SweepResult(128 + signum, out, sweep, message=message, cancelled_by=signum)


def _write(out: Path, sweep: SweepRecord) -> None:
    write_record_atomic(out / SWEEP_JSON, sweep)


def _save(out: Path, sweep: SweepRecord) -> None:
    """Rewrites sweep.json atomically; a failed write (disk full) leaves the last one and the sweep goes on."""
    try:
        _write(out, sweep)
    except OSError:
        pass
