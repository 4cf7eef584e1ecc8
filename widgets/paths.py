"""Build a QPainterPath from numpy arrays in one copy (the trick pyqtgraph's arrayToQPath uses).

Appending points one by one from Python costs microseconds each; QDataStream reads a whole
path from its serialised form (count, then (type, x, y) per element, big-endian), which numpy
writes in one vectorised assignment.
"""

from __future__ import annotations

import struct

import numpy as np
from PySide6.QtCore import QByteArray, QDataStream
from PySide6.QtGui import QPainterPath

_ELEMENT = np.dtype([("c", ">i4"), ("x", ">f8"), ("y", ">f8")])


def polyline_path(x: np.ndarray, y: np.ndarray, close: bool = False) -> QPainterPath:
    """A path through all points in order (closed back to the first point if `close`)."""
    n = int(len(x))
    path = QPainterPath()
    if n == 0:
        return path
    buf = bytearray(4 + n * 20 + 8)
    struct.pack_into(">i", buf, 0, n)
    struct.pack_into(">ii", buf, 4 + n * 20, 0, 0)  # cStart, fill rule (odd-even)
    arr = np.frombuffer(buf, dtype=_ELEMENT, count=n, offset=4)
    arr["x"] = x
    arr["y"] = y
    arr["c"][0] = 0  # MoveTo
    arr["c"][1:] = 1  # LineTo
    stream = QDataStream(QByteArray(bytes(buf)))
    stream >> path
    if close:
        path.closeSubpath()
    return path


def step_area_path(x_edges: np.ndarray, top: np.ndarray, base: float | np.ndarray) -> QPainterPath:
    """Closed outline of per-column values drawn as steps: column k spans x_edges[k]..x_edges[k+1]
    at height top[k], down to `base` (a number, or per-column bottoms for stacked areas)."""
    n = int(top.size)
    if n == 0:
        return QPainterPath()
    xs = np.repeat(x_edges, 2)[1:-1]  # x0 x1 x1 x2 x2 ...
    ys = np.repeat(top, 2)
    if np.ndim(base) == 0:
        bx = np.array([x_edges[-1], x_edges[0]], dtype=np.float64)
        by = np.array([base, base], dtype=np.float64)
    else:
        bx = xs[::-1]
        by = np.repeat(np.asarray(base, dtype=np.float64), 2)[::-1]
    return polyline_path(np.concatenate([xs, bx]), np.concatenate([ys, by]), close=True)


def step_line_path(x_edges: np.ndarray, top: np.ndarray) -> QPainterPath:
    n = int(top.size)
    if n == 0:
        return QPainterPath()
    return polyline_path(np.repeat(x_edges, 2)[1:-1], np.repeat(top, 2))
