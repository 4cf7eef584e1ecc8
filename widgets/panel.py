"""The one protocol every view of a trace workspace follows, so a new view is one file plus one line.

A panel shows one trace on the workspace's shared `TimeAxis`. The axis counts time from an origin
common to every trace on screen; each panel is told which instant of *its* trace sits at that
origin (`origin_ns`, on the trace's own clock: by default the trace's first event), so two runs, or
several ranks, line up on one scale, one above the other, a shorter run shorter on screen.

Showing is all or nothing: `prepare(trace)` builds whatever can fail without changing what is on
screen; `set_trace` then only swaps it in. A panel with nothing to show for a trace (no pool threads,
no memory events) says so in one line (`no_data_text`), and the workspace gives it one line of room.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from branchscope.profiling.trace.model import Trace


@runtime_checkable
class TracePanel(Protocol):
    #: The trace shown, or None.
    trace: Trace | None

    def prepare(self, trace: Trace) -> None:
        """Build what showing `trace` needs (may raise); nothing on screen changes."""

    def set_trace(self, trace: Trace | None, origin_ns: int | None = None) -> None:
        """Show `trace` (None: nothing) with its instant `origin_ns` (default: its first event) at the axis' 0."""

    def has_data(self) -> bool:
        """Whether the shown trace holds anything for this panel to draw."""

    @property
    def no_data_text(self) -> str:
        """What the panel says in its one line when `has_data()` is False."""
