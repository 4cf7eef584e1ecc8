"""A Trace from a list of events written as tuples, for tests that know their answers exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from branchscope.profiling.trace.model import Lane, Trace, build_trace


def trace_of(events: Sequence[tuple], lanes: Sequence[Lane], *, cat: str = "cpu_op", path: str = "synthetic",
             **parts: Any) -> Trace:  # fmt: skip
    """`events`: (lane, name, start_ns, dur_ns) or (lane, name, start_ns, dur_ns, cat) tuples in any
    order, `lane` an index into `lanes`; an event without a category has `cat`. Names and categories
    are numbered in sorted order. `parts`: build_trace's other arguments (memory, metadata, counters)."""
    names = sorted({e[1] for e in events})
    cats = sorted({e[4] if len(e) > 4 else cat for e in events} | {cat})
    return build_trace(
        path=path,
        start_ns=np.array([e[2] for e in events], dtype=np.int64),
        dur_ns=np.array([e[3] for e in events], dtype=np.int64),
        lane=np.array([e[0] for e in events], dtype=np.int32),
        name_id=np.array([names.index(e[1]) for e in events], dtype=np.int32),
        cat_id=np.array([cats.index(e[4] if len(e) > 4 else cat) for e in events], dtype=np.int32),
        names=names,
        cats=cats,
        lanes=lanes,
        **parts,
    )
