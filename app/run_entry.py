"""One row of the runs list, without Qt: what ran (`RunSpec`) and what the list knows of it (`Entry`).

An `Entry` is a finished run (its `RunSpec` and `run.json`), a run folder read from disk, or an
opened trace file (several rank files merged into one entry); `entry_for_path` makes the entry of
a run folder or trace file opened from disk, labelled from its run.json or the trace's
"branchscope" object. What it says of itself (its mode, threads, model, step times, how the window
names it) it reads from its spec, else its run.json, else the trace's own record. The list of
entries, their baselines and speedups are `app/runs.py`'s.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from branchscope.profiling.run.modes import MODES
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.parts import PartRun
from branchscope.profiling.trace.records import RUN_JSON, RunRecord
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.sources import Source, is_sweep_folder, open_source
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import CELL_FOLDER

if TYPE_CHECKING:
    from branchscope.profiling.trace.model import Trace


@dataclass(frozen=True)
class RunSpec:
    """What to run: a mode and thread counts, and the model and how it runs (`RunOptions`: the
    runner's arguments, as `branchscope profile` and the sweep take them)."""

    mode: str
    interop: int
    intra: int
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def model_key(self) -> str:
        """Identifies the model across runs (runs compare only with runs of one model)."""
        return self.options.model_key

    @property
    def model_label(self) -> str:
        return self.options.model_label

    def request(self, out: Path) -> RunRequest:
        """The runner's request for this run, writing into `out`."""
        return RunRequest(mode=self.mode, interop=self.interop, intra=self.intra, out=out, options=self.options)

    def runner_arguments(self, out: Path) -> list[str]:
        return self.request(out).argv() + ["--jsonl"]

    @classmethod
    def from_record(cls, run: RunRecord) -> RunSpec | None:
        """The spec that would repeat a run.json's run; None when it does not say enough (a
        TorchScript archive is repeatable only when run.json lists its input shapes)."""
        options = RunOptions.from_record(run)
        if options is None or run.mode is None or run.interop is None or run.intra is None:
            return None
        return cls(run.mode, run.interop, run.intra, options)


@dataclass(eq=False)
class Entry:
    """A row of the runs list: a finished run, or a trace file that was opened."""

    label: str
    trace_path: Path
    spec: RunSpec | None = None
    run: RunRecord | None = None
    #: The loaded trace, or None when it is not among the traces kept in memory.
    trace: Trace | None = None
    #: Further rank files merged with `trace_path` into one trace.
    more_paths: tuple[Path, ...] = ()
    #: The trace's "branchscope" object, for a trace opened without its run.json.
    info: RunInfo | None = None
    _stats: tuple[object, StepStats | None] | None = field(default=None, repr=False)
    #: Read from disk (a run kept from an earlier session, a folder or file opened), not run in
    #: this window: a baseline only when the user sets it.
    from_disk: bool = False
    #: The sweep folder of a sweep cell's run: it compares only with a sequential 1×1 cell of it.
    sweep: Path | None = None
    #: When it ran, in seconds since the epoch (an entry from disk: its run.json's or trace's time).
    when: float = field(default_factory=time.time)
    #: The folder it was opened as (a distributed run's: the one holding rank-R/), None if not known.
    folder: Path | None = None

    @classmethod
    def of_source(cls, source: Source) -> Entry:
        """The entry of what `sources.open_source` opened (its trace not loaded): from disk."""
        if not source.traces:
            raise TraceFormatError(f"{source.path}: is a {source.kind}, not a run or a trace")
        spec = RunSpec.from_record(source.run) if source.run is not None else None
        first, *more = source.traces
        folder = source.folder
        sweep = folder.parent if CELL_FOLDER.fullmatch(folder.name) and is_sweep_folder(folder.parent) else None
        when = None
        for path in (folder / RUN_JSON, first):
            try:
                when = path.stat().st_mtime
                break
            except OSError:
                continue
        return cls(
            source.label, first, spec=spec, run=source.run, more_paths=tuple(more), info=source.info,
            from_disk=True, sweep=Path(os.path.realpath(sweep)) if sweep is not None else None,
            when=when if when is not None else time.time(), folder=folder,
        )  # fmt: skip

    @property
    def busy(self) -> bool:
        """Other processes took more than about a fifth of the cores while it timed its steps."""
        load = self.run.load if self.run is not None else None
        return load is not None and load.busy is True

    @property
    def sequential_1x1(self) -> bool:
        """A sequential 1×1 run with unprofiled step times: what a default baseline is."""
        baseline = traits_of(self.mode, self.run.mode_traits if self.run is not None else None).baseline
        return baseline and self.threads == (1, 1) and self.stats is not None

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file this entry's trace is read from."""
        return (self.trace_path, *self.more_paths)

    @property
    def median_ms(self) -> float | None:
        """The median profiled step (run.json "median_ms"); `stats` holds the unprofiled steps."""
        return self.run.median_ms if self.run is not None else None

    @property
    def stats(self) -> StepStats | None:
        """Median and spread of the unprofiled steps (the honest numbers); None without a run.json."""
        if self._stats is None or self._stats[0] is not self.run:
            self._stats = (self.run, self.run.unprofiled_stats if self.run is not None else None)
        return self._stats[1]

    @property
    def mode(self) -> str | None:
        if self.spec is not None:
            return self.spec.mode
        if self.run is not None and self.run.mode is not None:
            return self.run.mode
        return self.info.mode if self.info is not None else None

    @property
    def threads(self) -> tuple[int, int] | None:
        """(inter-op, intra-op) threads, when known."""
        if self.spec is not None:
            return self.spec.interop, self.spec.intra
        for known in (self.run, self.info):
            if known is not None and known.interop is not None and known.intra is not None:
                return known.interop, known.intra
        return None

    @property
    def model_key(self) -> str | None:
        """Which model ran (`RunSpec.model_key`); None for a trace that does not say."""
        if self.spec is not None:
            return self.spec.model_key
        if self.run is None or not self.run.model:
            return None
        if self.run.demo is not None:
            return f"demo:{self.run.demo}"
        return f"file:{os.path.abspath(self.run.model)}"

    @property
    def plan_by(self) -> str | None:
        """How a speedup's parts name its mode's plan: run.json's `plan_by`, else (a run.json of
        before it) the mode's own words from the registry."""
        if self.run is not None and self.run.plan_by:
            return self.run.plan_by
        mode = MODES.get(self.mode) if self.mode else None
        return None if mode is None else mode.traits.plan_title

    def part_run(self) -> PartRun:
        """This entry as the parts finder reads it: runs count together within one model and sweep."""
        threads = self.threads
        run = self.run
        return PartRun(
            self.mode, threads[0] if threads else None, threads[1] if threads else None,
            None if self.stats is None else self.stats.median, model=f"{self.model_key}|{self.sweep}",
            cores=None if run is None else run.cores, ranks=self.nproc or 1, plan_by=self.plan_by,
            starved=run is not None and run.starved is True,
        )  # fmt: skip

    @property
    def branch_count(self) -> int:
        """The branches the run found (run.json's, else the trace's own list)."""
        if self.run is not None and self.run.branches is not None:
            return len(self.run.branches)
        info = self.info or (self.trace.run_info if self.trace is not None else None)
        return len(info.branches) if info is not None else 0

    @property
    def title(self) -> str:
        """How the window's title and the runs list name it: model · mode · threads."""
        parts = [self.label]
        if self.mode:
            parts.append(self.mode)
        if self.threads:
            parts.append(f"{self.threads[0]}×{self.threads[1]}")
        return " · ".join(parts)

    # ---- what the run controls say of it (`RunControls.follow`) -------------------------------
    @property
    def picker_item(self) -> tuple | None:
        """The model picker's item of its model: ("demo", name) or ("file", path, input shapes);
        None when neither a run.json nor the trace names a model."""
        spec = self.spec
        if spec is not None:
            if spec.options.demo is not None:
                return ("demo", spec.options.demo)
            if spec.options.model is not None:
                return ("file", str(spec.options.model), tuple(spec.options.input_shapes))
        for known in (self.run, self.info):
            if known is not None and known.source == "demo" and known.model and known.model.startswith("demo "):
                return ("demo", known.model[len("demo ") :])
        return None

    @property
    def steps(self) -> int | None:
        """Its profiled steps, when known (a run read from disk: when its run.json says)."""
        if self.run is not None and self.run.steps is not None and self.run.steps >= 1:
            return self.run.steps
        return self.spec.options.steps if self.spec is not None and not self.from_disk else None

    @property
    def nproc(self) -> int | None:
        """Its processes (ranks), when known: 1 for a run of one process."""
        if self.spec is not None:
            return self.spec.options.nproc
        if self.run is None:
            return None
        return self.run.nproc if self.run.nproc is not None and self.run.nproc >= 1 else 1

    def shown_text(self, number: int) -> str:
        """What the run controls say while it is shown (`number`: its row, counted from 1): "shown:
        #2 inception · fork · 2×1" for a run of this window; "opened from disk: runs/x —
        inception · fork · 2×1" for a run folder read from disk, with its model's label from
        run.json; "opened from disk: t.json — a trace file" for a trace without a run.json."""
        ranks = f" · {self.nproc} processes" if (self.nproc or 1) > 1 else ""
        if not self.from_disk and self.spec is not None:
            return f"shown: #{number} {self.title}{ranks}"
        folder = self.folder or self.trace_path.parent
        if self.run is not None:
            where = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
            return f"opened from disk: {where} — #{number} {self.title}{ranks}"
        names = [p.name for p in self.paths]
        if len(names) > 3:  # a folder of many rank traces: where, and how many
            return f"opened from disk: {len(names)} traces in {self.paths[0].parent.name or '.'}/ ({names[0]} … {names[-1]}) — #{number} {self.title}"
        return f"opened from disk: {', '.join(names)} — #{number} a trace file ({self.title})"



def entry_for_path(path: str | os.PathLike[str]) -> Entry:
    """The entry of a run folder, a distributed run's folder, a folder of rank traces or a trace
    file opened from disk (`sources.open_source`; its trace not loaded). Raises `TraceFormatError`
    (the message names the path) for what is none of these, a sweep folder included."""
    return Entry.of_source(open_source(path))
