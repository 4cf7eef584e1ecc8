"""Committing a run: once every rank's results are complete, each rank's trace.json.gz is written
with its CPU samples (branchscope.profiling.run.finish), then the files are moved into OUT, run.json
last (`RunFolder.commit`), with the machine's load. A distributed run's top-level run.json lists its
ranks (`ranks_record`); a multi-node run's node 0 commits once every node's ranks are in
(`commit_nodes`). A failed run's files are kept in OUT/failed-run/ (`keep_failure`), the earlier
results untouched.

No torch here.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from branchscope.profiling.run.cpu_sampler import ThreadCpuSampler
from branchscope.profiling.run.finish import finish_trace
from branchscope.profiling.run.folder import RunFolder
from branchscope.profiling.run.interpreter import untested_torch_warning
from branchscope.profiling.run.machine_load import LoadMeter
from branchscope.profiling.run.nodes import NodeFailure, NodeFolder
from branchscope.profiling.run.outcome import RunResult, cancelled, describe_exit
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import EXIT_OK, EXIT_WORKER, RANK_FOLDER
from branchscope.profiling.trace.events import ExitedEvent
from branchscope.profiling.trace.records import DEFAULT_TRACE, RUN_FORMAT, RUN_JSON, RankRecord, RunRecord
from branchscope.profiling.trace.step_stats import StepStats


class Rank(Protocol):
    """What committing reads of a rank (`supervise.Rank`)."""

    rank: int
    sampler: ThreadCpuSampler | None
    exited: ExitedEvent | None


class Layout(Protocol):
    """What committing asks of a run's layout (`supervise.OneWorker`, `distributed.Distributed`):
    named here rather than imported, so that the supervisor, which commits, and the layouts do not
    import each other in a circle."""

    nproc: int

    def folder(self, rank: int) -> Path: ...
    def name(self, rank: Any, *, pid: bool = False) -> str: ...
    def trace_failed(self, rank: Any, exc: ValueError) -> str: ...
    def record(self, ranks: Any, runs: list[RunRecord]) -> RunRecord: ...


class NodesLayout(Layout, Protocol):
    """A multi-node run's layout (`distributed.Distributed`): which node this is of how many."""

    node: int
    nnodes: int
    host: str | None
    deadline: float
    cancel: CancelFlag | None


def commit_run(
    folder: RunFolder, layout: Layout, ranks: Sequence[Rank], runs: list[RunRecord], load: LoadMeter | None = None
) -> RunResult:
    """Every rank's results complete: each rank's trace.json.gz written with its CPU samples, then
    the run folder committed (run.json last, with the machine's `load` and, when others were busy,
    its warning)."""
    result = RunResult(EXIT_OK, folder.out)
    failed = finish_traces(folder.out, layout, ranks, runs, result)
    if failed is not None:
        return failed
    record = layout.record(ranks, runs)
    add_load(record, load)
    add_untested_torch(record)
    result.run = folder.commit(record)
    return result


def finish_traces(out: Path, layout: Layout, ranks: Sequence[Rank], runs: list[RunRecord], result: RunResult) -> RunResult | None:
    """Each rank's trace.json.gz written with its CPU samples (counted in `result`, with a note for
    a rank that ended badly after its results); a failed result when one cannot be written."""
    for rank, run in zip(ranks, runs, strict=True):
        sampler = rank.sampler
        if sampler is None:  # never said hello: an empty sampler, so the trace is still compressed
            sampler = ThreadCpuSampler(os.getpid())
            sampler.close()
        try:
            result.samples += finish_trace(layout.folder(rank.rank), sampler, run.trace_clock)
        except ValueError as exc:
            return RunResult(EXIT_WORKER, out, message=layout.trace_failed(rank, exc))
        code = rank.exited.code if rank.exited else None
        if code not in (0, None, -signal.SIGKILL):
            result.notes.append(f"{layout.name(rank)} ended with {describe_exit(code)} after writing complete results")
    return None


def add_load(record: RunRecord, load: LoadMeter | None) -> None:
    """The machine's load into `record`, with its warning when others were busy, and whether the
    run was starved of cores (`LoadMeter.starved`)."""
    if load is not None:
        record.load = load.record()
        record.starved = load.starved(record)
        warning = load.warning()
        if warning:
            record.warnings = [*(record.warnings or []), warning]


def add_untested_torch(record: RunRecord) -> None:
    """The warning of a torch newer than the newest tested (`interpreter.untested_torch_warning`)
    into `record`: said once per run (a distributed run's ranks share one torch), on the CLI with
    the run's other warnings and in the window."""
    warning = untested_torch_warning(record.torch)
    if warning:
        record.warnings = [*(record.warnings or []), warning]


#: What a distributed run's top-level run.json takes from its first rank's: the settings every rank
#: shares, and the warm-up (ranks warm up together: the same steps, settled or stopped alike; each
#: rank's own times are in its run.json).
_FIRST_RANKS = (
    "mode", "interop", "intra", "cores", "device", "torch", "model", "source", "input_shapes", "dtype", "steps",
    "warmup", "world_size", "backend", "train_step", "warmup_steps", "warmup_settled", "warmup_cap", "branches",
    "tracer",
)  # fmt: skip


def ranks_record(nproc: int, entries: list[tuple[int, RunRecord, int | None, str | None]]) -> RunRecord:
    """A distributed run's top-level run.json from its ranks' (rank, run.json, node, host): the first
    rank's settings, the slowest rank's step times step by step, and the ranks (rank, pid, device,
    their files; their node and host in a multi-node run)."""
    ranks = [rank for rank, *_ in entries]
    runs = [run for _, run, *_ in entries]
    first = runs[0]
    steps = _per_step_max([run.steps_ms for run in runs])
    unprofiled = _per_step_max([run.unprofiled_steps_ms for run in runs])
    profiled_stats, unprofiled_stats = StepStats.of(steps), StepStats.of(unprofiled)
    return RunRecord(
        format=RUN_FORMAT,
        **{name: getattr(first, name) for name in _FIRST_RANKS},
        nproc=nproc,
        steps_ms=[round(x, 4) for x in steps],
        median_ms=round(profiled_stats.median, 4) if profiled_stats else None,
        unprofiled_steps=len(unprofiled),
        unprofiled_steps_ms=[round(x, 4) for x in unprofiled],
        unprofiled_median_ms=round(unprofiled_stats.median, 4) if unprofiled_stats else None,
        unprofiled_spread_ms=unprofiled_stats.rounded_spread(4) if unprofiled_stats else None,
        warnings=[f"rank {rank}: {w}" for rank, run in zip(ranks, runs, strict=True) for w in run.warnings or []],
        ranks=[
            RankRecord(
                rank=rank,
                pid=run.pid,
                device=run.device,
                run=f"{RANK_FOLDER.format(rank=rank)}/{RUN_JSON}",
                trace=f"{RANK_FOLDER.format(rank=rank)}/{DEFAULT_TRACE}",
                median_ms=run.median_ms,
                unprofiled_median_ms=run.unprofiled_median_ms,
                node=node,
                host=host,
            )
            for rank, run, node, host in entries
        ],
        trace=f"{RANK_FOLDER.format(rank=ranks[0])}/{DEFAULT_TRACE}",
        complete=True,
    )


def _per_step_max(series: list[list[float] | None]) -> list[float]:
    """Step by step, the slowest rank's time: a distributed step ends when its last rank does."""
    if not all(series):
        return []
    return [max(xs) for xs in zip(*series, strict=False)]


def commit_nodes(
    folder: RunFolder, layout: NodesLayout, nodes: NodeFolder, ranks: Sequence[Rank], results: list[Any], load: LoadMeter | None
) -> RunResult:
    """A node of a multi-node run: its ranks' traces written; a node other than 0 leaves them for
    node 0 (`NodeFolder.done`); node 0 takes every other node's ranks as they come in
    (`NodeFolder.gather`, until --timeout) and commits the whole run."""
    out = folder.out
    result = RunResult(EXIT_OK, out)
    failed = finish_traces(out, layout, ranks, results, result)
    if failed is not None:
        return failed
    own = layout.record(ranks, results)
    mine = [r.rank for r in ranks]
    if layout.node != 0:  # its part, not the run: node 0 writes run.json (`complete`) once all are in
        nodes.done(mine)
        result.run = msgspec.structs.replace(own, nnodes=layout.nnodes, complete=False)
        return result
    cancel = layout.cancel
    try:
        parts = nodes.gather(layout.deadline, lambda: cancel is not None and cancel.is_set())
    except NodeFailure as exc:
        return RunResult(exc.exit_code, out, message=exc.message)
    if parts is None:
        assert cancel is not None
        return cancelled(out, cancel)
    entries: list[tuple[int, RunRecord, int | None, str | None]]
    entries = [(r.rank, run, layout.node, layout.host) for r, run in zip(ranks, results, strict=True)]
    entries += [(rank, run, rec.node, rec.host) for rec, runs in parts for rank, run in runs]
    record = ranks_record(layout.nproc, sorted(entries, key=lambda e: e[0]))
    record.nnodes = layout.nnodes
    add_load(record, load)
    add_untested_torch(record)
    result.run = folder.commit(record)
    return result


def keep_failure(folder: RunFolder, source: Path, result: RunResult) -> None:
    """A failed run's files (its log, the model's plan) found in `source` kept in OUT/failed-run/
    (`RunFolder.keep_failure`); `result`'s message then says where."""
    kept = folder.keep_failure(source, result.message or "")
    if kept:
        result.message = f"{result.message} — see {' and '.join(map(str, kept))}"
