"""`branchscope inspect TRACE... [--json]`: what a trace holds, as a table or as JSON for scripts.

Several traces are the ranks of one job, reported per rank; traces of different jobs (another
`distributedInfo`, clocks that do not overlap: `merge.rank_groups`) are refused, never merged.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from branchscope.app.cli_text import bytes_text, fail
from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.analyses import (
    cores_used,
    gil_wait,
    interop_occupancy,
    lane_busy_ns,
    memory_imbalance,
    parallelism,
    steps_window,
)
from branchscope.profiling.trace.collectives import collectives_json
from branchscope.profiling.trace.flows import flow_counts
from branchscope.profiling.trace.gil import gil_json
from branchscope.profiling.trace.merge import rank_summaries
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.ranks import figures_json, rank_figures
from branchscope.profiling.trace.sources import open_job


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="summarise a profiler trace: lanes, busy time, memory peaks",
        description="What a trace holds: its lanes (threads, GPU streams) with their events and busy time, "
        "memory peaks per device, parallelism, cores used, the inter-op pool, and per rank of a job. A TRACE is "
        "a trace file, a run folder, a distributed run's folder or a folder of rank traces; several are the "
        "ranks of one job, merged on one clock (traces of different jobs are refused).",
    )
    p.add_argument(
        "trace", nargs="+", help="a torch.profiler / Chrome trace (.json, .json.gz) or a run folder; several ranks' traces merge"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=run)


def summary(trace: Trace) -> dict[str, Any]:
    """The `--json` document: the keys the issue fixes first, then extras."""
    start, end = trace.span()
    busy = lane_busy_ns(trace)
    occupancy = interop_occupancy(trace)
    window = steps_window(trace)
    return {
        "events": len(trace),
        "span_us": (end - start) / 1000.0,
        "lanes": [
            {
                "kind": ln.kind,
                "pid": ln.pid,
                "tid": ln.tid,
                "name": ln.name,
                "events": trace.lane_event_count(ln.index),
                "busy_us": int(busy[ln.index]) / 1000.0,
                "role": ln.role,
                "device": ln.device,
                "rank": ln.rank,
            }
            for ln in trace.lanes
        ],
        "memory": [{"device": m.device, "events": m.events, "peak_bytes": m.peak_bytes} for m in trace.memory],
        "rank": trace.rank,
        "parallelism": parallelism(trace),
        "cores_used": cores_used(trace),
        "steps_window_us": None if window is None else [window[0] / 1000.0, window[1] / 1000.0],
        "interop_pool": {"size": occupancy.capacity, "max_busy": int(occupancy.value.max())},
        "memory_imbalance_cuda": memory_imbalance(trace, "cuda"),
        # threads mode: the Python, the GIL, the branch threads' shares (run's own figures) and the
        # line; then each branch thread's wait for the GIL from the CPU samples. None / [] otherwise.
        "gil": gil_json(trace.run_info),
        "gil_wait": [{"pid": w.pid, "tid": w.tid, "name": w.name, "wait_us": w.total_ns / 1000.0} for w in gil_wait(trace)],
        # collectives matched across ranks: skew, waits, stragglers (None unless on 2+ ranks)
        "collectives": collectives_json(trace),
        # arrows launch -> kernel (and fwdbwd): from the flow events, from correlation ids only
        "flows": flow_counts(trace),
        "ranks": [
            {
                "rank": r.rank,
                "host": r.host,
                "events": r.events,
                "span_us": r.span_ns / 1000.0,
                "busy": r.busy,
                "busy_of": r.busy_of,
                "memory_peak_bytes": r.memory_peak_bytes,
                "step_us": None if r.step_ns is None else r.step_ns / 1000.0,
            }
            for r in rank_summaries(trace)
        ],
        # Per rank and step: step times, each step's straggler, the heaviest memory rank (`ranks.py`).
        **figures_json(rank_figures(trace)),
    }


def format_table(doc: dict[str, Any], path: str) -> str:
    lines = [
        f"{path}",
        f"  {doc['events']:,} events over {doc['span_us'] / 1000:.3f} ms"
        + (f", rank {doc['rank']}" if doc["rank"] is not None else "")
        + f", parallelism {doc['parallelism']:.2f} (threads computing on average"
        + (" in the profiled steps)" if doc["steps_window_us"] else ")")
        + ("" if doc["cores_used"] is None else f", cores used {doc['cores_used']:.2f} (CPU samples)"),
        "",
        f"  {'kind':<4} {'role':<9} {'pid':>8} {'tid':>12}  {'events':>9} {'busy ms':>10}  name",
    ]
    for ln in doc["lanes"]:
        lines.append(
            f"  {ln['kind']:<4} {ln['role']:<9} {ln['pid']:>8} {ln['tid']:>12}  {ln['events']:>9,} "
            f"{ln['busy_us'] / 1000:>10.3f}  {ln['name']}"
        )
    if doc["memory"]:
        lines += ["", f"  {'device':<8} {'events':>9} {'peak':>12}"]
        for m in doc["memory"]:
            lines.append(f"  {m['device']:<8} {m['events']:>9,} {bytes_text(m['peak_bytes']):>12}")
        if doc["memory_imbalance_cuda"] is not None:
            lines.append(
                f"  CUDA memory imbalance (max peak / min peak of two GPUs, else / median peak): {doc['memory_imbalance_cuda']:.2f}"
            )
    if len(doc["ranks"]) > 1:
        lines += ["", f"  {'rank':>4}  {'host':<16} {'events':>9} {'busy':>10} {'memory peak':>12} {'step ms':>10}"]
        for r in doc["ranks"]:
            peak = "–" if r["memory_peak_bytes"] is None else bytes_text(r["memory_peak_bytes"])
            step = "–" if r["step_us"] is None else f"{r['step_us'] / 1000:.3f}"
            lines.append(
                f"  {r['rank']:>4}  {(r['host'] or '–'):<16} {r['events']:>9,} "
                f"{r['busy'] * 100:>5.0f}% {r['busy_of']:<3} {peak:>12} {step:>10}"
            )
        if doc.get("straggler_line"):
            lines.append(f"  {doc['straggler_line']}")
    pool = doc["interop_pool"]
    if pool["size"]:
        lines += ["", f"  inter-op pool: {pool['size']} threads, at most {pool['max_busy']} busy at once"]
    if doc["gil"] is not None:
        lines += ["", f"  {doc['gil']['line']}"]
        lines += [
            f"    {w['name'] or w['tid']}: {w['wait_us'] / 1000:.3f} ms waiting for the GIL (CPU samples)"
            for w in doc["gil_wait"]
        ]
    lines += ["", f"  {flows_line(doc['flows'])}"]
    lines += collectives_lines(doc["collectives"])
    return "\n".join(lines)


def flows_line(flows: dict[str, int]) -> str:
    """The arrows in one line: how many, and how many only correlation ids gave."""
    return (
        f"flows: {flows['total']:,} arrows ({flows['from_events']:,} from flow events, "
        f"{flows['from_correlation']:,} from launch/kernel correlation ids)"
    )


def collectives_lines(coll: dict[str, Any] | None) -> list[str]:
    """The collectives matched across ranks: the worst by arrival skew, each rank's wait and times last."""
    if coll is None:
        return []
    lines = [
        "",
        f"  collectives: {coll['count']:,} on {len(coll['ranks'])} ranks ({coll['matched_by_seq']:,} by Seq, "
        f"{coll['matched_by_position']:,} by name, size and place; counted: {coll['level']})"
        + (f", {coll['incomplete']:,} missing on some rank" if coll["incomplete"] else "")
        + (f", {coll['size_mismatch']:,} with sizes that differ" if coll["size_mismatch"] else ""),
        f"  {'skew ms':>10} {'last':>5} {'first':>5}  collective",
    ]
    for w in coll["worst"]:
        which = f"Seq {w['seq']}" + (f" of group {w['group']}" if w["group"] else "") if w["seq"] is not None else f"#{w['position'] + 1}"
        which += f" of {w['size_elems']:,} elements" if w["position_by_size"] else ""
        called = f" ({w['collective']})" if w["collective"] and w["collective"] not in w["name"] else ""
        lines.append(f"  {w['skew_us'] / 1000:>10.3f} {w['last_rank']:>5} {w['first_rank']:>5}  {w['name']}{called} {which}")
    ranks = coll["ranks"]
    if len(ranks) > 16:  # the stragglers first: most often last, then least waiting
        ranks = sorted(ranks, key=lambda r: (-r["times_last"], r["wait_us"], r["rank"]))[:16]
    lines += ["", f"  {'rank':>4} {'wait ms':>10} {'last':>6}"]
    lines += [f"  {r['rank']:>4} {r['wait_us'] / 1000:>10.3f} {r['times_last']:>6,}" for r in ranks]
    if len(ranks) < len(coll["ranks"]):
        lines.append(f"  … {len(coll['ranks']) - len(ranks):,} more ranks (all in --json)")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        trace = open_job(list(args.trace))
    except (TraceFormatError, OSError) as exc:
        return fail(exc)
    doc = summary(trace)
    if args.json:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(format_table(doc, " + ".join(args.trace)))
    return 0
