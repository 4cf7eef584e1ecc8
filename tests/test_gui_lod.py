"""The timeline's level of detail (widgets.lod, Qt-free): what it paints covers exactly the pixels
the events cover, at every zoom, with a bounded number of items per pixel column."""

from __future__ import annotations

import numpy as np
import pytest

from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets.lod import TimelineLod, pixel_spans, rasterize


def _random_trace(seed: int, n: int = 4000, lanes: int = 3):
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, lanes, n)
    start = rng.integers(0, 5_000_000, n)
    dur = rng.lognormal(np.log(3000), 1.5, n).astype(np.int64)
    return build_trace(
        path="random",
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
