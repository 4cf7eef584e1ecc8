"""Where the timeline's lanes go, without Qt: groups, folding, rows and their y positions.

Like the track layout of Perfetto's UI, this is plain data computed from the trace: the view
(`widgets.timeline`) asks it where things are and paints accordingly. It imports numpy and the
trace model only, so it is tested without Qt (`tests/widgets/test_timeline_layout.py`).

Lanes are grouped main thread / inter-op pool / autograd / other threads for CPU and by device for
GPU streams (per process when there are several, per rank when the trace merges ranks: `group_of`).
A group is a title band followed by its lanes, each lane one row per nesting depth of the
level-of-detail index (`widgets.lod`: a lane's rows are given as a `range` of its LOD rows). A
collapsed (folded) CPU group is its title band alone, holding one *summary lane*: the top row of
each of its lanes drawn over one another. When the GPU streams would not fit the height given,
the tallest CPU groups the user did not open fold (`auto_collapsed`), and should the streams still
not fit, they move above the CPU groups. A layout told to `fold_to_fit` (the rows of a comparison,
where every lane must stay in view) folds deep rows instead: each lane shows at most `row_cap` rows,
its deeper ones drawn in the last of them (the shallowest on top), as few as `FOLD_MIN_ROWS`.

Y positions are *content* pixels: 0 is the top of the first group, before scrolling; a view with
its lanes scrolled by `scroll` pixels shows content y `scroll` at the top of its lane area.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from branchscope.profiling.trace.merge import rank_hosts
from branchscope.profiling.trace.mode_traits import run_traits
from branchscope.profiling.trace.model import ROLE_ORDER, Trace

#: Height of a group header and of one nesting row, at least (more when the font needs it).
GROUP_H = 20
LANE_PAD = 6
ROW_H = 16
#: A lane folded to fit keeps at least this many rows (a step or fork, a branch, its modules).
FOLD_MIN_ROWS = 3

_GROUP_TITLES = {
    "main": "main thread",
    "interop": "inter-op pool",
    "autograd": "autograd",
    "other": "other threads",
}
#: Codes of the y map (`VisibleRows.y_map`) below 0: the lines that are no event row. A lane's
#: background (alternating A, B), the line under a lane, a group's title band.
BG_A, BG_B, SEP, HEADER = -1, -2, -3, -4
#: The y of a row whose event names are not drawn (the other lanes of a summary lane).
NO_LABEL = -(1 << 30)
#: The background a visible row is painted on (`VisibleRows.row_shade`): a lane's, alternating
#: from lane to lane, or a title band's (the rows of a summary lane).
SHADE_A, SHADE_B, SHADE_HEADER = 0, 1, 2


@dataclass(frozen=True, slots=True)
class LaneRow:
    """Where a lane sits: `top`/`height` in content pixels (below the ruler, before scrolling)."""

    lane: int
    top: int
    height: int
    rows: range  # its rows in the level-of-detail index, one per nesting depth
    label: str
    #: Rows drawn: all of `rows`, or fewer when folded to fit (the last drawn holds the deeper ones).
    shown: int = -1

    @property
    def drawn(self) -> int:
        return len(self.rows) if self.shown < 0 else self.shown

    @property
    def folded(self) -> int:
        """How many of its rows are drawn in its last drawn row besides that row's own (0: none)."""
        return len(self.rows) - self.drawn


@dataclass(frozen=True, slots=True)
class GroupHeader:
    """A group's title band; a collapsed group's band is its one summary lane (`summary`: the top
    LOD row of each of its lanes, drawn over one another)."""

    title: str
    top: int
    key: tuple = ()
    height: int = GROUP_H
    collapsed: bool = False
    #: Whether a click on it collapses or expands it (CPU thread groups).
    collapsible: bool = False
    lanes: tuple[int, ...] = ()
    summary: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class VisibleRows:
    """What a view scrolled by some offset shows in an image `len(y_map)` pixels high (y in image
    pixels, 0 at the top of the lane area).

    `rows` are the LOD rows on screen, each with the y of its top (`row_y`; `NO_LABEL` where its
    names are not drawn) and its background (`row_shade`). `y_map` gives each pixel line what it
    shows: a position in `rows` (an event row), `len(rows) + s` (summary lane `s`), or one of the
    negative codes `BG_A`, `BG_B`, `SEP`, `HEADER`. `summaries[s]` are the positions in `rows` of
    the lanes summary lane `s` combines, the one drawn on top first; `painted` the lanes with at
    least one pixel line on screen.
    """

    rows: list[int]
    row_y: list[int]
    row_shade: list[int]
    y_map: np.ndarray
    painted: list[int]
    summaries: list[list[int]]
    #: Each summary's background where none of its rows has an event (`SHADE_*`): a title band's
    #: for a collapsed group, its lane's for a lane's folded rows.
    summary_shade: list[int]


def _role_title(trace: Trace, role: str) -> str:
    """A CPU group's title; the inter-op threads' as the run's mode's traits name its pool (threads
    mode's is a pool of Python threads)."""
    if role == "interop" and trace.run_info is not None:
        return run_traits(trace.run_info).pool_title
    return _GROUP_TITLES.get(role, role)


def group_of(trace: Trace, lane_index: int, multi_pid: bool, ranks: dict | None = None) -> tuple[tuple, str]:
    """Sort key and title of the group a lane is shown in.

    With several ranks (`ranks`: {rank: its title, "rank R" and its host where the trace says it}),
    each rank's groups come together, titled by rank instead of by pid.
    """
    lane = trace.lanes[lane_index]
    if ranks:
        rank = -1 if lane.rank is None else lane.rank
        prefix = f"{ranks.get(lane.rank, 'no rank')} · "
        if lane.kind == "gpu":
            return (rank, 1, lane.device, lane.pid), f"{prefix}GPU {lane.device}"
        return (rank, 0, lane.pid, ROLE_ORDER.index(lane.role)), f"{prefix}{_role_title(trace, lane.role)}"
    prefix = f"pid {lane.pid} · " if multi_pid else ""
    if lane.kind == "gpu":
        return (1, lane.device, lane.pid), f"{prefix}GPU {lane.device}"
    return (0, lane.pid, ROLE_ORDER.index(lane.role)), f"{prefix}{_role_title(trace, lane.role)}"


def rank_titles(trace: Trace) -> dict:
    """{rank: "rank R" or "rank R (host)"} when the trace's lanes belong to several ranks, else {}."""
    ranks = sorted({ln.rank for ln in trace.lanes if ln.rank is not None})
    if len(ranks) < 2:
        return {}
    hosts = rank_hosts(trace)
    return {r: f"rank {r}" + (f" ({hosts[r]})" if hosts.get(r) else "") for r in ranks}


def lane_groups(trace: Trace, streams_first: bool = False) -> list[tuple[tuple, str, list[int]]]:
    """(key, title, lanes) of each group, in display order (GPU streams first if asked); a GPU
    group's streams in stream order."""
    multi_pid = len({ln.pid for ln in trace.lanes if ln.kind == "cpu"}) > 1 or (
        len({ln.pid for ln in trace.lanes if ln.kind == "gpu"})
        > len({ln.device for ln in trace.lanes if ln.kind == "gpu"})
    )
    ranks = rank_titles(trace)
    grouped: dict[tuple, tuple[str, list[int]]] = {}
    for i in range(len(trace.lanes)):
        key, title = group_of(trace, i, multi_pid, ranks)
        grouped.setdefault(key, (title, []))[1].append(i)
    lanes = trace.lanes
    for _, members in grouped.values():
        members.sort(key=lambda i: (lanes[i].tid if lanes[i].kind == "gpu" else 0, i))

    def order(key: tuple) -> tuple:
        gpu = lanes[grouped[key][1][0]].kind == "gpu"
        return (0 if gpu else 1, key) if streams_first else (key,)

    return [(key, grouped[key][0], grouped[key][1]) for key in sorted(grouped, key=order)]


def hit_row(lod: Any, dur_ns: np.ndarray, row: int, t: float, tol: float) -> int:
    """The event of LOD row `row` at time `t` (ns from the trace's first event): the deepest one
    containing `t`, else the nearest within `tol`, else -1. `lod` is the trace's `TimelineLod`,
    `dur_ns` its durations.

    The candidates are the row's raw events that start by t + tol and whose running-maximum end
    reaches t - tol; they are scanned backwards in growing chunks, since in a folded row (depths
    past the row cap share the last row) a parent can sit thousands of children before the
    cursor, and between two children only the parent contains it. Under nesting, the
    latest-starting event that contains `t` is the deepest, so the first chunk holding one
    settles it; within a chunk the shortest such event wins (events overlapping without
    nesting).
    """
    level = lod.levels[0]
    # Integer key arithmetic (a float key near 1e18 is off by hundreds of ns); exact times
    # from the trace.
    first, hi = lod.raw_range(row, t - tol, t + tol)
    near, near_d = -1, np.inf
    chunk = 256
    while hi > first:
        lo = max(first, hi - chunk)
        ev = level.rep[lo:hi]
        s = lod.raw_start_rel(ev).astype(np.float64)
        e = s + dur_ns[ev]
        inside = np.flatnonzero((s <= t) & (t <= e))
        if inside.size:
            length = e[inside] - s[inside]
            # the shortest; among equals the latest-starting (the deepest)
            k = inside[inside.size - 1 - int(np.argmin(length[::-1]))]
            return int(ev[k])
        d = np.minimum(np.abs(t - s), np.abs(t - e))
        k = int(np.argmin(d))
        if d[k] < near_d:
            near, near_d = int(ev[k]), float(d[k])
        hi = lo
        chunk *= 4
    return near if near_d <= tol else -1


class TimelineLayout:
    """The groups and lanes of one trace laid out top to bottom (see the module docstring).

    `set_trace` gives it the trace and each lane's LOD rows; `update(avail, fit)` lays them out
    for a lane area `avail` pixels high (`fit`: fold CPU groups so that the GPU streams fit, as a
    view on screen does). Row heights (`row_height`, `group_h`) are the caller's to set before
    `update`; folding is kept per trace (`set_collapsed`, the user's choice, holds whatever the
    room).
    """

    def __init__(self) -> None:
        self.trace: Trace | None = None
        #: Each lane's rows in the LOD index (`lane_rows_of[i]`: lane i's, one per depth).
        self.lane_rows_of: Sequence[range] = ()
        self.row_height = ROW_H
        self.group_h = GROUP_H
        #: Groups the user collapsed or expanded (group keys), and those collapsed for want of room.
        self.collapsed: set[tuple] = set()
        self.expanded: set[tuple] = set()
        self.auto_collapsed: set[tuple] = set()
        self.lane_rows: list[LaneRow] = []
        self.group_headers: list[GroupHeader] = []
        self.content_height = 0
        #: The height of every group expanded (what the timeline would like to have).
        self.full_height = 0
        #: The lane area's height the layout was made for (-1: none yet).
        self.avail = -1
        #: Fold deep rows so that every lane fits `avail` (see the module docstring), and the
        #: rows a lane shows at most (None: all; set by `update` when folding).
        self.fold_to_fit = False
        self.row_cap: int | None = None
        self._groups: dict[bool, list[tuple[tuple, str, list[int]]]] = {}
        self._labels: list[str] = []
        self._tops: list[int] = []
        self._header_tops: list[int] = []
        #: lane -> its place in `lane_rows`; lane -> the collapsed group (in `group_headers`) it is in.
        self._lane_pos: dict[int, int] = {}
        self._folded_in: dict[int, int] = {}

    # ---- input ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None, lane_rows_of: Sequence[range] = ()) -> None:
        """Lay out `trace` (None: nothing), lane i having the LOD rows `lane_rows_of[i]`. Another
        trace than the last forgets the user's folding. Call `update` to lay it out."""
        if trace is not self.trace:
            self.collapsed, self.expanded = set(), set()
            self._groups, self._labels = {}, []
        self.trace = trace
        self.lane_rows_of = lane_rows_of if trace is not None else ()
        if trace is None:  # nothing laid out (the heights stay until the next `update`)
            self.lane_rows, self.group_headers = [], []
            self._tops, self._header_tops, self._lane_pos, self._folded_in = [], [], {}, {}

    def set_collapsed(self, key: tuple, collapsed: bool) -> None:
        """Collapse a CPU thread group to one summary lane, or expand it (the user's choice: kept
        while the trace is shown, whatever the space). Call `update` to lay it out."""
        self.collapsed.discard(key)
        self.expanded.discard(key)
        (self.collapsed if collapsed else self.expanded).add(key)

    # ---- sizes ----------------------------------------------------------------------------
    @property
    def lane_pad(self) -> int:
        """Space between two lanes (less when rows are small)."""
        return LANE_PAD if self.row_height >= 12 else 2

    @property
    def summary_height(self) -> int:
        """Height of a collapsed group: its title band holding its one summary lane."""
        return max(self.group_h, self.row_height + self.lane_pad)

    def lane_height(self, lane: int, cap: int | None = None) -> int:
        n = len(self.lane_rows_of[lane])
        return (n if cap is None else min(n, cap)) * self.row_height + self.lane_pad

    def group_height(self, lanes: list[int], collapsed: bool, cap: int | None = None) -> int:
        if collapsed:
            return self.summary_height
        return self.group_h + sum(self.lane_height(i, cap) for i in lanes)

    @property
    def folded_height(self) -> int:
        """The height of every group expanded with its lanes folded to `FOLD_MIN_ROWS` rows: the
        least that shows every lane of the trace (a comparison's row asks for it)."""
        if self.trace is None:
            return 0
        return sum(self.group_height(lanes, False, FOLD_MIN_ROWS) for _, _, lanes in self.groups())

    def groups(self, streams_first: bool = False) -> list[tuple[tuple, str, list[int]]]:
        """`lane_groups` of the trace (computed once per trace)."""
        if self.trace is None:
            return []
        if streams_first not in self._groups:
            self._groups[streams_first] = lane_groups(self.trace, streams_first)
        return self._groups[streams_first]

    def lane_label(self, i: int) -> str:
        """A lane's label; under a rank's group title it need not repeat the rank."""
        if not self._labels:
            lanes = self.trace.lanes
            ranked = bool(rank_titles(self.trace))
            self._labels = [replace(ln, rank=None).label if ranked else ln.label for ln in lanes]
        return self._labels[i]

    # ---- laying out -----------------------------------------------------------------------
    def update(self, avail: int, fit: bool = True) -> None:
        """Lay the groups out for a lane area `avail` pixels high; with `fit`, GPU streams stay in
        view (see `auto_collapsed`)."""
        trace = self.trace
        self.lane_rows, self.group_headers = [], []
        self.auto_collapsed = set()
        self._lane_pos, self._folded_in = {}, {}
        self.avail = avail
        if trace is None:
            self.full_height = self.content_height = 0
            self._tops, self._header_tops = [], []
            return
        groups = self.groups(streams_first=False)
        cpu = {key for key, _, lanes in groups if trace.lanes[lanes[0]].kind == "cpu"}
        collapsed = set(self.collapsed) & cpu
        self.full_height = sum(self.group_height(lanes, False) for _, _, lanes in groups)
        has_gpu = any(ln.kind == "gpu" for ln in trace.lanes)
        if has_gpu and fit:

            def height(keys: set) -> int:
                return sum(self.group_height(lanes, key in keys) for key, _, lanes in groups)

            # Space is short: CPU groups the user did not open collapse, the tallest first, until
            # the streams fit; should they still not, the streams go first.
            auto = sorted(
                (g for g in groups if g[0] in cpu and g[0] not in collapsed and g[0] not in self.expanded),
                key=lambda g: -self.group_height(g[2], False),
            )
            for key, _, _ in auto:
                if height(collapsed) <= avail:
                    break
                collapsed.add(key)
                self.auto_collapsed.add(key)
            if height(collapsed) > avail:
                groups = self.groups(streams_first=True)
        self.row_cap = self._cap_to_fit(groups, collapsed, avail) if self.fold_to_fit else None
        cap = self.row_cap
        y = 0
        for key, title, lanes in groups:
            n = len(lanes)
            unit = "streams" if trace.lanes[lanes[0]].kind == "gpu" else "threads"
            text = f"{title} · {n} {unit}" if n > 1 else title
            if key in collapsed:
                summary = tuple(self.lane_rows_of[i][0] for i in lanes if len(self.lane_rows_of[i]))
                h = self.summary_height
                for i in lanes:
                    self._folded_in[i] = len(self.group_headers)
                self.group_headers.append(GroupHeader(text, y, key, h, True, True, tuple(lanes), summary))
                y += h
                continue
            self.group_headers.append(GroupHeader(text, y, key, self.group_h, False, key in cpu, tuple(lanes)))
            y += self.group_h
            for i in lanes:
                rows = self.lane_rows_of[i]
                shown = -1 if cap is None or cap >= len(rows) else cap  # -1: every row
                h = (len(rows) if shown < 0 else shown) * self.row_height + self.lane_pad
                self._lane_pos[i] = len(self.lane_rows)
                self.lane_rows.append(LaneRow(i, y, h, rows, self.lane_label(i), shown))
                y += h
        self.content_height = y
        self._tops = [lr.top for lr in self.lane_rows]
        self._header_tops = [gh.top for gh in self.group_headers]

    def _cap_to_fit(self, groups, collapsed: set, avail: int) -> int | None:
        """The most rows a lane may show for the groups to fit `avail` (None: all of them fit),
        never below `FOLD_MIN_ROWS`."""
        deepest = max((len(self.lane_rows_of[i]) for _, _, lanes in groups for i in lanes), default=0)
        for cap in range(deepest, FOLD_MIN_ROWS - 1, -1):
            if sum(self.group_height(lanes, key in collapsed, cap) for key, _, lanes in groups) <= avail:
                return None if cap == deepest else cap
        return FOLD_MIN_ROWS if deepest > FOLD_MIN_ROWS else None

    # ---- lookups (content y) --------------------------------------------------------------
    def lane_row(self, lane: int) -> LaneRow | None:
        """The lane's row, or None (folded into a collapsed group, or not laid out)."""
        n = self._lane_pos.get(lane)
        return None if n is None else self.lane_rows[n]

    def collapsed_group_of(self, lane: int) -> GroupHeader | None:
        """The collapsed group a lane is folded into, or None."""
        n = self._folded_in.get(lane)
        return None if n is None else self.group_headers[n]

    def lane_extent(self, lane: int) -> tuple[int, int] | None:
        """(top, height) of the lane, or of the summary lane it is folded into; None if it is not
        laid out."""
        lr = self.lane_row(lane)
        if lr is not None:
            return lr.top, lr.height
        gh = self.collapsed_group_of(lane)
        return None if gh is None else (gh.top, gh.height)

    def event_row_top(self, lane: int, depth: int) -> int | None:
        """The top of the row an event of `lane` at nesting `depth` is drawn in (`row_height` - 1
        high): its depth's row (depths past the last row share it), or its summary lane."""
        lr = self.lane_row(lane)
        if lr is not None:
            k = min(int(depth), lr.drawn - 1)
            return lr.top + self.lane_pad // 2 + k * self.row_height
        gh = self.collapsed_group_of(lane)
        if gh is not None:
            return gh.top + (gh.height - self.row_height) // 2 + 1
        return None

    def lane_at(self, y: int) -> LaneRow | None:
        """The lane (expanded) at content y, or None (a title band, below the last lane)."""
        n = bisect.bisect_right(self._tops, y) - 1
        if n < 0 or self.group_at(y) is not None:
            return None
        lr = self.lane_rows[n]
        return lr if y < lr.top + lr.height else None

    def group_at(self, y: int) -> GroupHeader | None:
        """The group whose title band (a collapsed group: its summary lane) is at content y."""
        if not self.group_headers:
            return None
        n = bisect.bisect_right(self._header_tops, y) - 1
        if n < 0:
            return None
        gh = self.group_headers[n]
        return gh if y < gh.top + gh.height else None

    def rows_at(self, y: int) -> tuple[int, ...]:
        """The LOD rows drawn at content y, in the order a hit should try them: a lane's one row,
        a summary lane's rows (the lane drawn on top first), a folded row's (the shallowest first),
        or none (a title band, the padding between rows, below the last lane)."""
        gh = self.group_at(y)
        if gh is not None:
            return gh.summary if gh.collapsed else ()
        n = bisect.bisect_right(self._tops, y) - 1
        if n < 0:
            return ()
        lr = self.lane_rows[n]
        if y >= lr.top + lr.height:
            return ()
        k = (y - lr.top - self.lane_pad // 2) // self.row_height
        if k < 0 or k >= lr.drawn:
            return ()
        if k == lr.drawn - 1 and lr.folded:
            return tuple(range(lr.rows.start + k, lr.rows.stop))
        return (lr.rows.start + k,)

    @staticmethod
    def label_top(lr: LaneRow, scroll: int, block_h: int) -> int:
        """Where a lane's label `block_h` pixels high goes in a lane area scrolled by `scroll`
        (0: the area's top): at the lane's top, or, with that scrolled away, at the area's top
        while the lane goes on below it (its name stays in sight)."""
        top = lr.top - scroll
        return max(top, min(0, top + lr.height - block_h))

    # ---- scrolling ------------------------------------------------------------------------
    def max_scroll(self, height: int) -> int:
        """How far a lane area `height` pixels high scrolls."""
        return max(0, self.content_height - height)

    def clamp_scroll(self, scroll: float, height: int) -> int:
        return min(max(0, int(scroll)), self.max_scroll(height))

    def scroll_handle(self, scroll: int, height: int, min_length: int = 24) -> tuple[int, int] | None:
        """(offset, length) of a scroll bar's handle on a track `height` pixels long, or None when
        everything fits."""
        over = self.max_scroll(height)
        if over <= 0:
            return None
        length = max(min_length, height * height // max(self.content_height, 1))
        return (height - length) * scroll // over, length

    def reveal(self, lane: int, scroll: int, height: int) -> int:
        """The scroll offset that shows `lane` (or its summary lane) in a lane area `height` pixels
        high: `scroll` if it is in view already, else one that puts it a third of the way down."""
        extent = self.lane_extent(lane)
        if extent is None:
            return scroll
        top, h = extent
        if top < scroll or top + h > scroll + height:
            return top - height // 3
        return scroll

    def visible(self, scroll: int, img_h: int) -> VisibleRows:
        """The rows on screen with the lanes scrolled by `scroll`, in an image `img_h` pixels high
        (see `VisibleRows`). A collapsed group's summary lane is line `len(rows) + s` of the y map
        (s: its place in `summaries`, each the positions in `rows` of the LOD rows it combines)."""
        y_map = np.full(img_h, BG_A, dtype=np.int64)
        rows: list[int] = []
        row_y: list[int] = []
        row_shade: list[int] = []
        painted: list[int] = []
        summaries: list[list[int]] = []
        summary_shade: list[int] = []
        summary_y: list[tuple[int, int]] = []
        rh = self.row_height
        pad = self.lane_pad // 2
        for gh in self.group_headers:
            a, b = gh.top - scroll, gh.top - scroll + gh.height
            if b > 0 and a < img_h:
                y_map[max(a, 0) : min(b, img_h)] = HEADER
                if gh.collapsed and gh.summary:
                    y = a + (gh.height - rh) // 2 + 1
                    members = []
                    for k, r in enumerate(gh.summary):
                        members.append(len(rows))
                        rows.append(r)
                        # Names only for the first lane's events (the ones drawn on top).
                        row_y.append(y if k == 0 else NO_LABEL)
                        row_shade.append(SHADE_HEADER)
                    summaries.append(members)
                    summary_shade.append(SHADE_HEADER)
                    summary_y.append((y, y + rh - 1))
                    painted.extend(gh.lanes)
        start = max(0, bisect.bisect_right(self._tops, scroll) - 1)
        for n, lr in enumerate(self.lane_rows[start:], start):
            a = lr.top - scroll
            if a >= img_h:
                break
            b = a + lr.height
            if b <= 0:
                continue
            code = BG_A if n % 2 == 0 else BG_B
            y_map[max(a, 0) : min(b, img_h)] = code
            if b - 1 < img_h and b - 1 >= 0:
                y_map[b - 1] = SEP
            drew = False
            for k in range(lr.drawn):
                r = lr.rows[k]
                y = a + pad + k * rh
                if y + rh <= 0 or y >= img_h:
                    continue
                drew = True
                if k == lr.drawn - 1 and lr.folded:  # the deeper rows drawn in this one
                    members = []
                    for j, deeper in enumerate(range(r, lr.rows.stop)):
                        members.append(len(rows))
                        rows.append(deeper)
                        row_y.append(y if j == 0 else NO_LABEL)
                        row_shade.append(n % 2)
                    summaries.append(members)
                    summary_shade.append(n % 2)
                    summary_y.append((y, y + rh - 1))
                    continue
                y_map[max(y, 0) : min(y + rh - 1, img_h)] = len(rows)
                rows.append(r)
                row_y.append(y)
                row_shade.append(n % 2)
            if drew:
                painted.append(lr.lane)
        for s, (y0, y1) in enumerate(summary_y):
            y_map[max(y0, 0) : max(0, min(y1, img_h))] = len(rows) + s
        return VisibleRows(rows, row_y, row_shade, y_map, painted, summaries, summary_shade)
