"""What the tooltip and the details panel say about one event (Qt-free, so both say the same)."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from branchscope.profiling.trace.model import Trace
from branchscope.widgets.units import format_duration, format_offset

ROLE_TITLES = {
    "main": "main thread",
    "interop": "inter-op pool",
    "intra": "intra-op (OpenMP) worker",
    "autograd": "autograd",
    "other": "other thread",
    "stream": "GPU stream",
}


def format_shapes(shapes: Any) -> str:
    """`Input Dims` as `8×64×35×35, 64×64×1×1, –` (one entry per input; – for non-tensors)."""
    if not isinstance(shapes, list) or not shapes:
        return "–"
    parts = []
    for s in shapes:
        if isinstance(s, list) and s and all(isinstance(d, int) for d in s):
            parts.append("×".join(str(d) for d in s))
        elif isinstance(s, list) and s and all(isinstance(d, list) for d in s):
            parts.append("[" + ", ".join("×".join(str(x) for x in d) for d in s) + "]")
        else:
            parts.append("–")
    return ", ".join(parts)


def lane_title(trace: Trace, lane_index: int) -> str:
    lane = trace.lanes[lane_index]
    return f"{lane.label} · {ROLE_TITLES.get(lane.role, lane.role)}"


def describe_event(
    trace: Trace, i: int, branch_names: list[str] | None = None, event_branch: np.ndarray | None = None
) -> list[tuple[str, str]]:
    """(field, value) rows: name, category, lane, start, duration, shapes, branch."""
    ev = trace.event(i)
    t0 = trace.span()[0]
    branch = "–"
    if branch_names and event_branch is not None and 0 <= i < event_branch.size:
        b = int(event_branch[i])
        if 0 <= b < len(branch_names):
            branch = branch_names[b]
    rows = [
        ("Name", ev.name),
        ("Category", ev.cat or "–"),
        ("Lane", lane_title(trace, ev.lane.index)),
        ("Start", f"{format_offset(ev.start_ns - t0)} from the trace's start"),
        ("Duration", format_duration(ev.dur_ns)),
        ("Shapes", format_shapes(ev.shapes)),
        ("Branch", branch),
    ]
    return rows


def rows_to_html(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><td style='color:#5b6570;padding-right:8px'>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table cellspacing='0' cellpadding='1'>{cells}</table>"


def rows_to_text(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in rows)
