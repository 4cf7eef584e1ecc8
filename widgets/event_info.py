"""What the tooltip and the details panel say about one event (Qt-free, so both say the same)."""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np

from branchscope.profiling.trace.collectives import COLLECTIVE_NAME, collectives_of
from branchscope.profiling.trace.flows import collective_key, collective_peers, event_flows, launch_delay_ns
from branchscope.profiling.trace.kineto import INPUT_DIMS
from branchscope.profiling.trace.mode_traits import run_traits
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.rank_job import job_of
from branchscope.profiling.trace.run_info import BRANCH_PREFIX, branch_name
from branchscope.widgets.units import format_duration, format_offset

#: The colour of a row's field name.
KEY_COLOR = "#5b6570"

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
    """A lane's label and its role, the pool named as the run's mode names it ("Python pool")."""
    lane = trace.lanes[lane_index]
    role = run_traits(trace.run_info).pool_title if lane.role == "interop" else ROLE_TITLES.get(lane.role, lane.role)
    return f"{lane.label} · {role}"


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
        ("Name", ev.name if (name := branch_name(ev.name)) is None else BRANCH_PREFIX + name),
        ("Category", ev.cat or "–"),
        ("Lane", lane_title(trace, ev.lane.index)),
        ("Start", f"{format_offset(ev.start_ns - t0)} from the trace's start"),
        ("Duration", format_duration(ev.dur_ns)),
        ("Shapes", format_shapes(ev.shapes)),
        ("Branch", branch),
    ]
    return rows


def link_rows(trace: Trace, i: int, limit: int = 4) -> list[tuple[str, str]]:
    """What the event is linked to: the kernels it launches with the launch→start delay, or the
    launch of a kernel ("launched by"); the same collective on the other ranks, and how late each starts."""
    rows: list[tuple[str, str]] = []
    flows = trace.flows
    ks = event_flows(trace, i)
    launches = [k for k in ks.tolist() if int(flows.dst[k]) != i and int(flows.dst[k]) >= 0]
    for k in launches[:limit]:
        dst, delay = int(flows.dst[k]), launch_delay_ns(trace, k)
        rows.append((
            "Launches", f"{trace.event_name(dst)} on {trace.lanes[int(trace.lane[dst])].label}"
            + ("" if delay is None else f", starts {format_duration(delay)} after the launch"),
        ))  # fmt: skip
    if len(launches) > limit:
        rows.append(("", f"… and {len(launches) - limit:,} more launches"))
    for k in ks.tolist():
        src = int(flows.src[k])
        if int(flows.dst[k]) == i and src >= 0:
            delay = launch_delay_ns(trace, k)
            rows.append((
                "Launched by", f"{trace.event_name(src)} on {trace.lanes[int(trace.lane[src])].label}"
                + ("" if delay is None else f", {format_duration(delay)} before this start (launch→start)"),
            ))  # fmt: skip
    key = collective_key(trace, i)
    peers = collective_peers(trace, i)
    if key is not None and len(peers) > 1:
        how = f"sequence number {key[2]}" if key[1] == "seq" else f"its #{key[2] + 1} by start on each rank"
        coll = collectives_of(trace)
        c = coll.of_event(i)
        if key[1] == "order" and c >= 0 and coll.sized[c]:
            how = f"its #{key[2] + 1} of {int(coll.size[c]):,} elements by start on each rank"
        first = min(int(trace.start_ns[e]) for e in peers.values())
        late = ", ".join(
            f"rank {r} +{format_duration(int(trace.start_ns[e]) - first)}" for r, e in sorted(peers.items())[:8]
        ) + (f", … {len(peers) - 8:,} more" if len(peers) > 8 else "")
        rows.append(("Collective", f"{key[0]}, {how}, on {len(peers)} ranks: {late}"))
        rows += wait_rows(trace, i, limit=8)
    return rows


def wait_rows(trace: Trace, i: int, limit: int = 8) -> list[tuple[str, str]]:
    """How long each rank waited in event `i`'s collective for the last to arrive (the longest
    `limit` waits), the last rank and the skew (`collectives.match_collectives`); [] for other events."""
    if not COLLECTIVE_NAME.match(trace.event_name(i)):
        return []
    job, title = job_of(trace), "Waits"
    if job is not None:  # a large job's ranks in view: the collective over every rank of the job
        found = job.collective_of(trace, i)
        if found is None:
            return []
        coll, c = found
        title = f"Waits (all {len(job)} ranks)"
    elif len(trace.lane_rank_set) < 2:
        return []
    else:
        coll = collectives_of(trace)
        c = coll.of_event(i)
    if c < 0 or coll.rank_count[c] < 2:
        return []
    last = int(coll.last_rank[c])
    waits = sorted(((w, r) for r, w in coll.waits(c).items() if r != last), key=lambda x: (-x[0], x[1]))
    parts = [f"rank {r} waited {format_duration(w)}" for w, r in waits[:limit]]
    if len(waits) > limit:
        parts.append(f"… and {len(waits) - limit:,} more ranks")
    text = ", ".join(parts) + f"; rank {last} arrived last (skew {format_duration(int(coll.skew_ns[c]))})"
    return [(title, text)]


def arg_rows(trace: Trace, i: int, limit: int = 12, width: int = 160) -> list[tuple[str, str]]:
    """The event's args but its input shapes (its Shapes row): the first `limit`, each value cut
    to `width` characters, then how many more there are."""
    args = [(k, v) for k, v in trace.event_args(i).items() if k != INPUT_DIMS.name]
    rows = [(str(k), _short(v, width)) for k, v in args[:limit]]
    if len(args) > limit:
        more = len(args) - limit
        rows.append(("", f"… and {more:,} more arg" + "s" * (more != 1)))
    return rows


def event_html(rows: list[tuple[str, str]], args: list[tuple[str, str]], muted: str = KEY_COLOR) -> str:
    """An event's rows, then its args under a heading (the tooltip's and the details panel's text)."""
    body = rows_to_html(rows)
    if args:
        body += f"<p style='color:{muted};margin-bottom:2px'><b>args</b></p>" + rows_to_html(args)
    return body


def event_tip(
    trace: Trace, i: int, branch_names: list[str] | None = None, event_branch: np.ndarray | None = None
) -> str:
    """The hover tooltip of event `i`: what the details panel says of it (name, lane, start,
    duration, shapes, branch), short: its first few args, each cut to one line."""
    return tip_of_rows(trace, i, describe_event(trace, i, branch_names, event_branch))


def tip_of_rows(trace: Trace, i: int, rows: list[tuple[str, str]]) -> str:
    """`event_tip` from the event's `describe_event` rows, for a caller that has them already."""
    return event_html(rows, arg_rows(trace, i, limit=4, width=60))


def _short(v: Any, width: int) -> str:
    text = v if isinstance(v, str) else repr(v)
    return text if len(text) <= width else text[: width - 1] + "…"


#: Where a long word may break across lines: after "::", "_", ",", "<", "(", "/", "." (a kernel's
#: C++ signature, a path), so that a narrow panel wraps it instead of cutting it off.
_BREAK_AFTER = re.compile(r"(::|[_,<(/.])(?=\S)")
#: Words longer than this get break opportunities (shorter ones wrap as words).
_LONG_WORD = 8


def breakable(text: str) -> str:
    """`text` with a zero-width space after the break points of each word longer than
    `_LONG_WORD` characters: Qt's labels wrap only at spaces, and cut what does not fit."""
    return " ".join(
        _BREAK_AFTER.sub("\\1\u200b", word) if len(word) > _LONG_WORD else word for word in text.split(" ")
    )


def rows_to_html(rows: list[tuple[str, str]]) -> str:
    """(field, value) rows as an HTML table; a long value wraps (`breakable`) rather than being cut."""
    cells = "".join(
        f"<tr><td style='color:{KEY_COLOR};padding-right:8px'>{html.escape(k)}</td>"
        f"<td>{html.escape(breakable(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table cellspacing='0' cellpadding='1'>{cells}</table>"


def rows_to_text(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in rows)
