"""threads mode and the GIL in words: one line from run.json's (or the trace's) `python`, `gil` and
`branch_threads`, for `profile`'s summary, `inspect` (and its `--json`) and the window's Run page.

A threads-mode run with the GIL on measured each pool thread around the branches it ran, with the
thread's own clocks (`records.BranchThreadRecord`, see `profiling/run/branch_pool.py`): ms inside
branches (`wall_ms`), of which on a core (`cpu_ms`: the thread's CPU clock, CLOCK_THREAD_CPUTIME_ID;
schedstat's CPU figure moves only at a scheduler tick or a switch, and sub-millisecond branches had
read as all GIL), runnable waiting for a core (`core_wait_ms`: schedstat's run delay) and the rest,
asleep, waiting for the GIL (`gil_wait_ms`, never below 0). A wait for the GIL before a branch starts
is in no branch. Summed over the pool's threads, as shares of the wall time:

    branch threads: 58% computing, 6% waiting for a core, 36% waiting for the GIL (2 threads, 40 branch calls, Python 3.11.7)

A free-threaded CPython running without the GIL has no GIL to wait for:

    free-threaded Python 3.13.1: no GIL

Modes whose traits measure no GIL (`mode_traits.ModeTraits.gil_measured`), and traces that say
nothing of it, get no line. Qt-free and torch-free; the chart of
the GIL wait over time is `analyses.gil_wait`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from branchscope.profiling.trace.mode_traits import ModeTraits, run_traits


class _ThreadFigures(Protocol):
    """`records.BranchThreadRecord`, of run.json and the trace alike."""

    tid: int
    calls: int
    wall_ms: float
    cpu_ms: float
    core_wait_ms: float
    gil_wait_ms: float


@dataclass(frozen=True, slots=True)
class BranchThreads:
    """threads mode's pool threads summed: how many, branch calls, and the shares (0 to 1) of their
    time inside branches spent computing, waiting for a core and waiting for the GIL."""

    threads: int
    calls: int
    wall_ms: float
    computing: float
    core_wait: float
    gil_wait: float

    @classmethod
    def of(cls, threads: Sequence[_ThreadFigures]) -> BranchThreads:
        wall = sum(t.wall_ms for t in threads)

        def share(ms: float) -> float:
            return ms / wall if wall > 0 else 0.0

        return cls(
            threads=len(threads),
            calls=sum(t.calls for t in threads),
            wall_ms=wall,
            computing=share(sum(t.cpu_ms for t in threads)),
            core_wait=share(sum(t.core_wait_ms for t in threads)),
            gil_wait=share(sum(t.gil_wait_ms for t in threads)),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "calls": self.calls,
            "wall_ms": self.wall_ms,
            "computing": self.computing,
            "core_wait": self.core_wait,
            "gil_wait": self.gil_wait,
        }


def python_version(python: str | None) -> str | None:
    """"3.13.1" of "3.13.1 free-threading build"; None when not said."""
    return python.split()[0] if python and python.split() else None


def gil_line(traits: ModeTraits, python: str | None, gil: bool | None, threads: Sequence[_ThreadFigures] | None) -> str | None:
    """The line (see the module docstring), or None: a mode whose traits measure no GIL, or nothing
    to say."""
    if not traits.gil_measured:
        return None
    version = python_version(python)
    if gil is False:
        return f"free-threaded Python {version}: no GIL" if version else "free-threaded Python: no GIL"
    if not threads:
        return None
    s = BranchThreads.of(threads)
    where = f"{s.threads} thread{'s' if s.threads != 1 else ''}, {s.calls} branch call{'s' if s.calls != 1 else ''}"
    if version:
        where += f", Python {version}"
    if s.wall_ms <= 0:
        return f"branch threads: no time inside branches ({where})"
    return (
        f"branch threads: {s.computing:.0%} computing, {s.core_wait:.0%} waiting for a core, "
        f"{s.gil_wait:.0%} waiting for the GIL ({where})"
    )


def gil_line_of(run: Any) -> str | None:
    """`gil_line` of a `records.RunRecord` or a `run_info.RunInfo` (both have mode, its traits,
    python, gil and branch_threads); None for None."""
    if run is None:
        return None
    return gil_line(run_traits(run), run.python, run.gil, run.branch_threads)


def gil_json(run: Any) -> dict[str, Any] | None:
    """What `inspect --json` says of it: the Python version, the GIL, the pool threads summed and the
    line; None when `gil_line_of` has nothing to say."""
    line = gil_line_of(run)
    if line is None:
        return None
    threads = run.branch_threads
    return {
        "python": run.python,
        "gil": run.gil,
        "branch_threads": BranchThreads.of(threads).as_json() if threads and run.gil is not False else None,
        "line": line,
    }
