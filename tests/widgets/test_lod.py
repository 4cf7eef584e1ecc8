"""The timeline's level of detail (widgets.lod, Qt-free): what it paints covers exactly the pixels
the events cover, at every zoom, with a bounded number of items per pixel column."""

from __future__ import annotations

import numpy as np
import pytest

from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets import lod as lod_module
from branchscope.widgets.lod import TimelineLod, pixel_spans, rasterize


def _random_trace(seed: int, n: int = 4000, lanes: int = 3):
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, lanes, n)
    start = rng.integers(0, 5_000_000, n)
    dur = rng.lognormal(np.log(3000), 1.5, n).astype(np.int64)
    return _ops_trace("random", start, dur, lane, lanes)


def _ops_trace(path: str, start, dur, lane, lanes: int):
    """Events named "op" at `start` lasting `dur` on CPU lanes `lane` (of `lanes`)."""
    n = len(start)
    return build_trace(
        path=path,
        start_ns=start,
        dur_ns=dur,
        lane=lane,
        name_id=np.zeros(n, np.int32),
        cat_id=np.zeros(n, np.int32),
        names=["op"],
        cats=["cpu_op"],
        lanes=[Lane(i, "cpu", 1, i, f"t{i}", "other") for i in range(lanes)],
    )


def _coverage(lod: TimelineLod, rows, lo, hi, width, exact_budget):
    nspp = (hi - lo) / width
    vis = lod.visible(np.asarray(rows), lo, hi, nspp, exact_budget=exact_budget)
    x0f = np.clip(np.floor((vis.start_rel - lo) / nspp), 0, width - 1).astype(np.int64)
    x1f = np.clip(np.ceil((vis.end_rel - lo) / nspp), 0, width).astype(np.int64)
    x1f = np.maximum(x1f, x0f + 1)
    _, cov = rasterize(vis.row_pos, x0f, x1f, np.ones(x0f.size, np.uint32), len(rows), width, 0)
    return cov, vis


def _exact_coverage(trace, lod, rows, lo, hi, width):
    """Pixels touched by any event of each row, computed event by event (the slow truth)."""
    nspp = (hi - lo) / width
    cov = np.zeros((len(rows), width), dtype=bool)
    row_of = lod.row_base[trace.lane] + np.minimum(trace.depth, lod.row_cap - 1)
    s = trace.start_ns - lod.t0
    e = s + trace.dur_ns
    for k, r in enumerate(rows):
        for i in np.flatnonzero((row_of == r) & (e > lo) & (s < hi)):
            a = int(np.clip(np.floor((s[i] - lo) / nspp), 0, width - 1))
            b = max(a + 1, int(np.clip(np.ceil((e[i] - lo) / nspp), 0, width)))
            cov[k, a:b] = True
    return cov


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("frac", [1.0, 0.05, 0.001])
def test_merged_runs_cover_what_the_events_cover_and_fill_only_subpixel_gaps(seed, frac):
    trace = _random_trace(seed)
    lod = TimelineLod(trace)
    assert len(lod.levels) > 2, "random trace should produce several merge levels"
    width = 500
    span = lod.span_ns
    lo = span * 0.3
    hi = lo + span * frac
    rows = list(range(lod.n_rows))
    exact = _exact_coverage(trace, lod, rows, lo, hi, width)
    cov, _ = _coverage(lod, rows, lo, hi, width, exact_budget=0)  # force merged runs when zoomed out
    # Every pixel an event touches is painted ...
    assert not (exact & ~cov).any()
    # ... and a painted pixel that no event touches is a gap narrower than a pixel or two.
    extra = cov & ~exact
    for k in range(len(rows)):
        xs = np.flatnonzero(extra[k])
        if xs.size:
            runs = np.split(xs, np.flatnonzero(np.diff(xs) > 1) + 1)
            assert max(len(r) for r in runs) <= 2


def test_items_per_pixel_column_stay_bounded_when_zoomed_out():
    trace = _random_trace(3, n=60_000, lanes=2)
    lod = TimelineLod(trace)
    width = 400
    rows = np.arange(lod.n_rows)
    nspp = lod.span_ns / width
    vis = lod.visible(rows, 0, lod.span_ns, nspp, exact_budget=0)
    assert not vis.raw
    per_row = np.bincount(vis.row_pos, minlength=rows.size)
    assert per_row.max() <= 3 * width
    assert len(trace) > 20 * per_row.sum()  # far fewer items than events


def test_raw_events_are_used_when_few_are_visible():
    trace = _random_trace(4)
    lod = TimelineLod(trace)
    vis = lod.visible(np.arange(lod.n_rows), 1_000_000, 1_010_000, 10_000 / 800)
    assert vis.raw
    # exactly the events of those rows intersecting the window
    s = trace.start_ns - lod.t0
    e = s + trace.dur_ns
    expected = np.flatnonzero((e > 1_000_000) & (s < 1_010_000))
    assert sorted(vis.level.rep[vis.index].tolist()) == sorted(expected.tolist())


def test_pixel_spans_keep_touching_events_apart():
    x0, x1 = pixel_spans(np.array([0, 100]), np.array([100, 200]), 0.0, 10.0, 50)
    assert x0.tolist() == [0, 10]
    assert x1.tolist() == [9, 19]  # last column of each left blank


def test_subset_index_lines_up_with_the_whole_trace():
    trace = _random_trace(5)
    full = TimelineLod(trace)
    sub = TimelineLod(trace, subset=np.arange(0, len(trace), 7))
    assert sub.n_rows == full.n_rows
    assert sub.t0 == full.t0
    assert len(sub.levels[0]) == len(range(0, len(trace), 7))


# ---- the index is the one the previous, simpler build made ---------------------------------------


def _reference_levels(trace, row_cap=16, subset=None):
    """The levels as the first implementation built them (plain numpy, one step per line): the
    faster build must give the same items, so the timeline draws exactly what it drew."""
    no_gap = np.iinfo(np.int64).max
    t0, t1 = (int(x) for x in trace.span())
    span = t1 - t0
    n_lanes = len(trace.lanes)
    max_depth = np.full(n_lanes, -1, dtype=np.int64)
    for i in range(n_lanes):
        a, b = trace.lane_offsets[i], trace.lane_offsets[i + 1]
        if b > a:
            max_depth[i] = trace.depth[a:b].max()
    rows_per_lane = np.clip(max_depth + 1, 1, row_cap)
    row_base = np.concatenate([[0], np.cumsum(rows_per_lane)])
    n_rows = int(row_base[-1])
    shift = 0
    while max(n_rows, 1) * ((span >> shift) + 2) >= (1 << 62):
        shift += 1
    stride = (span >> shift) + 2
    events = np.arange(len(trace)) if subset is None else np.sort(np.asarray(subset, np.int64))
    row = row_base[trace.lane[events]] + np.minimum(trace.depth[events], row_cap - 1)
    order = np.argsort(row, kind="stable")
    ev, row = events[order], row[order]
    start = (trace.start_ns[ev] - t0) >> shift
    end = (trace.start_ns[ev] - t0 + trace.dur_ns[ev]) >> shift
    key_start = row * stride + start
    key_end = np.maximum.accumulate(row * stride + end) if ev.size else row * stride + end
    levels = [(0, key_start, key_end, ev)]
    n = ev.size
    if n < 2:
        return levels
    lead_gap = np.concatenate([[no_gap], key_start[1:] - key_end[:-1]])
    lead_gap[1:][row[1:] != row[:-1]] = no_gap
    finite = lead_gap[lead_gap != no_gap]
    n_row_starts = n - finite.size
    _, exp = np.frexp(finite[finite > 0].astype(np.float64))
    at_least = np.cumsum(np.bincount(exp, minlength=65)[::-1])[::-1]
    last_kept = n
    prev = (key_start, key_end, ev, trace.dur_ns[ev], lead_gap, np.ones(n, dtype=np.int64))
    for k in range(shift, 63):
        threshold = 1 << k
        if n_row_starts + int(at_least[k - shift + 1]) > last_kept // 2:
            continue
        ks, ke, rep, dur, gap, n_ev = prev
        long = (n_ev == 1) & (dur >= 4 * threshold)
        new = gap >= (1 << (k - shift))
        new[1:] |= (long[1:] | long[:-1]) & (gap[1:] >= 0)
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, ks.size - 1)
        pick = np.array([a + int(np.argmax(dur[a : b + 1])) for a, b in zip(first, last)], dtype=np.int64)
        cand = (ks[first], ke[last], rep[pick], dur[pick], gap[first], np.add.reduceat(n_ev, first))
        runs = first.size
        if runs > last_kept // 2 and runs > n_row_starts:
            continue
        prev = cand
        levels.append((threshold, cand[0], cand[1], cand[2]))
        last_kept = runs
        if runs <= n_row_starts:
            break
    return levels


def _varied_trace(seed: int, lanes: int, n: int, *, epoch: bool = False, huge_dur: bool = False):
    """Random events with ties in duration, instants, deep nesting and long events; `epoch` puts
    all but one event 54 years after the first (keys shifted), `huge_dur` adds a 2**55 ns event."""
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, lanes, n)
    start = rng.integers(0, 2_000_000, n)
    dur = rng.choice([0, 1, 1000, 1000, 5000], n) + rng.lognormal(np.log(3000), 2.0, n).astype(np.int64) * (
        rng.random(n) < 0.7
    )
    if epoch:
        start[1:] += 1_700_000_000_000_000_000
    if huge_dur:
        dur[0] = 1 << 55
    return _ops_trace("varied", start, dur, lane, lanes)


def _assert_same_levels(lod: TimelineLod, reference) -> None:
    assert [lv.threshold_ns for lv in lod.levels] == [r[0] for r in reference]
    for level, (_, key_start, key_end, rep) in zip(lod.levels, reference):
        np.testing.assert_array_equal(level.key_start, key_start)
        np.testing.assert_array_equal(level.key_end, key_end)
        np.testing.assert_array_equal(level.rep, rep)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "lanes, n, options",
    [
        (3, 3000, {}),  # rows fit 8 bits
        (80, 12000, {}),  # more than 256 rows: 16-bit rows
        (2, 2000, {"epoch": True}),  # keys shifted
        (3, 2000, {"huge_dur": True}),  # durations too long to share a key with positions
    ],
)
def test_levels_are_those_of_the_reference_build(seed, lanes, n, options):
    trace = _varied_trace(seed, lanes, n, **options)
    lod = TimelineLod(trace)
    if lanes == 80:
        assert lod.n_rows > 256
    if options.get("epoch"):
        assert lod.shift > 0
    assert len(lod.levels) > 1
    _assert_same_levels(lod, _reference_levels(trace))


@pytest.mark.parametrize("seed", range(3))
def test_levels_of_a_subset_and_a_small_row_cap_are_those_of_the_reference_build(seed):
    trace = _varied_trace(seed, 4, 4000)
    subset = np.random.default_rng(seed).choice(len(trace), 1500, replace=False)
    _assert_same_levels(TimelineLod(trace, subset=subset), _reference_levels(trace, subset=subset))
    for cap in (1, 2):  # overlapping events folded into one row merge whatever their length
        _assert_same_levels(TimelineLod(trace, row_cap=cap), _reference_levels(trace, row_cap=cap))


@pytest.mark.parametrize("n", [0, 1, 2])
def test_tiny_traces_have_only_raw_events_or_the_reference_levels(n):
    trace = _varied_trace(0, 2, n)
    _assert_same_levels(TimelineLod(trace), _reference_levels(trace))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("row_cap", [1, 2])
def test_runs_of_folded_overlapping_events_are_never_taken_for_one_long_event(seed, row_cap):
    # Sparse lanes with rows folded: a long event merged with the events overlapping it is a
    # run of several events, which later levels must still merge with its close neighbours.
    trace = _varied_trace(seed, 2, 500)
    _assert_same_levels(TimelineLod(trace, row_cap=row_cap), _reference_levels(trace, row_cap=row_cap))


@pytest.mark.parametrize("options", [{}, {"epoch": True}])
def test_levels_built_in_small_chunks_and_with_offsets_per_item_are_the_reference_levels(
    monkeypatch, options
):
    # Passes over scratch chunks, and per-row offsets as one array (many rows): same levels.
    monkeypatch.setattr(lod_module, "_CHUNK", 97)
    monkeypatch.setattr(lod_module, "_ROWS_LOOPED", 0)
    trace = _varied_trace(7, 3, 3000, **options)
    _assert_same_levels(TimelineLod(trace), _reference_levels(trace))
