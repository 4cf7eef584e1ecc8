"""`python -I -m branchscope.profiling.run.mode_probe [PYTHON]`: which modes cannot run under the
worker's Python (PYTHON, or this one when it is absent or empty), as one `ModesEvent` line on stdout.

The window asks this (`app/mode_check.py`) in a child of its own, never in its own process: the
probe is contained like a worker (`processes.Containment`), which makes its process a subreaper
that kills and reaps every child it did not start itself, and in the window those are the runner,
a sweep or another probe. This process dies with the window (its death signal, SIGTERM, leaves
through `SystemExit`, so the Containment stops the probe it started on the way out). No torch here:
the probe imports torch in the Python it asks.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from branchscope.profiling.linux import set_death_signal
from branchscope.profiling.run.interpreter import InterpreterError, modes_unavailable
from branchscope.profiling.run.protocol import PARENT_PID_ENV
from branchscope.profiling.trace.events import ModesEvent, encode_event

MODE_PROBE_MODULE = "branchscope.profiling.run.mode_probe"


def _leave(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def answer(python: Path | None) -> ModesEvent:
    """The modes `python` cannot run, or why it could not be asked (`interpreter.modes_unavailable`)."""
    try:
        return ModesEvent(problems=modes_unavailable(python))
    except InterpreterError as exc:
        return ModesEvent(error=str(exc))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    python = Path(args[0]) if args and args[0] else None
    signal.signal(signal.SIGTERM, _leave)
    expected = os.environ.get(PARENT_PID_ENV, "")
    if expected.isdigit() and set_death_signal(signal.SIGTERM) and os.getppid() != int(expected):
        return 1  # the window died before the death signal was set
    sys.stdout.buffer.write(encode_event(answer(python)) + b"\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
