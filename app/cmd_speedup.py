"""`branchscope speedup`: configurations of one model measured in alternation, speedups with intervals.

The engine is `branchscope.profiling.run.paired` (the paired worker, or a fresh worker per
configuration per round, each through the runner); the statistics are `profiling/trace/pairing.py`.
This module parses, prints progress on stderr, the lines (or `--json`) and writes `--out DIR`'s
speedup.json. A configuration whose mode cannot run under the worker's Python (fork without
TorchScript: `sweep.modes_skipped`, that Python's probe) is left out before any worker starts, in
one line on stderr and in the record's `skipped`, and the rest are measured. No torch here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from branchscope.profiling.run.options import RunOptions, add_options
from branchscope.profiling.run.paired import (
    ROUNDS_ACROSS_WORKERS,
    ROUNDS_IN_ONE_WORKER,
    ConfigError,
    PairedConfig,
    PairedRequest,
    SpeedupFolderError,
    check_speedup_out,
    parse_configs,
    run_paired,
    skipped_line,
    speedup_lines,
    write_speedup,
)
from branchscope.profiling.run.processes import stop_with_parent
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_MODE, EXIT_WORKER, RunRequest, error_line
from branchscope.profiling.run.runner import RunError, stop_on_signals, validate, warn_untested_torch
from branchscope.profiling.run.sweep import modes_skipped
from branchscope.profiling.trace.events import DoneEvent, ErrorEvent, Event, ProgressEvent, encode_event
from branchscope.profiling.trace.records import encode_record
from branchscope.profiling.trace.sweep_records import SkippedConfigRecord


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "speedup",
        help="measure configurations of a model in alternation: speedups with 95%% intervals",
        description=(
            "Measure configurations (MODE:IxJ, the first the baseline) in alternation, never all of one then "
            "all of another: in one worker, one step of each in turn, where the configurations allow it "
            "(the pool-using ones agree on their thread counts), else in rounds of a fresh worker per "
            "configuration. The speedup is the median of per-pair ratios with a 95% bootstrap interval; "
            "'not distinguishable from 1.0×' when the interval holds 1. Exit codes: 0 ok, 2 bad arguments "
            "or model, 3 a mode cannot run here, 4 a worker died or timed out."
        ),
    )
    add_options(p)
    p.add_argument("--configs", required=True, metavar="M:IxJ,M:IxJ",
                   help="configurations, comma-separated, the baseline first (sequential:1x1,fork:2x1)")  # fmt: skip
    p.add_argument("--rounds", type=int, metavar="N",
                   help=f"rounds (default {ROUNDS_IN_ONE_WORKER} in one worker, {ROUNDS_ACROSS_WORKERS} across workers); "
                   "across workers each worker times --steps steps")  # fmt: skip
    p.add_argument("--fresh-workers", action="store_true",
                   help="a fresh worker per configuration per round, even where one worker could hold them all "
                   "(a parallel configuration's steps can leave the process slower for a sequential one's)")  # fmt: skip
    p.add_argument("--no-parts", action="store_true",
                   help="do not measure sequential 1xJ and M 1xJ beside each parallel M IxJ (they split its speedup "
                   "into what the mode's plan gave and what its threads gave)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as JSON (what speedup.json holds)")
    p.add_argument("--out", type=Path, metavar="DIR", help="write DIR/speedup.json (DIR made if missing)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--jsonl", action="store_true", help="JSON lines on stdout (progress, then done or error), for the window")
    p.set_defaults(handler=run_speedup_command)


def _emit(event: Event) -> None:
    try:
        print(encode_event(event).decode("utf-8"), flush=True)
    except OSError:  # the window is gone: the measurement goes on to its cleanup
        pass


def _fail(args: argparse.Namespace, message: str, code: int = EXIT_BAD_INPUT) -> int:
    """One `error:` line on stderr (and, with --jsonl, the error event); the exit code."""
    if getattr(args, "jsonl", False):
        _emit(ErrorEvent(message=message, exit_code=code))
    print(error_line(message), file=sys.stderr, flush=True)
    return code


def _skipped(configs: list[PairedConfig], python: Path | None) -> list[SkippedConfigRecord]:
    """The configurations whose mode cannot run under `python` (`sweep.modes_skipped`), each with why."""
    why = modes_skipped(dict.fromkeys(c.mode for c in configs), python)
    return [SkippedConfigRecord(mode=c.mode, interop=c.interop, intra=c.intra, reason=why[c.mode]) for c in configs if c.mode in why]


def run_speedup_command(args: argparse.Namespace) -> int:
    try:
        configs = parse_configs(args.configs)
    except ConfigError as exc:
        return _fail(args, str(exc))
    options = RunOptions.from_args(args)
    if options.nproc != 1:
        return _fail(args, "speedup measures one process: --nproc is not taken here")
    if options.nnodes != 1:
        return _fail(args, "speedup measures one process: --nnodes is not taken here")
    if args.rounds is not None and args.rounds < 2:
        return _fail(args, f"--rounds must be at least 2, not {args.rounds}")
    try:  # the model, the numbers, --python: one line before any worker starts
        validate(RunRequest(mode=configs[0].mode, interop=configs[0].interop, intra=configs[0].intra, out=Path("."), options=options))
    except RunError as exc:
        return _fail(args, str(exc))
    if not args.jsonl:
        warn_untested_torch(options)
    skipped = _skipped(configs, options.python)
    if skipped:
        if not args.quiet:
            for s in skipped:
                print(skipped_line(s), file=sys.stderr, flush=True)
        left = [c for c in configs if c.mode not in {s.mode for s in skipped}]
        if not left or left[0] != configs[0]:
            return _fail(args, f"the baseline {configs[0].argv()} cannot run here: {skipped[0].reason}", EXIT_MODE)
        if len(left) < 2:
            return _fail(args, f"nothing left to measure against the baseline: {skipped[0].reason}", EXIT_MODE)
        configs = left
    if args.out is not None:
        try:
            check_speedup_out(args.out)
        except SpeedupFolderError as exc:
            return _fail(args, str(exc))
    request = PairedRequest(
        configs=configs, options=options, rounds=args.rounds, fresh_workers=args.fresh_workers, parts=not args.no_parts
    )

    interactive = sys.stderr.isatty() and not args.quiet

    def on_event(event: Event) -> None:
        if isinstance(event, ProgressEvent) and args.jsonl:
            _emit(ProgressEvent(step=event.step, of=event.of))
        elif isinstance(event, ProgressEvent) and interactive:
            unit = "round" if request.in_one_worker else "worker"
            end = "\n" if event.step == event.of else "\r"
            print(f"{unit} {event.step}/{event.of}", end=end, file=sys.stderr, flush=True)

    with stop_on_signals() as cancel:  # Ctrl+C and SIGTERM stop the worker, never raise
        stop_with_parent(cancel)
        result = run_paired(request, on_event, cancel)
    if not result.ok or result.record is None:
        if result.traceback:
            sys.stderr.write(result.traceback.rstrip("\n") + "\n")
        return _fail(args, result.message or "the measurement failed", result.exit_code or EXIT_WORKER)
    record = result.record
    record.skipped = skipped
    if args.out is not None:
        try:
            written = write_speedup(args.out, record)
        except SpeedupFolderError as exc:
            return _fail(args, str(exc))
    if args.jsonl:
        _emit(DoneEvent(out=str(args.out or ""), speedup=record))
    elif args.json:
        print(encode_record(record).decode("utf-8"))
    else:
        print("\n".join(speedup_lines(record)))
        if args.out is not None:
            print(f"wrote {written}")
    return 0
