"""What a sweep says in words: a cell's label with its load word (`cell_text`), the best cells
(`best_text`), the advice over its finished cells (`sweep_advice`) and its markdown table
(`markdown_table`). What `branchscope sweep`, sweep.json's advice and the Sweep tab print; Qt-free
and torch-free, over the `SweepRecord` a sweep writes (`profiling/run/sweep.py`)."""

from __future__ import annotations

from branchscope.profiling.trace.advice import advice_record, from_sweep
from branchscope.profiling.trace.sweep_records import FAILED, NOT_RUN, AdviceRecord, CellRecord, SweepRecord


def _ms(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def cell_text(cell: CellRecord) -> str:
    """"fork 2×1", "threads 2×1 (starved of cores)", "sequential 1×2 (busy machine)": such a cell's
    time is no claim (`CellRecord.load_word`)."""
    word = cell.load_word
    return cell.label + (f" ({word})" if word else "")


def best_text(sweep: SweepRecord) -> str | None:
    """"fork 2×1", or "fork 2×1, sequential 1×1 (within noise of each other)" when cells tie with the
    best (`SweepRecord.tied`), a starved cell said so (`cell_text`); None when no cell finished."""
    tied = sweep.tied()
    if not tied:
        return None
    labels = ", ".join(cell_text(sweep.cells[i]) for i in tied)
    return labels + (" (within noise of each other)" if len(tied) > 1 else "")


def sweep_advice(sweep: SweepRecord) -> AdviceRecord | None:
    """Which way of using the cores served the model better (`advice.advice_record` over the
    sweep's finished cells), its line and reason ending with which of the two cells it compares ran
    on a busy machine ("… (sequential 1×2 and threads 2×1 ran on a busy machine: re-run them on a
    quiet one)"): a ratio between such cells measures the machine's load as much as the model. A
    starved cell is the advice's own to say (it names no winner). What sweep.json, `branchscope
    sweep` and the Sweep tab say; the note is `advice.with_busy_note`'s, from the cells' `busy`."""
    return advice_record(from_sweep(sweep))


def markdown_table(sweep: SweepRecord) -> str:
    """One row per cell: the cell, unprofiled median (over its passes), spread (min, q1–q3, max, of
    the passes' steps pooled), steps, each pass's median, profiled median, notes."""
    rows = [
        "| cell | unprofiled median ms | spread ms (min, q1–q3, max) | steps | pass medians ms | profiled median ms | notes |",
        "| --- | ---: | --- | ---: | --- | ---: | --- |",
    ]
    tied = sweep.tied()
    for i, c in enumerate(sweep.cells):
        spread = c.unprofiled_spread_ms
        spread_text = (
            f"{_ms(spread[0])}, {_ms(spread[1])}–{_ms(spread[2])}, {_ms(spread[3])}" if spread and len(spread) == 4 else "-"
        )
        notes = []
        if i in tied:
            notes.append("best, within noise of " + ", ".join(sweep.cells[j].label for j in tied if j != i)
                         if len(tied) > 1 else "best")  # fmt: skip
        if c.any_interop:
            notes.append("no inter-op pool: any inter-op count")
        if c.oversubscribed:
            notes.append(f"oversubscribed (> {sweep.cores} cores)")
        if c.load_word:
            notes.append(c.load_word)
        if c.status == FAILED:
            notes.append(f"failed: {c.error}")
        elif c.skipped:
            notes.append(f"skipped: {c.skipped}")
        elif c.status == NOT_RUN:
            notes.append("not run")
        elif c.failed_passes:
            notes.append(f"{c.failed_passes} pass{'es' if c.failed_passes > 1 else ''} failed: {c.error}")
        steps = c.unprofiled_steps
        medians = " / ".join(_ms(m) for m in c.pass_medians_ms) if c.pass_medians_ms else "-"
        rows.append(
            f"| {c.label} | {_ms(c.unprofiled_median_ms)} | {spread_text} | {steps if steps is not None else '-'} | "
            f"{medians} | {_ms(c.median_ms)} | "
            f"{'; '.join(notes).replace('|', '/')} |"
        )
    return "\n".join(rows)
