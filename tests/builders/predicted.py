"""A fork or threads run's trace with a prediction, built with known answers (`profiling/trace/gap.py`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from branchscope.profiling.trace.model import Lane, Trace, build_trace
from branchscope.profiling.trace.prediction import predict
from branchscope.profiling.trace.records import BranchRecord, to_builtins

MS = 1_000_000
LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "PTThreadPool", "interop"),
    Lane(2, "cpu", 1, 12, "PTThreadPool", "interop"),
]
BRANCHES = [BranchRecord(name="a", region="1", region_name="blocks"), BranchRecord(name="b", region="1", region_name="blocks")]


def _step(t0: float) -> list[tuple[int, str, float, float]]:
    """One step (ms): the main thread's work until 1 ms, then a and b on the pool (5 ms each, from
    1.5 and 2 ms), then the main thread's join work."""
    return [
        (0, f"step {int(t0 // 20) + 1}", t0, 12.0),
        (0, "aten::conv2d", t0, 1.0),
        (1, "branch: a", t0 + 1.5, 5.0),
        (1, "aten::mm", t0 + 1.6, 4.8),
        (2, "branch: b", t0 + 2.0, 5.0),
        (0, "aten::cat", t0 + 7.2, 0.8),
    ]


def predicted_trace(mode: str = "fork", interop: int = 2, **info: Any) -> Trace:
    """Two steps of `_step` in `mode` on `interop` pool threads, with a prediction of a and b at 4 ms
    each (on 2 threads: 4 ms); `info`: more of the run info (None removes a key)."""
    events = _step(0.0) + _step(20.0)
    names = sorted({e[1] for e in events})
    pred = predict(BRANCHES, {"a": 4.0, "b": 4.0}, 9.0, source="test")
    meta = {"mode": mode, "interop": interop, "intra": 1, "main_tid": 1, "interop_tids": [11, 12],
            "branches": [to_builtins(b) for b in BRANCHES], "prediction": to_builtins(pred), **info}  # fmt: skip
    meta = {key: v for key, v in meta.items() if v is not None}
    return build_trace(
        path="gap", start_ns=np.array([round(e[2] * MS) for e in events]), dur_ns=np.array([round(e[3] * MS) for e in events]),
        lane=np.array([e[0] for e in events]), name_id=np.array([names.index(e[1]) for e in events]),
        cat_id=np.zeros(len(events)), names=names, cats=["user_annotation"], lanes=LANES, metadata={"branchscope": meta},
    )  # fmt: skip
