"""`branchscope memory SOURCE... [--json] [--top N]`: memory per device, what it holds at its
peak, and the imbalance across devices of one kind.

A SOURCE is a trace file, a run folder (its trace; a distributed run's: each rank's) or an allocator snapshot (a pickle, told by its
first bytes). Several sources are the ranks of one job: each keeps its own rank (a trace's
distributedInfo, a snapshot's `rank-N` in its name), or its position when those are missing or
repeat, and they are merged with `merge_traces`, so devices read `rankR/cuda:N`.
"""

from __future__ import annotations

import argparse
import json
import sys

from branchscope.app.cli_text import bytes_text, fail
from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.memory import MemoryAnalysis, analyze_memory, missed_frees_line
from branchscope.profiling.trace.memory_source import recorded_by, why_none
from branchscope.profiling.trace.ranks import figures_json, rank_figures
from branchscope.profiling.trace.sources import open_job


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "memory",
        help="memory per device: peaks, what holds them, imbalance (traces, run folders, snapshots)",
        description="Memory per device: each device's peak, what is live at it (by op, or a snapshot's allocation "
        "site), and how far the heaviest device of a kind is above the median one. A SOURCE is a trace, a run "
        "folder (a distributed run's: every rank's) or an allocator snapshot (read with an unpickler that refuses "
        "every global); several are the ranks of one job, devices named rankR/cuda:N.",
    )
    p.add_argument(
        "sources", nargs="+", metavar="SOURCE",
        help="a trace (.json, .json.gz), a run folder or a memory snapshot (.pickle); several are ranks of one job",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--top", type=_count, default=10, metavar="N", help="groups listed at each peak (default 10)")
    p.set_defaults(handler=run)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n


def format_table(analysis: MemoryAnalysis, title: str, top: int) -> str:
    lines = [title]
    if not analysis.devices:
        return "\n".join([*lines, f"  {why_none(analysis.trace)}"])
    source = recorded_by(analysis.trace)
    if source:
        lines.append(f"  memory: {source}")
    main = analysis.main_device()
    if main is not None and len(analysis.devices) > 1:
        lines.append(f"  largest peak: {main.label}, {bytes_text(main.peak_bytes)}")
    for d in analysis.devices:
        series = analysis.series[d.device]
        lines += [
            "",
            f"  {d.label}: peak {bytes_text(d.peak_bytes)} {(d.peak_ns - int(series.ts_ns[0])) / 1e6:.3f} ms after its"
            " first memory event"
            + (f", reserved peak {bytes_text(d.reserved_peak_bytes)}" if d.reserved_peak_bytes is not None else "")
            + (f", capacity {bytes_text(d.capacity_bytes)}" if d.capacity_bytes is not None else "")
            + f"; {d.allocations:,} allocations, {d.frees:,} frees",
        ]
        if not series.has_addr:
            lines.append("    events without addresses: allocations and frees cannot be paired")
            continue
        if d.freed_unseen:
            lines.append(f"    {missed_frees_line(d.freed_unseen, d.label)}")
        if top and d.at_peak:
            lines.append(f"    {'live at the peak':>16} {'allocs':>8}  where")
            for a in d.at_peak[:top]:
                lines.append(f"    {bytes_text(a.bytes):>16} {a.allocations:>8,}  {a.where}")
            if len(d.at_peak) > top:
                rest = d.at_peak[top:]
                lines.append(
                    f"    {bytes_text(sum(a.bytes for a in rest)):>16} {sum(a.allocations for a in rest):>8,}"
                    f"  ({len(rest)} more)"
                )
    if analysis.imbalance:
        lines.append("")
    for i in analysis.imbalance:
        lines.append(f"  {i.device_type} imbalance: {i.words(lambda b: bytes_text(int(round(b))))}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        trace = open_job(list(args.sources))
    except (TraceFormatError, OSError) as exc:
        return fail(exc)
    analysis = analyze_memory(trace)
    if args.json:
        # Per rank: its peak per device and the heaviest rank over the median peak (as `inspect --json`).
        json.dump({**analysis.to_json(args.top), **figures_json(rank_figures(trace), memory_only=True)}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(format_table(analysis, " + ".join(args.sources), args.top))
    return 0
