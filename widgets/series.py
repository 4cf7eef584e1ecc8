"""Per-pixel-column reductions of time series (Qt-free): what the charts draw at any zoom.

A chart of a series with a million points must not draw a million segments: each view asks for
one value per pixel column (the column's time-weighted mean or its maximum), computed with a
few vectorised passes, so a frame costs what the chart's width costs.
"""

from __future__ import annotations

import numpy as np


def step_integral(t: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Running integral of a step series (value[i] holds from t[i] to t[i+1]) at each t[i]."""
    t = np.asarray(t, dtype=np.float64)
    v = np.asarray(value, dtype=np.float64)
    out = np.zeros(t.size, dtype=np.float64)
    if t.size > 1:
        np.cumsum(v[:-1] * np.diff(t), out=out[1:])
    return out


def _integral_at(t: np.ndarray, v: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The step series' integral from t[0] to each x (0 before t[0]; the last value holds after)."""
    c = np.interp(x, t, cum, left=0.0, right=cum[-1])
    after = x > t[-1]
    c[after] += (x[after] - t[-1]) * v[-1]
    return c


def column_mean_step(
    t: np.ndarray, value: np.ndarray, edges: np.ndarray, cum: np.ndarray | None = None
) -> np.ndarray:
    """Time-weighted mean of a step series over each [edges[k], edges[k+1]) (0 before t[0]).

    After the last point the last value holds (for a series that ends at 0, that is 0).
    """
    return column_window_mean(t, value, edges, 0.0, cum)


def column_window_mean(
    t: np.ndarray,
    value: np.ndarray,
    edges: np.ndarray,
    window: float,
    cum: np.ndarray | None = None,
) -> np.ndarray:
    """Time-weighted mean of a step series per column, as `column_mean_step`, but each column's interval is widened, about its centre, to at
    least `window` (same unit as t): a moving average that is also the plain column mean once a
    column is wider than the window.

    An average keeps the area under the series (the CPU time), so a lasting plateau keeps its
    height while jitter shorter than the window is smoothed away.
    """
    t = np.asarray(t, dtype=np.float64)
    if t.size == 0:
        return np.zeros(edges.size - 1)
    v = np.asarray(value, dtype=np.float64)
    if cum is None:
        cum = step_integral(t, v)
    e = np.asarray(edges, dtype=np.float64)
    lo, hi = e[:-1], e[1:]
    centre = (lo + hi) / 2
    half = max(float(window), 0.0) / 2
    a = np.minimum(lo, centre - half)
    b = np.maximum(hi, centre + half)
    width = b - a
    return (_integral_at(t, v, cum, b) - _integral_at(t, v, cum, a)) / np.where(width > 0, width, 1.0)


def column_max_step(t: np.ndarray, value: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Largest value a step series takes within each [edges[k], edges[k+1]) (0 before t[0])."""
    t = np.asarray(t)
    v = np.asarray(value, dtype=np.float64)
    n_cols = edges.size - 1
    if t.size == 0 or n_cols <= 0:
        return np.zeros(max(n_cols, 0))
    holding = np.searchsorted(t, edges[:-1], side="right") - 1  # value in force at column start
    changes_end = np.searchsorted(t, edges[1:], side="left")  # first change at/after column end
    first = np.clip(holding, 0, None)
    last = np.maximum(changes_end, first + 1)
    padded = np.append(v, 0.0)
    idx = np.empty(2 * n_cols, dtype=np.int64)
    idx[0::2] = first
    idx[1::2] = np.minimum(last, v.size)
    out = np.maximum.reduceat(padded, idx)[0::2]
    out[(holding < 0) & (changes_end <= 0)] = 0.0
    return out


def counter_as_steps(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sampled counter as a step series.

    A sample at ts[i] reports the average over the interval since the previous sample, so the
    value holds from ts[i-1] to ts[i]; the first sample's interval is taken as the median one.
    """
    ts = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if ts.size == 0:
        return ts, v
    dt0 = float(np.median(np.diff(ts))) if ts.size > 1 else 0.0
    t = np.concatenate([[ts[0] - dt0], ts])
    val = np.concatenate([v, [0.0]])
    return t, val
