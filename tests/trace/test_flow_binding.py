"""Flow events bound to events all at once (`flows.bind_points`, `flows.bind_flows`) bind exactly as
Chrome's rule applied one endpoint at a time (`reference_bind`, the reader's earlier loop) does: on
synthetic traces made to hit every case of the rule and on the public traces' own flow events."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace import flows as flows_module
from branchscope.profiling.trace.model import Flows, Trace


def _bind_one(trace: Trace, lane: int, ts: int, enclosing: bool) -> int:
    hit = trace.event_at(lane, ts)
    if hit >= 0:
        return hit
    sl = trace.lane_slice(lane)
    k = int(np.searchsorted(trace.start_ns[sl], ts, side="left"))
    if k < sl.stop - sl.start and (trace.start_ns[sl.start + k] == ts or not enclosing):
        return sl.start + k
    return -1


def reference_bind(trace: Trace, points: tuple[np.ndarray, ...]) -> Flows:
    """One endpoint at a time: per (category, id) its first start and its last end."""
    phase, flow_id, cat, lane, ts, enclosing, cat_names = points
    src: dict[tuple[int, int], int] = {}
    dst: dict[tuple[int, int], int] = {}
    for i in range(phase.size):
        key = (int(cat[i]), int(flow_id[i]))
        ev = _bind_one(trace, int(lane[i]), int(ts[i]), bool(enclosing[i]))
        if phase[i] == 0:
            src.setdefault(key, ev)
        elif phase[i] == 2:
            dst[key] = ev
    keys = [k for k in src if k in dst]
    return Flows(
        cats=[str(c) for c in cat_names],
        cat_id=np.array([k[0] for k in keys], dtype=np.int32),
        flow_id=np.array([k[1] for k in keys], dtype=np.int64),
        src=np.array([src[k] for k in keys], dtype=np.int64),
        dst=np.array([dst[k] for k in keys], dtype=np.int64),
    )


def _given_flows(trace: Trace, monkeypatch) -> tuple[Flows, tuple[np.ndarray, ...] | None]:
    """The arrows the trace's flow events give, and the endpoint columns they were bound from."""
    seen: list[Any] = []
    real = flows_module.bind_flows

    def spy(t: Trace, points: Any) -> Flows:
        seen.append(points)
        return real(t, points)

    monkeypatch.setattr(flows_module, "bind_flows", spy)
    f = trace.flows
    given = ~f.from_correlation
    return Flows(f.cats, f.cat_id[given], f.flow_id[given], f.src[given], f.dst[given]), (seen[0] if seen else None)


def _same(a: Flows, b: Flows) -> None:
    assert a.cats == b.cats
    for column in ("cat_id", "flow_id", "src", "dst"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist(), column


def _tricky_trace(seed: int) -> dict[str, Any]:
    """Nested slices, zero-length slices, gaps; starts and steps and ends
    at, inside, between and past slices, "f" with and without "bp": "e", ids started twice or
    ended twice, ends without a start, in two categories."""
    rng = random.Random(seed)
    events, flows = [], []
    for tid in (1, 2, 3):
        t = 0
        for _ in range(60):
            t += rng.choice([0, 1, 5, 20])
            dur = rng.choice([0, 0, 3, 10, 40])
            events.append({"ph": "X", "name": f"e{len(events)}", "cat": "c", "pid": 1, "tid": tid, "ts": t, "dur": dur})
            if rng.random() < 0.4:  # a child inside it
                events.append({"ph": "X", "name": "child", "cat": "c", "pid": 1, "tid": tid, "ts": t + dur // 3,
                               "dur": dur // 3})  # fmt: skip
    for _ in range(400):
        fid, cat = rng.randrange(150), rng.choice(["ac2g", "fwdbwd"])
        ph = rng.choice(["s", "s", "t", "f", "f"])
        point = {"ph": ph, "id": fid, "cat": cat, "name": cat, "pid": 1, "tid": rng.choice([1, 2, 3]),
                 "ts": rng.randrange(-5, 2000)}  # fmt: skip
        if ph == "f" and rng.random() < 0.6:
            point["bp"] = "e"
        flows.append(point)
    return {"traceEvents": events + flows}


@pytest.mark.parametrize("seed", range(6))
def test_binding_all_at_once_is_binding_one_at_a_time(tmp_path: Path, monkeypatch, seed: int):
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps(_tricky_trace(seed)))
    trace = load_trace(path)
    given, points = _given_flows(trace, monkeypatch)
    assert points is not None and len(given) > 20
    assert (given.src < 0).any() and (given.src >= 0).any()  # the cases are there: bound and not
    _same(given, reference_bind(trace, points))


@pytest.mark.parametrize(
    "name",
    [
        "hta_amd_mi250_relative_ts.json.gz",
        "hta_event_sync_multi_stream.json.gz",
        "hta_ns_resolution_fwdbwd.pt.trace.json.gz",
        "hta_gpu_6streams_rank0.json.gz",  # a cudaGraphLaunch: one start, an end per kernel
    ],
)
def test_the_public_traces_flow_events_bind_as_one_at_a_time(shared_traces: Path, monkeypatch, name: str):
    trace = load_trace(shared_traces / name)
    given, points = _given_flows(trace, monkeypatch)
    assert points is not None and len(given) > 0
    _same(given, reference_bind(trace, points))
