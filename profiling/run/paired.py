"""Paired runs: configurations of one model measured in alternation, and their speedups with intervals.

`run_paired(request, on_event, cancel)` measures `request.configs` (the first is the baseline):

- **in one worker** where the configurations allow it (`share_one_worker`: the pool-using ones, fork
  and threads, agree on the inter-op and intra-op counts; see `run/paired_worker.py`): the paired
  worker loads the model once and runs `rounds` rounds of one step of each configuration in turn;
  pair i is the i-th step of the baseline and of the other;
- **across workers** where they do not (`fork:1x1,fork:2x1`: the inter-op pool is sized once per
  process): `rounds` rounds, each a fresh worker per configuration in turn (the order turned round
  every other round), each timing --steps steps; pair i is round i's two medians.

Either way the worker is started and supervised by the runner (`runner.run_profile(layout=…)`:
the same process group, cgroup, death signals, timeout and cancel as a profiling run; nothing is
left running), in a temporary folder of its own that is removed afterwards. The speedup of each
configuration is the median of its per-pair ratios with a 95% bootstrap interval
(`trace/pairing.py`), into a `records.SpeedupRecord` (speedup.json, `--json`).

No torch here (the paired worker imports it, in its own process).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from branchscope.profiling.files import UnreadableFile, read_json_object
from branchscope.profiling.run.folder import (
    RunFolder,
    RunFolderError,
    describe_os_error,
    lock_folder,
    real_dir,
)
from branchscope.profiling.run.interpreter import locate as locate_interpreter
from branchscope.profiling.run.interpreter import worker_command as interpreter_worker_command
from branchscope.profiling.run.modes import MODE_NAMES, MODES, mode_named
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.paired_worker import PAIRED_WORKER_MODULE, round_order
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_OK, RunRequest, python_command
from branchscope.profiling.run.runner import (
    CancelFlag,
    RunResult,
    _OneWorker,
    _Rank,
    run_profile,
    why_incomplete,
    write_record_atomic,
)
from branchscope.profiling.run.sweep import SweepCell
from branchscope.profiling.trace.pairing import Speedup, paired_speedup
from branchscope.profiling.trace.prediction import parse_prediction, prediction_json, prediction_text
from branchscope.profiling.trace.records import (
    ACROSS_WORKERS,
    BRANCH_POOL_MODES,
    IN_ONE_WORKER,
    PAIRED_TIMES_JSON,
    SPEEDUP_JSON,
    Event,
    PairedConfigRecord,
    PairedTimesRecord,
    PredictionRecord,
    ProgressEvent,
    SpeedupRecord,
    SpeedupValueRecord,
    is_speedup_json,
)

#: Rounds by default: one step of each configuration per round in one worker; a fresh worker of
#: each per round across workers (each costs a model load: seconds on a shared 2-core machine).
ROUNDS_IN_ONE_WORKER = 30
ROUNDS_ACROSS_WORKERS = 5

_CONFIG = re.compile(r"([a-z][a-z0-9_-]*):([0-9]+)x([0-9]+)")


class ConfigError(ValueError):
    """A --configs value that cannot be read; the message names the bad item."""


@dataclass(frozen=True)
class PairedConfig(SweepCell):
    """A configuration measured in alternation: a mode and its threads, as a sweep's cell is."""

    @property
    def uses_pool(self) -> bool:
        return MODES[self.mode].starts_interop_pool

    def argv(self) -> str:
        return f"{self.mode}:{self.interop}x{self.intra}"


def parse_configs(text: str) -> list[PairedConfig]:
    """`MODE:IxJ,MODE:IxJ[,…]` (the first is the baseline); ConfigError naming the bad item, a
    repeated one, or fewer than two."""
    configs: list[PairedConfig] = []
    for raw in text.split(","):
        item = raw.strip()
        m = _CONFIG.fullmatch(item)
        if m is None:
            raise ConfigError(f"--configs: {item!r} is not MODE:IxJ (like sequential:1x1 or fork:2x1)")
        try:
            mode = mode_named(m[1]).name
        except KeyError:
            raise ConfigError(f"--configs: {item!r}: {m[1]!r} is not one of: {', '.join(MODE_NAMES)}") from None
        interop, intra = int(m[2]), int(m[3])
        if interop < 1 or intra < 1:
            raise ConfigError(f"--configs: {item!r}: thread counts must be at least 1")
        config = PairedConfig(mode, interop, intra)
        if config in configs:
            raise ConfigError(f"--configs: {item!r} is given twice")
        configs.append(config)
    if len(configs) < 2:
        raise ConfigError("--configs: give at least two configurations, the baseline first (sequential:1x1,fork:2x1)")
    return configs


def share_one_worker(configs: list[PairedConfig]) -> bool:
    """Whether one worker can step every configuration: its pool-using ones agree on the inter-op
    count (the pool is sized once per process) and the intra-op count (a pool thread reads it once)."""
    return len({(c.interop, c.intra) for c in configs if c.uses_pool}) <= 1


@dataclass
class PairedRequest:
    configs: list[PairedConfig]
    options: RunOptions
    #: None: ROUNDS_IN_ONE_WORKER or ROUNDS_ACROSS_WORKERS, as it measures.
    rounds: int | None = None
    #: A fresh worker per configuration per round even where one worker could hold them all
    #: (`--fresh-workers`): one configuration's steps can leave the process slower for another's.
    fresh_workers: bool = False

    @property
    def in_one_worker(self) -> bool:
        return not self.fresh_workers and share_one_worker(self.configs)

    def argv(self) -> list[str]:
        """The options of `branchscope speedup` that describe this request (the window's job)."""
        args = [*self.options.argv(), "--configs", ",".join(c.argv() for c in self.configs)]
        args += ["--fresh-workers"] if self.fresh_workers else []
        return args + (["--rounds", str(self.rounds)] if self.rounds is not None else [])

    @property
    def round_count(self) -> int:
        if self.rounds is not None:
            return self.rounds
        return ROUNDS_IN_ONE_WORKER if self.in_one_worker else ROUNDS_ACROSS_WORKERS


@dataclass
class PairedResult:
    exit_code: int
    record: SpeedupRecord | None = None
    message: str | None = None
    traceback: str | None = None
    cancelled_by: int | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


class _PairedWorker(_OneWorker):
    """The runner's one worker, but the paired worker: its command (the configurations and rounds
    after the run's options), its result (`PAIRED_TIMES_JSON` in the staging folder) and its commit
    (nothing to move: the times are the result)."""

    def __init__(self, req: RunRequest, stage: Path, configs: list[PairedConfig], rounds: int) -> None:
        super().__init__(req, stage)
        self.extra = ["--configs", ",".join(c.argv() for c in configs), "--rounds", str(rounds)]
        self.max_intra = max(c.intra for c in configs)

    def command(self) -> list[str]:
        argv = replace(self.req, out=self.stage).argv(worker=True) + self.extra
        if self.req.options.python is not None:
            return interpreter_worker_command(locate_interpreter(self.req.options.python), argv, PAIRED_WORKER_MODULE)
        return python_command(PAIRED_WORKER_MODULE) + argv

    def env(self, token: str) -> dict[str, str]:
        env = super().env(token)
        # OpenMP sizes its team from this at start-up: room for the largest intra-op count asked.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(self.max_intra)
        return env

    def result(self, rank: int) -> Any:
        try:
            obj = read_json_object(self.stage / PAIRED_TIMES_JSON)
        except (OSError, UnreadableFile, ValueError):
            return None
        record = PairedTimesRecord.parse(obj)
        return record if record.complete else None

    def why_incomplete(self, rank: int) -> str:
        return why_incomplete(self.stage / PAIRED_TIMES_JSON, lambda obj: PairedTimesRecord.parse(obj).complete)

    def commit(self, folder: RunFolder, ranks: list[_Rank], results: list[Any], load: Any = None) -> RunResult:
        # The pairs themselves are what survive a busy machine: the load is not recorded here.
        return RunResult(EXIT_OK, folder.out, payload=results[0])


def _measure(
    options: RunOptions,
    configs: list[PairedConfig],
    rounds: int,
    on_event: Callable[[Event], None] | None,
    cancel: CancelFlag | None,
) -> tuple[RunResult, PairedTimesRecord | None]:
    """One paired worker over `configs`, in a temporary folder removed afterwards."""
    pooled = [c for c in configs if c.uses_pool]
    pool = pooled[0] if pooled else configs[0]
    tmp = Path(tempfile.mkdtemp(prefix="branchscope-paired-"))
    try:
        req = RunRequest(mode=pool.mode, interop=pool.interop, intra=pool.intra, out=tmp / "run", options=options)
        result = run_profile(req, on_event, cancel, layout=lambda r, stage: _PairedWorker(r, stage, configs, rounds))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # made here, by us: the staging folder's remains
    payload = result.payload if isinstance(result.payload, PairedTimesRecord) else None
    return result, payload


def _failed(result: RunResult, what: str) -> PairedResult:
    return PairedResult(
        result.exit_code,
        message=f"{what}: {result.message or 'the worker failed'}",
        traceback=result.traceback,
        cancelled_by=result.cancelled_by,
    )


def run_paired(
    request: PairedRequest,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelFlag | None = None,
) -> PairedResult:
    """Measures the configurations in alternation (see the module docstring); never raises for a
    failed worker (its exit code and message are the result's). `on_event` gets a ProgressEvent per
    round (across workers: per worker)."""
    configs, rounds = request.configs, request.round_count
    if rounds < 2:
        return PairedResult(EXIT_BAD_INPUT, message=f"--rounds must be at least 2, not {rounds}")
    if request.in_one_worker:
        result, times = _measure(request.options, configs, rounds, on_event, cancel)
        if times is None or len(times.configs) != len(configs):
            return _failed(result, "the paired worker")
        record = speedup_record(times.configs, times.order, IN_ONE_WORKER, rounds, request.options, times)
        return PairedResult(EXIT_OK, record=record)
    per_round: list[list[float]] = [[] for _ in configs]
    order: list[list[int]] = []
    last: PairedTimesRecord | None = None
    prediction: PredictionRecord | None = None  # the first worker that found branches measured it
    total, done = rounds * len(configs), 0
    for r in range(rounds):
        this_round = round_order(len(configs), r)  # turned round every other round, as in one worker
        for index in this_round:
            config = configs[index]
            result, times = _measure(request.options, [config], max(request.options.steps, 1), None, cancel)
            if times is None or not times.configs or times.configs[0].median_ms is None:
                return _failed(result, f"round {r + 1}, {config.label}")
            per_round[index].append(times.configs[0].median_ms)
            last = times
            prediction = prediction or times.prediction
            done += 1
            if on_event is not None:
                on_event(ProgressEvent(step=done, of=total))
        order.append(this_round)
    records = [
        PairedConfigRecord(mode=c.mode, interop=c.interop, intra=c.intra, steps_ms=[round(x, 4) for x in ms])
        for c, ms in zip(configs, per_round, strict=True)
    ]
    if last is not None:
        last.prediction = prediction
    record = speedup_record(records, order, ACROSS_WORKERS, rounds, request.options, last)
    record.worker_steps = max(request.options.steps, 1)
    return PairedResult(EXIT_OK, record=record)


def speedup_record(
    configs: list[PairedConfigRecord],
    order: list[list[int]],
    measured: str,
    rounds: int,
    options: RunOptions,
    times: PairedTimesRecord | None,
) -> SpeedupRecord:
    """The record of a paired measurement: each configuration's median and count, each one's speedup
    over the first (`pairing.paired_speedup`), and the prediction (`predict`)."""
    filled = []
    for c in configs:
        ms = c.steps_ms or []
        median = round(statistics.median(ms), 4) if ms else None
        filled.append(msgspec.structs.replace(c, median_ms=median, steps=len(ms)))
    base = filled[0].steps_ms or []
    speedups: list[SpeedupValueRecord | None] = [None]
    for c in filled[1:]:
        s = paired_speedup(base, c.steps_ms or [])
        speedups.append(None if s is None else speedup_value(s))
    record = SpeedupRecord(
        demo=options.demo,
        model=times.model if times is not None else options.model_label,
        device=times.device if times is not None else None,
        cores=times.cores if times is not None else None,
        measured=measured,
        rounds=rounds,
        configs=filled,
        baseline=0,
        speedup=speedups,
        order=order,
    )
    record.prediction = prediction_json(times.prediction if times is not None else None)
    return record


def speedup_value(s: Speedup) -> SpeedupValueRecord:
    return SpeedupValueRecord(
        median=round(s.median, 4), ci95=[round(s.lo, 4), round(s.hi, 4)], distinguishable=s.distinguishable
    )


# ---------------------------------------------------------------- text and speedup.json


def speedup_lines(record: SpeedupRecord) -> list[str]:
    """One line per configuration (median, steps; its speedup over the baseline in words), then how
    it was measured."""
    configs = record.configs
    if not configs:
        return []
    base = configs[record.baseline] if 0 <= record.baseline < len(configs) else configs[0]
    lines = []
    for i, c in enumerate(configs):
        head = f"{c.label}: median {c.median_ms or 0:.2f} ms over {c.steps or 0} "
        head += "rounds (each a worker's median)" if record.measured == ACROSS_WORKERS else "steps"
        value = record.speedup[i] if i < len(record.speedup) else None
        if c is base:
            head += " (baseline)"
        elif value is not None and value.median is not None and value.ci95 and len(value.ci95) == 2:
            s = Speedup(value.median, value.ci95[0], value.ci95[1], c.steps or 0)
            head += f" — {s.text(base.label)}"
        else:
            head += " — no speedup (no usable pair)"
        lines.append(head)
    if record.measured == IN_ONE_WORKER:
        how = (
            f"measured in one worker: {record.rounds} rounds of one step of each configuration in turn "
            "(order reversed every other round); the speedup is the median of per-step ratios, 95% bootstrap interval"
        )
    else:
        how = (
            f"measured across workers: {record.rounds} rounds of a fresh worker per configuration in turn, "
            f"{record.worker_steps} timed steps each; the speedup is the median of per-round ratios, 95% bootstrap interval"
        )
    lines.append(how)
    lines.extend(_prediction_lines(record))
    return lines


def _prediction_lines(record: SpeedupRecord) -> list[str]:
    """What the branches could give (the worker's sequential branch times), and each parallel
    configuration's measured speedup as a share of the bound on its inter-op threads."""
    pred = parse_prediction(record.prediction)
    if pred is None:
        return []
    lines = [f"the branches {prediction_text(pred)}"]
    for i, c in enumerate(record.configs):
        value = record.speedup[i] if i < len(record.speedup) else None
        bound = pred.by_threads.get(str(c.interop))
        if c.mode in BRANCH_POOL_MODES and (c.interop or 0) >= 2 and bound and value is not None and value.median:
            lines.append(
                f"{c.label}: {value.median:.2f}× measured of the {bound:.2f}× its {c.interop} threads could give "
                f"({100 * value.median / bound:.0f}%)"
            )
            if value.ci95 and len(value.ci95) == 2 and value.ci95[0] > bound * ABOVE_BOUND:
                lines.append(f"warning: {c.label} measured above what its branches could give: {ABOVE_BOUND_WHY}")
    return lines


#: A speedup whose interval lies above the bound by more than this share is said to be.
ABOVE_BOUND = 1.10
ABOVE_BOUND_WHY = (
    "the prediction takes every op to cost what it cost in the sequential steps; here the baseline's steps "
    "cost more than that (the memory allocator handing back and faulting in pages again, or, in one worker, "
    "what the other configurations' steps left behind), or the branches gained from their own cores' caches; "
    "--fresh-workers measures each configuration in workers of its own"
)


class SpeedupFolderError(Exception):
    """DIR cannot take speedup.json; one line for `error: …`."""


def check_speedup_out(out: Path) -> None:
    """SpeedupFolderError when DIR cannot take speedup.json: DIR is not a folder, or holds a
    speedup.json that is not branchscope's (a link, a folder, another file), which is never replaced.
    Called before measuring, and again under DIR's lock before writing."""
    if os.path.lexists(out) and not real_dir(out):
        raise SpeedupFolderError(f"--out {out} exists and is not a folder")
    target = out / SPEEDUP_JSON
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_file():
        raise SpeedupFolderError(f"--out {out}: its {SPEEDUP_JSON} is not a file branchscope wrote; choose another --out")
    try:
        obj: Any = read_json_object(target, follow_symlinks=False)
    except (OSError, ValueError):
        obj = None
    if not is_speedup_json(obj):
        raise SpeedupFolderError(f"--out {out}: its {SPEEDUP_JSON} is not branchscope's; choose another --out")


def write_speedup(out: Path, record: SpeedupRecord) -> Path:
    """DIR/speedup.json, atomically; DIR is made if missing and locked while written (see
    `check_speedup_out`: what it refuses is never replaced)."""
    try:
        fd, _ = lock_folder(out, "speedup")
    except RunFolderError as exc:
        raise SpeedupFolderError(str(exc)) from None
    try:
        check_speedup_out(out)
        target = out / SPEEDUP_JSON
        try:
            write_record_atomic(target, record)
        except OSError as exc:
            raise SpeedupFolderError(f"could not write {target}: {describe_os_error(exc)}") from None
        return target
    finally:
        os.close(fd)
