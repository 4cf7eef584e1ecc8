"""What a branchscope run writes into its trace, as the trace engine reads it.

A run's trace is a plain Chrome trace with three additions (ARCHITECTURE.md, "Contracts"):

- a top-level `"branchscope"` object, parsed once per trace into a typed `RunInfo`
  (`Trace.run_info`), which every view and analysis reads instead of the raw dict;
- labels on events: `record_function("branch: NAME")` around each branch and
  `record_function("step N")` around each profiled step;
- the runner's per-thread CPU samples, counter events of category `cpu_sample`.

The run engine writes these (`branchscope.profiling.run.protocol` re-exports the labels); the trace
engine only reads them, so this module belongs to the trace side and imports nothing from the run side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from branchscope.profiling.trace.labels import BRANCH_PREFIX as BRANCH_PREFIX  # re-exported: the labels' home
from branchscope.profiling.trace.labels import branch_label as branch_label
from branchscope.profiling.trace.labels import branch_name as branch_name
from branchscope.profiling.trace.prediction import parse_prediction
from branchscope.profiling.trace.records import PredictionRecord

#: Counter category of the runner's per-thread CPU samples.
CPU_SAMPLE_CATEGORY = "cpu_sample"


def step_label(i: int) -> str:
    """The label of profiled step i (from 1)."""
    return f"step {i}"


def cpu_sample_name(tid: int, thread_name: str) -> str:
    """The counter name of one thread's CPU samples."""
    return f"thread {tid} ({thread_name})"


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


#: A JSON number as the reader hands it over (a float kept as its digits).
_DECIMAL = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ms(value: Any) -> float:
    """A finite, non-negative number of ms, or 0. The reader keeps a float's digits as a string
    (`decode`: float_hook=str), so a decimal string is read as its number."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = float(value)
    if type(value) in (int, float) and value == value and 0 <= value < float("inf"):
        return float(value)
    return 0.0


def _tids(value: Any) -> tuple[int, ...]:
    return tuple(t for t in value if type(t) is int) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class BranchInfo:
    """One branch found in the model: its name, region ("1", "1.2" nested), ops, fork/join nodes."""

    name: str
    region: str
    ops: int | None = None
    #: Where the region is in the model (`Mixed_6a`); None in traces of earlier runs.
    region_name: str | None = None
    fork: str | None = None
    join: str | None = None
    depth: int = 0
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class BranchThreadInfo:
    """One thread of threads mode's Python pool over the profiled steps (run.json's
    `branch_threads`, see `records.BranchThreadRecord`): branches run, ms inside them, on a core,
    waiting for a core, waiting for the GIL."""

    tid: int
    calls: int = 0
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    core_wait_ms: float = 0.0
    gil_wait_ms: float = 0.0

    @classmethod
    def parse(cls, obj: Any) -> BranchThreadInfo | None:
        if not isinstance(obj, dict) or _int(obj.get("tid")) is None:
            return None
        return cls(
            tid=obj["tid"],
            calls=_int(obj.get("calls")) or 0,
            **{k: _ms(obj.get(k)) for k in ("wall_ms", "cpu_ms", "core_wait_ms", "gil_wait_ms")},
        )


@dataclass(frozen=True, slots=True)
class LeftOutInfo:
    """Work discovery left out rather than make it a branch (run.json's `left_out`): name, ops,
    kind ("assertion", "no tensor work", "small") and why, in words."""

    name: str
    ops: int | None = None
    kind: str = ""
    why: str = ""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The `"branchscope"` object of a run's trace: mode, threads, machine, thread ids, branches.

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
    interop_tids: tuple[int, ...] = ()
    intra_tids: tuple[int, ...] = ()
    thread_roles_known: bool = False
    branches: tuple[BranchInfo, ...] = ()
    #: What discovery left out, and why (empty in traces of earlier runs).
    left_out: tuple[LeftOutInfo, ...] = ()
    #: What run.json calls "model" and "source" (a demo's "demo NAME", or the model file), when the
    #: trace says.
    model: str | None = None
    source: str | None = None
    #: The worker's Python version, and whether its GIL was on (None: the trace does not say; False:
    #: free-threaded, without the GIL).
    python: str | None = None
    gil: bool | None = None
    #: threads mode with the GIL on: each pool thread's branch time, CPU, core wait and GIL wait.
    branch_threads: tuple[BranchThreadInfo, ...] = ()
    #: What the branches could give on k threads (`records.PredictionRecord`, see `prediction`);
    #: None in traces of earlier runs and where the branches' times were unknown.
    prediction: PredictionRecord | None = None

    @classmethod
    def parse(cls, obj: Any) -> RunInfo | None:
        """The typed form of a trace's `"branchscope"` value; None when it is not an object."""
        if not isinstance(obj, dict):
            return None
        tids, raw_branches = obj.get("interop_tids"), obj.get("branches")
        branches = []
        for b in raw_branches if isinstance(raw_branches, list) else ():
            if isinstance(b, dict) and isinstance(b.get("name"), str):
                branches.append(
                    BranchInfo(
                        name=b["name"],
                        region=str(b.get("region", "")),
                        ops=_int(b.get("ops")),
                        region_name=_str(b.get("region_name")),
                        fork=_str(b.get("fork")),
                        join=_str(b.get("join")),
                        depth=_int(b.get("depth")) or 0,
                        parent=_str(b.get("parent")),
                    )
                )
        raw_left = obj.get("left_out")
        left_out = tuple(
            LeftOutInfo(name=x["name"], ops=_int(x.get("ops")), kind=_str(x.get("kind")) or "", why=_str(x.get("why")) or "")
            for x in (raw_left if isinstance(raw_left, list) else ())
            if isinstance(x, dict) and isinstance(x.get("name"), str)
        )
        return cls(
            left_out=left_out,
            mode=_str(obj.get("mode")),
            interop=_int(obj.get("interop")),
            intra=_int(obj.get("intra")),
            cores=_int(obj.get("cores")),
            device=_str(obj.get("device")),
            main_tid=_int(obj.get("main_tid")),
            interop_tids=_tids(tids),
            intra_tids=_tids(obj.get("intra_tids")),
            thread_roles_known=isinstance(tids, list),
            branches=tuple(branches),
            model=_str(obj.get("model")),
            source=_str(obj.get("source")),
            python=_str(obj.get("python")),
            gil=obj.get("gil") if isinstance(obj.get("gil"), bool) else None,
            branch_threads=tuple(t for x in _list(obj.get("branch_threads")) if (t := BranchThreadInfo.parse(x))),
            prediction=parse_prediction(obj.get("prediction")),
        )
