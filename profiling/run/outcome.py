"""How a run ends: `RunResult` (what `run_profile` returns, never raising for a failed run),
`RunError` (a refused request), and the words for a cancelled run and a process's exit.

No torch here: the GUI process and the CLI import the runner, which imports this.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from branchscope.profiling.run.interpreter import Interpreter
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import EXIT_OK
from branchscope.profiling.trace.records import RunRecord


class Ended:
    """What a run, a sweep and a paired measurement have in common once they end: an exit code, 0
    (`EXIT_OK`) when they succeeded."""

    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


@dataclass
class RunResult(Ended):
    exit_code: int
    out: Path
    #: run.json when the run succeeded.
    run: RunRecord | None = None
    #: One line saying what went wrong (printed after "error: ").
    message: str | None = None
    #: The model's traceback, or the worker's crash report, to show above the message.
    traceback: str | None = None
    samples: int = 0
    notes: list[str] = field(default_factory=list)
    #: The signal that cancelled the run (see CancelFlag), if one did.
    cancelled_by: int | None = None
    #: The worker's Python (--python), as its probe found it; None: this process's own.
    interpreter: Interpreter | None = None
    #: What a worker other than the profiling one gave (`run_profile(layout=…)`: the paired worker's
    #: step times, a `records.PairedTimesRecord`); None for a profiling run.
    payload: msgspec.Struct | None = None
    #: When the rank that failed first failed (wall clock, `time.time()`): a multi-node run's nodes
    #: compare theirs to tell whose failure came first.
    failed_at: float | None = None


class RunError(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def cancelled(out: Path, cancel: CancelFlag) -> RunResult:
    signum = cancel.signum or signal.SIGTERM
    return RunResult(
        128 + signum, out, message=f"cancelled by {signal_name(-signum)}; the worker was stopped", cancelled_by=signum
    )


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by {signal_name(returncode)}"
    return f"exit code {returncode}"

