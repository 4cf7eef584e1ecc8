"""`branchscope sweep`: every mode × inter-op × intra-op cell as its own run, results in DIR/sweep.json.

The engine is `branchscope.profiling.run.sweep` (each cell through the runner engine); this module
parses, reports each cell (a line on stderr, or JSON lines on stdout with --jsonl, for the window)
and prints the table, the best cell and which way of using the cores served the model better
(`profiling/trace/advice.py`: a sequential and a fork or threads cell of the same thread count; the
fork or threads cell's speedup in parts, its plan × its threads, where the sequential 1×J and M 1×J
cells finished: `profiling/trace/parts.py`). On stderr it says first how long the sweep will take,
then each cell with the time left (`profiling/run/sweep_eta.py`), and a cell that ran on a busy
machine or starved of cores says so; a cell whose mode cannot run here (fork without TorchScript)
is skipped, in one line each before the first run. No torch here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from branchscope.profiling.run.processes import stop_with_parent
from branchscope.profiling.run.protocol import error_line
from branchscope.profiling.run.runner import stop_on_signals, warn_untested_torch
from branchscope.profiling.run.sweep import (
    add_sweep_arguments,
    run_sweep,
    sweep_request_from_args,
)
from branchscope.profiling.run.sweep_eta import SweepClock, plan_text
from branchscope.profiling.trace.events import (
    CellEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    SweepEvent,
    encode_event,
)
from branchscope.profiling.trace.sweep_records import DONE, SWEEP_JSON, SweepRecord
from branchscope.profiling.trace.sweep_text import best_text, markdown_table, sweep_advice


def register(subparsers: Any) -> None:
    sweep = subparsers.add_parser(
        "sweep",
        help="profile a model over modes and thread counts, one fresh worker per cell",
        description=(
            "Run every cell (mode × inter-op × intra-op threads) of a model as its own profiling run into "
            "DIR/<mode>-<interop>x<intra>/, and write DIR/sweep.json (each cell's medians and spread, the "
            "best cell and the cells within noise of it), rewritten after each cell. Cells run in --passes "
            "rounds (ABC ABC ABC), each a fresh worker; a cell's figure is the median over its passes. A mode "
            "without an inter-op pool (sequential) runs once per intra-op count. A failed cell is recorded "
            "and the sweep goes on; Ctrl+C keeps the finished cells. Exit codes: 0 some cell ran, 2 bad arguments, model or DIR, 3 or 4 "
            "every cell failed (as profile), 130/143 cancelled."
        ),
    )
    add_sweep_arguments(sweep)
    sweep.add_argument("--jsonl", action="store_true", help="JSON lines on stdout (sweep, progress, cell, done or error)")
    sweep.add_argument("--quiet", action="store_true", help="no per-cell lines on stderr")
    sweep.set_defaults(handler=run_sweep_command)


def _cell_line(event: CellEvent, clock: SweepClock) -> str:
    """"pass 1/3 cell 3/8 fork 2×1: 59.8 ms · about 2 min left" (the clock told of the run first)."""
    cell = event.cell
    where = f"cell {event.index + 1}/{event.of} {cell.label}"
    if event.passes is not None and event.passes > 1 and event.sweep_pass is not None:
        where = f"pass {event.sweep_pass}/{event.passes} {where}"
    if cell.status == DONE:
        ms = cell.unprofiled_median_ms
        line = f"{where}: {ms:.1f} ms" if ms is not None else f"{where}: done"
        line += f" ({cell.load_word})" if cell.load_word else ""
    else:
        line = f"{where}: failed: {cell.error}"
    left = clock.text()
    return f"{line} · {left}" if left else line


def skipped_lines(sweep: SweepRecord | None) -> list[str]:
    """One line per cell the sweep skips (its mode cannot run here): "skipped fork 2×1: fork mode
    needs TorchScript, and …: use threads mode …"."""
    return [f"skipped {c.label}: {c.skipped}" for c in (sweep.cells if sweep is not None else []) if c.skipped]


def report(sweep: SweepRecord, out: Path) -> str:
    """What a finished sweep prints: its table, the best cell, the advice (when there is one), where it went."""
    lines = [markdown_table(sweep)]
    best = sweep.best
    text = best_text(sweep)
    if best is not None and 0 <= best < len(sweep.cells) and text is not None:
        cell = sweep.cells[best]
        where = f" ({out / (cell.run or '')})" if len(sweep.tied()) == 1 else ""
        lines.append(f"best: {text}{where}")
    advice = sweep_advice(sweep)
    if advice is not None:
        lines.append(f"advice: {advice.text}")
    lines.append(f"wrote {out / SWEEP_JSON}")
    return "\n".join(lines)


def run_sweep_command(args: argparse.Namespace) -> int:
    request = sweep_request_from_args(args)

    def emit(event: Event) -> None:
        try:
            print(encode_event(event).decode("utf-8"), flush=True)
        except OSError:  # the window is gone: the sweep goes on to its cleanup
            pass

    clock = SweepClock.of(request)
    talk = not args.jsonl and not args.quiet

    def say(line: str) -> None:
        if talk:
            print(line, file=sys.stderr, flush=True)

    def on_event(event: Event) -> None:
        if isinstance(event, SweepEvent):  # the sweep starts: its folder taken, its first run next
            clock.restart()
            skipped = skipped_lines(event.sweep)
            clock.leave_out(len(skipped))
            say(f"sweeping {plan_text(clock.cells - len(skipped), clock.passes, clock.guess_s)} (a guess until a cell "
                f"finishes) into {request.out}")  # fmt: skip
            for line in skipped:
                say(line)
        elif isinstance(event, CellEvent):
            clock.run_done(event.sweep_pass, event.cell.status != DONE)
            say(_cell_line(event, clock))
        if args.jsonl:
            emit(event)

    if not args.jsonl:  # the window reads it in each cell's run.json
        warn_untested_torch(request.options)
    with stop_on_signals() as cancel:  # Ctrl+C and SIGTERM stop the running cell, never raise
        stop_with_parent(cancel)
        result = run_sweep(request, on_event, cancel)
    if result.ok:
        assert result.sweep is not None
        if args.jsonl:
            emit(DoneEvent(out=str(result.out), sweep=result.sweep))
        else:
            print(report(result.sweep, result.out))
        return 0
    if args.jsonl:
        emit(ErrorEvent(message=result.message or "the sweep failed", out=str(result.out)))
    print(error_line(result.message), file=sys.stderr, flush=True)
    return result.exit_code
