"""What a run writes on disk, as typed records, and how every record branchscope writes is read:
the one place that knows run.json's keys and the one lenient parser.

- `RunRecord`: a run folder's run.json (a distributed run's top-level one lists its ranks as
  `RankRecord`s), written by the worker (and the runner, for a distributed run) through
  `encode_record`, read by every reader through `read_run_record` / `RunRecord.parse`; its
  sub-records (`BranchRecord`, `BranchThreadRecord`, `PredictionRecord`, …) are also those of the
  trace's run facts (`run_info.RunInfo`). Beside it: failure.json, node-R.json.
- `lenient`, how every record is read (run.json, the trace's run facts, sweep.json and speedup.json
  in `sweep_records`), and `decode_answer`, how a child's one-line answer is read strictly. The
  JSON-line events are in `events`.

What is on disk is untrusted data: a record is parsed field by field (`lenient`), and a field that
is missing or holds a value of the wrong type (a string for a number, a bool for an int, NaN) reads
as its default (None, empty), never as an error and never as a path to act on. Folders written by
earlier versions (run.json before it had a "format") still open: their keys are the same.
`RUN_FORMAT` says which version wrote a file.

The trace side holds these (`branchscope.profiling.run` writes them; the run engine may import the
trace engine, never the reverse). No torch, no Qt.
"""
from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union

import msgspec

from branchscope.profiling.files import read_json_object
from branchscope.profiling.trace.mode_traits import ModeTraits, traits_of
from branchscope.profiling.trace.step_stats import Spread, StepStats

#: run.json's format: 2 adds "format", "input_shapes", "dtype" and "nproc" to what version 1 (no
#: "format" key) wrote; 3 adds "starved" (and "load"'s "own_cores" and "own_wait_cores"),
#: "plan_by" and the prediction's "by_threads_ci95"; everything else is read the same.
RUN_FORMAT = 3


def runs_branches_side_by_side(mode: str | None, interop: int | None) -> bool:
    """Whether a run of `mode` with `interop` inter-op threads runs branches side by side: a mode
    whose traits say it runs them on a pool of threads (`mode_traits.ModeTraits.branch_pool`), on 2
    or more inter-op threads (on one, its pool runs them one after another)."""
    return traits_of(mode).side_by_side(interop)

RUN_JSON = "run.json"
DEFAULT_TRACE = "trace.json.gz"
#: A distributed run's rank folders (rank-0, rank-1, …), as written and as read back: a name read
#: from a run.json counts as a rank's folder only in this shape.
RANK_FOLDER = "rank-{rank}"
RANK_DIR = re.compile(r"rank-(?:0|[1-9][0-9]{0,5})")
#: A rank's file as the top-level run.json of a distributed run names it: "rank-R/NAME".
RANK_FILE = re.compile(rf"{RANK_DIR.pattern}/[A-Za-z0-9_-][A-Za-z0-9_.-]*")
#: A rank's own run.json, likewise.
RANK_RUN = re.compile(rf"{RANK_DIR.pattern}/{re.escape(RUN_JSON)}")
#: A mode's name as run.json and sweep.json write it.
MODE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")

T = TypeVar("T")


# ---------------------------------------------------------------- answers from a child

#: The most one answer from a child may hold (a JSON line, its final record) and how deeply it may
#: nest: what branchscope's processes write is a few KB, nested a few levels.
MAX_ANSWER_BYTES = 1 << 20
MAX_ANSWER_DEPTH = 64
_JSON_SPECIAL = re.compile(rb'[\[\]{}"\\]')


class MalformedAnswer(ValueError):
    """A child's answer that is not the record it should be; str() is one line saying what is wrong."""


def json_deeper_than(data: bytes, limit: int = MAX_ANSWER_DEPTH) -> bool:
    """Whether the JSON text `data` nests lists and objects more than `limit` levels deep (strings
    skipped), told in one pass over its brackets, quotes and backslashes, and at once when it holds
    too few brackets to."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    in_string, escaped = False, -1
    for m in _JSON_SPECIAL.finditer(data):
        i = m.start()
        c = data[i]
        if in_string:
            if i == escaped:
                continue
            if c == 0x5C:  # backslash: the next byte is escaped
                escaped = i + 1
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif c in (0x5D, 0x7D):
            depth -= 1
    return False


def decode_answer(data: bytes, cls: type[T], what: str) -> T:
    """`data` (a child's answer: one line of JSON) as the record `cls`, strictly: each field of its
    type, at most MAX_ANSWER_BYTES and MAX_ANSWER_DEPTH deep. Raises MalformedAnswer naming `what`
    ("the probe's answer") and what is wrong, in one line."""
    if len(data) > MAX_ANSWER_BYTES:
        raise MalformedAnswer(f"{what} is larger than {MAX_ANSWER_BYTES >> 20} MiB")
    if json_deeper_than(data):
        raise MalformedAnswer(f"{what} nests deeper than {MAX_ANSWER_DEPTH} levels")
    try:
        return msgspec.json.decode(data, type=cls)
    except msgspec.ValidationError as exc:
        raise MalformedAnswer(f"{what} is malformed: {_one_line(exc)}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MalformedAnswer(f"{what} is not JSON: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).replace("\r", " ").replace("\n", " ")
    return text if len(text) <= 200 else text[:200] + "…"


# ---------------------------------------------------------------- lenient parsing


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a converted value (Python's json reads them; they are no data)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _struct_of_list(tp: Any) -> type[msgspec.Struct] | None:
    """S for a field typed `list[S]`, `tuple[S, ...]` or either `| None`, S a Struct: parsed item by item."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    if len(args) == 1 and typing.get_origin(args[0]) in (list, tuple):
        item = typing.get_args(args[0])[0] if typing.get_args(args[0]) else None
        if isinstance(item, type) and issubclass(item, msgspec.Struct):
            return item
    return None


def _holds_float(tp: Any) -> bool:
    """Whether a field's type is or holds a float (`float | None`, `dict[str, float]`, `list[float]`)."""
    return tp is float or any(_holds_float(a) for a in typing.get_args(tp))


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _struct_type(tp: Any) -> type[msgspec.Struct] | None:
    """S for a field typed `S` or `S | None`, S a Struct: parsed leniently itself."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], msgspec.Struct):
        return args[0]
    return None


@dataclass(frozen=True)
class _Field:
    """How `lenient` reads one field: its names, its type, and the Struct its value (or each item
    of its list) is, if any."""

    name: str
    key: str
    type: Any
    item: type[msgspec.Struct] | None
    struct: type[msgspec.Struct] | None
    floats: bool


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_DEFAULTS: dict[type, Any] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    """`cls`'s fields as `lenient` reads them, worked out once per class (not once per list item)."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls, include_extras=True)
        _FIELDS[cls] = tuple(
            _Field(
                f.name, f.encode_name, hints[f.name], _struct_of_list(hints[f.name]), _struct_type(hints[f.name]),
                _holds_float(hints[f.name]),
            )
            for f in msgspec.structs.fields(cls)
        )
    return _FIELDS[cls]


def _defaults(cls: type) -> Any:
    """An instance of `cls` with every field at its default."""
    if cls not in _DEFAULTS:
        _DEFAULTS[cls] = cls()
    return _DEFAULTS[cls]


def lenient(cls: type[T], obj: Any, *, digits: bool = False) -> T:
    """`cls` (a msgspec Struct whose fields all have defaults) from the dict `obj`, field by field:
    a field missing, of the wrong type or not finite keeps its default; a list of structs keeps the
    items that parse (each leniently; dropped when it is not an object or lacks a field its class
    names in `REQUIRED`), and a struct that lacks one is its field's default. Keys `cls` does not
    know are ignored. `obj` not a dict: every field's default. `digits`: a float may be the string
    of its digits (the trace reader keeps them so, `decode`'s float_hook=str)."""
    if not isinstance(obj, dict):
        return cls()
    values: dict[str, Any] = {}
    for f in _fields(cls):
        if f.key not in obj:
            continue
        raw = obj[f.key]
        if f.item is not None and isinstance(raw, list):
            items = [x for x in (lenient(f.item, x, digits=digits) for x in raw) if _complete(x)]
            values[f.name] = tuple(items) if _is_tuple(f.type) else items
            continue
        if f.struct is not None and isinstance(raw, dict):
            if _complete(record := lenient(f.struct, raw, digits=digits)):
                values[f.name] = record
            continue
        try:
            value = msgspec.convert(raw, f.type, strict=not (digits and f.floats))
        except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
            continue
        if _finite(value):
            values[f.name] = value
    return cls(**values)


def _is_tuple(tp: Any) -> bool:
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    return typing.get_origin(args[0]) is tuple


def _complete(record: Any) -> bool:
    """Whether a parsed list item has every field its class names in `REQUIRED` (a default there
    means the file did not give it)."""
    required: tuple[str, ...] = getattr(type(record), "REQUIRED", ())
    default = _defaults(type(record))
    return all(getattr(record, name) != getattr(default, name) for name in required)


def to_builtins(record: msgspec.Struct) -> dict[str, Any]:
    """The record as the plain JSON data its file holds (lists, not tuples), fields in declared order."""
    out = msgspec.json.decode(msgspec.json.encode(record))
    assert isinstance(out, dict)
    return out


def encode_record(record: msgspec.Struct, *, indent: int | None = 1) -> bytes:
    """The record as the JSON text branchscope writes (run.json, sweep.json: indented by one)."""
    return json.dumps(to_builtins(record), indent=indent).encode("utf-8")


# ---------------------------------------------------------------- run.json


class BranchRecord(msgspec.Struct, kw_only=True):
    """One branch found in the model: its name, region ("1", "1.2" nested), ops, fork/join nodes."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("name",)

    name: str = ""
    region: str = ""
    #: Where the region is in the model (`Mixed_6a`, `after layer1.0.act3`); None in earlier runs.
    region_name: str | None = None
    ops: int | None = None
    fork: str | None = None
    join: str | None = None
    depth: int = 0
    parent: str | None = None


class LeftOutRecord(msgspec.Struct, kw_only=True):
    """Work discovery found beside a branch and did not make one: its name (where it is, its ops),
    ops, kind ("assertion", "no tensor work", "small") and why, in words."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("name",)

    name: str = ""
    ops: int | None = None
    kind: str = ""
    why: str = ""


#: A time that cannot be negative (a negative one reads as its field's default).
Ms = Annotated[float, msgspec.Meta(ge=0)]


class BranchThreadRecord(msgspec.Struct, kw_only=True):
    """One thread of threads mode's Python pool over the profiled steps (run.json's
    `branch_threads`), measured by the thread itself around each branch it ran: `calls` branches,
    `wall_ms` inside them, of which `cpu_ms` on a core, `core_wait_ms` runnable but waiting for a
    core (the kernel's run delay), and `gil_wait_ms` the rest: asleep, which for a branch on a
    Python thread is waiting for the GIL (with intra-op threads > 1, also the thread's wait for its
    own OpenMP team at the end of a parallel op)."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("tid",)

    tid: int = 0
    calls: int = 0
    wall_ms: Ms = 0.0
    cpu_ms: Ms = 0.0
    core_wait_ms: Ms = 0.0
    gil_wait_ms: Ms = 0.0


class RegionPredictionRecord(msgspec.Struct, kw_only=True):
    """One region of a `PredictionRecord`: its branches' sequential work (ms per step), its longest
    branch, and the bound on its own speedup for k threads ({"2": x, "4": y}): its work over its
    branches' makespan, list-scheduled longest first (`profiling/trace/prediction.py`)."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("region",)

    region: str = ""
    region_name: str | None = None
    branches: int = 0
    work_ms: float = 0.0
    longest_branch: str | None = None
    longest_branch_ms: float = 0.0
    bound_by_threads: dict[str, float] = msgspec.field(default_factory=dict)


class PredictionRecord(msgspec.Struct, kw_only=True):
    """What the branches could give (run.json's and the trace's `prediction`, see
    `profiling/trace/prediction.py`): the bound on the step's speedup for k threads
    ({"2": x, "4": y}, Amdahl over the serial part and each region's makespan), the sequential step
    and its serial part (ms), the regions, where the times came from (`from`: "this run's N profiled
    steps" or "N sequential steps measured in the worker"), the branches without a time and each
    branch's time. A prediction without `by_threads` is none."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("by_threads",)

    by_threads: dict[str, float] = msgspec.field(default_factory=dict)
    #: The bound's 95% interval for k threads ({"2": [lo, hi]}): a bootstrap over the sequential
    #: steps it was made of; None under `prediction.MIN_CI_STEPS` steps (and in run.json format < 3).
    by_threads_ci95: dict[str, list[float]] | None = None
    step_ms: float | None = None
    serial_ms: float | None = None
    regions: list[RegionPredictionRecord] = msgspec.field(default_factory=list)
    from_: str | None = msgspec.field(default=None, name="from")
    steps: int | None = None
    unmeasured: list[str] | None = None
    #: Each branch's sequential time (ms per step) the prediction is made of.
    branch_ms: dict[str, float] | None = None


class FailureRecord(msgspec.Struct, kw_only=True):
    """OUT/failed-run/failure.json: what a failed run kept there to say why (its `files`, names in
    that folder) and its error line."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("failure",)

    failure: int = 0
    files: list[str] = msgspec.field(default_factory=list)
    message: str = ""


#: A multi-node run's node-R.json (`NodeRecord`), in OUT and, while the run goes on, in the node's folder.
NODE_JSON = "node-{node}.json"
NODE_JSON_NAME = re.compile(r"node-(?:0|[1-9][0-9]{0,4})\.json")


class NodeRecord(msgspec.Struct, kw_only=True):
    """node-R.json: what node R of a multi-node run (`--nnodes N --node-rank R`) ran and how it ended:
    its host and runner's pid, the launcher's rendezvous endpoint, its global ranks once the
    rendezvous gave them, and its `status`: "running", then "done" (every rank's files in) or
    "failed" (with `message`, and `failed_at`: the wall-clock second it knew)."""

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("node",)

    node: int | None = None
    nnodes: int | None = None
    nproc: int | None = None
    host: str | None = None
    pid: int | None = None
    endpoint: str | None = None
    ranks: list[int] = msgspec.field(default_factory=list)
    status: str = "running"
    message: str | None = None
    exit_code: int | None = None
    failed_at: float | None = None


class TraceClock(msgspec.Struct, kw_only=True):
    """Where the trace's events lie on its clock: its baseTimeNanoseconds and the span of its events
    (µs), so the runner places CPU samples without parsing the trace again."""

    base_time_ns: float | None = None
    first_us: float | None = None
    last_us: float | None = None


class RankRecord(msgspec.Struct, kw_only=True):
    """One rank in a distributed run's top-level run.json: where its files are, its medians."""

    rank: int | None = None
    pid: int | None = None
    device: str | None = None
    run: str | None = None
    trace: str | None = None
    median_ms: float | None = None
    unprofiled_median_ms: float | None = None
    #: A multi-node run's (`--nnodes`): the node that ran the rank (its `--node-rank`) and its host name.
    node: int | None = None
    host: str | None = None


class LoadRecord(msgspec.Struct, kw_only=True):
    """The machine's load around a run, as the runner read it from /proc: the 1-minute load average
    when the run started and when it ended, and the cores other processes used on average while
    the run timed and profiled its steps (the usable cores' busy time less this run's own
    processes', over `seconds`). `busy`: others took more than about a fifth of the `cores`."""

    loadavg_start: float | None = None
    loadavg_end: float | None = None
    cores: int | None = None
    others_cores: float | None = None
    #: The cores this run's own processes used on average over the same `seconds` (run.json format 3).
    own_cores: float | None = None
    #: The cores the run's threads waited for, runnable (their schedstat run delay over `seconds`).
    own_wait_cores: float | None = None
    seconds: float | None = None
    busy: bool | None = None

    def text(self) -> str:
        """One line: "machine: other processes used 0.05 of 2 cores while the steps were timed (load
        average 0.52 → 0.61): quiet"."""
        parts = []
        if self.others_cores is not None and self.cores:
            parts.append(f"other processes used {self.others_cores:.2f} of {self.cores} cores while the steps were timed")
        else:
            parts.append("the cores other processes used were not measured")
        if self.loadavg_start is not None and self.loadavg_end is not None:
            parts.append(f"(load average {self.loadavg_start:.2f} → {self.loadavg_end:.2f})")
        how = "" if self.busy is None else (": busy, times not comparable with a quiet run's" if self.busy else ": quiet")
        return "machine: " + " ".join(parts) + how


class RunRecord(msgspec.Struct, kw_only=True):
    """A run folder's run.json (see the module docstring): what ran, on what, how long each step
    took with and without the profiler, the branches found, the threads, the files written.

    A rank's run.json carries `rank`, `local_rank`, `world_size`, `backend`; a distributed run's
    top-level run.json `nproc`, `world_size`, `backend` and `ranks` (the slowest rank's step times,
    step by step). `files` ({name: bytes}) is added by the run folder when the run is committed.
    """

    format: int | None = None
    mode: str | None = None
    interop: int | None = None
    intra: int | None = None
    cores: int | None = None
    device: str | None = None
    torch: str | None = None
    #: The worker's interpreter: its version ("3.11.7", "3.13.1 free-threading build"), its path,
    #: and whether the GIL was on (False: a free-threaded CPython running without it; None: not said).
    python: str | None = None
    python_executable: str | None = None
    gil: bool | None = None
    #: threads mode with the GIL on: each pool thread's time in branches, on a core, waiting for a
    #: core and waiting for the GIL over the profiled steps (`BranchThreadRecord`).
    branch_threads: list[BranchThreadRecord] | None = None
    #: "demo NAME" for a demo, else the model file's path.
    model: str | None = None
    #: "demo", "py" or "torchscript".
    source: str | None = None
    #: A TorchScript archive's input shapes (e.g. "8x64x35x35") and dtype: what repeats the run.
    input_shapes: list[str] | None = None
    dtype: str | None = None
    steps: int | None = None
    warmup: int | None = None
    steps_ms: list[float] | None = None
    median_ms: float | None = None
    unprofiled_steps: int | None = None
    unprofiled_steps_ms: list[float] | None = None
    unprofiled_median_ms: float | None = None
    #: [min, q1, q3, max] of the unprofiled steps.
    unprofiled_spread_ms: Spread | None = None
    profiler_overhead: float | None = None
    #: The warm-up (`profiling/run/steady.py`): steps taken (at least `warmup`) and their times,
    #: whether they settled (None: --warmup 0, no warm-up) and, when they did not, the cap that
    #: stopped them ("steps" or "seconds").
    warmup_steps: int | None = None
    warmup_steps_ms: list[float] | None = None
    warmup_settled: bool | None = None
    warmup_cap: str | None = None
    #: Seconds of each of the worker's phases, in the order they ran: "start" (torch, threads),
    #: "load", "forward" (the model's own), "discovery", "plan", "check" (the plan's outputs),
    #: "warmup", "timing", "profile", "export".
    phase_seconds: dict[str, float] | None = None
    #: Seconds each tracer tried took ({tracer: s}, in the order tried): discovery's share.
    tracer_seconds: dict[str, float] | None = None
    #: Seconds the plan took to write and make, and to compile (None: the mode has no such step).
    plan_build_seconds: float | None = None
    plan_compile_seconds: float | None = None
    #: Why the timings may not be steady, one line each (see `profiling/run/steady.py`).
    warnings: list[str] | None = None
    branches: list[BranchRecord] | None = None
    regions: int | None = None
    max_abs_diff: float | None = None
    main_tid: int | None = None
    interop_tids: list[int] | None = None
    intra_tids: list[int] | None = None
    threads_applied: dict[str, int] | None = None
    pid: int | None = None
    threads: dict[str, str] | None = None
    fx_error: str | None = None
    tracer: str | None = None
    tracer_errors: dict[str, str] | None = None
    notes: list[str] | None = None
    #: What could have been branches and was left out, and why (assertions, scalar work, branches
    #: too small beside the others of their region).
    left_out: list[LeftOutRecord] | None = None
    #: What the branches could give on k threads, from sequential per-branch times
    #: (`PredictionRecord`); None where the branches or their times are unknown, and in earlier runs.
    prediction: PredictionRecord | None = None
    plan: str | None = None
    trace: str | None = None
    trace_clock: TraceClock | None = None
    train_step: bool | None = None
    #: What recorded the trace's memory events where torch.profiler records none (it profiled every
    #: thread: `profiling/run/thread_memory.py`), or why there are none, in a line; None: the
    #: profiler's own (or a run from before).
    memory_source: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    nproc: int | None = None
    ranks: list[RankRecord] | None = None
    files: dict[str, int] | None = None
    complete: bool = False
    #: The machine's load while the run ran (`LoadRecord`); None for runs from before it was measured.
    load: LoadRecord | None = None
    #: The run got, or its machine's load left it, fewer cores than its threads could use
    #: (`profiling/trace/starved.py`): its times name no winner. None: not judged (an earlier run,
    #: or neither figure measured).
    starved: bool | None = None
    #: How a speedup's parts name this mode's plan on one thread ("TorchScript's plan": the mode's
    #: `ModeTraits.plan_title`, for views that cannot read the modes registry; format 3).
    plan_by: str | None = None
    #: A multi-node run's node count (`--nnodes`); None for a run on one machine.
    nnodes: int | None = None
    #: Its mode's traits (`mode_traits.ModeTraits`: its pool, whether the GIL is measured, its words),
    #: so that a reader needs no registry to know them; None in runs of before (`mode_traits.traits_of`
    #: reads the table then).
    mode_traits: ModeTraits | None = None

    @classmethod
    def parse(cls, obj: Any) -> RunRecord:
        """The record of a run.json's decoded JSON (see `lenient`)."""
        return lenient(cls, obj)

    @property
    def distributed(self) -> bool:
        """A distributed run's top-level run.json (it lists its ranks)."""
        return self.ranks is not None

    def trace_files(self) -> list[str] | None:
        """The trace files this run.json names, relative to its folder, rank 0 first: "trace.json.gz"
        (or the plain file name "trace" says), or each rank's "rank-R/NAME". None when a name is of
        another shape ("..", a path, a rank's file outside its folder): run.json is data, and a name
        it holds is followed only when it has a shape branchscope writes."""
        if self.ranks is not None:
            names = [r.trace for r in self.ranks]
            if not names or not all(isinstance(n, str) and RANK_FILE.fullmatch(n) for n in names):
                return None
            return [str(n) for n in names]
        name = self.trace if self.trace is not None else DEFAULT_TRACE
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        return [name]

    @property
    def demo(self) -> str | None:
        """The demo's name when a demo ran."""
        if self.source == "demo" and self.model and self.model.startswith("demo "):
            return self.model[len("demo ") :]
        return None

    @property
    def model_label(self) -> str | None:
        """The demo's name, or the model file's name."""
        return model_label(self.model, self.source)

    @property
    def unprofiled_stats(self) -> StepStats | None:
        """Median and spread of the steps timed without the profiler (the honest numbers); None
        when it has none (an old run)."""
        return StepStats.of(self.unprofiled_steps_ms) if self.unprofiled_steps_ms else None

    @property
    def profiled_stats(self) -> StepStats | None:
        """Median and spread of the profiled steps."""
        return StepStats.of(self.steps_ms) if self.steps_ms else None

    @property
    def threads_label(self) -> str | None:
        """"I×J" (inter-op × intra-op), None when either is unknown."""
        return None if self.interop is None or self.intra is None else f"{self.interop}×{self.intra}"


_LEFT_OUT_KINDS = {"assertion": ("assertion", "assertions"), "no tensor work": ("chain with no tensor work", "chains with no tensor work"), "small": ("branch too small beside its region's largest", "branches too small beside their region's largest")}  # fmt: skip


def left_out_text(left_out: Iterable[Any]) -> str:
    """What discovery left out (LeftOutRecords, or anything with their `kind`), counted by kind:
    "7 assertions, 1 branch too small beside its region's largest"."""
    counts: dict[str, int] = {}
    for x in left_out:
        counts[x.kind] = counts.get(x.kind, 0) + 1
    parts = []
    for kind, n in counts.items():
        one, many = _LEFT_OUT_KINDS.get(kind, (kind or "other", kind or "other"))
        parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)


def model_label(model: str | None, source: str | None) -> str | None:
    """How lists name a run's model ("model" and "source" of run.json or a trace's "branchscope"
    object): a demo's name, or the model file's name."""
    if not model:
        return None
    if source == "demo" and model.startswith("demo "):
        return model[len("demo ") :]
    return Path(model.rstrip("/")).name or model


def read_run_record(folder: str | Path, *, follow_symlinks: bool = True) -> RunRecord | None:
    """FOLDER/run.json as a record when it is a regular file (never a FIFO or a device; with
    `follow_symlinks=False` never a link) holding a JSON object of a sane size; None otherwise.
    Whether the run is complete is the record's `complete`."""
    try:
        return RunRecord.parse(read_json_object(Path(folder) / RUN_JSON, follow_symlinks=follow_symlinks))
    except (OSError, ValueError):
        return None
