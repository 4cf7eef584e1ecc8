"""What a branchscope run writes into its trace, as the trace engine reads it.

A run's trace is a plain Chrome trace with three additions (docs/formats.md, the trace's object):

- a top-level `"branchscope"` object, the `RunInfo` record: run.json's facts that the trace's
  readers need, under run.json's keys (the worker makes it of its `RunRecord`, `RunInfo.of_run`),
  read once per trace with run.json's lenient parser (`Trace.run_info`), which every view and
  analysis reads instead of the raw dict;
- labels on events: `record_function("branch: NAME")` around each branch and
  `record_function("step N")` around each profiled step;
- the runner's per-thread CPU samples, counter events of category `cpu_sample`.

The run engine writes these (`branchscope.profiling.run.protocol` re-exports the labels); the trace
engine only reads them, so this module belongs to the trace side and imports nothing from the run side.
"""

from __future__ import annotations

from typing import Any

import msgspec

from branchscope.profiling.trace.labels import BRANCH_PREFIX as BRANCH_PREFIX  # re-exported: the labels' home
from branchscope.profiling.trace.labels import branch_label as branch_label
from branchscope.profiling.trace.labels import branch_name as branch_name
from branchscope.profiling.trace.mode_traits import ModeTraits
from branchscope.profiling.trace.records import (
    BranchRecord,
    BranchThreadRecord,
    LeftOutRecord,
    PredictionRecord,
    RunRecord,
    lenient,
    to_builtins,
)

#: Counter category of the runner's per-thread CPU samples.
CPU_SAMPLE_CATEGORY = "cpu_sample"


def step_label(i: int) -> str:
    """The label of profiled step i (from 1)."""
    return f"step {i}"


def cpu_sample_name(tid: int, thread_name: str) -> str:
    """The counter name of one thread's CPU samples."""
    return f"thread {tid} ({thread_name})"


class RunInfo(msgspec.Struct, kw_only=True, frozen=True):
    """The `"branchscope"` object of a run's trace: mode, threads, machine, thread ids, branches,
    each under its run.json key and of its run.json type (`records.RunRecord`, whose sub-records it
    holds).

    `interop_tids` are the inter-op pool's threads, `intra_tids` the intra-op (OpenMP) workers, found
    by the worker as they started; `thread_roles_known` says the trace lists them (so the reader
    trusts them over thread names). Fields a trace lacks (or holds with the wrong type) are None or
    empty: a trace is untrusted data.
    """

    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    cores: int | None = None
    device: str | None = None
    main_tid: int | None = None
    #: None in traces of before the worker listed its threads (see `thread_roles_known`).
    listed_interop_tids: tuple[int, ...] | None = msgspec.field(default=None, name="interop_tids")
    intra_tids: tuple[int, ...] = ()
    branches: tuple[BranchRecord, ...] = ()
    #: What discovery left out, and why (empty in traces of earlier runs).
    left_out: tuple[LeftOutRecord, ...] = ()
    #: What run.json calls "model" and "source" (a demo's "demo NAME", or the model file), when the
    #: trace says.
    model: str | None = None
    source: str | None = None
    #: The worker's Python version, and whether its GIL was on (None: the trace does not say; False:
    #: free-threaded, without the GIL).
    python: str | None = None
    gil: bool | None = None
    #: threads mode with the GIL on: each pool thread's branch time, CPU, core wait and GIL wait.
    branch_threads: tuple[BranchThreadRecord, ...] | None = None
    #: What the branches could give on k threads (see `prediction`); None in traces of earlier runs
    #: and where the branches' times were unknown.
    prediction: PredictionRecord | None = None
    #: A rank of a distributed run: its place and the process group's backend.
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    #: Its mode's traits (`mode_traits.ModeTraits`), as run.json's; None in traces of before them.
    mode_traits: ModeTraits | None = None
    #: What recorded the memory events, or why there are none (run.json's; None: torch.profiler's own).
    memory_source: str | None = None

    @classmethod
    def parse(cls, obj: Any) -> RunInfo | None:
        """The record of a trace's `"branchscope"` value (read as run.json is, `records.lenient`;
        the trace reader keeps a float's digits as a string); None when it is not an object."""
        return lenient(cls, obj, digits=True) if isinstance(obj, dict) else None

    @classmethod
    def of_run(cls, run: RunRecord) -> RunInfo:
        """What the trace says of the run whose run.json is `run`: the same values, under the same keys."""
        return lenient(cls, to_builtins(run))

    def trace_object(self) -> dict[str, Any]:
        """The trace's `"branchscope"` value: the fields this run has (those that are None left out)."""
        return {k: v for k, v in to_builtins(self).items() if v is not None}

    @property
    def interop_tids(self) -> tuple[int, ...]:
        return self.listed_interop_tids or ()

    @property
    def thread_roles_known(self) -> bool:
        return self.listed_interop_tids is not None
