"""Human-readable durations, sizes and tick positions (Qt-free, shared by every view)."""

from __future__ import annotations

import math


def format_duration(ns: float) -> str:
    """A duration in the unit that keeps three or four significant digits."""
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.3g} µs" if a < 1e5 else f"{ns / 1e3:.0f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3g} ms" if a < 1e8 else f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e9:.3f} s"


def format_offset(ns: float) -> str:
    """A time from the trace's start, with more digits than a duration (it locates a point)."""
    a = abs(ns)
    if a < 1e6:
        return f"{ns / 1e3:.3f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.6f} s"


def format_bytes(n: float) -> str:
    a = abs(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if a >= scale:
            return f"{n / scale:.3g} {unit}" if a < 100 * scale else f"{n / scale:.0f} {unit}"
    return f"{n:.0f} B"


def nice_step(span: float, max_ticks: int) -> float:
    """The smallest of 1, 2, 5 x 10^k that cuts `span` into at most `max_ticks` pieces."""
    if span <= 0 or max_ticks < 1:
        return 1.0
    raw = span / max_ticks
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        step = m * 10.0**exp
        if step >= raw:
            return step
    return 10.0 ** (exp + 1)  # pragma: no cover


def time_unit(step: float) -> tuple[str, float, int]:
    """The unit, its scale (ns) and the decimals that label ticks `step` ns apart."""
    if step >= 1e9:
        unit, scale = "s", 1e9
    elif step >= 1e6:
        unit, scale = "ms", 1e6
    elif step >= 1e3:
        unit, scale = "µs", 1e3
    else:
        unit, scale = "ns", 1.0
    decimals = max(0, -int(math.floor(math.log10(step / scale) + 1e-9)))
    return unit, scale, decimals


def time_ticks(lo: float, hi: float, max_ticks: int) -> tuple[list[float], str, float, int]:
    """Tick positions (ns) in [lo, hi], and the unit, its scale and decimals for their labels."""
    step = nice_step(hi - lo, max_ticks)
    unit, scale, decimals = time_unit(step)
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9 and len(ticks) <= max_ticks + 2:
        ticks.append(t)
        t = first + len(ticks) * step
    return ticks, unit, scale, decimals


def value_ticks(hi: float, max_ticks: int) -> list[float]:
    """Ticks 0, step, 2 step, ... up to `hi` for a value axis."""
    if hi <= 0:
        return [0.0]
    step = nice_step(hi, max_ticks)
    n = int(math.floor(hi / step + 1e-9))
    return [i * step for i in range(n + 1)]


BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def byte_ticks(hi: float, max_ticks: int) -> tuple[list[float], str, int]:
    """Ticks 0, step, 2 step, ... up to `hi` bytes, `step` a round number of the largest unit (B,
    KiB, MiB, GiB) that `hi` reaches; and that unit and its size, for the labels."""
    unit, size = next(((u, s) for u, s in BYTE_UNITS if hi >= s), BYTE_UNITS[-1])
    ticks = value_ticks(hi / size, max_ticks)
    return [v * size for v in ticks], unit, size
