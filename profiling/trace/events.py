"""The JSON-line events between branchscope's processes: one object per line, `{"event": KIND, …}`
(`Event` and its kinds), written by `encode_event` and read by `decode_events`, which skips any
line that is not one. The worker tells the runner "phase", "progress", "error", "finished" (a rank
of a distributed run also "hello", and its watchers "exited" and "ended"); the runner tells the
window "phase", "progress", "error", "done", a sweep "sweep" and "cell", and the mode probe "modes".
No torch, no Qt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Union

import msgspec

from branchscope.profiling.trace.records import MAX_ANSWER_BYTES, RunRecord, json_deeper_than
from branchscope.profiling.trace.sweep_records import CellRecord, SpeedupRecord, SweepRecord


class Event(msgspec.Struct, tag_field="event", kw_only=True, omit_defaults=True):
    """One line between branchscope's processes: `{"event": KIND, …}`. A rank's events (a
    distributed run's worker, through its own file) carry its `rank` and `t` (the monotonic clock)."""

    rank: int | None = None
    t: float | None = None


class PhaseEvent(Event, tag="phase", kw_only=True):
    """The worker entered a phase: "load", "warmup", "timing", "profile" or "export"."""

    phase: str


class ProgressEvent(Event, tag="progress", kw_only=True):
    """Profiled step `step` of `of` finished (in a sweep: of cell `index`)."""

    step: int
    of: int
    index: int | None = None


class ErrorEvent(Event, tag="error", kw_only=True):
    """The run (or sweep) failed: one line, the model's traceback, the worker's exit code."""

    message: str = ""
    traceback: str | None = None
    exit_code: int | None = None
    out: str | None = None


class FinishedEvent(Event, tag="finished", kw_only=True):
    """The worker wrote its run.json (the worker's last word to the runner)."""

    run: str


class DoneEvent(Event, tag="done", kw_only=True):
    """The run (or sweep) succeeded: its folder and its run.json (or sweep.json)."""

    out: str
    run: RunRecord | None = None
    sweep: SweepRecord | None = None
    #: `branchscope speedup --jsonl`: its record (`out`: its --out DIR, or "").
    speedup: SpeedupRecord | None = None


class HelloEvent(Event, tag="hello", kw_only=True):
    """A rank's worker started (its pid, for the CPU sampler)."""

    pid: int


class ExitedEvent(Event, tag="exited", kw_only=True):
    """A rank's worker ended: its exit status, or -N for signal N (said by the process watching it)."""

    pid: int | None = None
    code: int


class EndedEvent(Event, tag="ended", kw_only=True):
    """A rank's first process is gone (said by its reaper). `stopped`: the reaper woke because
    someone signalled the rank's group (the launcher stopping the ranks after another failed), not
    because that process died under it."""

    stopped: bool = False


class SweepEvent(Event, tag="sweep", kw_only=True):
    """A sweep began: sweep.json as first written (every cell "not run")."""

    out: str
    sweep: SweepRecord


class CellEvent(Event, tag="cell", kw_only=True):
    """Sweep cell `index` (of `of`) ended, in `folder`; `best` is the sweep's best cell now."""

    index: int
    of: int
    out: str
    folder: str
    cell: CellRecord
    best: int | None = None
    #: The pass this run of the cell belongs to (from 1) and the passes asked for.
    sweep_pass: int | None = None
    passes: int | None = None
    #: The sweep's ties now (`SweepRecord.ties`).
    ties: list[int] | None = None


class ModesEvent(Event, tag="modes", kw_only=True):
    """The modes that cannot run under a Python, each with its one line of why (`problems`), or why
    that Python could not be asked (`error`): `profiling/run/mode_probe.py`'s answer to the window."""

    problems: dict[str, str] = {}
    error: str | None = None


AnyEvent = Union[  # noqa: UP007 - msgspec needs the union as an object
    PhaseEvent,
    ProgressEvent,
    ErrorEvent,
    FinishedEvent,
    DoneEvent,
    HelloEvent,
    ExitedEvent,
    EndedEvent,
    SweepEvent,
    CellEvent,
    ModesEvent,
]
_EVENT_DECODER = msgspec.json.Decoder(AnyEvent)
_ENCODER = msgspec.json.Encoder()


def encode_event(event: Event) -> bytes:
    """One event as its line (without the newline)."""
    return _ENCODER.encode(event)


def decode_events(lines: Iterable[bytes]) -> list[Event]:
    """The events among JSON lines; a line that is not one (anything else a process printed, a kind
    this version does not know, a field of the wrong type, a line past MAX_ANSWER_BYTES or nested
    past MAX_ANSWER_DEPTH) is skipped."""
    events: list[Event] = []
    for line in lines:
        if not line.strip() or len(line) > MAX_ANSWER_BYTES or json_deeper_than(line):
            continue
        try:
            events.append(_EVENT_DECODER.decode(line))
        except (msgspec.DecodeError, RecursionError):
            continue
    return events
