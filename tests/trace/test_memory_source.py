"""Why a trace has no memory events, and what recorded them, from what the trace says of itself
(`profiling/trace/memory_source.py`): never a hint to do what was already done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from branchscope.profiling.trace.memory import analyze_memory
from branchscope.profiling.trace.memory_source import (
    NONE_RECORDED,
    NOT_SAID,
    WITHOUT_PROFILE_MEMORY,
    recorded_by,
    why_none,
)
from branchscope.profiling.trace.reader import load_trace
from tests.builders.memory import mem, op, write_trace

PER_THREAD = "allocator events of the main thread and each pool thread, recorded per thread"
NOT_OURS = "no memory events: torch.profiler records none when it profiles every thread, and this mode's threads are not ours"


def _trace(tmp_path: Path, memory: bool, **top: Any) -> Any:
    events = [op("a", 1, 0, 10)] + ([mem(2, 64, 64, addr=None, device_type=0), mem(5, -64, 0, addr=None, device_type=0)] if memory else [])
    return load_trace(write_trace(tmp_path / "t.json", events, **top))


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"profile_memory": 0}, WITHOUT_PROFILE_MEMORY),
        ({"profile_memory": 1}, NONE_RECORDED),
        ({}, NOT_SAID),
        ({"profile_memory": 1, "branchscope": {"mode": "threads", "memory_source": NOT_OURS}}, NOT_OURS),
    ],
)
def test_why_none_says_what_the_trace_says(tmp_path: Path, top: dict[str, Any], expected: str) -> None:
    trace = _trace(tmp_path, memory=False, **top)
    assert why_none(trace) == expected
    assert analyze_memory(trace).to_json()["why_none"] == expected


def test_memory_recorded_per_thread_is_named(tmp_path: Path) -> None:
    trace = _trace(tmp_path, memory=True, profile_memory=1, branchscope={"mode": "threads", "memory_source": PER_THREAD})
    assert recorded_by(trace) == PER_THREAD
    doc = analyze_memory(trace).to_json()
    assert doc["source"] == PER_THREAD and doc["why_none"] is None


def test_the_profilers_own_memory_needs_no_words(tmp_path: Path) -> None:
    trace = _trace(tmp_path, memory=True, profile_memory=1)
    assert recorded_by(trace) is None
