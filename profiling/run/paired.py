"""Paired runs: configurations of one model measured in alternation, and their speedups with intervals.

`run_paired(request, on_event, cancel)` measures `request.configs` (the first is the baseline):

- **in one worker** where the configurations allow it (`share_one_worker`: the pool-using ones, fork
  and threads, agree on the inter-op and intra-op counts; see `run/paired_worker.py`): the paired
  worker loads the model once and runs `rounds` rounds of one step of each configuration in turn;
  pair i is the i-th step of the baseline and of the other;
- **across workers** where they do not (`fork:1x1,fork:2x1`: the inter-op pool is sized once per
  process): `rounds` rounds, each a fresh worker per configuration in turn (the order turned round
  every other round), each timing --steps steps; pair i is round i's two medians.

**Parts.** A parallel configuration M I×J (fork or threads, 2 or more inter-op threads) gains two
more paired speedups (`speedup_parts`): its *plan*, M 1×J over sequential 1×J (what the mode's plan
changes on one thread: TorchScript's interpreter, the threads plan's overhead), and its *parallel*
part, M I×J over M 1×J (what the threads gave). `with_parts` appends the configurations they need
(`"added": "parts"`): in one worker, M 1×J is M's plan with each branch waited for as soon as it is
launched, on the I threads' pool (one process cannot change its inter-op count); across workers, M
1×J itself in fresh workers. The intervals show what either costs.

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
from dataclasses import dataclass, field, replace
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
    write_record_atomic,
)
from branchscope.profiling.run.interpreter import locate as locate_interpreter
from branchscope.profiling.run.interpreter import worker_command as interpreter_worker_command
from branchscope.profiling.run.modes import MODE_NAMES, MODES, mode_named
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.outcome import Ended, RunResult
from branchscope.profiling.run.paired_worker import ONE_AT_A_TIME, PAIRED_WORKER_MODULE, round_order
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_OK, RunRequest, python_command
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.run.supervise import OneWorker, Rank, why_incomplete
from branchscope.profiling.run.sweep import SweepCell
from branchscope.profiling.trace.events import Event, ProgressEvent
from branchscope.profiling.trace.pairing import Speedup, paired_speedup, parts_text
from branchscope.profiling.trace.parts import part_configs
from branchscope.profiling.trace.prediction import (
    bound_text,
    parse_prediction,
    prediction_json,
    prediction_text,
)
from branchscope.profiling.trace.records import PredictionRecord, runs_branches_side_by_side
from branchscope.profiling.trace.sweep_records import (
    ACROSS_WORKERS,
    ADDED_FOR_PARTS,
    IN_ONE_WORKER,
    PAIRED_TIMES_JSON,
    SPEEDUP_JSON,
    PairedConfigRecord,
    PairedTimesRecord,
    SkippedConfigRecord,
    SpeedupPartsRecord,
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
    """A configuration measured in alternation: a mode and its threads, as a sweep's cell is.
    `one_at_a_time`: a pool mode's 1×J measured as its plan with each branch waited for as soon as
    it is launched, in a worker whose pool has the I threads of another configuration (one process
    cannot change its inter-op count; see `with_parts`)."""

    one_at_a_time: bool = False

    @property
    def uses_pool(self) -> bool:
        return MODES[self.mode].starts_interop_pool

    def argv(self) -> str:
        return f"{self.mode}:{self.interop}x{self.intra}" + (ONE_AT_A_TIME if self.one_at_a_time else "")


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


def parts_of(config: PairedConfig) -> tuple[PairedConfig, PairedConfig] | None:
    """(sequential 1×J, M 1×J) of a parallel configuration M I×J (`parts.part_configs`); None for a
    configuration that runs no branches side by side (sequential, streams, a pool mode on one
    inter-op thread)."""
    wanted = part_configs(config.mode, config.interop, config.intra)
    return None if wanted is None else (PairedConfig(*wanted[0]), PairedConfig(*wanted[1]))


def with_parts(configs: list[PairedConfig], fresh_workers: bool = False) -> tuple[list[PairedConfig], list[PairedConfig]]:
    """(`configs` with what their parts need appended, the configurations appended): sequential 1×J
    and M 1×J for each parallel M I×J, where the user's configurations lack them. Where the user's
    configurations share one worker (and `fresh_workers` is not asked), M 1×J joins them there one
    branch at a time on M I×J's pool (`PairedConfig.one_at_a_time`), step by step beside the others;
    else it is M 1×J itself, in fresh workers."""
    one_worker = not fresh_workers and share_one_worker(configs)
    out = list(configs)
    for c in configs:
        for needed in parts_of(c) or ():
            if any((x.mode, x.interop, x.intra) == (needed.mode, needed.interop, needed.intra) for x in out):
                continue
            out.append(replace(needed, one_at_a_time=one_worker and needed.uses_pool))
    return out, out[len(configs) :]


def share_one_worker(configs: list[PairedConfig]) -> bool:
    """Whether one worker can step every configuration: its pool-using ones agree on the inter-op
    count (the pool is sized once per process) and the intra-op count (a pool thread reads it once)."""
    pools = {(c.interop, c.intra) for c in configs if c.uses_pool and not c.one_at_a_time}
    alone = {c.intra for c in configs if c.one_at_a_time}
    return len(pools) <= 1 and (not alone or (len(pools) == 1 and alone == {j for _, j in pools}))


@dataclass
class PairedRequest:
    configs: list[PairedConfig]
    options: RunOptions
    #: None: ROUNDS_IN_ONE_WORKER or ROUNDS_ACROSS_WORKERS, as it measures.
    rounds: int | None = None
    #: A fresh worker per configuration per round even where one worker could hold them all
    #: (`--fresh-workers`): one configuration's steps can leave the process slower for another's.
    fresh_workers: bool = False
    #: Measure what each parallel configuration's parts need beside it (`with_parts`; `--no-parts`: not).
    parts: bool = True

    #: The configurations as given; those `with_parts` appended (`configs` holds both).
    user_configs: list[PairedConfig] = field(init=False)
    added: list[PairedConfig] = field(init=False)

    def __post_init__(self) -> None:
        self.user_configs = list(self.configs)
        self.added = []
        if self.parts:
            self.configs, self.added = with_parts(self.configs, self.fresh_workers)

    @property
    def in_one_worker(self) -> bool:
        return not self.fresh_workers and share_one_worker(self.configs)

    def argv(self) -> list[str]:
        """The options of `branchscope speedup` that describe this request (the window's job)."""
        args = [*self.options.argv(), "--configs", ",".join(c.argv() for c in self.user_configs)]
        args += ["--fresh-workers"] if self.fresh_workers else []
        args += [] if self.parts else ["--no-parts"]
        return args + (["--rounds", str(self.rounds)] if self.rounds is not None else [])

    @property
    def round_count(self) -> int:
        if self.rounds is not None:
            return self.rounds
        return ROUNDS_IN_ONE_WORKER if self.in_one_worker else ROUNDS_ACROSS_WORKERS


@dataclass
class PairedResult(Ended):
    exit_code: int
    record: SpeedupRecord | None = None
    message: str | None = None
    traceback: str | None = None
    cancelled_by: int | None = None


class _PairedWorker(OneWorker):
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

    def commit(self, folder: RunFolder, ranks: list[Rank], results: list[Any], load: Any = None) -> RunResult:
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
    pooled = sorted((c for c in configs if c.uses_pool), key=lambda c: c.one_at_a_time)  # a real pool first
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
        record = speedup_record(times.configs, times.order, IN_ONE_WORKER, rounds, request.options, times, request.added)
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
        PairedConfigRecord(
            mode=c.mode, interop=c.interop, intra=c.intra, one_at_a_time=c.one_at_a_time, steps_ms=[round(x, 4) for x in ms]
        )
        for c, ms in zip(configs, per_round, strict=True)
    ]
    if last is not None:
        last.prediction = prediction
    record = speedup_record(records, order, ACROSS_WORKERS, rounds, request.options, last, request.added)
    record.worker_steps = max(request.options.steps, 1)
    return PairedResult(EXIT_OK, record=record)


def speedup_record(
    configs: list[PairedConfigRecord],
    order: list[list[int]],
    measured: str,
    rounds: int,
    options: RunOptions,
    times: PairedTimesRecord | None,
    added: list[PairedConfig] | tuple[PairedConfig, ...] = (),
) -> SpeedupRecord:
    """The record of a paired measurement: each configuration's median and count (those in `added`
    marked `ADDED_FOR_PARTS`), each one's speedup over the first (`pairing.paired_speedup`) and,
    for a parallel one, its parts (`speedup_parts`), and the prediction (`predict`)."""
    filled = []
    for c in configs:
        ms = c.steps_ms or []
        median = round(statistics.median(ms), 4) if ms else None
        was_added = PairedConfig(c.mode or "", c.interop or 0, c.intra or 0, c.one_at_a_time) in added
        filled.append(
            msgspec.structs.replace(c, median_ms=median, steps=len(ms), added=ADDED_FOR_PARTS if was_added else None)
        )
    base = filled[0].steps_ms or []
    speedups: list[SpeedupValueRecord | None] = [None]
    for c in filled[1:]:
        s = paired_speedup(base, c.steps_ms or [])
        speedups.append(None if s is None else speedup_value(s, speedup_parts(filled, c)))
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


def speedup_value(s: Speedup, parts: SpeedupPartsRecord | None = None) -> SpeedupValueRecord:
    return SpeedupValueRecord(
        median=round(s.median, 4), ci95=[round(s.lo, 4), round(s.hi, 4)], distinguishable=s.distinguishable, parts=parts
    )


def speedup_parts(configs: list[PairedConfigRecord], c: PairedConfigRecord) -> SpeedupPartsRecord | None:
    """The parts of parallel configuration `c`'s speedup (`SpeedupPartsRecord`), each paired round by
    round (or step by step) as the whole is; None when `c` is not parallel or a part's
    configuration was not measured."""
    wanted = part_configs(c.mode, c.interop, c.intra)
    if wanted is None or c.mode not in MODES:
        return None
    index = {(x.mode, x.interop, x.intra): i for i, x in enumerate(configs)}
    seq, one = (index.get(config) for config in wanted)
    if seq is None or one is None:
        return None
    plan = paired_speedup(configs[seq].steps_ms or [], configs[one].steps_ms or [])
    parallel = paired_speedup(configs[one].steps_ms or [], c.steps_ms or [])
    whole = paired_speedup(configs[seq].steps_ms or [], c.steps_ms or [])
    if plan is None or parallel is None or whole is None:
        return None
    return SpeedupPartsRecord(
        plan=speedup_value(plan),
        parallel=speedup_value(parallel),
        whole=speedup_value(whole),
        plan_by=MODES[c.mode].traits.plan_title,
        sequential=seq,
        one_thread=one,
    )


# ---------------------------------------------------------------- text and speedup.json


def skipped_line(s: SkippedConfigRecord) -> str:
    """"skipped fork:2x1: fork mode needs TorchScript, …": a configuration left out, and why."""
    return f"skipped {s.mode}:{s.interop}x{s.intra}: {s.reason}"


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
        if c.added == ADDED_FOR_PARTS:
            head += " (measured for the parts)"
        lines.append(head)
        if value is not None and value.parts is not None:
            seq = value.parts.sequential
            over = configs[seq].label if seq is not None and 0 <= seq < len(configs) else "sequential"
            lines.append(f"  in parts, over {over}: {parts_text(value.parts, c.interop or 0)}")
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
    lines.extend(map(skipped_line, record.skipped or []))
    if any(c.added == ADDED_FOR_PARTS for c in configs):
        lines.append(
            "parts: each parallel M I×J is split into M 1×J over sequential 1×J (its plan) and M I×J over M 1×J "
            "(its threads); "
            + (
                "one process cannot change its inter-op count, so M 1×J and M I×J ran in fresh workers, round by "
                "round, and each interval holds the spread between workers"
                if record.measured == ACROSS_WORKERS
                else "all in one worker, step by step"
            )
            + " (--no-parts: not measured)"
        )
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
        if runs_branches_side_by_side(c.mode, c.interop) and bound and value is not None and value.median:
            # The bound is about threads only: it is held against the part the threads gave.
            held, what = value, "measured"
            if value.parts is not None and value.parts.parallel.median:
                held, what = value.parts.parallel, f"from its threads (over {c.mode} 1×{c.intra})"
            assert held.median is not None
            lines.append(
                f"{c.label}: {held.median:.2f}× {what} of the {bound_text(pred, c.interop or 0)} its {c.interop} "
                f"threads could give ({100 * held.median / bound:.0f}%)"
            )
            if held.ci95 and len(held.ci95) == 2 and held.ci95[0] > bound * ABOVE_BOUND:
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
