"""An event's fields as numbers: timestamps and durations in µs as exact int64 ns, pids and tids.

Timestamps come as ints, as floats with ns decimals (msgspec hands them over as their text, see
`decode`, so that the decimals stay exact) or as numeric strings; all are read into ns exactly,
most of them by numpy from their digits (`_decimal_ns`), and kept within +-2**61 ns. A pid or tid
is an int, or a string: digits ("123" is the thread 123) or a pseudo process ("Spans", "Traces").
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

#: Keep timestamps far from int64 overflow even after adding durations (about +-73 years in ns).
_MAX_ABS_NS = 1 << 61


def _text_to_ns(v: str) -> int:
    """'1712195495519695.8' (µs) -> exact ns; falls back to float for exponents and the like."""
    s = v.strip()
    neg = s.startswith("-")
    a, dot, b = s.lstrip("+-").partition(".")
    if (not a or a.isdigit()) and (not b or b.isdigit()) and (a or b):
        frac = b[:3].ljust(3, "0")
        ns = int(a or "0") * 1000 + int(frac)
        if len(b) > 3 and b[3] >= "5":
            ns += 1
        return -ns if neg else ns
    f = float(s)  # ValueError for garbage; inf/nan rejected below
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(f"timestamp {v!r} is not finite")
    return round(f * 1000)


def _to_ns(v: Any) -> int:
    t = type(v)
    if t is int:
        return v * 1000
    if t is str:
        return _text_to_ns(v)
    if t is float:
        return _text_to_ns(repr(v))
    raise ValueError(f"timestamp must be a number or a numeric string, got {type(v).__name__}")


def _ns_column(values: list[Any], what: str) -> np.ndarray:
    """Timestamps or durations in µs (ints, decimal texts, numeric strings) as exact int64 ns."""
    try:
        # Integer µs (most traces). numpy rejects decimal text, which takes the next path.
        col = np.array(values, dtype=np.int64)
        if col.ndim != 1:  # nested lists of equal length make a matrix: let the slow path name it
            raise TypeError
    except (ValueError, TypeError, OverflowError):
        out = _decimal_ns(values)
        if out is None:  # anything the vectorised path does not take: one value at a time
            exact = [_to_ns(v) for v in values]
            if exact and (max(exact) >= _MAX_ABS_NS or min(exact) <= -_MAX_ABS_NS):
                raise ValueError(f"{what} out of range") from None
            return np.array(exact, dtype=np.int64)
        if out.size and (int(out.max()) >= _MAX_ABS_NS or int(out.min()) <= -_MAX_ABS_NS):
            raise ValueError(f"{what} out of range") from None
        return out
    if col.size and (int(col.max()) >= _MAX_ABS_NS // 1000 or int(col.min()) <= -_MAX_ABS_NS // 1000):
        raise ValueError(f"{what} out of range")
    return col * 1000


#: Width of the byte rows `_decimal_ns` parses; a value must leave the last 3 bytes free.
_DEC_WIDTH = 24
_ASCII_ZEROS = np.uint64(0x3030303030303030)
_LITTLE_ENDIAN = sys.byteorder == "little"


def _digits_value(block: np.ndarray) -> np.ndarray:
    """Rows of 24 ASCII digits (at most 19 significant) as uint64, 8 digits per 64-bit word at a
    time, SWAR-style: pairs, then quads, then octets (words are read little-endian)."""
    x = block.view(np.uint64) - _ASCII_ZEROS  # a word's first digit is its low byte
    x = (x * np.uint64(10) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    x = (x * np.uint64(100) + (x >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x * np.uint64(10000) + (x >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    # The first word holds at most 3 significant digits, so the sum fits in uint64.
    return x[:, 0] * np.uint64(10**16) + x[:, 1] * np.uint64(10**8) + x[:, 2]


def _decimal_ns(values: list[Any]) -> np.ndarray | None:
    """µs as decimal text (or ints) -> ns, exactly as `_text_to_ns` would, with no Python call per
    value; None when any value is not plain `[-]digits[.digits]` with at most 16 integer digits
    (the caller then converts one value at a time, which also names what is wrong).

    Each value becomes a byte row; rows are grouped by where their dot is, and each group's digits
    are copied right-aligned, as integer digits then exactly 3 decimals (zero-padded), into rows
    of ASCII zeros, read by `_digits_value`; a 4th decimal of 5 or more rounds up.
    """
    n = len(values)
    w = _DEC_WIDTH
    if not _LITTLE_ENDIAN:  # pragma: no cover - the words below are read little-endian
        return None
    try:
        text = np.array(values, dtype=f"S{w}")
    except (ValueError, TypeError, OverflowError, UnicodeError):
        return None
    if text.ndim != 1 or text.size != n:
        return None
    m = text.view(np.uint8).reshape(n, w)
    if n == 0 or m[:, w - 3].any():  # too long (or cut short by the width)
        return None
    rows = np.arange(n)
    length = (m == 0).argmax(axis=1)
    if int(np.count_nonzero(m)) != int(length.sum()):  # a NUL inside a value
        return None
    is_dot = m == 46
    dot = is_dot.argmax(axis=1)
    has_dot = is_dot[rows, dot]
    if int(np.count_nonzero(is_dot)) != int(np.count_nonzero(has_dot)):  # two dots in a value
        return None
    dot = np.where(has_dot, dot, length)
    neg = m[:, 0] == 45
    plain = ((m - np.uint8(48)) < 10) | is_dot | (m == 0)
    plain[:, 0] |= neg
    int_digits = dot - neg
    decimals = np.where(has_dot, length - dot - 1, 0)
    if not plain.all() or int_digits.max() > 16 or np.any(int_digits + decimals < 1):
        return None
    # Per group of rows with the dot at one place: "integer digits + 3 decimals" right-aligned in
    # rows of '0' (whole columns when every row is alike, the common case), read as one integer.
    kept = np.minimum(decimals, 3)
    group = (dot * 2 + neg) * 4 + kept
    groups = np.flatnonzero(np.bincount(group)).tolist()
    ns = np.empty(n, dtype=np.uint64)
    for g in groups:
        d, sign, k = g // 8, (g // 4) % 2, g % 4
        sel = np.flatnonzero(group == g) if len(groups) > 1 else None
        src = m if sel is None else m[sel]
        block = np.full((len(src), w), 48, dtype=np.uint8)
        block[:, w - 3 - (d - sign) : w - 3] = src[:, sign:d]
        block[:, w - 3 : w - 3 + k] = src[:, d + 1 : d + 1 + k]
        if sel is None:
            ns = _digits_value(block)
        else:
            ns[sel] = _digits_value(block)
    too_big = ns >= np.uint64(_MAX_ABS_NS)
    ns[too_big] = np.uint64(_MAX_ABS_NS)  # still out of range once signed; the caller says so
    fourth = np.minimum(dot + 4, w - 1)
    up = (decimals >= 4) & (m[rows, fourth] >= 53)
    out = ns.astype(np.int64) + up
    return np.where(neg, -out, out)


def _real_id(v: int | str) -> int | None:
    """A pid/tid as int, or None for pseudo processes ("Spans", "Traces", "")."""
    if type(v) is int:
        return v
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    return None


def _real_ids(values: list[Any]) -> np.ndarray:
    """pids or tids as int64, -1 for pseudo ones ("Spans", "")."""
    try:
        return np.array(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array([-1 if (r := _real_id(v)) is None else r for v in values], dtype=np.int64)
