"""A trace of many branches in several regions, as a fork run of an Inception-like model writes it:
each branch's `branch: NAME` annotation on a pool lane, with one op inside, and the run info listing
the branches by region."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from branchscope.profiling.trace.model import Lane, Trace, build_trace

LANES = [
    Lane(0, "cpu", 1, 1, "main", "main"),
    Lane(1, "cpu", 1, 11, "PTThreadPool", "interop"),
    Lane(2, "cpu", 1, 12, "PTThreadPool", "interop"),
]


def many_branch_trace(
    regions: dict[str, tuple[str | None, Sequence[str]]], order: Sequence[str] | None = None
) -> Trace:
    """`regions`: region id -> (its name, its branches' names). The branches' annotations come in
    `order` (default: as listed), 10 µs apart, on the two pool lanes in turn; each lasts 8 µs and
    holds an op `op of NAME`."""
    branches = [
        {"name": name, "region": region, "region_name": region_name, "ops": 1 + k % 3}
        for region, (region_name, names) in regions.items()
        for k, name in enumerate(names)
    ]
    listed = [b["name"] for b in branches]
    events: list[tuple[int, str, int, int]] = []
    for k, name in enumerate(order if order is not None else listed):
        lane, t = 1 + k % 2, k * 10_000
        events += [(lane, f"branch: {name}", t, 8_000), (lane, f"op of {name}", t + 100, 1_000)]
    names = list(dict.fromkeys(e[1] for e in events))
    return build_trace(
        path="many", start_ns=np.array([e[2] for e in events]), dur_ns=np.array([e[3] for e in events]),
        lane=np.array([e[0] for e in events]), name_id=np.array([names.index(e[1]) for e in events]),
        cat_id=np.zeros(len(events)), names=names, cats=["user_annotation"], lanes=LANES,
        metadata={"branchscope": {"branches": branches}},
    )  # fmt: skip
