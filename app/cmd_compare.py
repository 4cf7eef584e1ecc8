"""`branchscope compare A B [C…] [--baseline K] [--json] [--screenshot OUT.png]`: runs side by side.

Each argument is a run folder (run.json + its trace) or a trace file. Prints one row per run (what
it ran, its unprofiled step time and spread, the speedup against the baseline, parallelism, cores
used, memory peaks) and the ops whose time differs most; `--json` prints the same for scripts;
`--screenshot` draws the compare view offscreen instead (Qt is imported only then), at 1600x1000 or
`--size WxH`, and says the size it wrote. When a sequential
and a fork or threads run of the same thread count are among the runs, one line says which way of using the
cores served the model better (`profiling/trace/advice.py`), or which run would tell; `--json`'s
"advice" is that as an object (`records.AdviceRecord`: text, winner, reason, parts). A run starved of cores
(`profiling/trace/starved.py`) says so in its row and is never the advice's winner; a run of the pair
that ran on a busy machine (run.json's `load.busy`) is named at the line's and the reason's end. A fork or threads
run M I×J compared beside sequential 1×J and M 1×J of its model gets a line with its speedup in parts
(`profiling/trace/parts.py`: "1.35× = 1.40× from TorchScript's plan × 0.96× from 2 threads"), and
`--json`'s row its "parts"; the prediction's bound is then held against the part from its threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from branchscope.app.cli_text import bytes_text, fail
from branchscope.app.screenshot_size import add_size_argument, parse_size, settle_at, wrote_line
from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.advice import advice_record, from_summaries
from branchscope.profiling.trace.compare import Comparison, LoadedRun, compare, load_run, vs_prediction
from branchscope.profiling.trace.parts import parts_sentence
from branchscope.profiling.trace.prediction import prediction_text
from branchscope.profiling.trace.records import to_builtins
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import AdviceRecord

#: Ops listed in the table (`--json` lists them all).
TOP_OPS = 15
#: Under the parts' lines: what they are, and that they are not paired.
PARTS_NOTE = (
    "parts: M I×J's speedup over sequential 1×J is M's plan (sequential 1×J ÷ M 1×J) × its threads (M 1×J ÷ M I×J), "
    "from the runs' medians, unpaired (branchscope speedup measures them paired, with intervals)"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare runs side by side: step times, speedups, parallelism, memory, op differences",
        description="Compare runs side by side. Each RUN is a run folder (run.json + trace.json.gz), a "
        "distributed run's folder (its ranks merged; the slowest rank's step times, and each rank's), a folder "
        "of rank traces, or a trace file; a run.json beside a trace file that names it is read too.",
    )
    p.add_argument("runs", nargs="*", metavar="RUN", help="a run folder or a trace file (two or more)")
    p.add_argument(
        "--baseline",
        type=int,
        metavar="K",
        help="the run speedups are measured against, by 0-based index (default: the sequential 1×1 run, else the first)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument(
        "--screenshot",
        metavar="OUT.png",
        type=Path,
        help="draw the compare view offscreen at 1600x1000 (or --size), save it, and exit",
    )
    add_size_argument(p, "the compare view")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        return fail("compare needs at least two runs (run folders or trace files)")
    try:
        size = parse_size(args.size)
    except ValueError as exc:
        return fail(exc)
    if args.baseline is not None and not 0 <= args.baseline < len(args.runs):
        return fail(
            f"--baseline {args.baseline} is not one of the {len(args.runs)} runs (0 to {len(args.runs) - 1})"
        )
    try:
        loaded = [load_run(p) for p in args.runs]
    except TraceFormatError as exc:
        return fail(str(exc))
    result = compare(loaded, args.baseline)
    if args.screenshot is not None:
        return screenshot(loaded, result, args.screenshot, size)
    if args.json:
        advice = comparison_advice(result)
        json.dump({**result.to_json(), "advice": None if advice is None else to_builtins(advice)}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(format_table(result))
    return 0


# ---- the table ---------------------------------------------------------------------------------
def comparison_advice(c: Comparison) -> AdviceRecord | None:
    """Which way of using the cores served the model better, among the runs compared (or which run
    would tell), its winner's `index` the run's as --baseline K counts; None when the runs are not
    of both ways."""
    return advice_record(from_summaries(c.runs))


def prediction_lines(c: Comparison) -> list[str]:
    """What each run's branches could give (`profiling/trace/prediction.py`), one line per run that
    has a prediction, how far a fork or threads run got towards it, and the gap explained
    (`profiling/trace/gap.py`)."""
    lines = []
    for k, s in enumerate(c.runs):
        vs = vs_prediction(c.runs, c.baseline, c.speedup, k, c.parts_of(k))
        if vs is not None:
            lines.append(f"prediction, run {k}: {prediction_text(vs.prediction)}; {vs.text()}")
        elif s.prediction is not None:
            lines.append(f"prediction, run {k}: {prediction_text(s.prediction)}")
        if s.gap is not None:
            lines.append(f"the gap, run {k}: {s.gap.text()}")
    return lines


def parts_lines(c: Comparison) -> list[str]:
    """Each fork or threads run's speedup in parts, one line per run whose sequential 1×J and M 1×J
    are among the runs: "parts, run 2: fork 2×1 over sequential 1×1, in parts: 1.67× = … (from runs 0 and 1)"."""
    lines = []
    for k, s in enumerate(c.runs):
        parts = c.parts_of(k)
        if parts is not None:
            lines.append(
                f"parts, run {k}: {parts_sentence(s.mode, s.interop, s.intra, parts)} "
                f"(from runs {parts.sequential} and {parts.one_thread})"
            )
    return lines


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def _median(unprofiled: StepStats | None, profiled_ms: float | None) -> str:
    """The unprofiled median; else (a folder of rank traces: no run.json) the profiled one, said so."""
    if unprofiled is None and profiled_ms is not None:
        return f"{profiled_ms:.2f} profiled"
    return _num(None if unprofiled is None else unprofiled.median, ".2f")


def format_table(c: Comparison) -> str:
    """The readable form: one row per run, then the top op differences."""
    header = ["#", "run", "mode", "threads", "median ms", "spread ms [min q1–q3 max]", "speedup",
              "parallelism", "cores used", "peak memory"]  # fmt: skip
    rows = []
    for k, s in enumerate(c.runs):
        u = s.unprofiled
        spread = "–" if u is None else f"{u.min:.2f} [{u.q1:.2f}–{u.q3:.2f}] {u.max:.2f}"
        if k == c.baseline:
            vs = "baseline"
        elif c.speedup[k] is None:
            vs = "–"
        else:
            vs = f"{c.speedup[k]:.2f}×" + (" within noise" if c.within_noise[k] else "")
        if c.busy_beside_baseline(k) and vs != "–":
            vs += " machine busy"
        if s.starved:
            vs += " starved"
        memory = ", ".join(f"{d} {bytes_text(b)}" for d, b in s.peak_bytes.items()) or "–"
        rows.append([
            f"{k}{'*' if k == c.baseline else ''}", s.label, s.mode or "–", s.threads or "–",
            _median(u, s.median_ms), spread, vs,
            _num(s.parallelism, ".2f"), _num(s.cores_used, ".2f"), memory,
        ])  # fmt: skip
        for r in s.ranks:  # a distributed run: each rank's own step times under the slowest's
            ru = r.unprofiled
            rank_spread = "–" if ru is None else f"{ru.min:.2f} [{ru.q1:.2f}–{ru.q3:.2f}] {ru.max:.2f}"
            rows.append(["", f"  rank {r.rank}", "", "", _median(ru, r.median_ms), rank_spread,
                         "", "", "", ""])  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {4, 7, 8}
    lines = ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in
                       enumerate(zip(r, widths))).rstrip() for r in [header, *rows]]  # fmt: skip
    lines += ["", c.baseline_text()]
    busy = [f"run {k} ({s.load.text().removeprefix('machine: ')})" for k, s in enumerate(c.runs) if s.busy and s.load is not None]
    if busy:
        lines.append("machine busy: " + "; ".join(busy))
    starved = [f"run {k}" for k, s in enumerate(c.runs) if s.starved]
    if starved:
        lines.append(f"starved of cores: {', '.join(starved)} (got fewer cores than the threads could use: "
                     "never the advice's winner)")  # fmt: skip
    parts = parts_lines(c)
    if parts:
        lines += ["", *parts, PARTS_NOTE]
    advice = comparison_advice(c)
    if advice is not None:
        lines += ["", f"advice: {advice.text}"]
    predicted = prediction_lines(c)
    if predicted:
        lines += ["", *predicted]
    lines += [
        "",
        "median and spread: step times without the profiler (unprofiled; a distributed run's: the slowest rank's, step",
        "by step, its ranks' own below it); speedup: the baseline's median ÷ the run's,",
        "within noise where the interquartile ranges overlap; parallelism: threads busy computing on average",
        "(waits excluded); cores used: CPU cores the samples saw in use; both inside the profiled steps.",
    ]
    if c.ops:
        lines += [
            "",
            f"ops whose time differs most (total ms per run, self ms in brackets; {len(c.ops)} ops in all):",
        ]
        name_w = min(48, max(len(op.name) for op in c.ops[:TOP_OPS]))
        cells = [[f"{op.count[k]}× {op.total_us[k] / 1000:.3f} ({op.self_us[k] / 1000:.3f})" if op.count[k] else "–"
                  for k in range(len(c.runs))] for op in c.ops[:TOP_OPS]]  # fmt: skip
        col_w = [max(len(f"run {k}"), *(len(row[k]) for row in cells)) for k in range(len(c.runs))]
        lines.append(
            "  " + "op".ljust(name_w) + "  " + "  ".join(f"run {k}".rjust(w) for k, w in enumerate(col_w))
        )
        for op, row in zip(c.ops, cells):
            name = op.name if len(op.name) <= name_w else op.name[: name_w - 1] + "…"
            lines.append(
                "  " + name.ljust(name_w) + "  " + "  ".join(cell.rjust(w) for cell, w in zip(row, col_w))
            )
    return "\n".join(lines)


# ---- the picture -------------------------------------------------------------------------------
def screenshot(loaded: list[LoadedRun], result: Comparison, out: Path, size: tuple[int, int]) -> int:
    """Draws the compare view offscreen at `size` into `out` (PNG)."""
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    from branchscope.app.screenshot_size import drop_offscreen_size_hint_warning
    from branchscope.widgets.compare_view import CompareView

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "branchscope"])
    drop_offscreen_size_hint_warning()
    # A view failing while it paints reports through sys.excepthook: such a picture is not written.
    failures: list[str] = []
    previous_hook = sys.excepthook
    sys.excepthook = lambda kind, exc, _tb: failures.append(f"{kind.__name__}: {exc}")
    view = CompareView()
    try:
        view.resize(*size)
        view.set_runs([r.trace for r in loaded], result.runs, result.baseline, ops=result.ops)
        view.show()
        settle_at(app, view, size)
        image = view.grab()
    except Exception as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        sys.excepthook = previous_hook
        view.close()
    if failures:
        print(f"error: drawing the compare view failed: {failures[0]}", file=sys.stderr)
        return 1
    if not image.save(str(out), "PNG"):
        print(f"error: could not write {out}", file=sys.stderr)
        return 1
    print(wrote_line(out, (image.width(), image.height()), size))
    return 0
