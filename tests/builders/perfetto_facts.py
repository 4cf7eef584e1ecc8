"""What a Perfetto trace of `perfetto_traces` must read as (`Facts`, in `Trace`'s terms), how to
check a loaded trace against them (`assert_facts`), and the same facts written as kineto's Chrome
JSON (`chrome_json`): the twin every command must say the same of."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from branchscope.profiling.trace.model import Trace


@dataclass(frozen=True)
class ExpectedLane:
    """A lane as a reader must show it; `pid` None: not asserted (a GPU stream's process)."""

    kind: str
    role: str
    name: str
    tid: int
    pid: int | None = None
    device: int = -1


@dataclass
class Facts:
    """What a reader must find in a trace, in the reader's terms (`Trace`'s).

    `lanes`: in lane order (CPU by pid, role, tid; GPU by device, stream). `events`: per lane name,
    (name, start_ns, dur_ns, cat) sorted by start, longest first. `arrows`: ((source event's name,
    start_ns), (destination's name, start_ns)). `args`: an event's name -> its `event_args`. `memory`: device ->
    columns of its `MemorySeries`. `counters`: name -> (pid, ts_ns, values).
    """

    lanes: list[ExpectedLane] = field(default_factory=list)
    events: dict[str, list[tuple[str, int, int, str]]] = field(default_factory=dict)
    arrows: set[tuple[tuple[str, int], tuple[str, int]]] = field(default_factory=set)
    args: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    counters: dict[str, tuple[int, list[int], list[float]]] = field(default_factory=dict)

    @property
    def event_count(self) -> int:
        return sum(len(v) for v in self.events.values())

    def sorted_events(self) -> dict[str, list[tuple[str, int, int, str]]]:
        """`events` in the model's order within a lane: by start, the longest first."""
        return {lane: sorted(evs, key=lambda e: (e[1], -e[2])) for lane, evs in self.events.items()}


def lanes_of(trace: Trace, expected: list[ExpectedLane]) -> list[ExpectedLane]:
    """The trace's lanes in the terms of `expected` (a pid left None there is not compared)."""
    return [
        ExpectedLane(ln.kind, ln.role, ln.name, ln.tid, None if k < len(expected) and expected[k].pid is None else ln.pid,
                     ln.device)
        for k, ln in enumerate(trace.lanes)
    ]  # fmt: skip


def lane_events(trace: Trace) -> list[list[tuple[str, int, int, str]]]:
    """Each lane's events as (name, start_ns, dur_ns, cat), in the trace's order, lane by lane."""
    return [
        [(trace.event_name(i), int(trace.start_ns[i]), int(trace.dur_ns[i]), trace.cats[int(trace.cat_id[i])])
         for i in range(trace.lane_slice(ln.index).start, trace.lane_slice(ln.index).stop)]
        for ln in trace.lanes
    ]  # fmt: skip


def events_of(trace: Trace) -> dict[str, list[tuple[str, int, int, str]]]:
    """`lane_events` by each lane's name (the names of one trace's lanes are distinct here)."""
    return {ln.name: evs for ln, evs in zip(trace.lanes, lane_events(trace))}


def assert_facts(trace: Trace, facts: Facts) -> None:
    """`trace` has exactly the lanes and events of `facts`."""
    assert lanes_of(trace, facts.lanes) == facts.lanes
    assert events_of(trace) == facts.sorted_events()
    assert len(trace) == facts.event_count


def chrome_json(facts: Facts) -> bytes:
    """`facts` written as kineto's Chrome JSON (complete events with ns-exact µs text, thread names,
    `[memory]` instants, launch arrows as "s"/"f" flow events, counters as "C" events): the twin a `.pftrace` must read
    like in every command. A GPU lane is written pid = device, tid = stream."""
    where = {ln.name: (ln.device if ln.kind == "gpu" else ln.pid, ln.tid) for ln in facts.lanes}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": ln.pid, "tid": ln.tid, "args": {"name": ln.name}}
        for ln in facts.lanes if ln.kind == "cpu"
    ]  # fmt: skip
    at: dict[tuple[str, int], tuple[int, int]] = {}
    for lane, evs in facts.events.items():
        pid, tid = where[lane]
        for name, start, dur, cat in evs:
            events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": _us(start), "dur": _us(dur)})
            at[(name, start)] = (pid, tid)
    for k, (src, dst) in enumerate(sorted(facts.arrows)):
        for (name, start), ph in ((src, "s"), (dst, "f")):
            pid, tid = at[(name, start)]
            events.append({"ph": ph, "id": k + 1, "name": "ac2g", "cat": "ac2g", "pid": pid, "tid": tid, "ts": _us(start), "bp": "e"})
    for device, series in facts.memory.items():
        dtype, did = (0, -1) if device == "cpu" else (1, int(device.split(":")[1]))
        for ts, delta, total, addr, reserved, tid, pid in zip(*series.values()):
            args = {"Device Type": dtype, "Device Id": did, "Addr": addr, "Bytes": delta, "Total Allocated": total,
                    "Total Reserved": reserved}  # fmt: skip
            events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": pid, "tid": tid, "ts": _us(ts), "args": args})
    for name, (pid, times, values) in facts.counters.items():
        events += [{"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": _us(ts), "args": {name: value}}
                   for ts, value in zip(times, values)]  # fmt: skip
    text = json.dumps({"traceEvents": events})
    return re.sub(r'"(-?\d+\.\d{3})"', r"\1", text).encode()


def _us(ns: int) -> str:
    """`ns` as µs text with three decimals (quoted here, unquoted by `chrome_json`): exact to the ns."""
    return f"{ns // 1000}.{ns % 1000:03d}"
