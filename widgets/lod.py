"""Level of detail for the timeline: per row, merged runs of events at a ladder of gap thresholds.

A timeline frame must cost what its pixels cost, not what the trace holds. At load time the events
of every row (one row = one nesting depth of one lane) are put in time order and merged into
*runs*: consecutive events whose gap is below a threshold become one run. Thresholds are powers of
two nanoseconds; a level is kept only where it at least halves the number of runs of the last kept
level, so all levels together hold at most as many runs as there are events. To draw at a zoom of
`s` ns per pixel the view picks the coarsest kept level whose threshold is at most `s`: gaps it
did not merge are at least half a pixel wide, so a pixel column holds at most a couple of runs.

Everything is a vectorised numpy pass (10 million events build in about 0.7 s on 2 cores: rows as
8- or 16-bit numbers for a radix sort, keys built in place, the longest event of every run found
by one reduction over (duration, position) keys; `tests/widgets/test_lod.py` checks that the levels
are those of the plainer first build). All rows of a level live in one sorted array keyed by
`row * stride + time`, so one `searchsorted` call finds the visible items of every visible row at
once, and `rasterize` paints them into an RGB32 buffer with a handful of array operations whose
size is the number of visible pixels.

Keys are int64, and the reader takes any time within +-2**61 ns, so `rows * span` can pass 2**63
(a trace with one event at 0 and the rest at epoch microseconds spans 54 years). Times then enter
the keys divided by `2**shift`, the smallest power that fits (shift is 0 for any trace that spans
less than 2**62 / rows ns: days, for thousands of rows). Keys only find candidates: raw events
take their exact times from the trace, and merged levels start at a threshold of `2**shift` ns,
so the rounding of their runs stays below one pixel at any zoom that shows them.

Qt-free on purpose: it is tested and measured without a window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.model import Trace

#: Deeper events are folded into the last row of their lane (real traces rarely exceed ~12).
DEFAULT_ROW_CAP = 16
_NO_GAP = np.iinfo(np.int64).max
#: Items a building pass handles at a time where it needs scratch arrays.
_CHUNK = 1 << 20
#: Up to this many rows, per-row offsets are added row by row (no array of n offsets).
_ROWS_LOOPED = 4096


@dataclass(frozen=True, slots=True)
class LodLevel:
    """The items (events, or merged runs of events) of every row at one gap threshold."""

    #: Gaps shorter than this were merged (0 for the raw events themselves).
    threshold_ns: int
    #: row * stride + (start relative to the trace start >> shift), sorted ascending.
    key_start: np.ndarray
    #: row * stride + (running maximum of the end within the row >> shift): monotone, for `searchsorted`.
    key_end: np.ndarray
    #: The event an item stands for: the event itself, or the longest event of a run (int64).
    rep: np.ndarray

    def __len__(self) -> int:
        return int(self.key_start.size)


@dataclass(frozen=True, slots=True)
class VisibleItems:
    """Items of one level that intersect a time window, for a list of rows (in row-list order)."""

    level: LodLevel
    raw: bool
    index: np.ndarray  # int64 positions into the level's arrays
    row_pos: np.ndarray  # int64 position of each item's row in the requested row list
    start_rel: np.ndarray  # int64
    end_rel: np.ndarray  # int64


class TimelineLod:
    """The multi-resolution index of one trace's events (see the module docstring)."""

    def __init__(self, trace: Trace, *, row_cap: int = DEFAULT_ROW_CAP, subset: np.ndarray | None = None):
        self.trace = trace
        self.row_cap = int(row_cap)
        t0, t1 = trace.span()
        self.t0 = int(t0)
        self.span_ns = int(t1 - t0)
        n_lanes = len(trace.lanes)
        # Rows per lane from the whole trace, so that a subset (find matches) lines up with it.
        max_depth = np.full(n_lanes, -1, dtype=np.int64)
        counts = np.diff(trace.lane_offsets)
        nonempty = np.flatnonzero(counts > 0)
        if nonempty.size:  # a lane's events are contiguous: one reduceat gives every lane's deepest
            max_depth[nonempty] = np.maximum.reduceat(trace.depth, trace.lane_offsets[nonempty])
        self.rows_per_lane = np.clip(max_depth + 1, 1, self.row_cap).astype(np.int64)
        self.row_base = np.zeros(n_lanes + 1, dtype=np.int64)
        np.cumsum(self.rows_per_lane, out=self.row_base[1:])
        self.n_rows = int(self.row_base[-1])
        # Keys must stay below 2**62 (queries add a little): see the module docstring.
        self.shift = 0
        while max(self.n_rows, 1) * ((self.span_ns >> self.shift) + 2) >= (1 << 62):
            self.shift += 1
        self.stride = (self.span_ns >> self.shift) + 2

        if subset is None:
            lane, depth = trace.lane, trace.depth
        else:
            events = np.sort(np.asarray(subset, np.int64))
            lane, depth = trace.lane[events], trace.depth[events]
        # Each event's row, in the smallest integer type that holds every row number.
        row_type = np.uint8 if self.n_rows <= 1 << 8 else np.uint16 if self.n_rows <= 1 << 16 else np.int64
        row = np.empty(lane.size, dtype=row_type)
        np.minimum(depth, self.row_cap - 1, out=row, casting="unsafe")
        row += self.row_base[:-1].astype(row_type)[lane]
        # Events are sorted by (lane, start); a stable sort by row keeps start order within a row
        # (a radix sort when the row numbers fit 16 bits). Sorted, the rows are runs of equal rows.
        order = np.argsort(row, kind="stable")
        ev = order if subset is None else events[order]
        row_counts = np.bincount(row, minlength=self.n_rows) if row.size else np.zeros(self.n_rows, np.int64)
        del row
        key_start = trace.start_ns[ev]
        dur = trace.dur_ns[ev]
        # Key of each row's time 0: row * stride, less the trace start (unshifted keys only).
        row_key = np.arange(self.n_rows, dtype=np.int64) * self.stride
        if self.shift == 0:
            _add_per_row(key_start, row_key - self.t0, row_counts)  # row * stride + (start - t0)
            key_end = np.add(key_start, dur)  # row * stride + end: end <= span_ns
        else:
            key_start -= self.t0  # 0 ..= span_ns
            key_end = key_start + dur  # ..= span_ns: t1 is the latest end
            key_start >>= self.shift
            key_end >>= self.shift
            _add_per_row(key_start, row_key, row_counts)
            _add_per_row(key_end, row_key, row_counts)
        if key_end.size:  # keys of a row stay below the next row's: one running maximum for all rows
            np.maximum.accumulate(key_end, out=key_end)
        self.levels: list[LodLevel] = [LodLevel(0, key_start, key_end, ev)]
        self._build_levels(row_counts, key_start, key_end, ev, dur)

    # ---- building ---------------------------------------------------------------------------
    def _build_levels(self, row_counts, key_start, key_end, rep, rep_dur) -> None:
        """Merge levels at thresholds 2**k ns, k >= shift; gaps are in key units (2**shift ns)."""
        n = key_start.size
        if n < 2:
            return
        lead_gap = np.empty(n, dtype=np.int64)
        np.subtract(key_start[1:], key_end[:-1], out=lead_gap[1:])
        row_first = (np.cumsum(row_counts) - row_counts)[row_counts > 0]
        lead_gap[row_first] = _NO_GAP  # a row's first item has no gap before it
        n_row_starts = int(row_first.size)
        # A lower bound of the runs each power-of-two threshold leaves, from one histogram of the
        # gaps (long events add boundaries of their own), lets most thresholds be skipped unbuilt.
        # A gap's binary exponent e (2**(e-1) <= gap < 2**e, as np.frexp) is read from its float64
        # bits; gaps <= 0 fall in bin 0 and the rows' first items in bin 64, neither counted.
        hist = np.zeros(1022 + 65, dtype=np.int64)
        chunk = np.empty(min(n, _CHUNK), dtype=np.float64)  # a chunk at a time: no array of n floats
        for a in range(0, n, _CHUNK):
            part = chunk[: min(n - a, _CHUNK)]
            np.copyto(part, lead_gap[a : a + part.size], casting="unsafe")
            exp = part.view(np.int64)
            exp >>= 52
            np.clip(exp, 1022, 1022 + 64, out=exp)
            hist += np.bincount(exp, minlength=1022 + 65)
        hist = hist[1022:]
        hist[0] = hist[64] = 0
        at_least = np.cumsum(hist[::-1])[::-1]  # at_least[e] = #gaps with exponent >= e
        last_kept = n
        prev = (key_start, key_end, rep, rep_dur, lead_gap, None)
        for k in range(self.shift, 63):
            threshold = 1 << k
            gap_threshold = 1 << (k - self.shift)
            if n_row_starts + int(at_least[k - self.shift + 1]) > last_kept // 2:
                continue  # gaps >= 2**j are those with exponent >= j + 1
            cand = _merge(prev, threshold, gap_threshold)
            runs = cand[0].size
            if runs > last_kept // 2 and runs > n_row_starts:
                continue
            prev = cand
            self.levels.append(LodLevel(threshold, prev[0], prev[1], prev[2]))
            last_kept = runs
            if runs <= n_row_starts:
                break

    # ---- querying ---------------------------------------------------------------------------
    def rows_of_lane(self, lane_index: int) -> range:
        return range(int(self.row_base[lane_index]), int(self.row_base[lane_index + 1]))

    def level_for(self, ns_per_px: float) -> LodLevel:
        """The coarsest kept level whose merge threshold is at most one pixel."""
        best = self.levels[0]
        for level in self.levels[1:]:
            if level.threshold_ns <= ns_per_px:
                best = level
            else:
                break
        return best

    def _ranges(self, level: LodLevel, rows: np.ndarray, lo_rel: int, hi_rel: int):
        """Per row, the first item and the count of those that may intersect [lo_rel, hi_rel]: all
        whose end reaches lo_rel and whose start reaches hi_rel at most, and (when shift > 0) a few
        more; `visible` keeps those that do."""
        # Keys of one row live in [row * stride, (row + 1) * stride): stay inside it.
        lo_rel = min(max(lo_rel, -1), self.span_ns + 1)
        hi_rel = min(max(hi_rel, 0), self.span_ns + 1)
        base = rows * self.stride
        # end >= lo_rel  =>  end >> shift >= lo_rel >> shift; start <= hi_rel likewise.
        lo = np.searchsorted(level.key_end, base + (lo_rel >> self.shift), side="left")
        hi = np.searchsorted(level.key_start, base + (hi_rel >> self.shift), side="right")
        return lo, np.maximum(hi - lo, 0)

    def raw_range(self, row: int, t_lo: float, t_hi: float) -> tuple[int, int]:
        """[first, stop) in the raw level: the events of `row` that start by `t_hi` and whose
        running-maximum end reaches `t_lo` (ns from the trace start), and possibly a few more."""
        level = self.levels[0]
        base = int(row) * self.stride
        lo_rel = min(max(math.ceil(t_lo), -1), self.span_ns + 1)
        hi_rel = min(max(math.floor(t_hi), -1), self.span_ns + 1)
        stop = int(np.searchsorted(level.key_start, base + (hi_rel >> self.shift), side="right"))
        first = max(
            int(np.searchsorted(level.key_start, base, side="left")),  # the row's first event
            int(np.searchsorted(level.key_end, base + (lo_rel >> self.shift), side="left")),
        )
        return first, stop

    def raw_start_rel(self, events: np.ndarray) -> np.ndarray:
        """Exact start times (ns from the trace start, int64) of events."""
        return self.trace.start_ns[events] - self.t0

    def visible(
        self, rows: np.ndarray, lo_rel: float, hi_rel: float, ns_per_px: float, exact_budget: int = 4000
    ) -> VisibleItems:
        """Items intersecting [lo_rel, hi_rel) on `rows`: the raw events when few enough, else runs."""
        rows = np.asarray(rows, dtype=np.int64)
        # The window is float ns: past 2**53 ns (104 days) a float is only good to its ulp, and
        # the window stands for any time within it (the last event of a 54-year span included).
        lo_i = math.floor(lo_rel) - int(math.ulp(lo_rel))
        hi_i = math.ceil(hi_rel) + int(math.ulp(hi_rel))
        level = self.level_for(ns_per_px)
        lo, counts = self._ranges(level, rows, lo_i, hi_i)
        raw = level is self.levels[0]
        if not raw:
            rlo, rcounts = self._ranges(self.levels[0], rows, lo_i, hi_i)
            total_raw = int(rcounts.sum())
            if total_raw <= max(exact_budget, int(counts.sum() * 5 // 4)):
                level, lo, counts, raw = self.levels[0], rlo, rcounts, True
        total = int(counts.sum())
        if total:
            first = np.cumsum(counts) - counts
            index = np.repeat(lo - first, counts) + np.arange(total, dtype=np.int64)
            row_pos = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
        else:
            index = np.zeros(0, dtype=np.int64)
            row_pos = np.zeros(0, dtype=np.int64)
        if raw:  # exact times from the trace
            rep = level.rep[index]
            start_rel = self.trace.start_ns[rep] - self.t0
            end_rel = start_rel + self.trace.dur_ns[rep]
        else:  # runs: their keys, exact unless shift > 0 (then within 2**shift <= one pixel)
            base = rows[row_pos] * self.stride
            start_rel = level.key_start[index] - base
            end_rel = level.key_end[index] - base
            if self.shift:  # widen to what the rounded keys may hide: never miss an event's pixel
                start_rel <<= self.shift
                end_rel = (end_rel << self.shift) + ((1 << self.shift) - 1)
        # Running-maximum ends can admit an item that ended before the window (overlapping rows);
        # keys rounded down by a shift admit a few just outside it. An instant (zero duration) on
        # either edge of the window is in it (a trace's first and last events, at full view).
        instant = start_rel == end_rel
        keep = ((end_rel > lo_i) | (instant & (start_rel >= lo_i))) & (
            (start_rel < hi_i) | (instant & (start_rel <= hi_i))
        )
        if not keep.all():
            index, row_pos, start_rel, end_rel = index[keep], row_pos[keep], start_rel[keep], end_rel[keep]
        return VisibleItems(level, raw, index, row_pos, start_rel, end_rel)


#: An event at least this many thresholds long is never merged with its neighbours: it is wide
#: enough on screen to be seen (and named) on its own.
LONG_EVENT_FACTOR = 4


def _merge(prev, threshold: int, gap_threshold: int | None = None):
    """Merge consecutive short items whose leading gap is below `threshold` ns (rows never merge).

    `prev` = (key_start, key_end, rep, rep_dur, lead_gap, single) of a finer level, `single`
    whether an item is one event (None: every item is); every boundary kept here was a boundary
    there, so levels can be built one from another. Gaps are in key units: `gap_threshold` is
    `threshold` in them (the same when the keys are not shifted).
    """
    key_start, key_end, rep, rep_dur, lead_gap, single = prev
    n = key_start.size
    long = rep_dur >= LONG_EVENT_FACTOR * threshold
    if single is not None:
        long &= single
    new = lead_gap >= (threshold if gap_threshold is None else gap_threshold)
    # A long item stands alone unless it overlaps its neighbour (events folded into one row, or
    # overlapping without nesting), where separate items would pile up in the same pixels.
    alone = long[1:] | long[:-1]
    alone &= lead_gap[1:] >= 0
    new[1:] |= alone
    del long, alone
    first = np.flatnonzero(new)
    del new
    size = np.empty_like(first)  # items per run
    np.subtract(first[1:], first[:-1], out=size[:-1])
    size[-1] = n - first[-1]
    run_max, pick = _longest_first(rep_dur, first, size)
    run_single = size == 1
    if single is not None:
        run_single &= single[first]
    last = first + size - 1
    return (key_start[first], key_end[last], rep[pick], run_max, lead_gap[first], run_single)


def _longest_first(dur: np.ndarray, first: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run (items first[r] .. first[r] + size[r] - 1): the longest duration, and its first item."""
    n = dur.size
    bits = max(int(n - 1).bit_length(), 1)
    if n and int(dur.max()) < 1 << (62 - bits):
        # One reduction over (duration, n - 1 - position): the longest, then the earliest wins.
        # The keys are built in `dur` itself, and it is given back as it was.
        dur <<= bits
        countdown = np.arange(min(n, _CHUNK) - 1, -1, -1, dtype=np.int64)
        low = np.empty_like(countdown)
        for a in range(0, n, _CHUNK):
            b = min(a + _CHUNK, n)
            part = np.add(countdown[countdown.size - (b - a) :], n - b, out=low[: b - a])  # n - 1 - i
            dur[a:b] |= part
        best = np.maximum.reduceat(dur, first)
        dur >>= bits
        pick = (n - 1) - (best & ((1 << bits) - 1))
        best >>= bits
        return best, pick
    run_max = np.maximum.reduceat(dur, first)  # durations too long to share a key with positions
    is_max = dur == np.repeat(run_max, size)
    n_max = np.add.reduceat(is_max, first, dtype=np.int64)  # >= 1 in every run
    return run_max, np.flatnonzero(is_max)[np.cumsum(n_max) - n_max]


def _add_per_row(keys: np.ndarray, per_row: np.ndarray, counts: np.ndarray) -> None:
    """keys += per_row[r] for the counts[r] items of each row r (rows in order, contiguous)."""
    if counts.size > _ROWS_LOOPED:
        keys += np.repeat(per_row, counts)
        return
    stop = np.cumsum(counts).tolist()
    for r, (a, b) in enumerate(zip([0, *stop[:-1]], stop)):
        if b > a:
            keys[a:b] += per_row[r]


def pixel_spans(
    start_rel: np.ndarray, end_rel: np.ndarray, lo_rel: float, ns_per_px: float, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel columns [x0, x1) of items; every visible item gets at least one column.

    Items three or more columns wide lose their last column, so that touching events stay apart.
    """
    x0f = (start_rel - lo_rel) / ns_per_px
    x1f = (end_rel - lo_rel) / ns_per_px
    x0 = np.clip(np.floor(x0f), 0, width - 1).astype(np.int64)
    x1 = np.clip(np.ceil(x1f), 0, width).astype(np.int64)
    x1 = np.maximum(x1, x0 + 1)
    wide = (x1 - x0) >= 3
    x1[wide] -= 1
    return x0, x1


class Scratch:
    """Arrays a frame reuses from the last one.

    A frame that allocates its megabyte-sized arrays afresh may pay the kernel for new zeroed
    pages every time (whether it does depends on the allocator's state, so the cost came and
    went between runs); these are kept and handed out again.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._arange = np.zeros(0, dtype=np.int64)

    def get(self, name: str, size: int, dtype) -> np.ndarray:
        """A 1-D array of `size` items (contents undefined), the same memory as last time."""
        dtype = np.dtype(dtype)
        a = self._arrays.get(name)
        if a is None or a.size < size or a.dtype != dtype:
            a = np.empty(max(int(size), 1), dtype=dtype)
            self._arrays[name] = a
        return a[:size]

    def arange(self, size: int) -> np.ndarray:
        """0, 1, ..., size - 1 (int64)."""
        if self._arange.size < size:
            self._arange = np.arange(int(size), dtype=np.int64)
        return self._arange[:size]


def rasterize(
    row_pos: np.ndarray,
    x0: np.ndarray,
    x1: np.ndarray,
    colors: np.ndarray,
    n_rows: int,
    width: int,
    background,
    scratch: Scratch | None = None,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Paint items into one line of `width` pixels per row; returns (lines, covered).

    `lines` is (n_rows, width) uint32: a covered pixel takes the colour of the latest-starting item at
    or before it (items must come in row order, then start order), others `background` (a scalar,
    or one value per row). The work is proportional to n_rows * width, whatever the number of items.

    With `scratch`, the working arrays and `covered` are its arrays (valid until its next use);
    `lines` is written into `out` (a C-contiguous (n_rows, width) uint32 array) when given.
    """
    s = scratch if scratch is not None else Scratch()
    size = n_rows * width
    owner = s.get("owner", size, np.int64)
    owner.fill(-1)
    flat0 = row_pos * width + x0
    flat1 = row_pos * width + x1
    if flat0.size:
        owner[flat0] = np.arange(flat0.size, dtype=np.int64)
        np.maximum.accumulate(owner, out=owner)
    covered = np.greater_equal(owner, 0, out=s.get("covered", size, np.bool_))
    safe = np.maximum(owner, 0, out=s.get("safe", size, np.int64))
    if flat1.size:
        # An item reaches as far as the furthest end among the items started before it (items of
        # one row may overlap); ends of earlier rows never pass their row's last column.
        reach = np.maximum.accumulate(flat1)
        reach_here = np.take(reach, safe, out=s.get("reach", size, np.int64), mode="clip")
        covered &= np.less(s.arange(size), reach_here, out=s.get("inside", size, np.bool_))
    lines = out.reshape(-1) if out is not None else s.get("lines", size, np.uint32)
    bg = np.asarray(background, dtype=np.uint32)
    if bg.ndim == 1:
        lines.reshape(n_rows, width)[:] = bg[:, None]
    else:
        lines.fill(bg)
    if colors.size:
        np.copyto(
            lines, np.take(colors, safe, out=s.get("colors", size, np.uint32), mode="clip"), where=covered
        )
    return lines.reshape(n_rows, width), covered.reshape(n_rows, width)
